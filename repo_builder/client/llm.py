"""The client users call: :class:`LLMClient` on top of the HTTP and gRPC transports."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from ..errors import ClientError
from .connection import _host_port
from .grpc_transport import GrpcTransport, _GrpcRouter
from .http_transport import HttpTransport, _error_text
from .inputs import check_request, prepare_inputs
from .models import DEFAULT_URLS, GenerateRequest, GenerateResult, ModelInfo, Protocol, StreamEvent, new_request_id


class LLMClient(HttpTransport, GrpcTransport):
    """A client for one Triton server, speaking HTTP or gRPC.

    Args:
        url: ``host:port`` (``http://`` accepted); default ``localhost:8000`` (HTTP) / ``localhost:8001`` (gRPC).
        protocol: ``"http"`` or ``"grpc"``.
        model: the text model (``ensemble`` or ``tensorrt_llm_bls``).
        timeout_s: seconds to wait for a request to finish (and for the connection, HTTP).

    Not thread-safe for HTTP streaming across threads sharing one session; use one client per thread
    (the benchmark does). :meth:`generate_many` runs several requests at once itself.

    Raises:
        ClientError: the server cannot be reached or does not serve ``model`` (at first use).
    """

    def __init__(
        self, url: str | None = None, protocol: Protocol = "http", model: str = "ensemble", timeout_s: float = 300.0
    ) -> None:
        if protocol not in ("http", "grpc"):
            raise ClientError(f"unknown protocol '{protocol}'", key="--protocol", hint="use http or grpc")
        self.protocol: Protocol = protocol
        self.url = _host_port(url or DEFAULT_URLS[protocol])
        self.model = model
        self.timeout_s = timeout_s
        self._infos: dict[str, ModelInfo] = {}
        self._session: Any = None
        self._grpc: Any = None
        self._router: _GrpcRouter | None = None
        self._lock = threading.Lock()

    # -- lifecycle -------------------------------------------------------------------------------------
    def __enter__(self) -> LLMClient:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        """Close the HTTP session / gRPC stream and channel."""
        if self._grpc is not None:
            try:
                self._grpc.stop_stream(cancel_requests=True)
            except Exception:  # noqa: BLE001 - closing a dead stream
                pass
            self._grpc.close()
            self._grpc = None
            self._router = None
        if self._session is not None:
            self._session.close()
            self._session = None

    # -- server ----------------------------------------------------------------------------------------
    def server_version(self) -> str:
        """The server's version string from its metadata (HTTP ``GET /v2``, gRPC ``ServerMetadata``).

        Raises:
            ClientError: the server cannot be reached (key ``--url``).
        """
        if self.protocol == "http":
            import requests

            try:
                return str(self._http().get(f"http://{self.url}/v2", timeout=30).json().get("version", "?"))
            except (requests.RequestException, ValueError) as exc:
                raise self._unreachable(exc) from None
        from tritonclient.utils import InferenceServerException

        try:
            return str(self._grpc_client().get_server_metadata(as_json=True).get("version", "?"))
        except InferenceServerException as exc:
            raise self._unreachable(exc) from None

    # -- model config ----------------------------------------------------------------------------------
    def model_info(self, model: str | None = None) -> ModelInfo:
        """The served configuration of ``model`` (default: the client's model), fetched once.

        Raises:
            ClientError: unreachable server or unknown model (key ``--model``).
        """
        model = model or self.model
        if model in self._infos:
            return self._infos[model]
        if self.protocol == "http":
            import requests

            try:
                resp = self._http().get(f"http://{self.url}/v2/models/{model}/config", timeout=30)
            except requests.RequestException as exc:
                raise self._unreachable(exc) from None
            if resp.status_code != 200:
                raise ClientError(
                    f"model '{model}' is not available on {self.url}: {_error_text(resp.text)}",
                    key="--model",
                    hint="check the name with GET /v2/repository/index",
                )
            config = resp.json()
        else:
            from tritonclient.utils import InferenceServerException

            try:
                config = self._grpc_client().get_model_config(model, as_json=True)["config"]
            except InferenceServerException as exc:
                text = exc.message() or str(exc)
                if "StatusCode.UNAVAILABLE" in str(exc.status()) or "failed to connect" in text.lower():
                    raise self._unreachable(exc) from None
                raise ClientError(
                    f"model '{model}' is not available on {self.url}: {text}",
                    key="--model",
                    hint="check the model name",
                ) from None
        info = ModelInfo.from_config(config)
        self._infos[model] = info
        return info

    def served_tokenizer_dir(self) -> str | None:
        """The ``tokenizer_dir`` of the served ``preprocessing`` model when that directory exists here.

        Lets ``generate`` count tokens with the tokenizer the server uses when client and server share a
        filesystem; None otherwise (remote server, no preprocessing model).
        """
        from pathlib import Path

        try:
            path = self.model_info("preprocessing").parameters.get("tokenizer_dir", "")
        except ClientError:
            return None
        return path if path and Path(path).is_dir() else None

    def served_end_id(self) -> int | None:
        """The ``end_id`` parameter of the served ``preprocessing`` model, or None (no such model/value)."""
        try:
            value = self.model_info("preprocessing").parameters.get("end_id", "")
        except ClientError:
            return None
        try:
            return int(value)
        except ValueError:
            return None

    # -- text generation -------------------------------------------------------------------------------
    def _prepare(self, request: GenerateRequest, model: str) -> tuple[ModelInfo, dict[str, Any], dict[str, np.ndarray]]:
        info = self.model_info(model)
        fields = request.fields()
        check_request(info, fields)
        if request.outputs is not None:
            if self.protocol != "grpc":
                raise ClientError(
                    "HTTP /generate returns every output; selecting outputs needs gRPC",
                    key="outputs",
                    hint="drop outputs or use protocol grpc",
                )
            unknown = [o for o in request.outputs if o not in info.outputs]
            if unknown:
                raise ClientError(
                    f"model '{info.name}' has no output '{unknown[0]}'",
                    key="outputs",
                    hint=f"its outputs are: {', '.join(info.outputs)}",
                )
        wants_count = request.outputs is None or "num_output_tokens" in request.outputs
        if wants_count and "return_num_output_tokens" not in fields and info.accepts("return_num_output_tokens"):
            # TRT-LLM 1.x sends num_output_tokens only when asked; the counts in results and bench come from it
            fields["return_num_output_tokens"] = True
        return info, fields, prepare_inputs(info, fields)

    def iter_events(
        self,
        request: GenerateRequest,
        model: str | None = None,
        result: GenerateResult | None = None,
        endpoint: str | None = None,
    ) -> Iterator[StreamEvent]:
        """Send ``request`` and yield each response as it arrives.

        HTTP uses ``/generate_stream`` when ``request.stream`` and ``/generate`` otherwise (``endpoint``
        forces one of the two; ``/generate`` with ``stream`` on a decoupled model is refused, B29b); gRPC
        uses the stream API for decoupled models and ``infer`` otherwise. Pass ``result`` to have it filled
        as well (start/end times, events, error). A server error is raised as :class:`ClientError` naming
        the model and carrying the server's message.
        """
        if endpoint not in (None, "generate", "generate_stream"):
            raise ClientError(f"unknown endpoint '{endpoint}'", key="endpoint", hint="generate or generate_stream")
        if endpoint is not None and self.protocol != "http":
            raise ClientError("endpoints are an HTTP notion", key="endpoint", hint="use protocol http")
        model = model or self.model
        info, fields, arrays = self._prepare(request, model)
        rid = request.request_id or new_request_id()
        res = result if result is not None else GenerateResult(model, rid, self.protocol, request.stream, 0)
        res.model, res.request_id, res.protocol, res.stream, res.prompt = (
            model,
            rid,
            self.protocol,
            request.stream,
            request.text,
        )
        if self.protocol == "http":
            endpoint = endpoint or ("generate_stream" if request.stream else "generate")
            yield from self._http_events(info, fields, arrays, endpoint, rid, res)
        else:
            yield from self._grpc_events(info, arrays, rid, res, request.outputs)

    def generate(
        self, request: GenerateRequest, model: str | None = None, endpoint: str | None = None
    ) -> GenerateResult:
        """Run ``request`` to completion. A server error is stored in ``result.error`` (not raised), so a
        benchmark can count it; client-side refusals are raised as :class:`ClientError`. ``endpoint``: see
        :meth:`iter_events`."""
        result = GenerateResult(model or self.model, request.request_id or "", self.protocol, request.stream, 0)
        try:
            for _ in self.iter_events(request, model, result, endpoint):
                pass
        except ClientError as exc:
            if result.start_ns == 0:  # refused before sending
                raise
            result.error = exc
            result.end_ns = result.end_ns or time.perf_counter_ns()
        return result

    def generate_many(self, requests: Sequence[GenerateRequest], model: str | None = None) -> list[GenerateResult]:
        """Run several requests at once; results in the order of ``requests``.

        gRPC decoupled: all are in flight together on this client's single stream and are told apart by
        request id (ids must be unique). Otherwise one thread per request with its own connection.
        """
        model = model or self.model
        if self.protocol == "grpc" and self.model_info(model).decoupled:
            ids = [r.request_id for r in requests if r.request_id]
            if len(ids) != len(set(ids)):
                raise ClientError("request ids must be unique among requests in flight on one stream", key="request_id")
            prepared = []
            for req in requests:
                info, _, arrays = self._prepare(req, model)
                rid = req.request_id or new_request_id()
                prepared.append(
                    (GenerateResult(model, rid, "grpc", req.stream, 0, prompt=req.text), arrays, req.outputs)
                )
            router = self._ensure_router()
            info = self.model_info(model)
            handles = [router.submit(info, arrays, res, outputs=outs) for res, arrays, outs in prepared]
            for handle in handles:
                try:
                    for _ in handle.events(self.timeout_s):
                        pass
                except ClientError:
                    pass  # stored in the handle's result
            return [res for res, _, _ in prepared]
        results: list[GenerateResult | None] = [None] * len(requests)
        errors: list[BaseException] = []

        def run(i: int) -> None:
            try:
                with LLMClient(self.url, self.protocol, model, self.timeout_s) as c:
                    c._infos = dict(self._infos)
                    results[i] = c.generate(requests[i])
            except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
                errors.append(exc)

        threads = [threading.Thread(target=run, args=(i,)) for i in range(len(requests))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise errors[0]
        return [r for r in results if r is not None]

    # -- token ids (B33) -------------------------------------------------------------------------------
    def infer_token_ids(
        self, input_ids: Sequence[int], request_output_len: int, model: str = "tensorrt_llm", **fields: Any
    ) -> GenerateResult:
        """Send token ids straight to the TensorRT-LLM model (no tokenizer involved).

        ``input_ids`` go as an explicit ``[1, N]`` INT32 tensor with ``input_lengths`` = ``[[N]]`` and
        ``request_output_len`` = ``[[request_output_len]]`` (dtype per the served config; the batch dimension
        only when ``max_batch_size > 0``). HTTP uses ``POST /v2/models/{model}/infer`` (binary-free JSON
        tensors), never ``/generate``; a decoupled model is refused over HTTP (Triton's ``/infer`` rejects
        decoupled models) — use ``protocol="grpc"``, which streams. Further ``fields`` are model inputs by
        exact name (``end_id``, ``streaming``, ...). Without an ``end_id`` field, the served preprocessing
        model's ``end_id`` parameter (the tokenizer's EOS id resolved at render time) is sent, as
        preprocessing does for text requests and NVIDIA's inflight_batcher_llm_client.py does from its
        tokenizer.

        Returns:
            a result whose ``token_ids`` are ``output_ids`` (may include the prompt unless
            ``exclude_input_in_output`` was sent).

        Raises:
            ClientError: empty ``input_ids`` (key ``input_ids``), decoupled model over HTTP (key ``protocol``),
                unknown field, or a server error.
        """
        ids = [int(t) for t in input_ids]
        if not ids:
            raise ClientError("input_ids is empty", key="input_ids")
        info = self.model_info(model)
        if self.protocol == "http" and info.decoupled:
            raise ClientError(
                f"model '{model}' is decoupled and Triton's HTTP /infer endpoint refuses decoupled models",
                key="protocol",
                hint="use protocol grpc for token-id requests",
            )
        values: dict[str, Any] = {
            "input_ids": ids,
            "input_lengths": len(ids),
            "request_output_len": int(request_output_len),
        }
        values.update({k: v for k, v in fields.items() if v is not None})
        if "end_id" not in values and "end_id" in info.inputs:
            end_id = self.served_end_id()  # without it the engine ignores the tokenizer's EOS
            if end_id is not None:
                values["end_id"] = end_id
        arrays = prepare_inputs(info, values)
        rid = new_request_id()
        stream = bool(fields.get("streaming"))
        result = GenerateResult(model, rid, self.protocol, stream, 0, prompt_ids=ids)
        if self.protocol == "http":
            self._http_infer(info, arrays, rid, result)
        else:
            for _ in self._grpc_events(info, arrays, rid, result):
                pass
        return result.raise_for_error()
