#!/usr/bin/env python3
"""Write a random-weight tiny LLaMA checkpoint with a real tokenizer (see repo_builder.testing)."""

import argparse
import tempfile
from pathlib import Path

from repo_builder.testing import make_tiny_llama, packaged_tokenizer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("out_dir", type=Path, help="where to write the checkpoint")
    parser.add_argument(
        "--tokenizer-dir",
        type=Path,
        default=None,
        help="tokenizer directory (default: Mistral v1 SentencePiece from mistral-common, "
        "with an instruction chat template)",
    )
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tok = args.tokenizer_dir or packaged_tokenizer("mistral-v1-instruct", Path(tmp) / "tok")
        make_tiny_llama(args.out_dir, tok, seed=args.seed)
    print(args.out_dir)


if __name__ == "__main__":
    main()
