"""``repo-builder top``: a terminal view of a running server's key metrics, from scrapes of its metrics endpoint.

Two scrapes ``interval`` seconds apart give the rates; gauges are the latest scrape's. Families: Triton's
``nv_inference_*``, NVIDIA's ``nv_trt_llm_*`` and repo-builder's ``repo_builder_*`` (docs/metrics.md,
:mod:`repo_builder.runtime.metrics`). Parsing follows the Prometheus text exposition format 0.0.4 (what
Triton's ``/metrics`` serves): ``name{label="value",...} value``; comment lines are skipped.
"""

from __future__ import annotations

import re
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .errors import ClientError

if TYPE_CHECKING:
    from rich.table import Table

_LINE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')

Series = tuple[str, frozenset[tuple[str, str]]]


@dataclass
class Scrape:
    """One scrape: {(family or series name, labels): value}, and when it was taken (seconds, monotonic)."""

    values: dict[Series, float]
    at: float

    def total(self, name: str, **labels: str) -> float:
        """Sum of the series of ``name`` whose labels include ``labels``."""
        want = set(labels.items())
        return sum(v for (n, ls), v in self.values.items() if n == name and want <= ls)

    def label_values(self, name: str, label: str) -> list[str]:
        """The values of ``label`` among the series of ``name``, sorted."""
        return sorted({dict(ls)[label] for (n, ls) in self.values if n == name and label in dict(ls)})


