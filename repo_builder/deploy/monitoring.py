"""Monitoring for a rendered repository: a Prometheus scrape config, a Grafana dashboard, a ServiceMonitor.

The dashboard's panels and their PromQL live in one table, :data:`PANELS`; the dashboard JSON, ``repo-builder
top`` and tests/e2e/test_metrics_served.py (which runs every query against a real Prometheus scraping a loaded server)
all read it. Queries use Triton's own families (``nv_inference_*``, core r24.10), NVIDIA's TensorRT-LLM
families (``nv_trt_llm_*``, ``nv_llm_*``; tensorrtllm_backend v0.19.0 README "Triton Metrics") and
repo-builder's (``repo_builder_*``); :mod:`repo_builder.runtime.metrics` defines the latter two and
docs/metrics.md explains them. Every query selects ``job="<job>"`` (the scrape job), so one Prometheus can
hold several deployments, and sums over the engine's ``model_instance`` label (two instances of one engine
model are two series, :data:`repo_builder.runtime.metrics.INSTANCE_LABEL`) and over scrape targets.

In a query text, ``{job}`` is the job name, ``{window}`` the rate window (Grafana: ``$__rate_interval``;
tests: a fixed duration) and ``{front}`` a regex of the models clients call (ensemble and BLS models).
"""

from __future__ import annotations

import json
from typing import Any

from .facts import DeployError, DeploymentFacts, check_name
from .panels import _J, PANEL_BY_KEY, PANELS, Panel, Query  # noqa: F401  (re-exported: moved from this module)

#: the rate window the dashboard uses (Grafana's variable: at least four scrape intervals)
GRAFANA_WINDOW = "$__rate_interval"


def front_models(facts: DeploymentFacts) -> list[str]:
    """The models clients call: ensembles and BLS models (``ensemble``, ``NAME_ensemble``, ``tensorrt_llm_bls``...)."""
    return [m for m in facts.models if m.endswith("ensemble") or m.endswith("tensorrt_llm_bls")]


def promql(query: Query, *, job: str, window: str, front: list[str] | str) -> str:
    """``query`` with its placeholders filled (``front``: model names, joined into a regex)."""
    regex = front if isinstance(front, str) else "|".join(front) or ".+"
    return query.expr.replace("{job}", job).replace("{window}", window).replace("{front}", regex)


def _check_interval(value: str, key: str) -> str:
    import re

    if not re.fullmatch(r"[1-9][0-9]*(ms|s|m|h)", value):
        raise DeployError(f"{key} must be a duration like 5s or 1m, got {value!r}", key=key)
    return value


def prometheus_config(
    job: str, targets: list[str], *, openai_targets: list[str] | None = None, scrape_interval: str = "5s"
) -> dict[str, Any]:
    """A ``prometheus.yml`` (as a dict) with one scrape job for Triton's metrics endpoint(s) ``targets`` and the
    OpenAI front ends' ``/metrics`` ``openai_targets`` (``host:port`` each; one job, so the dashboard's
    ``job`` selector holds both, Prometheus's ``instance`` label tells them apart). Raises DeployError for a bad
    job name or interval."""
    check_name(job, key="--job", max_len=63)
    _check_interval(scrape_interval, "--scrape-interval")
    if not targets:
        raise DeployError("no scrape target given", key="--target", hint="e.g. --target localhost:8002")
    groups: list[dict[str, Any]] = [{"targets": list(targets)}]
    if openai_targets:
        groups.append({"targets": list(openai_targets)})
    return {
        "global": {"scrape_interval": scrape_interval, "evaluation_interval": scrape_interval},
        "scrape_configs": [
            {
                "job_name": job,
                "metrics_path": "/metrics",
                "scrape_interval": scrape_interval,
                "static_configs": groups,
            }
        ],
    }


def dashboard(facts: DeploymentFacts, job: str, *, title: str | None = None) -> dict[str, Any]:
    """The Grafana dashboard (JSON model, schemaVersion 39) of :data:`PANELS` for scrape job ``job``, with a
    ``datasource`` variable of type prometheus."""
    check_name(job, key="--job", max_len=63)
    front = front_models(facts)
    ds = {"type": "prometheus", "uid": "${datasource}"}
    panels: list[dict[str, Any]] = []
    y = 0
    row = None
    x = 0
    pid = 1
    for p in PANELS:
        if p.row != row:
            if x:
                y += 8
                x = 0
            row = p.row
            panels.append(
                {
                    "type": "row",
                    "title": row,
                    "id": pid,
                    "collapsed": False,
                    "gridPos": {"h": 1, "w": 24, "x": 0, "y": y},
                }
            )
            pid += 1
            y += 1
        targets = [
            {
                "refId": chr(ord("A") + i),
                "datasource": ds,
                "expr": promql(q, job=job, window=GRAFANA_WINDOW, front=front),
                "legendFormat": q.legend,
            }
            for i, q in enumerate(p.queries)
        ]
        panels.append(
            {
                "type": p.kind,
                "title": p.title,
                "description": p.description,
                "id": pid,
                "datasource": ds,
                "gridPos": {"h": 8, "w": 6, "x": x, "y": y},
                "fieldConfig": {"defaults": {"unit": p.unit}, "overrides": []},
                "options": {},
                "targets": targets,
            }
        )
        pid += 1
        x += 6
        if x >= 24:
            x = 0
            y += 8
    return {
        "title": title or f"repo-builder: {job}",
        "uid": f"rb-{job}"[:40],
        "tags": ["repo-builder", "triton", "tensorrt-llm"],
        "timezone": "browser",
        "schemaVersion": 39,
        "version": 1,
        "refresh": "10s",
        "time": {"from": "now-30m", "to": "now"},
        "templating": {
            "list": [
                {
                    "name": "datasource",
                    "label": "Prometheus",
                    "type": "datasource",
                    "query": "prometheus",
                    "current": {},
                    "hide": 0,
                }
            ]
        },
        "panels": panels,
    }


def service_monitor(
    name: str, selector: dict[str, str], *, namespace: str | None, interval: str, openai: bool = False
) -> dict[str, Any]:
    """A prometheus-operator ``ServiceMonitor`` (monitoring.coreos.com/v1) scraping the Service's ``metrics``
    port every ``interval``, and its ``openai`` port (the front end's ``/metrics``) when ``openai``."""
    _check_interval(interval, "--scrape-interval")
    meta: dict[str, Any] = {"name": name}
    if namespace:
        meta["namespace"] = namespace
    meta["labels"] = {"app.kubernetes.io/instance": name, "app.kubernetes.io/managed-by": "repo-builder"}
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "ServiceMonitor",
        "metadata": meta,
        "spec": {
            "selector": {"matchLabels": dict(selector)},
            "endpoints": [
                {"port": port, "path": "/metrics", "interval": interval}
                for port in ("metrics", "openai")[: 2 if openai else 1]
            ],
        },
    }


def monitoring_files(
    facts: DeploymentFacts,
    *,
    job: str,
    targets: list[str],
    openai_targets: list[str] | None = None,
    scrape_interval: str = "5s",
) -> dict[str, str]:
    """``{file name: text}``: ``prometheus.yml`` and ``grafana-dashboard.json``."""
    import yaml

    prom = prometheus_config(job, targets, openai_targets=openai_targets, scrape_interval=scrape_interval)
    return {
        "prometheus.yml": yaml.safe_dump(prom, sort_keys=False, default_flow_style=False),
        "grafana-dashboard.json": json.dumps(dashboard(facts, job), indent=2) + "\n",
    }
