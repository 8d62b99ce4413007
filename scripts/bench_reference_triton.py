#!/usr/bin/env python3
"""In-flight batching of the CPU reference engine through Triton (docs/performance.md §6.2, issue 15).

    .venv/bin/python scripts/bench_reference_triton.py --model ~/.cache/repo-builder/smollm2 \\
        [--concurrency 1,8] [--repeats 3] [--output-tokens 64] [--input-tokens 32] [--threads N]

Renders a streaming repository for the checkpoint (like ``repo-builder render --engine-dir M
--tokenizer-dir M --engine-mode reference``, defaults otherwise: the CPU reference engine with one torch
thread per CPU; ``--threads N`` renders ``reference_engine_threads=N``), serves it with tritonserver and
runs ``repo-builder bench``'s logic (``repo_builder.bench.run_bench``)
on ``ensemble`` over gRPC streaming, every request asking for exactly ``--output-tokens`` tokens
(``min_tokens``). Per level: ``c`` requests at concurrency ``c`` (one wave: every stream is in flight for the
whole level), the levels interleaved ``--repeats`` times. Reports output tokens/s (wall, from the client),
its ratio to concurrency 1 of the same repeat, and the server's CPU milliseconds per output token (all
tritonserver processes, from ``/proc``) and the engine stub's alone. Kill-safe: the server is stopped on exit.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_common import load_average, machine  # noqa: E402
from bench_server_cpu import ENGINE_MODEL, measured_level, server_processes  # noqa: E402


def fmt(values: list[float], digits: int = 1) -> str:
    values = [v for v in values if v is not None]
    if not values:
        return "-"
    return f"{statistics.median(values):.{digits}f} ({min(values):.{digits}f}-{max(values):.{digits}f})"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="Hugging Face checkpoint dir (engine and tokenizer)")
    ap.add_argument("--repo", help="serve this rendered repository instead of rendering one")
    ap.add_argument("--concurrency", default="1,8")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--input-tokens", type=int, default=32)
    ap.add_argument("--output-tokens", type=int, default=64)
    ap.add_argument("--port-base", type=int, default=20900)
    ap.add_argument(
        "--threads", type=int, help="reference_engine_threads to render (default: the parameter's, 0 = all CPUs)"
    )
    args = ap.parse_args()

    from repo_builder.bench import parse_concurrency
    from repo_builder.render import render_repository
    from repo_builder.server import LaunchConfig

    levels = parse_concurrency(args.concurrency)
    work = Path(tempfile.mkdtemp(prefix="rb-bench-ref-"))
    info = machine()
    print(f"# {info['date']}  {info['cpu']}  {info['cores']} cores  load {info['load_average_start']}", flush=True)
    repo = (
        Path(args.repo)
        if args.repo
        else render_repository(
            Path(args.model),
            Path(args.model),
            work / "repo",
            user_values={} if args.threads is None else {"reference_engine_threads": args.threads},
            streaming=True,
            engine_mode="reference",
        ).output
    )
    p = args.port_base
    cfg = LaunchConfig(model_repo=repo, http_port=p, grpc_port=p + 1, metrics_port=p + 2, no_mpi=True, timeout=900)
    runs: list[dict] = []
    try:
        serve(cfg, args, levels, work, runs)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    report(runs, levels)
    return 0


def serve(cfg, args: argparse.Namespace, levels: list[int], work: Path, runs: list[dict]) -> None:
    """Launch the server, warm it up, run the interleaved levels into ``runs``; the server stops on exit."""
    from repo_builder.bench import BenchSettings
    from repo_builder.server import TritonServer

    with TritonServer(cfg) as server:
        pids = server_processes(server.rank_pids()[0][0])
        print(f"# processes: {pids}", flush=True)

        def level(c: int, requests: int) -> dict:
            settings = BenchSettings(
                url=server.grpc_url,
                protocol="grpc",
                model="ensemble",
                stream=True,
                concurrency=[c],
                requests=requests,
                input_tokens=args.input_tokens,
                output_tokens=args.output_tokens,
                tokenizer_dir=args.model,
                output_dir=str(work / f"c{c}"),
                warmup=0,
            )
            lv, wall, cpu = measured_level(settings, pids)
            tokens = lv["completed"] * args.output_tokens
            return {
                "c": c,
                "completed": lv["completed"],
                "errors": lv["errors"],
                "tok_s": lv["output_tokens_per_s"],
                "wall_s": wall,
                "server_ms_tok": sum(cpu.values()) * 1e3 / tokens if tokens else None,
                "engine_ms_tok": cpu.get(ENGINE_MODEL, 0.0) * 1e3 / tokens if tokens else None,
                "ttft_p50": lv["ttft_ms"]["p50"],
                "itl_p50": lv["itl_ms"]["p50"],
                "load": os.getloadavg()[0],
            }

        level(2, 2)  # warm-up: lazy state, first-request paths
        for rep in range(args.repeats):
            for c in levels:
                r = level(c, c)
                r["rep"] = rep
                runs.append(r)
                print(
                    f"rep {rep + 1} c={c}: {r['completed']} ok / {r['errors']} errors, {r['tok_s']:.2f} tok/s, "
                    f"server {r['server_ms_tok']:.1f} ms CPU/token (engine {r['engine_ms_tok']:.1f}), "
                    f"TTFT p50 {r['ttft_p50']:.0f} ms, ITL p50 {r['itl_p50']:.0f} ms, load {r['load']:.1f}",
                    flush=True,
                )


def report(runs: list[dict], levels: list[int]) -> None:
    """Print the per-level table (medians and min-max over repeats)."""
    base = {r["rep"]: r["tok_s"] for r in runs if r["c"] == levels[0]}
    print(f"\n# load average at the end {load_average()}")
    print(
        f"\n| concurrency | output tok/s median (min-max) | ratio to c={levels[0]} (same repeat) | server CPU "
        "ms/token | engine stub CPU ms/token | TTFT p50 ms | ITL p50 ms | errors |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for c in levels:
        rs = [r for r in runs if r["c"] == c]
        ratios = [r["tok_s"] / base[r["rep"]] for r in rs if base.get(r["rep"])]
        print(
            f"| {c} | {fmt([r['tok_s'] for r in rs], 2)} | {fmt(ratios, 2)}x | {fmt([r['server_ms_tok'] for r in rs])} "
            f"| {fmt([r['engine_ms_tok'] for r in rs])} | {fmt([r['ttft_p50'] for r in rs], 0)} "
            f"| {fmt([r['itl_p50'] for r in rs], 0)} | {sum(r['errors'] for r in rs)} |"
        )


if __name__ == "__main__":
    raise SystemExit(main())
