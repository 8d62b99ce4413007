"""Stop/bad word lists and embedding bias for the tensorrt_llm engine.

Layout (TensorRT-LLM ``stop_words_list`` / ``bad_words_list``, TYPE_INT32 ``[2, -1]`` per request, so
``[batch, 2, N]`` for a batch): row 0 holds the token ids of all sequences of one batch row
concatenated, padded with 0; row 1 holds the cumulative *end* offsets of the sequences, padded with -1;
``N = max(1, longest row)``. No word at all in any row gives ``[batch, 2, 0]`` (what upstream sends for
a missing input). Facts: upstream ``_to_word_list_format`` at backend commit c2e65b8, see
../shared/docs/upstream-reference.md §5.1.

Each element of the request's TYPE_STRING ``[-1]`` tensor is one word or phrase; it is never split on
commas. An element that is a JSON list of integers (``"[13]"``, ``"[29871, 13]"``) is taken as raw
token ids, used as given (ids must lie in ``[0, len(tokenizer))``). Any other text is encoded like this:

* a text equal to an added/special token (``"</s>"``, ``"<|im_end|>"``) is that token's id alone (B15:
  ``"</s>"`` with LLaMA -> ids ``[2]``, offsets ``[1]``);
* otherwise the word is encoded *in context*, after an anchor ``"\\n"``, and the anchor's ids are
  removed: no BOS (B15), no SentencePiece dummy-prefix ``▁`` (B16: ``"\\n"`` with LLaMA -> ``[13]``,
  never ``[29871, 13]``). Two variants are added when they differ: the word glued to the previous text
  (``"Hello"``) and the word after a space (``" Hello"``: GPT-2 ``Ġ``, SentencePiece ``▁``), so a stop
  word matches with or without a space before it. A word that itself starts with whitespace gets only
  the first variant. If the tokenizer merges the anchor with the word, the plain encoding without
  special tokens is used (with a lone leading dummy-prefix token removed).

The request's further end-of-sequence ids (the ``stop_token_ids`` parameter) are appended to every
stop list as one-token sequences.
"""

from __future__ import annotations

import json
import re
import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import numpy as np

from .triton_io import RequestError

_ANCHOR = "\n"

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
    size = sum(len(w) for w in words)  # characters <= bytes: cheap first test
    if size * 4 > MAX_WORD_BYTES:
        size = sum(len(w.encode("utf-8")) for w in words)
    if size > MAX_WORD_BYTES:
        raise RequestError(
            field,
            f"holds {size} bytes of text in one batch row; the limit is {MAX_WORD_BYTES} bytes",
            "send fewer or shorter words",
        )


