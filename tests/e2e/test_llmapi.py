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
* a bad request (two prompts, max_tokens 0) fails alone with a message naming the input; the next one answers.
"""

from __future__ import annotations

import json
import os
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from e2e_support import Stream, greedy_reference, grpc_input

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


@pytest.fixture(scope="module")
def server(smollm2_dir, tmp_path_factory, serve_module):
    from repo_builder.render import render_repository

    repo = tmp_path_factory.mktemp("llmapi") / "repo"
    render_repository(smollm2_dir, None, repo, profile="llmapi-1.2", engine_mode="reference", streaming=True)
    with serve_module(repo) as srv:
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
