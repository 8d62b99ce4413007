#!/usr/bin/env python3
"""Render (optionally), serve and benchmark a repository; write per-run results and a Markdown summary.

This is the script behind the figures in docs/performance.md. Three sources of a repository:

  # a synthetic engine (engine dir holding synthetic_engine.json): measures everything but the engine
  scripts/bench_repo.py --engine-dir ENGINE --tokenizer-dir TOK --streaming --set synthetic_token_delay_ms=0 \
      --out results/synthetic
  # the CPU reference engine on a tiny LLaMA checkpoint (engine dir = the HF checkpoint)
  scripts/bench_repo.py --engine-dir CKPT --tokenizer-dir CKPT --streaming --out results/tiny-llama
  # an existing repository
  scripts/bench_repo.py --repo REPO --tokenizer-dir TOK --out results/mine
  # the client test double (tests/fixtures/client): client + Triton overhead only, no tokenizer in the server
  scripts/bench_repo.py --fixture --tokenizer-dir TOK --out results/fixture

For every model x protocol it runs ``repo-builder bench`` logic (repo_builder.bench) and writes
``OUT/<model>-<protocol>/bench.{json,csv,png}`` and ``requests.jsonl``, then ``OUT/summary.md`` (a table per
run plus the machine, versions, load average and the exact command).
"""

from __future__ import annotations

import argparse
import json
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench_common import load_average
from bench_common import machine as machine_facts

PROJECT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(PROJECT))
sys.path.insert(0, str(PROJECT / "tests"))


def _free_ports(n: int) -> list[int]:
    import socket

    socks, ports = [], []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
        ports.append(s.getsockname()[1])
    for s in socks:
        s.close()
    return ports


def _machine() -> dict[str, str]:
    """bench_common.machine() plus the versions of the packages this benchmark exercises."""
    from importlib.metadata import version

    from repo_builder import __version__

    return {**machine_facts(), "repo-builder": __version__, "tritonclient": version("tritonclient")}


def _render(args: argparse.Namespace, work: Path) -> Path:
    repo = work / "repo"
    cmd = [
        str(Path(sys.executable).parent / "repo-builder"),
        "render",
        "--engine-dir",
        args.engine_dir,
        "--tokenizer-dir",
        args.tokenizer_dir,
        "-o",
        str(repo),
        "--profile",
        args.profile,
    ]
    cmd.append("--streaming" if args.streaming else "--no-streaming")
    for item in args.set or []:
        cmd += ["--set", item]
    print("+", shlex.join(cmd), flush=True)
    subprocess.run(cmd, check=True)
    return repo


def _fmt(v: object, digits: int = 1) -> str:
    return "-" if v is None else f"{v:.{digits}f}"  # type: ignore[str-format]


