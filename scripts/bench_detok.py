#!/usr/bin/env python3
"""Benchmark the incremental detokenizer against decoding the whole sequence at every step.

For each tokenizer directory and each generated length (default 64, 1024, 8192 tokens), a token stream
is built from a fixed multilingual text (English, CJK, Cyrillic, emoji with ZWJ; so byte-fallback runs
occur in SentencePiece vocabularies), then fed one token per step to

* ``incremental``: ``repo_builder.runtime.detokenizer.IncrementalDetokenizer`` (bounded window), and
* ``full-decode``: ``tokenizer.decode(ids[:i])`` at every step i, the text diffed against the previous
  step (what a stateless "re-decode everything" postprocessing costs; its deltas are not even exact:
  a U+FFFD emitted for an incomplete character is never taken back, column ``exact``),

and reports tokens/s and the per-token cost in microseconds (CPU time of the process by default,
``--clock wall`` for wall time), plus ``decoded/tok``: tokens passed to ``decode`` per generated token,
a clock-free measure of the work. Short streams are repeated
until at least ``--min-tokens`` tokens were timed, so a 64-token stream is measured as 128 streams
rather than timed once; the best of ``--repeat`` such measurements counts (other processes on a
shared machine only ever make a run slower).
The incremental text must equal ``decode`` of the whole sequence (checked; the script stops otherwise).
Issue 5's goal: incremental per-token cost at 8192 within 1.3x of the cost at 64.

Usage::

    .venv/bin/python scripts/bench_detok.py /path/to/llama2_tokenizer /path/to/gpt2_tokenizer \\
        [--lengths 64 1024 8192] [--repeat 3] [--full-max 8192] [--min-tokens 8192] [--json out.json]

Not a test: it only measures and prints.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from repo_builder.runtime.detokenizer import DetokenizerFactory, IncrementalDetokenizer  # noqa: E402
from repo_builder.runtime.text import load_tokenizer  # noqa: E402

TEXT = (
    "Deep learning is a subset of machine learning that uses neural networks with many layers. "
    "你有点聪明，迭代的模型很好。 Привет, как дела? 🧘\u200d♀️ 👨\u200d👩\u200d👧\u200d👦 The end.\n"
)


def token_stream(tok, n: int) -> list[int]:
    base = tok.encode(TEXT, add_special_tokens=False)
    return (base * (n // len(base) + 1))[:n]


CLOCK = time.process_time  # CPU time of this process; --clock wall switches to time.perf_counter


def run_incremental(factory: DetokenizerFactory, ids: list[int]) -> tuple[float, str]:
    d = factory()
    parts = []
    t0 = CLOCK()
    for t in ids:
        parts.append(d.add((t,)))
    parts.append(d.flush())
    return CLOCK() - t0, "".join(parts)


def run_full(factory: DetokenizerFactory, ids: list[int]) -> tuple[float, str]:
    decode = factory.decode
    prev = ""
    parts = []
    t0 = CLOCK()
    for i in range(1, len(ids) + 1):
        text = decode(ids[:i])
        parts.append(text[len(prev) :])
        prev = text
    return CLOCK() - t0, "".join(parts)


def decoded_tokens_per_token(factory: DetokenizerFactory, ids: list[int]) -> float:
    """Work measure independent of the clock: tokens passed to decode per generated token."""
    count = [0]

    def counting(window):
        count[0] += len(window)
        return factory.decode(window)

    d = IncrementalDetokenizer(counting, cleanup=factory.cleanup)
    for t in ids:
        d.add((t,))
    return count[0] / len(ids)


def bench(tokenizer_dir: str, lengths: list[int], repeat: int, full_max: int, min_tokens: int) -> list[dict]:
    tok = load_tokenizer(tokenizer_dir)
    factory = DetokenizerFactory(tok, skip_special_tokens=True)
    rows = []
    for n in lengths:
        ids = token_stream(tok, n)
        reference = factory.decode(ids)
        for method, fn in (("incremental", run_incremental), ("full-decode", run_full)):
            if method == "full-decode" and n > full_max:
                continue
            streams = max(1, min_tokens // n) if method == "incremental" else 1
            best, exact = None, True
            for _ in range(repeat):
                seconds = 0.0
                for _ in range(streams):
                    s, text = fn(factory, ids)
                    seconds += s
                    exact = exact and text == reference
                    if not exact and method == "incremental":
                        raise SystemExit(f"{tokenizer_dir}: incremental text differs from decode at n={n}")
                best = seconds if best is None else min(best, seconds)
            timed = n * streams
            work = decoded_tokens_per_token(factory, ids) if method == "incremental" else (n + 1) / 2
            rows.append(
                {
                    "tokenizer": Path(tokenizer_dir).name,
                    "method": method,
                    "tokens": n,
                    "decoded_tokens_per_token": work,
                    "streams_timed": streams,
                    "seconds": best,
                    "tokens_per_s": timed / best,
                    "us_per_token": best / timed * 1e6,
                    "text_equals_decode": exact,
                }
            )
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("tokenizer_dirs", nargs="+", help="tokenizer directories (e.g. /path/to/llama2_tokenizer)")
    ap.add_argument("--lengths", type=int, nargs="+", default=[64, 1024, 8192], help="generated tokens per stream")
    ap.add_argument("--repeat", type=int, default=3, help="runs per measurement; the fastest counts")
    ap.add_argument("--full-max", type=int, default=8192, help="skip full-decode above this many tokens")
    ap.add_argument(
        "--min-tokens",
        type=int,
        default=8192,
        help="time at least this many tokens per incremental measurement (short streams repeat)",
    )
    ap.add_argument(
        "--clock",
        choices=["cpu", "wall"],
        default="cpu",
        help="cpu: process CPU time (robust on a shared machine); wall: perf_counter",
    )
    ap.add_argument("--json", type=Path, help="also write the rows as JSON to this file")
    args = ap.parse_args(argv)
    global CLOCK
    CLOCK = time.process_time if args.clock == "cpu" else time.perf_counter

    rows = []
    for d in args.tokenizer_dirs:
        rows.extend(bench(d, args.lengths, args.repeat, args.full_max, args.min_tokens))

    print(f"clock: {args.clock}")
    print(
        f"{'tokenizer':<22} {'method':<12} {'tokens':>7} {'tokens/s':>12} {'us/token':>10} {'vs first':>9} "
        f"{'decoded/tok':>11} exact"
    )
    first: dict[tuple[str, str], float] = {}
    for r in rows:
        key = (r["tokenizer"], r["method"])
        first.setdefault(key, r["us_per_token"])
        r["ratio_to_shortest"] = r["us_per_token"] / first[key]
        print(
            f"{r['tokenizer']:<22} {r['method']:<12} {r['tokens']:>7} {r['tokens_per_s']:>12.0f} "
            f"{r['us_per_token']:>10.1f} {r['ratio_to_shortest']:>8.2f}x {r['decoded_tokens_per_token']:>11.1f} "
            f"{r['text_equals_decode']}"
        )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
