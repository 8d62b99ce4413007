"""End to end through a real tritonserver: the tensorrt_llm_bls model (repo_builder/runtime/bls.py).

A repository rendered by ``repo_builder.render`` with the synthetic engine in the tensorrt_llm slot (its
token ids are predictable: ``synthetic_token_ids``) and the LLaMA-2 tokenizer. The expected text is
``tokenizer.decode(predicted ids)`` offline. Checked through the BLS:

* streamed deltas (gRPC) concatenate to the non-streaming text (HTTP /generate) and the offline decode;
  engine outputs the client asks for come along;
* two concurrent streams with different prompts each get their own text;
* bad requests (empty text_input, max_tokens 0, beam_width above max_beam_width, streaming with beam
  search, a prompt over max_input_len from preprocessing) fail alone, with the field (and the failing
  step) named, while a concurrent good stream completes;
* a stop string cuts the text (streamed and not), the stream ends, and the engine request is stopped
  early through a ``stop`` request with the same request id;
* ``accumulate_tokens``: every streamed response is the whole text so far;
* a non-decoupled BLS answers /generate and refuses ``stream: true`` naming the field.
"""

from __future__ import annotations

import json
import re
import shutil
import time
from typing import Any

import numpy as np
import pytest
from conftest import asset
from e2e_support import Stream, grpc_input, http_generate, texts

pytestmark = pytest.mark.server

N_TOKENS = 120
MAX_INPUT_LEN = 64
BLS = "tensorrt_llm_bls"
BLS_ACC = "bls_accumulate"


# ---------------------------------------------------------------------------------------------- helpers
def text_inputs(prompt: str, max_tokens: int, *, stream: bool = True, **extra: Any) -> list[Any]:
    inputs = [
        grpc_input("text_input", np.array([[prompt.encode()]], dtype=object)),
        grpc_input("max_tokens", np.array([[max_tokens]], np.int32)),
        grpc_input("stream", np.array([[stream]], bool)),
    ]
    for name, value in extra.items():
        if isinstance(value, list):
            inputs.append(grpc_input(name, np.array([[w.encode() for w in value]], dtype=object)))
        elif isinstance(value, bool):
            inputs.append(grpc_input(name, np.array([[value]], bool)))
        else:
            inputs.append(grpc_input(name, np.array([[value]], np.int32)))
    return inputs


# ---------------------------------------------------------------------------------------------- fixtures
def _synthetic_engine(tmp_path_factory, vocab: int):
    engine = tmp_path_factory.mktemp("synthetic_bls")
    (engine / "synthetic_engine.json").write_text(
        json.dumps({"vocab_size": vocab, "max_batch_size": 8, "max_input_len": MAX_INPUT_LEN, "max_seq_len": 1024})
    )
    return engine


def _add_accumulating_bls(repo) -> None:
    """A second BLS in the same repository, with accumulate_tokens=true (saves a server start)."""
    src, dst = repo / BLS, repo / BLS_ACC
    shutil.copytree(src, dst)
    cfg = (dst / "config.pbtxt").read_text()
    cfg = cfg.replace(f'name: "{BLS}"', f'name: "{BLS_ACC}"')
    cfg, n = re.subn(r'(key: "accumulate_tokens"\s*value: \{ string_value: )"[^"]*"', r'\1"true"', cfg)
    assert n == 1, "accumulate_tokens parameter not found in the rendered BLS config"
    (dst / "config.pbtxt").write_text(cfg)


@pytest.fixture(scope="module")
def tok():
    import transformers

    return transformers.AutoTokenizer.from_pretrained(str(asset("mistral_v1_tokenizer")))


@pytest.fixture(scope="module")
def expected(tok):
    from repo_builder.runtime.synthetic import synthetic_token_ids

    def ids(prompt: str, n: int = N_TOKENS) -> list[int]:
        return synthetic_token_ids(tok(prompt)["input_ids"], n, len(tok), end_id=tok.eos_token_id)

    def text(prompt: str, n: int = N_TOKENS) -> str:
        return tok.decode(ids(prompt, n), skip_special_tokens=True)

    return text