def _table(report: dict) -> str:
    lines = [
        "| concurrency | ok / errors | TTFT p50 / p90 / p99 (ms) | ITL p50 / p90 / p99 (ms) | "
        "E2E p50 / p90 / p99 (ms) | output tok/s | req/s | client CPU ms/req |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for lv in report["levels"]:

        def trio(name: str, lv: dict = lv) -> str:
            d = lv[name]
            return f"{_fmt(d['p50'])} / {_fmt(d['p90'])} / {_fmt(d['p99'])}"

        lines.append(
            f"| {lv['concurrency']} | {lv['completed']} / {lv['errors']} | {trio('ttft_ms')} | "
            f"{trio('itl_ms')} | {trio('e2e_ms')} | {_fmt(lv['output_tokens_per_s'])} | "
            f"{_fmt(lv['requests_per_s'], 2)} | {_fmt(lv['client_cpu_ms_per_request'], 2)} |"
        )
    return "\n".join(lines)


def _parse_args() -> argparse.Namespace:
    """The command line (``--help`` is this module's docstring and the options below)."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--engine-dir", help="engine dir to render (TRT-LLM, HF checkpoint or synthetic)")
    src.add_argument("--repo", help="an existing rendered repository")
    src.add_argument("--fixture", action="store_true", help="the client test double of tests/fixtures/client")
    ap.add_argument("--tokenizer-dir", help="tokenizer for rendering, prompt sizing and token counting")
    ap.add_argument("--profile", default="trtllm-1.2")
    ap.add_argument("--streaming", action="store_true", help="render decoupled models and send streamed requests")
    ap.add_argument("--set", action="append", help="KEY=VALUE passed to repo-builder render")
    ap.add_argument("--models", default="ensemble,tensorrt_llm_bls")
    ap.add_argument("--protocols", default="http,grpc")
    ap.add_argument("--concurrency", default="1,4,16")
    ap.add_argument("--requests", type=int, default=64)
    ap.add_argument("--input-tokens", type=int, default=128)
    ap.add_argument("--output-tokens", type=int, default=64)
    ap.add_argument("--warmup", type=int, default=4)
    ap.add_argument("--end-id", type=int, default=None)
    ap.add_argument("--token-delay-ms", type=int, default=0, help="--fixture only: per-token delay of the double")
    ap.add_argument("--out", required=True)
    return ap.parse_args()


def _server(args: argparse.Namespace, work: Path, ports: list[int]) -> tuple[Any, list[str]]:
    """(the server's context manager on ``ports`` [http, grpc, metrics], the models to bench): the client test
    double for ``--fixture``, else tritonserver over ``--repo`` or the repository rendered under ``work``."""
    http, grpc, metrics = ports
    if args.fixture:
        from fixtures.client.serve import fixture_server

        return fixture_server(work, [http, grpc, metrics], token_delay_ms=args.token_delay_ms), ["fake_llm"]
    from repo_builder.server import LaunchConfig, TritonServer

    repo = Path(args.repo) if args.repo else _render(args, work)
    server_cm = TritonServer(
        LaunchConfig(model_repo=repo, http_port=http, grpc_port=grpc, metrics_port=metrics, no_mpi=True, timeout=600)
    )
    return server_cm, [m for m in args.models.split(",") if m]


def _bench_all(args: argparse.Namespace, server: Any, models: list[str], out: Path, machine: dict) -> list[str]:
    """``run_bench`` for every model and protocol, each report written under ``out/<model>-<protocol>``; sets
    ``machine["tritonserver"]`` to the server's version. Returns the summary's markdown section per run."""
    from repo_builder.bench import BenchSettings, parse_concurrency, run_bench, write_report

    sections = []
    for model in models:
        for proto in [p for p in args.protocols.split(",") if p]:
            url = server.http_hostport if proto == "http" else server.grpc_url
            settings = BenchSettings(
                url=url,
                protocol=proto,
                model=model,
                stream=args.streaming,
                concurrency=parse_concurrency(args.concurrency),
                requests=args.requests,
                input_tokens=args.input_tokens,
                output_tokens=args.output_tokens,
                tokenizer_dir=args.tokenizer_dir,
                output_dir=str(out / f"{model}-{proto}"),
                warmup=args.warmup,
                end_id=args.end_id,
            )
            print(f"== {model} over {proto}", flush=True)
            report = run_bench(settings, progress=sys.stdout.isatty(), log=print)
            machine["tritonserver"] = report["server"]["version"]
            write_report(report, settings.output_dir)
            sections.append(f"### {model} over {proto}{' (streaming)' if args.streaming else ''}\n\n{_table(report)}\n")
    return sections


def _write_summary(args: argparse.Namespace, out: Path, machine: dict, sections: list[str]) -> None:
    """Write ``summary.md`` (the command, the machine, the settings, the sections) and ``machine.json`` into
    ``out``, and print the summary."""
    command = shlex.join([Path(sys.argv[0]).as_posix(), *sys.argv[1:]])
    machine["load_average_end"] = load_average()
    summary = [f"Command: `{command}`\n", "| machine | |", "|---|---|"]
    summary += [f"| {k} | {v} |" for k, v in machine.items()]
    summary += [
        "",
        f"Requests per level: {args.requests}; input tokens: {args.input_tokens}; "
        f"output tokens: {args.output_tokens}; warm-up requests: {args.warmup}.",
        "",
    ]
    summary += sections
    (out / "summary.md").write_text("\n".join(summary) + "\n")
    (out / "machine.json").write_text(json.dumps(machine, indent=2) + "\n")
    print((out / "summary.md").read_text())


def main() -> int:
    """Serve, bench every model and protocol, write the summary; returns 0."""
    args = _parse_args()

    import repo_builder.bench  # noqa: F401  (an import error stops the run before a server starts)

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="rb-bench-"))
    machine = _machine()
    ports = _free_ports(3)
    try:
        server_cm, models = _server(args, work, ports)
        with server_cm as server:
            sections = _bench_all(args, server, models, out, machine)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    _write_summary(args, out, machine, sections)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
