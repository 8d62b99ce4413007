#!/usr/bin/env python3
"""Render time of a large TRT-LLM engine per placement mode, against ``cp`` and against a tiny engine.

Issue 5, figure 1. The script builds two fake TensorRT-LLM engine directories in ``--workdir``: a new-layout
``config.json`` (written by this script, or copied from ``--config-from``) plus ``rank0.engine`` of
``--size`` bytes (default 4 GiB) and of ``--small-size`` bytes (default 4 KiB), filled with non-zero
pseudo-random data (really written, not sparse). Then, for every repetition, in an order rotated each
repetition (so no mode always runs first or after the same neighbour):

* ``api:<mode>``: ``repo_builder.render.render_repository(..., engine_mode=<mode>)`` in this process (imports
  warmed up by an untimed render first) for mode in copy, hardlink, symlink, reference;
* ``cli:<mode>`` (``--cli``, default on for copy only): ``repo-builder render ... --engine-mode <mode>`` as a
  subprocess (adds the interpreter start and imports, ~1 s);
* ``cp``: ``cp <engine>/config.json <engine>/rank0.engine <dest>/`` (coreutils; the baseline).

Before each timed run the previous output is deleted, ``sync`` flushes dirty pages (untimed) and the engine's
pages are evicted from the page cache so every method reads the engine from disk (``--drop-caches``):

* ``file`` (default): ``posix_fadvise(POSIX_FADV_DONTNEED)`` on the engine files only. Needs no root, leaves
  the Python modules, templates and tokenizer files cached (they are not what is compared) and does not slow
  other jobs on the machine.
* ``global``: ``echo 3 > /proc/sys/vm/drop_caches`` (root only): everything is cold, including the
  tokenizer files render reads and, for the CLI, every imported module; on a shared machine this mostly
  measures cold imports.
* ``none``: warm cache (the untimed warm-up has read the small engine; the large one is read by whichever
  method runs first, so methods alternate and the first repetition is the one that pays).

Which one was used is recorded.

Reported (medians over ``--repeats`` runs, with min/max): every method's time for both sizes, the ratio
large/small per method (goal: 1.0 for hardlink, symlink and reference: they must not depend on the
engine's size) and copy/cp for the large engine (goal: <= 1.1). ``--json`` writes every raw time.
The engine files are deleted afterwards (``--keep`` keeps them).

Usage::

    .venv/bin/python scripts/bench_render.py [--size 4GiB] [--small-size 4KiB] [--repeats 5] \\
        [--tokenizer-dir DIR] [--workdir /tmp] [--json results/render.json]
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
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_common import (  # noqa: E402
    TOKENIZER_HELP,
    fmt,
    format_size,
    load_average,
    machine,
    parse_size,
    ratio,
    summary,
    tokenizer_dir_or_default,
)

MODES = ("copy", "hardlink", "symlink", "reference")
_BLOCK = 64 << 20  # bytes of pseudo-random data written per call


def engine_config(vocab_size: int = 32000) -> dict:
    """A minimal valid new-layout (``trtllm-build`` 0.13+) ``config.json`` for a 1-GPU LLaMA-style engine.

    Facts: keys as in TensorRT-LLM 1.2's ``config.json`` (``version``, ``pretrained_config`` with
    ``architecture``/``dtype``/``vocab_size``/``mapping``, ``build_config`` with ``max_batch_size``,
    ``max_input_len``, ``max_seq_len``, ``kv_cache_type`` and ``plugin_config``); vocab_size matches the
    LLaMA-2 tokenizer (32000 tokens).
    """
    return {
        "version": "1.2.0",
        "pretrained_config": {
            "architecture": "LlamaForCausalLM",
            "dtype": "float16",
            "logits_dtype": "float32",
            "vocab_size": vocab_size,
            "hidden_size": 4096,
            "num_hidden_layers": 32,
            "num_attention_heads": 32,
            "num_key_value_heads": 32,
            "max_position_embeddings": 4096,
            "hidden_act": "silu",
            "mapping": {"world_size": 1, "tp_size": 1, "pp_size": 1, "cp_size": 1},
            "quantization": {"quant_algo": None, "kv_cache_quant_algo": None},
        },
        "build_config": {
            "max_batch_size": 8,
            "max_beam_width": 1,
            "max_input_len": 2048,
            "max_seq_len": 4096,
            "max_num_tokens": 8192,
            "kv_cache_type": "paged",
            "gather_context_logits": False,
            "gather_generation_logits": False,
            "max_draft_len": 0,
            "speculative_decoding_mode": 1,
            "plugin_config": {
                "dtype": "float16",
                "gpt_attention_plugin": "auto",
                "gemm_plugin": "auto",
                "context_fmha": True,
                "paged_kv_cache": True,
                "remove_input_padding": True,
                "tokens_per_block": 32,
                "use_paged_context_fmha": True,
            },
        },
    }


def write_filled(path: Path, size: int, seed: int = 1) -> None:
    """Write ``size`` bytes of pseudo-random data (no long zero runs, no holes) and fsync.

    A 64 MiB block from numpy's PCG64 (``seed``) is written repeatedly; the file is allocated for real, so a
    copy must move every byte (``st_blocks * 512 >= size`` is checked).
    """
    import numpy as np

    rng = np.random.default_rng(seed)
    block = rng.integers(1, 256, size=min(_BLOCK, max(size, 1)), dtype=np.uint8).tobytes()
    with open(path, "wb") as fh:
        left = size
        while left > 0:
            n = min(left, len(block))
            fh.write(block[:n])
            left -= n
        fh.flush()
        os.fsync(fh.fileno())
    st = path.stat()
    if st.st_size != size or st.st_blocks * 512 < size:
        raise RuntimeError(
            f"{path}: expected {size} allocated bytes, got size {st.st_size}, {st.st_blocks * 512} allocated"
        )


def make_engine(directory: Path, size: int, config: dict) -> Path:
    """An engine dir with ``config.json`` and a ``rank0.engine`` of ``size`` bytes (reused if already right)."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    rank0 = directory / "rank0.engine"
    if not (rank0.is_file() and rank0.stat().st_size == size and rank0.stat().st_blocks * 512 >= size):
        write_filled(rank0, size)
    return directory


