"""Incremental detokenizer states shared by several postprocessing instances, in stream order.

Why: Triton's ensemble sends each engine response of a stream to whichever postprocessing instance is
free (core ``src/ensemble_scheduler/ensemble_scheduler.cc`` r24.10: every tensorrt_llm response runs
``ScheduleSteps`` -> ``InferAsync`` for postprocessing at once, in the engine's response order), so with
more than one instance (process) the detokenizer state of a stream must live where every instance can
read it, and token n must be decoded after token n-1 and answered after it. The ensemble forwards a
postprocessing response to the client inside that response's callback, under the ensemble request's
mutex (``PrepareSteps`` -> ``CheckAndSetEnsembleOutput`` -> ``InferenceResponse::Send``), so the client
sees the order in which the postprocessing responses were sent.

How: repo-builder's Python engines send ``token_offset`` with every streamed response (the generated
tokens of the sequence that earlier responses carried; NVIDIA's C++ backend does not, so render keeps
postprocessing at one instance there). The instance that gets a response at offset p

1. finds the stream's slot (:meth:`StreamStates.acquire`; offset 0 claims one, under ``flock``) and waits
   until the slot's ``next`` offset is p, i.e. until the instance with the response before it has sent
   that response (polling, :data:`WAIT_S` at most: a stream whose earlier response never arrives, e.g.
   an engine error the ensemble stopped at, fails alone with a message, it does not hang the instance);
2. loads the window (:meth:`load`) into an :class:`~.detokenizer.IncrementalDetokenizer`, adds the new
   ids, stores the window back (:meth:`store`);
3. sends its response through the request's response sender, which returns once the server took it, and
   only then publishes ``next = p + len(ids)`` (:meth:`publish`), which lets the next one go.

No deadlock: requests leave postprocessing's queue in arrival order and an instance serves its batch in
order, so a request only ever waits for one that an instance took earlier and serves first.

Storage: a file in ``/dev/shm`` named after the ledger's pair key (``stream_ledger.ledger_path`` with a
``-state`` suffix), :data:`SLOTS` slots of :data:`SLOT_WORDS` 8-byte words: the stream key's 64-bit hash
(never 0; slots are never emptied, open addressing over :data:`PROBES`), ``next``, the
characters emitted, the window's length, the stream's token budget and the ledger slot that counts it
(0 when none), the last publish time (-1 once the stream ended); then the window as int32 ids (at most
:data:`WINDOW` ids: the detokenizer's forced cut, detokenizer.py edge 3, is set to it). A slot's words
have one writer at a time: the instance whose turn it is. A slot not published for :data:`STALE_S` counts
as free when a new stream needs one (streams that end without postprocessing seeing their end: a stop
word, an error).
"""

from __future__ import annotations

import fcntl
import hashlib
import mmap
import os
import time
from pathlib import Path

import numpy as np

from .detokenizer import IncrementalDetokenizer
from .numeric_ranges import INT64_MAX, UINT64_MAX

#: Slots of the table (a power of two): 16,384 x 512 bytes = 8 MiB.
SLOTS = 1 << 14
#: Slots looked at for one stream, starting at its hash.
PROBES = 32
#: 8-byte words per slot: 8 header words, then the window.
SLOT_WORDS = 64
HEADER_WORDS = 8
#: Token ids a slot holds (int32): the shared detokenizers' ``max_window_tokens``.
WINDOW = (SLOT_WORDS - HEADER_WORDS) * 2
#: Longest wait for the response before this one (seconds).
WAIT_S = 30.0
#: A slot not published for this long may be taken by a new stream (seconds).
STALE_S = 300.0
# header word indexes
_KEY, _NEXT, _EMITTED, _LEN, _BUDGET, _LEDGER_SLOT, _LEDGER_KEY, _STAMP = range(8)
_U64 = UINT64_MAX


class StreamOrderError(RuntimeError):
    """A response waited :data:`WAIT_S` for the one before it, or found no slot."""


def stream_hash(key: tuple) -> int:
    """The 64-bit key of a stream key tuple (BLAKE2b of its repr, equal in every process; never 0)."""
    h = int.from_bytes(hashlib.blake2b(repr(key).encode("utf-8", "surrogatepass"), digest_size=8).digest(), "little")
    return (h & INT64_MAX) or 1


