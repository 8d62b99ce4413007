#!/usr/bin/env python3
"""Server CPU per streamed token spent around the engine, ensemble vs BLS (issue 5, figure 3).

Renders a streaming synthetic-engine repository (``synthetic_token_delay_ms`` = 0: the engine emits tokens as
fast as it can) with ``repo_builder.render.render_repository``, serves it with
``repo_builder.server.TritonServer`` (one plain tritonserver, ``no_mpi``; ports from ``--port-base``,
default 20700) and, for each model (``ensemble``, ``tensorrt_llm_bls``) and each concurrency (1, 4, 16),
sends ``--requests`` streamed gRPC requests with ``repo_builder.bench.run_bench`` (``--input-tokens`` prompt
tokens, exactly ``--output-tokens`` generated tokens per request: ``max_tokens`` = ``min_tokens``; the
synthetic engine never emits the end id).

CPU: ``utime + stime`` (``/proc/<pid>/stat``, whole process, all threads) of tritonserver and of every
Python-backend stub process (children of tritonserver; each stub's command line names its model's
``<model>/1/model.py``), sampled right before and after the level. Streamed tokens = successful requests x
``--output-tokens`` (what the engine generated). Figures per level:

* ``around engine ms/token`` = CPU of the processes on the request's path except the engine stub / tokens:
  tritonserver + preprocessing + postprocessing (+ the tensorrt_llm_bls stub for BLS): Triton, the ensemble
  scheduler or BLS, tokenization, detokenization, everything but the engine. (The stub of the model the
  path does not use idles; it is shown but not counted.)
* the same split per process, the engine stub's own ms/token, and the client's CPU (same machine);
* TTFT p50 / p90 (ms) and E2E p50 from ``run_bench``.

Each level runs ``--repeats`` times (interleaving models: ensemble c=1, bls c=1, ensemble c=4, ...); medians
and min/max are reported. ``--profile`` then records the stubs with py-spy (``pip install py-spy``; needs
ptrace) during one extra level per model at ``--profile-concurrency`` (``py-spy record --gil``: only the
thread holding the GIL is sampled, so samples / rate ~ CPU seconds spent running Python code; the rest of a
stub's CPU is its C++ side) and prints the top functions by self and inclusive samples per stub (the profiled
level is not part of the CPU figures; py-spy pauses the process for each sample, so that level runs slower).

Usage::

    .venv/bin/python scripts/bench_server_cpu.py [--concurrency 1,4,16] [--requests 64] [--repeats 3] \\
        [--input-tokens 128] [--output-tokens 64] [--profile] [--json results/server_cpu.json]
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_common import TOKENIZER_HELP, fmt, load_average, machine, tokenizer_dir_or_default  # noqa: E402
from bench_cpu_measure import (  # noqa: E402, F401  (re-exported: moved from this module)
    ENGINE_MODEL,
    PATH_PROCESSES,
    SERVER,
    SYNTHETIC_SPEC,
    GpuBusy,
    cpu_delta,
    frame_key,
    measured_level,
    per_token,
    render_repo,
    sample,
    server_processes,
    stub_model,
    top_frames,
)
from bench_server_cpu_report import print_profiles, print_table, summarize_runs, write_json  # noqa: E402


def run_level(url: str, model: str, c: int, args: argparse.Namespace, pids: dict[str, int]) -> dict:
    """One measured level: CPU sampled around ``run_bench`` (no warm-up inside the window); ``model`` =
    ``tensorrt_llm`` runs :func:`direct_level` instead."""
    from repo_builder.bench import BenchSettings

    if getattr(args, "client_procs", 1) > 1:
        return procs_level(url, model, c, args, pids)
    if model == ENGINE_MODEL:
        return direct_level(url, c, args, pids)

    settings = BenchSettings(
        url=url,
        protocol="grpc",
        model=model,
        stream=True,
        concurrency=[c],
        requests=args.requests,
        input_tokens=args.input_tokens,
        output_tokens=args.output_tokens,
        tokenizer_dir=args.tokenizer_dir,
        warmup=0,
    )
    level, wall, delta = measured_level(settings, pids)
    return level_result(model, c, level, wall, delta, level["client_cpu_s"], level.get("chunks_per_request"), args)


def level_result(
    model: str,
    c: int,
    stats: dict,
    wall: float,
    delta: dict[str, float],
    client_cpu_s: float,
    chunks_per_request: float | None,
    args: argparse.Namespace,
) -> dict:
    """One level's figures from its summary (``LevelStats.to_dict()``), wall seconds, server CPU seconds by
    process and client CPU seconds; tokens = completed requests x ``--output-tokens``."""
    tokens = stats["completed"] * args.output_tokens
    return {
        "model": model,
        "concurrency": c,
        "completed": stats["completed"],
        "errors": stats["errors"],
        "tokens": tokens,
        "wall_s": wall,
        "cpu_s": delta,
        "ms_per_token": per_token(delta, tokens, PATH_PROCESSES.get(model)),
        "server_cpu_util": sum(delta.values()) / wall if wall else None,
        "ttft_ms_p50": stats["ttft_ms"]["p50"],
        "ttft_ms_p90": stats["ttft_ms"]["p90"],
        "itl_ms_p50": stats["itl_ms"]["p50"],
        "itl_ms_p99": stats["itl_ms"].get("p99"),
        "e2e_ms_p50": stats["e2e_ms"]["p50"],
        "client_cpu_ms_per_token": client_cpu_s * 1000 / tokens if tokens else None,
        "client_procs": getattr(args, "client_procs", 1),
        "chunks_per_request": chunks_per_request,
    }


def _chunks_per_request(records: list, completed: int) -> float | None:
    return sum(len(r.chunk_ns) for r in records if r.ok) / completed if completed else None


def direct_level(url: str, c: int, args: argparse.Namespace, pids: dict[str, int] | None) -> dict:
    """Token ids streamed straight to ``tensorrt_llm`` (``LLMClient.infer_token_ids``, gRPC, ``streaming``):
    the engine plus Triton's own response path, no ensemble, BLS, tokenizer or detokenizer. Same request
    count, lengths and concurrency as a text level; CPU sampled the same way (``pids`` None: not sampled)."""
    from bench_client_procs import stream_token_ids

    from repo_builder.bench_stats import RequestRecord, summarize

    before = sample(pids) if pids else {}
    cpu0 = time.process_time()
    t0 = time.perf_counter()
    results = stream_token_ids(url, c, range(args.requests), args.input_tokens, args.output_tokens)
    wall = time.perf_counter() - t0
    client_cpu = time.process_time() - cpu0
    after = sample(pids) if pids else {}
    records = [
        RequestRecord(
            r.start_ns,
            tuple(r.chunk_times_ns),
            r.end_ns,
            None if not r.ok else args.output_tokens,
            None if r.ok else str(r.error),
        )
        for r in results
    ]
    stats = summarize(records, concurrency=c, wall=int(wall * 1e9)).to_dict()
    chunks = _chunks_per_request(records, stats["completed"])
    return level_result(ENGINE_MODEL, c, stats, wall, cpu_delta(before, after), client_cpu, chunks, args)


def procs_level(url: str, model: str, c: int, args: argparse.Namespace, pids: dict[str, int]) -> dict:
    """One level with its load spread over ``--client-procs`` processes (scripts/bench_client_procs.py); the
    same figures as :func:`run_level` / :func:`direct_level`."""
    from bench_client_procs import _direct_job, _text_job, direct_kws, run_procs, text_kws

    from repo_builder.bench_stats import summarize

    n = args.client_procs
    if model == ENGINE_MODEL:
        base = {"url": url, "input_tokens": args.input_tokens, "output_tokens": args.output_tokens}
        records, wall, client_cpu, delta = run_procs(_direct_job, direct_kws(base, c, args.requests, n), pids)
    else:
        base = {
            "url": url,
            "protocol": "grpc",
            "model": model,
            "stream": True,
            "input_tokens": args.input_tokens,
            "output_tokens": args.output_tokens,
            "tokenizer_dir": args.tokenizer_dir,
            "warmup": 0,
        }
        records, wall, client_cpu, delta = run_procs(_text_job, text_kws(base, c, args.requests, n), pids)
    stats = summarize(records, concurrency=c, wall=int(wall * 1e9)).to_dict()
    chunks = _chunks_per_request(records, stats["completed"])
    return level_result(model, c, stats, wall, delta, client_cpu, chunks, args)


def warm(url: str, model: str, args: argparse.Namespace) -> None:
    """Untimed requests so lazy state (tokenizers, threads, Triton's first-request paths) exists."""
    from repo_builder.bench import BenchSettings, run_bench

    if model == ENGINE_MODEL:
        direct_level(url, 4, argparse.Namespace(**{**vars(args), "requests": 8}), None)
        return
    run_bench(
        BenchSettings(
            url=url,
            protocol="grpc",
            model=model,
            stream=True,
            concurrency=[4],
            requests=8,
            input_tokens=args.input_tokens,
            output_tokens=args.output_tokens,
            tokenizer_dir=args.tokenizer_dir,
            warmup=0,
        ),
        progress=False,
    )


def profile_level(url: str, model: str, args: argparse.Namespace, pids: dict[str, int], out: Path) -> dict:
    """py-spy record on every stub during one level of ``model``; returns ``{stub: top_frames}``."""
    pyspy = shutil.which("py-spy", path=str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", ""))
    if pyspy is None:
        raise SystemExit("--profile needs py-spy: .venv/bin/pip install py-spy")
    out.mkdir(parents=True, exist_ok=True)
    spies = {}
    for name, pid in pids.items():
        if name == SERVER:
            continue
        path = out / f"{model}-{name}.txt"
        spies[name] = (
            path,
            subprocess.Popen(
                [
                    pyspy,
                    "record",
                    "--pid",
                    str(pid),
                    "--rate",
                    str(args.profile_rate),
                    "--format",
                    "raw",
                    *(["--native"] if args.profile_native else ["--gil"]),
                    "-o",
                    str(path),
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
            ),
        )
    time.sleep(1.0)  # py-spy attaches
    level = run_level(
        url,
        model,
        args.profile_concurrency,
        argparse.Namespace(**{**vars(args), "requests": args.profile_requests or 4 * args.requests}),
        pids,
    )
    tops = {}
    for name, (path, proc) in spies.items():
        proc.send_signal(signal.SIGINT)
        try:
            _, err = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate()
        if path.is_file():
            tops[name] = top_frames(path.read_text())
            cpu = level["cpu_s"].get(name)
            samples = tops[name]["total"][0][1]
            # seconds the GIL was held (py-spy --gil samples / rate) over the stub's CPU seconds: well below 1 =
            # the stub's C++ side (shared-memory IPC with tritonserver) dominates; above 1 = the GIL is also held
            # while off the CPU (waiting inside a pb_utils call)
            tops[name]["python_share"] = [
                (
                    "python/cpu",
                    samples,
                    (samples / args.profile_rate) / cpu if cpu and not args.profile_native else None,
                )
            ]
        else:
            tops[name] = {"error": err.decode(errors="replace")[-500:]}
    return {"level": level, "top": tops}


def _parse_args() -> argparse.Namespace:
    """The command line (``--help`` is this module's docstring and the options below)."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--models",
        default="ensemble,tensorrt_llm_bls,tensorrt_llm",
        help="text models, plus tensorrt_llm = token ids streamed to the engine directly (baseline)",
    )
    ap.add_argument("--concurrency", default="1,4,16")
    ap.add_argument("--requests", type=int, default=64, help="requests per level")
    ap.add_argument("--repeats", type=int, default=3, help="runs of every level")
    ap.add_argument("--input-tokens", type=int, default=128)
    ap.add_argument("--output-tokens", type=int, default=64)
    ap.add_argument(
        "--tokenizer-dir",
        default=None,
        help=TOKENIZER_HELP,
    )
    ap.add_argument("--set", action="append", default=[], help="KEY=VALUE for render (e.g. bls_instance_count=2)")
    ap.add_argument("--repo", help="serve this repository instead of rendering one")
    ap.add_argument(
        "--server-arg",
        action="append",
        default=[],
        help="appended to tritonserver's command (as `repo-builder launch --server-arg`)",
    )
    ap.add_argument("--workdir", default=tempfile.gettempdir())
    ap.add_argument("--port-base", type=int, default=20700)
    ap.add_argument(
        "--client-procs",
        type=int,
        default=1,
        help="spread each level's load over this many client processes (one Python client tops out at "
        "~3,000-4,000 streamed tokens/s; scripts/bench_client_procs.py)",
    )
    ap.add_argument("--profile", action="store_true", help="py-spy the stubs during one extra level per model")
    ap.add_argument("--profile-concurrency", type=int, default=16)
    ap.add_argument("--profile-rate", type=int, default=250, help="py-spy samples per second")
    ap.add_argument(
        "--profile-requests", type=int, default=0, help="requests of the profiled level (default 4 x --requests)"
    )
    ap.add_argument(
        "--profile-native",
        action="store_true",
        help="py-spy --native (C/C++ frames of the stub too; every thread, idle ones included) instead "
        "of --gil (only the thread holding the GIL: Python CPU time)",
    )
    ap.add_argument("--profile-dir", help="keep the py-spy outputs here (default: a temp dir, deleted)")
    ap.add_argument("--json", help="write every level and the summaries here")
    ap.add_argument(
        "--engine-max-batch-size",
        type=int,
        default=SYNTHETIC_SPEC["max_batch_size"],
        help="max_batch_size of the rendered synthetic engine (sequences it runs at once)",
    )
    return ap.parse_args()


def _run_repeats(
    url: str, models: list[str], levels_c: list[int], args: argparse.Namespace, pids: dict[str, int]
) -> list[dict]:
    """Every level ``--repeats`` times, models interleaved per concurrency; prints a line per level. Returns the
    level dicts of :func:`run_level` plus ``gpu_busy_pct``, ``tokens_per_s``, ``repeat`` and ``load_1min``."""
    runs: list[dict] = []
    for rep in range(args.repeats):
        for c in levels_c:
            for model in models:
                with GpuBusy() as gpu:
                    r = run_level(url, model, c, args, pids)
                r["gpu_busy_pct"] = gpu.mean
                r["tokens_per_s"] = r["tokens"] / r["wall_s"] if r["wall_s"] else None
                r["repeat"] = rep
                r["load_1min"] = os.getloadavg()[0]
                runs.append(r)
                m = r["ms_per_token"]
                print(
                    f"rep {rep + 1}/{args.repeats} {model:<17} c={c:<3} around engine "
                    f"{fmt(m['around_engine'])} ms/tok (engine {fmt(m.get(ENGINE_MODEL))}, total "
                    f"{fmt(m['total'])}), TTFT p50 {fmt(r['ttft_ms_p50'], 1)} ms, errors {r['errors']}, "
                    f"load {r['load_1min']:.2f}",
                    flush=True,
                )
    return runs


def _serve_and_measure(
    args: argparse.Namespace, models: list[str], levels_c: list[int], work: Path, extra: dict[str, str]
) -> tuple[list[dict], dict[str, dict], dict]:
    """Render (or take ``--repo``), serve, warm every model, sample the idle CPU for 3 s, run the levels and,
    with ``--profile``, one profiled level per text model. Returns (runs, profiles by model, idle CPU s/s by
    process); ``work`` is deleted at the end.

    Raises:
        SystemExit: no engine stub among the server's processes.
    """
    from repo_builder.server import LaunchConfig, TritonServer

    runs: list[dict] = []
    profiles: dict[str, dict] = {}
    idle: dict = {}
    try:
        repo = Path(args.repo) if args.repo else render_repo(work, args.tokenizer_dir, extra)
        p = args.port_base
        cfg = LaunchConfig(
            model_repo=repo,
            http_port=p,
            grpc_port=p + 1,
            metrics_port=p + 2,
            no_mpi=True,
            timeout=600,
            server_args=list(args.server_arg),
        )
        with TritonServer(cfg) as server:
            pids = server_processes(server.rank_pids()[0][0])
            print(f"# processes: {pids}", flush=True)
            if ENGINE_MODEL not in pids:
                raise SystemExit(f"no {ENGINE_MODEL} stub found among {pids}: is the engine served by Python?")
            for model in models:
                warm(server.grpc_url, model, args)
            # idle CPU of the server (background threads), for reference
            before = sample(pids)
            time.sleep(3.0)
            idle = {k: v / 3.0 for k, v in cpu_delta(before, sample(pids)).items()}
            runs.extend(_run_repeats(server.grpc_url, models, levels_c, args, pids))
            if args.profile:
                pdir = Path(args.profile_dir) if args.profile_dir else work / "profiles"
                for model in [m for m in models if m != ENGINE_MODEL]:
                    profiles[model] = profile_level(server.grpc_url, model, args, pids, pdir)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return runs, profiles, idle


def main() -> int:
    """Measure, summarise, print and (``--json``) write; returns 0."""
    args = _parse_args()
    SYNTHETIC_SPEC["max_batch_size"] = args.engine_max_batch_size

    from repo_builder.bench import parse_concurrency

    levels_c = parse_concurrency(args.concurrency)
    models = [m for m in args.models.split(",") if m]
    extra = {}
    for item in args.set:
        key, _, value = item.partition("=")
        extra[key] = value
    work = Path(tempfile.mkdtemp(prefix="rb-bench-cpu-", dir=args.workdir))
    args.tokenizer_dir = tokenizer_dir_or_default(args.tokenizer_dir, work)
    info = machine()
    print(
        f"# {info['date']}  {info['cpu']}  {info['cores']} cores  load {info['load_average_start']}  "
        f"source {info['source']}",
        flush=True,
    )
    runs, profiles, idle = _serve_and_measure(args, models, levels_c, work, extra)
    info["load_average_end"] = load_average()
    table = summarize_runs(runs, models, levels_c)
    print_table(table, models, info, idle)
    print_profiles(profiles, args)
    write_json(args, info, idle, runs, table, profiles)
    return 0


if __name__ == "__main__":
    sys.exit(main())
