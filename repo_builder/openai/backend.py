"""The OpenAI front end's side of Triton: one gRPC ``ModelStreamInfer`` stream per request (grpc.aio).

:class:`TritonBackend` reads the served model's configuration once (``tritonclient.grpc.aio``
``get_model_config``), maps request fields onto its inputs with :func:`repo_builder.client.prepare_inputs`
(the model's own dtypes and shapes, the trtllm-0.5 aliases ``min_length``/``random_seed``, the required
empty ``bad_words``/``stop_words`` of 0.5 ensembles) and streams from the ensemble or the
``tensorrt_llm_bls`` model (``--triton-model``).

Why a stub call and not ``tritonclient.grpc.aio.InferenceServerClient.stream_infer``: a decoupled
ensemble's last response is an empty one carrying only the ``triton_final_response`` flag, and Triton sends
it only when the request sets ``triton_enable_empty_final_response``; the aio client's ``stream_infer``
refuses that key (it is a reserved request parameter there, tritonclient 2.73 ``_utils.py``), so the
request is built here and sent through tritonclient's generated ``GRPCInferenceServiceStub`` on the aio
client's channel. Responses are read from their raw bytes (``raw_output_contents``: a BYTES element is a
4-byte little-endian length and the bytes, an INT32 is 4 little-endian bytes), which costs a few
microseconds per streamed token instead of building an ``InferResult`` and numpy arrays.

Cancelling a :class:`GenerationStream` (client disconnect, stop string found) cancels the gRPC call;
Triton then marks the request cancelled (``response_sender.is_cancelled()`` in the Python engines, the
BLS's cancellation poll) and the engine stops generating.
"""

from __future__ import annotations

import asyncio
import re
import struct
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..client import ModelInfo, prepare_inputs
from ..errors import ClientError

#: Outputs the front end reads (when the model declares them).
OUTPUTS = ("text_output", "num_input_tokens", "num_output_tokens")

_FIELD = re.compile(r"([a-z_]+): ")


class BackendError(Exception):
    """Triton refused or failed a request.

    Attributes:
        message: Triton's error text.
        field: the ensemble/BLS request field the message names (``text_input``, ``max_tokens``...), or None.
        unavailable: True when Triton could not be reached (gRPC UNAVAILABLE).
    """

    def __init__(self, message: str, *, field: str | None = None, unavailable: bool = False) -> None:
        super().__init__(message)
        self.message = message
        self.field = field
        self.unavailable = unavailable


def error_field(message: str, fields: Any) -> str | None:
    """The request field a Triton error message names, or None.

    Preprocessing, engine and BLS request errors read ``<field>: <what is wrong>``
    (``repo_builder.runtime.triton_io.RequestError``); Triton and the BLS prefix them (``in ensemble
    'ensemble', ``, ``preprocessing: ``), so the first ``<name>: `` that is one of ``fields`` (the model's
    input names) is taken.
    """
    for found in _FIELD.finditer(message):
        if found.group(1) in fields:
            return found.group(1)
    return None


@dataclass(slots=True)
class Chunk:
    """One Triton response of a generation.

    Attributes:
        text: ``text_output`` (a delta when streaming, the whole text otherwise; ``""`` when absent).
        num_input_tokens: the engine's ``num_input_tokens`` (prompt tokens it received), when sent.
        num_output_tokens: the engine's ``num_output_tokens`` (tokens generated so far), when sent.
        final: the response carried ``triton_final_response``.
    """

    text: str
    num_input_tokens: int | None
    num_output_tokens: int | None
    final: bool


def _parse(response: Any) -> Chunk:
    """Decode one ``ModelInferResponse`` (raw outputs; see the module docstring)."""
    text, n_in, n_out = "", None, None
    raws = response.raw_output_contents
    for i, out in enumerate(response.outputs):
        if i >= len(raws):
            break
        raw = raws[i]
        name = out.name
        if name == "text_output":
            if out.datatype == "BYTES":
                pos, parts = 0, []
                while pos + 4 <= len(raw):
                    (n,) = struct.unpack_from("<I", raw, pos)
                    parts.append(raw[pos + 4 : pos + 4 + n])
                    pos += 4 + n
                text = b"".join(parts).decode("utf-8", errors="replace")
        elif name in ("num_input_tokens", "num_output_tokens") and len(raw) >= 4:
            value = int.from_bytes(raw[:4], "little", signed=out.datatype.startswith("INT"))
            if name == "num_input_tokens":
                n_in = value
            else:
                n_out = value
    params = response.parameters
    final = "triton_final_response" in params and params["triton_final_response"].bool_param
    return Chunk(text, n_in, n_out, bool(final))