def parse_metrics(text: str, at: float = 0.0) -> Scrape:
    """Parse Prometheus text format; lines that do not parse (or values that are not numbers) are skipped."""
    values: dict[Series, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = _LINE.match(line)
        if m is None:
            continue
        name, labels, raw = m.groups()
        try:
            value = float(raw)
        except ValueError:
            continue
        pairs = frozenset((k, v.replace('\\"', '"').replace("\\\\", "\\")) for k, v in _LABEL.findall(labels or ""))
        values[(name, pairs)] = value
    return Scrape(values, at)


def metrics_url(url: str) -> str:
    """``host:port`` or a full URL -> the ``/metrics`` URL."""
    if "://" not in url:
        url = f"http://{url}"
    scheme, rest = url.split("://", 1)
    if "/" not in rest:
        rest += "/metrics"
    return f"{scheme}://{rest}"


def scrape(url: str, *, timeout: float = 5.0) -> Scrape:
    """Fetch and parse ``url``. Raises ClientError naming the URL when it cannot be read."""
    import time

    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            text = resp.read().decode("utf-8", "replace")
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise ClientError(
            f"cannot read metrics from {url}: {exc}",
            key="URL",
            hint="give Triton's metrics endpoint, e.g. localhost:8002 (launch --metrics_port)",
        ) from None
    return parse_metrics(text, time.monotonic())


def _rate(prev: Scrape | None, cur: Scrape, name: str, **labels: str) -> float | None:
    if prev is None or cur.at <= prev.at:
        return None
    return max(0.0, cur.total(name, **labels) - prev.total(name, **labels)) / (cur.at - prev.at)


def _ratio(prev: Scrape | None, cur: Scrape, num: str, den: str, **labels: str) -> float | None:
    """Δnum / Δden between the scrapes (the whole history when there is no earlier scrape or nothing changed)."""
    dn = cur.total(num, **labels) - (prev.total(num, **labels) if prev else 0.0)
    dd = cur.total(den, **labels) - (prev.total(den, **labels) if prev else 0.0)
    if dd <= 0:
        dn, dd = cur.total(num, **labels), cur.total(den, **labels)
    return dn / dd if dd > 0 else None


def engine_rows(prev: Scrape | None, cur: Scrape) -> list[dict[str, float | str | None]]:
    """Per engine model (those exporting ``nv_trt_llm_request_metrics``): requests, KV cache, tokens/s, TTFT, ITL."""
    rows: list[dict[str, float | str | None]] = []
    req, kv = "nv_trt_llm_request_metrics", "nv_trt_llm_kv_cache_block_metrics"
    for model in cur.label_values(req, "model"):
        rows.append(
            {
                "model": model,
                "active": cur.total(req, model=model, request_type="active"),
                "waiting": cur.total(req, model=model, request_type="waiting"),
                "max": cur.total(req, model=model, request_type="max"),
                "kv_used": cur.total(kv, model=model, kv_cache_block_type="used"),
                "kv_max": cur.total(kv, model=model, kv_cache_block_type="max"),
                "tokens_per_s": _rate(prev, cur, "repo_builder_engine_output_tokens_total", model=model),
                "tokens_total": cur.total("repo_builder_engine_output_tokens_total", model=model),
                "ttft_s": _ratio(
                    prev,
                    cur,
                    "repo_builder_engine_first_token_seconds_sum",
                    "repo_builder_engine_first_token_seconds_count",
                    model=model,
                ),
                "itl_s": _ratio(
                    prev,
                    cur,
                    "repo_builder_engine_inter_token_seconds_total",
                    "repo_builder_engine_inter_token_gaps_total",
                    model=model,
                ),
            }
        )
    return rows


def model_rows(prev: Scrape | None, cur: Scrape) -> list[dict[str, float | str | None]]:
    """Per Triton model: requests/s, pending, and the text-side cost where the model has one."""
    rows: list[dict[str, float | str | None]] = []
    for model in cur.label_values("nv_inference_request_success", "model"):
        rows.append(
            {
                "model": model,
                "requests_per_s": _rate(prev, cur, "nv_inference_request_success", model=model),
                "failures": cur.total("nv_inference_request_failure", model=model),
                "pending": cur.total("nv_inference_pending_request_count", model=model),
                "tokenize_s": _ratio(
                    prev,
                    cur,
                    "repo_builder_tokenize_seconds_total",
                    "repo_builder_tokenize_requests_total",
                    model=model,
                ),
                "detokenize_s": _ratio(
                    prev,
                    cur,
                    "repo_builder_detokenize_seconds_total",
                    "repo_builder_detokenize_tokens_total",
                    model=model,
                ),
                "refused": cur.total("repo_builder_requests_refused_total", model=model),
            }
        )
    return rows


def _fmt(value: float | str | None, unit: str = "") -> str:
    if value is None:
        return "-"
    if isinstance(value, str):
        return value
    if unit == "ms":
        return f"{value * 1e3:.1f}"
    if unit == "us":
        return f"{value * 1e6:.1f}"
    return f"{value:.1f}" if value != int(value) else f"{int(value)}"


def tables(prev: Scrape | None, cur: Scrape, url: str) -> tuple[Table, Table]:
    """The rich tables of one view."""
    from rich.table import Table

    engine = Table(title=f"engine ({url})", title_justify="left")
    for col in ("model", "active", "waiting", "max", "KV used/max", "tok/s", "tokens", "TTFT ms", "ITL ms"):
        engine.add_column(col, justify="left" if col == "model" else "right")
    for r in engine_rows(prev, cur):
        engine.add_row(
            str(r["model"]),
            _fmt(r["active"]),
            _fmt(r["waiting"]),
            _fmt(r["max"]),
            f"{_fmt(r['kv_used'])}/{_fmt(r['kv_max'])}",
            _fmt(r["tokens_per_s"]),
            _fmt(r["tokens_total"]),
            _fmt(r["ttft_s"], "ms"),
            _fmt(r["itl_s"], "ms"),
        )
    models = Table(title="models", title_justify="left")
    for col in ("model", "req/s", "failed", "pending", "tokenize ms/req", "detok us/token", "refused"):
        models.add_column(col, justify="left" if col == "model" else "right")
    for r in model_rows(prev, cur):
        models.add_row(
            str(r["model"]),
            _fmt(r["requests_per_s"]),
            _fmt(r["failures"]),
            _fmt(r["pending"]),
            _fmt(r["tokenize_s"], "ms"),
            _fmt(r["detokenize_s"], "us"),
            _fmt(r["refused"]),
        )
    return (engine, models)
