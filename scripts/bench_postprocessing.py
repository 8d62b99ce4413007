#!/usr/bin/env python3
"""CPU per streamed token of the postprocessing logic alone (``runtime.postprocessing.Postprocessor``),
this checkout's against an older one's, interleaved in one process (issue 27).

Each side's ``repo_builder/runtime`` package (self-contained: it is what render vendors) is copied into a
temporary folder as a top-level package (``rt_a`` = ``--before``, ``rt_b`` = this checkout), so both load
in one interpreter with the same tokenizer object. One repetition streams one 256-token request through
each side, one token per ``process`` call, as the ensemble's postprocessing sees it (``TOKENS_BATCH``
``[1, 1, 1]``, ``SEQUENCE_LENGTH`` ``[1, 1]``, the engine's ``ARRIVAL_TIME_NS``, a fresh request id per
repetition); the order of the two sides alternates per repetition and their texts must be equal. Measured:
``time.process_time`` per token (this process's CPU, so other load shows up less than in wall time; Triton's
own per-response work is not included: ``bench_server_cpu.py`` and ``bench_vs_upstream.py`` measure that).

Usage::

    git archive COMMIT repo_builder | tar -x -C /tmp/before
    .venv/bin/python scripts/bench_postprocessing.py --before /tmp/before [--reps 41] [--tokenizer DIR]
"""

from __future__ import annotations

import argparse
import importlib
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

TEXT = "The quick brown fox jumps over the lazy dog. Ünïcødé 迭代 😀 " * 40


def _config(tokenizer_dir: Path) -> dict[str, Any]:
    """The postprocessing model config of a default trtllm-1.2 streaming render (inputs and parameters)."""
    from repo_builder.profile.contract import load_contract

    contract = load_contract("trtllm-1.2")
    step = contract.models["postprocessing"]
    inputs = [{"name": t.name, "data_type": t.data_type, "dims": [str(d) for d in t.dims]} for t in step.inputs]
    params = {"tokenizer_dir": str(tokenizer_dir), "skip_special_tokens": "true", "decoupled_mode": "true"}
    return {
        "name": "postprocessing",
        "backend": "python",
        "max_batch_size": 64,
        "input": inputs,
        "parameters": {k: {"string_value": v} for k, v in params.items()},
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--before", type=Path, required=True, help="folder holding the older repo_builder package")
    ap.add_argument("--reps", type=int, default=41)
    ap.add_argument("--tokenizer", type=Path, help="tokenizer folder (default: packaged Mistral v1)")
    args = ap.parse_args()

    from repo_builder.testing import packaged_tokenizer
    from repo_builder.tokenizer import load_tokenizer

    work = Path(tempfile.mkdtemp(prefix="rb-post-ab-"))
    try:
        tok_dir = args.tokenizer or packaged_tokenizer("mistral-v1", work / "tokenizer")
        shutil.copytree(args.before / "repo_builder" / "runtime", work / "rt_a")
        shutil.copytree(ROOT / "repo_builder" / "runtime", work / "rt_b")
        sys.path.insert(0, str(work))
        tokenizer = load_tokenizer(tok_dir)
        config = _config(tok_dir)
        sides = {v: importlib.import_module(f"rt_{v}.postprocessing").Postprocessor(config, tokenizer) for v in "ab"}
        ids = tokenizer.encode(TEXT, add_special_tokens=False)[:256]
        feeds = [
            {
                "TOKENS_BATCH": np.array([[[i]]], np.int32),
                "SEQUENCE_LENGTH": np.array([[1]], np.int32),
                "ARRIVAL_TIME_NS": np.array([[777]], np.int64),
            }
            for i in ids
        ]

        def stream(post: Any, request_id: str) -> tuple[float, bytes]:
            out = []
            start = time.process_time()
            for feed in feeds:
                out.append(post.process(feed, request_id, 0)["OUTPUT"][0])
            return (time.process_time() - start) / len(feeds) * 1e6, b"".join(out)

        per_token: dict[str, list[float]] = {"a": [], "b": []}
        for rep in range(args.reps):
            texts = {}
            for v in ("a", "b") if rep % 2 else ("b", "a"):
                us, texts[v] = stream(sides[v], f"req-{rep}")
                per_token[v].append(us)
            if texts["a"] != texts["b"]:
                raise SystemExit(f"repetition {rep}: the two sides' texts differ")
        print(f"postprocessing CPU per streamed token, {args.reps} requests of {len(ids)} tokens, texts equal")
        for v, label in (("a", f"before ({args.before})"), ("b", "this checkout")):
            xs = per_token[v]
            print(f"  {label}: median {statistics.median(xs):.1f} us (min {min(xs):.1f}, max {max(xs):.1f})")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
