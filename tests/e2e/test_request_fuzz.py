"""Fuzz of the request path through a real tritonserver (issue 13: items 8-12 and the fuzz test).

One module-scoped server: the synthetic engine (deterministic tokens, so every good answer is known
exactly: ``synthetic_token_ids``) behind the real preprocessing/postprocessing/BLS models and the
packaged Mistral v1 tokenizer. Hypothesis draws HTTP ``/generate`` bodies for the ensemble and the BLS:
prompts of any text, every numeric field with values of the JSON type the input takes (integers within
the input's integer type, reals of any size up to ±1e39) or left out. The oracle is
repo_builder/runtime/limits.py plus the engine's lengths: a request that keeps every limit must get 200
and exactly the expected text; any other must get HTTP 400 whose error names a field the request sent,
with no Python exception name in it. After every example a good request must still succeed.

Outside the fuzz (Triton's front end answers before any model runs, documented in docs/reliability.md):
integers beyond the input's type are wrapped (2^32 + 5 -> 5), JSON of the wrong type gets a 500
"Unable to parse 'data'". NaN cannot be written in JSON; it is sent over gRPC below.
"""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import pytest
from conftest import wait_for
from e2e_support import grpc_input, http_generate

pytestmark = pytest.mark.server

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from repo_builder.runtime.limits import LIMITS  # noqa: E402
from repo_builder.runtime.numeric_ranges import INT32_MAX, UINT64_MAX  # noqa: E402

MAX_INPUT_LEN, MAX_SEQ_LEN, VOCAB = 48, 96, 32000
INT32 = (-INT32_MAX - 1, INT32_MAX)
INT_FIELDS = ["max_tokens", "num_return_sequences", "beam_width", "top_k", "min_tokens", "end_id", "pad_id"]
REAL_FIELDS = ["temperature", "top_p", "repetition_penalty", "presence_penalty", "frequency_penalty", "length_penalty"]
#: every request asks for the generated text alone (the repository's default may echo the prompt, as NVIDIA's)
GOOD = {"text_input": "What is machine learning?", "max_tokens": 8, "exclude_input_in_output": True}
EXCEPTION_NAMES = (
    "Traceback",
    "OverflowError",
    "ValueError",
    "TypeError",
    "KeyError",
    "IndexError",
    "AttributeError",
    "RuntimeError",
)


@pytest.fixture(scope="module")
def served(tmp_path_factory, render_repo_module, serve_module):
    import transformers

    from repo_builder.testing import packaged_tokenizer

    base = tmp_path_factory.mktemp("fuzz")
    tok_dir = packaged_tokenizer("mistral-v1", base / "tokenizer")
    engine = base / "engine"
    engine.mkdir()
    (engine / "synthetic_engine.json").write_text(
        json.dumps(
            {"vocab_size": VOCAB, "max_batch_size": 8, "max_input_len": MAX_INPUT_LEN, "max_seq_len": MAX_SEQ_LEN}
        )
    )
    repo = render_repo_module(engine, tok_dir, streaming=True, name="fuzz")
    tok = transformers.AutoTokenizer.from_pretrained(str(tok_dir))
    with serve_module(repo) as srv:
        yield srv, tok


def expected_text(tok, body: dict[str, Any]) -> str:
    from repo_builder.runtime.synthetic import synthetic_token_ids

    ids = tok(body["text_input"])["input_ids"]
    end_id = body.get("end_id", tok.eos_token_id)
    out = synthetic_token_ids(ids, body["max_tokens"], VOCAB, end_id=end_id, seed=body.get("seed"))
    return tok.decode(out, skip_special_tokens=True)


def keeps_every_limit(tok, body: dict[str, Any]) -> bool:
    """The oracle: True when the server must answer 200 (limits.py, FP32 rounding, the engine's lengths)."""
    for name, value in body.items():
        spec = LIMITS.get(name)
        if spec is None:
            continue
        if spec.kind == "float":
            value = float(np.float32(value)) if abs(value) < 3.5e38 else math.inf
            if not math.isfinite(value):
                return False
        low_ok = value > spec.low if spec.low_open else value >= spec.low
        if not (low_ok and value <= spec.high):
            return False
    if body.get("beam_width", 1) != 1 or body.get("num_return_sequences", 1) != 1:
        return False  # the CPU engines generate one sequence (max_beam_width 1)
    if not body["text_input"]:
        return False
    n_prompt = len(tok(body["text_input"])["input_ids"])
    return n_prompt <= MAX_INPUT_LEN and n_prompt + body["max_tokens"] <= MAX_SEQ_LEN