@pytest.fixture(scope="module")
def prompts(expected):
    """Prompts whose predicted text has no U+FFFD (documented detokenizer edges are not under test here)."""
    chosen = []
    for i in range(60):
        prompt = f"BLS prompt {i}: what is the weather like?"
        if "\ufffd" not in expected(prompt, 400):
            chosen.append(prompt)
        if len(chosen) == 4:
            return chosen
    pytest.fail("no prompt with a clean predicted text")


@pytest.fixture(scope="module")
def server(tmp_path_factory, render_repo_module, serve_module, tok):
    engine = _synthetic_engine(tmp_path_factory, len(tok))
    repo = render_repo_module(
        engine,
        asset("mistral_v1_tokenizer"),
        streaming=True,
        values={"synthetic_token_delay_ms": 1, "exclude_input_in_output": True},
        name="bls_stream",
    )
    _add_accumulating_bls(repo)
    with serve_module(repo) as srv:
        yield srv


@pytest.fixture
def stream(server):
    s = Stream(server)
    yield s
    s.close()


# ---------------------------------------------------------------------------------------------- streaming BLS
def test_streamed_text_equals_non_streaming_text(server, stream, prompts, expected):
    for i, prompt in enumerate(prompts[:2]):
        status, body = http_generate(server, BLS, {"text_input": prompt, "max_tokens": N_TOKENS})
        assert status == 200, body
        assert body["text_output"] == expected(prompt)
        rid = f"same-{i}"
        stream.send(BLS, text_inputs(prompt, N_TOKENS), rid, outputs=["text_output", "sequence_index"])
        got, errors = stream.collect({rid})
        assert not errors
        assert len(got[rid]) == N_TOKENS  # one response per engine response
        assert "".join(texts(got[rid])) == body["text_output"]
        # one sequence: the engine sends no sequence_index (NVIDIA's backend: only for num_return_sequences > 1)
        assert all(r.as_numpy("sequence_index") is None for r in got[rid])


def test_two_concurrent_streams_get_their_own_text(server, stream, prompts, expected):
    other = Stream(server)
    try:
        stream.send(BLS, text_inputs(prompts[0], N_TOKENS), "first")
        other.send(BLS, text_inputs(prompts[1], N_TOKENS), "second")
        got_first, errors_first = stream.collect({"first"})
        got_second, errors_second = other.collect({"second"})
    finally:
        other.close()
    assert not errors_first and not errors_second
    assert "".join(texts(got_first["first"])) == expected(prompts[0])
    assert "".join(texts(got_second["second"])) == expected(prompts[1])


@pytest.mark.parametrize(
    "bad,message",
    [
        ({"text_input": ""}, "text_input:"),
        ({"max_tokens": 0}, "max_tokens:"),
        ({"beam_width": 2}, "beam_width: 2 is above max_beam_width=1"),
        ({"beam_width": 2, "stream": True}, "beam_width:"),
        ({"text_input": "word " * 200}, "preprocessing:"),  # a step's error carries the step's name
    ],
)
def test_bad_request_fails_alone_while_a_stream_completes(server, stream, prompts, expected, bad, message):
    stream.send(BLS, text_inputs(prompts[2], N_TOKENS), "good")
    status, body = http_generate(server, BLS, {"text_input": prompts[0], "max_tokens": 8, **bad})
    assert status >= 400 and message in body.get("error", ""), body
    got, errors = stream.collect({"good"})
    assert not errors
    assert "".join(texts(got["good"])) == expected(prompts[2])


