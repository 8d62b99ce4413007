"""Which ensemble streams are in flight, shared by preprocessing and postprocessing across processes.

Why: in an ensemble, postprocessing tells the streamed responses of one request from another's only by
what Triton passes to every step (request id, correlation id) and the engine's outputs. Two requests
with one id are told apart by the engine's ``arrival_time_ns``, which NVIDIA's backend sends only with
perf metrics (10 more tensors in every response, which also reach the client). A request id seen before
could belong to a stream still in flight, so it used to cost those perf metrics every time
(``preprocessing.EnsembleStreamKeys``), and so did every request once preprocessing had two instances.
Many clients reuse ids one request after another (NVIDIA's baseline harness names request ``i`` of worker
``w`` ``b{w}-{i}`` in every repetition; many send no id at all), and a stream that ended cannot share
state with a new one. The ledger lets postprocessing say "this id's stream ended":

* preprocessing, before the engine sees the request, registers the id with its token budget
  (``max_tokens``) -- :meth:`StreamLedger.begin`; it is refused when a registered stream of that id has
  not ended, or when no slot is free (then the request asks for perf metrics as before). A request is
  keyed by its id alone only when it holds a slot, so an id without a slot never has a stream keyed alone
  in flight or left behind, and a slot whose stream ended may be given to another id. Several
  preprocessing instances (processes) register in the same ledger, one at a time (``flock`` on the file);
* postprocessing, when a registered stream's first response arrives, takes the budget
  (:meth:`StreamLedger.lookup`), counts the tokens it decodes for that stream, and when the budget is used
  up (the engine never sends more than ``max_tokens`` generated tokens; a streamed response never carries
  the prompt) it ends the stream's detokenizer state and marks the id ended (:meth:`StreamLedger.end`).

Only an ensemble step registers (``preprocessing.is_ensemble_step``: a direct preprocessing call or the BLS
never does, since no ensemble postprocessing step would end it). A stream also ends on a response without
new tokens (the end id: only a stream's last response is empty), on a response whose generated ids end
with one of the request's stop sequences (preprocessing records them with the registration when they fit
:data:`STOP_INTS`; the engine stops right there, so no later response can follow), and when postprocessing
refuses one of its responses (the ensemble then runs no further step of it); a non-streaming request is
registered with a budget of 1 (its one engine response ends it). What no model after the engine sees
stays registered, on Triton 2.51: an engine error (the ensemble ends the request at the failed step) and a
client's cancellation (the ensemble runs no later step while the engine generates on). Later requests with
such an id ask for perf metrics, exactly as without the ledger: the ledger only ever removes a cost, never
decides a key on a guess. Streams that postprocessing cannot count (several rows, beams or sequences in
one response) are never ended either; a request of several rows is registered with no end at all
(:data:`NO_END`).

Storage: a file in ``/dev/shm`` mapped by every user, :data:`SLOTS` slots of two 8-byte words (the id's
64-bit BLAKE2b hash, never 0; the budget, > 0 while registered, 0 once ended) and a stop record of
:data:`STOP_INTS` int32 words (checksum over the key and the content, so a torn or stale record reads as
"none"), open addressing over at most :data:`PROBES` slots. Each word is written with one aligned store,
and each word has one writer at a time: preprocessing (holding the file lock) writes a slot's key, stop
record and budget of a slot that is empty or whose stream ended (the record before the budget);
postprocessing writes 0 into the budget of a slot it counted to its end. A full probe window only means
"no slot": the caller falls back to perf metrics. Two ids with one 64-bit hash share a slot (probability
about n^2 / 2^64), which again only costs perf metrics.

The file is named after the Triton server process (the stubs' parent), the repository folder and the
model names without their ``preprocessing``/``postprocessing`` suffix (``llama_preprocessing`` pairs with
``llama_postprocessing``): ``/dev/shm/repo-builder-streams-<server pid>-<16 hex>``. Models whose names do
not pair so, or a machine without a writable ``/dev/shm``, get no ledger (preprocessing then keys only an
id's first use alone, and only with one instance). Postprocessing, whose detokenizer states the ledger
speaks for, removes the file when it is unloaded (a reloaded preprocessing maps the same file again); the
launcher removes what a killed server left (``repo_builder.server.launch_processes``).
"""

from __future__ import annotations

import fcntl
import hashlib
import mmap
import os
from array import array
from collections.abc import Sequence
from pathlib import Path

