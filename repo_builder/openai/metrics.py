"""The OpenAI front end's own Prometheus metrics, served on its ``GET /metrics`` (text exposition 0.0.4).

The families (:data:`FAMILIES`) use the same :class:`~repo_builder.runtime.metrics.Family` records and naming
scheme as the served models' ``repo_builder_*`` families (``repo_builder_<what>_<unit>``, counters ending in
``_total``, durations in seconds, the ``model`` label; histograms with
:data:`~repo_builder.runtime.metrics.LATENCY_BUCKETS`), prefixed ``repo_builder_openai_``: what the client
sees at the front door, beside what the models see inside Triton. docs/metrics.md lists them (generated).

Every series carries ``model`` (the served model id clients send; ``""`` for a request that named no served
model: 401, 404, a body that is not JSON) and the family's category label, if any. All series exist from
the start (zeros), so a dashboard shows 0 rather than no data.

Measured where: TTFT from the request's arrival at the ASGI app to the first text delta handed to the
writer (streamed requests only); inter-token latency between successive text deltas of a stream; tokens
out = ``usage.completion_tokens`` of every answer. Cost: a counter is a dict update, a histogram a bisect
(about 1 µs per token in all); one process, one event loop, so no lock.
"""

from __future__ import annotations

import time
from bisect import bisect_left
from collections.abc import Iterable
from typing import Any

from ..runtime.metrics import COUNTER, HISTOGRAM, LATENCY_BUCKETS, Family

#: ``role`` of the front end's families in docs/metrics.md's "exported by" column
FRONT = "openai front end"

#: HTTP statuses the front end answers with (any other counts as ``other``)
STATUSES = ("200", "400", "401", "404", "405", "500", "503", "other")

#: why a request was refused: the OpenAI error ``code`` of the 4xx answer (:class:`~.protocol.APIError`)
REFUSAL_REASONS = (
    "invalid_api_key",
    "model_not_found",
    "invalid_json",
    "invalid_type",
    "invalid_value",
    "missing_required_parameter",
    "unrecognized_argument",
    "unsupported_parameter",
    "no_chat_template",
    "other",
)

_F = (FRONT,)
FAMILIES: tuple[Family, ...] = (
    Family(
        "repo_builder_openai_requests_total",
        COUNTER,
        "Requests the OpenAI front end answered (/v1 and /health), by HTTP status",
        _F,
        "status",
        STATUSES,
        unit="requests",
    ),
    Family(
        "repo_builder_openai_requests_refused_total",
        COUNTER,
        "Requests the OpenAI front end refused as the client's mistake (4xx), by OpenAI error code",
        _F,
        "reason",
        REFUSAL_REASONS,
        unit="requests",
    ),
    Family(
        "repo_builder_openai_streams_cancelled_total",
        COUNTER,
        "Requests whose client went away before the answer was complete (the Triton request is cancelled)",
        _F,
        unit="requests",
    ),
    Family(
        "repo_builder_openai_output_tokens_total",
        COUNTER,
        "Completion tokens answered (usage.completion_tokens: the engine's count)",
        _F,
        unit="tokens",
    ),
    Family(
        "repo_builder_openai_first_token_seconds",
        HISTOGRAM,
        "Streamed requests: time from the request's arrival at the front end to its first text delta",
        _F,
        buckets=LATENCY_BUCKETS,
        unit="seconds",
    ),
    Family(
        "repo_builder_openai_inter_token_seconds",
        HISTOGRAM,
        "Streamed requests: time between successive text deltas at the front end",
        _F,
        buckets=LATENCY_BUCKETS,
        unit="seconds",
    ),
)

#: the ASGI scope key holding the request's arrival (``time.perf_counter()``), set by :class:`MetricsMiddleware`
ARRIVAL = "repo_builder.arrival"


class _Histogram:
    __slots__ = ("buckets", "counts", "sum", "count")

    def __init__(self, buckets: tuple[float, ...]) -> None:
        self.buckets = buckets
        self.counts = [0] * (len(buckets) + 1)
        self.sum = 0.0
        self.count = 0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.buckets, value)] += 1
        self.sum += value
        self.count += 1


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _num(value: float) -> str:
    return repr(float(value)) if value != int(value) else str(int(value))


