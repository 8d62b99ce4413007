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
from typing import Any, Sequence

import numpy as np

from .triton_io import RequestError

_ANCHOR = "\n"
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
        raise RequestError(field, f"element {word!r} looks like a token-id list but is not a non-empty "
                                  "list of integers", 'write token ids as "[13]" or "[29871, 13]"')
    bad = [v for v in value if not 0 <= v < vocab_size]
    if bad:
        raise RequestError(field, f"token ids {bad} in {word!r} are outside the vocabulary "
                                  f"[0, {vocab_size})")
    return [int(v) for v in value]


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
        if word == "":
            return []
        with self._lock:
            hit = self._cache.get(word)
            if hit is not None:
                self._cache.move_to_end(word)
                return hit
        if word in self._added:
            variants = [[int(self._added[word])]]
        else:
            variants = []
            glued = self._in_context(word)
            if glued is None:
                plain = self._plain(word)
                if plain:
                    variants.append(plain)
            else:
                variants.append(glued)
                if not word[0].isspace():
                    spaced = self._in_context(" " + word)
                    if spaced is not None and spaced not in variants:
                        variants.append(spaced)
        with self._lock:
            self._cache[word] = variants
            while len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        return variants

    def sequences(self, word: str, field: str) -> list[list[int]]:
        """Raw ids (JSON list syntax) or the text variants of one request element."""
        ids = parse_token_ids(word, self.vocab_size, field)
        if ids is not None:
            return [ids]
        return self.text_variants(word)

    def word_list(self, rows: Sequence[Sequence[str] | None], field: str,
                  extra_ids: Sequence[int] = ()) -> np.ndarray:
        """Build the ``[batch, 2, N]`` int32 ids/offsets tensor for a batch.

        Args:
            rows: per batch row the words (each element one word or phrase), or None for no words.
            field: the client-facing field name for errors (``stop_words`` or ``bad_words``).
            extra_ids: one-token sequences appended to every row (the ``stop_token_ids`` parameter).
        Returns:
            int32 array ``[batch, 2, N]`` (``N = 0`` when every row is empty).
        Raises:
            RequestError: an element that is a malformed token-id list or holds ids outside the vocabulary.
        """
        flat_rows: list[tuple[list[int], list[int]]] = []
        for words in rows:
            seqs: list[list[int]] = []
            for word in words or []:
                for seq in self.sequences(word, field):
                    if seq and seq not in seqs:
                        seqs.append(seq)
            for extra in extra_ids:
                if [int(extra)] not in seqs:
                    seqs.append([int(extra)])
            ids: list[int] = []
            offsets: list[int] = []
            for seq in seqs:
                ids.extend(seq)
                offsets.append(len(ids))
            flat_rows.append((ids, offsets))
        longest = max((len(ids) for ids, _ in flat_rows), default=0)
        if longest == 0:
            return np.zeros((len(flat_rows), 2, 0), dtype=np.int32)
        out = np.zeros((len(flat_rows), 2, longest), dtype=np.int32)
        out[:, 1, :] = -1
        for b, (ids, offsets) in enumerate(flat_rows):
            out[b, 0, :len(ids)] = ids
            out[b, 1, :len(offsets)] = offsets
        return out

    def embedding_bias(self, words_rows: Sequence[Sequence[str] | None] | None,
                       weights_rows: Sequence[Sequence[float] | None] | None, batch: int,
                       vocab_size: int | None = None) -> np.ndarray:
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
            raise RequestError(missing, "is required when the other embedding-bias input is given",
                               "send embedding_bias_words and embedding_bias_weights together")
        size = vocab_size or self.vocab_size
        bias = np.zeros((batch, size), dtype=np.float32)
        any_word = False
        for b in range(batch):
            words = list(words_rows[b] or []) if b < len(words_rows) else []
            weights = list(weights_rows[b] if weights_rows[b] is not None else []) if b < len(weights_rows) else []
            if len(words) != len(weights):
                raise RequestError("embedding_bias_words",
                                   f"has {len(words)} element(s) but embedding_bias_weights has "
                                   f"{len(weights)} in batch row {b}", "send one weight per word")
            for word, weight in zip(words, weights):
                ids = sorted({t for seq in self.sequences(word, "embedding_bias_words") for t in seq})
                for t in ids:
                    if t < size:
                        bias[b, t] += float(weight)
                        any_word = True
        if not any_word:
            return np.zeros((batch, 0), dtype=np.float32)
        return bias