from .numeric_ranges import INT64_MAX

#: Slots of the table (a power of two): streams registered at once, at most (ended slots are reused).
#: 16,384 x (16 + 112) bytes = 2 MiB.
SLOTS = 1 << 14
#: int32 words of a slot's stop record: a checksum, the length of the content, and the content (each stop
#: sequence as its length then its ids); a request whose stop sequences do not fit gets none recorded.
STOP_INTS = 28
#: Slots looked at for one id, starting at its hash.
PROBES = 16
#: Folder of the ledger files (shared memory) and their name prefix.
SHM_DIR = Path("/dev/shm")
FILE_PREFIX = "repo-builder-streams-"
#: Budget of a stream that postprocessing cannot count (several rows): registered, never ended.
NO_END = INT64_MAX
#: The model-name suffixes that pair a preprocessing model with its postprocessing model.
ROLE_SUFFIXES = ("preprocessing", "postprocessing")


def id_hash(request_id: str) -> int:
    """The 64-bit key of ``request_id`` (BLAKE2b, the same in every process; never 0)."""
    h = int.from_bytes(hashlib.blake2b(request_id.encode("utf-8", "surrogatepass"), digest_size=8).digest(), "little")
    return h or 1


def ledger_path(model_name: str, model_dir: str, server_pid: int | None = None) -> Path | None:
    """The ledger file a model shares with its partner, or None when its name does not pair.

    Args:
        model_name: the Triton model name (``args["model_name"]``), e.g. ``preprocessing`` or
            ``llama_postprocessing``.
        model_dir: the model's folder (``args["model_repository"]``); its parent is the repository.
        server_pid: the tritonserver pid (default: this stub's parent).
    """
    pair = next((model_name[: -len(s)] for s in ROLE_SUFFIXES if model_name.endswith(s)), None)
    if pair is None:
        return None
    repo = os.path.dirname(os.path.realpath(model_dir))
    digest = hashlib.blake2b(f"{repo}\0{pair}".encode("utf-8", "surrogatepass"), digest_size=8).hexdigest()
    pid = os.getppid() if server_pid is None else server_pid
    return SHM_DIR / f"{FILE_PREFIX}{pid}-{digest}"


