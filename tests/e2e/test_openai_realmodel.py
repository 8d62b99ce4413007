"""The OpenAI API with a real model: SmolLM2-135M-Instruct (``smollm2_dir``, from repo_builder.realmodel) served
by the CPU reference engine behind a real tritonserver and `repo-builder openai`.

The chat answer to "What is the capital of France?" (greedy) names Paris, and it is exactly the text the
ensemble returns for the same request: the chat template rendered once, the same max_tokens, greedy
(``top_k`` 1) -- so the front end adds nothing and loses nothing. usage.prompt_tokens is the length of the
tokenizer's apply_chat_template(tokenize=True) ids.
"""

from __future__ import annotations

import json
import urllib.request

import pytest

pytestmark = pytest.mark.server

openai = pytest.importorskip("openai")
httpx = pytest.importorskip("httpx")
transformers = pytest.importorskip("transformers")
pytest.importorskip("fastapi")

from e2e_support import openai_front_end  # noqa: E402

QUESTION = [{"role": "user", "content": "What is the capital of France?"}]
MAX_TOKENS = 32


@pytest.fixture(scope="module")
def smollm2(request):
    try:
        return request.getfixturevalue("smollm2_dir")
    except pytest.FixtureLookupError:
        pytest.skip(
            "the smollm2_dir fixture (tests/conftest.py, repo_builder.realmodel.ensure_smollm2) is not on this branch"
        )


@pytest.fixture(scope="module")
def served(smollm2, render_repo_module, serve_module):
    repo = render_repo_module(smollm2, smollm2, streaming=True, name="smollm2")
    with (
        serve_module(repo) as server,
        openai_front_end(repo, server.grpc_url, "--served-model-name", "smollm2") as base,
    ):
        yield server, base


def ensemble_text(server, prompt: str) -> str:
    body = {"text_input": prompt, "max_tokens": MAX_TOKENS, "top_k": 1, "exclude_input_in_output": True}
    req = urllib.request.Request(
        f"{server.http_url}/v2/models/ensemble/generate",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=300) as resp:
        return json.loads(resp.read())["text_output"]


def test_capital_of_france_names_paris_and_equals_the_ensemble(served, smollm2):
    server, base = served
    tok = transformers.AutoTokenizer.from_pretrained(str(smollm2))
    ids = tok.apply_chat_template(QUESTION, tokenize=True, add_generation_prompt=True)
    ids = list(ids["input_ids"] if hasattr(ids, "keys") else ids)
    with openai.OpenAI(base_url=f"{base}/v1", api_key="unused", max_retries=0) as client:
        got = client.chat.completions.create(model="smollm2", messages=QUESTION, max_tokens=MAX_TOKENS, temperature=0)
        streamed = "".join(
            c.choices[0].delta.content or ""
            for c in client.chat.completions.create(
                model="smollm2", messages=QUESTION, max_tokens=MAX_TOKENS, temperature=0, stream=True
            )
            if c.choices
        )
    answer = got.choices[0].message.content
    assert "Paris" in answer, answer
    assert answer == ensemble_text(
        server, tok.apply_chat_template(QUESTION, tokenize=False, add_generation_prompt=True)
    )
    assert streamed == answer
    assert got.usage.prompt_tokens == len(ids)
