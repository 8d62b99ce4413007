"""`repo-builder top`: the Prometheus text parser and the rows it shows (the live view against a real server is
tested in tests/e2e/test_metrics_served.py)."""

from __future__ import annotations

from cli_support import run_cli
from conftest import free_ports

from repo_builder.top import engine_rows, metrics_url, model_rows, parse_metrics

TEXT = """# HELP nv_trt_llm_request_metrics TRT LLM request metrics
# TYPE nv_trt_llm_request_metrics gauge
nv_trt_llm_request_metrics{model="tensorrt_llm",request_type="active",version="1"} 3
nv_trt_llm_request_metrics{model="tensorrt_llm",request_type="max",version="1"} 8
nv_trt_llm_request_metrics{model="tensorrt_llm",request_type="waiting",version="1"} 1
nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="used",model="tensorrt_llm",version="1"} 5
repo_builder_engine_output_tokens_total{model="tensorrt_llm",version="1"} {tokens}
repo_builder_engine_first_token_seconds_sum{model="tensorrt_llm",version="1"} 0.5
repo_builder_engine_first_token_seconds_count{model="tensorrt_llm",version="1"} 10
nv_inference_request_success{model="pre\\"q",version="1"} {ok}
repo_builder_tokenize_seconds_total{model="pre\\"q",version="1"} 0.02
repo_builder_tokenize_requests_total{model="pre\\"q",version="1"} 10
nv_inference_request_success{model="postprocessing",version="1"} 1e+01
not a metric line
"""


def scrape(tokens: int, ok: int, at: float):
    return parse_metrics(TEXT.replace("{tokens}", str(tokens)).replace("{ok}", str(ok)), at)


def test_rows_from_two_scrapes():
    prev, cur = scrape(100, 4, 10.0), scrape(300, 8, 12.0)
    (engine,) = engine_rows(prev, cur)
    assert engine["active"] == 3 and engine["waiting"] == 1 and engine["max"] == 8 and engine["kv_used"] == 5
    assert engine["tokens_per_s"] == 100.0 and engine["tokens_total"] == 300
    assert engine["ttft_s"] == 0.05  # nothing new between the scrapes: the whole history's mean
    rows = {r["model"]: r for r in model_rows(prev, cur)}
    assert set(rows) == {'pre"q', "postprocessing"}  # escaped quotes in label values
    assert rows['pre"q']["requests_per_s"] == 2.0
    assert rows['pre"q']["tokenize_s"] == 0.002
    assert rows["postprocessing"]["tokenize_s"] is None
    assert engine_rows(None, cur)[0]["tokens_per_s"] is None


def test_metrics_url_and_an_unreachable_server_is_a_clear_error():
    assert metrics_url("localhost:8002") == "http://localhost:8002/metrics"
    assert metrics_url("http://h:1/custom") == "http://h:1/custom"
    (port,) = free_ports(1)
    out = run_cli("top", f"127.0.0.1:{port}", "--once", "--interval", "0.1", timeout=60)
    assert out.returncode != 0 and f"127.0.0.1:{port}/metrics" in out.stderr and "Traceback" not in out.stderr
