#!/usr/bin/env python3
"""Launcher start-to-ready against a bare tritonserver with the same arguments (issue 5, figure 2).

For each repository (``--repos``: ``synthetic`` = a synthetic-engine repository rendered with
``repo_builder.render.render_repository`` into ``--workdir``; ``tiny`` = the numpy-only
``tests/fixtures/launcher/tiny``; or a path) and each repetition, in an order rotated each repetition:

(``tiny`` is copied to the work dir first, with the empty ``ensemble/1`` that git does not keep.)

* ``bare``: ``tritonserver`` started with ``subprocess.Popen`` with exactly the argv and environment the launcher
  would use (``TritonServer.prepare()``, untimed, builds them; ``--no-mpi`` argv, i.e. one plain
  tritonserver), then polled every ``POLL_S`` (0.05 s, the launcher's interval) on ``GET /v2/health/ready``
  until 200 and ``POST /v2/repository/index`` until every model of the repository is READY. Time: from
  just before ``Popen`` to that answer.
* ``api``: ``TritonServer(LaunchConfig(...)).start()`` + ``wait_ready()`` (default options: mpirun for the one
  rank when mpirun is installed, as ``repo-builder launch`` does). Time: from constructing the object
  (preflight included) to ``wait_ready`` returning.
* ``api-nompi``: the same with ``no_mpi=True`` (the same single process as ``bare``).
* ``cli``: ``repo-builder launch REPO --detach`` as a subprocess (interpreter start, imports, preflight,
  mpirun, ready); time until the command exits. ``cli-nompi`` adds ``--no-mpi``.

Every server is stopped (untimed) before the next starts; servers use ports 20700-20799 (``--port-base``).
Reported: median (min-max) start-to-ready per method and the launcher's overhead = median(method) -
median(bare) (goal: within 0.5 s).

Usage::

    .venv/bin/python scripts/bench_launch.py [--repos synthetic,tiny] [--repeats 7] \\
        [--methods bare,api,api-nompi,cli,cli-nompi] [--json results/launch.json]
"""

from __future__ import annotations

import argparse
import json
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

from bench_common import PROJECT, TOKENIZER_HELP, fmt, load_average, machine, summary, tokenizer_dir_or_default  # noqa: E402

METHODS = ("bare", "api", "api-nompi", "cli", "cli-nompi")
SYNTHETIC_SPEC = {"vocab_size": 32000, "max_batch_size": 64, "max_input_len": 1024, "max_seq_len": 2048}


def overheads(times: dict[str, list[float]], baseline: str = "bare") -> dict[str, float | None]:
    """``{method: median(method) - median(baseline)}`` in seconds (None when either side is missing)."""
    base = summary(times.get(baseline, []))["median"]
    out: dict[str, float | None] = {}
    for method, values in times.items():
        if method == baseline:
            continue
        med = summary(values)["median"]
        out[method] = None if med is None or base is None else med - base  # type: ignore[operator]
    return out


def rotated(items: list[str], k: int) -> list[str]:
    """``items`` rotated left by ``k``."""
    if not items:
        return []
    k %= len(items)
    return items[k:] + items[:k]


def render_synthetic(work: Path, tokenizer_dir: str) -> Path:
    """A streaming synthetic-engine repository rendered by repo-builder under ``work``."""
    from repo_builder.render import render_repository

    engine = work / "synthetic-engine"
    engine.mkdir(parents=True, exist_ok=True)
    (engine / "synthetic_engine.json").write_text(json.dumps(SYNTHETIC_SPEC) + "\n")
    repo = work / "synthetic-repo"
    render_repository(engine, tokenizer_dir, repo, engine_mode="copy", streaming=True)
    return repo


def copy_fixture(src: Path, dst: Path) -> Path:
    """Copy a fixture repository to ``dst`` and create the empty version folders git does not keep
    (``ensemble/1``), without bytecode caches."""
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("__pycache__"))
    for config in dst.glob("*/config.pbtxt"):
        (config.parent / "1").mkdir(exist_ok=True)
    return dst


class Ports:
    """Rotating (http, grpc, metrics) triples inside ``[base, base + span)``."""

    def __init__(self, base: int, span: int = 100) -> None:
        self.base, self.span, self.i = base, span, 0

    def next(self) -> tuple[int, int, int]:
        triples = self.span // 3
        start = self.base + 3 * (self.i % triples)
        self.i += 1
        return start, start + 1, start + 2


def _request(port: int, method: str, path: str) -> tuple[int, bytes] | None:
    from repo_builder.server.probe import http_request

    return http_request("127.0.0.1", port, method, path)


def all_ready(index_body: bytes, expected: set[str]) -> bool:
    """True if the ``/v2/repository/index`` JSON lists every name of ``expected`` with state READY."""
    states = {e.get("name"): e.get("state") for e in json.loads(index_body or b"[]")}
    return all(states.get(m) == "READY" for m in expected)


