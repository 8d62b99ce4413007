"""Metrics for real: a real Prometheus (Debian's ``prometheus`` package, scripts/setup_env.sh) scrapes a real
tritonserver serving a synthetic-engine repository under load, and every dashboard panel's PromQL
(repo_builder/deploy/monitoring.py ``PANELS``, the queries the Grafana dashboard holds) returns what the load
implies: 8 concurrent streams show as 8 active engine requests with KV-cache blocks in use, the tokens counted
equal the tokens the clients received, everything returns to 0 afterwards, a refused request is counted by its
field, a stop string in the BLS is counted (streamed or not), and the launcher's ``histogram_latencies`` option
turns on Triton's own first-response histogram. The engine model runs as two instances: their ``nv_trt_llm_*``
series are told apart by ``model_instance`` and the panels sum over them. The OpenAI front end
(``repo-builder openai``) is scraped in the same job: its panels show the requests the ``openai`` SDK sent by
status, the refused and the cancelled ones, TTFT and inter-token latency at the front door, and the completion
tokens counted equal the ``usage.completion_tokens`` the SDK received.

One server, one front end and one Prometheus for the module. The scrape config is the one ``repo-builder deploy
monitoring`` writes (``monitoring_files``), with a 1 s scrape interval.
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
from e2e_support import Stream, grpc_input, http_generate, openai_front_end

from repo_builder.deploy.facts import read_facts
from repo_builder.deploy.monitoring import PANEL_BY_KEY, PANELS, front_models, monitoring_files, promql

pytestmark = pytest.mark.server

STREAMS = 8
TOKENS = 300  # per stream; at 20 ms per token a stream lasts about 6 s
WINDOW = "15s"
JOB = "rbtest"
PROMPT = "Tell me a long story about the sea"
ENGINE_INSTANCES = 2
OPENAI_STREAMS = 4
OPENAI_TOKENS = 24


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
    values = {
        "synthetic_token_delay_ms": 20,
        "tensorrt_llm_instance_count": ENGINE_INSTANCES,
        "repo_builder_metrics": True,
    }
    repo = render_repo_module(engine, tok, streaming=True, values=values, name="metrics")
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
def front(server, tmp_path_factory):
    """``repo-builder openai`` against the module's server: its base URL."""
    with openai_front_end(server.repo, server.grpc_url, log_dir=tmp_path_factory.mktemp("front")) as base:
        yield base


@pytest.fixture(scope="module")
def prom(server, front, tmp_path_factory):
    binary = _prometheus_binary()
    base = tmp_path_factory.mktemp("prometheus")
    host_port = server.metrics_url.split("//", 1)[1].split("/", 1)[0]
    files = monitoring_files(
        read_facts(server.repo),
        job=JOB,
        targets=[host_port],
        openai_targets=[front.split("//", 1)[1]],
        scrape_interval="1s",
    )
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
                if p.values(f'sum(up{{job="{JOB}"}})').get("") == 2.0:  # Triton and the front end
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


def test_two_engine_instances_are_two_series_and_the_panels_sum_them(load, prom, server):
    """NVIDIA's labels plus ``model_instance``: each instance of the engine model has its own gauges (without the
    label Triton would hand both instances one series, and the last to set it would win)."""
    at = load["busy_at"]
    q = 'nv_trt_llm_request_metrics{job="%s",model="tensorrt_llm",request_type="%s"}'
    per_instance = prom.values(q % (JOB, "max"), "model_instance", at)
    assert sorted(per_instance) == [f"tensorrt_llm_0_{i}" for i in range(ENGINE_INSTANCES)]
    assert set(per_instance.values()) == {STREAMS}  # each instance's own max batch size
    active = prom.values(q % (JOB, "active"), "model_instance", at)
    assert sorted(active) == sorted(per_instance) and sum(active.values()) == STREAMS == load["busy"]["active"]
    (labels,) = {
        frozenset(r["metric"]) - {"model_instance", "instance", "job", "__name__"}
        for r in prom.query(q % (JOB, "active"), at)
    }
    assert labels == {"model", "version", "request_type"}  # NVIDIA's labels, kept
    # the per-instance counters add up to the total the panel shows
    iterations = prom.values('nv_trt_llm_general_metrics{general_type="iteration_counter"}', "model_instance", at)
    assert len(iterations) == ENGINE_INSTANCES


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