reals = st.one_of(
    st.floats(-1e39, 1e39, allow_nan=False, allow_infinity=False),
    st.sampled_from([0.0, -0.0, 1.0, 0.5, 1e-45, 3.4e38, 3.5e38, -1.0, 2.0]),
)
ints = st.one_of(st.integers(*INT32), st.integers(-3, 140))
#: values inside each field's range (what a client usually sends)
VALID = {
    "max_tokens": st.integers(1, 40),
    "num_return_sequences": st.just(1),
    "beam_width": st.just(1),
    "top_k": st.integers(0, 50),
    "min_tokens": st.integers(0, 8),
    "end_id": st.integers(-1, VOCAB - 1),
    "pad_id": st.integers(0, VOCAB - 1),
    "temperature": st.floats(0, 2),
    "top_p": st.floats(0, 1),
    "repetition_penalty": st.floats(0.5, 2),
    "presence_penalty": st.floats(-2, 2),
    "frequency_penalty": st.floats(-2, 2),
    "length_penalty": st.floats(-2, 2),
    "seed": st.integers(0, UINT64_MAX),
}
#: per field: left out, a usual value, or (one time in ten) anything of the input's JSON type
CHOICE = st.sampled_from(["absent"] * 9 + ["valid"] * 9 + ["wild"] * 2)
PROMPTS = st.one_of(
    st.sampled_from(["Hello", "What is machine learning?", "Tell me about forests", "日本語のテキスト"]),
    st.text(min_size=1, max_size=30),
    st.sampled_from(["", " ", "\n", "🙂" * 5, "word " * 40]),
)


@st.composite
def bodies(draw) -> dict[str, Any]:
    body: dict[str, Any] = {
        "text_input": draw(PROMPTS),
        "exclude_input_in_output": True,
        "max_tokens": draw(ints if draw(CHOICE) == "wild" else VALID["max_tokens"]),
    }
    for name in [*INT_FIELDS[1:], *REAL_FIELDS, "seed"]:
        choice = draw(CHOICE)
        if choice == "valid":
            body[name] = draw(VALID[name])
        elif choice == "wild":
            body[name] = draw(reals if name in REAL_FIELDS else st.integers(0, UINT64_MAX) if name == "seed" else ints)
    return body


@pytest.mark.parametrize("model", ["ensemble", "tensorrt_llm_bls"])
def test_fuzz_every_answer_is_right_or_a_400_naming_a_field(served, model):
    server, tok = served
    seen = {"answered": 0, "refused": 0}

    @settings(
        max_examples=60,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )
    @given(bodies())
    def one(body):
        status, reply = http_generate(server, model, body)
        if keeps_every_limit(tok, body):
            assert status == 200, (body, reply)
            assert reply["text_output"] == expected_text(tok, body), body
            seen["answered"] += 1
        else:
            seen["refused"] += 1
            assert status == 400, (body, status, reply)
            error = reply.get("error", "")
            assert any(name in error for name in body), (body, error)
            assert not any(word in error for word in EXCEPTION_NAMES), (body, error)
        status, reply = http_generate(server, model, GOOD)
        assert status == 200 and reply["text_output"] == expected_text(tok, GOOD), reply

    one()
    print(f"{model}: {seen}")
    assert seen["answered"] >= 5 and seen["refused"] >= 5, seen  # both sides of the oracle were tried


