"""Benchmark statistics on a scripted stream of known timings; every expected number is computed by hand."""

from __future__ import annotations

import random

import numpy as np
import pytest

from repo_builder.bench_stats import RequestRecord, csv_row, e2e_ms, itl_ms, percentile, summarize, ttft_ms, wall_ns

MS = 1_000_000  # ns per ms

# A scripted level of 4 requests (times in ms since an arbitrary origin):
#   A: sent 0,  chunks at 10, 15, 25, end 25, 3 tokens  -> TTFT 10, gaps 5 and 10, E2E 25
#   B: sent 5,  chunks at 25, 27,     end 30, 2 tokens  -> TTFT 20, gap 2,         E2E 25
#   C: sent 10, error at 12                              -> counted as 1 error, nowhere else
#   D: sent 20, one chunk at 60,      end 60, 4 tokens  -> TTFT 40, no gap,        E2E 40
SCRIPT = [
    RequestRecord(0 * MS, (10 * MS, 15 * MS, 25 * MS), 25 * MS, output_tokens=3),
    RequestRecord(5 * MS, (25 * MS, 27 * MS), 30 * MS, output_tokens=2),
    RequestRecord(10 * MS, (), 12 * MS, output_tokens=None, error="model 'ensemble' returned an error: boom"),
    RequestRecord(20 * MS, (60 * MS,), 60 * MS, output_tokens=4),
]


def test_percentile_linear_interpolation_by_hand():
    assert percentile([10, 20, 40], 50) == 20
    # rank = 0.9 * 2 = 1.8 -> 20 + 0.8 * (40 - 20) = 36
    assert percentile([40, 10, 20], 90) == pytest.approx(36.0)
    # rank = 0.99 * 2 = 1.98 -> 20 + 0.98 * 20 = 39.6
    assert percentile([10, 20, 40], 99) == pytest.approx(39.6)
    assert percentile([7], 99) == 7
    assert percentile([], 50) is None
    with pytest.raises(ValueError):
        percentile([1, 2], 101)


def test_percentile_matches_numpy_default():
    rng = random.Random(3)
    values = [rng.uniform(0, 100) for _ in range(37)]
    for q in (0, 1, 50, 90, 99, 100):
        assert percentile(values, q) == pytest.approx(float(np.percentile(values, q)))


def test_per_request_definitions():
    a, b, c, d = SCRIPT
    assert ttft_ms(a) == 10 and ttft_ms(b) == 20 and ttft_ms(d) == 40
    assert ttft_ms(c) is None
    assert itl_ms(a) == [5, 10]
    assert itl_ms(b) == [2]
    assert itl_ms(d) == []  # a single chunk has no gap
    assert e2e_ms(a) == 25 and e2e_ms(b) == 25 and e2e_ms(d) == 40
    assert wall_ns(SCRIPT) == 60 * MS


def test_summarize_scripted_level():
    s = summarize(SCRIPT, concurrency=4)
    assert (s.concurrency, s.requests, s.completed, s.errors) == (4, 4, 3, 1)
    assert s.error_messages == ["model 'ensemble' returned an error: boom"]
    assert s.wall_s == pytest.approx(0.060)
    # TTFT over successful requests: [10, 20, 40]
    assert s.ttft_ms.count == 3
    assert s.ttft_ms.p50 == pytest.approx(20)
    assert s.ttft_ms.p90 == pytest.approx(36)
    assert s.ttft_ms.p99 == pytest.approx(39.6)
    assert s.ttft_ms.mean == pytest.approx(70 / 3)
    # ITL pooled over requests: A gives 5 and 10, B gives 2 -> [2, 5, 10]
    assert s.itl_ms.count == 3
    assert s.itl_ms.p50 == pytest.approx(5)
    assert s.itl_ms.p90 == pytest.approx(9.0)  # 5 + 0.8 * 5
    assert s.itl_ms.p99 == pytest.approx(9.9)  # 5 + 0.98 * 5
    assert s.itl_ms.mean == pytest.approx(17 / 3)  # pooled, not the mean of per-request means (4.75)
    assert (s.itl_ms.min, s.itl_ms.max) == (2, 10)
    # E2E: [25, 25, 40]
    assert s.e2e_ms.p50 == pytest.approx(25)
    assert s.e2e_ms.p90 == pytest.approx(37)  # 25 + 0.8 * 15
    assert s.e2e_ms.p99 == pytest.approx(39.7)  # 25 + 0.98 * 15
    # throughput: 9 tokens and 3 successful requests in 60 ms
    assert s.output_tokens == 9
    assert s.output_tokens_per_request == pytest.approx(3.0)
    assert s.output_tokens_per_s == pytest.approx(150.0)
    assert s.requests_per_s == pytest.approx(50.0)


def test_unknown_token_counts_give_no_token_throughput():
    recs = [RequestRecord(0, (MS,), 2 * MS, output_tokens=None)]
    s = summarize(recs, concurrency=1)
    assert s.output_tokens is None and s.output_tokens_per_s is None
    assert s.requests_per_s == pytest.approx(500.0)
    assert csv_row(s)["output_tokens_per_s"] == ""


def test_all_failed_level():
    recs = [RequestRecord(0, (), MS, error="x"), RequestRecord(0, (), 2 * MS, error="x")]
    s = summarize(recs, concurrency=2)
    assert (s.completed, s.errors, s.error_messages) == (0, 2, ["x"])
    assert s.ttft_ms.count == 0 and s.ttft_ms.p50 is None
    assert s.requests_per_s == 0 and s.output_tokens is None


def test_csv_row_flattens_distributions():
    row = csv_row(summarize(SCRIPT, concurrency=4))
    assert row["ttft_p50_ms"] == pytest.approx(20)
    assert row["itl_p99_ms"] == pytest.approx(9.9)
    assert row["e2e_p90_ms"] == pytest.approx(37)
    assert row["errors"] == 1