# ---------------------------------------------------------------------------------------------- the OpenAI front end
@pytest.fixture(scope="module")
def openai_load(front, prom, load):
    """After the engine load (so it does not change that load's figures): streamed completions with usage, a
    completion, a request for a model that is not served, a chat request the tokenizer cannot format; what the
    SDK received."""
    from openai import BadRequestError, NotFoundError, OpenAI

    client = OpenAI(base_url=f"{front}/v1", api_key="unused", max_retries=0)
    (model,) = [m.id for m in client.models.list().data]
    usage: list[int] = []
    deltas: list[int] = []

    def stream() -> None:
        chunks = client.completions.create(
            model=model,
            prompt=PROMPT,
            max_tokens=OPENAI_TOKENS,
            stream=True,
            stream_options={"include_usage": True},
        )
        n = 0
        for chunk in chunks:
            if chunk.choices and chunk.choices[0].text:
                n += 1
            if chunk.usage is not None:
                usage.append(chunk.usage.completion_tokens)
        deltas.append(n)

    threads = [threading.Thread(target=stream) for _ in range(OPENAI_STREAMS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    answer = client.completions.create(model=model, prompt=PROMPT, max_tokens=OPENAI_TOKENS)
    assert answer.usage is not None
    usage.append(answer.usage.completion_tokens)
    with pytest.raises(NotFoundError):
        client.completions.create(model="not-served", prompt=PROMPT, max_tokens=4)
    with pytest.raises(BadRequestError, match="chat template"):  # this tokenizer has none
        client.chat.completions.create(model=model, messages=[{"role": "user", "content": PROMPT}], max_tokens=4)
    assert len(usage) == OPENAI_STREAMS + 1 and all(u == OPENAI_TOKENS for u in usage), usage
    assert len(deltas) == OPENAI_STREAMS and all(d > 1 for d in deltas), deltas
    return {"client": client, "model": model, "tokens": sum(usage), "done_at": time.time()}


def test_openai_panels_count_what_the_sdk_received(openai_load, prom, server):
    at = openai_load["done_at"] + 2
    wait_for("a scrape after the front end's load", lambda: time.time() > at + 1, timeout=10)

    def counted() -> Any:
        total = panel(prom, server, "openai_output_tokens_total", "model").get(openai_load["model"])
        return total == openai_load["tokens"] or total

    wait_for("the front end's token count", lambda: counted() is True)
    assert panel(prom, server, "openai_output_tokens_rate", "model", at)[openai_load["model"]] > 0
    statuses = panel(prom, server, "openai_requests", "status", at)
    assert statuses["200"] > 0 and statuses["404"] > 0 and statuses["400"] > 0 and statuses["500"] == 0
    refused = panel(prom, server, "openai_refused", "reason", at)
    assert refused["model_not_found"] > 0 and refused["no_chat_template"] > 0 and refused["invalid_value"] == 0
    assert panel(prom, server, "openai_refused", at=at, query=1)[""] == 0  # nothing cancelled yet
    ttft = [panel(prom, server, "openai_ttft", at=at, query=i)[""] for i in (0, 1)]
    assert 0 < ttft[0] <= ttft[1] and math.isfinite(ttft[1])
    itl = [panel(prom, server, "openai_itl", at=at, query=i)[""] for i in (0, 1)]
    # the synthetic engine's pace is 20 ms per token; deltas at the front door are no closer than that on
    # the median (buckets 10 ms / 25 ms: the quantile interpolates within them)
    assert 0.01 <= itl[0] <= itl[1] and math.isfinite(itl[1])


def test_openai_cancelled_stream_is_counted(openai_load, prom, server):
    client = openai_load["client"]
    chunks = client.completions.create(model=openai_load["model"], prompt=PROMPT, max_tokens=200, stream=True)
    for chunk in chunks:
        if chunk.choices and chunk.choices[0].text:
            break
    chunks.close()  # the client goes away mid-answer
    wait_for("the cancelled stream in Prometheus", lambda: panel(prom, server, "openai_refused", query=1)[""] > 0)


def test_every_panel_is_checked_here():
    """A panel added to the dashboard needs a check in this module."""
    text = Path(__file__).read_text()
    assert [p.key for p in PANELS if f'"{p.key}"' not in text] == []
