"""Wall and CPU time of word lists and stop strings with many words (docs/performance.md, "Word lists").

    python scripts/bench_wordlists.py --tokenizer DIR [--words 1000,10000] [--reps 5] [--baseline RUNTIME_DIR]

Per word count, the median, minimum and maximum over ``--reps`` of: preprocessing's
``WordEncoder.word_list`` for a list of words no earlier repetition used (every word is encoded: never seen
by the encoder's caches nor by the Rust tokenizer's), the same list sent again to that encoder (the row
cache: what a client pays that sends the same list with every request), and a 256-token stream through
``StopStringMatcher`` with that many stop strings (none of which matches). Wall time (``time.perf_counter``:
what a request waiting behind the call sees) and CPU seconds of this process (``time.process_time``: all
threads, including the tokenizer's Rust threads, so CPU above wall means the encode ran on several cores).
On a loaded machine the wall time follows the other jobs; the load average is printed before and after.

``--baseline`` names the ``runtime`` package folder of older code (``git archive COMMIT repo_builder/runtime
| tar -x -C /tmp/base`` gives ``/tmp/base/repo_builder/runtime``); it is imported beside the current one and
every repetition measures both, in alternating order, so both see the same load.
Through Triton: ``scripts/bench_wordlists_server.py``.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

Sample = tuple[float, float]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--words", default="1000,10000")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--baseline", help="runtime package folder of older code, measured beside this one")
    args = ap.parse_args()
    from repo_builder.runtime.text import load_tokenizer

    versions = {"current": _runtime("repo_builder.runtime")}
    if args.baseline:
        versions["baseline"] = _runtime(_import_folder(Path(args.baseline), "baseline_runtime"))
    tok = load_tokenizer(args.tokenizer)
    for encoder, _ in versions.values():
        encoder(tok).word_list([[f"warm-up {i}" for i in range(100)]], "stop_words")  # rayon pool, imports
    print(f"load average {_load()}, TOKENIZERS_PARALLELISM={os.environ.get('TOKENIZERS_PARALLELISM')}")
    used = 0  # words are numbered on: every list is new to the tokenizer (and to its BPE cache)
    for n in (int(x) for x in args.words.split(",")):
        times: dict[str, list[list[Sample]]] = {name: [[], [], []] for name in versions}
        joined: dict[str, Any] = {}
        for rep in range(args.reps):
            order = list(versions.items())
            for name, (encoder, matcher) in order[rep % 2 :] + order[: rep % 2]:
                words = [f"stopword{i} phrase" for i in range(used, used + n)]
                used += n
                enc = encoder(tok)
                joined[name] = getattr(enc, "joined", None)
                enc_t, again_t, match_t = times[name]
                enc_t.append(_timed(enc.word_list, [words], "stop_words"))
                again_t.append(_timed(enc.word_list, [list(words)], "stop_words"))
                match_t.append(_timed(_stream, matcher, words))
        for name, (enc_t, again_t, match_t) in times.items():
            print(
                f"{n:>6} words, {name} (joined encode: {joined[name]}): word_list {_stats(enc_t)}; "
                f"same list again {_stats(again_t)}; 256-token stop-string stream {_stats(match_t)}"
            )
    print(f"load average {_load()}")


def _import_folder(folder: Path, name: str) -> str:
    """Import the package in ``folder`` under the top-level ``name`` (its imports are relative)."""
    spec = importlib.util.spec_from_file_location(
        name, folder / "__init__.py", submodule_search_locations=[str(folder)]
    )
    if spec is None or spec.loader is None:
        raise SystemExit(f"--baseline {folder}: no package there")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return name


def _runtime(package: str) -> tuple[Any, Any]:
    """``WordEncoder`` and ``StopStringMatcher`` of one runtime package."""
    wordlists = importlib.import_module(f"{package}.wordlists")
    stopstrings = importlib.import_module(f"{package}.stopstrings")
    return wordlists.WordEncoder, stopstrings.StopStringMatcher


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def _stream(matcher_class: Any, words: list[str]) -> None:
    """A 256-token stream through a stop-string matcher for ``words``."""
    m = matcher_class(words)
    for i in range(256):
        m.feed(f" tok{i}")
    m.flush()


def _timed(fn: Callable[..., Any], *args: Any) -> Sample:
    """Wall and process-CPU seconds of one call ``fn(*args)``."""
    wall, cpu = time.perf_counter(), time.process_time()
    fn(*args)
    return time.perf_counter() - wall, time.process_time() - cpu


def _stats(samples: list[Sample]) -> str:
    """``wall median (min-max) ms, CPU median (min-max) ms``."""
    parts = []
    for name, values in (("wall", [s[0] * 1e3 for s in samples]), ("CPU", [s[1] * 1e3 for s in samples])):
        parts.append(f"{name} {statistics.median(values):.1f} ms ({min(values):.1f}-{max(values):.1f})")
    return ", ".join(parts)


if __name__ == "__main__":
    main()
