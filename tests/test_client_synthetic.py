"""Client and benchmark against a real rendered repository: synthetic engine, LLaMA-2 tokenizer, streaming.

The synthetic engine emits a deterministic token stream (repo_builder.runtime.synthetic.synthetic_token_ids),
never its end id, one response per token when streaming; so token-id requests have exact expected ids and a
streamed request has exactly ``max_tokens`` output-carrying responses.
"""

from __future__ import annotations

import json

import pytest
from conftest import asset, free_ports
from typer.testing import CliRunner

from repo_builder.cli import app
from repo_builder.client import GenerateRequest, LLMClient
from repo_builder.errors import ClientError

pytestmark = pytest.mark.server

SPEC = {"vocab_size": 32000, "max_batch_size": 16, "max_input_len": 256, "max_seq_len": 512}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    from repo_builder.render import render_repository
    from repo_builder.server import LaunchConfig, TritonServer

    base = tmp_path_factory.mktemp("synthetic")
    engine = base / "engine"
    engine.mkdir()
    (engine / "synthetic_engine.json").write_text(json.dumps(SPEC))
    repo = base / "repo"
    render_repository(engine, asset("mistral_v1_tokenizer"), repo, streaming=True)
    http, grpc, metrics = free_ports(3)
    with TritonServer(
        LaunchConfig(model_repo=repo, http_port=http, grpc_port=grpc, metrics_port=metrics, no_mpi=True, timeout=300)
    ) as srv:
        yield srv


def _url(server, proto):
    return server.http_hostport if proto == "http" else server.grpc_url


@pytest.mark.parametrize("proto", ["http", "grpc"])
@pytest.mark.parametrize("model", ["ensemble", "tensorrt_llm_bls"])
def test_streamed_text_equals_whole_text_with_one_response_per_token(server, proto, model):
    with LLMClient(_url(server, proto), proto, model) as c:
        info = c.model_info()
        assert info.decoupled and info.inputs["max_tokens"].data_type == "TYPE_INT32"
        req = dict(max_tokens=12, min_tokens=12, exclude_input_in_output=True)
        whole = c.generate(GenerateRequest("What is machine learning?", **req))
        streamed = c.generate(GenerateRequest("What is machine learning?", stream=True, **req))
    assert whole.ok and streamed.ok, (whole.error, streamed.error)
    assert whole.text and streamed.text == whole.text
    assert len(whole.chunk_times_ns) == 1
    assert len(streamed.chunk_times_ns) == 12  # the synthetic engine answers once per token
    # counts come from the server's num_output_tokens (the client asks for them), not from re-tokenizing
    for res in (whole, streamed):
        assert all("num_output_tokens" in e.outputs for e in res.events if e.has_output)
        assert res.count_output_tokens() == 12


def test_grpc_output_selection_on_rendered_ensemble(server):
    with LLMClient(server.grpc_url, "grpc", "ensemble") as c:
        asked = {"return_log_probs": True}
        full = c.generate(
            GenerateRequest("Hi there", max_tokens=3, stream=True, exclude_input_in_output=True, extra=asked)
        )
        only = c.generate(
            GenerateRequest(
                "Hi there",
                max_tokens=3,
                stream=True,
                exclude_input_in_output=True,
                extra=asked,
                outputs=["text_output"],
            )
        )
    assert only.text == full.text
    assert "cum_log_probs" in full.events[0].outputs  # sent because return_log_probs asked for it
    assert list(only.events[0].outputs) == ["text_output"]


def test_grpc_concurrent_requests_get_their_own_text(server):
    prompts = [f"Tell me about topic number {i}." for i in range(5)]
    with LLMClient(server.grpc_url, "grpc", "ensemble") as c:
        alone = [c.generate(GenerateRequest(p, max_tokens=6, exclude_input_in_output=True)).text for p in prompts]
        together = c.generate_many(
            [
                GenerateRequest(p, max_tokens=6, stream=True, exclude_input_in_output=True, request_id=f"r{i}")
                for i, p in enumerate(prompts)
            ]
        )
    assert len(set(alone)) == 5
    assert [r.text for r in together] == alone
    assert [r.request_id for r in together] == [f"r{i}" for i in range(5)]


