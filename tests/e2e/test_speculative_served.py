"""End to end through a real tritonserver: draft-target speculative decoding in ``tensorrt_llm_bls``
(``render --draft-engine-dir``). The tiny random LLaMA is both target and draft (reference engine), so every
draft token is accepted; greedy text with ``num_draft_tokens`` equals the text without it, streamed and not,
and the perf outputs report the acceptance."""

from __future__ import annotations

import dataclasses

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


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_bench_reports_acceptance_and_tokens_per_step(server, tiny_llama, tmp_path, protocol):
    """``bench --model tensorrt_llm_bls --num-draft-tokens 4``: the level reports the draft tokens proposed and
    accepted (the BLS's perf outputs) and the tokens per target call. Streamed, each response is one iteration of
    the draft loop, so the tokens per step equal the output tokens over the streamed responses."""
    from repo_builder.bench import BenchSettings, format_table, run_bench, write_report

    settings = BenchSettings(
        url=server.http_hostport if protocol == "http" else server.grpc_url,
        protocol=protocol,
        model=BLS,
        stream=True,
        concurrency=[1],
        requests=3,
        output_tokens=16,
        input_tokens=8,
        tokenizer_dir=str(tiny_llama),
        warmup=0,
        min_tokens=False,
        num_draft_tokens=4,
    )
    report = run_bench(settings, progress=False)
    (level,) = report["levels"]
    spec = level["speculative"]
    assert spec["requests_reporting"] == 3 and spec["draft_tokens"] > 0
    assert spec["acceptance_rate"] == pytest.approx(1.0)  # the draft is the target
    chunks = sum(len(r["chunk_ns"]) for r in report["records"])
    tokens = sum(r["output_tokens"] for r in report["records"])
    assert spec["tokens_per_step"] == pytest.approx(tokens / chunks) and spec["tokens_per_step"] > 1.5
    paths = write_report(report, tmp_path / "out")
    header, row = paths["csv"].read_text().splitlines()[:2]
    assert header.endswith("acceptance_rate,tokens_per_step") and row.split(",")[-2] == "1.0"
    assert "tok/step" in [c.header for c in format_table(report).columns]
    from repo_builder.errors import ClientError

    with pytest.raises(ClientError) as err:  # the ensemble has no num_draft_tokens input
        run_bench(dataclasses.replace(settings, model="ensemble"), progress=False)
    assert err.value.key == "--num-draft-tokens"


def test_openai_front_end_passes_num_draft_tokens_to_the_bls(server, tmp_path):
    """The extension field ``num_draft_tokens`` through the OpenAI SDK: with ``--triton-model tensorrt_llm_bls``
    on this repository (it has a draft model) the greedy text equals the text without it; a front end whose
    requests go to the ensemble (no such input) refuses it with 400 naming the field."""
    openai = pytest.importorskip("openai")
    pytest.importorskip("fastapi")
    from e2e_support import openai_front_ends

    repo = server.config.model_repo
    with openai_front_ends(repo, server.grpc_url, [["--triton-model", "tensorrt_llm_bls"], []], log_dir=tmp_path) as (
        bls,
        ens,
    ):
        with openai.OpenAI(base_url=f"{bls}/v1", api_key="none", max_retries=0) as client:
            name = client.models.list().data[0].id
            ask = {"model": name, "prompt": PROMPT, "max_tokens": 16, "temperature": 0}
            plain = client.completions.create(**ask).choices[0].text
            spec = client.completions.create(**ask, extra_body={"num_draft_tokens": 4}).choices[0].text
            assert spec == plain and plain
            streamed = client.completions.create(**ask, stream=True, extra_body={"num_draft_tokens": 3})
            assert "".join(c.choices[0].text for c in streamed if c.choices) == plain
        with openai.OpenAI(base_url=f"{ens}/v1", api_key="none", max_retries=0) as client:
            with pytest.raises(openai.BadRequestError) as err:
                client.completions.create(**ask, extra_body={"num_draft_tokens": 4})
            assert err.value.body["param"] == "num_draft_tokens"
            assert client.completions.create(**ask).choices[0].text == plain  # the next request is served
