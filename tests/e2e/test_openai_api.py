"""The OpenAI-compatible API end to end: `repo-builder launch REPO --openai_port P` (a real tritonserver and the
front end as its child) on a repository rendered from the tiny random LLaMA, asked with the real `openai` SDK
(sync, async, streaming) and raw HTTP (error shapes, SSE framing, 401).

Expected texts and token counts come from transformers' own greedy generate() on the same checkpoint, and the
chat prompt ids from the tokenizer's apply_chat_template(tokenize=True): the server must reproduce both.
The tokenizer is Mistral v1's SentencePiece model with the chat template repo_builder.testing gives it (it
starts with `<s>`, so a second BOS would show in usage.prompt_tokens).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess

import pytest

pytestmark = pytest.mark.server

openai = pytest.importorskip("openai")
httpx = pytest.importorskip("httpx")
torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("fastapi")

from cli_support import cli_argv  # noqa: E402
from conftest import free_ports  # noqa: E402
from e2e_support import wait_healthy  # noqa: E402

KEY = "sk-test-openai-front-end"
N = 12
PROMPT = "What is machine learning?"
CHAT = [{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": "Name a colour."}]


# ---------------------------------------------------------------------------------------------- fixtures
@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A tiny random LLaMA whose tokenizer (packaged Mistral v1) carries a chat template."""
    from repo_builder.testing import make_tiny_llama, packaged_tokenizer

    base = tmp_path_factory.mktemp("tiny_chat")
    tok_dir = packaged_tokenizer("mistral-v1-instruct", base / "tok")
    return make_tiny_llama(base / "tiny-chat-llama", tok_dir, seed=0)


@pytest.fixture(scope="module")
def tok(tiny):
    return transformers.AutoTokenizer.from_pretrained(str(tiny))


@pytest.fixture(scope="module")
def greedy(tiny):
    """greedy(ids, n) -> generated ids (end id excluded), as the reference engine must produce them."""
    model = transformers.AutoModelForCausalLM.from_pretrained(str(tiny), dtype=torch.float32).eval()
    cache: dict[tuple, list[int]] = {}

    def run(ids: list[int], n: int = N) -> list[int]:
        key = (tuple(ids), n)
        if key not in cache:
            with torch.inference_mode():
                out = model.generate(torch.tensor([ids]), max_new_tokens=n, do_sample=False, pad_token_id=0)
            gen = out[0, len(ids) :].tolist()
            cache[key] = gen[: gen.index(2)] if 2 in gen else gen
        return cache[key]

    return run


def chat_ids(tok, messages) -> list[int]:
    got = tok.apply_chat_template(messages, tokenize=True, add_generation_prompt=True)
    return list(got["input_ids"] if hasattr(got, "keys") else got)


@pytest.fixture(scope="module")
def launched(tiny, render_repo_module, tmp_path_factory):
    """`repo-builder launch REPO --openai_port P` in the foreground (a subprocess), API key from the environment."""
    repo = render_repo_module(tiny, tiny, streaming=True, name="openai")
    http, grpc, metrics, port = free_ports(4)
    log = tmp_path_factory.mktemp("logs") / "launch.log"
    env = dict(os.environ, REPO_BUILDER_OPENAI_API_KEY=KEY)
    argv = cli_argv(
        "launch",
        str(repo),
        "--http_port",
        str(http),
        "--grpc_port",
        str(grpc),
        "--metrics_port",
        str(metrics),
        "--no-mpi",
        "--openai_port",
        str(port),
        "--log-file",
        str(log),
        "--quiet",
    )
    output = tmp_path_factory.mktemp("launch-out") / "stdout.log"
    with open(output, "wb") as out:
        proc = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(base, proc, log=output)
        yield {"base": base, "proc": proc, "repo": repo, "log": log, "http": http, "port": port}
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                proc.kill()


@pytest.fixture(scope="module")
def client(launched):
    with openai.OpenAI(base_url=f"{launched['base']}/v1", api_key=KEY, max_retries=0) as c:
        yield c


@pytest.fixture(scope="module")
def name(tiny):
    return tiny.name  # the engine directory's name, from the lock file


def post(launched, path: str, body, key: str | None = KEY, **kw):
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    content = body if isinstance(body, (str, bytes)) else json.dumps(body)
    return httpx.post(f"{launched['base']}{path}", content=content, headers=headers, timeout=120, **kw)


