"""One word-list row of a request before it is encoded: the size limits (:data:`MAX_WORDS`,
:data:`MAX_WORD_BYTES`, :func:`check_word_row`) and raw token ids written as a JSON list (``"[13]"``,
:func:`parse_token_ids`). Used by :class:`.wordlists.WordEncoder`, which re-exports the names.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

from .triton_io import RequestError

#: Most elements one batch row of ``stop_words``/``bad_words``/``embedding_bias_words`` may hold.
MAX_WORDS = 65_536

#: Most UTF-8 bytes of text one batch row of those fields may hold (all elements together), 4 MiB.
MAX_WORD_BYTES = 4 * 1024 * 1024

_IDS_RE = re.compile(r"^\s*\[.*\]\s*$", re.S)


def parse_token_ids(word: str, vocab_size: int, field: str) -> list[int] | None:
    """Raw token ids when ``word`` is a JSON list of integers (``"[13]"``), else None (it is text).

    Raises:
        RequestError: a JSON list that is empty, holds non-integers, or ids outside ``[0, vocab_size)``.
    """
    if not _IDS_RE.match(word):
        return None
    try:
        value = json.loads(word)
    except ValueError:
        return None  # e.g. "[INST]": plain text that happens to use brackets
    if not isinstance(value, list):
        return None
    if not value or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        raise RequestError(
            field,
            f"element {word!r} looks like a token-id list but is not a non-empty list of integers",
            'write token ids as "[13]" or "[29871, 13]"',
        )
    bad = [v for v in value if not 0 <= v < vocab_size]
    if bad:
        raise RequestError(field, f"token ids {bad} in {word!r} are outside the vocabulary [0, {vocab_size})")
    return [int(v) for v in value]


def check_word_row(words: Sequence[str], field: str) -> None:
    """Refuse a word-list row over the documented size limits (:data:`MAX_WORDS` elements,
    :data:`MAX_WORD_BYTES` UTF-8 bytes in all), naming the field; the limits keep one request's
    encoding work bounded (docs/performance.md, "Word lists").

    Raises:
        RequestError: the row holds too many elements or too many bytes.
    """
    if len(words) > MAX_WORDS:
        raise RequestError(
            field,
            f"holds {len(words)} elements in one batch row; the limit is {MAX_WORDS}",
            "send fewer words (each element is one word or phrase)",
        )
    size = sum(map(len, words))  # characters <= bytes: cheap first test
    if size * 4 > MAX_WORD_BYTES:
        size = sum(len(w.encode("utf-8")) for w in words)
    if size > MAX_WORD_BYTES:
        raise RequestError(
            field,
            f"holds {size} bytes of text in one batch row; the limit is {MAX_WORD_BYTES} bytes",
            "send fewer or shorter words",
        )
