"""The gRPC transport: unary ``infer`` for plain models, and for decoupled models one shared
``start_stream`` stream per client on which many requests are in flight, routed by request id."""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from ..errors import ClientError
from .connection import _Connection
from .models import GenerateResult, ModelInfo, StreamEvent, _ids_of, _server_error, _text_of, new_request_id


class GrpcTransport(_Connection):
    """gRPC side of :class:`~repo_builder.client.llm.LLMClient` (a ``tritonclient.grpc`` client, created at first
    use)."""

    def _grpc_client(self) -> Any:
        if self._grpc is None:
            import tritonclient.grpc as grpcclient

            self._grpc = grpcclient.InferenceServerClient(self.url)
        return self._grpc

    # -- gRPC ------------------------------------------------------------------------------------------
    def _ensure_router(self) -> _GrpcRouter:
        with self._lock:
            if self._router is None:
                self._router = _GrpcRouter(self._grpc_client())
            return self._router

    def _grpc_events(
        self,
        info: ModelInfo,
        arrays: dict[str, np.ndarray],
        rid: str,
        res: GenerateResult,
        outputs: list[str] | None = None,
    ) -> Iterator[StreamEvent]:
        if info.decoupled:
            handle = self._ensure_router().submit(info, arrays, res, rid, outputs)
            yield from handle.events(self.timeout_s)
            return
        from tritonclient.utils import InferenceServerException

        inputs = _grpc_inputs(info, arrays)
        res.request_id = rid
        res.start_ns = time.perf_counter_ns()
        try:
            out = self._grpc_client().infer(
                info.name, inputs, request_id=rid, client_timeout=self.timeout_s, outputs=_grpc_outputs(outputs)
            )
        except InferenceServerException as exc:
            res.end_ns = time.perf_counter_ns()
            text = exc.message() or str(exc)
            if "UNAVAILABLE" in str(exc.status()):
                res.error = self._unreachable(exc)
            else:
                res.error = _server_error(info.name, text)
            raise res.error from None
        now = time.perf_counter_ns()
        res.end_ns = now
        event = _event_from_grpc(0, now, out, final=True)
        res.events.append(event)
        yield event


def _grpc_outputs(names: list[str] | None) -> list[Any] | None:
    if names is None:
        return None
    import tritonclient.grpc as grpcclient

    return [grpcclient.InferRequestedOutput(n) for n in names]


def _grpc_inputs(info: ModelInfo, arrays: dict[str, np.ndarray]) -> list[Any]:
    import tritonclient.grpc as grpcclient

    inputs = []
    for name, arr in arrays.items():
        item = grpcclient.InferInput(name, list(arr.shape), info.inputs[name].wire_type)
        item.set_data_from_numpy(arr)
        inputs.append(item)
    return inputs


class _Handle:
    """The per-request side of :class:`_GrpcRouter`: a queue of responses for one request id."""

    def __init__(self, router: _GrpcRouter, result: GenerateResult) -> None:
        self.router = router
        self.result = result
        self.queue: queue.Queue[tuple[str, Any, int]] = queue.Queue()
        self.done = False

    def events(self, timeout_s: float) -> Iterator[StreamEvent]:
        res = self.result
        deadline = time.monotonic() + timeout_s
        while not self.done:
            try:
                kind, payload, now = self.queue.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                self.router.forget(res.request_id)
                res.end_ns = time.perf_counter_ns()
                res.error = ClientError(
                    f"model '{res.model}': no complete response within {timeout_s:g} s (request id {res.request_id})",
                    key="--timeout",
                    hint="raise the timeout, or ask for fewer tokens",
                )
                self.done = True
                raise res.error from None
            if kind == "error":
                res.end_ns = now
                res.error = payload
                self.done = True
                raise payload
            event = _event_from_grpc(len(res.events), now, payload, final=False)
            event.final = _is_final(payload)
            res.events.append(event)
            if event.final:
                res.end_ns = now
                self.done = True
            yield event