class GenerationStream:
    """The responses of one request; iterate with ``async for``; :meth:`cancel` stops the request in Triton.

    Raises (while iterating):
        BackendError: Triton answered with an error (``field`` set when it names a request field), or the
            stream broke (``unavailable`` when Triton went away).
    """

    def __init__(self, call: Any, done: asyncio.Event, fields: Any, on_cancel: Any = None) -> None:
        self._call = call
        self._done = done
        self._fields = fields
        self._on_cancel = on_cancel
        self.cancelled = False
        self._it = self._iterate()

    def __aiter__(self) -> AsyncIterator[Chunk]:
        return self._it

    async def next(self) -> Chunk | None:
        """The next response, or None after the last one."""
        try:
            return await self._it.__anext__()
        except StopAsyncIteration:
            return None

    async def _iterate(self) -> AsyncIterator[Chunk]:
        import grpc

        try:
            async for response in self._call:
                if response.error_message:
                    raise BackendError(response.error_message, field=error_field(response.error_message, self._fields))
                chunk = _parse(response.infer_response)
                yield chunk
                if chunk.final:
                    return
        except asyncio.CancelledError:
            if self.cancelled:  # we cancelled the call (grpc.aio raises CancelledError to its reader)
                return
            raise
        except grpc.aio.AioRpcError as exc:
            if exc.code() == grpc.StatusCode.CANCELLED and self.cancelled:
                return
            raise BackendError(
                f"Triton stream failed: {exc.code().name}: {exc.details()}",
                unavailable=exc.code() == grpc.StatusCode.UNAVAILABLE,
            ) from None
        finally:
            self._done.set()

    def cancel(self) -> None:
        """Stop the request: cancel the gRPC call and, through an ensemble, tell the engine to stop.

        Triton cancels a request between ensemble steps only (it does not reach the decoupled
        ``tensorrt_llm`` step already generating, Triton 2.51, docs ``request_cancellation.md``), so for an
        ensemble a ``stop`` request with the same request id goes to the engine model (TensorRT-LLM's
        ``stop`` input; the ensemble passes its request id to every step). The BLS notices the cancelled
        call itself and stops its engine request.
        """
        if not self._done.is_set():
            self.cancelled = True
            self._call.cancel()
            self._done.set()
            if self._on_cancel is not None:
                self._on_cancel()


