"""Two LLMs in one llmapi repository (``render --profile llmapi-1.2 --model NAME=CHECKPOINT_DIR`` twice), served by
one real tritonserver: each ``NAME_tensorrt_llm`` (NVIDIA's llmapi contract over the CPU stand-in of
``tensorrt_llm.LLM``) answers with its own weights and tokenizer, so do its text front doors, and
``repo-builder openai`` routes each model id to its own LLM.

The two tiny random LLaMAs use different packaged SentencePiece tokenizers (Mistral v1: 32000 tokens; Mistral
v3: 32768 tokens, other ids) and seeds whose greedy continuations differ, so an LLM that got the other's
checkpoint or tokenizer would answer differently from transformers' greedy generate() on its own checkpoint.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from deploy_support import greedy_text
from e2e_support import http_generate, openai_front_end, render_llms, two_tiny_llamas

pytestmark = pytest.mark.server

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

PROMPT = "What is machine learning?"
N_TOKENS = 8


@pytest.fixture(scope="module")
def llms(tmp_path_factory) -> dict[str, Path]:
    return two_tiny_llamas(tmp_path_factory.mktemp("llmapi_llms"))


@pytest.fixture(scope="module")
def expected(llms) -> dict[str, str]:
    out = {name: greedy_text(ckpt, PROMPT, N_TOKENS) for name, ckpt in llms.items()}
    assert out["alpha"] != out["beta"]
    return out


@pytest.fixture(scope="module")
def repo(llms, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("llmapi_repo") / "two"
    return render_llms(out, {name: str(ckpt) for name, ckpt in llms.items()}, "--profile", "llmapi-1.2")


@pytest.fixture(scope="module")
def server(repo, serve_module):
    with serve_module(repo, timeout=600) as srv:
        yield srv


def test_each_llmapi_model_answers_with_its_own_checkpoint(server, expected) -> None:
    """NVIDIA's llmapi request shape on ``NAME_tensorrt_llm`` (HTTP /generate, the default non-decoupled
    render): each answers its own checkpoint's greedy text."""
    for name, text in expected.items():
        status, body = http_generate(
            server,
            f"{name}_tensorrt_llm",
            {
                "text_input": PROMPT,
                "sampling_param_max_tokens": N_TOKENS,
                "sampling_param_exclude_input_from_output": True,
            },
        )
        assert status == 200, body
        assert body["text_output"] == text, name


@pytest.mark.parametrize("door", ["ensemble", "tensorrt_llm_bls"])
def test_each_front_door_calls_its_own_llm(server, expected, door) -> None:
    for name, text in expected.items():
        status, body = http_generate(
            server,
            f"{name}_{door}",
            {"text_input": PROMPT, "max_tokens": N_TOKENS, "exclude_input_in_output": True},
        )
        assert status == 200, body
        assert body["text_output"] == text, (name, door)


def test_openai_routes_each_model_id_to_its_own_llm(server, repo, expected, tmp_path) -> None:
    openai = pytest.importorskip("openai")
    with (
        openai_front_end(repo, server.grpc_url, log_dir=tmp_path) as base,
        openai.OpenAI(base_url=f"{base}/v1", api_key="none", max_retries=0) as client,
    ):
        assert [m.id for m in client.models.list().data] == ["alpha", "beta"]
        for name, text in expected.items():
            got = client.completions.create(model=name, prompt=PROMPT, max_tokens=N_TOKENS, temperature=0)
            assert got.model == name and got.choices[0].text == text, name
