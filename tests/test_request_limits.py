"""One table of request limits (repo_builder/runtime/limits.py) used the same way by preprocessing,
postprocessing, the BLS and the engines' request parser (issue 13 items 8, 9, 10, 12).

In-process, with the packaged Mistral v1 tokenizer; the same refusals through a real tritonserver (and
their HTTP status) are checked by tests/e2e/test_request_fuzz.py.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from _text_support import model_config
from engine_fakes import engine_model_config

from repo_builder.runtime.bls_request import BLSRequestError, BLSSettings
from repo_builder.runtime.bls_request import parse_request as bls_parse
from repo_builder.runtime.engine_request import EngineLimits, ModelIO
from repo_builder.runtime.engine_request import RequestError as EngineRequestError
from repo_builder.runtime.engine_request import parse_request as engine_parse
from repo_builder.runtime.limits import LIMITS, check
from repo_builder.runtime.numeric_ranges import INT32_MAX
from repo_builder.runtime.postprocessing import Postprocessor
from repo_builder.runtime.preprocessing import Preprocessor
from repo_builder.runtime.triton_io import RequestError

IO12 = ModelIO.from_config(engine_model_config("trtllm-1.2"))
ENGINE = EngineLimits(vocab_size=32000, max_input_len=64, max_seq_len=128, exclude_input_in_output=True)
BAD_REALS = [math.nan, math.inf, -math.inf, float(np.float32(1e39))]  # 1e39 reaches an FP32 input as inf


@pytest.fixture(scope="module")
def tok_dir(tmp_path_factory):
    from repo_builder.testing import packaged_tokenizer

    return packaged_tokenizer("mistral-v1", tmp_path_factory.mktemp("tok") / "mistral")


@pytest.fixture(scope="module")
def pre(tok_dir):
    return Preprocessor(model_config("trtllm-1.2", "preprocessing", {"tokenizer_dir": str(tok_dir)}))


@pytest.fixture(scope="module")
def post(tok_dir):
    return Postprocessor(model_config("trtllm-1.2", "postprocessing", {"tokenizer_dir": str(tok_dir)}))


def engine_inputs(**extra):
    tensors = {
        "input_ids": np.array([[1, 2, 3]], np.int32),
        "input_lengths": np.array([[3]], np.int32),
        "request_output_len": np.array([[4]], np.int32),
    }
    for name, value in extra.items():
        dtype = np.float32 if LIMITS[name].kind == "float" else (np.uint64 if name == "seed" else np.int32)
        tensors[name] = np.array([[value]], dtype)
    return tensors


def bls_inputs(**extra):
    tensors = {"text_input": np.array([[b"Hello"]], dtype=object), "max_tokens": np.array([[4]], np.int32)}
    for name, value in extra.items():
        tensors[name] = np.array([[value]], np.float32 if LIMITS[name].kind == "float" else np.int32)
    return tensors


# ------------------------------------------------------------------------------------- the table itself
@pytest.mark.parametrize("name", sorted({spec.field for spec in LIMITS.values() if spec.kind == "float"}))
@pytest.mark.parametrize("value", BAD_REALS, ids=["nan", "inf", "-inf", "1e39"])
def test_every_real_field_refuses_nan_and_inf(name, value):
    with pytest.raises(RequestError) as err:
        check(name, value)
    assert err.value.field == name
    assert ("NaN" if math.isnan(value) else "inf") in err.value.message


def test_a_refusal_quotes_the_value_received_and_the_range():
    with pytest.raises(RequestError) as err:
        check("max_tokens", -727379968)  # what 10**12 becomes in Triton's HTTP front end
    assert "got -727379968" in str(err.value) and "[1, 2147483647]" in str(err.value)
    assert "wraps" in err.value.hint  # tells the user why a value they did not send may show up
    assert check("max_tokens", np.int32(5)) == 5 and check("top_p", np.float32(0.5)) == 0.5


# ------------------------------------------------------------------------------------- every model, one rule
def test_preprocessing_refuses_max_tokens_out_of_range(pre):
    for value in (0, -5, -727379968):
        with pytest.raises(RequestError) as err:
            pre.process(
                {"QUERY": np.array([[b"Hello"]], dtype=object), "REQUEST_OUTPUT_LEN": np.array([[value]], np.int32)}
            )
        assert err.value.field == "max_tokens" and f"got {value}" in str(err.value)


@pytest.mark.parametrize(
    "name",
    ["temperature", "runtime_top_p", "repetition_penalty", "presence_penalty", "frequency_penalty", "len_penalty"],
)
@pytest.mark.parametrize("value", BAD_REALS, ids=["nan", "inf", "-inf", "1e39"])
def test_engine_refuses_nan_and_inf_naming_the_input_and_the_clients_field(name, value):
    with pytest.raises(EngineRequestError) as err:
        engine_parse(engine_inputs(**{name: value}), IO12, ENGINE)
    assert err.value.field == name and f"input '{name}'" in str(err.value)
    if LIMITS[name].field != name:
        assert f"({LIMITS[name].field} in the ensemble and BLS)" in str(err.value)


@pytest.mark.parametrize(
    "name", ["temperature", "top_p", "repetition_penalty", "presence_penalty", "frequency_penalty", "length_penalty"]
)
@pytest.mark.parametrize("value", BAD_REALS, ids=["nan", "inf", "-inf", "1e39"])
def test_bls_refuses_nan_and_inf_naming_the_field(name, value):
    with pytest.raises(BLSRequestError) as err:
        bls_parse(bls_inputs(**{name: value}), BLSSettings())
    assert err.value.field == name and str(err.value).startswith(f"{name}: ")


@pytest.mark.parametrize(
    "name,value",
    [
        ("top_p", 1.5),
        ("top_k", -1),
        ("temperature", -0.5),
        ("repetition_penalty", 0.0),
        ("min_tokens", -1),
        ("beam_width", 0),
    ],
)
def test_out_of_range_values_refused_by_bls_and_engine_alike(name, value):
    engine_name = LIMITS[name].engine or name
    with pytest.raises(BLSRequestError) as bls_err:
        bls_parse(bls_inputs(**{name: value}), BLSSettings())
    with pytest.raises(EngineRequestError) as engine_err:
        engine_parse(engine_inputs(**{engine_name: value}), IO12, ENGINE)
    range_words = LIMITS[name].describe()
    assert range_words in str(bls_err.value) and range_words in str(engine_err.value)


def test_num_return_sequences_zero_is_refused_by_bls_and_engine(pre):
    """Item 10: one rule. The ensemble reaches the engine's parser, the BLS its own; both refuse 0."""
    with pytest.raises(BLSRequestError, match=r"num_return_sequences: must be an integer within \[1, "):
        bls_parse(bls_inputs(num_return_sequences=0), BLSSettings())
    with pytest.raises(EngineRequestError, match=r"'num_return_sequences': must be an integer within \[1, "):
        engine_parse(engine_inputs(num_return_sequences=0), IO12, ENGINE)
    assert engine_parse(engine_inputs(num_return_sequences=1), IO12, ENGINE).rows


