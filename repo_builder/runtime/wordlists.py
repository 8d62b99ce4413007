"""Stop/bad word lists and embedding bias for the tensorrt_llm engine.

Layout (TensorRT-LLM ``stop_words_list`` / ``bad_words_list``, TYPE_INT32 ``[2, -1]`` per request, so
``[batch, 2, N]`` for a batch): row 0 holds the token ids of all sequences of one batch row
concatenated, padded with 0; row 1 holds the cumulative *end* offsets of the sequences, padded with -1;
``N = max(1, longest row)``. No word at all in any row gives ``[batch, 2, 0]`` (what upstream sends for
a missing input). Facts: upstream ``_to_word_list_format`` (triton-inference-server/tensorrtllm_backend
``all_models/inflight_batcher_llm/preprocessing/1/model.py`` at commit c2e65b8).

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

Cost (docs/performance.md §6): linear in the number of words. With a fast tokenizer the texts of one request
are encoded in few Rust calls: up to :data:`JOIN_SEGMENTS` anchored texts are joined into one text, each
behind a special token (the EOS text), and the ids are split at that token's id. Added tokens are cut out of
the text before normalization and pre-tokenization, so every segment is encoded on its own; the only
difference to one ``encode`` per text is the position (a SentencePiece ``Metaspace`` with
``prepend_scheme: first`` adds its ``▁`` to the first segment only), which the anchor absorbs: the ids after
the anchor are the same. :class:`WordEncoder` checks this on probe texts when it is built and otherwise
encodes one text per word (``encode_batch_fast``). The Rust tokenizer encodes the texts of one call on all
cores (its rayon pool; ``TOKENIZERS_PARALLELISM`` unset or true). On the Python side a token-id sequence is a
string of code points (id ``i`` is ``chr(i)``, :func:`ids_to_codes`): the joined ids are split, the sequences
de-duplicated and concatenated by C string and dict operations, with no tuple per sequence. Results are
cached per word (:data:`WORD_CACHE_SIZE`) and per whole row (:data:`ROW_CACHE_WORDS` words in all), so a
client that sends the same long list with every request pays the encoding once.
"""

from __future__ import annotations

import sys
import threading
from array import array
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from itertools import chain, repeat
from typing import Any

import numpy as np

from .triton_io import RequestError
from .word_indexes import (  # noqa: F401  (re-exported: moved from this module)
    BadWordIndex,
    StopWordIndex,
)
from .word_rows import (  # noqa: F401  (re-exported: moved from this module)
    MAX_WORD_BYTES,
    MAX_WORDS,
    check_word_row,
    parse_token_ids,
)

_ANCHOR = "\n"

#: Anchored texts joined into one text for one Rust encode (see the module docstring).
JOIN_SEGMENTS = 128
#: Distinct words whose encodings a :class:`WordEncoder` keeps (least recently used dropped first).
WORD_CACHE_SIZE = 16_384
#: Words (all rows together) of the whole-row results a :class:`WordEncoder` keeps.
ROW_CACHE_WORDS = MAX_WORDS
#: Texts after the anchor on which the joined encoding must equal one encode per text to be used.
_PROBE_BODIES = (
    "Hello",
    " Hello",
    "Hello world",
    "\n",
    " ",
    "  x  ",
    "ab  ",
    "a, b",
    "12345",
    "'s",
    "don't",
    "\t tab",
    "x\n",
    "\u2581",
    "\u65e5\u672c\u8a9e",
    "\U0001f642 emoji",
    "na\u00efve",
    "[INST]",
    "stopword1 phrase",
    "\u0130",
)


#: The token-id sequences of one word as :meth:`WordEncoder.sequences_many` returns them: a tuple of tuples.
Sequences = tuple[tuple[int, ...], ...]
#: The same sequences as code strings (:func:`ids_to_codes`), the form the caches and the word-list path use
#: (strings are never tracked by the garbage collector, tuples of them are untracked at their first
#: collection, so thousands of cached words do not trigger full collections).
CodeVariants = tuple[str, ...]

#: Highest token id a code string can hold (the last Unicode code point).
MAX_CODE_ID = 0x10FFFF
_U32 = "I" if array("I").itemsize == 4 else "L"
_UTF32 = "utf-32-le" if sys.byteorder == "little" else "utf-32-be"