def run_bare(repo: Path, ports: tuple[int, int, int], poll_s: float, timeout_s: float, log_dir: Path) -> float:
    """Start tritonserver with the launcher's argv/env (no mpirun), poll until ready; stop it. Returns seconds."""
    from repo_builder.server import (
        LaunchConfig,
        TritonServer,
        procs,  # noqa: F401  (submodule)
    )
    from repo_builder.server.launch_processes import LaunchProcesses

    http_port, grpc_port, metrics_port = ports
    server = TritonServer(
        LaunchConfig(model_repo=repo, http_port=http_port, grpc_port=grpc_port, metrics_port=metrics_port, no_mpi=True)
    )
    argv = server.prepare()
    env = dict(os.environ)
    env.update(server.env)
    expected = set(server.repository.model_names) if server.repository else set()
    log = open(log_dir / f"bare-{server.launch_id}.log", "wb")
    t0 = time.perf_counter()
    bare = LaunchProcesses(server.launch_id)  # the launcher's own Popen (new session), none of its checks
    bare.spawn(argv, env, log)
    proc = bare.proc
    assert proc is not None
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"bare tritonserver exited with {proc.returncode}; log {log.name}")
            got = _request(http_port, "GET", "/v2/health/ready")
            if got is not None and got[0] == 200:
                index = _request(http_port, "POST", "/v2/repository/index")
                if index is not None and index[0] == 200 and all_ready(index[1], expected):
                    elapsed = time.perf_counter() - t0
                    break
            if time.monotonic() > deadline:
                raise RuntimeError(f"bare tritonserver not ready after {timeout_s} s; log {log.name}")
            time.sleep(poll_s)
    finally:
        try:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass
        procs.kill_group(proc.pid, signal.SIGKILL)
        proc.wait()
        log.close()
        procs.remove_shm_files(server.shm_prefix)
    return elapsed


def run_api(repo: Path, ports: tuple[int, int, int], no_mpi: bool, timeout_s: float) -> float:
    """``TritonServer`` start + wait_ready (construction and preflight included); stops it. Returns seconds."""
    from repo_builder.server import LaunchConfig, TritonServer

    http_port, grpc_port, metrics_port = ports
    t0 = time.perf_counter()
    server = TritonServer(
        LaunchConfig(
            model_repo=repo,
            http_port=http_port,
            grpc_port=grpc_port,
            metrics_port=metrics_port,
            no_mpi=no_mpi,
            timeout=timeout_s,
        )
    )
    try:
        server.start()
        server.wait_ready()
        elapsed = time.perf_counter() - t0
    finally:
        server.stop()
    return elapsed


def run_cli(repo: Path, ports: tuple[int, int, int], no_mpi: bool, timeout_s: float, work: Path) -> float:
    """``repo-builder launch --detach`` as a subprocess until it exits; then stops the server. Returns seconds."""
    from repo_builder.server.run import stop

    http_port, grpc_port, metrics_port = ports
    pid_file = work / f"launch-{http_port}.pid.json"
    cmd = [
        str(Path(sys.executable).parent / "repo-builder"),
        "launch",
        str(repo),
        "--detach",
        "--pid-file",
        str(pid_file),
        "--http_port",
        str(http_port),
        "--grpc_port",
        str(grpc_port),
        "--metrics_port",
        str(metrics_port),
        "--timeout",
        str(timeout_s),
    ]
    if no_mpi:
        cmd.append("--no-mpi")
    t0 = time.perf_counter()
    done = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    elapsed = time.perf_counter() - t0
    try:
        if done.returncode != 0:
            raise RuntimeError(f"repo-builder launch failed ({done.returncode}):\n{done.stdout[-3000:]}")
    finally:
        if pid_file.exists():
            stop(pid_file=pid_file, echo=lambda _m: None)
    return elapsed