class _GrpcRouter:
    """One gRPC stream shared by many requests; responses are routed by request id.

    tritonclient's stream callback receives errors without the request id (``result`` is None). Such an
    error is parked; whenever the number of parked errors reaches the number of requests still in flight,
    the errors go to those requests (a failed request never gets a final response, so by then every other
    request has finished). With one request in flight this is immediate.
    """

    def __init__(self, client: Any) -> None:
        self.client = client
        self.lock = threading.Lock()
        self.handles: dict[str, _Handle] = {}
        self.orphans: list[ClientError] = []
        self.stream_error: ClientError | None = None
        client.start_stream(callback=self._callback)

    def submit(
        self,
        info: ModelInfo,
        arrays: dict[str, np.ndarray],
        result: GenerateResult,
        rid: str | None = None,
        outputs: list[str] | None = None,
    ) -> _Handle:
        """Send one request on the stream; its responses arrive through the returned handle."""
        model = info.name
        rid = rid or result.request_id or new_request_id()
        result.request_id = rid
        handle = _Handle(self, result)
        with self.lock:
            if rid in self.handles:
                raise ClientError(f"request id '{rid}' is already in flight on this stream", key="request_id")
            self.handles[rid] = handle
        inputs = _grpc_inputs(info, arrays)
        result.start_ns = time.perf_counter_ns()
        try:
            self.client.async_stream_infer(
                model, inputs, request_id=rid, enable_empty_final_response=True, outputs=_grpc_outputs(outputs)
            )
        except Exception as exc:  # noqa: BLE001 - a broken stream surfaces as InferenceServerException
            self.forget(rid)
            result.end_ns = time.perf_counter_ns()
            result.error = ClientError(f"model '{model}': cannot send on the gRPC stream: {exc}", key="--url")
            handle.queue.put(("error", result.error, result.end_ns))
        return handle

    def forget(self, rid: str) -> None:
        with self.lock:
            self.handles.pop(rid, None)

    def _callback(self, result: Any, error: Any) -> None:
        now = time.perf_counter_ns()
        with self.lock:
            if error is not None:
                message = error.message() if hasattr(error, "message") else str(error)
                status = error.status() if hasattr(error, "status") else None
                if status:  # the stream itself failed (gRPC status): every request in flight is lost
                    for lost in list(self.handles.values()):
                        err = ClientError(
                            f"model '{lost.result.model}': gRPC stream failed: {status} {message}", key="--url"
                        )
                        lost.queue.put(("error", err, now))
                    self.handles.clear()
                    return
                self.orphans.append(_server_error("?", message))
                self._assign_orphans()
                return
            rid = result.get_response().id
            handle = self.handles.get(rid)
            if handle is None:
                return
            if _is_final(result):
                self.handles.pop(rid, None)
            handle.queue.put(("response", result, now))
            self._assign_orphans()

    def _assign_orphans(self) -> None:
        # caller holds self.lock
        if self.orphans and len(self.orphans) >= len(self.handles):
            now = time.perf_counter_ns()
            for rid, err in zip(list(self.handles), list(self.orphans)):
                handle = self.handles.pop(rid)
                err = _server_error(handle.result.model, err.server_message)  # type: ignore[attr-defined]
                handle.queue.put(("error", err, now))
            self.orphans.clear()


def _is_final(result: Any) -> bool:
    params = result.get_response().parameters
    return "triton_final_response" in params and params["triton_final_response"].bool_param


class _GrpcOutputs(Mapping[str, Any]):
    """The outputs of one gRPC response, decoded to numpy on first access (most are never read)."""

    def __init__(self, result: Any) -> None:
        self._result = result
        self._names = [o.name for o in result.get_response().outputs]
        self._cache: dict[str, Any] = {}

    def __getitem__(self, name: str) -> Any:
        if name not in self._names:
            raise KeyError(name)
        if name not in self._cache:
            self._cache[name] = self._result.as_numpy(name)
        return self._cache[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)


def _event_from_grpc(index: int, now: int, result: Any, final: bool) -> StreamEvent:
    outputs = _GrpcOutputs(result)
    return StreamEvent(
        index, now, _text_of(outputs.get("text_output")), _ids_of(outputs.get("output_ids")), outputs, final
    )
