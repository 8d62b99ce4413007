"""End to end through a real tritonserver: draft-target speculative decoding in ``tensorrt_llm_bls``
(``render --draft-engine-dir``). The tiny random LLaMA is both target and draft (reference engine), so every
draft token is accepted; greedy text with ``num_draft_tokens`` equals the text without it, streamed and not,
and the perf outputs report the acceptance."""

from __future__ import annotations

import numpy as np
import pytest
from e2e_support import Stream, grpc_input, http_generate, texts

pytestmark = pytest.mark.server

BLS = "tensorrt_llm_bls"
PROMPT = "Speculative decoding is"
N_TOKENS = 24


@pytest.fixture(scope="module")
def server(tiny_llama, tmp_path_factory, serve_module):
    from repo_builder.render import render_repository

    repo = tmp_path_factory.mktemp("spec") / "repo"
    render_repository(tiny_llama, tiny_llama, repo, streaming=True, draft_engine_dir=tiny_llama)
    with serve_module(repo, timeout=600.0) as srv:
        yield srv


def test_speculative_text_equals_plain_text(server):
    base = {"text_input": PROMPT, "max_tokens": N_TOKENS, "exclude_input_in_output": True}
    status, plain = http_generate(server, BLS, base)
    assert status == 200, plain
    status, spec = http_generate(server, BLS, {**base, "num_draft_tokens": 4, "return_perf_metrics": True})
    assert status == 200, spec
    assert spec["text_output"] == plain["text_output"] and plain["text_output"]
    assert spec["total_draft_tokens"] > 0 and spec["acceptance_rate"] == pytest.approx(1.0)
    stream = Stream(server)
    try:
        inputs = [
            grpc_input("text_input", np.array([[PROMPT.encode()]], dtype=object)),
            grpc_input("max_tokens", np.array([[N_TOKENS]], np.int32)),
            grpc_input("stream", np.array([[True]], bool)),
            grpc_input("num_draft_tokens", np.array([[4]], np.int32)),
        ]
        stream.send(BLS, inputs, "spec", outputs=["text_output"])
        got, errors = stream.collect({"spec"})
    finally:
        stream.close()
    assert not errors
    assert "".join(texts(got["spec"])) == plain["text_output"]
    assert 1 < len(got["spec"]) < N_TOKENS  # several tokens per streamed response


def test_num_draft_tokens_above_max_draft_len_fails_alone_naming_the_field(server):
    """The reference engine stands in for a target built with --max_draft_len 8 (rendered into the BLS): 9 is a
    client error naming num_draft_tokens; the next request is served."""
    from repo_builder.engine import HF_MAX_DRAFT_LEN

    base = {"text_input": PROMPT, "max_tokens": 8, "exclude_input_in_output": True}
    status, body = http_generate(server, BLS, {**base, "num_draft_tokens": HF_MAX_DRAFT_LEN + 1})
    assert status == 400, body
    assert "num_draft_tokens" in body["error"] and f"max_draft_len ({HF_MAX_DRAFT_LEN}:" in body["error"]
    status, body = http_generate(server, BLS, {**base, "num_draft_tokens": HF_MAX_DRAFT_LEN})
    assert status == 200 and body["text_output"], body