class TritonBackend:
    """A Triton model (ensemble or BLS) that generates text, reached over gRPC.

    Args:
        url: ``host:port`` of Triton's gRPC endpoint.
        model: the model to send requests to (``ensemble`` or ``tensorrt_llm_bls``).
    """

    def __init__(self, url: str, model: str = "ensemble", engine_model: str | None = "tensorrt_llm") -> None:
        self.url = url
        self.model = model
        self.engine_model = engine_model
        self.info: ModelInfo | None = None
        self.engine_info: ModelInfo | None = None
        self._stop_tasks: set[asyncio.Task[None]] = set()
        self._client: Any = None
        self._stub: Any = None
        self._outputs: list[Any] = []
        self._accepts: set[str] = set()

    async def open(self) -> ModelInfo:
        """Connect and read the model's configuration.

        Raises:
            BackendError: Triton is unreachable (``unavailable``) or does not serve the model.
        """
        import tritonclient.grpc.aio as grpcaio
        from tritonclient.grpc import service_pb2, service_pb2_grpc
        from tritonclient.utils import InferenceServerException

        self._pb = service_pb2
        self._client = grpcaio.InferenceServerClient(self.url)
        try:
            config = (await self._client.get_model_config(self.model, as_json=True))["config"]
        except InferenceServerException as exc:
            text = exc.message() or str(exc)
            unavailable = "UNAVAILABLE" in str(exc.status()) or "failed to connect" in text.lower()
            raise BackendError(
                f"Triton at {self.url}: cannot read model '{self.model}': {text}", unavailable=unavailable
            ) from None
        self.info = ModelInfo.from_config(config)
        self._stub = service_pb2_grpc.GRPCInferenceServiceStub(self._client._channel)
        if config.get("platform") == "ensemble" and self.engine_model:
            try:
                engine = (await self._client.get_model_config(self.engine_model, as_json=True))["config"]
                info = ModelInfo.from_config(engine)
                self.engine_info = info if "stop" in info.inputs else None
            except InferenceServerException:
                self.engine_info = None  # no engine model of that name: disconnects only cancel the call
        self._outputs = [name for name in OUTPUTS if name in self.info.outputs]
        if "text_output" not in self._outputs:
            raise BackendError(
                f"model '{self.model}' has no text_output output; serve the ensemble or "
                "tensorrt_llm_bls (--triton-model)"
            )
        return self.info

    async def close(self) -> None:
        if self._client is not None:
            await self._client.close()
            self._client = None

    async def ready(self) -> bool:
        """True when Triton is live and the model is ready."""
        if self._client is None:
            return False
        try:
            return bool(await self._client.is_server_live() and await self._client.is_model_ready(self.model))
        except Exception:  # noqa: BLE001 - any failure means not ready
            return False

    @property
    def streams(self) -> bool:
        """Whether the model is decoupled (can stream); a non-decoupled one answers every request at once."""
        return bool(self.info is not None and self.info.decoupled)

    def accepts(self, field_name: str) -> bool:
        """Whether the model has an input for request field ``field_name`` (directly or by alias)."""
        assert self.info is not None
        return self.info.accepts(field_name)

    def build_request(self, fields: Mapping[str, Any], request_id: str) -> Any:
        """The ``ModelInferRequest`` for ``fields`` (ensemble field names; None values are left out).

        Raises:
            ClientError: a field the model has no input for or a value that does not fit its dtype (key =
                the field).
        """
        assert self.info is not None
        return self._request(self.info, fields, request_id, self._outputs)

    def _request(self, info: ModelInfo, fields: Mapping[str, Any], request_id: str, outputs: Any) -> Any:
        arrays = prepare_inputs(info, {k: v for k, v in fields.items() if v is not None})
        pb = self._pb
        req = pb.ModelInferRequest(model_name=info.name, id=request_id)
        for name, arr in arrays.items():
            spec = info.inputs[name]
            tensor = req.inputs.add()
            tensor.name = name
            tensor.datatype = spec.wire_type
            tensor.shape.extend(arr.shape)
            if spec.wire_type == "BYTES":
                req.raw_input_contents.append(b"".join(struct.pack("<I", len(v)) + v for v in arr.flat))
            else:
                req.raw_input_contents.append(np.ascontiguousarray(arr).tobytes())
        for name in outputs:
            req.outputs.add().name = name
        req.parameters["triton_enable_empty_final_response"].bool_param = True
        return req

    def stop_engine(self, request_id: str) -> None:
        """Send ``stop`` for ``request_id`` to the engine model (in the background; errors are ignored)."""
        if self.engine_info is None:
            return
        info = self.engine_info
        fields = {"input_ids": [0], "input_lengths": 1, "request_output_len": 1, "stop": True, "streaming": True}
        fields = {k: v for k, v in fields.items() if k in info.inputs}

        async def run() -> None:
            done = asyncio.Event()
            request = self._request(info, fields, request_id, ())

            async def requests() -> AsyncIterator[Any]:
                yield request
                await done.wait()

            try:
                async for response in self._stub.ModelStreamInfer(requests()):
                    params = response.infer_response.parameters
                    if response.error_message or (
                        "triton_final_response" in params and params["triton_final_response"].bool_param
                    ):
                        break
            except Exception:  # noqa: BLE001 - best effort: the request may have finished already
                pass
            finally:
                done.set()

        task = asyncio.ensure_future(run())
        self._stop_tasks.add(task)
        task.add_done_callback(self._stop_tasks.discard)

    def generate(self, fields: Mapping[str, Any], request_id: str) -> GenerationStream:
        """Send one request on a new gRPC stream; returns its responses.

        Raises:
            ClientError: see :meth:`build_request` (nothing was sent).
        """
        request = self.build_request(fields, request_id)
        done = asyncio.Event()

        async def requests() -> AsyncIterator[Any]:
            yield request
            await done.wait()  # keep the write side open until the last response (half-close = end of stream)

        call = self._stub.ModelStreamInfer(requests())
        on_cancel = (lambda: self.stop_engine(request_id)) if self.engine_info is not None else None
        return GenerationStream(call, done, self.info.inputs if self.info else (), on_cancel)


__all__ = ["BackendError", "Chunk", "ClientError", "GenerationStream", "TritonBackend", "error_field"]
