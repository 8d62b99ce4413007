"""How the BLS calls its step models (:class:`StepCaller`, :class:`EngineStream`, :data:`Sender`) and how it
cancels the engine request of a non-streaming client that is gone (:class:`CancelWatch`). Moved here from
:mod:`.bls`, which re-exports every name. Vendored with the rest of ``runtime/``.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Protocol

import numpy as np

from .metrics import Metrics

#: How often the client of a non-streaming request is polled while the engine works (TensorRT-LLM's own
#: ``cancellation_check_period_ms`` default is 100 ms; one IPC round trip per request and poll).
NON_STREAM_CANCEL_POLL_SECONDS = 0.2


class EngineStream(Protocol):
    """Responses of one streaming engine call, each as {engine output name: array}."""

    def __iter__(self) -> Iterator[Mapping[str, np.ndarray]]: ...

    def cancel(self) -> None:
        """Ask the engine to stop generating for this request (best effort)."""

    # Optional: ``batches()`` yields lists of the responses already waiting (at least one, in order);
    # the BLS then merges them (coalescing). Streams without it are read one response at a time.


class StepCaller(Protocol):
    """How the BLS calls other models; implemented over ``pb_utils.InferenceRequest`` in model.py.

    Both methods raise :class:`BLSStepError` (message starting with the model name) when the model
    returns an error.
    """

    def call(
        self, model: str, inputs: Mapping[str, np.ndarray], outputs: Sequence[str], request_id: str
    ) -> Mapping[str, np.ndarray]:
        """One request, one response: ``exec()``. Returns {output name: array}."""

    def stream(
        self, model: str, inputs: Mapping[str, np.ndarray], outputs: Sequence[str], request_id: str
    ) -> EngineStream:
        """One request, many responses: ``exec(decoupled=True)``; empty responses are skipped."""


#: ``send(outputs, final)``: one BLS response; ``outputs`` None means "no tensors, only the flag".
Sender = Callable[[Mapping[str, np.ndarray] | None, bool], None]


class CancelWatch:
    """One daemon thread that polls the clients of the BLS's non-streaming requests while their engine
    works (it answers once, at its end, so nothing else runs meanwhile) and cancels the engine request of
    a client that is gone (``stream.cancel()``: the engine's stop request).

    Args:
        period_s: seconds between polls (each poll of ``is_cancelled`` is an IPC round trip per request).
    """

    def __init__(self, period_s: float = NON_STREAM_CANCEL_POLL_SECONDS) -> None:
        self.period_s = period_s
        self._lock = threading.Lock()
        self._entries: dict[int, tuple[Callable[[], bool], Any, Metrics]] = {}
        self._ids = itertools.count(1)
        self._thread: threading.Thread | None = None

    def add(self, cancelled: Callable[[], bool], stream: Any, metrics: Metrics) -> int:
        """Watch ``cancelled`` until :meth:`remove`; returns the entry's id."""
        with self._lock:
            token = next(self._ids)
            self._entries[token] = (cancelled, stream, metrics)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="bls-cancel-watch", daemon=True)
                self._thread.start()
        return token

    def remove(self, token: int) -> None:
        with self._lock:
            self._entries.pop(token, None)

    def poll(self) -> int:
        """One round over the watched requests; returns how many were cancelled (removed from the watch)."""
        with self._lock:
            entries = list(self._entries.items())
        gone = 0
        for token, (cancelled, stream, metrics) in entries:
            try:
                is_gone = bool(cancelled())
            except Exception:  # noqa: BLE001 - a request that cannot be asked is left to finish
                is_gone = False
            if is_gone:
                self.remove(token)
                metrics.inc("repo_builder_streams_cancelled_total")
                stream.cancel()
                gone += 1
        return gone

    def _run(self) -> None:
        while True:
            time.sleep(self.period_s)
            self.poll()


class _PendingCancel:
    """What :class:`CancelWatch` cancels for a non-streaming request: its engine stream once the engine
    answered, else (``exec`` has not returned yet) a stop request for ``request_id`` through the caller's
    ``stop_request(model, inputs, request_id)``, when it has one."""

    def __init__(self, caller: Any, model: str, inputs: Mapping[str, np.ndarray], request_id: str) -> None:
        self.caller, self.model, self.inputs, self.request_id = caller, model, inputs, request_id
        self.stream: Any = None

    def cancel(self) -> None:
        if self.stream is not None:
            self.stream.cancel()
            return
        stop = getattr(self.caller, "stop_request", None)
        if stop is not None:
            stop(self.model, self.inputs, self.request_id)