# ---------------------------------------------------------------------------------------------- tests
def test_models_lists_the_served_name_from_the_lock_file(client, name):
    assert [m.id for m in client.models.list().data] == [name]
    assert client.models.retrieve(name).id == name


def test_completion_equals_greedy_generation_with_exact_usage(client, tok, greedy, name):
    ids = tok(PROMPT)["input_ids"]
    expected = greedy(ids)
    got = client.completions.create(model=name, prompt=PROMPT, max_tokens=N, temperature=0)
    choice = got.choices[0]
    assert choice.text == tok.decode(expected, skip_special_tokens=True)
    assert (got.usage.prompt_tokens, got.usage.completion_tokens) == (len(ids), len(expected))
    assert got.usage.total_tokens == len(ids) + len(expected)
    assert choice.finish_reason == ("length" if len(expected) == N else "stop")
    assert got.object == "text_completion" and got.model == name and got.id.startswith("cmpl-")


def test_chat_applies_the_template_once_single_bos(client, tok, greedy, name):
    ids = chat_ids(tok, CHAT)
    assert ids[0] == tok.bos_token_id and ids.count(tok.bos_token_id) == 1
    expected = greedy(ids)
    got = client.chat.completions.create(model=name, messages=CHAT, max_completion_tokens=N)
    assert got.usage.prompt_tokens == len(ids)  # a second BOS would make it len(ids) + 1
    assert got.usage.completion_tokens == len(expected)
    assert got.choices[0].message.role == "assistant"
    assert got.choices[0].message.content == tok.decode(expected, skip_special_tokens=True)
    assert got.choices[0].finish_reason == ("length" if len(expected) == N else "stop")


def test_streamed_chat_adds_up_to_the_same_text_and_reports_usage(client, tok, greedy, name):
    ids = chat_ids(tok, CHAT)
    expected = tok.decode(greedy(ids), skip_special_tokens=True)
    chunks = list(
        client.chat.completions.create(
            model=name, messages=CHAT, max_tokens=N, stream=True, stream_options={"include_usage": True}
        )
    )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == expected
    assert chunks[0].choices[0].delta.role == "assistant"
    finals = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finals == ["length" if len(greedy(ids)) == N else "stop"]
    assert chunks[-1].choices == [] and chunks[-1].usage.prompt_tokens == len(ids)
    assert chunks[-1].usage.completion_tokens == len(greedy(ids))
    assert all(c.usage is None for c in chunks[:-1])
    assert len({c.id for c in chunks}) == 1


def test_sse_framing_ends_with_done(launched, name):
    resp = post(launched, "/v1/completions", {"model": name, "prompt": PROMPT, "max_tokens": 4, "stream": True})
    assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/event-stream")
    events = [e for e in resp.text.split("\n\n") if e]
    assert all(e.startswith("data: ") for e in events)
    assert events[-1] == "data: [DONE]"
    bodies = [json.loads(e[6:]) for e in events[:-1]]
    assert all("usage" not in b for b in bodies)  # only with stream_options.include_usage
    assert bodies[-1]["choices"][0]["finish_reason"] in ("stop", "length")


def test_async_client_streams_concurrently(launched, tok, greedy, name):
    import asyncio

    prompts = ["I like the summer", "Tell me about forests", PROMPT, "Hello"]

    async def main():
        async with openai.AsyncOpenAI(base_url=f"{launched['base']}/v1", api_key=KEY, max_retries=0) as aclient:

            async def one(p):
                stream = await aclient.completions.create(model=name, prompt=p, max_tokens=N, stream=True)
                return "".join([c.choices[0].text async for c in stream if c.choices])

            async def chat():
                got = await aclient.chat.completions.create(model=name, messages=CHAT, max_tokens=N)
                return got.choices[0].message.content

            return await asyncio.gather(*(one(p) for p in prompts), chat())

    got = asyncio.run(main())
    assert got[:-1] == [tok.decode(greedy(tok(p)["input_ids"]), skip_special_tokens=True) for p in prompts]
    assert got[-1] == tok.decode(greedy(chat_ids(tok, CHAT)), skip_special_tokens=True)


