"""Metrics for real: a real Prometheus (Debian's ``prometheus`` package, scripts/setup_env.sh) scrapes a real
tritonserver serving a synthetic-engine repository under load, and every dashboard panel's PromQL
(repo_builder/deploy/monitoring.py ``PANELS``, the queries the Grafana dashboard holds) returns what the load
implies: 8 concurrent streams show as 8 active engine requests with KV-cache blocks in use, the tokens counted
equal the tokens the clients received, everything returns to 0 afterwards, a refused request is counted by its
field, a stop string in the BLS is counted (streamed or not), and the launcher's ``histogram_latencies`` option
turns on Triton's own first-response histogram.

One server and one Prometheus for the module. The scrape config is the one ``repo-builder deploy monitoring``
writes (``monitoring_files``), with a 1 s scrape interval.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from cli_support import run_cli
from conftest import free_ports
from e2e_support import Stream, grpc_input, http_generate

from repo_builder.deploy.facts import read_facts
from repo_builder.deploy.monitoring import PANEL_BY_KEY, PANELS, front_models, monitoring_files, promql

pytestmark = pytest.mark.server

STREAMS = 8
TOKENS = 300  # per stream; at 20 ms per token a stream lasts about 6 s
WINDOW = "15s"
JOB = "rbtest"
PROMPT = "Tell me a long story about the sea"


def _prometheus_binary() -> str:
    found = shutil.which("prometheus")
    if found:
        return found
    if os.geteuid() == 0:
        pytest.fail("prometheus is not installed; scripts/setup_env.sh installs it (apt-get install prometheus)")
    pytest.skip("prometheus is not installed (scripts/setup_env.sh installs it when run as root)")


@pytest.fixture(scope="module")
def server(tmp_path_factory, render_repo_module, serve_module):
    from repo_builder.testing import packaged_tokenizer

    base = tmp_path_factory.mktemp("metrics")
    tok = packaged_tokenizer("mistral-v1", base / "tokenizer")
    engine = base / "engine"
    engine.mkdir()
    spec = {"vocab_size": 32000, "max_batch_size": STREAMS, "max_input_len": 64, "max_seq_len": 1024}
    (engine / "synthetic_engine.json").write_text(json.dumps(spec))
    repo = render_repo_module(engine, tok, streaming=True, values={"synthetic_token_delay_ms": 20}, name="metrics")
    with serve_module(repo, histogram_latencies=True) as srv:
        srv.repo = repo
        yield srv


class Prometheus:
    """A prometheus process and its HTTP query API."""

    def __init__(self, base: str, proc: subprocess.Popen, log: Path) -> None:
        self.base, self.proc, self.log = base, proc, log

    def query(self, expr: str, at: float | None = None) -> list[dict[str, Any]]:
        params = {"query": expr}
        if at is not None:
            params["time"] = f"{at:.3f}"
        url = f"{self.base}/api/v1/query?{urllib.parse.urlencode(params)}"
        with urllib.request.urlopen(url, timeout=10) as resp:
            body = json.loads(resp.read())
        assert body["status"] == "success", body
        return body["data"]["result"]

    def values(self, expr: str, by: str = "", at: float | None = None) -> dict[str, float]:
        """{label value of ``by`` (or ""): value, summed over the series sharing it}."""
        out: dict[str, float] = {}
        for r in self.query(expr, at):
            key = r["metric"].get(by, "")
            out[key] = out.get(key, 0.0) + float(r["value"][1])
        return out


@pytest.fixture(scope="module")
def prom(server, tmp_path_factory):
    binary = _prometheus_binary()
    base = tmp_path_factory.mktemp("prometheus")
    host_port = server.metrics_url.split("//", 1)[1].split("/", 1)[0]
    files = monitoring_files(read_facts(server.repo), job=JOB, targets=[host_port], scrape_interval="1s")
    (base / "prometheus.yml").write_text(files["prometheus.yml"])
    json.loads(files["grafana-dashboard.json"])  # the dashboard the panels come from is valid JSON
    (port,) = free_ports(1)
    log = base / "prometheus.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [
                binary,
                f"--config.file={base / 'prometheus.yml'}",
                f"--storage.tsdb.path={base / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--log.level=warn",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    p = Prometheus(f"http://127.0.0.1:{port}", proc, log)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if p.values(f'up{{job="{JOB}"}}').get("") == 1.0:
                    break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"prometheus did not scrape the server:\n{log.read_text()[-3000:]}")
            time.sleep(0.5)
        yield p
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()


def panel(p: Prometheus, server, key: str, by: str = "", at: float | None = None, query: int = 0) -> dict[str, float]:
    """The values of panel ``key``'s query number ``query``, grouped by label ``by``."""
    q = PANEL_BY_KEY[key].queries[query]
    return p.values(promql(q, job=JOB, window=WINDOW, front=front_models(read_facts(server.repo))), by, at)


