"""A client that goes away cancels its Triton request: the engine stops generating, through the ensemble and
through the BLS.

A real tritonserver serves a synthetic-engine repository (``synthetic_token_delay_ms`` = 10: a 1000-token
answer would take 10 s); `repo-builder openai` runs standalone in front of it twice, once per Triton model.
The client reads a few streamed chunks (or waits for a non-streamed answer) and disconnects; the engine's
log line for that request id ("stopped by a stop request after N generated token(s)") shows it stopped
early. Request ids are chosen with the X-Request-Id header.
"""

from __future__ import annotations

import json
import re
import time
import uuid

import pytest

pytestmark = pytest.mark.server

httpx = pytest.importorskip("httpx")
pytest.importorskip("fastapi")

from e2e_support import openai_front_ends  # noqa: E402

MAX = 1000
MODELS = ["ensemble", "tensorrt_llm_bls"]


@pytest.fixture(scope="module")
def served(tmp_path_factory, render_repo_module, serve_module):
    from repo_builder.testing import packaged_tokenizer

    base = tmp_path_factory.mktemp("synthetic_openai")
    engine = base / "synthetic-llm"
    engine.mkdir()
    (engine / "synthetic_engine.json").write_text(
        json.dumps({"vocab_size": 32000, "max_batch_size": 16, "max_input_len": 1024, "max_seq_len": 2048})
    )
    tok = packaged_tokenizer("mistral-v1-instruct", base / "tok")
    repo = render_repo_module(engine, tok, streaming=True, values={"synthetic_token_delay_ms": 10}, name="syn")
    with serve_module(repo) as server:
        yield server, repo


@pytest.fixture(scope="module")
def fronts(served):
    """{triton model: base URL} of one standalone `repo-builder openai` per model."""
    server, repo = served
    with openai_front_ends(repo, server.grpc_url, [("--triton-model", model) for model in MODELS]) as bases:
        yield dict(zip(MODELS, bases))


def stopped_after(server, rid: str, timeout_s: float = 60.0) -> int:
    """Tokens the engine had generated when it stopped request ``rid`` (the BLS adds ``:<tag>-<n>`` to the id)."""
    pattern = re.compile(
        rf"request '{re.escape(rid)}(?::[0-9a-f]+-\d+)?' (?:stopped by a stop request|cancelled by the "
        rf"client) after (\d+) generated token"
    )
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = pattern.search(server.log_tail(400))
        if found:
            return int(found.group(1))
        time.sleep(0.1)
    raise AssertionError(f"no stop logged for {rid}:\n{server.log_tail(30)}")


@pytest.mark.parametrize("model", MODELS)
def test_disconnect_mid_stream_stops_the_engine(served, fronts, model):
    server, repo = served
    name = "synthetic-llm"
    tag = uuid.uuid4().hex[:8]
    got = 0
    with httpx.stream(
        "POST",
        f"{fronts[model]}/v1/chat/completions",
        headers={"X-Request-Id": tag},
        timeout=60,
        json={
            "model": name,
            "messages": [{"role": "user", "content": "Count to a thousand"}],
            "max_tokens": MAX,
            "stream": True,
        },
    ) as resp:
        assert resp.status_code == 200
        for line in resp.iter_lines():
            if line.startswith("data: "):
                body = json.loads(line[6:])
                assert body["id"] == f"chatcmpl-{tag}"
                got += 1
                if got == 4:
                    break  # leaving the block closes the connection mid-stream
    n = stopped_after(server, f"chatcmpl-{tag}")
    assert 1 <= n < MAX // 2, n  # stopped early: at 10 ms per token a finished answer would be 1000


@pytest.mark.parametrize("model", MODELS)
def test_client_that_gives_up_on_a_non_streamed_answer_stops_the_engine(served, fronts, model):
    server, _repo = served
    tag = uuid.uuid4().hex[:8]
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(
            f"{fronts[model]}/v1/completions",
            headers={"X-Request-Id": tag},
            timeout=1.0,
            json={"model": "synthetic-llm", "prompt": "Count to a thousand", "max_tokens": MAX},
        )
    n = stopped_after(server, f"cmpl-{tag}")
    assert 1 <= n < MAX // 2, n


@pytest.mark.parametrize("model", MODELS)
def test_after_cancellations_requests_complete_in_full(served, fronts, model):
    got = httpx.post(
        f"{fronts[model]}/v1/completions",
        timeout=60,
        json={"model": "synthetic-llm", "prompt": "Hello", "max_tokens": 20},
    ).json()
    assert got["usage"]["completion_tokens"] == 20 and got["choices"][0]["finish_reason"] == "length"


def _cut_inside_a_character(tok) -> tuple[str, int, str]:
    """(prompt, max_tokens, expected text): a prompt whose synthetic answer's token ``max_tokens`` is a UTF-8
    lead byte (byte-fallback ids 197..247 are 0xC2..0xF4), so ``max_tokens`` cuts inside a character, with no
    U+FFFD before it. The expected text is the decode without the cut character."""
    from repo_builder.runtime.synthetic import synthetic_token_ids
    from repo_builder.runtime.text import encode_prompt

    for i in range(5000):
        prompt = f"Write a line of verse, number {i}."
        gen = synthetic_token_ids(encode_prompt(tok, prompt, add_special_tokens=True), 40, 32000, end_id=2)
        for n in range(2, 40):
            if gen[n - 1] == 2:
                break
            text = tok.decode(gen[:n], skip_special_tokens=True)
            if 197 <= gen[n - 1] <= 247 and text.endswith("\ufffd") and "\ufffd" not in text.rstrip("\ufffd"):
                return prompt, n, text.rstrip("\ufffd")
    raise AssertionError("no prompt whose answer max_tokens can cut inside a character")


@pytest.mark.parametrize("model", MODELS)
def test_max_tokens_cutting_inside_a_character_sends_no_replacement_char(fronts, model, tmp_path):
    """Issue 28: the front end never sends U+FFFD for a character max_tokens cut inside (it is left out, as a
    stream holds it back), streamed or not, through the ensemble and the BLS."""
    import transformers

    from repo_builder.testing import packaged_tokenizer

    tok = transformers.AutoTokenizer.from_pretrained(str(packaged_tokenizer("mistral-v1-instruct", tmp_path / "tok")))
    prompt, n, expected = _cut_inside_a_character(tok)
    body = {"model": "synthetic-llm", "prompt": prompt, "max_tokens": n}
    got = httpx.post(f"{fronts[model]}/v1/completions", timeout=60, json=body).json()
    assert got["choices"][0]["text"] == expected and got["usage"]["completion_tokens"] == n, got
    streamed = []
    with httpx.stream("POST", f"{fronts[model]}/v1/completions", timeout=60, json={**body, "stream": True}) as r:
        for line in r.iter_lines():
            if line.startswith("data: {"):
                streamed.extend(c["text"] for c in json.loads(line[6:])["choices"])
    assert "".join(streamed) == expected and not any("\ufffd" in s for s in streamed), streamed
