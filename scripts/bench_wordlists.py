"""Process CPU time of word lists and stop strings with many words (docs/performance.md, "Word lists").

    python scripts/bench_wordlists.py --tokenizer DIR [--words 1000,10000] [--reps 5]

Per word count, the minimum and median over ``--reps`` of: preprocessing's ``WordEncoder.word_list``
(fresh cache, so every word is encoded), and a 256-token stream through ``StopStringMatcher`` with that many
stop strings (none of which matches). CPU seconds of this process (``time.process_time``), which includes
the tokenizer's Rust threads; wall time on a loaded machine is not meaningful.
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
        enc_t, match_t = [], []
        for _ in range(args.reps):
            enc = WordEncoder(tok, cache_size=0)
            t = time.process_time()
            enc.word_list([words], "stop_words")
            enc_t.append(time.process_time() - t)
            t = time.process_time()
            m = StopStringMatcher(words)
            for i in range(256):
                m.feed(f" tok{i}")
            m.flush()
            match_t.append(time.process_time() - t)
        print(
            f"{n:>6} words: word_list min {min(enc_t) * 1e3:.1f} ms median {statistics.median(enc_t) * 1e3:.1f} ms;"
            f" 256-token stop-string stream min {min(match_t) * 1e3:.1f} ms median "
            f"{statistics.median(match_t) * 1e3:.1f} ms"
        )


if __name__ == "__main__":
    main()
