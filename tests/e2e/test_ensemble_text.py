"""End to end: text through a real tritonserver, ensemble and BLS, streamed and not.

The synthetic engine (``repo_builder/runtime/synthetic.py``) sits in the tensorrt_llm slot: its token
ids are predictable (``synthetic_token_ids``) and spread over the whole vocabulary, so one stream of a
few hundred tokens crosses many SentencePiece word boundaries (B24) and byte tokens, and with GPT-2 many
partial UTF-8 tokens (B25). The expected text is ``tokenizer.decode(predicted ids)`` offline.

Checked for a SentencePiece (LLaMA-2) and a byte-level BPE (GPT-2) tokenizer:

* streamed deltas (gRPC stream_infer) concatenate to the non-streaming text (HTTP /generate) for the same
  request, and both equal the offline decode; no delta holds U+FFFD when the text has none;
* two concurrent streams with different prompts, interleaved, each get their own text;
* a bad request (empty text_input, max_tokens 0, prompt over max_input_len) gets an error naming the
  field while a concurrent good stream completes;
* preprocessing's word lists reach the engine: a raw token-id stop word ends generation there.

Prompts whose predicted ids hit a documented detokenizer edge (a trailing incomplete UTF-8 character,
or edge 2 of repo_builder/runtime/detokenizer.py) are skipped when choosing prompts, not in asserts;
prompts whose text holds U+FFFD mid-stream (random invalid bytes) are preferred, so the hold-back of an
incomplete character runs on the server too.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

import numpy as np
import pytest
from conftest import asset
from e2e_support import Stream, grpc_input, http_generate, texts

pytestmark = pytest.mark.server

N_TOKENS = 160
MAX_INPUT_LEN = 64
TOKENIZERS = ["mistral_v1_tokenizer", "gpt2_tokenizer"]


# ---------------------------------------------------------------------------------------------- helpers
def text_inputs(prompt: str, max_tokens: int, *, stream: bool, stop_words: list[str] | None = None) -> list[Any]:
    inputs = [
        grpc_input("text_input", np.array([[prompt.encode()]], dtype=object)),
        grpc_input("max_tokens", np.array([[max_tokens]], np.int32)),
        grpc_input("stream", np.array([[stream]], bool)),
    ]
    if stop_words:
        inputs.append(grpc_input("stop_words", np.array([[w.encode() for w in stop_words]], dtype=object)))
    return inputs


# ---------------------------------------------------------------------------------------------- fixtures
@pytest.fixture(scope="module", params=TOKENIZERS)
def served(request, tmp_path_factory, render_repo_module, serve_module):
    """(server, tokenizer, prompts whose predicted text avoids the documented edges)."""
    import transformers

    from repo_builder.runtime.synthetic import synthetic_token_ids

    name = request.param
    tok_dir = asset(name)
    tok = transformers.AutoTokenizer.from_pretrained(str(tok_dir))
    vocab = len(tok)
    engine = tmp_path_factory.mktemp(f"synthetic_{name}")
    (engine / "synthetic_engine.json").write_text(
        json.dumps({"vocab_size": vocab, "max_batch_size": 8, "max_input_len": MAX_INPUT_LEN, "max_seq_len": 512})
    )
    repo = render_repo_module(
        engine,
        tok_dir,
        streaming=True,
        values={"synthetic_token_delay_ms": 1, "exclude_input_in_output": True},
        name=f"text_{name}",
    )

    def expected(prompt: str, n: int = N_TOKENS) -> list[int]:
        return synthetic_token_ids(tok(prompt)["input_ids"], n, vocab, end_id=tok.eos_token_id)

    from _text_support import byte_run_invalidated

    clean, with_replacement = [], []
    for i in range(60):
        prompt = f"Prompt number {i}: tell me a story about the sea."
        ids = expected(prompt)
        text = tok.decode(ids, skip_special_tokens=True)
        # skip the documented edges only: held tail at the very end (edge 1), byte-run invalidation (edge 2)
        if text.endswith("\ufffd") or byte_run_invalidated(tok, ids, True):
            continue
        (with_replacement if "\ufffd" in text else clean).append(prompt)
    # prefer prompts whose text holds invalid bytes mid-stream (exercises the hold-back on the server)
    prompts = (with_replacement[:2] + clean)[:3]
    assert len(prompts) == 3, "no prompt with a usable predicted text"
    with serve_module(repo) as srv:
        yield srv, tok, prompts, expected


@pytest.fixture
def stream(served):
    s = Stream(served[0])
    yield s
    s.close()


# ---------------------------------------------------------------------------------------------- tests
@pytest.mark.parametrize("model", ["ensemble", "tensorrt_llm_bls"])
def test_streamed_text_equals_non_streaming_text(served, stream, model):
    server, tok, prompts, expected = served
    for i, prompt in enumerate(prompts):
        reference = tok.decode(expected(prompt), skip_special_tokens=True)
        status, body = http_generate(server, model, {"text_input": prompt, "max_tokens": N_TOKENS})
        assert status == 200, body
        assert body["text_output"] == reference
        rid = f"{model}-{i}"
        stream.send(model, text_inputs(prompt, N_TOKENS, stream=True), rid)
        deltas, errors = stream.collect_text({rid})
        assert not errors
        assert len(deltas[rid]) > 10  # really streamed (responses may coalesce)
        assert "".join(deltas[rid]) == body["text_output"]
        if "\ufffd" not in reference:
            assert not any("\ufffd" in d for d in deltas[rid])


def test_streamed_text_over_http_generate_stream(served):
    server, tok, prompts, expected = served
    req = urllib.request.Request(
        f"{server.http_url}/v2/models/ensemble/generate_stream",
        data=json.dumps({"text_input": prompts[0], "max_tokens": N_TOKENS, "stream": True}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=120) as resp:
        events = [json.loads(line[len(b"data: ") :]) for line in resp.read().splitlines() if line.startswith(b"data: ")]
    assert len(events) > 1
    assert "".join(e["text_output"] for e in events) == tok.decode(expected(prompts[0]), skip_special_tokens=True)


def test_two_concurrent_streams_get_their_own_text(served, stream):
    server, tok, prompts, expected = served
    other = Stream(server)
    try:
        stream.send("ensemble", text_inputs(prompts[0], N_TOKENS, stream=True), "first")
        other.send("ensemble", text_inputs(prompts[1], N_TOKENS, stream=True), "second")
        got_first, errors_first = stream.collect_text({"first"})
        got_second, errors_second = other.collect_text({"second"})
    finally:
        other.close()
    assert not errors_first and not errors_second
    assert "".join(got_first["first"]) == tok.decode(expected(prompts[0]), skip_special_tokens=True)
    assert "".join(got_second["second"]) == tok.decode(expected(prompts[1]), skip_special_tokens=True)


@pytest.mark.parametrize("rid", ["dup", ""])
def test_concurrent_streams_with_one_request_id_get_their_own_text(served, rid):
    """Equal (or empty) request ids on concurrent streams, twice in a row: preprocessing asks the engine for
    perf metrics only where the id could be ambiguous (EnsembleStreamKeys), and no text mixes or carries
    over from an earlier stream of the same id."""
    server, tok, prompts, expected = served
    for _round in range(2):
        streams = [Stream(server) for _ in prompts]
        try:
            for s, prompt in zip(streams, prompts):
                s.send("ensemble", text_inputs(prompt, N_TOKENS, stream=True), rid)
            got = [s.collect_text({rid}) for s in streams]
        finally:
            for s in streams:
                s.close()
        for (texts_by_id, errors), prompt in zip(got, prompts):
            assert not errors
            assert "".join(texts_by_id[rid]) == tok.decode(expected(prompt), skip_special_tokens=True)


@pytest.mark.parametrize("rid", ["reused-id", ""])
def test_a_request_id_reused_after_its_stream_ended_needs_no_perf_metrics(served, rid):
    """One request id (or none) sent again and again, each stream running to max_tokens (as a benchmark's
    requests do): preprocessing and postprocessing share the stream ledger (two stub processes, one
    /dev/shm file), so once postprocessing has counted a stream to its end the id is keyed alone again:
    every response is text_output only (no perf metrics asked of the engine), and each stream's text
    starts afresh."""
    server, tok, prompts, expected = served
    prompt = next((p for p in prompts if len(expected(p)) == N_TOKENS), None)
    if prompt is None:
        pytest.skip("every chosen prompt's synthetic ids reach the end id before max_tokens")
    want = tok.decode(expected(prompt), skip_special_tokens=True)
    for _round in range(3):
        s = Stream(server)
        try:
            s.send("ensemble", text_inputs(prompt, N_TOKENS, stream=True), rid)
            got, errors = s.collect({rid})
        finally:
            s.close()
        assert not errors
        assert {o.name for r in got[rid] for o in r.get_response().outputs} == {"text_output"}
        assert "".join(texts(got[rid])) == want


def test_perf_metrics_reach_the_client_only_when_asked(served, stream):
    """NVIDIA's per-response semantics: without return_perf_metrics an ensemble response holds text_output
    only (no zero-filled logits or perf metrics); with it, the engine's timing comes along."""
    server, tok, prompts, expected = served
    asked = [*text_inputs(prompts[0], 8, stream=True), grpc_input("return_perf_metrics", np.array([[True]], bool))]
    stream.send("ensemble", text_inputs(prompts[0], 8, stream=True), "perf-not-asked")
    stream.send("ensemble", asked, "perf-asked")
    got, errors = stream.collect({"perf-not-asked", "perf-asked"})
    assert not errors
    names = {rid: {o.name for r in results for o in r.get_response().outputs} for rid, results in got.items()}
    assert names["perf-not-asked"] == {"text_output"}
    assert {"text_output", "arrival_time_ns", "first_token_time_ns", "kv_cache_reused_blocks"} <= names["perf-asked"]
    assert not names["perf-asked"] & {"context_logits", "generation_logits", "cum_log_probs"}
    arrival = {int(r.as_numpy("arrival_time_ns")[0][0]) for r in got["perf-asked"]}
    assert len(arrival) == 1 and arrival.pop() > 0