class StreamStates:
    """The shared table (see the module docstring).

    Args:
        path: the file (created, zero-filled, when missing).
        slots: table size, a power of two >= :data:`PROBES` (every user of one file must pass the same).
    Raises:
        OSError: the file cannot be created or mapped.
    """

    def __init__(self, path: str | os.PathLike[str], slots: int = SLOTS) -> None:
        if slots < PROBES or slots & (slots - 1):
            raise ValueError(f"slots must be a power of two >= {PROBES}, got {slots}")
        self.path = Path(path)
        self._mask = slots - 1
        size = slots * SLOT_WORDS * 8
        self._fd = fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            if os.fstat(fd).st_size < size:
                os.ftruncate(fd, size)
            self._map = mmap.mmap(fd, size)
        except BaseException:
            os.close(fd)
            raise
        self._words = np.frombuffer(self._map, dtype=np.int64).reshape(slots, SLOT_WORDS)
        self._ids = np.frombuffer(self._map, dtype=np.int32).reshape(slots, SLOT_WORDS * 2)
        self.waited_s = 0.0  # total time spent waiting for earlier responses (for the benchmarks)

    @classmethod
    def open_for(cls, ledger_file: Path | None) -> StreamStates | None:
        """The table beside a preprocessing/postprocessing pair's ledger file, or None."""
        if ledger_file is None:
            return None
        try:
            return cls(ledger_file.with_name(ledger_file.name + "-state"))
        except (OSError, ValueError):
            return None

    def acquire(self, key: int, offset: int, wait_s: float | None = None) -> int:
        """The slot of stream ``key`` once its turn for the response at token ``offset`` has come.

        Offset 0 starts the stream: a slot is claimed (the stream's own from an earlier use of the key,
        else a free or stale one) and reset. ``wait_s``: default :data:`WAIT_S`.

        Raises:
            StreamOrderError: no slot free within :data:`PROBES`; or the response before this one was not
                published within ``wait_s``.
        """
        if offset == 0:
            return self._claim(key)
        words = self._words
        slot = self._find(key)
        if slot >= 0 and words[slot, _NEXT] == offset:
            return slot
        start = time.monotonic()
        wait_s = WAIT_S if wait_s is None else wait_s
        deadline = start + wait_s
        pause = 0.00002
        while True:
            time.sleep(pause)
            pause = min(0.001, pause * 2)
            slot = self._find(key)
            if slot >= 0 and words[slot, _NEXT] == offset:
                self.waited_s += time.monotonic() - start
                return slot
            if time.monotonic() > deadline:
                where = "missing" if slot < 0 else f"at offset {int(words[slot, _NEXT])}"
                self.waited_s += time.monotonic() - start
                raise StreamOrderError(
                    f"the response at token offset {offset} waited {wait_s:.0f} s for the one before it "
                    f"(stream state {where})"
                )

    def _find(self, key: int) -> int:
        words, mask = self._words, self._mask
        for i in range(PROBES):
            s = (key + i) & mask
            k = words[s, _KEY]
            if k == key:
                return s
            if k == 0:
                return -1
        return -1

    def _claim(self, key: int) -> int:
        words, mask = self._words, self._mask
        now = time.monotonic_ns()
        stale = now - int(STALE_S * 1e9)
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        try:
            free = -1
            for i in range(PROBES):
                s = (key + i) & mask
                k = words[s, _KEY]
                if k == key:
                    free = s
                    break
                if k == 0:
                    if free < 0:
                        free = s
                    break
                if free < 0 and words[s, _STAMP] < stale:  # ended (stamp -1) or not published for STALE_S
                    free = s
            if free < 0:
                raise StreamOrderError(f"no free stream state slot among {PROBES} (table of {mask + 1})")
            row = words[free]
            row[_NEXT] = 0
            row[_EMITTED] = row[_LEN] = row[_BUDGET] = row[_LEDGER_SLOT] = row[_LEDGER_KEY] = 0
            row[_STAMP] = now
            row[_KEY] = key
            return free
        finally:
            fcntl.flock(self._fd, fcntl.LOCK_UN)

    def load(self, slot: int, detokenizer: IncrementalDetokenizer) -> IncrementalDetokenizer:
        """``detokenizer`` (fresh) with the window and emitted count of ``slot``."""
        row = self._words[slot]
        n = int(row[_LEN])
        detokenizer._ids = self._ids[slot, HEADER_WORDS * 2 : HEADER_WORDS * 2 + n].tolist()
        detokenizer._emitted = int(row[_EMITTED])
        return detokenizer

    def store(self, slot: int, detokenizer: IncrementalDetokenizer) -> None:
        """Write ``detokenizer``'s window back (at most :data:`WINDOW` ids; its forced cut keeps it there)."""
        ids = detokenizer._ids
        if len(ids) > WINDOW:  # not reached with max_window_tokens=WINDOW; never write past the slot
            ids = ids[-WINDOW:]
        self._ids[slot, HEADER_WORDS * 2 : HEADER_WORDS * 2 + len(ids)] = ids
        row = self._words[slot]
        row[_LEN] = len(ids)
        row[_EMITTED] = detokenizer._emitted

    def budget(self, slot: int) -> tuple[int, int, int]:
        """``(tokens left, ledger slot, ledger key)`` stored by :meth:`set_budget` (0s when none)."""
        row = self._words[slot]
        return int(row[_BUDGET]), int(row[_LEDGER_SLOT]), int(row[_LEDGER_KEY]) & _U64

    def set_budget(self, slot: int, left: int, ledger_slot: int, ledger_key: int) -> None:
        """Store the stream's budget and its ledger slot (``ledger_key``: the ledger's unsigned 64-bit id
        hash, kept in a signed word)."""
        row = self._words[slot]
        row[_BUDGET], row[_LEDGER_SLOT] = left, ledger_slot
        row[_LEDGER_KEY] = ledger_key - (1 << 64) if ledger_key >= 1 << 63 else ledger_key

    def publish(self, slot: int, next_offset: int, ended: bool = False) -> None:
        """Let the response at ``next_offset`` go (call after this response was sent); never moves a
        slot back. ``ended``: the stream's last response; the slot may then be claimed by another stream
        (its key stays, so probing still finds later keys; a late empty response still finds its turn)."""
        row = self._words[slot]
        if next_offset < row[_NEXT]:
            return
        row[_STAMP] = -1 if ended else time.monotonic_ns()
        row[_NEXT] = next_offset

    def skip_to(self, key: int, next_offset: int) -> None:
        """After a response gave up waiting: let the later ones of stream ``key`` go (text of the missing
        ones is lost, the stream goes on instead of every later response waiting too)."""
        slot = self._find(key)
        if slot < 0:
            slot = self._claim(key)
        self.publish(slot, next_offset)

    def close(self, unlink: bool = False) -> None:
        """Unmap; with ``unlink`` also remove the file."""
        del self._words, self._ids
        self._map.close()
        os.close(self._fd)
        if unlink:
            try:
                self.path.unlink()
            except OSError:
                pass