def test_token_ids_to_the_engine_over_grpc_exact(server):
    from repo_builder.runtime.synthetic import synthetic_token_ids

    prompt = [1, 1724, 338, 4933, 6509, 29973]
    with LLMClient(server.grpc_url, "grpc") as c:
        res = c.infer_token_ids(prompt, 5, streaming=True)
    assert res.token_ids == synthetic_token_ids(prompt, 5, SPEC["vocab_size"])
    with LLMClient(server.http_hostport, "http") as c:
        with pytest.raises(ClientError) as exc:  # tensorrt_llm is decoupled: HTTP /infer would refuse it
            c.infer_token_ids(prompt, 5)
    assert exc.value.key == "protocol"


def test_bench_on_rendered_repository(server, tmp_path):
    out = tmp_path / "bench"
    result = CliRunner().invoke(
        app,
        [
            "bench",
            "--url",
            server.grpc_url,
            "--protocol",
            "grpc",
            "--model",
            "tensorrt_llm_bls",
            "--stream",
            "--concurrency",
            "1,2",
            "--requests",
            "4",
            "--input-tokens",
            "32",
            "--output-tokens",
            "8",
            "--tokenizer-dir",
            str(asset("mistral_v1_tokenizer")),
            "--output",
            str(out),
            "--no-progress",
            "--warmup",
            "1",
        ],
    )
    assert result.exit_code == 0, result.output
    report = json.loads((out / "bench.json").read_text())
    assert report["server"]["min_tokens_sent"] and report["server"]["exclude_input_in_output_sent"]
    assert report["server"]["outputs_requested"] == ["text_output"]
    for lv in report["levels"]:
        assert (lv["completed"], lv["errors"]) == (4, 0)
        assert lv["chunks_per_request"] == 8
        assert lv["itl_ms"]["count"] == 4 * 7
        assert lv["output_tokens"] > 0
    assert (out / "bench.png").stat().st_size > 0 and (out / "bench.csv").read_text().count("\n") == 3


def test_same_client_serves_a_rendered_trtllm_0_5_repository(tmp_path):
    """trtllm-0.5: max_tokens UINT32, text_input dims [-1], bad_words/stop_words required (sent as "")."""
    from repo_builder.render import render_repository
    from repo_builder.server import LaunchConfig, TritonServer

    engine = tmp_path / "engine"
    engine.mkdir()
    (engine / "synthetic_engine.json").write_text(json.dumps(SPEC))
    repo = tmp_path / "repo05"
    render_repository(engine, asset("mistral_v1_tokenizer"), repo, profile="trtllm-0.5", streaming=True)
    http, grpc, metrics = free_ports(3)
    with TritonServer(
        LaunchConfig(model_repo=repo, http_port=http, grpc_port=grpc, metrics_port=metrics, no_mpi=True, timeout=300)
    ) as srv:
        texts: dict[tuple[str, bool], str] = {}
        for proto in ("http", "grpc"):
            with LLMClient(_url(srv, proto), proto, "ensemble") as c:
                info = c.model_info()
                assert info.inputs["max_tokens"].data_type == "TYPE_UINT32"
                assert info.inputs["text_input"].dims == (-1,) and not info.inputs["bad_words"].optional
                for stream in (False, True):
                    res = c.generate(
                        GenerateRequest("What is machine learning?", max_tokens=6, min_tokens=6, stream=stream)
                    )
                    assert res.ok, res.error
                    assert len(res.chunk_times_ns) == (6 if stream else 1)
                    texts[(proto, stream)] = res.text
                with pytest.raises(ClientError) as exc:
                    c.generate(GenerateRequest("x", end_id=-1))
                assert exc.value.key == "end_id"
    streamed = texts[("http", True)]
    assert streamed and texts[("grpc", True)] == streamed
    # whole-text responses may carry the prompt too (the old profile's exclude_input_in_output default)
    assert texts[("http", False)].endswith(streamed) and texts[("grpc", False)].endswith(streamed)


def test_generate_counts_tokens_from_the_server(server):
    """`generate` reports the server's num_output_tokens (it asks for them), not a re-tokenization of the text."""
    result = CliRunner().invoke(
        app,
        [
            "generate",
            "--url",
            server.grpc_url,
            "--protocol",
            "grpc",
            "--stream",
            "--text",
            "What is machine learning?",
            "--max-tokens",
            "7",
            "--min-tokens",
            "7",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "tokens generated: 7 (counted from the server's num_output_tokens)" in result.output
