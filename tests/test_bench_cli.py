"""`repo-builder bench` end to end on the text test double served by a real tritonserver.

The fixture generates word ``i`` = prompt word ``i`` (cycled, upper-cased, leading space), one streamed
response per word, so the expected text of every request, and hence its token count under the LLaMA-2
tokenizer, is known in advance.
"""

from __future__ import annotations

import csv
import json

import pytest
from cli_support import assert_refused
from conftest import asset, free_ports
from fixtures.client.serve import fixture_server
from typer.testing import CliRunner

from repo_builder.bench import synthetic_prompts
from repo_builder.cli import app

pytestmark = pytest.mark.server


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with fixture_server(tmp_path_factory.mktemp("bench"), free_ports(3), token_delay_ms=1) as srv:
        yield srv


def _expected_text(prompt: str, n: int) -> str:
    words = prompt.split()
    return "".join(" " + words[i % len(words)].upper() for i in range(n))


def test_bench_stream_http_writes_json_csv_png_with_exact_counts(server, tmp_path):
    from transformers import AutoTokenizer

    tok_dir = asset("mistral_v1_tokenizer")
    out = tmp_path / "results"
    result = CliRunner().invoke(
        app,
        [
            "bench",
            "--url",
            server.http_hostport,
            "--model",
            "fake_llm",
            "--stream",
            "--concurrency",
            "1,2",
            "--requests",
            "6",
            "--input-tokens",
            "12",
            "--output-tokens",
            "4",
            "--tokenizer-dir",
            str(tok_dir),
            "--output",
            str(out),
            "--no-progress",
            "--warmup",
            "1",
        ],
    )
    assert result.exit_code == 0, result.output
    for name in ("bench.json", "bench.csv", "bench.png", "requests.jsonl"):
        assert (out / name).is_file(), name
    assert (out / "bench.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    report = json.loads((out / "bench.json").read_text())
    assert report["server"]["model"] == "fake_llm" and report["server"]["decoupled"] is True
    assert report["server"]["version"].count(".") == 2  # e.g. 2.51.0 from GET /v2
    assert report["server"]["min_tokens_sent"] and report["server"]["exclude_input_in_output_sent"]
    assert report["prompts"]["input_tokens_mean"] == pytest.approx(12, abs=1)
    tok = AutoTokenizer.from_pretrained(str(tok_dir))
    prompts = synthetic_prompts(6, 12, tok)
    expected_tokens = sum(len(tok.encode(_expected_text(p.text, 4), add_special_tokens=False)) for p in prompts)
    assert [lv["concurrency"] for lv in report["levels"]] == [1, 2]
    for lv in report["levels"]:
        assert (lv["requests"], lv["completed"], lv["errors"]) == (6, 6, 0)
        assert lv["chunks_per_request"] == 4  # one response per generated word
        assert lv["itl_ms"]["count"] == 6 * 3  # 3 gaps per request, pooled
        assert lv["output_tokens"] == expected_tokens  # one tokenization of each whole text
        assert lv["ttft_ms"]["p50"] <= lv["e2e_ms"]["p50"]
        assert lv["ttft_ms"]["p50"] <= lv["ttft_ms"]["p90"] <= lv["ttft_ms"]["p99"]
        assert lv["output_tokens_per_s"] == pytest.approx(expected_tokens / lv["wall_s"])
        assert lv["requests_per_s"] == pytest.approx(6 / lv["wall_s"])
        assert lv["client_cpu_s"] >= 0 and lv["client_cpu_ms_per_request"] >= 0

    rows = list(csv.DictReader((out / "bench.csv").open()))
    assert [r["concurrency"] for r in rows] == ["1", "2"]
    assert float(rows[0]["ttft_p50_ms"]) == pytest.approx(report["levels"][0]["ttft_ms"]["p50"])
    lines = (out / "requests.jsonl").read_text().splitlines()
    assert len(lines) == 12
    rec = json.loads(lines[0])
    assert len(rec["chunk_ns"]) == 4 and rec["start_ns"] < rec["chunk_ns"][0] <= rec["end_ns"]
    assert "TTFT" in result.stdout and "bench.json" in result.stdout


def test_bench_grpc_without_stream_and_error_counting(server, tmp_path):
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(
        "\n".join(
            json.dumps(p)
            for p in [
                {"text": "alpha beta"},
                {"text": "gamma FAIL"},
                {"prompt": "delta epsilon", "output_tokens": 2},
                {"text_input": "zeta eta theta"},
            ]
        )
        + "\n"
    )
    out = tmp_path / "grpc"
    result = CliRunner().invoke(
        app,
        [
            "bench",
            "--url",
            server.grpc_url,
            "--protocol",
            "grpc",
            "--model",
            "fake_llm",
            "--concurrency",
            "2",
            "--requests",
            "8",
            "--output-tokens",
            "3",
            "--prompts",
            str(prompts),
            "--output",
            str(out),
            "--no-progress",
            "--warmup",
            "0",
        ],
    )
    assert result.exit_code == 0, result.output
    level = json.loads((out / "bench.json").read_text())["levels"][0]
    assert (level["requests"], level["completed"], level["errors"]) == (8, 6, 2)  # prompt 2 of 4 fails, twice
    assert any("fake_llm" in m and "asked this model to fail" in m for m in level["error_messages"])
    assert level["chunks_per_request"] == 1 and level["itl_ms"]["count"] == 0  # not streamed
    assert level["ttft_ms"]["p50"] == pytest.approx(level["e2e_ms"]["p50"])
    assert level["output_tokens"] is None and level["output_tokens_per_s"] is None  # no tokenizer, no ids
    assert "output tokens are not counted" in result.stdout


def test_bench_refuses_stream_on_non_decoupled_and_bad_options(server, tmp_path):
    runner = CliRunner()
    res = runner.invoke(
        app,
        [
            "bench",
            "--url",
            server.http_hostport,
            "--model",
            "fake_llm_sync",
            "--stream",
            "--output",
            str(tmp_path / "x"),
            "--no-progress",
        ],
    )
    assert_refused(res, "--stream")
    res = runner.invoke(
        app,
        [
            "bench",
            "--url",
            server.http_hostport,
            "--concurrency",
            "1,zero",
            "--output",
            str(tmp_path / "y"),
            "--no-progress",
        ],
    )
    assert_refused(res, "--concurrency")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "ok"}\n{"nope": 1}\n')
    res = runner.invoke(
        app,
        [
            "bench",
            "--url",
            server.http_hostport,
            "--model",
            "fake_llm",
            "--prompts",
            str(bad),
            "--output",
            str(tmp_path / "z"),
            "--no-progress",
        ],
    )
    assert_refused(res, "line 2", "--prompts")