class FrontEndMetrics:
    """The values of :data:`FAMILIES` for the served model ids ``models`` (plus ``""``, no model)."""

    def __init__(self, models: Iterable[str]) -> None:
        self.models = ["", *models]
        self.counters: dict[tuple[str, str, str | None], float] = {}
        self.histograms: dict[tuple[str, str], _Histogram] = {}
        for fam in FAMILIES:
            for model in self.models:
                if fam.kind == HISTOGRAM:
                    assert fam.buckets is not None
                    self.histograms[(fam.name, model)] = _Histogram(fam.buckets)
                else:
                    for cat in fam.values or (None,):
                        self.counters[(fam.name, model, cat)] = 0.0

    def inc(self, name: str, model: str = "", category: str | None = None, n: float = 1) -> None:
        key = (name, model, category)
        if key in self.counters:
            self.counters[key] += n
        else:  # a model id or a category this table does not list: counted, not invented
            other = (name, model if (name, model, "other") in self.counters else "", "other" if category else None)
            if other in self.counters:
                self.counters[other] += n

    def observe(self, name: str, model: str, value: float) -> None:
        hist = self.histograms.get((name, model))
        if hist is not None:
            hist.observe(value)

    def status(self, model: str, status: int) -> None:
        self.inc("repo_builder_openai_requests_total", model, str(status) if str(status) in STATUSES else "other")

    def refused(self, model: str, code: str | None) -> None:
        reason = code if code in REFUSAL_REASONS else "other"
        self.inc("repo_builder_openai_requests_refused_total", model, reason)

    def exposition(self) -> str:
        """Prometheus text exposition (format 0.0.4) of every series."""
        out: list[str] = []
        for fam in FAMILIES:
            out.append(f"# HELP {fam.name} {fam.description}")
            out.append(f"# TYPE {fam.name} {fam.kind}")
            for model in self.models:
                labels = f'model="{_escape(model)}"'
                if fam.kind == HISTOGRAM:
                    hist = self.histograms[(fam.name, model)]
                    cumulative = 0
                    for bound, count in zip((*hist.buckets, float("inf")), hist.counts):
                        cumulative += count
                        le = "+Inf" if bound == float("inf") else _num(bound)
                        out.append(f'{fam.name}_bucket{{{labels},le="{le}"}} {cumulative}')
                    out.append(f"{fam.name}_sum{{{labels}}} {_num(hist.sum)}")
                    out.append(f"{fam.name}_count{{{labels}}} {hist.count}")
                    continue
                for cat in fam.values or (None,):
                    extra = f',{fam.label}="{cat}"' if cat is not None else ""
                    out.append(f"{fam.name}{{{labels}{extra}}} {_num(self.counters[(fam.name, model, cat)])}")
        return "\n".join(out) + "\n"


class StreamTimer:
    """TTFT and inter-token latency of one streamed answer, observed as its text deltas are produced."""

    __slots__ = ("metrics", "model", "last", "first")

    def __init__(self, metrics: FrontEndMetrics, model: str, arrival: float | None) -> None:
        self.metrics, self.model, self.last, self.first = metrics, model, arrival, True

    def delta(self) -> None:
        """A text delta is handed to the writer now."""
        now = time.perf_counter()
        last = self.last
        if self.first:
            self.first = False
            if last is not None:
                self.metrics.observe("repo_builder_openai_first_token_seconds", self.model, now - last)
        elif last is not None:
            self.metrics.observe("repo_builder_openai_inter_token_seconds", self.model, now - last)
        self.last = now


class MetricsMiddleware:
    """Pure ASGI middleware: stamps each HTTP request's arrival (:data:`ARRIVAL`) and counts its status.

    The model a status is counted for is ``scope["state"]["model"]`` when the route found a served model
    (set by the router), else ``""``. ``/metrics`` itself is not counted.
    """

    def __init__(self, app: Any, metrics: FrontEndMetrics) -> None:
        self.app, self.metrics = app, metrics

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope.get("path") == "/metrics":
            await self.app(scope, receive, send)
            return
        scope[ARRIVAL] = time.perf_counter()
        metrics = self.metrics

        async def send_counted(message: Any) -> None:
            if message["type"] == "http.response.start":
                metrics.status(scope.get("state", {}).get("model", ""), message["status"])
            await send(message)

        await self.app(scope, receive, send_counted)