def can_drop_caches() -> bool:
    """True if this process may write /proc/sys/vm/drop_caches (root, writable /proc)."""
    return os.geteuid() == 0 and os.access("/proc/sys/vm/drop_caches", os.W_OK)


def evict(paths: list[Path]) -> None:
    """Drop the cached pages of ``paths`` (``posix_fadvise(POSIX_FADV_DONTNEED)``; clean pages only, so
    call after ``sync``)."""
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def settle(how: str, engine_files: list[Path]) -> None:
    """Untimed: ``sync``, then drop caches ``how`` = ``file`` (the engine files), ``global`` or ``none``."""
    os.sync()
    if how == "global":
        with open("/proc/sys/vm/drop_caches", "w") as fh:
            fh.write("3\n")
    elif how == "file":
        evict(engine_files)


def rotated(items: list[str], k: int) -> list[str]:
    """``items`` rotated left by ``k`` (repetition ``k`` starts at a different method)."""
    if not items:
        return []
    k %= len(items)
    return items[k:] + items[:k]


def methods_for(modes: list[str], cli_modes: list[str], with_cp: bool) -> list[str]:
    """Timed methods: ``api:<mode>`` for each mode, ``cli:<mode>`` for each CLI mode, and ``cp``."""
    out = [f"api:{m}" for m in modes] + [f"cli:{m}" for m in cli_modes]
    if with_cp:
        out.append("cp")
    return out


def analyse(times: dict[str, dict[str, list[float]]], large: str, small: str) -> dict:
    """Summaries and goal ratios from raw times ``{size label: {method: [seconds...]}}``.

    Returns ``{"summary": {size: {method: summary}}, "large_over_small": {method: ratio of medians},
    "copy_over_cp": {"api": r, "cli": r}, "copy_minus_reference_over_cp": r}`` (ratios None when a side is
    missing). The last one is the placement part alone: median render time with ``copy`` minus that with
    ``reference`` (same render, no engine files), over ``cp``'s median, for the large engine.
    """
    summ = {size: {m: summary(v) for m, v in per.items()} for size, per in times.items()}

    def med(size: str, method: str) -> float | None:
        s = summ.get(size, {}).get(method)
        return s["median"] if s else None  # type: ignore[return-value]

    methods = sorted({m for per in times.values() for m in per})
    return {
        "summary": summ,
        "large_over_small": {m: ratio(med(large, m), med(small, m)) for m in methods},
        "copy_over_cp": {kind: ratio(med(large, f"{kind}:copy"), med(large, "cp")) for kind in ("api", "cli")},
        "copy_minus_reference_over_cp": ratio(
            None
            if med(large, "api:copy") is None or med(large, "api:reference") is None
            else med(large, "api:copy") - med(large, "api:reference"),  # type: ignore[operator]
            med(large, "cp"),
        ),
    }


