"""Test doubles for the Python engines: a stand-in for ``triton_python_backend_utils`` (which exists only
inside Triton's stub process), the tensorrt_llm model config of a profile built from its contract, and a
scripted generation backend. Used by test_engine_core.py, test_reference_engine.py, test_synthetic_engine.py.
"""

from __future__ import annotations

import json
import threading
import types
from typing import Any

import numpy as np

from repo_builder.profile.contract import load_contract

DTYPE_PARAMS = {
    "logits_datatype": "TYPE_FP32",
    "encoder_input_features_data_type": "TYPE_FP16",
    "prompt_embedding_table_data_type": "TYPE_FP16",
    "lora_weights_data_type": "TYPE_FP16",
}


def engine_model_config(
    profile: str = "trtllm-1.2",
    *,
    decoupled: bool = True,
    max_batch_size: int = 8,
    params: dict[str, str] | None = None,
) -> dict[str, Any]:
    """The tensorrt_llm model config as Triton hands it to ``initialize`` (JSON form), from the contract."""
    c = load_contract(profile).models["tensorrt_llm"]
    return {
        "name": "tensorrt_llm",
        "max_batch_size": max_batch_size,
        "model_transaction_policy": {"decoupled": decoupled},
        "input": [
            {
                "name": s.name,
                "data_type": s.dtype(DTYPE_PARAMS),
                "dims": [str(d) for d in s.dims],
                "optional": s.optional,
            }
            for s in c.inputs
        ],
        "output": [
            {"name": s.name, "data_type": s.dtype(DTYPE_PARAMS), "dims": [str(d) for d in s.dims]} for s in c.outputs
        ],
        "parameters": {k: {"string_value": v} for k, v in (params or {}).items()},
    }


class FakeTensor:
    def __init__(self, name: str, arr: np.ndarray) -> None:
        self._name = name
        self._arr = np.asarray(arr)

    def name(self) -> str:
        return self._name

    def as_numpy(self) -> np.ndarray:
        return self._arr


class FakeError:
    def __init__(self, message: str) -> None:
        self._message = message

    def message(self) -> str:
        return self._message


class FakeResponse:
    def __init__(self, output_tensors: list[FakeTensor] | None = None, error: FakeError | None = None) -> None:
        self.tensors = {t.name(): t.as_numpy() for t in (output_tensors or [])}
        self.error = error


class FakeSender:
    """Records (response, flags); ``done`` is set on the final flag."""

    def __init__(self) -> None:
        self.sent: list[tuple[FakeResponse | None, int]] = []
        self.done = threading.Event()
        self.cancelled = False

    def send(self, response: FakeResponse | None = None, flags: int = 0) -> None:
        self.sent.append((response, flags))
        if flags & 1:
            self.done.set()

    def is_cancelled(self) -> bool:
        return self.cancelled

    def data(self) -> list[FakeResponse]:
        return [r for r, _ in self.sent if r is not None]


class FakeRequest:
    def __init__(self, inputs: dict[str, Any], request_id: str = "", requested: list[str] | None = None) -> None:
        self.inputs = {k: np.asarray(v) for k, v in inputs.items()}
        self._rid = request_id
        self._requested = requested
        self.sender = FakeSender()

    def request_id(self) -> str:
        return self._rid

    def requested_output_names(self) -> list[str] | None:
        """Triton lists every output when the caller names none; the fake says None (= all) then."""
        return self._requested

    def correlation_id(self) -> int:
        return 0

    def get_response_sender(self) -> FakeSender:
        return self.sender


def unary(model: Any, requests: list[FakeRequest], timeout: float = 10.0) -> list[FakeResponse]:
    """Execute ``requests`` on a non-decoupled engine model: the one final response of each, in order."""
    assert model.execute(requests) is None
    for r in requests:
        assert r.sender.done.wait(timeout)
        assert len(r.sender.sent) == 1 and r.sender.sent[0][1] == 1
    return [r.sender.sent[0][0] for r in requests]


def fake_pb_utils() -> types.SimpleNamespace:
    """The subset of triton_python_backend_utils the engine adapter uses."""

    def get_input_tensor_by_name(request: FakeRequest, name: str) -> FakeTensor | None:
        return FakeTensor(name, request.inputs[name]) if name in request.inputs else None

    logged: list[tuple[str, str]] = []
    logger = types.SimpleNamespace(
        logged=logged,
        log_info=lambda msg: logged.append(("info", msg)),
        log_warn=lambda msg: logged.append(("warn", msg)),
        log_error=lambda msg: logged.append(("error", msg)),
    )
    return types.SimpleNamespace(
        Logger=logger,
        Tensor=FakeTensor,
        InferenceResponse=FakeResponse,
        TritonError=FakeError,
        get_input_tensor_by_name=get_input_tensor_by_name,
        TRITONSERVER_RESPONSE_COMPLETE_FINAL=1,
    )


def init_args(config: dict[str, Any]) -> dict[str, str]:
    return {"model_config": json.dumps(config)}


def req_inputs(prompt: list[int], output_len: int, *, uint: bool = False, **extra: Any) -> dict[str, np.ndarray]:
    """Inputs of one request as the ensemble sends them (batch dim 1)."""
    it = np.uint32 if uint else np.int32
    out = {
        "input_ids": np.array([prompt], np.int32),
        "input_lengths": np.array([len(prompt)], np.int32),
        "request_output_len": np.array([output_len], it),
    }
    for k, v in extra.items():
        out[k] = np.asarray(v)
    return out


class ScriptedBackend:
    """Emits a fixed token list per sequence (chosen by the first prompt token); records step batches."""

    def __init__(self, scripts: dict[int, list[int]], vocab_size: int = 100, pause_after: int | None = None) -> None:
        self.scripts = scripts
        self.vocab_size = vocab_size
        self.batches: list[list[int]] = []
        self.released = 0
        self.pause_after = pause_after  # after this many steps, step() waits for `gate`
        self.paused = threading.Event()
        self.gate = threading.Event()

    def step(self, seqs):
        if self.pause_after is not None and len(self.batches) == self.pause_after:
            self.paused.set()
            assert self.gate.wait(10)
        self.batches.append([s.req.prompt[0] for s in seqs])
        out = []
        for s in seqs:
            pos = s.state or 0
            script = self.scripts[s.req.prompt[0]]
            out.append((script[pos % len(script)], -0.5))
            s.state = pos + 1
        return out

    def release(self, seq):
        self.released += 1
