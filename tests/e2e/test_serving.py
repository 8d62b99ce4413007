"""End to end: `repo-builder render` of the tiny random LLaMA checkpoint (engine dir = tokenizer dir; the CPU
reference engine in the tensorrt_llm slot), served by a real tritonserver through repo_builder.server, and
asked through real HTTP (/generate) and gRPC (stream_infer) clients.

Expected outputs come from transformers' own greedy generate() on the same checkpoint, offline.
"""

from __future__ import annotations

import json
import queue
import urllib.error
import urllib.request
from typing import Any

import numpy as np
import pytest

pytestmark = pytest.mark.server

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
grpcclient = pytest.importorskip("tritonclient.grpc")

N_TOKENS = 16
PROMPTS = ["What is machine learning?", "I like the summer", "Tell me about forests"]
# prompts for the stop-word test: random weights repeat one token for a while, then switch; the test takes the
# first switch to a whole-word token it finds (which prompt has one depends on the checkpoint and vocabulary)
STOP_PROMPTS = ["I like the summer", "Once upon a time", "Deep learning is fun", "The cat sat on the mat"]


# ---------------------------------------------------------------------------------------------- fixtures
@pytest.fixture(scope="module")
def tok(tiny_llama):
    return transformers.AutoTokenizer.from_pretrained(str(tiny_llama))


@pytest.fixture(scope="module")
def offline(tiny_llama, tok):
    """{prompt: greedy generated ids} from transformers' generate() (what the server must reproduce)."""
    model = transformers.AutoModelForCausalLM.from_pretrained(str(tiny_llama), dtype=torch.float32).eval()
    out = {}
    with torch.inference_mode():
        for p in dict.fromkeys(PROMPTS + STOP_PROMPTS):
            ids = tok(p)["input_ids"]
            gen = model.generate(torch.tensor([ids]), max_new_tokens=N_TOKENS, do_sample=False, pad_token_id=0)
            out[p] = gen[0, len(ids) :].tolist()
    return out


@pytest.fixture(scope="module")
def server(tiny_llama, render_repo_module, serve_module):
    """The default render: streaming on (tensorrt_llm and tensorrt_llm_bls decoupled)."""
    repo = render_repo_module(
        tiny_llama, tiny_llama, streaming=True, values={"exclude_input_in_output": True}, name="streaming"
    )
    with serve_module(repo) as srv:
        yield srv


@pytest.fixture(scope="module")
def sync_server(tiny_llama, render_repo_module, serve_module):
    """``--no-streaming``: tensorrt_llm answers from execute() (not decoupled)."""
    repo = render_repo_module(
        tiny_llama, tiny_llama, streaming=False, values={"exclude_input_in_output": True}, name="sync"
    )
    with serve_module(repo) as srv:
        yield srv


def text_of(tok, ids: list[int]) -> str:
    return tok.decode(ids, skip_special_tokens=True)


