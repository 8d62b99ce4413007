"""Benchmark statistics: pure functions over recorded request timings (no I/O, no clocks).

Definitions (all times are ``time.perf_counter_ns()`` values taken by the client; results in ms):

* **TTFT** (time to first token) of a request: arrival of its first response that carries output minus
  the moment the request was sent. Without streaming the only response is the first, so TTFT equals the
  end-to-end latency.
* **ITL** (inter-token latency): the gaps between consecutive output-carrying responses of ONE request
  (``t[i+1] - t[i]``); the gaps of all successful requests are pooled before taking percentiles. A
  request with ``k`` chunks contributes ``k - 1`` gaps; a response carrying several tokens counts as one
  chunk (this is the latency a user sees between updates).
* **E2E** latency: final response (end) minus send time.
* **Output tokens/s**: the summed output tokens of successful requests divided by the level's wall time
  (first send to last end). **Requests/s**: successful requests over the same wall time.
* **Errors**: requests that ended with an error; they are left out of every latency and throughput figure.

Percentiles interpolate linearly between closest ranks (``rank = q/100 * (n-1)``), the same as numpy's
default ``percentile(method="linear")``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field

PERCENTILES = (50, 90, 99)


@dataclass(frozen=True)
class RequestRecord:
    """Timings of one benchmark request.

    Attributes:
        start_ns: when the request was sent (ns, perf_counter).
        chunk_ns: arrival times of the responses that carried output, in order (ns).
        end_ns: when the final response or the error arrived (ns).
        output_tokens: generated tokens (from returned ids or one tokenization of the whole text), None if
            unknown.
        error: the error message, None on success.
    """

    start_ns: int
    chunk_ns: tuple[int, ...]
    end_ns: int
    output_tokens: int | None = None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


def percentile(values: Sequence[float], q: float) -> float | None:
    """The ``q``-th percentile (0..100) with linear interpolation between closest ranks; None if empty."""
    if not values:
        return None
    if not 0 <= q <= 100:
        raise ValueError(f"percentile must be within 0..100, got {q}")
    ordered = sorted(values)
    rank = q / 100 * (len(ordered) - 1)
    lo = math.floor(rank)
    hi = math.ceil(rank)
    if lo == hi:
        return float(ordered[lo])
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (rank - lo)


def ttft_ms(rec: RequestRecord) -> float | None:
    """Time to first token (ms) of one request; None when no response carried output."""
    return (rec.chunk_ns[0] - rec.start_ns) / 1e6 if rec.chunk_ns else None


def itl_ms(rec: RequestRecord) -> list[float]:
    """Gaps (ms) between consecutive output-carrying responses of one request."""
    return [(b - a) / 1e6 for a, b in zip(rec.chunk_ns, rec.chunk_ns[1:])]


def e2e_ms(rec: RequestRecord) -> float:
    """End-to-end latency (ms) of one request."""
    return (rec.end_ns - rec.start_ns) / 1e6


@dataclass(frozen=True)
class Distribution:
    """Summary of a set of latencies in ms (None fields when there were no samples)."""

    count: int
    mean: float | None
    p50: float | None
    p90: float | None
    p99: float | None
    min: float | None
    max: float | None

    @classmethod
    def of(cls, values: Sequence[float]) -> Distribution:
        vals = list(values)
        if not vals:
            return cls(0, None, None, None, None, None, None)
        return cls(
            len(vals),
            sum(vals) / len(vals),
            percentile(vals, 50),
            percentile(vals, 90),
            percentile(vals, 99),
            min(vals),
            max(vals),
        )


@dataclass(frozen=True)
class LevelStats:
    """Statistics of one concurrency level.

    Attributes:
        concurrency: requests kept in flight.
        requests: requests recorded; ``completed`` succeeded, ``errors`` failed.
        error_messages: distinct error messages (first 5).
        wall_s: first send to last end, seconds.
        ttft_ms, itl_ms, e2e_ms: distributions (ms).
        output_tokens: summed output tokens of successful requests (None if any count is unknown).
        output_tokens_per_request: mean output tokens per successful request (None if unknown).
        output_tokens_per_s, requests_per_s: throughput over ``wall_s``.
    """

    concurrency: int
    requests: int
    completed: int
    errors: int
    error_messages: list[str]
    wall_s: float
    ttft_ms: Distribution
    itl_ms: Distribution
    e2e_ms: Distribution
    output_tokens: int | None
    output_tokens_per_request: float | None
    output_tokens_per_s: float | None
    requests_per_s: float
    extra: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict:
        """Plain JSON-serialisable dict."""
        return asdict(self)


def wall_ns(records: Iterable[RequestRecord]) -> int:
    """First send to last end over ``records`` (ns); 0 when empty."""
    recs = list(records)
    if not recs:
        return 0
    return max(r.end_ns for r in recs) - min(r.start_ns for r in recs)


def summarize(records: Sequence[RequestRecord], concurrency: int, wall: int | None = None) -> LevelStats:
    """Summarise one concurrency level.

    Args:
        records: every request of the level, failed ones included.
        concurrency: the level's concurrency (reported as given).
        wall: wall time in ns; default :func:`wall_ns` of all records.
    """
    ok = [r for r in records if r.ok]
    failed = [r for r in records if not r.ok]
    wall = wall_ns(records) if wall is None else wall
    wall_s = wall / 1e9
    ttfts = [v for v in (ttft_ms(r) for r in ok) if v is not None]
    gaps = [g for r in ok for g in itl_ms(r)]
    e2es = [e2e_ms(r) for r in ok]
    counts = [r.output_tokens for r in ok]
    if ok and all(c is not None for c in counts):
        known = sum(c for c in counts if c is not None)
        total: int | None = known
        per_req: float | None = known / len(ok)
        tok_s = known / wall_s if wall_s > 0 else None
    else:
        total = per_req = tok_s = None
    messages: list[str] = []
    for r in failed:
        if r.error not in messages and len(messages) < 5:
            messages.append(str(r.error))
    return LevelStats(
        concurrency=concurrency,
        requests=len(records),
        completed=len(ok),
        errors=len(failed),
        error_messages=messages,
        wall_s=wall_s,
        ttft_ms=Distribution.of(ttfts),
        itl_ms=Distribution.of(gaps),
        e2e_ms=Distribution.of(e2es),
        output_tokens=total,
        output_tokens_per_request=per_req,
        output_tokens_per_s=tok_s,
        requests_per_s=(len(ok) / wall_s) if wall_s > 0 else 0.0,
    )


CSV_COLUMNS = [
    "concurrency",
    "requests",
    "completed",
    "errors",
    "wall_s",
    "ttft_p50_ms",
    "ttft_p90_ms",
    "ttft_p99_ms",
    "ttft_mean_ms",
    "itl_p50_ms",
    "itl_p90_ms",
    "itl_p99_ms",
    "itl_mean_ms",
    "e2e_p50_ms",
    "e2e_p90_ms",
    "e2e_p99_ms",
    "e2e_mean_ms",
    "output_tokens",
    "output_tokens_per_request",
    "output_tokens_per_s",
    "requests_per_s",
]


def csv_row(stats: LevelStats) -> dict[str, object]:
    """One flat CSV row (columns :data:`CSV_COLUMNS`; empty string for unknown values)."""
    row: dict[str, object] = {
        "concurrency": stats.concurrency,
        "requests": stats.requests,
        "completed": stats.completed,
        "errors": stats.errors,
        "wall_s": stats.wall_s,
    }
    for name, dist in (("ttft", stats.ttft_ms), ("itl", stats.itl_ms), ("e2e", stats.e2e_ms)):
        for key in ("p50", "p90", "p99", "mean"):
            row[f"{name}_{key}_ms"] = getattr(dist, key)
    row.update(
        output_tokens=stats.output_tokens,
        output_tokens_per_request=stats.output_tokens_per_request,
        output_tokens_per_s=stats.output_tokens_per_s,
        requests_per_s=stats.requests_per_s,
    )
    return {k: ("" if v is None else v) for k, v in row.items()}
