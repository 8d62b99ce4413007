#!/usr/bin/env python3
"""Start-up cost of the CLI: ``--help`` and a reference-mode render of a tiny engine against ``python -c pass``.

Issue 10's goals (benchmarks, never tests): ``repo-builder --help`` within 0.3 s of ``python -c pass`` and a
reference-mode ``repo-builder render`` of a tiny engine within 0.6 s of it, medians of 5 on this machine.

Every command runs as a fresh subprocess with the interpreter of this script (so the same virtual
environment); the commands of one repetition run in an order rotated each repetition. Measured per run: wall
time (``time.perf_counter`` around ``subprocess.run``) and CPU time of the child (user + system, from
``os.wait4``'s rusage), so a loaded machine shows up as wall > CPU. The engine is a synthetic engine
(``synthetic_engine.json``, vocabulary 32001, the size of the tokenizer below) and the tokenizer is the
packaged Mistral v1 SentencePiece tokenizer (``repo_builder.testing.packaged_tokenizer``, package
mistral-common), so nothing beside the checkout is needed. The render's output is deleted before each run.

The children write and reuse ``.pyc`` files, as a normally installed package does (pip compiles at install
time, Python writes ``__pycache__``), also where ``PYTHONDONTWRITEBYTECODE`` is set in the environment (this
project's shared machine sets it: every run would then compile every imported module from source, 1.2 s of the
render's CPU); ``--source-each-run`` keeps the variable to measure that case.

``--importtime`` also prints the ten slowest top-level imports of the render (``python -X importtime``,
cumulative microseconds) to say where the remaining time goes.

Usage::

    .venv/bin/python scripts/bench_startup.py [--repeats 5] [--importtime] [--json results/startup.json]
        [--before DIR] [--source-each-run]

``--before DIR`` also runs ``--help`` and the render with ``PYTHONPATH=DIR`` (an older ``repo_builder``
package, e.g. ``git archive COMMIT repo_builder | tar -x -C DIR``), in the same rotation, for a before/after
in one run; the render is also run with ``REPO_BUILDER_NO_CACHE=1`` (the on-disk caches of
``repo_builder.filecache`` off; Jinja2's bytecode cache stays on).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_common import fmt, load_average, machine, summary  # noqa: E402

_CLI = "from repo_builder.cli import main; main()"


#: environment of the children (``main`` drops ``PYTHONDONTWRITEBYTECODE`` from it unless ``--source-each-run``)
BASE_ENV: dict[str, str] = dict(os.environ)


def _run(argv: list[str], cwd: Path, env: dict[str, str] | None = None) -> tuple[float, float]:
    """Run ``argv`` (``env``: extra environment variables); return (wall seconds, child CPU seconds). Raises
    SystemExit naming the command on failure."""
    full_env = {**BASE_ENV, **(env or {})}
    start = time.perf_counter()
    proc = subprocess.Popen(argv, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=full_env)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} exited {proc.returncode}:\n{err}")
    return wall, usage.ru_utime + usage.ru_stime


def _importtime(argv: list[str], cwd: Path, top: int = 10) -> list[tuple[str, int]]:
    """The ``top`` slowest top-level imports (cumulative µs) of ``argv`` run under ``-X importtime``."""
    out = subprocess.run(
        [argv[0], "-X", "importtime", *argv[1:]], cwd=cwd, capture_output=True, text=True, env=BASE_ENV
    )
    rows: list[tuple[str, int]] = []
    for line in out.stderr.splitlines():
        parts = line.split("|")
        if not line.startswith("import time:") or len(parts) != 3 or "cumulative" in line:
            continue
        name = parts[2][1:]  # one space after the bar; nested imports are indented two more per level
        if name.startswith(" "):
            continue
        rows.append((name.strip(), int(parts[1])))
    return sorted(rows, key=lambda r: -r[1])[:top]


def _parse_args() -> argparse.Namespace:
    """The command line (``--help``: the module docstring's first paragraph and the options below)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--importtime", action="store_true", help="also list the render's slowest imports")
    parser.add_argument("--json", type=Path, help="write raw times here")
    parser.add_argument("--before", type=Path, help="an older repo_builder tree (its parent folder) to compare")
    parser.add_argument(
        "--source-each-run",
        action="store_true",
        help="keep PYTHONDONTWRITEBYTECODE from the environment (no .pyc: every run compiles its imports)",
    )
    return parser.parse_args()


def _commands(args: argparse.Namespace, work: Path) -> tuple[dict[str, list[str]], dict[str, dict[str, str]], Path]:
    """(the timed command lines by name, extra environment by name, the render's output folder), for a
    synthetic engine and the packaged tokenizer written under ``work``; ``--before`` adds the older tree's
    ``--help`` and render and a render with the cache off."""
    from repo_builder.testing import packaged_tokenizer

    engine = work / "engine"
    engine.mkdir()
    (engine / "synthetic_engine.json").write_text(
        json.dumps({"vocab_size": 32001, "max_batch_size": 8, "max_input_len": 256, "max_seq_len": 512})
    )
    tokenizer = packaged_tokenizer("mistral-v1", work / "tokenizer")
    out = work / "repo"
    py = sys.executable
    commands: dict[str, list[str]] = {
        "python -c pass": [py, "-c", "pass"],
        "repo-builder --help": [py, "-c", _CLI, "--help"],
        "repo-builder render (reference)": [
            py, "-c", _CLI, "render", "--engine-dir", str(engine), "--tokenizer-dir", str(tokenizer),
            "--output", str(out), "--engine-mode", "reference",
        ],
    }  # fmt: skip
    envs: dict[str, dict[str, str]] = {}
    if args.before:
        before = str(args.before.resolve())
        for name in ("repo-builder --help", "repo-builder render (reference)"):
            commands[f"{name}, before"] = commands[name]
            envs[f"{name}, before"] = {"PYTHONPATH": before}
        commands["repo-builder render (reference), cache off"] = commands["repo-builder render (reference)"]
        envs["repo-builder render (reference), cache off"] = {"REPO_BUILDER_NO_CACHE": "1"}
    return commands, envs, out


def _time_commands(
    commands: dict[str, list[str]], envs: dict[str, dict[str, str]], work: Path, out: Path, repeats: int
) -> dict[str, dict[str, list[float]]]:
    """One untimed run of each command, then ``repeats`` rounds (order rotated per round), ``out`` removed
    before each run. Returns {name: {"wall": [s], "cpu": [s]}}."""
    # The CLI reads sys.argv; `python -c CODE args` puts the args after "-c".
    raw: dict[str, dict[str, list[float]]] = {name: {"wall": [], "cpu": []} for name in commands}
    # Warm the page cache and .pyc files once (untimed).
    for name, argv in commands.items():
        shutil.rmtree(out, ignore_errors=True)
        _run(argv, work, envs.get(name))
    names = list(commands)
    for rep in range(repeats):
        order = names[rep % len(names) :] + names[: rep % len(names)]
        for name in order:
            shutil.rmtree(out, ignore_errors=True)
            wall, cpu = _run(commands[name], work, envs.get(name))
            raw[name]["wall"].append(wall)
            raw[name]["cpu"].append(cpu)
    return raw


def _print_table(raw: dict[str, dict[str, list[float]]], repeats: int, info: dict) -> None:
    """Print the markdown table: wall and CPU seconds per command (median, min-max), wall over ``python -c pass``."""
    base = {k: summary(raw["python -c pass"][k])["median"] for k in ("wall", "cpu")}
    print(f"# start-up, {repeats} repetitions; {json.dumps(info)}")
    print("| command | wall s median (min-max) | wall minus `python -c pass` | CPU s median (min-max) |")
    print("|---|---:|---:|---:|")
    for name in raw:
        w, c = summary(raw[name]["wall"]), summary(raw[name]["cpu"])
        extra = (w["median"] or 0.0) - (base["wall"] or 0.0)
        print(
            f"| `{name}` | {fmt(w['median'])} ({fmt(w['min'])}-{fmt(w['max'])}) | "
            f"{'-' if name == 'python -c pass' else f'+{extra:.3f}'} | "
            f"{fmt(c['median'])} ({fmt(c['min'])}-{fmt(c['max'])}) |"
        )


def main() -> int:
    """Time the commands, print the table (and the slowest imports), write ``--json``; returns 0."""
    args = _parse_args()
    if not args.source_each_run:
        BASE_ENV.pop("PYTHONDONTWRITEBYTECODE", None)

    info = machine()
    info["bytecode"] = "source each run" if args.source_each_run else ".pyc written and reused"
    work = Path(tempfile.mkdtemp(prefix="rb-startup-"))
    try:
        commands, envs, out = _commands(args, work)
        raw = _time_commands(commands, envs, work, out, args.repeats)
        info["load_average_end"] = load_average()
        _print_table(raw, args.repeats, info)
        if args.importtime:
            shutil.rmtree(out, ignore_errors=True)
            print("\nslowest top-level imports of the render (cumulative ms):")
            for name, us in _importtime(commands["repo-builder render (reference)"], work):
                print(f"  {name}: {us / 1000:.0f}")
        if args.json:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps({"machine": info, "raw": raw}, indent=2))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