def test_stop_string_is_cut_and_finishes_with_stop(client, tok, greedy, name):
    prompts = ["I like the summer", "Tell me about forests", PROMPT, "Hello", "The capital of France is"]
    texts = {p: tok.decode(greedy(tok(p)["input_ids"]), skip_special_tokens=True) for p in prompts}
    prompt = max(prompts, key=lambda p: len(set(texts[p])))  # random weights: pick the most varied output
    gen = greedy(tok(prompt)["input_ids"])
    full = texts[prompt]
    head = tok.decode(gen[:3], skip_special_tokens=True)
    stop = head[len(tok.decode(gen[:2], skip_special_tokens=True)) :].strip() or head.strip()
    assert stop, full
    cut = full[: full.index(stop)]
    got = client.completions.create(model=name, prompt=prompt, max_tokens=N, stop=[stop, "never-seen-xyz"])
    assert got.choices[0].text == cut and got.choices[0].finish_reason == "stop"
    streamed = list(client.completions.create(model=name, prompt=prompt, max_tokens=N, stop=stop, stream=True))
    assert "".join(c.choices[0].text for c in streamed) == cut
    assert streamed[-1].choices[0].finish_reason == "stop"


def test_echo_and_ignored_user_field(client, tok, greedy, name):
    expected = tok.decode(greedy(tok(PROMPT)["input_ids"], 4), skip_special_tokens=True)
    got = client.completions.create(model=name, prompt=PROMPT, max_tokens=4, echo=True, user="someone")
    assert got.choices[0].text == PROMPT + expected


BAD = [
    # (path, body, status, param)
    ("/v1/chat/completions", {"model": "gpt-4", "messages": [{"role": "user", "content": "x"}]}, 404, "model"),
    ("/v1/chat/completions", {"model": "@", "messages": []}, 400, "messages"),
    ("/v1/chat/completions", {"model": "@", "messages": "hello"}, 400, "messages"),
    ("/v1/chat/completions", {"model": "@", "messages": [{"role": "user", "content": 5}]}, 400, "messages[0].content"),
    (
        "/v1/chat/completions",
        {"model": "@", "messages": [{"role": "user", "content": "x"}], "max_tokens": "8"},
        400,
        "max_tokens",
    ),
    (
        "/v1/chat/completions",
        {"model": "@", "messages": [{"role": "user", "content": "x"}], "max_tokens": -1},
        400,
        "max_tokens",
    ),
    (
        "/v1/chat/completions",
        {"model": "@", "messages": [{"role": "user", "content": "x"}], "max_tokens": 100000},
        400,
        "max_tokens",
    ),
    ("/v1/chat/completions", {"model": "@", "messages": [{"role": "user", "content": "x"}], "n": 2}, 400, "n"),
    (
        "/v1/chat/completions",
        {"model": "@", "messages": [{"role": "user", "content": "x"}], "logprobs": True},
        400,
        "logprobs",
    ),
    (
        "/v1/chat/completions",
        {"model": "@", "messages": [{"role": "user", "content": "x"}], "temperature": -0.5},
        400,
        "temperature",
    ),
    ("/v1/chat/completions", {"model": "@", "messages": [{"role": "user", "content": "x"}], "bogus": 1}, 400, "bogus"),
    ("/v1/completions", '{"model": "@", "prompt": "x", "top_p": NaN}', 400, "top_p"),
    ("/v1/completions", '{"model": "@", "prompt": "x", "max_tokens": 4', 400, None),
    ("/v1/completions", {"model": "@", "prompt": "x", "stop": ["a", 3]}, 400, "stop[1]"),
    ("/v1/completions", {"model": "@", "prompt": "x", "seed": -1}, 400, "seed"),
    ("/v1/completions", {"model": "@", "prompt": "x", "logprobs": 2}, 400, "logprobs"),
    ("/v1/completions", {"model": "@", "prompt": [1, 2, 3]}, 400, "prompt"),
    ("/v1/completions", {"model": "@", "prompt": ""}, 400, "prompt"),
    ("/v1/completions", {"model": "@", "prompt": "word " * 600, "max_tokens": 4}, 400, "prompt"),  # > max_input_len
    ("/v1/completions", {"model": "@", "prompt": "word " * 300, "max_tokens": 400}, 400, "max_tokens"),  # > max_seq_len
    ("/v1/completions", {"model": "@"}, 400, "prompt"),
]


