"""End to end, profile llmapi-1.2: SmolLM2-135M-Instruct (the quickstart's model, fixture ``smollm2_dir``)
rendered with ``--profile llmapi-1.2 --streaming`` and served by a real tritonserver through the ``tensorrt_llm``
Python model, whose ``tensorrt_llm.LLM`` is repo-builder's CPU stand-in here (the reference engine's model).

One rendered repository and one server serve every check of this module. The expected text comes from
transformers' own greedy ``generate()`` on the same checkpoint in this process (fp32, the served engine's
thread count), on the raw prompt (the llmapi model applies no chat template), stopping at the tokenizer's EOS:

* NVIDIA's request shapes (inputs ``text_input``, ``sampling_param_max_tokens``, ``streaming``, ...):
  non-streaming over gRPC, the text equals the greedy text, with the prompt echoed by default
  (``sampling_param_exclude_input_from_output`` false) and not when it is true;
* streaming: several responses, each ``text_output`` the cumulative text (each a prefix of the next, as the
  LLM API streams), the last equal to the greedy text; HTTP ``generate_stream`` answers the same;
* ``return_finish_reason``: ``length`` at ``max_tokens``; ``sampling_param_stop`` cuts the text before the
  stop string and reports ``stop`` with ``stop_reason`` naming it;
* concurrent requests (in-flight batching in the stand-in) each get their own greedy text;
* a bad request (two prompts, max_tokens 0) fails alone with a message naming the input; the next one answers;
* the default, non-decoupled render (NVIDIA's ``decoupled: False``; served beside as ``tensorrt_llm_unary`` /
  ``ensemble_unary``): HTTP ``/generate`` and unary gRPC answer the greedy text, ``streaming`` is refused
  naming the input;
* cancellation: a ``stop`` request with the same request id ends a long streaming generation early with
  ``finish_reason`` ``cancelled`` (the stop request gets a CANCELLED error); a gRPC stream the client cancels
  leaves the server answering;
* perf metrics (``sampling_param_return_perf_metrics``): the KV-cache and timing outputs with their declared
  dtypes and ordered times, through ``tensorrt_llm`` and through the ensemble's names.

The text front doors (``ensemble`` and ``tensorrt_llm_bls``, Python models over ``tensorrt_llm``) in the same
server, with the engine ensemble's request shapes: non-streaming (the prompt echoed unless
``exclude_input_in_output``), streaming deltas that add up to the greedy text, HTTP ``/generate``, token counts
(``num_input_tokens`` = the tokenizer's prompt ids, ``num_output_tokens`` = max_tokens), an input the llmapi
contract cannot serve refused naming it; and ``repo-builder openai`` over the ensemble (completions, streamed and
not, and ``usage``), all equal to transformers' greedy text.
"""

from __future__ import annotations

import json
import os
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from e2e_support import Stream, greedy_reference, grpc_input, http_generate, openai_front_end

pytestmark = pytest.mark.server

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

MODEL = "tensorrt_llm"
# (prompt, max_tokens)
CASES = [("The capital of France is", 12), ("Once upon a time, there was a little", 16)]


# ---------------------------------------------------------------------------------------------- fixtures
@pytest.fixture(scope="module")
def tok(smollm2_dir: Path):
    return transformers.AutoTokenizer.from_pretrained(str(smollm2_dir))


@pytest.fixture(scope="module")
def offline(smollm2_dir, tok) -> dict[str, str]:
    """{prompt: transformers' greedy generated text (special tokens skipped)}."""
    prompts = [(tok.encode(prompt, add_special_tokens=True), max_tokens) for prompt, max_tokens in CASES]
    threads = max(1, len(os.sched_getaffinity(0)))  # as the served reference engine
    eos = tok.eos_token_id
    gens = greedy_reference(
        smollm2_dir, prompts, eos_token_id=eos, pad_token_id=tok.pad_token_id or eos, threads=threads
    )
    return {prompt: tok.decode(gen, skip_special_tokens=True) for (prompt, _), gen in zip(CASES, gens, strict=True)}


