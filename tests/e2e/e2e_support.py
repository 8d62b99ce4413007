"""Helpers shared by the end-to-end text tests: HTTP /generate and a gRPC stream collector."""

from __future__ import annotations

import json
import queue
import urllib.error
import urllib.request
from typing import Any

import numpy as np
import tritonclient.grpc as grpcclient


def http_generate(server, model: str, payload: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    req = urllib.request.Request(
        f"{server.http_url}/v2/models/{model}/generate",
        data=json.dumps(payload).encode(),
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(req, timeout=120) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")


def grpc_input(name: str, arr: np.ndarray) -> Any:
    wire = {"int32": "INT32", "uint32": "UINT32", "bool": "BOOL", "object": "BYTES"}
    t = grpcclient.InferInput(name, list(arr.shape), wire[str(arr.dtype)])
    t.set_data_from_numpy(arr)
    return t


class Stream:
    """One gRPC stream; responses and errors collected per request id until each id is final."""

    def __init__(self, server) -> None:
        self.client = grpcclient.InferenceServerClient(server.grpc_url)
        self.events: queue.Queue[tuple[Any, Any]] = queue.Queue()
        self.client.start_stream(callback=lambda result, error: self.events.put((result, error)))

    def send(self, model: str, inputs: list[Any], request_id: str, outputs: list[str] | None = None) -> None:
        requested = [grpcclient.InferRequestedOutput(n) for n in outputs] if outputs else None
        self.client.async_stream_infer(
            model, inputs, request_id=request_id, outputs=requested, enable_empty_final_response=True
        )

    def collect(self, pending: set[str], timeout: float = 120.0) -> tuple[dict[str, list[Any]], list[str]]:
        """({request id: [result with outputs]}, error messages) until every pending id is final or failed."""
        got: dict[str, list[Any]] = {rid: [] for rid in pending}
        errors: list[str] = []
        pending = set(pending)
        while pending:
            result, error = self.events.get(timeout=timeout)
            if error is not None:
                errors.append(str(error))
                rid = next((r for r in pending if r in str(error)), None)
                pending.discard(rid if rid is not None else sorted(pending)[0])
                continue
            response = result.get_response()
            if response.outputs:
                got[response.id].append(result)
            if response.parameters["triton_final_response"].bool_param:
                pending.discard(response.id)
        return got, errors

    def close(self) -> None:
        self.client.stop_stream()
        self.client.close()

    def collect_text(self, pending: set[str], timeout: float = 120.0) -> tuple[dict[str, list[str]], list[str]]:
        """Like :meth:`collect`, with each response reduced to its ``text_output`` delta."""
        got, errors = self.collect(pending, timeout)
        return {rid: texts(results) for rid, results in got.items()}, errors


def texts(results: list[Any]) -> list[str]:
    return [r.as_numpy("text_output").reshape(-1)[0].decode() for r in results]