class WordEncoder:
    """Encodes stop/bad words and embedding-bias words with one tokenizer (results cached, bounded).

    Args:
        tokenizer: a Hugging Face tokenizer (``encode``, ``decode``, ``get_added_vocab``, ``len``).
        cache_size: number of distinct words whose encodings are kept.
    """

    def __init__(self, tokenizer: Any, cache_size: int = 4096) -> None:
        self.tokenizer = tokenizer
        self.vocab_size = len(tokenizer)
        try:
            self._added = dict(tokenizer.get_added_vocab())
        except Exception:
            self._added = {}
        self._anchor_ids = self._enc(_ANCHOR)
        self._cache: OrderedDict[str, list[list[int]]] = OrderedDict()
        self._cache_size = cache_size
        self._lock = threading.Lock()

    def _enc(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def _in_context(self, text: str) -> list[int] | None:
        ids = self._enc(_ANCHOR + text)
        n = len(self._anchor_ids)
        if n and ids[:n] == self._anchor_ids and len(ids) > n:
            return ids[n:]
        return None

    def _plain(self, word: str) -> list[int]:
        ids = self._enc(word)
        # Drop a lone leading dummy-prefix token ("▁" = 29871 in LLaMA) that does not change the text.
        if len(ids) > 1:
            dec = self.tokenizer.decode
            if dec([ids[0]]).strip() == "" and dec(ids[1:]) == dec(ids):
                ids = ids[1:]
        return ids

    def text_variants(self, word: str) -> list[list[int]]:
        """Token-id sequences for the text ``word`` (see module docstring); ``[]`` for an empty word."""
        return self.text_variants_many([word])[0]

    def _enc_many(self, texts: list[str]) -> list[list[int]]:
        """``encode(t, add_special_tokens=False)`` for every text, in one batched call on a fast tokenizer
        (the Rust ``encode_batch``: one Python round trip for thousands of words)."""
        if not texts:
            return []
        is_fast = getattr(self.tokenizer, "is_fast", False)
        backend = getattr(self.tokenizer, "backend_tokenizer", None) if is_fast else None
        if backend is None or len(texts) < 8:
            return [self._enc(t) for t in texts]
        # One ordinary encode first: it puts the Rust tokenizer in the state encode() uses (no truncation or
        # padding, the tokenizer's split_special_tokens); then the batch skips transformers' per-encoding
        # conversion (offsets, masks), which costs more than the encoding itself.
        first = self._enc(texts[0])
        batch = getattr(backend, "encode_batch_fast", None) or backend.encode_batch
        return [first] + [enc.ids for enc in batch(texts[1:], add_special_tokens=False)]

    def text_variants_many(self, words: Sequence[str]) -> list[list[list[int]]]:
        """:meth:`text_variants` of every word, cost linear in the number of words: cache misses are
        encoded in one batched tokenizer call; the result list is parallel to ``words``."""
        results: list[list[list[int]] | None] = [None] * len(words)
        missing: dict[str, list[int]] = {}  # word -> positions in ``words``
        with self._lock:
            for i, word in enumerate(words):
                if word == "":
                    results[i] = []
                    continue
                hit = self._cache.get(word)
                if hit is not None:
                    self._cache.move_to_end(word)
                    results[i] = hit
                else:
                    missing.setdefault(word, []).append(i)
        todo = [w for w in missing if w not in self._added]
        spaced_words = [w for w in todo if not w[0].isspace()]
        encoded = self._enc_many([_ANCHOR + w for w in todo] + [_ANCHOR + " " + w for w in spaced_words])
        glued_ids = dict(zip(todo, encoded[: len(todo)]))
        spaced_ids = dict(zip(spaced_words, encoded[len(todo) :]))
        n = len(self._anchor_ids)

        def strip_anchor(ids: list[int]) -> list[int] | None:
            if n and ids[:n] == self._anchor_ids and len(ids) > n:
                return ids[n:]
            return None

        fresh: dict[str, list[list[int]]] = {}
        for word in missing:
            if word in self._added:
                variants = [[int(self._added[word])]]
            else:
                variants = []
                glued = strip_anchor(glued_ids[word])
                if glued is None:
                    plain = self._plain(word)
                    if plain:
                        variants.append(plain)
                else:
                    variants.append(glued)
                    if word in spaced_ids:
                        spaced = strip_anchor(spaced_ids[word])
                        if spaced is not None and spaced != glued:
                            variants.append(spaced)
            fresh[word] = variants
            for i in missing[word]:
                results[i] = variants
        if fresh:
            with self._lock:
                for word, variants in fresh.items():
                    self._cache[word] = variants
                while len(self._cache) > self._cache_size:
                    self._cache.popitem(last=False)
        return results  # type: ignore[return-value]

    def sequences(self, word: str, field: str) -> list[list[int]]:
        """Raw ids (JSON list syntax) or the text variants of one request element."""
        return self.sequences_many([word], field)[0]

    def sequences_many(self, words: Sequence[str], field: str) -> list[list[list[int]]]:
        """:meth:`sequences` of every element, text variants encoded in one batch (linear cost)."""
        out: list[list[list[int]] | None] = [None] * len(words)
        text_pos: list[int] = []
        for i, word in enumerate(words):
            ids = parse_token_ids(word, self.vocab_size, field)
            if ids is not None:
                out[i] = [ids]
            else:
                text_pos.append(i)
        for i, variants in zip(text_pos, self.text_variants_many([words[i] for i in text_pos])):
            out[i] = variants
        return out  # type: ignore[return-value]

    def word_list(self, rows: Sequence[Sequence[str] | None], field: str, extra_ids: Sequence[int] = ()) -> np.ndarray:
        """Build the ``[batch, 2, N]`` int32 ids/offsets tensor for a batch.

        Cost is linear in the number of words (batched encoding, set-based de-duplication that keeps
        the first occurrence's order); see docs/performance.md for measured times.

        Args:
            rows: per batch row the words (each element one word or phrase), or None for no words.
            field: the client-facing field name for errors (``stop_words`` or ``bad_words``).
            extra_ids: one-token sequences appended to every row (the ``stop_token_ids`` parameter).
        Returns:
            int32 array ``[batch, 2, N]`` (``N = 0`` when every row is empty).
        Raises:
            RequestError: an element that is a malformed token-id list or holds ids outside the vocabulary,
                or a row over :data:`MAX_WORDS` elements / :data:`MAX_WORD_BYTES` bytes of text.
        """
        flat_rows: list[tuple[list[int], list[int]]] = []
        for words in rows:
            words = list(words or [])
            check_word_row(words, field)
            seen: set[tuple[int, ...]] = set()
            ids: list[int] = []
            offsets: list[int] = []

            def add(
                seq: Sequence[int],
                seen: set[tuple[int, ...]] = seen,
                ids: list[int] = ids,
                offsets: list[int] = offsets,
            ) -> None:
                key = tuple(seq)
                if key and key not in seen:
                    seen.add(key)
                    ids.extend(key)
                    offsets.append(len(ids))

            for variants in self.sequences_many(words, field):
                for seq in variants:
                    add(seq)
            for extra in extra_ids:
                add([int(extra)])
            flat_rows.append((ids, offsets))
        longest = max((len(ids) for ids, _ in flat_rows), default=0)
        if longest == 0:
            return np.zeros((len(flat_rows), 2, 0), dtype=np.int32)
        out = np.zeros((len(flat_rows), 2, longest), dtype=np.int32)
        out[:, 1, :] = -1
        for b, (ids, offsets) in enumerate(flat_rows):
            out[b, 0, : len(ids)] = ids
            out[b, 1, : len(offsets)] = offsets
        return out

    def embedding_bias(
        self,
        words_rows: Sequence[Sequence[str] | None] | None,
        weights_rows: Sequence[Sequence[float] | None] | None,
        batch: int,
        vocab_size: int | None = None,
    ) -> np.ndarray:
        """Build the ``[batch, vocab]`` float32 embedding bias (``[batch, 0]`` when nothing is biased).

        Every token id of every variant of a word gets the word's weight added once (words are encoded
        without special tokens: upstream also biased BOS, see upstream-reference §5.1).

        Args:
            words_rows / weights_rows: per batch row the words and their weights (same lengths).
            batch: number of rows.
            vocab_size: length of the bias vector (default ``len(tokenizer)``).
        Raises:
            RequestError: only one of the two inputs given, or their lengths differ in a row.
        """
        if not words_rows and not weights_rows:
            return np.zeros((batch, 0), dtype=np.float32)
        if words_rows is None or weights_rows is None:
            missing = "embedding_bias_weights" if weights_rows is None else "embedding_bias_words"
            raise RequestError(
                missing,
                "is required when the other embedding-bias input is given",
                "send embedding_bias_words and embedding_bias_weights together",
            )
        size = vocab_size or self.vocab_size
        bias = np.zeros((batch, size), dtype=np.float32)
        any_word = False
        for b in range(batch):
            words = list(words_rows[b] or []) if b < len(words_rows) else []
            weights_row = weights_rows[b] if b < len(weights_rows) else None
            weights = list(weights_row) if weights_row is not None else []
            if len(words) != len(weights):
                raise RequestError(
                    "embedding_bias_words",
                    f"has {len(words)} element(s) but embedding_bias_weights has {len(weights)} in batch row {b}",
                    "send one weight per word",
                )
            check_word_row(words, "embedding_bias_words")
            for weight, variants in zip(weights, self.sequences_many(words, "embedding_bias_words")):
                ids = sorted({t for seq in variants for t in seq})
                for t in ids:
                    if t < size:
                        bias[b, t] += float(weight)
                        any_word = True
        if not any_word:
            return np.zeros((batch, 0), dtype=np.float32)
        return bias