def _timed(fn: Callable[[], None]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def _parse_args() -> argparse.Namespace:
    """The command line (``--help`` is this module's docstring and the options below)."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", default="4GiB", help="rank0.engine size of the large engine (default 4GiB)")
    ap.add_argument("--small-size", default="4KiB", help="rank0.engine size of the small engine (default 4KiB)")
    ap.add_argument("--repeats", type=int, default=5, help="timed runs per method and size (default 5)")
    ap.add_argument("--modes", default=",".join(MODES), help="placement modes (api), default all four")
    ap.add_argument("--cli", default="copy", help="modes also timed through the repo-builder CLI ('' = none)")
    ap.add_argument("--no-cp", action="store_true", help="skip the cp baseline")
    ap.add_argument(
        "--tokenizer-dir",
        default=None,
        help=TOKENIZER_HELP,
    )
    ap.add_argument("--config-from", help="use this config.json (new or old layout) instead of the built-in one")
    ap.add_argument("--workdir", default=tempfile.gettempdir(), help="where engines and outputs go (same filesystem)")
    ap.add_argument(
        "--drop-caches",
        choices=("file", "global", "none"),
        default="file",
        help="evict the engine files' pages before each run (file, default), drop every cache (global, "
        "root only) or keep caches warm (none)",
    )
    ap.add_argument("--keep", action="store_true", help="keep the engine files afterwards")
    ap.add_argument("--json", help="write raw times and summaries here")
    return ap.parse_args()


def _page_cache_mode(requested: str) -> str:
    """``--drop-caches``, with ``global`` falling back to ``file`` (printed) where drop_caches is not writable."""
    drop = requested
    if drop == "global" and not can_drop_caches():
        print("# cannot write /proc/sys/vm/drop_caches (not root?): evicting the engine files only", flush=True)
        drop = "file"
    return drop


def _clear(out: Path) -> None:
    """Remove the render output ``out`` (a symlink, file or folder), if any."""
    if out.is_symlink() or out.is_file():
        out.unlink()
    elif out.exists():
        shutil.rmtree(out)


def _run_method(method: str, engine: Path, out: Path, tokenizer_dir: str, cli: str) -> float:
    """Seconds one placement of ``engine`` into ``out`` takes: ``cp`` (config.json and rank*.engine with cp),
    ``api:<mode>`` (render_repository) or ``cli:<mode>`` (the repo-builder CLI).

    Raises:
        subprocess.CalledProcessError: cp or the CLI failed.
    """
    from repo_builder.render import render_repository

    if method == "cp":
        out.mkdir()
        files = [str(engine / "config.json")] + [str(p) for p in sorted(engine.glob("rank*.engine"))]
        return _timed(lambda: subprocess.run(["cp", *files, str(out) + "/"], check=True))
    kind, mode = method.split(":")
    if kind == "api":
        return _timed(lambda: render_repository(engine, tokenizer_dir, out, engine_mode=mode))
    cmd = [
        cli,
        "render",
        "--engine-dir",
        str(engine),
        "--tokenizer-dir",
        tokenizer_dir,
        "-o",
        str(out),
        "--engine-mode",
        mode,
    ]
    return _timed(lambda: subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL))


def _time_methods(
    args: argparse.Namespace,
    labels: dict[str, int],
    small: str,
    config: dict,
    drop: str,
    methods: list[str],
    work: Path,
) -> dict[str, dict[str, list[float]]]:
    """Write an engine per size label (bytes) under ``work``, render the ``small`` label's once untimed, then
    time every method ``--repeats`` times per size (methods rotated per repeat, caches settled per ``drop``).
    Returns {size label: {method: [s]}}; ``work`` is deleted at the end unless ``--keep``."""
    from repo_builder.render import render_repository

    cli = str(Path(sys.executable).parent / "repo-builder")
    times: dict[str, dict[str, list[float]]] = {label: {} for label in labels}
    try:
        engines = {}
        for label, size in labels.items():
            t0 = time.perf_counter()
            engines[label] = make_engine(work / f"engine-{label.replace(' ', '')}", size, config)
            print(f"# wrote {label} engine in {time.perf_counter() - t0:.1f} s", flush=True)
        out = work / "out"
        # untimed warm-up: imports, tokenizer inspection caches, template loading
        render_repository(engines[small], args.tokenizer_dir, out, engine_mode="copy")
        _clear(out)
        for rep in range(args.repeats):
            for label in labels:
                for method in rotated(methods, rep):
                    _clear(out)
                    settle(drop, sorted(engines[label].iterdir()))
                    seconds = _run_method(method, engines[label], out, args.tokenizer_dir, cli)
                    times[label].setdefault(method, []).append(seconds)
                    print(f"rep {rep + 1}/{args.repeats}  {label:>8}  {method:<14} {seconds:8.3f} s", flush=True)
        _clear(out)
        os.sync()
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    return times


def _print_results(result: dict, times: dict[str, dict[str, list[float]]], labels: dict[str, int], large: int) -> None:
    """Print the markdown table (median, min-max seconds per method and size; large/small) and the ratios."""
    hdr = "| method | " + " | ".join(f"{lab} median (min-max) s" for lab in labels) + " | large/small |"
    print(hdr)
    print("|---|" + "---:|" * (len(labels) + 1))
    for method in sorted({m for per in times.values() for m in per}):
        cells = []
        for lab in labels:
            s = result["summary"][lab].get(method)
            cells.append(f"{fmt(s['median'])} ({fmt(s['min'])}-{fmt(s['max'])})" if s else "-")
        print(f"| {method} | " + " | ".join(cells) + f" | {fmt(result['large_over_small'][method], 2)} |")
    print(
        f"\ncopy / cp ({format_size(large)}): api {fmt(result['copy_over_cp']['api'], 3)}, "
        f"cli {fmt(result['copy_over_cp']['cli'], 3)}; (copy - reference) / cp "
        f"{fmt(result['copy_minus_reference_over_cp'], 3)}"
    )


def main() -> int:
    """Time every method, print the table and (``--json``) write the raw times; returns 0."""
    args = _parse_args()

    large, small = parse_size(args.size), parse_size(args.small_size)
    labels = {format_size(large): large, format_size(small): small}
    config = json.loads(Path(args.config_from).read_text()) if args.config_from else engine_config()
    modes = [m for m in args.modes.split(",") if m]
    cli_modes = [m for m in args.cli.split(",") if m]
    drop = _page_cache_mode(args.drop_caches)
    info = machine()
    info["page_cache"] = {
        "file": "engine files evicted before every run (sync; posix_fadvise DONTNEED)",
        "global": "dropped before every run (sync; echo 3 > /proc/sys/vm/drop_caches)",
        "none": "warm (not dropped); methods alternate",
    }[drop]
    print(
        f"# {info['date']}  {info['cpu']}  {info['cores']} cores  load {info['load_average_start']}  "
        f"source {info['source']}",
        flush=True,
    )
    print(f"# page cache: {info['page_cache']}", flush=True)
    work = Path(tempfile.mkdtemp(prefix="rb-bench-render-", dir=args.workdir))
    args.tokenizer_dir = tokenizer_dir_or_default(args.tokenizer_dir, work)
    methods = methods_for(modes, cli_modes, not args.no_cp)
    times = _time_methods(args, labels, format_size(small), config, drop, methods, work)
    info["load_average_end"] = load_average()

    result = analyse(times, format_size(large), format_size(small))
    print(f"\n# load average at end: {info['load_average_end']}")
    _print_results(result, times, labels, large)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(
            json.dumps({"machine": info, "args": vars(args), "sizes": labels, "times_s": times, **result}, indent=2)
            + "\n"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