def test_postprocessing_refuses_negative_token_ids(post):
    """Item 12: an OverflowError from the tokenizer before; now a request error naming TOKENS_BATCH."""
    with pytest.raises(RequestError) as err:
        post.process({"TOKENS_BATCH": np.array([[[1, -5, 3]]], np.int32), "SEQUENCE_LENGTH": np.array([[3]], np.int32)})
    assert err.value.field == "TOKENS_BATCH" and "token id -5 at position [1]" in str(err.value)
    # ids past SEQUENCE_LENGTH are padding and are not looked at
    out = post.process(
        {"TOKENS_BATCH": np.array([[[1, 415, -5]]], np.int32), "SEQUENCE_LENGTH": np.array([[2]], np.int32)}
    )
    assert out["OUTPUT"].reshape(-1)[0]


def test_postprocessing_drops_ids_past_the_tokenizer_and_logs_once(post):
    """Issue 28: ids at or past len(tokenizer) (a padded engine vocabulary) decode as nothing, on the whole and
    the streaming path, logged once per instance."""
    logged: list[str] = []
    post.log = logged.append
    expected = post.decode([1, 415, 3])
    for bad in (32000, 32063, INT32_MAX):
        out = post.process(
            {"TOKENS_BATCH": np.array([[[1, bad, 415, 3]]], np.int32), "SEQUENCE_LENGTH": np.array([[4]], np.int32)}
        )
        assert out["OUTPUT"].reshape(-1)[0].decode() == expected
    streamed = post.process(
        {"TOKENS_BATCH": np.array([[[1, 415, 32001]]], np.int32), "SEQUENCE_LENGTH": np.array([[3]], np.int32)},
        request_id="r1",
    )
    assert "\ufffd" not in streamed["OUTPUT"].reshape(-1)[0].decode()
    assert len(logged) == 1 and "token id 32000" in logged[0] and "tokenizer's size 32000" in logged[0]


def test_postprocessing_never_ends_a_text_with_a_cut_character(post, tok_dir):
    """Issue 28: max_tokens cutting inside a UTF-8 character (byte-fallback ids 235, 194 of "迭") gives no
    U+FFFD: not in a whole decode, not at the end of a stream the caller flushes."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(tok_dir))
    ids = [*tok.encode("Hello", add_special_tokens=False), 235, 194]
    assert tok.decode(ids).endswith("\ufffd")  # what a plain decode would send
    seq = np.array([[len(ids)]], np.int32)
    whole = post.process({"TOKENS_BATCH": np.array([[ids]], np.int32), "SEQUENCE_LENGTH": seq})
    assert whole["OUTPUT"].reshape(-1)[0].decode() == "Hello"
    streamed = ""
    for i, t in enumerate(ids):
        out = post.process(
            {
                "TOKENS_BATCH": np.array([[[t]]], np.int32),
                "SEQUENCE_LENGTH": np.array([[1]], np.int32),
                "FLUSH": np.array([[i == len(ids) - 1]], bool),
            },
            request_id="cut-1",
        )
        streamed += out["OUTPUT"].reshape(-1)[0].decode()
    assert streamed == "Hello"
