"""`repo-builder deploy monitoring` and `deploy kubernetes --service-monitor`: the scrape config and every
dashboard query are checked by Prometheus's own ``promtool`` (Debian's prometheus package, installed by
scripts/setup_env.sh); tests/e2e/test_metrics_served.py runs the same queries against a real Prometheus under load."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from cli_support import assert_refused, run_cli
from deploy_support import rendered_repo

from repo_builder.deploy.facts import DeployError, read_facts
from repo_builder.deploy.kubernetes import KubernetesOptions, manifests
from repo_builder.deploy.monitoring import PANELS, front_models, promql

IMAGE = "nvcr.io/nvidia/tritonserver:25.12-trtllm-python-py3"


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> Path:
    return rendered_repo(tmp_path_factory.mktemp("mon"), 1, 1)


def cli(*args: str) -> subprocess.CompletedProcess:
    return run_cli("deploy", *args)


def promtool() -> str:
    found = shutil.which("promtool")
    if found:
        return found
    if os.geteuid() == 0:
        pytest.fail("promtool is not installed; scripts/setup_env.sh installs the prometheus package")
    pytest.skip("promtool is not installed (scripts/setup_env.sh installs it when run as root)")


def test_cli_writes_a_scrape_config_promtool_accepts_and_a_dashboard(repo, tmp_path) -> None:
    out = cli("monitoring", str(repo), "--output", str(tmp_path / "mon"), "--job", "llama", "--scrape-interval", "10s")
    assert out.returncode == 0, out.stderr
    assert sorted(p.name for p in (tmp_path / "mon").iterdir()) == ["grafana-dashboard.json", "prometheus.yml"]
    prom = yaml.safe_load((tmp_path / "mon" / "prometheus.yml").read_text())
    job = prom["scrape_configs"][0]
    assert job["job_name"] == "llama" and job["scrape_interval"] == "10s"
    assert job["static_configs"] == [{"targets": [f"localhost:{read_facts(repo).metrics_port}"]}]
    check = subprocess.run(
        [promtool(), "check", "config", str(tmp_path / "mon" / "prometheus.yml")], capture_output=True, text=True
    )
    assert check.returncode == 0, check.stdout + check.stderr

    dash = json.loads((tmp_path / "mon" / "grafana-dashboard.json").read_text())
    panels = [p for p in dash["panels"] if p["type"] != "row"]
    assert [p["title"] for p in panels] == [p.title for p in PANELS]
    assert {p["title"] for p in dash["panels"] if p["type"] == "row"} == {p.row for p in PANELS}
    exprs = [t["expr"] for p in panels for t in p["targets"]]
    assert all('job="llama"' in e and "{job}" not in e and "{window}" not in e for e in exprs)
    assert any('model=~"ensemble|tensorrt_llm_bls"' in e for e in exprs)


def test_scrape_config_holds_the_openai_front_ends_in_the_same_job(repo, tmp_path) -> None:
    """``--openai-target`` adds the front ends' /metrics to the job the dashboard's queries select."""
    out = cli(
        "monitoring",
        str(repo),
        "--output",
        str(tmp_path / "mon"),
        "--job",
        "llama",
        "--target",
        "triton:8002",
        "--openai-target",
        "front-a:9000",
        "--openai-target",
        "front-b:9000",
    )
    assert out.returncode == 0, out.stderr
    (job,) = yaml.safe_load((tmp_path / "mon" / "prometheus.yml").read_text())["scrape_configs"]
    assert job["job_name"] == "llama" and job["metrics_path"] == "/metrics"
    assert job["static_configs"] == [{"targets": ["triton:8002"]}, {"targets": ["front-a:9000", "front-b:9000"]}]
    check = subprocess.run(
        [promtool(), "check", "config", str(tmp_path / "mon" / "prometheus.yml")], capture_output=True, text=True
    )
    assert check.returncode == 0, check.stdout + check.stderr
    # the front end's panels select that job too
    dash = json.loads((tmp_path / "mon" / "grafana-dashboard.json").read_text())
    front = [
        t["expr"]
        for p in dash["panels"]
        if p.get("title", "").startswith(("Completion", "Requests / s, by"))
        for t in p["targets"]
    ]
    assert front and all('job="llama"' in e and "repo_builder_openai_" in e for e in front)


def test_every_panel_query_is_valid_promql(repo, tmp_path) -> None:
    """promtool parses each query as a recording rule's expression (Prometheus's own PromQL parser)."""
    front = front_models(read_facts(repo))
    rules = [
        {"record": f"rb:{p.key}:{i}", "expr": promql(q, job="llama", window="5m", front=front)}
        for p in PANELS
        for i, q in enumerate(p.queries)
    ]
    path = tmp_path / "rules.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    check = subprocess.run([promtool(), "check", "rules", str(path)], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    assert f"SUCCESS: {len(rules)} rules found" in check.stdout


def test_service_monitor_selects_the_service_and_its_metrics_port(repo) -> None:
    opts = KubernetesOptions(image=IMAGE, name="llama", pvc="models", namespace="ml", service_monitor="15s")
    docs = manifests(read_facts(repo), opts)
    service, monitor = docs[-2], docs[-1]
    assert monitor["kind"] == "ServiceMonitor" and monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["metadata"]["namespace"] == "ml"
    labels = service["metadata"]["labels"]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= labels.items()
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] in {p["name"] for p in service["spec"]["ports"]} and endpoint["port"] == "metrics"
    assert endpoint["interval"] == "15s"
    # with the OpenAI sidecar: its port, whose /metrics is the front end's, is scraped too
    sidecar = manifests(read_facts(repo), KubernetesOptions(**{**opts.__dict__, "openai_port": 9000}))
    ports = {p["name"] for p in sidecar[-2]["spec"]["ports"]}
    assert [e["port"] for e in sidecar[-1]["spec"]["endpoints"]] == ["metrics", "openai"] and "openai" in ports
    without = manifests(read_facts(repo), KubernetesOptions(image=IMAGE, name="llama", pvc="models"))
    assert [d["kind"] for d in without] == ["Deployment", "Service"]
    out = cli("kubernetes", str(repo), "--image", IMAGE, "--pvc", "models", "--name", "llama", "--service-monitor")
    assert out.returncode == 0, out.stderr
    assert [d["kind"] for d in yaml.safe_load_all(out.stdout)] == ["Deployment", "Service", "ServiceMonitor"]


@pytest.mark.parametrize(
    "args, key",
    [
        (["--scrape-interval", "often"], "--scrape-interval"),
        (["--job", "Bad_Job"], "--job"),
    ],
)
def test_bad_options_are_named(repo, tmp_path, args, key) -> None:
    out = cli("monitoring", str(repo), "--output", str(tmp_path / "m"), *args)
    assert_refused(out, key)
    assert not (tmp_path / "m").exists()
    with pytest.raises(DeployError):
        manifests(read_facts(repo), KubernetesOptions(image=IMAGE, name="x", pvc="m", service_monitor="soon"))


@pytest.mark.parametrize("metrics", [None, "true"])
def test_monitoring_says_when_the_repository_exports_no_repo_builder_metrics(tmp_path, metrics) -> None:
    """repo_builder_metrics is off by default (docs/performance.md 9.5): the dashboard's engine and text-side
    panels would stay empty, and `deploy monitoring` says so and how to turn them on."""
    from repo_builder.render import render_repository
    from repo_builder.testing import packaged_tokenizer

    engine = tmp_path / "engine"
    engine.mkdir()
    (engine / "synthetic_engine.json").write_text(json.dumps({"vocab_size": 32000}))
    tok = packaged_tokenizer("mistral-v1", tmp_path / "tokenizer")
    values = {"repo_builder_metrics": metrics} if metrics else {}
    render_repository(engine, tok, tmp_path / "repo", user_values=values)
    out = cli("monitoring", str(tmp_path / "repo"), "--output", str(tmp_path / "mon"))
    assert out.returncode == 0, out.stderr
    said = "repo_builder_metrics is false" in out.stderr and "--set repo_builder_metrics=true" in out.stderr
    assert said == (metrics is None), out.stderr
