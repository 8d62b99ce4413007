"""Process CPU time of word lists and stop strings with many words (docs/performance.md, "Word lists").

    python scripts/bench_wordlists.py --tokenizer DIR [--words 1000,10000] [--reps 5]

Per word count, the median, minimum and maximum over ``--reps`` of: preprocessing's
``WordEncoder.word_list`` with a fresh encoder (every word is encoded), the same list sent again to that
encoder (the row cache: what a client pays that sends the same list with every request), and a 256-token
stream through ``StopStringMatcher`` with that many stop strings (none of which matches). CPU seconds of
this process (``time.process_time``), which includes the tokenizer's Rust threads; wall time on a loaded
machine is not meaningful. Through Triton: ``scripts/bench_wordlists_server.py``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--words", default="1000,10000")
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    from repo_builder.runtime.stopstrings import StopStringMatcher
    from repo_builder.runtime.text import load_tokenizer
    from repo_builder.runtime.wordlists import WordEncoder

    tok = load_tokenizer(args.tokenizer)
    print(f"load average {os.getloadavg()[0]:.1f}")
    for n in (int(x) for x in args.words.split(",")):
        words = [f"stopword{i} phrase" for i in range(n)]
        enc_t, again_t, match_t = [], [], []
        for _ in range(args.reps):
            enc = WordEncoder(tok)
            t = time.process_time()
            enc.word_list([words], "stop_words")
            enc_t.append(time.process_time() - t)
            t = time.process_time()
            enc.word_list([list(words)], "stop_words")
            again_t.append(time.process_time() - t)
            t = time.process_time()
            m = StopStringMatcher(words)
            for i in range(256):
                m.feed(f" tok{i}")
            m.flush()
            match_t.append(time.process_time() - t)
        print(
            f"{n:>6} words (joined encode: {getattr(enc, 'joined', None)}): word_list {_stats(enc_t)}; same list again "
            f"{_stats(again_t)}; 256-token stop-string stream {_stats(match_t)}"
        )


def _stats(seconds: list[float]) -> str:
    """``median (min-max) ms`` of CPU seconds."""
    ms = [s * 1e3 for s in seconds]
    return f"median {statistics.median(ms):.1f} ms ({min(ms):.1f}-{max(ms):.1f})"


if __name__ == "__main__":
    main()
