"""Client input building from served model configs (no server): dtypes, shapes, aliases, client-side checks.

The configs are the JSON form Triton returns from GET /v2/models/{model}/config, built from this project's
tensor contracts (trtllm-1.2: INT32 max_tokens, text_input [1], max_batch_size > 0; trtllm-0.5: UINT32,
[-1], required bad_words/stop_words).
"""

from __future__ import annotations

import numpy as np
import pytest

from repo_builder.client import GenerateRequest, GenerateResult, ModelInfo, StreamEvent, check_request, prepare_inputs
from repo_builder.errors import ClientError
from repo_builder.profile.contract import load_contract


def _config(profile: str, model: str, max_batch_size: int, decoupled: bool) -> dict:
    contract = load_contract(profile)
    inputs = []
    for spec in contract.models[model].inputs:
        inputs.append(
            {
                "name": spec.name,
                "data_type": spec.data_type or "TYPE_FP16",
                "dims": [str(d) for d in spec.dims],
                "optional": spec.optional,
            }
        )
    return {
        "name": model,
        "max_batch_size": max_batch_size,
        "input": inputs,
        "output": [{"name": "text_output", "data_type": "TYPE_STRING", "dims": ["-1"]}],
        "model_transaction_policy": {"decoupled": decoupled},
    }


@pytest.fixture
def new_info():
    return ModelInfo.from_config(_config("trtllm-1.2", "ensemble", 64, True))


@pytest.fixture
def old_info():
    return ModelInfo.from_config(_config("trtllm-0.5", "ensemble", 0, True))


def test_batched_model_gets_leading_batch_dim_and_config_dtypes(new_info):
    arrays = prepare_inputs(
        new_info,
        GenerateRequest(
            "hi", max_tokens=8, stop_words=["a", "bc"], top_p=0.5, min_tokens=8, seed=3, stream=True
        ).fields(),
    )
    assert arrays["text_input"].shape == (1, 1) and arrays["text_input"].dtype == np.object_
    assert arrays["text_input"][0, 0] == b"hi"
    assert arrays["max_tokens"].dtype == np.int32 and arrays["max_tokens"].tolist() == [[8]]
    assert arrays["stop_words"].shape == (1, 2)
    assert arrays["top_p"].dtype == np.float32
    assert arrays["min_tokens"].dtype == np.int32
    assert arrays["seed"].dtype == np.uint64
    assert arrays["stream"].dtype == np.bool_ and arrays["stream"].shape == (1, 1)
    assert "bad_words" not in arrays  # optional and unset: not sent


def test_old_profile_uint32_no_batch_dim_aliases_and_required_words(old_info):
    arrays = prepare_inputs(old_info, GenerateRequest("hi", max_tokens=8, min_tokens=4, seed=9).fields())
    assert arrays["max_tokens"].dtype == np.uint32 and arrays["max_tokens"].shape == (1,)
    assert "min_length" in arrays and arrays["min_length"].tolist() == [4]  # min_tokens -> min_length
    assert arrays["random_seed"].tolist() == [9]  # seed -> random_seed
    assert arrays["bad_words"].tolist() == [b""] and arrays["stop_words"].tolist() == [b""]


def test_values_that_do_not_fit_name_the_field(old_info, new_info):
    with pytest.raises(ClientError) as exc:
        prepare_inputs(old_info, {"text_input": "x", "max_tokens": 4, "end_id": -1})
    assert exc.value.key == "end_id"
    with pytest.raises(ClientError) as exc:
        prepare_inputs(new_info, {"text_input": "x", "max_tokens": 4, "temperature": "hot"})
    assert exc.value.key == "temperature"
    with pytest.raises(ClientError) as exc:
        prepare_inputs(new_info, {"text_input": "x", "max_tokens": 4, "stream": "yes"})
    assert exc.value.key == "stream"
    with pytest.raises(ClientError) as exc:
        prepare_inputs(new_info, {"text_input": "x"})
    assert exc.value.key == "max_tokens"  # required input missing
    with pytest.raises(ClientError) as exc:
        prepare_inputs(old_info, {"text_input": "x", "max_tokens": 4, "exclude_input_in_output": True})
    assert exc.value.key == "exclude_input_in_output"


def test_checks_b30_and_b29a(new_info):
    with pytest.raises(ClientError) as exc:
        check_request(new_info, {"text_input": "x", "max_tokens": 4, "stream": True, "beam_width": 4})
    assert exc.value.key == "beam_width"
    check_request(new_info, {"text_input": "x", "max_tokens": 4, "stream": False, "beam_width": 4})
    sync = ModelInfo.from_config(_config("trtllm-1.2", "ensemble", 64, False))
    with pytest.raises(ClientError) as exc:
        check_request(sync, {"text_input": "x", "max_tokens": 4, "stream": True})
    assert exc.value.key == "stream"


def test_result_counts_tokens_from_ids_or_one_tokenization():
    res = GenerateResult("ensemble", "1", "http", True, start_ns=100)
    res.events = [
        StreamEvent(0, 300, " hel", None, {}),
        StreamEvent(1, 500, "lo", None, {}),
        StreamEvent(2, 600, "", None, {}, final=True),
    ]
    res.end_ns = 600
    calls = []

    def count(text: str) -> int:
        calls.append(text)
        return 1

    assert res.count_output_tokens(count) == 1
    assert calls == [" hello"]  # the whole text once, never per chunk
    assert res.chunk_times_ns == [300, 500]  # the empty final response carries no output
    assert res.ttft_ms == pytest.approx(200 / 1e6)
    assert res.count_output_tokens() is None
    res.events[0].token_ids = [5, 6]
    res.events[1].token_ids = [7]
    assert res.count_output_tokens(count) == 3 and res.token_ids == [5, 6, 7]


@pytest.mark.parametrize(
    "field,value,shown",
    [
        ("max_tokens", 2**32 + 5, "4294967301"),
        ("max_tokens", 10**12, "1000000000000"),
        ("temperature", float("nan"), "NaN"),
        ("temperature", 1e39, "1e+39"),
        ("repetition_penalty", float("inf"), "inf"),
        ("top_p", 1.5, "1.5"),
        ("num_return_sequences", 0, "got 0"),
    ],
)
def test_values_outside_the_servers_limits_are_refused_with_the_value_given(new_info, field, value, shown):
    """Issue 13 items 8/9: Triton's HTTP front end would wrap 2**32 + 5 to 5 and turn 1e39 into inf before any
    model sees them, so the client refuses such values itself, quoting what was given."""
    with pytest.raises(ClientError) as exc:
        check_request(new_info, {"text_input": "x", "max_tokens": 4, field: value})
    assert exc.value.key == field and shown in str(exc.value)
