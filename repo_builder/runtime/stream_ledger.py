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
new tokens (the end id, a cancellation: only a stream's last response is empty), and a non-streaming
request is registered with a budget of 1 (its one engine response ends it). A stream that stops short of
its budget otherwise (a stop word, whose tokens the final response carries; an error, which never reaches
postprocessing) stays registered, so later requests with its id ask for perf metrics, exactly as without
the ledger: the ledger only ever removes a cost, never decides a key on a guess. Streams that
postprocessing cannot count (several rows, beams or sequences in one response) are never ended either; a
request of several rows is registered with no end at all (:data:`NO_END`).

Storage: a file in ``/dev/shm`` mapped by every user, :data:`SLOTS` slots of two 8-byte words (the id's
64-bit BLAKE2b hash, never 0; the budget, > 0 while registered, 0 once ended), open addressing over at
most :data:`PROBES` slots. Each word is written with one aligned 8-byte store, and each word has one
writer at a time: preprocessing (holding the file lock) writes a slot's key, and the budget of a slot
that is empty or whose stream ended; postprocessing writes 0 into the budget of a slot it counted to its
end. A full probe window only means "no slot": the caller falls back to perf metrics. Two ids with one
64-bit hash share a slot (probability about n^2 / 2^64), which again only costs perf metrics.

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
from pathlib import Path

#: Slots of the table (a power of two): 65,536 x 16 bytes = 1 MiB.
SLOTS = 1 << 16
#: Slots looked at for one id, starting at its hash.
PROBES = 16
#: Folder of the ledger files (shared memory) and their name prefix.
SHM_DIR = Path("/dev/shm")
FILE_PREFIX = "repo-builder-streams-"
#: Budget of a stream that postprocessing cannot count (several rows): registered, never ended.
NO_END = (1 << 63) - 1
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
        size = slots * 16
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
        self._budgets = view[slots * 8 :].cast("q")

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

    def begin(self, request_id: str, budget: int) -> bool:
        """Register a new stream of ``request_id`` that will carry at most ``budget`` generated tokens
        (:data:`NO_END`: a stream postprocessing cannot count).

        Returns:
            True when the request now holds a slot: postprocessing may key its stream by the id alone (no
            earlier stream of the id can be in flight). False when a registered stream of the id has not
            ended, or no slot is free: the caller asks the engine for perf metrics.
        """
        h = id_hash(request_id)
        keys, budgets, mask = self._keys, self._budgets, self._mask
        budget = max(1, budget)
        fcntl.flock(self._fd, fcntl.LOCK_EX)  # one preprocessing process at a time
        try:
            free = -1
            for i in range(PROBES):
                s = (h + i) & mask
                k = keys[s]
                if k == h:
                    if budgets[s] > 0:
                        return False  # registered and not counted to its end
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

    def end(self, slot: int, key: int) -> None:
        """Mark the stream in ``slot`` (from :meth:`lookup`) ended, so its id may start a new one."""
        if self._keys[slot] == key:
            self._budgets[slot] = 0

    def close(self, unlink: bool = False) -> None:
        """Unmap; with ``unlink`` also remove the file (the other users keep their own mappings)."""
        self._keys.release()
        self._budgets.release()
        self._map.close()
        os.close(self._fd)
        if unlink:
            try:
                self.path.unlink()
            except OSError:
                pass


def stale_ledgers(server_pid: int) -> list[Path]:
    """Ledger files of the server ``server_pid`` (what a killed server leaves in ``/dev/shm``)."""
    try:
        return sorted(SHM_DIR.glob(f"{FILE_PREFIX}{int(server_pid)}-*"))
    except OSError:
        return []