@pytest.mark.parametrize(
    "bad,field",
    [
        ({"text_input": ""}, "text_input"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"text_input": "word " * 200}, "text_input"),
    ],
)
def test_bad_request_fails_alone_while_a_stream_completes(served, stream, bad, field):
    server, tok, prompts, expected = served
    stream.send("ensemble", text_inputs(prompts[2], N_TOKENS, stream=True), "good")
    payload = {"text_input": prompts[0], "max_tokens": 8, **bad}
    status, body = http_generate(server, "ensemble", payload)
    assert status >= 400 and f"{field}:" in body.get("error", ""), body
    if field == "text_input" and bad["text_input"]:
        assert f"max_input_len of {MAX_INPUT_LEN}" in body["error"]
    got, errors = stream.collect_text({"good"})
    assert not errors
    assert "".join(got["good"]) == tok.decode(expected(prompts[2]), skip_special_tokens=True)


def test_raw_token_id_stop_word_reaches_the_engine(served):
    """stop_words element "[id]" (preprocessing's raw-id syntax) stops generation at that token."""
    server, tok, prompts, expected = served
    ids = expected(prompts[0])
    stop_at = next(i for i in range(5, len(ids)) if ids[i] not in ids[:i])
    status, body = http_generate(
        server, "ensemble", {"text_input": prompts[0], "max_tokens": N_TOKENS, "stop_words": [f"[{ids[stop_at]}]"]}
    )
    assert status == 200, body
    # TensorRT-LLM keeps the stop sequence in the output
    assert body["text_output"] == tok.decode(ids[: stop_at + 1], skip_special_tokens=True)