def wait_for(what: str, check: Callable[[], Any], timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(0.5)
    pytest.fail(f"timed out waiting for {what} (last: {last})")


def ensemble_inputs(n: int) -> list[Any]:
    return [
        grpc_input("text_input", np.array([[PROMPT.encode()]], dtype=object)),
        grpc_input("max_tokens", np.array([[n]], np.int32)),
        grpc_input("stream", np.array([[True]], bool)),
        grpc_input("exclude_input_in_output", np.array([[True]], bool)),
        grpc_input("return_num_output_tokens", np.array([[True]], bool)),
    ]


@pytest.fixture(scope="module")
def load(server, prom):
    """8 concurrent ensemble streams; what Prometheus showed while they ran and what the clients received."""
    stream = Stream(server)
    ids = {f"load-{i}" for i in range(STREAMS)}
    result: dict[str, Any] = {}

    def run() -> None:
        for rid in sorted(ids):
            stream.send("ensemble", ensemble_inputs(TOKENS), rid, outputs=["text_output", "num_output_tokens"])
        result["got"], result["errors"] = stream.collect(set(ids), timeout=300)

    t = threading.Thread(target=run)
    t.start()
    try:
        # during the load: all 8 requests active in the engine (max batch size 8: all scheduled)
        def busy() -> dict[str, float] | None:
            states = panel(prom, server, "engine_requests", "request_type")
            return states if states.get("active") == STREAMS else None

        result["busy"] = wait_for("8 active engine requests", busy, timeout=120)
        result["busy_at"] = time.time()
    finally:
        t.join(300)
        stream.close()
    assert not result["errors"], result["errors"]
    received = 0
    for rid in ids:
        counts = [int(r.as_numpy("num_output_tokens").reshape(-1)[0]) for r in result["got"][rid]]
        received += sum(counts)
    assert received == STREAMS * TOKENS  # the synthetic engine never ends early
    result["received"] = received
    result["done_at"] = time.time()
    return result


# ---------------------------------------------------------------------------------------------- during the load
def test_engine_requests_during_the_streams(load):
    states = load["busy"]
    assert states["active"] == STREAMS
    assert states["scheduled"] == STREAMS  # all fit in one batch
    assert states["waiting"] == 0


def test_kv_cache_and_throughput_during_the_streams(load, prom, server):
    at = load["busy_at"]
    blocks = panel(prom, server, "kv_blocks", "kv_cache_block_type", at)
    # each stream holds at least its prompt's tokens: at least one 64-token block each
    assert blocks["used"] >= STREAMS
    assert 0 < panel(prom, server, "kv_fraction", "model", at)["tensorrt_llm"] < 1
    assert panel(prom, server, "output_tokens_rate", "model", at)["tensorrt_llm"] > 0
    pending = panel(prom, server, "triton_pending", "model", at)
    assert set(pending) >= {"tensorrt_llm", "preprocessing", "postprocessing"}


# ---------------------------------------------------------------------------------------------- after the load
def test_tokens_counted_equal_tokens_received_and_gauges_return_to_zero(load, prom, server):
    def settled() -> bool:
        states = panel(prom, server, "engine_requests", "request_type")
        blocks = panel(prom, server, "kv_blocks", "kv_cache_block_type")
        total = panel(prom, server, "output_tokens_total", "model").get("tensorrt_llm")
        return bool(total == load["received"] and set(states.values()) == {0.0} and blocks.get("used") == 0)

    wait_for("the counters to reach the received tokens and the gauges 0", settled)
    blocks = panel(prom, server, "kv_blocks", "kv_cache_block_type")
    assert blocks["free"] > 0
    assert panel(prom, server, "kv_fraction", "model")["tensorrt_llm"] == 0


def test_top_shows_the_engine_and_the_models(load, server):
    """`repo-builder top URL --once` after the load: the engine's row with every generated token."""

    url = server.metrics_url
    out = run_cli("top", url, "--once", "--interval", "1", env={**os.environ, "COLUMNS": "200"})
    assert out.returncode == 0, out.stderr
    engine = next(line for line in out.stdout.splitlines() if line.lstrip("│ ").startswith("tensorrt_llm "))
    assert str(load["received"]) in engine.split()
    for model in ("preprocessing", "postprocessing", "ensemble", "tensorrt_llm_bls"):
        assert model in out.stdout


def test_latency_panels(load, prom, server):
    at = load["done_at"] + 2
    wait_for("a scrape after the load", lambda: time.time() > at + 1, timeout=10)
    p50 = panel(prom, server, "ttft", at=at, query=0)[""]
    p95 = panel(prom, server, "ttft", at=at, query=1)[""]
    assert 0 < p50 <= p95 and math.isfinite(p95)
    itl = panel(prom, server, "itl", at=at)[""]
    assert itl >= 0.018  # the synthetic engine's pace is 20 ms per token; scheduling only adds to it
    latency = panel(prom, server, "request_latency", "model", at)
    assert latency["ensemble"] >= TOKENS * 0.018
    assert panel(prom, server, "requests_rate", "model", at)["ensemble"] > 0
    assert panel(prom, server, "finished_by_reason", "reason", at)["length"] > 0


def test_text_side_panels(load, prom, server):
    at = load["done_at"] + 2
    wait_for("a scrape after the load", lambda: time.time() > at + 1, timeout=10)
    assert panel(prom, server, "tokenize_per_request", "model", at)["preprocessing"] > 0
    assert panel(prom, server, "word_lists_per_request", "model", at)["preprocessing"] > 0
    assert panel(prom, server, "detokenize_per_token", "model", at)["postprocessing"] > 0
    stages = [panel(prom, server, "text_cpu", "model", at, query=i) for i in range(3)]
    tokenize, word_lists, detokenize = stages
    assert tokenize["preprocessing"] > 0 and word_lists["preprocessing"] > 0
    assert detokenize["postprocessing"] > 0


def test_refused_requests_and_stop_strings_are_counted(load, prom, server):
    status, _body = http_generate(server, "ensemble", {"text_input": PROMPT, "max_tokens": 0})
    assert status == 400
    # a stop string from the middle of the text this prompt gets (the synthetic engine is deterministic)
    status, body = http_generate(server, "tensorrt_llm_bls", {"text_input": PROMPT, "max_tokens": 40})
    assert status == 200
    words = body["text_output"].split()
    stop = words[len(words) // 2]
    stream = Stream(server)
    try:
        inputs = [
            grpc_input("text_input", np.array([[PROMPT.encode()]], dtype=object)),
            grpc_input("max_tokens", np.array([[40]], np.int32)),
            grpc_input("stream", np.array([[True]], bool)),
            grpc_input("stop_words", np.array([[stop.encode()]], dtype=object)),
        ]
        stream.send("tensorrt_llm_bls", inputs, "stopper")
        got, errors = stream.collect({"stopper"})
        assert not errors
    finally:
        stream.close()
    # the same stop string without streaming: the text is cut there, and the request is counted too
    status, body = http_generate(
        server, "tensorrt_llm_bls", {"text_input": PROMPT, "max_tokens": 40, "stop_words": [stop]}
    )
    assert status == 200 and body["text_output"].endswith(stop) and len(body["text_output"].split()) < len(words)

    def counted() -> Any:
        refused = panel(prom, server, "refused", "reason")
        stops = panel(prom, server, "bls_stream_ends", query=1).get("", 0)
        if refused.get("max_tokens", 0) > 0 and stops > 0:
            return True
        raw = prom.values('{__name__=~"repo_builder_(requests_refused|stop_strings_hit)_total"} > 0', "__name__")
        return raw, stop, [r.as_numpy("text_output") for r in got["stopper"]]

    deadline = time.monotonic() + 30
    while (last := counted()) is not True:
        if time.monotonic() > deadline:
            pytest.fail(f"the refusal and the stop string are not in Prometheus: {last}")
        time.sleep(0.5)
    assert panel(prom, server, "bls_stream_ends", query=0).get("", 0) == 0  # nothing was cancelled
    wait_for("both stop-string hits on /metrics", lambda: scraped(server, "repo_builder_stop_strings_hit_total") == 2)


def scraped(server, family: str, **labels: str) -> float:
    """The sum of ``family``'s samples on the server's /metrics whose labels hold ``labels``."""
    with urllib.request.urlopen(server.metrics_url, timeout=10) as resp:
        text = resp.read().decode()
    total = 0.0
    for line in text.splitlines():
        name, _, rest = line.partition("{")
        if name != family:
            continue
        held, _, value = rest.rpartition("}")
        if all(f'{k}="{v}"' in held for k, v in labels.items()):
            total += float(value)
    return total


def test_histogram_latencies_flag_exports_triton_latency_distributions(load, server):
    """``launch --histogram-latencies`` (the module's server) passes --metrics-config=histogram_latencies=true
    and summary_latencies=true. The tritonserver here (2.51) has no histograms (core r24.11 added them) and
    ignores that setting; it exports the latency summaries: nv_inference_request_summary_us per model, one
    observation per request (at least the load's 8 streams on tensorrt_llm). Without the flag neither family
    exists (Triton's default: counters only). On 2.52+ the first-response histogram is checked too."""
    assert "--metrics-config=histogram_latencies=true" in server.argv
    count = scraped(server, "nv_inference_request_summary_us_count", model="tensorrt_llm")
    assert count >= STREAMS
    assert scraped(server, "nv_inference_request_summary_us_sum", model="tensorrt_llm") > 0
    with urllib.request.urlopen(server.metrics_url, timeout=10) as resp:
        text = resp.read().decode()
    if "nv_inference_first_response_histogram_ms" in text:  # tritonserver 2.52+
        assert scraped(server, "nv_inference_first_response_histogram_ms_count", model="tensorrt_llm") >= STREAMS


def test_every_panel_is_checked_here():
    """A panel added to the dashboard needs a check in this module."""
    text = Path(__file__).read_text()
    assert [p.key for p in PANELS if f'"{p.key}"' not in text] == []