#: The default (non-decoupled) render's tensorrt_llm and ensemble, served beside the streaming ones in the same
#: server under these names (Triton serves each folder under its config's name).
UNARY = {"tensorrt_llm": "tensorrt_llm_unary", "ensemble": "ensemble_unary"}


@pytest.fixture(scope="module")
def served_repo(smollm2_dir, tmp_path_factory) -> Path:
    """The ``--streaming`` render, plus the default render's two models renamed (:data:`UNARY`): one server
    covers both transaction policies."""
    import shutil

    from repo_builder.render import render_repository

    base = tmp_path_factory.mktemp("llmapi")
    repo, unary = base / "repo", base / "unary"
    render_repository(smollm2_dir, None, repo, profile="llmapi-1.2", engine_mode="reference", streaming=True)
    render_repository(smollm2_dir, None, unary, profile="llmapi-1.2", engine_mode="reference")
    for model, name in UNARY.items():
        shutil.copytree(unary / model, repo / name)
        config = repo / name / "config.pbtxt"
        text = config.read_text().replace(f'name: "{model}"', f'name: "{name}"')
        config.write_text(text.replace('string_value: "tensorrt_llm"', f'string_value: "{UNARY["tensorrt_llm"]}"'))
    return repo


@pytest.fixture(scope="module")
def server(served_repo, serve_module):
    with serve_module(served_repo) as srv:
        yield srv


@pytest.fixture
def stream(server):
    s = Stream(server)
    yield s
    s.close()


def inputs(prompt: str | list[str], max_tokens: int, *, streaming: bool, **extra: Any) -> list[Any]:
    prompts = [prompt] if isinstance(prompt, str) else prompt
    out = [
        grpc_input("text_input", np.array([p.encode() for p in prompts], dtype=object)),
        grpc_input("sampling_param_max_tokens", np.array([max_tokens], np.int32)),
        grpc_input("streaming", np.array([streaming], bool)),
    ]
    for name, value in extra.items():
        if isinstance(value, bool):
            out.append(grpc_input(name, np.array([value], bool)))
        elif isinstance(value, list):
            out.append(grpc_input(name, np.array([v.encode() for v in value], dtype=object)))
        else:
            out.append(grpc_input(name, np.array([value], np.int32)))
    return out


def _str(result, name: str) -> str:
    return result.as_numpy(name).reshape(-1)[0].decode()


# ---------------------------------------------------------------------------------------------- tests
def test_offline_reference_is_meaningful(offline):
    """The expectations themselves: non-empty texts, different per prompt."""
    texts = [offline[p] for p, _ in CASES]
    assert all(t.strip() for t in texts) and texts[0] != texts[1]


def test_unary_equals_greedy_and_echoes_the_prompt_by_default(stream, offline):
    prompt, max_tokens = CASES[0]
    stream.send(MODEL, inputs(prompt, max_tokens, streaming=False, return_finish_reason=True), "echo")
    stream.send(
        MODEL, inputs(prompt, max_tokens, streaming=False, sampling_param_exclude_input_from_output=True), "bare"
    )
    got, errors = stream.collect({"echo", "bare"})
    assert not errors, errors
    assert [len(got["echo"]), len(got["bare"])] == [1, 1]
    echo, bare = got["echo"][0], got["bare"][0]
    assert _str(bare, "text_output") == offline[prompt]
    assert _str(echo, "text_output") == prompt + offline[prompt]
    assert _str(echo, "finish_reason") == "length"


def test_streaming_is_cumulative_and_ends_with_the_greedy_text(stream, offline):
    prompt, max_tokens = CASES[1]
    stream.send(MODEL, inputs(prompt, max_tokens, streaming=True, sampling_param_exclude_input_from_output=True), "s1")
    got, errors = stream.collect({"s1"})
    assert not errors, errors
    texts = [_str(r, "text_output") for r in got["s1"]]
    assert len(texts) > 1, texts
    for before, after in zip(texts, texts[1:], strict=False):
        assert after.startswith(before), (before, after)
    assert texts[-1] == offline[prompt]


