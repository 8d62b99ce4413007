"""Summaries and printed tables of scripts/bench_server_cpu.py (moved out of it to keep it under 500 lines)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_common import fmt, summary  # noqa: E402
from bench_cpu_measure import ENGINE_MODEL, SERVER  # noqa: E402


def summarize_runs(runs: list[dict], models: list[str], levels_c: list[int]) -> list[dict]:
    """One row per (model, concurrency): run and error counts, and :func:`bench_common.summary` (median, min,
    max, n) of each ms/token figure, TTFT/E2E/ITL p50 (ms), client CPU ms/token, load, tokens/s, GPU busy %."""
    table = []
    for model in models:
        for c in levels_c:
            rs = [r for r in runs if r["model"] == model and r["concurrency"] == c]
            names = sorted({k for r in rs for k in r["ms_per_token"]})
            row = {
                "model": model,
                "concurrency": c,
                "runs": len(rs),
                "errors": sum(r["errors"] for r in rs),
                "ms_per_token": {
                    k: summary([r["ms_per_token"][k] for r in rs if r["ms_per_token"].get(k) is not None])
                    for k in names
                },
                "ttft_ms_p50": summary([r["ttft_ms_p50"] for r in rs if r["ttft_ms_p50"] is not None]),
                "e2e_ms_p50": summary([r["e2e_ms_p50"] for r in rs if r["e2e_ms_p50"] is not None]),
                "client_cpu_ms_per_token": summary(
                    [r["client_cpu_ms_per_token"] for r in rs if r["client_cpu_ms_per_token"] is not None]
                ),
                "load_1min": summary([r["load_1min"] for r in rs]),
                "tokens_per_s": summary([r["tokens_per_s"] for r in rs if r.get("tokens_per_s") is not None]),
                "itl_ms_p50": summary([r["itl_ms_p50"] for r in rs if r.get("itl_ms_p50") is not None]),
                "itl_ms_p99": summary([r["itl_ms_p99"] for r in rs if r.get("itl_ms_p99") is not None]),
                "gpu_busy_pct": summary([r["gpu_busy_pct"] for r in rs if r.get("gpu_busy_pct") is not None]),
            }
            table.append(row)
    return table


def print_table(table: list[dict], models: list[str], info: dict, idle: dict) -> None:
    """Print the end load, the idle server CPU (s/s per process), the markdown table of ``table`` and, with the
    ``tensorrt_llm`` baseline measured, what each text path adds over it (ms/token)."""
    print(
        f"\n# load average at end: {info['load_average_end']}; idle server CPU (s/s): "
        + ", ".join(f"{k} {v:.4f}" for k, v in idle.items())
    )
    print(
        "\n| model | c | around engine ms/token median (min-max) | tritonserver | preprocessing "
        "| postprocessing | tensorrt_llm_bls | engine stub | TTFT p50 ms median (min-max) | E2E p50 ms "
        "| client CPU ms/token | errors |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for row in table:
        mp = row["ms_per_token"]

        def med(k: str, mp: dict = mp) -> str:
            return fmt(mp[k]["median"]) if k in mp and mp[k]["n"] else "-"

        a = mp["around_engine"]
        t = row["ttft_ms_p50"]
        print(
            f"| {row['model']} | {row['concurrency']} | {fmt(a['median'])} ({fmt(a['min'])}-{fmt(a['max'])}) | "
            f"{med(SERVER)} | {med('preprocessing')} | {med('postprocessing')} | {med('tensorrt_llm_bls')} | "
            f"{med(ENGINE_MODEL)} | {fmt(t['median'], 1)} ({fmt(t['min'], 1)}-{fmt(t['max'], 1)}) | "
            f"{fmt(row['e2e_ms_p50']['median'], 1)} | {fmt(row['client_cpu_ms_per_token']['median'])} | "
            f"{row['errors']} |"
        )
    if ENGINE_MODEL in models:
        print(
            f"\n{ENGINE_MODEL} = token ids streamed to the engine directly (no ensemble/BLS/tokenizer). Added by "
            "each text path over that baseline (medians, ms/token):"
        )
        base = {row["concurrency"]: row for row in table if row["model"] == ENGINE_MODEL}
        for row in table:
            b = base.get(row["concurrency"])
            if row["model"] == ENGINE_MODEL or b is None:
                continue
            added = {
                k: (row["ms_per_token"][k]["median"] or 0) - (b["ms_per_token"][k]["median"] or 0)
                for k in ("around_engine", SERVER)
                if k in row["ms_per_token"] and k in b["ms_per_token"]
            }
            print(
                f"  {row['model']} c={row['concurrency']}: around engine +{fmt(added.get('around_engine'))}, "
                f"tritonserver +{fmt(added.get(SERVER))}"
            )


def print_profiles(profiles: dict[str, dict], args: argparse.Namespace) -> None:
    """Print the py-spy top frames (self and inclusive, top 10) of every stub of every profiled model."""
    for model, prof in profiles.items():
        print(
            f"\n## py-spy, {model} at c={args.profile_concurrency} "
            f"(around engine {fmt(prof['level']['ms_per_token']['around_engine'])} ms/token while profiled)"
        )
        for stub, top in prof["top"].items():
            if "error" in top:
                print(f"### {stub}: py-spy failed: {top['error']}")
                continue
            share = top.get("python_share", [("", 0, None)])[0][2]
            print(
                f"### {stub} ({top['total'][0][1]} samples; CPU {fmt(prof['level']['cpu_s'].get(stub))} s; "
                f"GIL held / CPU ~{fmt(share * 100 if share is not None else None, 0)}%)"
            )
            for kind in ("self", "inclusive"):
                print(f"  {kind}:")
                for frame, _count, share in top[kind][:10]:
                    print(f"    {share * 100:5.1f}%  {frame}")


def write_json(
    args: argparse.Namespace, info: dict, idle: dict, runs: list[dict], table: list[dict], profiles: dict
) -> None:
    """Write every level and the summaries to ``args.json`` (nothing without ``--json``)."""
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(
            json.dumps(
                {
                    "machine": info,
                    "args": vars(args),
                    "idle_cpu_s_per_s": idle,
                    "runs": runs,
                    "summary": table,
                    "profiles": profiles,
                },
                indent=2,
                default=str,
            )
            + "\n"
        )