@pytest.mark.parametrize("path,body,status,param", BAD, ids=[f"{i}-{b[3]}" for i, b in enumerate(BAD)])
def test_bad_requests_get_the_openai_error_shape(launched, name, path, body, status, param):
    if isinstance(body, dict):
        body = {k: (name if v == "@" else v) for k, v in body.items()}
    else:
        body = body.replace('"@"', json.dumps(name))
    resp = post(launched, path, body)
    assert resp.status_code == status, resp.text
    err = resp.json()["error"]
    assert set(err) == {"message", "type", "param", "code"} and err["message"]
    assert err["param"] == param, err
    assert "Traceback" not in resp.text


def test_sdk_raises_typed_errors(client, name):
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="nope", messages=[{"role": "user", "content": "x"}])
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(model=name, messages=[{"role": "user", "content": "x"}], n=3)
    assert err.value.body["param"] == "n"


def test_api_key_is_required(launched, name):
    body = {"model": name, "prompt": PROMPT, "max_tokens": 2}
    for key in (None, "wrong"):
        resp = post(launched, "/v1/completions", body, key=key)
        assert resp.status_code == 401
        assert resp.json()["error"]["code"] == "invalid_api_key"
    assert httpx.get(f"{launched['base']}/v1/models").status_code == 401
    assert httpx.get(f"{launched['base']}/health").status_code == 200  # health needs no key
    with openai.OpenAI(base_url=f"{launched['base']}/v1", api_key="wrong", max_retries=0) as bad:
        with pytest.raises(openai.AuthenticationError):
            bad.models.list()


def test_server_keeps_serving_after_errors(client, tok, greedy, name):
    got = client.completions.create(model=name, prompt=PROMPT, max_tokens=N)
    assert got.choices[0].text == tok.decode(greedy(tok(PROMPT)["input_ids"]), skip_special_tokens=True)


def _samples(text: str) -> dict[str, float]:
    """``{'name{labels}': value}`` of a Prometheus text exposition (comments skipped)."""
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.rpartition(" ")
            out[key] = float(value)
    return out


def test_front_door_metrics_count_a_stream_its_latencies_and_a_disconnect(launched, client, name):
    """Issue 24: the front end's /metrics (no key) counts what the client saw: tokens = usage, one TTFT and
    (deltas - 1) inter-token gaps per stream, the 200, and a client that goes away mid-stream as cancelled."""
    import time

    def scrape() -> dict[str, float]:
        return _samples(httpx.get(f"{launched['base']}/metrics", timeout=30).text)

    m = f'model="{name}"'
    before = scrape()
    chunks = list(
        client.completions.create(
            model=name, prompt=PROMPT, max_tokens=N, stream=True, stream_options={"include_usage": True}
        )
    )
    deltas = sum(1 for c in chunks if c.choices and c.choices[0].text)
    after = scrape()
    assert deltas >= 2

    def grew(key: str) -> float:
        return after[key] - before[key]

    assert grew(f"repo_builder_openai_output_tokens_total{{{m}}}") == chunks[-1].usage.completion_tokens
    assert grew(f"repo_builder_openai_first_token_seconds_count{{{m}}}") == 1
    assert 0 < grew(f"repo_builder_openai_first_token_seconds_sum{{{m}}}") < 60
    assert grew(f"repo_builder_openai_inter_token_seconds_count{{{m}}}") == deltas - 1
    assert grew(f'repo_builder_openai_requests_total{{{m},status="200"}}') == 1
    key = f"repo_builder_openai_streams_cancelled_total{{{m}}}"
    assert grew(key) == 0
    body = {"model": name, "prompt": PROMPT, "max_tokens": 400, "min_tokens": 400, "stream": True}
    headers = {"Authorization": f"Bearer {KEY}"}
    with httpx.stream("POST", f"{launched['base']}/v1/completions", json=body, headers=headers, timeout=60) as r:
        assert r.status_code == 200
        next(r.iter_lines())  # the first event, then the client goes away
    deadline = time.monotonic() + 60
    while scrape()[key] == after[key] and time.monotonic() < deadline:
        time.sleep(0.2)
    assert scrape()[key] == after[key] + 1


def test_sigterm_stops_front_end_and_server_with_the_launchers_exit_code(launched):
    """Last in the module: the launch's SIGTERM discipline (exit 128 + 15) covers the front end too."""
    from repo_builder.server import procs

    proc = launched["proc"]
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=120) == 128 + signal.SIGTERM
    with pytest.raises(httpx.HTTPError):
        httpx.get(f"{launched['base']}/health", timeout=2)
    left = [pid for pid in procs.all_pids() if any(str(launched["repo"]) in a for a in (procs.cmdline(pid) or []))]
    assert left == []