def test_http_generate_stream_nvidia_request_shape(server, offline):
    """NVIDIA's documented request: POST .../generate_stream with text_input, sampling_param_max_tokens, streaming."""
    prompt, max_tokens = CASES[0]
    payload = {"text_input": prompt, "sampling_param_max_tokens": max_tokens, "streaming": True}
    req = urllib.request.Request(
        f"{server.http_url}/v2/models/{MODEL}/generate_stream",
        data=json.dumps(payload).encode(),
        headers={"Content-Type": "application/json"},
    )
    events = []
    with urllib.request.urlopen(req, timeout=120) as resp:
        for line in resp.read().decode().splitlines():
            if line.startswith("data:"):
                events.append(json.loads(line[5:]))
    assert events and all("error" not in e for e in events), events
    assert events[-1]["text_output"] == prompt + offline[prompt]


def test_stop_string_cuts_and_is_reported(stream, offline):
    prompt, max_tokens = CASES[1]
    words = offline[prompt].split()
    assert len(words) >= 3
    stop = words[2]
    stream.send(
        MODEL,
        inputs(
            prompt,
            max_tokens,
            streaming=False,
            sampling_param_exclude_input_from_output=True,
            sampling_param_stop=[stop],
            return_finish_reason=True,
            return_stop_reason=True,
        ),
        "stop1",
    )
    got, errors = stream.collect({"stop1"})
    assert not errors, errors
    result = got["stop1"][-1]
    text = _str(result, "text_output")
    assert text == offline[prompt][: offline[prompt].index(stop)]
    assert _str(result, "finish_reason") == "stop" and _str(result, "stop_reason") == stop


def test_concurrent_requests_each_get_their_greedy_text(stream, offline):
    for i in range(2):
        for j, (prompt, max_tokens) in enumerate(CASES):
            stream.send(
                MODEL,
                inputs(prompt, max_tokens, streaming=False, sampling_param_exclude_input_from_output=True),
                f"c{i}-{j}",
            )
    ids = {f"c{i}-{j}" for i in range(2) for j in range(len(CASES))}
    got, errors = stream.collect(ids)
    assert not errors, errors
    for rid in ids:
        prompt = CASES[int(rid.split("-")[1])][0]
        assert _str(got[rid][-1], "text_output") == offline[prompt], rid


def test_bad_request_fails_alone_naming_the_input(stream, offline):
    """Each bad request gets one error naming its input (sent one at a time: a stream error carries no id)."""
    prompt, max_tokens = CASES[0]
    for rid, request, name in (
        ("two", inputs([prompt, prompt], max_tokens, streaming=False), "text_input"),
        ("zero", inputs(prompt, 0, streaming=False), "sampling_param_max_tokens"),
    ):
        stream.send(MODEL, request, rid)
        got, errors = stream.collect({rid})
        assert len(errors) == 1 and name in errors[0] and not got[rid], (rid, errors)
    stream.send(
        MODEL, inputs(prompt, max_tokens, streaming=False, sampling_param_exclude_input_from_output=True), "good"
    )
    got, errors = stream.collect({"good"})
    assert not errors, errors
    assert _str(got["good"][-1], "text_output") == offline[prompt]


# ---------------------------------------------------------------------------------------------- front doors
def front_inputs(prompt: str, max_tokens: int, **extra: Any) -> list[Any]:
    """An engine-ensemble request (batch dimension first, NVIDIA's ensemble names)."""
    out = [
        grpc_input("text_input", np.array([[prompt.encode()]], dtype=object)),
        grpc_input("max_tokens", np.array([[max_tokens]], np.int32)),
    ]
    for name, value in extra.items():
        arr = np.array([[value]], bool if isinstance(value, bool) else np.int32)
        out.append(grpc_input(name, arr))
    return out


