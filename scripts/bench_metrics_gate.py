#!/usr/bin/env python3
"""Issue 24's cost gate: server CPU per streamed token with repo-builder's metrics on and off, paired in time.

Why a separate loop: ``bench_server_cpu.py --set repo_builder_metrics=...`` compares one fresh server per arm,
and two fresh servers of the *same* repository already differ by more than the 2 % the gate looks for
(docs/performance.md 9.4). Here both arms run at once: for each server pair, two repositories are rendered
from one synthetic engine (``synthetic_token_delay_ms`` = 0; ``repo_builder_metrics`` true / false, nothing
else different), both are served side by side (one plain tritonserver each, ``no_mpi``), and the load
alternates between them round by round (ABBA: the arm that goes first swaps every round), so slow drifts of
the host hit both arms alike. Only one server is loaded at a time; the idle one's background threads are
not counted (CPU is per process: ``utime + stime`` of tritonserver and every stub of the loaded server,
``/proc/<pid>/stat``, sampled right before and after a level, as in bench_server_cpu.py).

Per level: ``--requests`` streamed gRPC ensemble requests at concurrency c (``run_bench``), ``--input-tokens``
prompt tokens, exactly ``--output-tokens`` generated (``max_tokens`` = ``min_tokens``); ms of server CPU per
token = all processes' CPU / tokens. Each round gives one on/off ratio per concurrency (the two levels run
back to back); the summary per concurrency is the median and mean of those ratios over every round of every
pair, and a 95 % bootstrap interval of the mean log-ratio (10,000 resamples of rounds, seed 0).

Usage::

    python scripts/bench_metrics_gate.py [--tokenizer-dir DIR] [--concurrency 1,16] [--pairs 3] [--rounds 6] \\
        [--requests 64] [--output-tokens 128] [--budget-s 500] [--json results/metrics_gate.json]
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_common import TOKENIZER_HELP, machine, tokenizer_dir_or_default  # noqa: E402
from bench_cpu_measure import render_repo, server_processes  # noqa: E402
from bench_server_cpu import run_level, warm  # noqa: E402

MODEL = "ensemble"
ARMS = ("on", "off")


def _parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokenizer-dir", help=TOKENIZER_HELP)
    ap.add_argument("--concurrency", default="1,16")
    ap.add_argument("--pairs", type=int, default=3, help="server pairs (fresh servers each)")
    ap.add_argument("--rounds", type=int, default=6, help="alternating rounds per server pair")
    ap.add_argument("--requests", type=int, default=64, help="requests per level")
    ap.add_argument("--input-tokens", type=int, default=128)
    ap.add_argument("--output-tokens", type=int, default=128)
    ap.add_argument("--budget-s", type=float, default=0, help="start no round after this many seconds (0: none)")
    ap.add_argument("--port-base", type=int, default=20800)
    ap.add_argument("--workdir", default=tempfile.gettempdir())
    ap.add_argument("--json", help="write every level and the summary here")
    return ap.parse_args(argv)


def bootstrap_interval(ratios: list[float], n: int = 10_000, seed: int = 0) -> tuple[float, float]:
    """95 % bootstrap interval of the geometric-mean ratio (resampling the ratios); (nan, nan) for < 2."""
    import numpy as np

    if len(ratios) < 2:
        return (math.nan, math.nan)
    logs = np.log(np.asarray(ratios, dtype=np.float64))
    rng = np.random.default_rng(seed)
    means = logs[rng.integers(0, len(logs), size=(n, len(logs)))].mean(axis=1)
    lo, hi = np.percentile(means, [2.5, 97.5])
    return (float(math.exp(lo)), float(math.exp(hi)))


def summarize(rounds: list[dict], levels: list[int]) -> dict[int, dict]:
    """Per concurrency: the on/off ratios of every round, their median, mean, geometric mean and interval,
    and the median ms/token of each arm."""
    import statistics

    out: dict[int, dict] = {}
    for c in levels:
        rows = [r for r in rounds if r["concurrency"] == c and r["on"] and r["off"]]
        ratios = [r["on"] / r["off"] for r in rows]
        if not ratios:
            continue
        lo, hi = bootstrap_interval(ratios)
        out[c] = {
            "rounds": len(ratios),
            "ratios": ratios,
            "median_ratio": statistics.median(ratios),
            "mean_ratio": statistics.fmean(ratios),
            "geomean_ratio": math.exp(statistics.fmean(math.log(x) for x in ratios)),
            "interval_95": [lo, hi],
            "on_ms_per_token_median": statistics.median(r["on"] for r in rows),
            "off_ms_per_token_median": statistics.median(r["off"] for r in rows),
        }
    return out


def _serve_pair(stack: ExitStack, args: argparse.Namespace, work: Path, pair: int) -> dict[str, tuple[str, dict]]:
    """Render and start the two servers of one pair; returns {arm: (gRPC url, process pids)}."""
    from repo_builder.server import LaunchConfig, TritonServer

    served: dict[str, tuple[str, dict]] = {}
    for i, arm in enumerate(ARMS):
        metrics = {"repo_builder_metrics": "true" if arm == "on" else "false"}
        repo = render_repo(work / f"{arm}{pair}", args.tokenizer_dir, metrics)
        p = args.port_base + 10 * i
        cfg = LaunchConfig(model_repo=repo, http_port=p, grpc_port=p + 1, metrics_port=p + 2, no_mpi=True, timeout=600)
        server = stack.enter_context(TritonServer(cfg))
        served[arm] = (server.grpc_url, server_processes(server.rank_pids()[0][0]))
    for url, _ in served.values():
        warm(url, MODEL, args)
    return served


def _round(served: dict[str, tuple[str, dict]], args: argparse.Namespace, levels: list[int], order: tuple) -> list:
    """One round: every concurrency, both arms back to back in ``order``; one record per concurrency."""
    records = []
    for c in levels:
        rec: dict = {"concurrency": c, "order": list(order)}
        for arm in order:
            url, pids = served[arm]
            level = run_level(url, MODEL, c, args, pids)
            rec[arm] = level["ms_per_token"]["total"] if level["errors"] == 0 else None
            rec[f"{arm}_level"] = level
        records.append(rec)
    return records


def main(argv: list[str] | None = None) -> int:
    """Measure, print one line per round and the summary, write ``--json``; returns 0."""
    args = _parse_args(argv)
    from repo_builder.bench import parse_concurrency

    levels = parse_concurrency(args.concurrency)
    work = Path(tempfile.mkdtemp(prefix="rb-metrics-gate-", dir=args.workdir))
    args.tokenizer_dir = tokenizer_dir_or_default(args.tokenizer_dir, work)
    info = machine()
    print(f"# {info['date']}  {info['cpu']}  {info['cores']} cores  load {info['load_average_start']}", flush=True)
    t0 = time.monotonic()
    rounds: list[dict] = []
    try:
        for pair in range(args.pairs):
            if args.budget_s and time.monotonic() - t0 > args.budget_s:
                break
            with ExitStack() as stack:
                served = _serve_pair(stack, args, work, pair)
                for r in range(args.rounds):
                    if args.budget_s and time.monotonic() - t0 > args.budget_s:
                        break
                    order = ARMS if (r + pair) % 2 == 0 else ARMS[::-1]
                    for rec in _round(served, args, levels, order):
                        rec.update(pair=pair, round=r)
                        rounds.append(rec)
                        ratio = rec["on"] / rec["off"] if rec["on"] and rec["off"] else math.nan
                        print(
                            f"pair {pair} round {r} c={rec['concurrency']:<3} on {rec['on']} off {rec['off']} "
                            f"ms/token  on/off {ratio:.4f}  (+{time.monotonic() - t0:.0f} s)",
                            flush=True,
                        )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    summary = summarize(rounds, levels)
    for c, s in summary.items():
        lo, hi = s["interval_95"]
        print(
            f"c={c}: {s['rounds']} rounds, on/off median {s['median_ratio']:.4f}, geomean {s['geomean_ratio']:.4f} "
            f"(95 % {lo:.4f}-{hi:.4f}); on {s['on_ms_per_token_median']:.4f} / off "
            f"{s['off_ms_per_token_median']:.4f} ms/token"
        )
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps({"machine": info, "rounds": rounds, "summary": summary}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
