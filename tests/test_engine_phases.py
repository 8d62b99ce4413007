"""Context-only and generation-only requests on the Python engines (repo_builder/runtime/engine_phases.py), and
the disaggregated BLS flow (runtime/disagg_bls.py) driving two in-process engine models: the resumed output
equals a plain request's, token for token, streamed or not; bad phase requests fail alone, naming the field."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
from engine_fakes import FakeRequest, engine_model_config, fake_pb_utils, init_args, req_inputs

from repo_builder.runtime.disagg_bls import DisaggregatedCore, DisaggregatedSettings
from repo_builder.runtime.engine_phases import CONTEXT_PHASE_PARAMS, ContextPhase, PhasedEngineModel
from repo_builder.runtime.errors import StepError
from repo_builder.runtime.synthetic import SyntheticBackend


class PhaseRequest(FakeRequest):
    """A FakeRequest with Triton request parameters (``request.parameters()`` is their JSON text)."""

    def __init__(self, inputs: dict[str, Any], request_type: str | None = None, request_id: str = "") -> None:
        super().__init__(inputs, request_id=request_id)
        self.params = {} if request_type is None else {"request_type": request_type}

    def parameters(self) -> str:
        return json.dumps(self.params)


@pytest.fixture(scope="module")
def engine_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("synthetic_phases")
    (d / "synthetic_engine.json").write_text(
        json.dumps({"vocab_size": 500, "max_batch_size": 8, "max_input_len": 64, "max_seq_len": 256})
    )
    return d


@pytest.fixture(scope="module")
def model(engine_dir):
    cfg = engine_model_config(decoupled=True, params={"engine_dir": str(engine_dir)})
    m = PhasedEngineModel(fake_pb_utils(), init_args(cfg), SyntheticBackend.from_params)
    yield m
    m.finalize()


def run(model, request: PhaseRequest) -> list[Any]:
    assert model.execute([request]) is None
    assert request.sender.done.wait(20)
    return request.sender.sent


def ids_of(sent) -> list[int]:
    return [t for resp, _ in sent if resp is not None and resp.error is None for t in resp.tensors["output_ids"][0, 0]]


PROMPT = [5, 17, 42, 8]


@pytest.mark.parametrize("end_id", [None, 3])
def test_context_then_generation_equals_a_plain_request(model, end_id):
    extra = {"end_id": [end_id]} if end_id is not None else {}
    plain = ids_of(run(model, PhaseRequest(req_inputs(PROMPT, 12, exclude_input_in_output=[True], **extra))))
    ctx = run(model, PhaseRequest(req_inputs(PROMPT, 12, exclude_input_in_output=[True], **extra), "context_only"))
    ((resp, flags),) = ctx  # one final response, with the first token and the context phase
    assert flags == 1 and resp.error is None
    assert resp.tensors["output_ids"][0, 0].tolist() == plain[:1]
    phase = ContextPhase.decode(resp.tensors[CONTEXT_PHASE_PARAMS])
    assert phase.prompt == PROMPT and phase.tokens == plain[:1]
    gen_inputs = req_inputs(PROMPT, 12, exclude_input_in_output=[True], **extra)
    gen_inputs[CONTEXT_PHASE_PARAMS] = resp.tensors[CONTEXT_PHASE_PARAMS]
    assert ids_of(run(model, PhaseRequest(gen_inputs, "generation_only"))) == plain
    gen_inputs["streaming"] = np.array([[True]])
    streamed = run(model, PhaseRequest(gen_inputs, "generation_only"))
    assert ids_of(streamed) == plain
    assert streamed[0][0].tensors["output_ids"][0, 0].tolist() == plain[:1]  # the context's token goes out first


def test_a_one_token_request_is_finished_by_the_context_phase(model):
    ctx = run(model, PhaseRequest(req_inputs(PROMPT, 1), "context_only"))
    params = ctx[0][0].tensors[CONTEXT_PHASE_PARAMS]
    gen = req_inputs(PROMPT, 1, exclude_input_in_output=[False])
    gen[CONTEXT_PHASE_PARAMS] = params
    sent = run(model, PhaseRequest(gen, "generation_only"))
    plain = run(model, PhaseRequest(req_inputs(PROMPT, 1, exclude_input_in_output=[False])))
    assert ids_of(sent) == ids_of(plain) and len(ids_of(sent)) == len(PROMPT) + 1


@pytest.mark.parametrize(
    ("request_type", "extra", "field"),
    [
        ("generation_only", {}, "context_phase_params"),
        ("generation_only", {CONTEXT_PHASE_PARAMS: np.frombuffer(b"junk", np.uint8).reshape(1, -1)}, "context_phase"),
        ("context_and_generation", {CONTEXT_PHASE_PARAMS: np.ones((1, 3), np.uint8)}, "context_phase_params"),
        ("prefill_only", {}, "request_type"),
    ],
)
def test_bad_phase_requests_fail_alone_naming_the_field(model, request_type, extra, field):
    good = PhaseRequest(req_inputs(PROMPT, 4, streaming=[True]))
    bad = PhaseRequest({**req_inputs(PROMPT, 4), **extra}, request_type)
    assert model.execute([bad, good]) is None
    assert bad.sender.done.wait(10) and good.sender.done.wait(10)
    ((resp, _),) = bad.sender.sent
    assert f"'{field}" in resp.error.message()
    assert len(ids_of(good.sender.sent)) == 4


def test_generation_only_refuses_the_context_of_another_prompt(model):
    ctx = run(model, PhaseRequest(req_inputs(PROMPT, 4), "context_only"))
    gen = req_inputs([9, 9, 9], 4)
    gen[CONTEXT_PHASE_PARAMS] = ctx[0][0].tensors[CONTEXT_PHASE_PARAMS]
    ((resp, _),) = run(model, PhaseRequest(gen, "generation_only"))
    assert "'context_phase_params'" in resp.error.message() and "another prompt" in resp.error.message()


# ---------------------------------------------------------------------------------------------- the BLS flow
class InProcessCaller:
    """PhaseCaller over in-process engine models (what pb_utils BLS requests do inside tritonserver)."""

    def __init__(self, models: dict[str, PhasedEngineModel]) -> None:
        self.models = models
        self.calls: list[tuple[str, dict[str, str]]] = []

    def stream(self, model, inputs, parameters, outputs, request_id):
        self.calls.append((model, dict(parameters)))
        req = PhaseRequest(dict(inputs), parameters.get("request_type"), request_id)
        for resp, _flags in run(self.models[model], req):
            if resp is None:
                continue
            if resp.error is not None:
                raise StepError(model, resp.error.message(), True)
            yield {k: v for k, v in resp.tensors.items() if not outputs or k in outputs or k == CONTEXT_PHASE_PARAMS}

    def call(self, model, inputs, parameters, outputs, request_id):
        return next(iter(self.stream(model, inputs, parameters, outputs, request_id)))


def test_bls_flow_streams_what_a_plain_request_streams(model):
    caller = InProcessCaller({"context": model, "generation": model})
    outputs = tuple(engine_model_config()["output"][i]["name"] for i in range(len(engine_model_config()["output"])))
    core = DisaggregatedCore(DisaggregatedSettings("context", "generation", True, outputs), caller)
    got: list[tuple[dict[str, np.ndarray] | None, bool]] = []
    inputs = req_inputs(PROMPT, 10, streaming=[True])
    core.run(inputs, lambda out, final: got.append((None if out is None else dict(out), final)), request_id="r1")
    streamed = [t for out, _ in got if out is not None for t in out["output_ids"][0, 0]]
    plain = ids_of(run(model, PhaseRequest(inputs)))
    assert streamed == plain and got[-1] == (None, True)
    assert all(CONTEXT_PHASE_PARAMS not in out for out, _ in got if out is not None)
    assert caller.calls == [
        ("context", {"request_type": "context_only"}),
        ("generation", {"request_type": "generation_only"}),
    ]


def test_bls_flow_names_the_failing_phase(model):
    caller = InProcessCaller({"context": model, "generation": model})
    core = DisaggregatedCore(DisaggregatedSettings("context", "generation", True, ("output_ids",)), caller)
    with pytest.raises(StepError, match=r"^context: .*'input_ids'"):
        core.run(req_inputs([999_999], 4), lambda out, final: None)


def test_the_bls_forwards_reshaped_inputs_in_their_declared_shape():
    from repo_builder.runtime.disagg_bls import as_declared, reshaped_dims

    cfg = engine_model_config()
    for entry in cfg["input"]:
        if entry["name"] in ("input_lengths", "request_output_len"):
            entry["reshape"] = {"shape": []}
    dims = reshaped_dims(cfg)
    assert dims == {"input_lengths": (1,), "request_output_len": (1,)}
    got = as_declared({"input_lengths": np.array([4, 5], np.int32), "input_ids": np.ones((2, 5), np.int32)}, dims)
    assert got["input_lengths"].shape == (2, 1) and got["input_ids"].shape == (2, 5)