@pytest.mark.parametrize("front", ["ensemble", "tensorrt_llm_bls"])
def test_front_door_unary_and_streamed_equal_greedy(stream, offline, tok, front):
    prompt, max_tokens = CASES[0]
    counts = {"return_num_input_tokens": True, "return_num_output_tokens": True}
    stream.send(front, front_inputs(prompt, max_tokens, **counts), f"{front}-echo")
    stream.send(front, front_inputs(prompt, max_tokens, exclude_input_in_output=True), f"{front}-bare")
    stream.send(front, front_inputs(prompt, max_tokens, stream=True, **counts), f"{front}-stream")
    got, errors = stream.collect({f"{front}-echo", f"{front}-bare", f"{front}-stream"})
    assert not errors, errors
    echo, bare = got[f"{front}-echo"], got[f"{front}-bare"]
    assert len(echo) == len(bare) == 1
    assert _str(echo[0], "text_output") == prompt + offline[prompt]
    assert _str(bare[0], "text_output") == offline[prompt]
    n_in = len(tok.encode(prompt, add_special_tokens=True))
    assert int(echo[0].as_numpy("num_input_tokens").reshape(-1)[0]) == n_in
    assert int(echo[0].as_numpy("num_output_tokens").reshape(-1)[0]) == max_tokens
    deltas = [_str(r, "text_output") for r in got[f"{front}-stream"]]
    assert len(deltas) > 1 and "".join(deltas) == offline[prompt], deltas  # deltas, no echo, as the ensemble
    per_response = [int(r.as_numpy("num_output_tokens").reshape(-1)[0]) for r in got[f"{front}-stream"]]
    assert sum(per_response) == max_tokens, per_response  # counted per response in a stream, as NVIDIA's backend


def test_front_door_http_generate_and_a_refused_input(server, offline):
    prompt, max_tokens = CASES[1]
    status, body = http_generate(server, "ensemble", {"text_input": prompt, "max_tokens": max_tokens})
    assert status == 200 and body["text_output"] == prompt + offline[prompt], body
    status, body = http_generate(server, "ensemble", {"text_input": prompt, "max_tokens": 4, "beam_width": 2})
    assert status == 400 and "beam_width" in body.get("error", ""), (status, body)


@pytest.fixture(scope="module")
def openai_base(server, served_repo):
    pytest.importorskip("fastapi")
    with openai_front_end(served_repo, server.grpc_url, "--served-model-name", "smollm2") as base:
        yield base


def test_openai_completions_equal_greedy(openai_base, offline, tok):
    openai = pytest.importorskip("openai")
    prompt, max_tokens = CASES[0]
    with openai.OpenAI(base_url=f"{openai_base}/v1", api_key="unused", max_retries=0) as client:
        got = client.completions.create(model="smollm2", prompt=prompt, max_tokens=max_tokens, temperature=0)
        streamed = "".join(
            c.choices[0].text
            for c in client.completions.create(
                model="smollm2", prompt=prompt, max_tokens=max_tokens, temperature=0, stream=True
            )
            if c.choices
        )
    assert got.choices[0].text == offline[prompt] == streamed
    assert got.usage.prompt_tokens == len(tok.encode(prompt, add_special_tokens=True))
    assert got.usage.completion_tokens == max_tokens


# ---------------------------------------------------------------------------------------------- unary, cancel, perf
def test_non_decoupled_generate_and_unary_infer_equal_greedy(server, offline):
    """NVIDIA's default transaction policy: /generate (the documented curl) and unary gRPC infer."""
    import tritonclient.grpc as grpcclient

    prompt, max_tokens = CASES[0]
    status, body = http_generate(
        server, UNARY["tensorrt_llm"], {"text_input": prompt, "sampling_param_max_tokens": max_tokens}
    )
    assert status == 200 and body["text_output"] == prompt + offline[prompt], (status, body)
    status, body = http_generate(server, UNARY["ensemble"], {"text_input": prompt, "max_tokens": max_tokens})
    assert status == 200 and body["text_output"] == prompt + offline[prompt], (status, body)
    client = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        result = client.infer(
            UNARY["tensorrt_llm"],
            inputs(prompt, max_tokens, streaming=False, sampling_param_exclude_input_from_output=True),
        )
        assert _str(result, "text_output") == offline[prompt]
    finally:
        client.close()
    status, body = http_generate(
        server, UNARY["tensorrt_llm"], {"text_input": prompt, "sampling_param_max_tokens": 4, "streaming": True}
    )
    assert status == 400 and "streaming" in body.get("error", ""), (status, body)


