"""The HTTP transport: Triton's generate extension (``POST /v2/models/{m}/generate`` and ``/generate_stream``,
Server-Sent Events) and the KServe v2 ``/infer`` endpoint for token-id requests (JSON tensors)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import numpy as np

from ..errors import ClientError
from ..runtime.triton_io import IOSpec
from .connection import _Connection
from .models import GenerateResult, ModelInfo, StreamEvent, _ids_of, _server_error, _text_of


class HttpTransport(_Connection):
    """HTTP side of :class:`~repo_builder.client.llm.LLMClient` (a ``requests.Session``, created at first use)."""

    def _http(self) -> Any:
        if self._session is None:
            import requests

            self._session = requests.Session()
        return self._session

    # -- HTTP ------------------------------------------------------------------------------------------
    def _http_events(
        self,
        info: ModelInfo,
        fields: dict[str, Any],
        arrays: dict[str, np.ndarray],
        endpoint: str,
        rid: str,
        res: GenerateResult,
    ) -> Iterator[StreamEvent]:
        if endpoint == "generate" and fields.get("stream") and info.decoupled:
            raise ClientError(
                f"POST /v2/models/{info.name}/generate returns exactly one response, but stream=true "
                "on a decoupled model produces many (Triton: 'generate expects model to produce exactly "
                "1 response')",
                key="stream",
                hint=f"use POST /v2/models/{info.name}/generate_stream (repo-builder generate --stream)",
            )
        body = _generate_body(info, fields, arrays, rid)
        resp = self._post_generate(info, endpoint, body, rid, res)
        with resp:
            if endpoint == "generate":
                yield _generate_event(info.name, resp, res)
                return
            yield from self._sse_events(info.name, resp, rid, res)

    def _post_generate(
        self, info: ModelInfo, endpoint: str, body: dict[str, Any], rid: str, res: GenerateResult
    ) -> Any:
        """POST ``body`` to ``/v2/models/<model>/<endpoint>`` (streamed for ``generate_stream``), setting
        ``res.start_ns`` before; returns the ``requests`` response.

        Raises:
            ClientError: the request timed out (also set as ``res.error``) or the server cannot be reached
                (``res.end_ns`` set in both cases).
        """
        import requests

        url = f"http://{self.url}/v2/models/{info.name}/{endpoint}"
        res.start_ns = time.perf_counter_ns()
        try:
            return self._http().post(
                url,
                data=json.dumps(body),
                stream=(endpoint == "generate_stream"),
                timeout=(10, self.timeout_s),
                headers={"Content-Type": "application/json"},
            )
        except requests.Timeout:
            res.end_ns = time.perf_counter_ns()
            res.error = self._timed_out(info.name, rid)
            raise res.error from None
        except requests.RequestException as exc:
            res.end_ns = time.perf_counter_ns()
            raise self._unreachable(exc) from None

    def _sse_events(self, model: str, resp: Any, rid: str, res: GenerateResult) -> Iterator[StreamEvent]:
        """The events of a ``generate_stream`` response ``resp`` (Server-Sent Events), each appended to
        ``res.events`` as it arrives; the last one is marked final once the body ends (``res.end_ns`` then).

        Raises:
            ClientError: the server answered an error (status or an ``error`` event), the stream timed out or
                broke off (each also set as ``res.error``).
        """
        import requests

        if resp.status_code != 200:
            res.end_ns = time.perf_counter_ns()
            res.error = _server_error(model, _error_text(resp.text))
            raise res.error
        index = 0
        last: StreamEvent | None = None
        lines = resp.iter_lines(chunk_size=None)
        while True:
            try:
                line = next(lines, None)
            except requests.Timeout:
                res.end_ns = time.perf_counter_ns()
                res.error = self._timed_out(model, rid)
                raise res.error from None
            except requests.RequestException as exc:  # connection lost mid-stream
                res.end_ns = time.perf_counter_ns()
                res.error = ClientError(
                    f"model '{model}': the response stream broke off after {index} event(s): {exc}", key="--url"
                )
                raise res.error from None
            if line is None:
                break
            now = time.perf_counter_ns()
            if not line.startswith(b"data:"):
                continue
            payload = _json_or_error(line[5:].decode("utf-8", errors="replace").strip())
            if "error" in payload:
                res.end_ns = now
                res.error = _server_error(model, payload["error"])
                raise res.error
            last = _event_from_json(index, now, payload, final=False)
            res.events.append(last)
            index += 1
            yield last
        # SSE has no end-of-request marker: the body's end is the final response
        res.end_ns = time.perf_counter_ns()
        if last is not None:
            last.final = True

    def _http_infer(self, info: ModelInfo, arrays: dict[str, np.ndarray], rid: str, res: GenerateResult) -> None:
        import requests

        body = {
            "id": rid,
            "inputs": [
                {
                    "name": name,
                    "shape": list(arr.shape),
                    "datatype": info.inputs[name].wire_type,
                    "data": (
                        [b.decode("utf-8") for b in arr.reshape(-1)]
                        if arr.dtype == np.object_
                        else arr.reshape(-1).tolist()
                    ),
                }
                for name, arr in arrays.items()
            ],
        }
        res.start_ns = time.perf_counter_ns()
        try:
            resp = self._http().post(
                f"http://{self.url}/v2/models/{info.name}/infer",
                data=json.dumps(body),
                timeout=(10, self.timeout_s),
                headers={"Content-Type": "application/json"},
            )
        except requests.RequestException as exc:
            raise self._unreachable(exc) from None
        now = time.perf_counter_ns()
        res.end_ns = now
        payload = _json_or_error(resp.text)
        if resp.status_code != 200 or "error" in payload:
            res.error = _server_error(info.name, payload.get("error", resp.text))
            return
        outputs = {
            o["name"]: np.asarray(o.get("data", [])).reshape(o.get("shape", [-1])) for o in payload.get("outputs", [])
        }
        res.events.append(
            StreamEvent(
                0, now, _text_of(outputs.get("text_output")), _ids_of(outputs.get("output_ids")), outputs, final=True
            )
        )


def _generate_body(info: ModelInfo, fields: dict[str, Any], arrays: dict[str, np.ndarray], rid: str) -> dict[str, Any]:
    """The JSON body of a generate request: ``id`` and each input of ``arrays`` (the validated request,
    {input name: array}) as the JSON value its field in ``fields`` had (a list stays a list)."""
    body: dict[str, Any] = {"id": rid}
    for field_name, value in fields.items():
        name = info.input_name(field_name)
        if name is not None and name in arrays:
            body[name] = _json_value(arrays[name], info.inputs[name], isinstance(value, (list, tuple)))
    for name, arr in arrays.items():  # inputs filled by prepare_inputs (empty required words)
        body.setdefault(name, _json_value(arr, info.inputs[name], True))
    return body


def _generate_event(model: str, resp: Any, res: GenerateResult) -> StreamEvent:
    """The one final event of a ``generate`` response ``resp``, appended to ``res.events`` (``res.end_ns`` set).

    Raises:
        ClientError: the server answered an error (also set as ``res.error``).
    """
    now = time.perf_counter_ns()
    payload = _json_or_error(resp.text)
    if resp.status_code != 200 or "error" in payload:
        res.end_ns = now
        res.error = _server_error(model, payload.get("error", resp.text))
        raise res.error
    event = _event_from_json(0, now, payload, final=True)
    res.events.append(event)
    res.end_ns = now
    return event


def _json_value(arr: np.ndarray, spec: IOSpec, was_list: bool) -> Any:
    """A validated array back to the JSON value Triton's generate endpoint maps onto the input."""
    flat = arr.reshape(-1)
    if spec.data_type == "TYPE_STRING":
        items = [b.decode("utf-8") for b in flat]
    else:
        items = flat.tolist()
    return items if was_list else items[0]


def _event_from_json(index: int, now: int, payload: dict[str, Any], final: bool) -> StreamEvent:
    outputs = {k: v for k, v in payload.items() if k not in ("model_name", "model_version", "id")}
    return StreamEvent(
        index, now, _text_of(outputs.get("text_output")), _ids_of(outputs.get("output_ids")), outputs, final
    )


def _json_or_error(text: str) -> dict[str, Any]:
    text = text.strip()
    if text.startswith("data:"):  # an SSE body (generate_stream answers errors with an event)
        text = text[5:].strip()
    try:
        value = json.loads(text)
    except ValueError:
        return {"error": text.strip() or "empty response body"}
    return value if isinstance(value, dict) else {"error": f"unexpected response: {text[:200]}"}


def _error_text(text: str) -> str:
    return str(_json_or_error(text).get("error", text))
