"""Tokenizers on the client side: loading a local Hugging Face tokenizer and counting a text's tokens."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..errors import ClientError


def load_tokenizer(tokenizer_dir: str) -> Any:
    """Load the Hugging Face tokenizer in ``tokenizer_dir`` (local files only).

    Raises:
        ClientError: the tokenizer cannot be loaded (key ``--tokenizer-dir``).
    """
    try:
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(str(tokenizer_dir), local_files_only=True)
    except Exception as exc:  # transformers raises many types (OSError, ValueError, ...)
        raise ClientError(
            f"cannot load a tokenizer from {tokenizer_dir}: {exc}",
            key="--tokenizer-dir",
            hint="pass a local Hugging Face tokenizer directory",
        ) from None


def token_counter(tokenizer: Any) -> Callable[[str], int]:
    """A function counting the tokens of a text (``add_special_tokens=False``: only the text's own tokens).

    Args:
        tokenizer: a loaded tokenizer, or a tokenizer directory (loaded with :func:`load_tokenizer`).
    """
    tok = (
        load_tokenizer(tokenizer)
        if isinstance(tokenizer, (str, bytes)) or hasattr(tokenizer, "__fspath__")
        else tokenizer
    )

    def count(text: str) -> int:
        return len(tok.encode(text, add_special_tokens=False)) if text else 0

    return count