# ---------------------------------------------------------------------------------------------- clients
def http_generate(server, model: str, payload: dict[str, Any]) -> dict[str, Any]:
    """POST /v2/models/<model>/generate; returns the JSON body (raises with the server's error text)."""
    req = urllib.request.Request(
        f"{server.http_url}/v2/models/{model}/generate",
        data=json.dumps(payload).encode(),
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(req, timeout=120) as resp:
            return json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        raise AssertionError(f"HTTP {exc.code}: {exc.read().decode()}") from exc


def _input(name: str, arr: np.ndarray) -> Any:
    wire = {"int32": "INT32", "bool": "BOOL", "object": "BYTES", "uint64": "UINT64", "float32": "FP32"}
    t = grpcclient.InferInput(name, list(arr.shape), wire[str(arr.dtype)])
    t.set_data_from_numpy(arr)
    return t


def text_inputs(
    prompt: str, max_tokens: int, *, stream: bool, stop_words: list[str] | None = None, **scalars: Any
) -> list[Any]:
    inputs = [
        _input("text_input", np.array([[prompt.encode()]], dtype=object)),
        _input("max_tokens", np.array([[max_tokens]], np.int32)),
        _input("stream", np.array([[stream]], bool)),
    ]
    if stop_words:
        inputs.append(_input("stop_words", np.array([[w.encode() for w in stop_words]], dtype=object)))
    for name, value in scalars.items():
        arr = np.array([[value]])
        if arr.dtype == np.int64:
            arr = arr.astype(np.int32)
        inputs.append(_input(name, arr))
    return inputs


class Stream:
    """One gRPC bidirectional stream; collects responses per request id until each one's final flag."""

    def __init__(self, server) -> None:
        self.client = grpcclient.InferenceServerClient(server.grpc_url)
        self.events: queue.Queue[tuple[str, Any, Any]] = queue.Queue()
        self.order: list[str] = []  # request ids in the order their final response arrived
        self.client.start_stream(callback=self._callback)

    def _callback(self, result, error):  # tritonclient calls it with the keywords result=, error=
        if error is not None:
            self.events.put(("", None, error))
            return
        rid = result.get_response().id
        self.events.put((rid, result, None))

    def send(self, model: str, inputs: list[Any], request_id: str) -> None:
        self.client.async_stream_infer(model, inputs, request_id=request_id, enable_empty_final_response=True)

    def collect(self, pending: set[str], timeout: float = 120.0) -> dict[str, list[Any]]:
        """Responses per request id (final empty ones excluded) until every id in ``pending`` is final."""
        got: dict[str, list[Any]] = {rid: [] for rid in pending}
        pending = set(pending)
        while pending:
            rid, result, error = self.events.get(timeout=timeout)
            if error is not None:
                raise AssertionError(f"stream error: {error}")
            response = result.get_response()
            if response.outputs:
                got[rid].append(result)
            if response.parameters["triton_final_response"].bool_param:
                pending.discard(rid)
                self.order.append(rid)
        return got

    def close(self) -> None:
        self.client.stop_stream()
        self.client.close()


@pytest.fixture
def stream(server):
    s = Stream(server)
    yield s
    s.close()


def joined_text(results: list[Any]) -> str:
    return "".join(r.as_numpy("text_output").reshape(-1)[0].decode() for r in results)


# ---------------------------------------------------------------------------------------------- tests
@pytest.mark.parametrize("mode", ["streaming", "sync"])
@pytest.mark.parametrize("model", ["ensemble", "tensorrt_llm_bls"])
def test_greedy_text_equals_transformers_generate(request, tok, offline, model, mode):
    server = request.getfixturevalue("server" if mode == "streaming" else "sync_server")
    for prompt in PROMPTS:
        body = http_generate(server, model, {"text_input": prompt, "max_tokens": N_TOKENS})
        assert body["text_output"] == text_of(tok, offline[prompt]), (model, prompt)
        assert not body["text_output"].startswith(prompt)  # rendered with exclude_input_in_output true


def test_engine_output_ids_equal_transformers_generate(server, tok, offline, stream):
    """The tensorrt_llm model itself, token ids in and out, streaming and not."""
    for i, prompt in enumerate(PROMPTS):
        ids = tok(prompt)["input_ids"]
        for streaming in (False, True):
            inputs = [
                _input("input_ids", np.array([ids], np.int32)),
                _input("input_lengths", np.array([[len(ids)]], np.int32)),
                _input("request_output_len", np.array([[N_TOKENS]], np.int32)),
                _input("streaming", np.array([[streaming]], bool)),
                _input("end_id", np.array([[tok.eos_token_id]], np.int32)),
            ]
            rid = f"ids-{i}-{streaming}"
            stream.send("tensorrt_llm", inputs, rid)
            results = stream.collect({rid})[rid]
            got = [t for r in results for t in r.as_numpy("output_ids")[0, 0].tolist()]
            assert got == offline[prompt], (prompt, streaming)
            assert len(results) == (N_TOKENS if streaming else 1)
            assert sum(int(r.as_numpy("sequence_length")[0, 0]) for r in results) == N_TOKENS


@pytest.mark.parametrize("model", ["ensemble", "tensorrt_llm_bls"])
def test_streamed_deltas_join_to_the_same_text(server, tok, offline, stream, model):
    prompt = PROMPTS[1]
    stream.send(model, text_inputs(prompt, N_TOKENS, stream=True), "s1")
    results = stream.collect({"s1"})["s1"]
    assert len(results) > 1  # really streamed
    assert joined_text(results) == text_of(tok, offline[prompt])


def test_concurrent_grpc_streams_get_their_own_texts(server, tok, offline, stream):
    second = Stream(server)
    try:
        stream.send("ensemble", text_inputs(PROMPTS[0], N_TOKENS, stream=True), "a")
        second.send("ensemble", text_inputs(PROMPTS[2], N_TOKENS, stream=True), "b")
        stream.send("ensemble", text_inputs(PROMPTS[1], N_TOKENS, stream=True), "c")
        first_results = stream.collect({"a", "c"})
        second_results = second.collect({"b"})
    finally:
        second.close()
    assert joined_text(first_results["a"]) == text_of(tok, offline[PROMPTS[0]])
    assert joined_text(second_results["b"]) == text_of(tok, offline[PROMPTS[2]])
    assert joined_text(first_results["c"]) == text_of(tok, offline[PROMPTS[1]])


def _stop_case(tok, offline) -> tuple[str, str, list[int]]:
    """(prompt, stop word, greedy ids): the first greedy output with a token first generated at 1 < k < N - 1
    that is a whole word ("▁word", encoded alone to just that id)."""
    for prompt in STOP_PROMPTS:
        greedy = offline[prompt]
        for k in range(2, N_TOKENS - 1):
            piece = tok.convert_ids_to_tokens(greedy[k])
            word = piece[1:]
            if (
                greedy[k] not in greedy[:k]
                and piece.startswith("\u2581")
                and word.isalpha()
                and tok.encode(word, add_special_tokens=False) == [greedy[k]]
            ):
                return prompt, word, greedy
    pytest.fail(f"no greedy output of {STOP_PROMPTS} switches to a whole-word token")


@pytest.mark.parametrize("model", ["ensemble", "tensorrt_llm_bls"])
def test_stop_word_cuts_the_output(sync_server, tok, offline, model):
    prompt, word, greedy = _stop_case(tok, offline)
    stop_ids = tok.encode(word, add_special_tokens=False)
    cut = next(i for i in range(len(greedy)) if greedy[i : i + len(stop_ids)] == stop_ids) + len(stop_ids)
    assert 1 < cut < N_TOKENS  # a real cut, neither at the start nor at the length limit
    body = http_generate(sync_server, model, {"text_input": prompt, "max_tokens": N_TOKENS, "stop_words": [word]})
    full = text_of(tok, greedy[:cut])
    # one rule on both paths: the engine's token-level stop keeps the stop sequence (TensorRT-LLM does), and
    # the BLS's string check keeps it too (NVIDIA's v0.19 BLS does): the same text, ending in the stop word
    assert body["text_output"] == full and full.endswith(word)


def test_engine_output_ids_without_decoupled_mode(sync_server, tok, offline):
    """tensorrt_llm over HTTP /infer (allowed when not decoupled): one response per request."""
    import tritonclient.http as httpclient

    client = httpclient.InferenceServerClient(sync_server.http_hostport)
    for prompt in PROMPTS:
        ids = tok(prompt)["input_ids"]
        inputs = []
        for name, arr in (
            ("input_ids", np.array([ids], np.int32)),
            ("input_lengths", np.array([[len(ids)]], np.int32)),
            ("request_output_len", np.array([[N_TOKENS]], np.int32)),
            ("exclude_input_in_output", np.array([[False]], bool)),
        ):
            t = httpclient.InferInput(name, list(arr.shape), "BOOL" if arr.dtype == bool else "INT32")
            t.set_data_from_numpy(arr)
            inputs.append(t)
        result = client.infer("tensorrt_llm", inputs)
        assert result.as_numpy("output_ids")[0, 0].tolist() == ids + offline[prompt]
        assert result.as_numpy("sequence_length").tolist() == [[len(ids) + N_TOKENS]]
    client.close()


def test_long_request_does_not_block_a_short_one(server, tok, offline, stream):
    long_prompt, short_prompt = PROMPTS[0], PROMPTS[2]
    stream.send("ensemble", text_inputs(long_prompt, 400, stream=True), "long")
    # wait until the long request produces tokens, so it is surely in flight
    rid, result, error = stream.events.get(timeout=120)
    assert error is None and rid == "long"
    stream.send("ensemble", text_inputs(short_prompt, 4, stream=True), "short")
    got = stream.collect({"long", "short"})
    assert stream.order == ["short", "long"]
    assert joined_text(got["short"]) == text_of(tok, offline[short_prompt][:4])


def test_bad_request_fails_alone_naming_the_input(server, tok, offline, stream):
    stream.send("ensemble", text_inputs(PROMPTS[1], N_TOKENS, stream=True), "good")
    stream.send("ensemble", text_inputs(PROMPTS[1], N_TOKENS, stream=False, beam_width=2), "bad")
    errors = []
    pending = {"good", "bad"}
    texts: list[str] = []
    while pending:
        rid, result, error = stream.events.get(timeout=120)
        if error is not None:
            errors.append(str(error))
            pending.discard("bad")
            continue
        if result.get_response().outputs:
            texts.append(result.as_numpy("text_output").reshape(-1)[0].decode())
        if result.get_response().parameters["triton_final_response"].bool_param:
            pending.discard(rid)
    assert len(errors) == 1 and "beam_width" in errors[0]
    assert "".join(texts) == text_of(tok, offline[PROMPTS[1]])


# ---------------------------------------------------------------------------------------------- synthetic, 0.5
@pytest.fixture(scope="module")
def synthetic_05(tmp_path_factory, render_repo_module, serve_module):
    """The synthetic engine rendered with the trtllm-0.5 profile (UINT32 integers, only output_ids)."""
    from conftest import asset

    engine = tmp_path_factory.mktemp("synthetic_engine")
    (engine / "synthetic_engine.json").write_text(
        json.dumps({"vocab_size": 32000, "max_batch_size": 8, "max_input_len": 128, "max_seq_len": 256})
    )
    tokenizer = asset("mistral_v1_tokenizer")
    repo = render_repo_module(
        engine,
        tokenizer,
        profile="trtllm-0.5",
        streaming=True,
        values={"synthetic_token_delay_ms": 1},
        name="synthetic05",
    )
    with serve_module(repo) as srv:
        yield srv, transformers.AutoTokenizer.from_pretrained(str(tokenizer))


def test_synthetic_engine_serves_the_predicted_tokens_with_the_0_5_contract(synthetic_05):
    from repo_builder.runtime.synthetic import synthetic_token_ids

    server, tok05 = synthetic_05
    prompt = "What is machine learning?"
    ids = tok05(prompt)["input_ids"]
    expected = synthetic_token_ids(ids, 12, 32000, end_id=tok05.eos_token_id)
    body = http_generate(
        server, "ensemble", {"text_input": prompt, "max_tokens": 12, "bad_words": "", "stop_words": ""}
    )
    # v0.5.0's backend always returns the prompt, and so the text starts with it
    assert body["text_output"] == tok05.decode(ids + expected, skip_special_tokens=True)

    s = Stream(server)
    try:
        inputs = [
            _input("input_ids", np.array([ids], np.int32)),
            _input("input_lengths", np.array([[len(ids)]], np.int32)),
            _input("streaming", np.array([[True]], bool)),
        ]
        out_len = grpcclient.InferInput("request_output_len", [1, 1], "UINT32")
        out_len.set_data_from_numpy(np.array([[12]], np.uint32))
        s.send("tensorrt_llm", inputs + [out_len], "syn")
        results = s.collect({"syn"})["syn"]
    finally:
        s.close()
    assert [r.as_numpy("output_ids")[0, 0].tolist() for r in results] == [
        [t] for t in synthetic_token_ids(ids, 12, 32000)
    ]
    assert {o.name for o in results[0].get_response().outputs} == {"output_ids"}


def test_client_cancellation_stops_generation(server, tok):
    """Cancelling a gRPC stream reaches the engine (response_sender.is_cancelled()): it stops early."""
    import re
    import time

    s = Stream(server)
    ids = tok(PROMPTS[0])["input_ids"]
    inputs = [
        _input("input_ids", np.array([ids], np.int32)),
        _input("input_lengths", np.array([[len(ids)]], np.int32)),
        _input("request_output_len", np.array([[480]], np.int32)),
        _input("streaming", np.array([[True]], bool)),
    ]
    s.send("tensorrt_llm", inputs, "to-cancel")
    rid, _result, error = s.events.get(timeout=120)  # generation is under way
    assert error is None and rid == "to-cancel"
    s.client.stop_stream(cancel_requests=True)
    s.client.close()
    pattern = re.compile(r"request 'to-cancel' cancelled by the client after (\d+) generated token")
    for _ in range(600):  # the engine polls is_cancelled() every 100 ms
        found = pattern.search(server.log_tail(400))
        if found:
            break
        time.sleep(0.1)
    assert found, server.log_tail(40)
    assert 1 <= int(found.group(1)) < 480