def ids_to_codes(ids: Iterable[int]) -> str:
    """A token-id sequence as a string of code points, id ``i`` as ``chr(i)`` (ids in ``[0, MAX_CODE_ID]``).

    The word-list path splits, hashes, de-duplicates and concatenates these strings in C instead of building a
    tuple per sequence; strings are never tracked by the garbage collector (docs/performance.md §6). Surrogate
    code points (ids 55296-57343) are kept as they are (``surrogatepass``).
    """
    return array(_U32, ids).tobytes().decode(_UTF32, "surrogatepass")


def codes_to_ids(codes: str) -> np.ndarray:
    """The ids of a code string (:func:`ids_to_codes`) as an int32 array."""
    return np.frombuffer(codes.encode(_UTF32, "surrogatepass"), dtype=np.uint32).astype(np.int32)


def _as_tuples(variants: CodeVariants) -> Sequences:
    return tuple(tuple(map(ord, codes)) for codes in variants)


class WordEncoder:
    """Encodes stop/bad words and embedding-bias words with one tokenizer (results cached, bounded).

    Thread-safe: the caches are guarded by a lock; the tokenizer is called outside it.

    Args:
        tokenizer: a Hugging Face tokenizer (``encode``, ``decode``, ``get_added_vocab``, ``len``).
        cache_size: number of distinct words whose encodings are kept (0: none).
        row_cache_words: words of whole-row results kept, all rows together (0: none).
    Raises:
        ValueError: a vocabulary with ids above :data:`MAX_CODE_ID` (1,114,111; the largest tokenizers in use
            have about 262,000 ids).
    """

    def __init__(
        self, tokenizer: Any, cache_size: int = WORD_CACHE_SIZE, row_cache_words: int = ROW_CACHE_WORDS
    ) -> None:
        self.tokenizer = tokenizer
        self.vocab_size = len(tokenizer)
        try:
            self._added = dict(tokenizer.get_added_vocab())
        except Exception:
            self._added = {}
        top = max([self.vocab_size - 1, *(int(i) for i in self._added.values())])
        if top > MAX_CODE_ID:
            raise ValueError(
                f"the tokenizer has token ids up to {top}; word lists support ids up to {MAX_CODE_ID} "
                "(runtime/wordlists.py keeps sequences as code points)"
            )
        self._anchor_ids = self._enc(_ANCHOR)
        self._anchor_codes = ids_to_codes(self._anchor_ids)
        self._cache: OrderedDict[str, CodeVariants] = OrderedDict()
        self._cache_size = cache_size
        self._rows: OrderedDict[tuple[Any, ...], tuple[np.ndarray, np.ndarray]] = OrderedDict()
        self._row_words = 0
        self._row_cache_words = row_cache_words
        self._lock = threading.Lock()
        is_fast = getattr(tokenizer, "is_fast", False)
        self._backend = getattr(tokenizer, "backend_tokenizer", None) if is_fast else None
        self._sep: tuple[str, int, str] | None = None
        self._sep = self._find_separator()

    @property
    def joined(self) -> bool:
        """True when texts are encoded joined behind a special token (checked at construction)."""
        return self._sep is not None

    def _enc(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def _plain(self, word: str) -> list[int]:
        ids = self._enc(word)
        # Drop a lone leading dummy-prefix token ("▁" = 29871 in LLaMA) that does not change the text.
        if len(ids) > 1:
            dec = self.tokenizer.decode
            if dec([ids[0]]).strip() == "" and dec(ids[1:]) == dec(ids):
                ids = ids[1:]
        return ids

    def _batch(self) -> Any:
        """The Rust batch encode (``encode_batch_fast``: no offsets), after one ordinary ``encode`` that puts
        the Rust tokenizer in the state ``encode()`` uses (no truncation or padding, the tokenizer's
        ``split_special_tokens``); the batch skips transformers' per-encoding conversion (offsets, masks),
        which costs more than the encoding itself. The Rust side encodes the texts of one call on its rayon
        thread pool (all cores) unless ``TOKENIZERS_PARALLELISM`` is false or the process was forked after
        the pool was used."""
        backend = self._backend
        assert backend is not None  # callers check for a fast tokenizer first
        self._enc(_ANCHOR)
        return getattr(backend, "encode_batch_fast", None) or backend.encode_batch

    def _after_anchor_each(self, bodies: list[str]) -> list[str | None]:
        """Ids (code string) of ``ANCHOR + body`` after the anchor's ids, one
        ``encode(t, add_special_tokens=False)`` per text (batched in one Rust call on a fast tokenizer); None
        where the tokenizer merged the anchor with the body, or the body added no id."""
        texts = [_ANCHOR + b for b in bodies]
        if self._backend is None or len(texts) < 8:
            encoded = [self._enc(t) for t in texts]
        else:
            encoded = [enc.ids for enc in self._batch()(texts, add_special_tokens=False)]
        anchor, n = self._anchor_codes, len(self._anchor_codes)
        out: list[str | None] = []
        for ids in encoded:
            codes = ids_to_codes(ids)
            out.append(codes[n:] if n and len(codes) > n and codes.startswith(anchor) else None)
        return out

    def _after_anchor_joined(self, bodies: list[str]) -> list[str | None]:
        """What :meth:`_after_anchor_each` returns, with up to :data:`JOIN_SEGMENTS` texts per Rust encode
        (module docstring): the ids of one joined text become one code string, split in C at the separator's
        code followed by the anchor's codes. A chunk where some body merged with the anchor is split at the
        separator alone; one whose separator count is off is encoded one text at a time."""
        assert self._sep is not None
        sep, sep_id, anchor = self._sep
        sep_code, n = chr(sep_id), len(anchor)
        sep_anchor = sep_code + anchor
        glue = sep + _ANCHOR
        chunks = [bodies[i : i + JOIN_SEGMENTS] for i in range(0, len(bodies), JOIN_SEGMENTS)]
        texts = [glue + glue.join(chunk) for chunk in chunks]
        out: list[str | None] = []
        for chunk, enc in zip(chunks, self._batch()(texts, add_special_tokens=False)):
            codes = ids_to_codes(enc.ids)
            m = len(chunk)
            # The text starts with the separator and holds one per body; when each is followed by the
            # anchor, the parts are the bodies' ids ("" when a body added none: None).
            parts = codes.split(sep_anchor)
            if len(parts) == m + 1 and not parts[0] and codes.count(sep_code) == m:
                out += [p or None for p in parts[1:]]
                continue
            parts = codes.split(sep_code)
            if len(parts) != m + 1 or parts[0]:
                out.extend(self._after_anchor_each(chunk))
                continue
            out += [p[n:] if len(p) > n and p.startswith(anchor) else None for p in parts[1:]]
        return out

    def _find_separator(self) -> tuple[str, int, str] | None:
        """The special token to join texts with, its id and the anchor's ids (code string) behind it; None when
        no special token gives exactly :meth:`_after_anchor_each`'s ids on the probe texts (or no fast
        tokenizer)."""
        if self._backend is None or not self._anchor_ids:
            return None
        names = [getattr(self.tokenizer, "eos_token", None)] + list(getattr(self.tokenizer, "all_special_tokens", []))
        for name in dict.fromkeys(n for n in names if isinstance(n, str) and n):
            sep_id = self._added.get(name)
            if sep_id is None or self._enc(name) != [sep_id]:
                continue
            ids = self._enc(name + _ANCHOR)
            if len(ids) < 2 or ids[0] != sep_id:
                continue
            self._sep = (name, int(sep_id), ids_to_codes(ids[1:]))
            probe = [b for b in _PROBE_BODIES if name not in b]
            probe = probe * (JOIN_SEGMENTS // len(probe) + 2)  # spans two chunks
            if self._after_anchor_joined(probe) == self._after_anchor_each(probe):
                return self._sep
            self._sep = None
        return None

    def _after_anchor_codes(self, bodies: list[str]) -> list[str | None]:
        """:meth:`_after_anchor_each`'s result, joined where that was checked to give the same ids (a body
        that holds the separator's text is encoded on its own)."""
        if self._sep is None or len(bodies) < 8:
            return self._after_anchor_each(bodies)
        sep = self._sep[0]
        if sep not in "".join(bodies):  # one search; a match across two bodies only costs the test below
            return self._after_anchor_joined(bodies)
        alone = [i for i, b in enumerate(bodies) if sep in b]
        if not alone:
            return self._after_anchor_joined(bodies)
        out: list[str | None] = [None] * len(bodies)
        skip = set(alone)
        joined = [i for i in range(len(bodies)) if i not in skip]
        for i, codes in zip(joined, self._after_anchor_joined([bodies[i] for i in joined])):
            out[i] = codes
        for i, codes in zip(alone, self._after_anchor_each([bodies[i] for i in alone])):
            out[i] = codes
        return out

    def _after_anchor_many(self, bodies: list[str]) -> list[tuple[int, ...] | None]:
        """:meth:`_after_anchor_codes` as id tuples (None where it gives None)."""
        return [None if codes is None else tuple(map(ord, codes)) for codes in self._after_anchor_codes(bodies)]

    def _encode_words(self, words: list[str]) -> dict[str, CodeVariants]:
        """The variants of distinct non-empty words (module docstring), each text encoded once."""
        added = self._added
        todo = words if added.keys().isdisjoint(words) else [w for w in words if w not in added]
        spaced_words = [w for w in todo if not w[0].isspace()]
        encoded = self._after_anchor_codes(todo + [" " + w for w in spaced_words])
        glued_codes = encoded[: len(todo)]
        spaced_codes = encoded[len(todo) :]
        if len(spaced_words) < len(todo):  # words that start with whitespace have no spaced variant
            spaced_of = dict(zip(spaced_words, spaced_codes))
            spaced_codes = [spaced_of.get(w) for w in todo]
        out: dict[str, CodeVariants] = {
            w: (g, sp) if sp is not None and sp != g else (g,)
            for w, g, sp in zip(todo, glued_codes, spaced_codes)
            if g is not None
        }
        if len(out) < len(todo):  # the tokenizer merged the anchor with the word: the plain encoding
            for w, g in zip(todo, glued_codes):
                if g is None:
                    plain = ids_to_codes(self._plain(w))
                    out[w] = (plain,) if plain else ()
        if len(todo) < len(words):
            out.update({w: (chr(added[w]),) for w in words if w in added})
        return out

    def text_variants(self, word: str) -> list[list[int]]:
        """Token-id sequences for the text ``word`` (see module docstring); ``[]`` for an empty word."""
        return [list(map(ord, codes)) for codes in self._text_codes_many([word])[0]]

    def text_variants_many(self, words: Sequence[str]) -> list[Sequences]:
        """The variants of every word (module docstring), parallel to ``words``; cost linear in the number
        of words: cache misses are encoded in few batched tokenizer calls."""
        return [_as_tuples(v) for v in self._text_codes_many(words)]

    def _text_codes_many(self, words: Sequence[str]) -> list[CodeVariants]:
        """:meth:`text_variants_many` as code strings (the caches' form)."""
        with self._lock:
            cache = self._cache
            results: list[CodeVariants | None] = list(map(cache.get, words))
            misses = results.count(None)
            if misses == len(words):
                todo = dict.fromkeys(words)
            else:
                todo = dict.fromkeys(w for w, r in zip(words, results) if r is None)
                touch = cache.move_to_end
                for w, r in zip(words, results):
                    if r is not None:
                        touch(w)
        todo.pop("", None)  # an empty word has no sequence
        fresh: dict[str, CodeVariants] = self._encode_words(list(todo)) if todo else {}
        if fresh and self._cache_size > 0:
            with self._lock:
                # pairs from zip: OrderedDict.update(a_dict) builds a tracked tuple per item, which counts
                # towards the next full collection (one every ~11 lists of 10,000 new words, 0.14-0.22 s)
                self._cache.update(zip(fresh, fresh.values()))
                while len(self._cache) > self._cache_size:
                    self._cache.popitem(last=False)
        if misses == len(words):
            return list(map(fresh.get, words, repeat((), len(words))))
        get = fresh.get
        return [get(w, ()) if r is None else r for w, r in zip(words, results)]

    def sequences(self, word: str, field: str) -> list[list[int]]:
        """Raw ids (JSON list syntax) or the text variants of one request element."""
        return [list(map(ord, codes)) for codes in self._codes_many([word], field)[0]]

    def sequences_many(self, words: Sequence[str], field: str) -> list[Sequences]:
        """The sequences of every element (raw ids or text variants), text encoded in few batches.

        Raises:
            RequestError: an element that is a malformed token-id list or holds ids outside the vocabulary.
        """
        return [_as_tuples(v) for v in self._codes_many(words, field)]

    def _codes_many(self, words: Sequence[str], field: str) -> list[CodeVariants]:
        """:meth:`sequences_many` as code strings.

        Raises:
            RequestError: as :meth:`sequences_many`.
        """
        raw: dict[int, CodeVariants] = {}
        if "[" not in "".join(words):  # a token-id list needs a bracket
            return self._text_codes_many(words)
        for i in [i for i, w in enumerate(words) if "[" in w]:
            ids = parse_token_ids(words[i], self.vocab_size, field)
            if ids is not None:
                raw[i] = (ids_to_codes(ids),)
        if not raw:
            return self._text_codes_many(words)
        text_pos = [i for i in range(len(words)) if i not in raw]
        out = [raw.get(i, ()) for i in range(len(words))]
        for i, variants in zip(text_pos, self._text_codes_many([words[i] for i in text_pos])):
            out[i] = variants
        return out

    def word_list(self, rows: Sequence[Sequence[str] | None], field: str, extra_ids: Sequence[int] = ()) -> np.ndarray:
        """Build the ``[batch, 2, N]`` int32 ids/offsets tensor for a batch.

        Cost is linear in the number of words (batched encoding, de-duplication in C that keeps the first
        occurrence's order, a cache of recent rows); see docs/performance.md §6.

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
        flat_rows = [self._row(list(words or []), field, extra_ids) for words in rows]
        longest = max((len(ids) for ids, _ in flat_rows), default=0)
        if longest == 0:
            return np.zeros((len(flat_rows), 2, 0), dtype=np.int32)
        out = np.zeros((len(flat_rows), 2, longest), dtype=np.int32)
        out[:, 1, :] = -1
        for b, (ids, offsets) in enumerate(flat_rows):
            out[b, 0, : len(ids)] = ids
            out[b, 1, : len(offsets)] = offsets
        return out

    def _row(self, words: list[str], field: str, extra_ids: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
        """Concatenated ids and end offsets (read-only int32 arrays) of one row's distinct sequences (first
        occurrence order), from the row cache when the same words and extra ids came lately.

        Raises:
            RequestError: as :meth:`word_list`.
        """
        check_word_row(words, field)
        key = (tuple(words), tuple(int(e) for e in extra_ids))
        if self._row_cache_words > 0:
            with self._lock:
                hit = self._rows.get(key)
                if hit is not None:
                    self._rows.move_to_end(key)
                    return hit
        # distinct sequences in first-occurrence order (a dict keeps insertion order), "" = no sequence
        distinct = dict.fromkeys(chain.from_iterable(self._codes_many(words, field)))
        distinct.pop("", None)
        extra = [e for e in dict.fromkeys(key[1]) if not (0 <= e <= MAX_CODE_ID and chr(e) in distinct)]
        ends = np.fromiter(map(len, distinct), dtype=np.int64, count=len(distinct))
        ids = np.concatenate([codes_to_ids("".join(distinct)), np.array(extra, dtype=np.int32)])
        offsets = np.concatenate([ends, np.ones(len(extra), dtype=np.int64)]).cumsum().astype(np.int32)
        ids.setflags(write=False)
        offsets.setflags(write=False)
        if 0 < len(words) <= self._row_cache_words:
            with self._lock:
                if key not in self._rows:
                    self._rows[key] = (ids, offsets)
                    self._row_words += len(words)
                while self._row_words > self._row_cache_words:
                    old, _ = self._rows.popitem(last=False)
                    self._row_words -= len(old[0])
        return ids, offsets

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
            for weight, variants in zip(weights, self._codes_many(words, "embedding_bias_words")):
                for t in sorted(map(ord, set("".join(variants)))):
                    if t < size:
                        bias[b, t] += float(weight)
                        any_word = True
        if not any_word:
            return np.zeros((batch, 0), dtype=np.float32)
        return bias
