"""The keys that let postprocessing tell one request's engine responses from another's: fresh
``DETOKENIZER_KEY`` values (:class:`KeySource`), the ids this process has never seen (:class:`FirstUseIds`), the
ensemble's stream keys (:class:`EnsembleStreamKeys`) and what marks an ensemble step (:func:`is_ensemble_step`).

Vendored into the preprocessing model with the rest of ``runtime/``; moved here from :mod:`.preprocessing`, which
re-exports every name.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Collection, Sequence

import numpy as np

from .stream_ledger import NO_END, StreamLedger


class KeySource:
    """Unique ``DETOKENIZER_KEY`` values (UINT64, never 0).

    A random 64-bit start from ``os.urandom`` per process plus a counter: keys from different model
    instances/processes collide with probability about n^2 / 2^64.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._next = int.from_bytes(os.urandom(8), "little")

    def take(self, n: int = 1) -> list[int]:
        """``n`` fresh keys."""
        with self._lock:
            keys: list[int] = []
            while len(keys) < n:
                self._next = (self._next + 1) & 0xFFFFFFFFFFFFFFFF
                if self._next:
                    keys.append(self._next)
            return keys


class FirstUseIds:
    """Request ids this process has certainly never claimed before: a blocked Bloom filter of fixed size.

    ``claim(request_id)`` is true only when no earlier call claimed the same id (no false "fresh": each id is
    fresh at most once per process); hash collisions only ever answer "seen" (then the request asks the
    engine for perf metrics, which is slower, never wrong). 2^27 bits = 16 MiB of zero pages, touched as
    ids arrive; 4 probes inside one 64-byte block (one page touched per id): about 1 false "seen" in 100
    after 10 million distinct ids, 1 in 6 after 30 million (the process then falls back to perf metrics
    for more and more requests).
    """

    BITS = 1 << 27
    PROBES = 4
    _BLOCK_BYTES = 64

    def __init__(self) -> None:
        self._bits = np.zeros(self.BITS >> 3, dtype=np.uint8).data  # calloc: pages appear as touched
        self._blocks = (self.BITS >> 3) // self._BLOCK_BYTES

    def claim(self, request_id: str) -> bool:
        """True (and remembered) when ``request_id`` was never claimed in this process."""
        h = hash(request_id) & 0xFFFFFFFFFFFFFFFF  # per-process salted SipHash of the id
        base = (h % self._blocks) * self._BLOCK_BYTES
        h >>= 24
        bits, fresh = self._bits, False
        for _ in range(self.PROBES):
            j = h & 511  # bit within the 512-bit block
            h >>= 9
            byte, bit = base + (j >> 3), 1 << (j & 7)
            if not bits[byte] & bit:
                fresh = True
                bits[byte] |= bit
        return fresh


class EnsembleStreamKeys:
    """How postprocessing tells this request's engine responses apart from those of other requests.

    In an ensemble, postprocessing only sees tensorrt_llm's outputs and what Triton passes to every step
    (request id, correlation id, request parameters; core ``src/ensemble_scheduler/ensemble_scheduler.cc``
    r24.10 ``InitStep``). Measured on Triton 2.51: the ensemble gives every step the client's request id,
    correlation id (0 unless the client sets one), flags and parameters, nothing per request. So:

    * ``response_parameters`` (the Python backend's ``InferenceResponse`` takes ``parameters``:
      python_backend r25.02+, i.e. the 25.x TRT-LLM containers): preprocessing answers with the
      string response parameter ``sequence_id`` = a fresh key; the ensemble (core r24.07+, #369) then runs
      tensorrt_llm and postprocessing with that correlation id, which postprocessing keys on. The engine
      is asked for no perf metrics the client did not ask for (NVIDIA's backend ignores correlation ids:
      its tensorrt_llm model has no sequence batcher).
    * otherwise (Triton 2.51 here, 23.10 for trtllm-0.5): the key is (request id, the engine's
      ``arrival_time_ns``), and ``arrival_time_ns`` only comes with perf metrics. A request needs them only
      when another request with the same id may share postprocessing's state. With the stream ledger
      shared with postprocessing (:class:`~.stream_ledger.StreamLedger`; any number of preprocessing
      instances), a request is keyed (id, 0) when it gets a slot there: no stream of its id is registered
      and not yet counted to its end by postprocessing (the empty id included). Without a ledger (no
      ``/dev/shm``, model names that do not pair), only the first request of a non-empty id in this process
      (:class:`FirstUseIds`), and only with one preprocessing instance. Everything else asks the engine
      for perf metrics.

    Known limit of the second mode without a ledger: reloading preprocessing alone (explicit model
    control) forgets the ids seen; a request reusing an id served before the reload could then meet that
    stream's state if postprocessing still holds it (its LRU of ``detokenizer_max_streams``). A reloaded
    preprocessing maps the same ledger file again, so with a ledger nothing is forgotten.
    """

    def __init__(
        self, instances: int = 1, response_parameters: bool = False, ledger: StreamLedger | None = None
    ) -> None:
        self.instances = instances
        self.response_parameters = response_parameters
        self.ledger = None if response_parameters else ledger
        self._seen = FirstUseIds() if instances == 1 and not response_parameters and self.ledger is None else None

    def perf_metrics_needed(
        self, request_id: str | None, budget: int | None = None, stops: Sequence[Sequence[int]] = ()
    ) -> bool:
        """True when the engine must send ``arrival_time_ns`` for postprocessing to key this request.

        ``budget``: the request's ``max_tokens`` when it has one batch row (postprocessing counts only such
        streams), None for several rows (registered with no end). ``stops``: the row's stop sequences (token
        ids), recorded in the ledger so postprocessing ends a stream that the engine ended on one of them.
        """
        if self.response_parameters:
            return False
        if request_id is None:
            return True
        if self.ledger is not None:
            return not self.ledger.begin(request_id, NO_END if budget is None else budget, stops)
        if request_id == "" or self._seen is None:
            return True
        return not self._seen.claim(request_id)


#: The preprocessing outputs that tell an ensemble step from any other caller (:func:`is_ensemble_step`).
ENSEMBLE_ONLY_OUTPUT = "OUT_RETURN_PERF_METRICS"
DIRECT_ONLY_OUTPUT = "DETOKENIZER_KEY"


def is_ensemble_step(requested_outputs: Collection[str] | None) -> bool:
    """True when a preprocessing request is an ensemble's step, whose engine responses the ensemble's
    postprocessing step will see under the same request id.

    Triton runs an ensemble step asking for exactly the outputs in that step's ``output_map`` (core
    ``src/ensemble_scheduler/ensemble_scheduler.cc`` r24.10 ``InitStep``: ``AddOriginalRequestedOutput`` per
    mapped output), and a request that names no output asks for all of them (``infer_request.cc``
    ``PrepareForInference``). The ensembles rendered here map ``OUT_RETURN_PERF_METRICS`` and never
    ``DETOKENIZER_KEY`` (a key for callers that are not an ensemble; contract.yaml, checked by
    tests/test_stream_ledger.py). So a request asking for the first and not the second is an ensemble step;
    a direct call (``DETOKENIZER_KEY`` asked for, or every output) and the BLS (no
    ``OUT_RETURN_PERF_METRICS``) are not: their ids are never registered in the stream ledger, which only
    postprocessing's ensemble step ends, and they get no perf metrics they did not ask for.
    ``requested_outputs`` None means every output (a direct call).
    """
    return (
        requested_outputs is not None
        and ENSEMBLE_ONLY_OUTPUT in requested_outputs
        and DIRECT_ONLY_OUTPUT not in requested_outputs
    )
