"""The llmapi profile's text front doors (repo_builder/runtime/llmapi_front.py): ensemble-named requests mapped
onto the llmapi model's inputs, inputs the llmapi contract cannot honour refused naming the input, and the llmapi
model's cumulative responses turned into the ensemble's deltas. Served for real in tests/e2e/test_llmapi.py."""

from __future__ import annotations

import numpy as np
import pytest

from repo_builder.profile.contract import load_contract
from repo_builder.runtime.errors import RequestError
from repo_builder.runtime.llmapi_front import (
    PERF_OUTPUTS,
    RENAMES,
    FrontResponder,
    front_message,
    plan_request,
)


def req(**fields):
    out = {}
    for name, value in fields.items():
        if isinstance(value, str):
            out[name] = np.array([[value.encode()]], dtype=object)
        elif isinstance(value, list):
            out[name] = np.array([[v.encode() for v in value]], dtype=object)
        elif isinstance(value, bool):
            out[name] = np.array([[value]], dtype=bool)
        elif isinstance(value, float):
            out[name] = np.array([[value]], dtype=np.float32)
        else:
            out[name] = np.array([[value]], dtype=np.int32)
    return out


def test_renames_reach_inputs_the_llmapi_model_declares():
    contract = load_contract("llmapi-1.2")
    llmapi_in = {s.name for s in contract.models["tensorrt_llm"].inputs}
    llmapi_out = {s.name for s in contract.models["tensorrt_llm"].outputs}
    front_in = {s.name for s in contract.models["ensemble"].inputs}
    front_out = {s.name for s in contract.models["ensemble"].outputs}
    assert {target for target, _ in RENAMES.values()} <= llmapi_in
    assert set(RENAMES) <= front_in
    assert set(PERF_OUTPUTS) <= llmapi_out and set(PERF_OUTPUTS.values()) <= front_out


def test_plan_maps_the_ensemble_names():
    plan = plan_request(
        req(text_input="Hi", max_tokens=5, top_k=1, temperature=0.5, stop_words=["a,b", ""], return_log_probs=True),
        decoupled=False,
        engine_decoupled=False,
    )
    ins = plan.inputs
    assert ins["text_input"].tolist() == [b"Hi"] and ins["sampling_param_max_tokens"].tolist() == [5]
    assert ins["sampling_param_top_k"].dtype == np.int32 and ins["sampling_param_temperature"].dtype == np.float32
    assert ins["sampling_param_stop"].tolist() == [b"a", b"b"]
    assert ins["streaming"].tolist() == [False] and not plan.engine_streams
    assert ins["sampling_param_exclude_input_from_output"].tolist() == [False]  # echo by default, as the ensemble
    assert "cumulative_logprob" in plan.outputs and "finish_reason" in plan.outputs
    streamed = plan_request(req(text_input="Hi", max_tokens=5, stream=True), decoupled=True, engine_decoupled=True)
    assert streamed.stream and streamed.inputs["sampling_param_exclude_input_from_output"].tolist() == [True]


@pytest.mark.parametrize(
    ("fields", "name"),
    [
        ({"max_tokens": 4}, "text_input"),
        ({"text_input": "x"}, "max_tokens"),
        ({"text_input": "x", "max_tokens": 0}, "max_tokens"),
        ({"text_input": "x", "max_tokens": 4, "stream": True}, "stream"),
        ({"text_input": "x", "max_tokens": 4, "beam_width": 2}, "beam_width"),
        ({"text_input": "x", "max_tokens": 4, "num_return_sequences": 3}, "num_return_sequences"),
        ({"text_input": "x", "max_tokens": 4, "end_id": 2}, "end_id"),
        ({"text_input": "x", "max_tokens": 4, "repetition_penalty": 1.3}, "repetition_penalty"),
        ({"text_input": "x", "max_tokens": 4, "min_tokens": 3}, "min_tokens"),
        ({"text_input": "x", "max_tokens": 4, "bad_words": ["no"]}, "bad_words"),
        ({"text_input": "x", "max_tokens": 4, "return_generation_logits": True}, "return_generation_logits"),
    ],
)
def test_what_llmapi_cannot_serve_is_refused_naming_the_input(fields, name):
    with pytest.raises(RequestError) as info:
        plan_request(req(**fields), decoupled=False, engine_decoupled=False)
    assert info.value.field == name


def test_neutral_values_are_accepted():
    plan = plan_request(
        req(
            text_input="x",
            max_tokens=4,
            beam_width=1,
            num_return_sequences=1,
            repetition_penalty=1.0,
            min_tokens=1,
            bad_words=[""],
            pad_id=0,
            length_penalty=1.5,
            return_context_logits=False,
        ),
        decoupled=False,
        engine_decoupled=False,
    )
    assert "pad_id" not in plan.inputs and "length_penalty" not in plan.inputs


def test_error_messages_use_the_front_door_names():
    text = "tensorrt_llm: input 'sampling_param_top_p': must be at most 1, got 2.0"
    assert front_message(text) == "tensorrt_llm: input 'top_p': must be at most 1, got 2.0"


def _engine(text, reason="None", **extra):
    out = {
        "text_output": np.array([text.encode()], dtype=object),
        "finish_reason": np.array([reason.encode()], dtype=object),
    }
    out.update({k: np.array([v], dtype=np.int32) for k, v in extra.items()})
    return out


def test_streaming_sends_deltas_and_holds_back_an_incomplete_character():
    r = FrontResponder(stream=True)
    got, counts = [], []
    for state in (
        _engine(" Par"),
        _engine(" Paris \ufffd"),
        _engine(" Paris \u00e9", num_output_tokens=3),
        _engine(" Paris \u00e9.", "length", num_output_tokens=4),
    ):
        out, final = r.convert(state)
        got.append((out["text_output"][0, 0].decode() if out else None, final))
        if out and "num_output_tokens" in out:
            counts.append(int(out["num_output_tokens"][0, 0]))
    assert got == [(" Par", False), ("is ", False), ("\u00e9", False), (".", True)]
    assert counts == [3, 1]  # per response in a stream (NVIDIA's backend), adding up to the total


def test_non_streaming_sends_the_last_text_once():
    r = FrontResponder(stream=False)
    assert r.convert(_engine("The capital")) == (None, False)
    out, final = r.convert(_engine("The capital is Paris", "stop", num_input_tokens=2))
    assert final and out["text_output"].tolist() == [[b"The capital is Paris"]]
    assert out["num_input_tokens"].tolist() == [[2]] and out["num_input_tokens"].dtype == np.int32