def test_stop_request_cancels_a_running_generation(stream):
    """NVIDIA's cancellation request: ``stop: true`` under the running request's id."""
    import queue

    prompt = CASES[1][0]
    long = inputs(prompt, 400, streaming=True, return_finish_reason=True, sampling_param_exclude_input_from_output=True)
    stream.send(MODEL, long, "long")
    first, error = stream.events.get(timeout=120)
    assert error is None, error
    stream.send(MODEL, [grpc_input("stop", np.array([True], bool))], "long")
    results, errors, final = [first], [], None
    while final is None:
        try:
            result, error = stream.events.get(timeout=120)
        except queue.Empty:
            pytest.fail(f"no final response after the stop request (errors: {errors})")
        if error is not None:
            errors.append(str(error))
            continue
        response = result.get_response()
        if response.outputs:
            results.append(result)
        if response.parameters["triton_final_response"].bool_param:
            final = results[-1]
    assert any("cancel" in e.lower() for e in errors), errors  # the stop request's own CANCELLED answer
    assert _str(final, "finish_reason") == "cancelled"
    assert len(results) < 400  # stopped long before max_tokens


def test_client_cancelled_stream_leaves_the_server_answering(server, offline):
    import time

    import tritonclient.grpc as grpcclient

    prompt, max_tokens = CASES[0]
    client = grpcclient.InferenceServerClient(server.grpc_url)
    got: list[Any] = []
    client.start_stream(callback=lambda result, error: got.append((result, error)))
    client.async_stream_infer("ensemble", front_inputs(prompt, 400, stream=True), request_id="gone")
    deadline = time.monotonic() + 120
    while not got and time.monotonic() < deadline:
        time.sleep(0.05)
    assert got, "no first response"
    client.stop_stream(cancel_requests=True)
    client.close()
    status, body = http_generate(server, "ensemble", {"text_input": prompt, "max_tokens": max_tokens})
    assert status == 200 and body["text_output"] == prompt + offline[prompt], (status, body)


def test_perf_metrics_outputs(stream):
    prompt, max_tokens = CASES[0]
    stream.send(MODEL, inputs(prompt, max_tokens, streaming=False, sampling_param_return_perf_metrics=True), "perf")
    stream.send("tensorrt_llm_bls", front_inputs(prompt, max_tokens, return_perf_metrics=True), "perf-front")
    got, errors = stream.collect({"perf", "perf-front"})
    assert not errors, errors
    result, front = got["perf"][-1], got["perf-front"][-1]
    times = [
        int(result.as_numpy(n).reshape(-1)[0])
        for n in ("arrival_time_ns", "first_scheduled_time_ns", "first_token_time_ns", "last_token_time_ns")
    ]
    assert times[0] > 0 and times == sorted(times), times
    assert result.as_numpy("arrival_time_ns").dtype == np.int64
    for name in ("kv_cache_reused_block", "kv_cache_alloc_total_blocks", "total_draft_tokens"):
        assert result.as_numpy(name).dtype == np.int32, name
    assert result.as_numpy("kv_cache_hit_rate").dtype == np.float32
    front_times = [
        int(front.as_numpy(n).reshape(-1)[0])
        for n in ("arrival_time_ns", "first_scheduled_time_ns", "first_token_time_ns", "last_token_time_ns")
    ]
    assert front_times[0] > times[0] and front_times == sorted(front_times), (times, front_times)
    assert front.as_numpy("kv_cache_reused_blocks").dtype == np.int32  # the ensemble's name