def _parse_args() -> argparse.Namespace:
    """The command line (``--help`` is this module's docstring and the options below)."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--repos",
        default="synthetic,tiny",
        help="synthetic (rendered), tiny (tests/fixtures/launcher/tiny) or repository paths",
    )
    ap.add_argument("--methods", default=",".join(METHODS))
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument(
        "--tokenizer-dir",
        default=None,
        help=TOKENIZER_HELP,
    )
    ap.add_argument("--workdir", default=tempfile.gettempdir())
    ap.add_argument("--port-base", type=int, default=20700, help="ports port-base .. port-base+99 are used")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds to wait for ready per launch")
    ap.add_argument("--retries", type=int, default=2, help="retries of a launch that failed (counted in the output)")
    ap.add_argument("--json", help="write raw times and summaries here")
    return ap.parse_args()


def _repositories(args: argparse.Namespace, work: Path) -> dict[str, Path]:
    """{name: repository} of ``--repos``: ``synthetic`` rendered under ``work``, ``tiny`` the launcher fixture
    copied under ``work``, anything else a path (resolved)."""
    repos: dict[str, Path] = {}
    for name in [r for r in args.repos.split(",") if r]:
        if name == "synthetic":
            repos[name] = render_synthetic(work, args.tokenizer_dir)
        elif name == "tiny":
            repos[name] = copy_fixture(PROJECT / "tests" / "fixtures" / "launcher" / "tiny", work / "tiny")
        else:
            repos[name] = Path(name).resolve()
    return repos


def _launch(method: str, repo: Path, p: tuple[int, int, int], poll_s: float, timeout_s: float, work: Path) -> float:
    """Seconds to ready of one launch of ``repo`` on ports ``p`` by ``method`` (``bare``, ``api*``, ``cli*``; a
    ``nompi`` suffix launches without MPI). Raises what the launch raised."""
    if method == "bare":
        return run_bare(repo, p, poll_s, timeout_s, work)
    if method.startswith("api"):
        return run_api(repo, p, method.endswith("nompi"), timeout_s)
    return run_cli(repo, p, method.endswith("nompi"), timeout_s, work)


def _time_repo(
    args: argparse.Namespace, name: str, repo: Path, methods: list[str], ports: Ports, poll_s: float, work: Path
) -> dict:
    """One untimed warm-up launch, then ``--repeats`` rounds of every method (rotated), each launch retried up to
    ``--retries`` times. Returns the repository's result: ``repo``, ``times_s`` {method: [s]},
    ``failed_attempts``, ``summary`` and ``overhead_vs_bare_s``.

    Raises:
        Exception: a launch that still failed after its retries.
    """
    times: dict[str, list[float]] = {m: [] for m in methods}
    # untimed warm-up launch: page cache, Python bytecode of the stubs, the binary's libraries
    run_api(repo, ports.next(), True, args.timeout)
    failures: list[str] = []
    for rep in range(args.repeats):
        for method in rotated(methods, rep):
            for attempt in range(1 + args.retries):
                p = ports.next()
                try:
                    s = _launch(method, repo, p, poll_s, args.timeout, work)
                    break
                except Exception as exc:  # noqa: BLE001 - a launch killed from outside: retried, counted
                    failures.append(f"{method} rep {rep + 1}: {str(exc).splitlines()[0][:200]}")
                    print(f"{name:>10} rep {rep + 1}  {method:<10} FAILED ({failures[-1]})", flush=True)
                    if attempt == args.retries:
                        raise
            times[method].append(s)
            print(
                f"{name:>10} rep {rep + 1}/{args.repeats}  {method:<10} {s:7.3f} s  (load {os.getloadavg()[0]:.2f})",
                flush=True,
            )
    return {
        "repo": str(repo),
        "times_s": times,
        "failed_attempts": failures,
        "summary": {m: summary(v) for m, v in times.items()},
        "overhead_vs_bare_s": overheads(times),
    }


def _print_results(results: dict[str, dict], methods: list[str]) -> None:
    """Print a markdown table per repository: median, min-max and median - bare (s) per method."""
    for name, res in results.items():
        print(f"\n{name}: {res['repo']}; failed attempts (retried): {len(res['failed_attempts'])}")
        print("| method | median s | min-max s | median - bare (s) |")
        print("|---|---:|---:|---:|")
        for m in methods:
            s = res["summary"][m]
            over = res["overhead_vs_bare_s"].get(m)
            print(
                f"| {m} | {fmt(s['median'])} | {fmt(s['min'])}-{fmt(s['max'])} | {'' if m == 'bare' else fmt(over)} |"
            )


def main() -> int:
    """Time every launch method on every repository, print the tables and (``--json``) write them; returns 0."""
    args = _parse_args()

    from repo_builder.server.launch_processes import POLL_S

    work = Path(tempfile.mkdtemp(prefix="rb-bench-launch-", dir=args.workdir))
    args.tokenizer_dir = tokenizer_dir_or_default(args.tokenizer_dir, work)
    info = machine()
    info["poll_interval_s"] = str(POLL_S)
    print(
        f"# {info['date']}  {info['cpu']}  {info['cores']} cores  load {info['load_average_start']}  "
        f"source {info['source']}",
        flush=True,
    )
    ports = Ports(args.port_base)
    methods = [m for m in args.methods.split(",") if m]
    results: dict[str, dict] = {}
    try:
        for name, repo in _repositories(args, work).items():
            results[name] = _time_repo(args, name, repo, methods, ports, POLL_S, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    info["load_average_end"] = load_average()
    print(f"\n# load average at end: {info['load_average_end']}")
    _print_results(results, methods)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(
            json.dumps({"machine": info, "args": vars(args), "results": results}, indent=2) + "\n"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