class StreamLedger:
    """The shared table of registered ensemble streams (see the module docstring).

    Args:
        path: the file (created, zero-filled, when missing).
        slots: table size, a power of two (every user of one file must pass the same; tests make it small).
    Raises:
        OSError: the file cannot be created or mapped (callers then run without a ledger).
    """

    def __init__(self, path: str | os.PathLike[str], slots: int = SLOTS) -> None:
        if slots < PROBES or slots & (slots - 1):
            raise ValueError(f"slots must be a power of two >= {PROBES}, got {slots}")
        self.path = Path(path)
        self._mask = slots - 1
        size = slots * (16 + 4 * STOP_INTS)
        self._fd = fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            if os.fstat(fd).st_size < size:
                os.ftruncate(fd, size)  # every user may do this: same size, zero-filled
            self._map = mmap.mmap(fd, size)
        except BaseException:
            os.close(fd)
            raise
        view = memoryview(self._map)
        self._keys = view[: slots * 8].cast("Q")
        self._budgets = view[slots * 8 : slots * 16].cast("q")
        self._stops = view[slots * 16 :].cast("i")

    @classmethod
    def open_for(cls, model_name: str, model_dir: str) -> StreamLedger | None:
        """The ledger of a preprocessing/postprocessing pair, or None (no pair name, no usable /dev/shm)."""
        path = ledger_path(model_name, model_dir)
        if path is None:
            return None
        try:
            return cls(path)
        except (OSError, ValueError):
            return None

    def begin(self, request_id: str, budget: int, stops: Sequence[Sequence[int]] = ()) -> bool:
        """Register a new stream of ``request_id`` that will carry at most ``budget`` generated tokens
        (:data:`NO_END`: a stream postprocessing cannot count) and that the engine ends when its generated
        ids end with one of ``stops`` (the request's stop sequences; recorded when they fit the slot's
        :data:`STOP_INTS`, else none are, and the stream then only ends by its budget or an empty response).

        Returns:
            True when the request now holds a slot: postprocessing may key its stream by the id alone (no
            earlier stream of the id can be in flight). False when a registered stream of the id has not
            ended, or no slot is free: the caller asks the engine for perf metrics.
        """
        h = id_hash(request_id)
        keys, budgets, mask = self._keys, self._budgets, self._mask
        budget = max(1, budget)
        record = _stop_record(h, stops)
        fcntl.flock(self._fd, fcntl.LOCK_EX)  # one preprocessing process at a time
        try:
            free = -1
            for i in range(PROBES):
                s = (h + i) & mask
                k = keys[s]
                if k == h:
                    if budgets[s] > 0:
                        return False  # registered and not counted to its end
                    self._write_stops(s, record)  # before the budget: read only while it is > 0
                    budgets[s] = budget
                    return True
                if k == 0:
                    if free < 0:
                        free = s
                    break  # slots are never emptied: the id is not further along
                if free < 0 and budgets[s] == 0:
                    free = s
            if free < 0:
                return False
            keys[free] = h  # the slot's budget is 0: nobody reads it as registered meanwhile
            self._write_stops(free, record)
            budgets[free] = budget
            return True
        finally:
            fcntl.flock(self._fd, fcntl.LOCK_UN)

    def lookup(self, request_id: str) -> tuple[int, int, int] | None:
        """``(slot, key, budget)`` of the registered, not yet ended stream of ``request_id``, else None."""
        h = id_hash(request_id)
        keys, budgets, mask = self._keys, self._budgets, self._mask
        for i in range(PROBES):
            s = (h + i) & mask
            k = keys[s]
            if k == h:
                b = budgets[s]
                return (s, h, b) if b > 0 else None
            if k == 0:
                return None
        return None

    def _write_stops(self, slot: int, record: list[int]) -> None:
        base = slot * STOP_INTS
        self._stops[base : base + len(record)] = array("i", record)

    def stop_sequences(self, slot: int, key: int) -> list[list[int]]:
        """The stop sequences recorded with the stream in ``slot`` (from :meth:`lookup`); [] when none were
        recorded or the record does not check out (then nothing ends the stream early: only a cost)."""
        base = slot * STOP_INTS
        rec = self._stops[base : base + STOP_INTS].tolist()
        n = rec[1]
        if n <= 0 or n > STOP_INTS - 2:
            return []
        content = rec[2 : 2 + n]
        if rec[0] != _checksum(key, content) or self._keys[slot] != key:
            return []
        out, i = [], 0
        while i < n:
            length = content[i]
            if length <= 0 or i + 1 + length > n:
                return []
            out.append(content[i + 1 : i + 1 + length])
            i += 1 + length
        return out

    def registered(self) -> int:
        """How many streams are registered and not yet ended (a scan of the budgets; for the metrics gauge)."""
        import numpy as np  # only postprocessing asks (it has numpy); the ledger itself is standard library

        return int(np.count_nonzero(np.frombuffer(self._budgets, dtype=np.int64) > 0))

    def end(self, slot: int, key: int) -> None:
        """Mark the stream in ``slot`` (from :meth:`lookup`) ended, so its id may start a new one."""
        if self._keys[slot] == key:
            self._budgets[slot] = 0

    def close(self, unlink: bool = False) -> None:
        """Unmap; with ``unlink`` also remove the file (the other users keep their own mappings)."""
        self._keys.release()
        self._budgets.release()
        self._stops.release()
        self._map.close()
        os.close(self._fd)
        if unlink:
            try:
                self.path.unlink()
            except OSError:
                pass


def _checksum(key: int, content: Sequence[int]) -> int:
    data = key.to_bytes(8, "little") + array("i", content).tobytes()
    return int.from_bytes(hashlib.blake2b(data, digest_size=4).digest(), "little", signed=True)


def _stop_record(key: int, stops: Sequence[Sequence[int]]) -> list[int]:
    """A slot's stop record for ``stops`` (see :data:`STOP_INTS`): ``[checksum, n, content...]``, or
    ``[0, 0]`` (no sequences recorded) when there are none or they do not fit."""
    content: list[int] = []
    for seq in stops:
        if len(seq):
            content.append(len(seq))
            content.extend(int(t) for t in seq)
    if not content or len(content) > STOP_INTS - 2:
        return [0, 0]
    return [_checksum(key, content), len(content), *content]


def stale_ledgers(server_pid: int) -> list[Path]:
    """Ledger files of the server ``server_pid`` (what a killed server leaves in ``/dev/shm``)."""
    try:
        return sorted(SHM_DIR.glob(f"{FILE_PREFIX}{int(server_pid)}-*"))
    except OSError:
        return []
