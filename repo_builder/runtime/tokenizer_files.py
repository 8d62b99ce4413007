"""The files that make a folder a Hugging Face tokenizer directory: the one list every part reads.

Vendored into the Python models (standard library only). ``repo_builder.tokenizer`` (render-time inspection),
``repo_builder.validate`` (the repository lint) and :func:`.text.load_tokenizer` (the served models) all ask
:func:`has_tokenizer_files`, so a directory one of them accepts, the others accept too.

Sources (transformers 5.x ``from_pretrained`` file names): ``tokenizer.json`` (a ``tokenizers`` export),
``tokenizer.model`` / ``spiece.model`` (SentencePiece, or Llama 3's tiktoken under that name),
``vocab.json`` + ``merges.txt`` (byte-level BPE such as GPT-2, Qwen2), ``vocab.txt`` (WordPiece),
``*.tiktoken`` (Qwen v1), and ``tokenizer_config.json``, which may name any of them.
"""

from __future__ import annotations

from pathlib import Path

#: File names one of which a tokenizer directory holds (besides ``*.tiktoken``).
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer.model",
    "tokenizer_config.json",
    "vocab.json",
    "merges.txt",
    "spiece.model",
    "vocab.txt",
)
#: Glob for tiktoken BPE files (Qwen v1's ``qwen.tiktoken``).
TIKTOKEN_GLOB = "*.tiktoken"


def has_tokenizer_files(directory: str | Path) -> bool:
    """True when ``directory`` holds at least one tokenizer file (see :data:`TOKENIZER_FILES`)."""
    d = Path(directory)
    return any((d / name).is_file() for name in TOKENIZER_FILES) or any(p.is_file() for p in d.glob(TIKTOKEN_GLOB))


def describe_tokenizer_files() -> str:
    """The list for error messages: ``tokenizer.json, tokenizer.model, ... or *.tiktoken``."""
    return ", ".join(TOKENIZER_FILES) + " or " + TIKTOKEN_GLOB