@pytest.mark.parametrize("model", ["ensemble", "tensorrt_llm_bls"])
@pytest.mark.parametrize("field", ["temperature", "repetition_penalty", "top_p"])
def test_nan_over_grpc_is_refused_naming_the_field(served, model, field):
    import queue

    import tritonclient.grpc as grpcclient

    server, _ = served
    inputs = [
        grpc_input("text_input", np.array([[b"Hello"]], dtype=object)),
        grpc_input("max_tokens", np.array([[4]], np.int32)),
    ]
    nan = grpcclient.InferInput(field, [1, 1], "FP32")
    nan.set_data_from_numpy(np.array([[np.nan]], np.float32))
    events: queue.Queue[tuple[Any, Any]] = queue.Queue()
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        client.start_stream(callback=lambda result, error: events.put((result, error)))
        client.async_stream_infer(model, [*inputs, nan], request_id=f"nan-{field}")
        _, error = events.get(timeout=60)
        client.stop_stream()
    # a gRPC stream carries only the error text (ModelStreamInferResponse.error_message), not its code;
    # the code (INVALID_ARG -> HTTP 400) is checked over HTTP by the fuzz above
    assert error is not None
    assert field in error.message() and "NaN" in error.message(), error.message()
    assert not any(word in error.message() for word in EXCEPTION_NAMES)


def _post_ids(server, ids: list[int]) -> tuple[int, str]:
    import urllib.error
    import urllib.request

    body = {
        "inputs": [
            {"name": "TOKENS_BATCH", "datatype": "INT32", "shape": [1, 1, len(ids)], "data": ids},
            {"name": "SEQUENCE_LENGTH", "datatype": "INT32", "shape": [1, 1], "data": [len(ids)]},
        ]
    }
    req = urllib.request.Request(
        f"{server.http_url}/v2/models/postprocessing/infer",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def test_negative_token_id_is_a_400_from_postprocessing(served):
    """Item 12 on the server: postprocessing called directly with id -5 (never engine output)."""
    server, _ = served
    code, text = _post_ids(server, [1, -5])
    assert code == 400, text
    assert "TOKENS_BATCH" in text and "token id -5" in text and "OverflowError" not in text


def test_token_ids_past_the_tokenizer_decode_as_nothing_and_are_logged_once(served):
    """Issue 28: ids at or past the tokenizer's size (an engine vocabulary padded past the tokenizer's)
    are engine output the client never sent: they decode as nothing, the request succeeds, and the log
    says so once."""
    server, tok = served
    good = tok.encode("Paris", add_special_tokens=False)
    for bad in (VOCAB, VOCAB + 63, INT32_MAX):
        code, text = _post_ids(server, [good[0], bad, *good[1:]])
        assert code == 200, text
        assert json.loads(text)["outputs"][0]["data"] == [tok.decode(good)]
    message = f"token id {VOCAB} (1 id(s) in this sequence) at or past the tokenizer's size {VOCAB}"
    # the Python backend hands log lines to tritonserver asynchronously: wait until it has written this one

    def logged() -> str | None:
        text = server.log_tail(5000)
        return text if message in text else None

    log = wait_for(logged, 30, "the undecodable-id log line")
    assert log.count(message) == 1


#: Engine inputs NVIDIA's ensemble does not expose but its C++ backend reads (contract.yaml backend_reads): a text
#: client now reaches them through the ensemble and the BLS, under the engine's names and read dtypes.
ENGINE_KNOBS = {
    "early_stopping": 1,  # TYPE_INT32, as the C++ backend reads it (NVIDIA's template says TYPE_BOOL)
    "beam_search_diversity_rate": 0.0,
    "runtime_top_p_decay": 0.5,
    "runtime_top_p_reset_ids": 1,
    "retention_token_range_starts": [0],
    "retention_token_range_ends": [4],
    "retention_token_range_priorities": [80],
    "retention_token_range_durations_ms": [1000],
    "retention_decode_priority": 50,
    "retention_decode_duration_ms": 1000,
}


@pytest.mark.parametrize("model", ["ensemble", "tensorrt_llm_bls"])
def test_engine_inputs_reach_the_engine_from_the_text_front_doors(served, model):
    srv, tok = served
    status, body = http_generate(srv, model, {**GOOD, **ENGINE_KNOBS})
    assert status == 200, body
    assert body["text_output"] == expected_text(tok, GOOD)
    # lookahead reaches the engine too: the CPU engine refuses it by name (a C++ engine built for lookahead runs it)
    lookahead = {"lookahead_window_size": 4, "lookahead_ngram_size": 2, "lookahead_verification_set_size": 2}
    status, body = http_generate(srv, model, {**GOOD, **lookahead})
    assert status == 400 and "lookahead_window_size" in body.get("error", ""), body
    assert "not supported by the CPU reference/synthetic engine" in body["error"], body
