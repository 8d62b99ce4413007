#!/usr/bin/env python3
"""Cost of recording one metric event in the served Python models (repo_builder/runtime/metrics.py), in-process.

Times, with ``time.perf_counter_ns`` over many calls: a counter ``inc``, a histogram ``observe``, the same calls on
``NullMetrics`` (``repo_builder_metrics=false``), the engine observer's ``iteration`` with N running sequences and
its ``retired``, and a ``flush`` with nothing changed (the push thread's idle tick; the pushes themselves are IPC
calls into tritonserver, measured on a real server by scripts/bench_server_cpu.py with
``--set repo_builder_metrics=true|false``).

Also counts the push thread's IPC calls per generated token (a simulated engine at ``--rate`` tokens/s, pushes
every 100 ms and every ``PUSH_PERIOD_S``): each is a round trip into tritonserver.

Usage: ``.venv/bin/python scripts/bench_metrics.py [--calls 200000] [--tokens 64] [--rate 1000]``
"""

from __future__ import annotations

import argparse
import sys
import time
import types
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from repo_builder.runtime import metrics as M  # noqa: E402


def per_call_ns(fn, calls: int) -> float:
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter_ns()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter_ns() - t0) / calls)
    return best


class _CountingFamily:
    """A ``pb.MetricFamily`` stand-in whose metrics do nothing: :meth:`ModelMetrics.flush` returns the IPC calls
    the real one would make."""

    COUNTER = GAUGE = HISTOGRAM = 0

    def __init__(self, **_kw: object) -> None:
        pass

    def Metric(self, labels: object = None, buckets: object = None) -> object:  # noqa: N802
        return types.SimpleNamespace(increment=lambda v: None, set=lambda v: None, observe=lambda v: None)


def ipc_per_token(period_s: float, batch: int, tokens: int, rate: float, seconds: float = 30.0) -> float:
    """Push-thread IPC calls per generated token of an engine running ``batch`` sequences of ``tokens`` tokens
    at ``rate`` tokens/s in all (one iteration per token per sequence), pushed every ``period_s``."""
    pb = types.SimpleNamespace(MetricFamily=_CountingFamily)
    m = M.ModelMetrics(pb, "tensorrt_llm", "1", M.ENGINE, period_s=3600, instance="tensorrt_llm_0_0")
    obs = M.EngineMetrics(m, max_active=64, max_seq_len=2048)
    req = types.SimpleNamespace(prompt=list(range(128)))
    seqs = [
        types.SimpleNamespace(
            req=req, tokens=[], finished=None, first_scheduled_ns=1, first_token_ns=2, last_token_ns=9
        )
        for _ in range(batch)
    ]
    step_s = batch / rate
    t, next_push, calls, generated, steps = 0.0, period_s, 0, 0, 0
    while t < seconds:
        for seq in seqs:
            seq.tokens.append(1)
        generated += batch
        obs.iteration(seqs, 0, batch, 0, 0, batch)
        steps += 1
        if steps % tokens == 0:
            for seq in seqs:
                seq.finished = "length"
                obs.retired(seq, 1)
                seq.tokens = []
        t += step_s
        if t >= next_push:
            calls += m.flush()
            next_push += period_s
    m.close()
    return calls / generated


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=200_000)
    ap.add_argument("--tokens", type=int, default=64, help="tokens per request (for the per-token estimate)")
    ap.add_argument("--rate", type=float, default=1000.0, help="engine tokens/s in all, for the IPC count")
    args = ap.parse_args()
    n = args.calls
    m = M.ModelMetrics(None, "tensorrt_llm", "1", M.ENGINE)
    null = M.NULL_METRICS
    obs = M.EngineMetrics(m, max_active=64, max_seq_len=2048)
    req = types.SimpleNamespace(prompt=list(range(128)))
    seqs = [
        types.SimpleNamespace(
            req=req, tokens=list(range(32)), finished="length", first_scheduled_ns=1, first_token_ns=2, last_token_ns=9
        )
        for _ in range(16)
    ]

    def streamed_response() -> None:
        """What postprocessing records per streamed response (one token): 2 clock reads, 2 counters."""
        t0 = time.perf_counter()
        m.inc("repo_builder_detokenize_seconds_total", time.perf_counter() - t0)
        m.inc("repo_builder_detokenize_tokens_total", 1)

    rows = [
        ("counter inc", lambda: m.inc("repo_builder_engine_output_tokens_total", 1.0)),
        ("histogram observe", lambda: m.observe("repo_builder_engine_first_token_seconds", 0.01)),
        ("refused (label lookup + inc)", lambda: m.refused("max_tokens")),
        ("NullMetrics inc (metrics off)", lambda: null.inc("repo_builder_engine_output_tokens_total", 1.0)),
        ("postprocessing, one streamed token", streamed_response),
        ("engine iteration, 1 sequence", lambda: obs.iteration(seqs[:1], 0, 1, 0, 0, 1)),
        ("engine iteration, 16 sequences", lambda: obs.iteration(seqs, 0, 16, 0, 0, 16)),
        ("engine retired (one sequence)", lambda: obs.retired(seqs[0], 1)),
    ]
    us: dict[str, float] = {}
    for name, fn in rows:
        us[name] = per_call_ns(fn, n) / 1000
        print(f"{name:34s} {us[name]:8.3f} us")
        m.flush()  # drop the histogram observations collected (no Triton here)
    print(f"{'flush, nothing changed':34s} {per_call_ns(m.flush, n // 100) / 1000:8.3f} us")
    # per streamed token of the ensemble path, a request of --tokens tokens: postprocessing's response, the
    # engine's iteration share (1 or 16 sequences in the batch), the request's retirement and preprocessing's
    # 3 counters spread over its tokens
    per_request = (us["engine retired (one sequence)"] + 3 * us["counter inc"]) / args.tokens
    for batch, key in ((1, "engine iteration, 1 sequence"), (16, "engine iteration, 16 sequences")):
        token = us["postprocessing, one streamed token"] + us[key] / batch + per_request
        print(f"per streamed token, {batch:2d} in the batch  {token:8.3f} us")
    # the pushes: IPC round trips into tritonserver per token (their cost is measured on a real server)
    for period in sorted({0.1, M.PUSH_PERIOD_S}):
        for batch in (1, 16):
            per = ipc_per_token(period, batch, args.tokens, args.rate)
            print(f"push every {period:g} s, {batch:2d} sequences: {per:.4f} IPC calls per token")


if __name__ == "__main__":
    main()
