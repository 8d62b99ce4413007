"""The BLS runs postprocessing's code in-process by default (bls_local_postprocessing), with the text
unchanged: no BLS call reaches the postprocessing model, and turning the switch off routes through it.

Counted with Triton's own statistics (GET /v2/models/postprocessing/stats), on a real tritonserver.
"""

from __future__ import annotations

import json
import time

import pytest
import requests
from conftest import asset

from repo_builder.client import GenerateRequest, LLMClient

pytestmark = pytest.mark.server


def _post_executions(server) -> int:
    stats = requests.get(f"{server.http_url}/v2/models/postprocessing/stats", timeout=30).json()
    return sum(int(m["inference_stats"]["success"]["count"]) for m in stats["model_stats"])


def _settled_post_executions(server) -> int:
    """Triton records a request's statistics when the request is released, which can be just after its last
    response reached the caller: read until two reads half a second apart agree (at most ten seconds)."""
    last = _post_executions(server)
    for _ in range(20):
        time.sleep(0.5)
        now = _post_executions(server)
        if now == last:
            return now
        last = now
    return last


@pytest.fixture(scope="module")
def engine_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("synthetic")
    (d / "synthetic_engine.json").write_text(json.dumps({"vocab_size": 32000}))
    return d


@pytest.mark.parametrize("local", [True, False])
def test_bls_text_with_and_without_local_postprocessing(render_repo, serve, engine_dir, local):
    repo = render_repo(
        engine_dir, asset("mistral_v1_tokenizer"), values={"bls_local_postprocessing": str(local).lower()}
    )
    assert (repo / "tensorrt_llm_bls" / "1" / "postprocessing_config.json").is_file()
    with serve(repo) as server:
        req = dict(max_tokens=9, min_tokens=9, exclude_input_in_output=True)
        # The BLS first, on a server nothing else has called, so the ensemble's own postprocessing calls
        # cannot land in the count.
        before = _settled_post_executions(server)
        with LLMClient(server.grpc_url, "grpc", "tensorrt_llm_bls") as c:
            streamed = c.generate(GenerateRequest("What is machine learning?", stream=True, **req))
            whole = c.generate(GenerateRequest("What is machine learning?", **req))
        calls = _settled_post_executions(server) - before
        with LLMClient(server.grpc_url, "grpc", "ensemble") as c:
            reference = c.generate(GenerateRequest("What is machine learning?", stream=True, **req))
    assert reference.ok and streamed.ok and whole.ok, (reference.error, streamed.error, whole.error)
    assert streamed.text == whole.text == reference.text
    assert len(streamed.chunk_times_ns) == 9
    if local:
        assert calls == 0
    else:
        assert calls == 9 + 1  # one call per streamed response, one for the non-streaming request
