"""Side by side with NVIDIA's templates in one run (issue 15; docs/performance.md, section 8).

    python scripts/bench_vs_upstream.py --mirror /path/to/tensorrtllm_backend.git \\
        --harness /path/to/upstream-baseline --tokenizer-dir /path/to/llama2_tokenizer \\
        --work /tmp/perf-bl [--reps 5] [--concurrency 1,4,16] [--wait-quiet 30]

Steps, all in one invocation so both sides see the same machine and, as far as possible, the same load:

1. ``run_baseline.py prepare-upstream``: NVIDIA's v0.19.0 templates filled by their ``fill_template.py``
   into ``WORK/upstream`` (under /tmp; nothing of theirs enters this project);
2. our default streaming render for a synthetic engine (``WORK/ours``: two preprocessing instances, one BLS),
   the same with one instance of each (``WORK/ours_x1``, NVIDIA's counts) and with two of each
   (``WORK/ours_x2``; postprocessing stays at one instance, streaming requires it);
3. ``run_baseline.py run`` on each: the harness puts its own zero-cost synthetic engine into both
   ``tensorrt_llm`` slots and measures ensemble and BLS over gRPC streaming with the same client; the
   two-instance repository only at the highest concurrency;
4. ``run_baseline.py summarize --compare``: the B/A tables (B = ours), written next to the results with
   the load averages seen before and after each side (``WORK/loadavg.json``).

With ``--instances 1,4`` (the GPU host run, issue 29) steps 2-3 are instead, for each N: NVIDIA's filled
repository with N preprocessing, postprocessing and BLS instances (``upstream_xN``), then our streaming
render with N preprocessing and BLS instances (``ours_xN``; postprocessing stays at one, streaming requires
it), both at every ``--concurrency`` level. ``--upstream-repo`` takes an already filled repository (from
``run_baseline.py prepare-upstream`` on a machine that has the mirror) instead of step 1. ``--timeout-s``
bounds each harness run: a run still going then gets a ``py-spy dump`` of every process of its group
(``WORK/NAME_pyspy.txt``, where py-spy is installed), then SIGTERM to the group, and the next run starts.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

SYNTHETIC_SPEC = {"vocab_size": 32000, "max_batch_size": 64, "max_input_len": 1024, "max_seq_len": 2048}
MODES = "ensemble_grpc_stream,bls_grpc_stream"


def render(dest: Path, tokenizer_dir: str, extra: dict) -> Path:
    """Our streaming render for a synthetic engine spec; returns the repository folder."""
    from repo_builder.render import render_repository

    engine = dest / "synthetic-engine"
    engine.mkdir(parents=True, exist_ok=True)
    (engine / "synthetic_engine.json").write_text(json.dumps(SYNTHETIC_SPEC) + "\n")
    values = {"synthetic_token_delay_ms": 0, **extra}
    return render_repository(engine, tokenizer_dir, dest / "repo", user_values=values, streaming=True).output


def upstream_with_instances(src: Path, dest: Path, n: int) -> Path:
    """A copy of NVIDIA's filled repository with ``n`` preprocessing, postprocessing and BLS instances.

    Their v0.19.0 fill writes ``count: <preprocessing_instance_count>`` etc. into each model's
    ``instance_group``; the copy's ``count: 1`` there becomes ``count: n``. Returns the copy's folder.
    """
    import re
    import shutil

    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(src, dest)
    for model in ("preprocessing", "postprocessing", "tensorrt_llm_bls"):
        cfg = dest / model / "config.pbtxt"
        text, k = re.subn(r"(instance_group\s*\[\s*\{[^}]*?count\s*:\s*)\d+", rf"\g<1>{n}", cfg.read_text())
        if k != 1:
            raise SystemExit(f"{cfg}: expected one instance_group count, found {k}")
        cfg.write_text(text)
    return dest


def dump_and_stop(pgid: int, dump_path: Path) -> None:
    """py-spy dump of every process in group ``pgid`` (where py-spy exists), then SIGTERM/SIGKILL to it."""
    import shutil
    import signal

    pids = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if os.getpgid(int(d.name)) == pgid:
                    pids.append(int(d.name))
            except OSError:
                continue
    spy = shutil.which("py-spy")
    with dump_path.open("w") as f:
        for pid in sorted(pids):
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            f.write(f"=== pid {pid}: {cmd[:300]}\n")
            if spy:
                r = subprocess.run([spy, "dump", "--pid", str(pid)], capture_output=True, text=True, timeout=30)
                f.write(r.stdout + r.stderr + "\n")
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            return
        time.sleep(10)


def machine() -> dict:
    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"cpu": cpu, "cores": os.cpu_count(), "kernel": platform.release(), "python": platform.python_version()}


def table(a_path: Path, b_path: Path, a_name: str = "NVIDIA", b_name: str = "ours") -> str:
    """Markdown: per mode and concurrency, median (min-max over repetitions) of both sides and B/A."""
    a, b = json.loads(a_path.read_text()), json.loads(b_path.read_text())
    rows = [
        "| mode | c | server CPU ms/token "
        + f"{a_name} / {b_name} (ratio)"
        + " | output tokens/s "
        + f"{a_name} / {b_name} (ratio)"
        + " | TTFT p50 ms "
        + f"{a_name} / {b_name} (ratio)"
        + " | response bytes/request | other load (share of CPU) |",
        "|---|---|---|---|---|---|---|",
    ]

    def cell(side: dict, mode: str, c: str, key: str) -> tuple[float, float, float] | None:
        level = side["overhead"].get(mode, {}).get("by_concurrency", {}).get(c)
        if not level:
            return None
        vals = [r[key] for r in level["reps"] if r.get(key) is not None]
        return (level["median"][key], min(vals), max(vals)) if vals else None

    def fmt(x: tuple | None, digits: int) -> str:
        return "—" if x is None else f"{x[0]:,.{digits}f} ({x[1]:,.{digits}f}-{x[2]:,.{digits}f})"

    for mode in b["overhead"]:
        for c in b["overhead"][mode]["by_concurrency"]:
            parts = []
            for key, digits in (("server_cpu_ms_per_token", 3), ("tokens_per_s", 0), ("ttft_p50_ms", 1)):
                x, y = cell(a, mode, c, key), cell(b, mode, c, key)
                ratio = f"{y[0] / x[0]:.2f}x" if x and y and x[0] else "—"
                parts.append(f"{fmt(x, digits)} / {fmt(y, digits)} ({ratio})")
            by = [cell(s_, mode, c, "response_bytes_per_request_p50") for s_ in (a, b)]
            fo = [cell(s_, mode, c, "foreign_cpu_share") for s_ in (a, b)]
            rows.append(
                f"| {mode} | {c} | "
                + " | ".join(parts)
                + " | "
                + " / ".join("—" if v is None else f"{v[0]:,.0f}" for v in by)
                + " | "
                + " / ".join("—" if v is None else f"{v[0]:.2f}" for v in fo)
                + " |"
            )
    return "\n".join(rows) + "\n"


def _parse_args() -> argparse.Namespace:
    """The command line (``--help``: the module docstring's first line and the options below)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mirror", default="", help="bare git dir of triton-inference-server/tensorrtllm_backend")
    ap.add_argument("--harness", required=True, help="folder with run_baseline.py")
    ap.add_argument("--tokenizer-dir", required=True)
    ap.add_argument("--work", default="/tmp/perf-bl", help="folder under /tmp for both repositories and results")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--concurrency", default="1,4,16")
    ap.add_argument(
        "--wait-quiet",
        type=float,
        default=0,
        help="passed to the harness; > 0 also makes it discard repetitions that saw other load (up to "
        "2 x reps per cell, each followed by a wait): on a shared machine 0 keeps the run bounded",
    )
    ap.add_argument("--startup-reps", type=int, default=1)
    ap.add_argument("--instances", default="", help="e.g. 1,4: both sides at each instance count (see above)")
    ap.add_argument("--upstream-repo", default="", help="NVIDIA's already filled repository (skips step 1)")
    ap.add_argument("--modes", default=MODES, help="harness overhead modes")
    ap.add_argument("--output-tokens", type=int, default=256)
    ap.add_argument("--timeout-s", type=float, default=0, help="per harness run; 0 = none")
    ap.add_argument("--set", action="append", default=[], help="KEY=VALUE for our render (all of ours)")
    ap.add_argument("--harness-arg", action="append", default=[], help="passed to every harness run")
    ap.add_argument("--correctness", action="store_true", help="also run the harness's text-correctness part")
    ap.add_argument("--skip-upstream", action="store_true", help="reuse WORK/upstream_results.json")
    ap.add_argument(
        "--table",
        nargs=2,
        metavar=("A_JSON", "B_JSON"),
        help="only print the markdown table of two harness results (A = NVIDIA, B = ours)",
    )
    return ap.parse_args()


def _harness_path(args: argparse.Namespace) -> str:
    """The harness's ``run_baseline.py`` under ``--harness``."""
    return str(Path(args.harness) / "run_baseline.py")


def _harness_run(
    args: argparse.Namespace,
    work: Path,
    loads: dict[str, list[float]],
    name: str,
    repo: Path,
    concurrency: str,
    extra: list[str],
) -> None:
    """``run_baseline.py run`` on ``repo`` into ``WORK/NAME_results.json``, in its own process group; records the
    load averages before/after and the seconds taken in ``loads``. With ``--timeout-s`` a run still going is
    py-spy dumped and stopped (its exit code is then not checked).

    Raises:
        SystemExit: the run failed (without ``--timeout-s``).
    """
    py = sys.executable
    harness = _harness_path(args)
    loads[name + " before"] = list(os.getloadavg())
    t0 = time.time()
    cmd = [
        py,
        harness,
        "run",
        "--repo",
        str(repo),
        "--tokenizer-dir",
        args.tokenizer_dir,
        "--modes",
        args.modes,
        "--output-tokens",
        str(args.output_tokens),
        "--concurrency",
        concurrency,
        "--reps",
        str(args.reps),
        "--wait-quiet",
        str(args.wait_quiet),
        "--no-bls-acc",
        "--label",
        name,
        "--startup-reps",
        str(args.startup_reps),
        *([] if args.correctness else ["--skip-correctness"]),
        "--out",
        str(work / f"{name}_results.json"),
        *extra,
        *args.harness_arg,
    ]
    print("#", " ".join(cmd), flush=True)
    proc = subprocess.Popen(cmd, start_new_session=True)
    try:
        rc = proc.wait(timeout=args.timeout_s or None)
    except subprocess.TimeoutExpired:
        print(f"# {name}: still running after {args.timeout_s:.0f} s: py-spy dump, then SIGTERM", flush=True)
        dump_and_stop(proc.pid, work / f"{name}_pyspy.txt")
        rc = proc.wait()
        loads[name + " timed out"] = [args.timeout_s]
    if rc != 0 and not args.timeout_s:
        raise SystemExit(f"harness run {name} failed with exit code {rc}")
    loads[name + " after"] = list(os.getloadavg())
    loads[name + " seconds"] = [round(time.time() - t0, 1)]


def _run_instances(args: argparse.Namespace, work: Path, loads: dict[str, list[float]], extra_values: dict) -> None:
    """``--instances``: for each N, NVIDIA's repository and ours with N instances at every level; writes
    ``loadavg.json`` and ``summary_xN.md`` and prints the tables and the loads."""
    counts = [int(x) for x in args.instances.split(",")]
    names = []
    for n in counts:
        up = upstream_with_instances(Path(args.upstream_repo), work / f"upstream_x{n}", n)
        values = {**extra_values, "preprocessing_instance_count": n, "bls_instance_count": n}
        ours_n = render(work / f"ours_x{n}", args.tokenizer_dir, values)
        prov = Path(args.upstream_repo).parent / "provenance.json"
        _harness_run(
            args,
            work,
            loads,
            f"upstream_x{n}",
            up,
            args.concurrency,
            ["--provenance", str(prov)] if prov.exists() else [],
        )
        _harness_run(args, work, loads, f"ours_x{n}", ours_n, args.concurrency, [])
        names.append(n)
    (work / "loadavg.json").write_text(json.dumps({"machine": machine(), "loadavg": loads}, indent=1) + "\n")
    for n in names:
        a, b = work / f"upstream_x{n}_results.json", work / f"ours_x{n}_results.json"
        if a.exists() and b.exists():
            (work / f"summary_x{n}.md").write_text(f"instances {n}\n\n" + table(a, b))
            print(f"instances {n}\n\n" + table(a, b), flush=True)
    print(json.dumps({"machine": machine(), "loadavg": loads}, indent=1))


def _run_default(args: argparse.Namespace, work: Path, loads: dict[str, list[float]]) -> None:
    """Steps 1-4 of the module docstring: prepare NVIDIA's side (unless skipped), render ours three ways, run the
    harness on each, then ``summarize --compare`` into ``summary_<ours>.md``; prints the summaries and loads.

    Raises:
        subprocess.CalledProcessError: the harness's prepare-upstream or summarize failed.
    """
    py = sys.executable
    harness = _harness_path(args)
    if not args.skip_upstream:
        subprocess.run(
            [
                py,
                harness,
                "prepare-upstream",
                "--mirror",
                args.mirror,
                "--dest",
                str(work / "upstream"),
                "--tokenizer-dir",
                args.tokenizer_dir,
            ],
            check=True,
        )
    ours = render(work / "ours", args.tokenizer_dir, {})
    ours1 = render(work / "ours_x1", args.tokenizer_dir, {"preprocessing_instance_count": 1, "bls_instance_count": 1})
    ours2 = render(work / "ours_x2", args.tokenizer_dir, {"preprocessing_instance_count": 2, "bls_instance_count": 2})
    if not args.skip_upstream:
        _harness_run(
            args,
            work,
            loads,
            "upstream",
            work / "upstream" / "repo",
            args.concurrency,
            ["--provenance", str(work / "upstream" / "provenance.json")],
        )
    _harness_run(args, work, loads, "ours", ours, args.concurrency, [])
    top = args.concurrency.split(",")[-1]
    skip = ["--skip-correctness"] if args.correctness else []  # the extra repositories: overhead only
    _harness_run(args, work, loads, "ours_x1", ours1, top, skip)
    _harness_run(args, work, loads, "ours_x2", ours2, top, skip)
    (work / "loadavg.json").write_text(json.dumps({"machine": machine(), "loadavg": loads}, indent=1) + "\n")
    for b in ("ours", "ours_x1", "ours_x2"):
        out = subprocess.run(
            [
                py,
                harness,
                "summarize",
                "--results",
                str(work / "upstream_results.json"),
                "--compare",
                str(work / f"{b}_results.json"),
            ],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        (work / f"summary_{b}.md").write_text(
            out + "\n" + table(work / "upstream_results.json", work / f"{b}_results.json")
        )
        print(out)
    print(json.dumps({"machine": machine(), "loadavg": loads}, indent=1))


def main() -> None:
    """Run the comparison (or, with ``--table``, print one table)."""
    args = _parse_args()
    if args.table:
        print(table(Path(args.table[0]), Path(args.table[1])), end="")
        return
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    loads: dict[str, list[float]] = {}
    extra_values = dict(item.partition("=")[::2] for item in args.set)
    if args.upstream_repo:
        args.skip_upstream = True
    if args.instances:
        _run_instances(args, work, loads, extra_values)
        return
    _run_default(args, work, loads)


if __name__ == "__main__":
    main()