def _stop_string(text: str) -> tuple[str, int]:
    """A 5-character piece of ``text`` that first occurs near its middle: (stop string, position)."""
    for p in range(len(text) // 3, len(text) - 5):
        piece = text[p : p + 5]
        if piece.strip() and text.find(piece) == p:
            return piece, p
    raise AssertionError("no usable stop string")


def test_stop_string_cuts_the_stream_and_stops_the_engine(server, stream, prompts, expected):
    long = 400
    full = expected(prompts[3], long)
    stop, pos = _stop_string(expected(prompts[3], 60))
    stream.send(BLS, text_inputs(prompts[3], long, stop_words=[stop]), "stopme")
    got, errors = stream.collect({"stopme"})
    assert not errors
    assert "".join(texts(got["stopme"])) == full[: pos + len(stop)]  # the stop string is kept (NVIDIA's rule)
    assert len(got["stopme"]) < 80  # the stream ended at the stop string, not at max_tokens
    # the BLS sent the engine a stop request for its request id ("<client id>:<process tag>-<n>")
    pattern = re.compile(r"request 'stopme:[0-9a-f]+-\d+' stopped by a stop request after (\d+) generated token")
    found = None
    for _ in range(100):
        found = pattern.search(server.log_tail(400))
        if found:
            break
        time.sleep(0.1)
    assert found, server.log_tail(40)
    assert int(found.group(1)) < long

    status, body = http_generate(server, BLS, {"text_input": prompts[3], "max_tokens": long, "stop_words": [stop]})
    assert status == 200, body
    assert body["text_output"] == full[: pos + len(stop)]


def test_accumulate_tokens_sends_the_whole_text_so_far(server, stream, prompts, expected):
    stream.send(BLS_ACC, text_inputs(prompts[1], N_TOKENS), "acc")
    got, errors = stream.collect({"acc"})
    assert not errors
    chunks = texts(got["acc"])
    assert len(chunks) == N_TOKENS
    assert all(b.startswith(a) for a, b in zip(chunks, chunks[1:]))
    assert chunks[-1] == expected(prompts[1])


# ---------------------------------------------------------------------------------------------- non-decoupled
@pytest.fixture(scope="module")
def sync_server(tmp_path_factory, render_repo_module, serve_module, tok):
    engine = _synthetic_engine(tmp_path_factory, len(tok))
    repo = render_repo_module(
        engine,
        asset("mistral_v1_tokenizer"),
        streaming=False,
        values={"exclude_input_in_output": True},
        name="bls_sync",
    )
    with serve_module(repo) as srv:
        yield srv


def test_non_decoupled_bls_generates_and_refuses_streaming(sync_server, prompts, expected):
    status, body = http_generate(sync_server, BLS, {"text_input": prompts[0], "max_tokens": N_TOKENS})
    assert status == 200, body
    assert body["text_output"] == expected(prompts[0])
    stop, pos = _stop_string(expected(prompts[0], 60))
    status, body = http_generate(
        sync_server, BLS, {"text_input": prompts[0], "max_tokens": N_TOKENS, "stop_words": [stop]}
    )
    assert status == 200 and body["text_output"] == expected(prompts[0])[: pos + len(stop)], body
    status, body = http_generate(sync_server, BLS, {"text_input": prompts[0], "max_tokens": 8, "stream": True})
    assert status >= 400 and "stream:" in body.get("error", ""), body


# ---------------------------------------------------------------------------------------------- trtllm-0.5
@pytest.fixture(scope="module")
def server_05(tmp_path_factory, render_repo_module, serve_module, tok):
    engine = _synthetic_engine(tmp_path_factory, len(tok))
    repo = render_repo_module(
        engine,
        asset("mistral_v1_tokenizer"),
        profile="trtllm-0.5",
        streaming=True,
        values={"synthetic_token_delay_ms": 1},
        name="bls_05",
    )
    with serve_module(repo) as srv:
        yield srv


def test_trtllm_05_bls_streams_and_cuts_stop_strings(server_05, prompts, expected):
    """0.5 wiring (UINT32 ints, engine returns only output_ids, no stop_words_list in the engine): the
    BLS streams the right text and is the only place where string stop words take effect."""
    prompt = prompts[0]
    payload = {"text_input": prompt, "max_tokens": N_TOKENS, "bad_words": "", "stop_words": ""}
    status, body = http_generate(server_05, BLS, payload)
    assert status == 200, body
    # v0.5.0's backend always returns the prompt: the non-streaming text is prompt + generated text
    assert body["text_output"].startswith(prompt) and body["text_output"].endswith(expected(prompt))
    stop, pos = _stop_string(expected(prompt, 60))
    s = Stream(server_05)
    try:
        inputs = [
            grpc_input("text_input", np.array([[prompt.encode()]], dtype=object)),
            grpc_input("stop_words", np.array([[stop.encode()]], dtype=object)),
            grpc_input("bad_words", np.array([[b""]], dtype=object)),
            grpc_input("stream", np.array([[True]], bool)),
        ]
        inputs.append(grpc_input("max_tokens", np.array([[N_TOKENS]], np.uint32)))
        s.send(BLS, inputs, "old")
        got, errors = s.collect({"old"})
    finally:
        s.close()
    assert not errors
    assert "".join(texts(got["old"])) == expected(prompt)[: pos + len(stop)]
