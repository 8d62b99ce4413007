"""Incremental (streaming) detokenization whose deltas add up to the non-streaming text.

Why this exists: upstream postprocessing decodes each streamed response's new tokens on their own, so
SentencePiece word spaces vanish (``decode([▁is]) == "is"``, B24) and characters split over several
byte tokens turn into U+FFFD (``decode([235]) == "\\ufffd"``, B25; tensorrtllm_backend
``postprocessing/1/model.py`` at commit c2e65b8).

Algorithm (one :class:`IncrementalDetokenizer` per request, sequence and beam):

* Keep a short *window* of token ids ``ids[p:]`` and ``E``, the number of characters of
  ``decode(ids[p:])`` already emitted. For new ids, decode the window ``W`` and emit ``W[E:end]``.
* ``end`` holds back a tail that may still change: a trailing run of U+FFFD (an incomplete UTF-8
  character whose remaining bytes are in tokens not generated yet) and, only for tokenizers whose
  ``decode`` applies ``clean_up_tokenization_spaces``, a trailing partial clean-up pattern (``" "``,
  ``" '"``, ``" n"``...; ``"a ."`` decodes to ``"a."``, so an emitted ``" "`` could not be taken back).
* When nothing is held and the window is longer than ``2 * context_tokens``, the window start moves
  forward to a cut ``c`` where ``decode(ids[c:])`` is non-empty and a suffix of ``W`` (checked, not
  assumed): the window then keeps at least one rendered token before every new token, so start-of-
  text effects (SentencePiece's strip of the first space, a skipped special token at the start) only
  touch characters already emitted. Each step decodes ``O(context_tokens + chunk)`` tokens: the
  per-token cost does not grow with the sequence length (measured by ``scripts/bench_detok.py``).

Property (tested with hypothesis over every test tokenizer of tests/_assets.py, random ids and random
text, random chunk sizes, both ``skip_special_tokens`` values)::

    "".join(d.add(chunk) for chunk in chunks) + d.flush() == tokenizer.decode(all_ids, skip_special_tokens=s)

and for valid UTF-8 no delta contains U+FFFD.

Documented edges (the only ones where the deltas differ from ``decode`` of the whole sequence):

1. **Without** :meth:`IncrementalDetokenizer.flush`, a held tail is not emitted (and
   :meth:`DetokenizerCache.finish`, the servers' end of a stream, drops a trailing U+FFFD run: a client
   never gets U+FFFD for a character cut by ``max_tokens``): a sequence that ends
   inside a UTF-8 character (cut by ``max_tokens``), or ends with a literal U+FFFD, or (clean-up
   tokenizers only) ends with a partial clean-up pattern such as a trailing space. The ensemble's
   postprocessing cannot know that a response is the last one, so it cannot flush; and since it keys
   every response on the request (see postprocessing.py), this holds for its non-streaming responses
   too. What it drops is at most the held tail: for the UTF-8 case, the characters that ``decode``
   shows as U+FFFD anyway (a generation cut by ``max_tokens`` inside a character).
2. Invalid byte sequences in SentencePiece byte-fallback runs: the ``tokenizers`` ByteFallback decoder
   renders a run of consecutive byte tokens as U+FFFD *as a whole* when the run is not valid UTF-8
   (``decode([235, 194, 176]) == "迭"`` but ``decode([235, 194, 176, 258]) == "\\ufffd" * 4``). When
   the valid prefix of such a run was already emitted and a later invalid byte token joins the run,
   the stream keeps the characters already sent; the concatenation then has the same length as
   ``decode`` but shows those characters where ``decode`` shows U+FFFD. Only a model emitting invalid
   UTF-8 reaches this.
3. A window that never admits a safe cut (no tokenizer here does this), or a held tail that never
   resolves (a run of more than ``max_window_tokens`` tokens all ending in invalid bytes), is cut by
   force after ``max_window_tokens`` tokens so that the cost stays bounded; the held text is then
   emitted as it decodes at that moment and the alignment continues by suffix.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import Any

REPLACEMENT_CHAR = "\ufffd"

# Proper prefixes of the patterns of transformers' ``clean_up_tokenization`` (" .", " ?", " !", " ,",
# " ' ", " n't", " 'm", " 's", " 've", " 're"), longest first.
_CLEANUP_PARTIALS = (" n'", " 'v", " 'r", " '", " n", " ")


def decode_fn(tokenizer: Any, skip_special_tokens: bool) -> Callable[[Sequence[int]], str]:
    """The decode function the detokenizer and the non-streaming path share.

    Returns ``ids -> tokenizer.decode(ids, skip_special_tokens=...)`` (a Python ``str``).
    """
    backend = _rust_decoder(tokenizer, skip_special_tokens)
    if backend is not None:
        rust_decode = backend.decode

        def _fast(ids: Sequence[int]) -> str:
            return rust_decode(ids if type(ids) is list else list(ids), skip_special_tokens=skip_special_tokens)

        return _fast

    def _decode(ids: Sequence[int]) -> str:
        return tokenizer.decode(list(ids), skip_special_tokens=skip_special_tokens)

    return _decode


_PROBE_TEXT = "x . Hello, world! It's   a \"test\" n't 'm \n\t 迭代 é 😀 </s> <s> <unk>"


def _rust_decoder(tokenizer: Any, skip_special_tokens: bool) -> Any:
    """The ``tokenizers.Tokenizer`` behind a transformers fast tokenizer when calling its ``decode``
    directly gives exactly ``tokenizer.decode`` (no clean-up of tokenization spaces, ``_decode`` not
    overridden); else None. transformers' ``decode`` wraps the Rust call in argument conversion and
    option handling that cost more than the decoding itself on the per-token path (docs/performance.md).
    Checked on probe ids (text with clean-up patterns, specials, multi-byte characters, the first 512 ids).
    """
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None or not getattr(tokenizer, "is_fast", False) or not hasattr(backend, "decode"):
        return None
    base: Any = next(
        (
            c
            for c in type(tokenizer).__mro__
            if c.__module__.startswith("transformers.tokenization_utils") and "_decode" in c.__dict__
        ),
        None,
    )
    if base is None or getattr(type(tokenizer), "_decode", None) is not base._decode:
        return None
    try:
        probes = [
            tokenizer.encode(_PROBE_TEXT, add_special_tokens=True),
            list(range(min(512, len(tokenizer)))),
            tokenizer.encode("a .", add_special_tokens=False),
        ]
        for ids in probes:
            if backend.decode(ids, skip_special_tokens=skip_special_tokens) != tokenizer.decode(
                ids, skip_special_tokens=skip_special_tokens
            ):
                return None
    except Exception:  # noqa: BLE001 - any doubt: the ordinary decode
        return None
    return backend


def cleanup_active(decode: Callable[[Sequence[int]], str], encode: Callable[[str], list[int]]) -> bool:
    """True when ``decode`` removes the space in ``"x ."`` (``clean_up_tokenization_spaces`` in effect).

    transformers 5 ignores the clean-up for BPE tokenizers unless forced; WordPiece tokenizers and
    transformers 4 tokenizers with ``clean_up_tokenization_spaces=True`` apply it. Probed, not guessed.
    """
    try:
        return decode(encode("x .")) == "x."
    except Exception:  # a tokenizer that cannot encode the probe: assume no clean-up
        return False


class IncrementalDetokenizer:
    """Turn a stream of token ids into text deltas for one sequence (one request, sequence and beam).

    Args:
        decode: ``ids -> str``, normally :func:`decode_fn` of the tokenizer; the concatenation of all
            deltas equals ``decode(all ids)`` (see the module docstring for the edges).
        cleanup: hold back partial clean-up patterns (see :func:`cleanup_active`).
        context_tokens: tokens kept before the new ones once the window is trimmed (cost per step is
            about ``2 * context_tokens`` + the chunk, in tokens).
        max_window_tokens: force a cut when no safe cut was found for this many tokens.

    Not thread-safe: one object belongs to one stream; :class:`DetokenizerCache` serialises access.
    """

    __slots__ = ("_decode", "_cleanup", "_k", "_max_window", "_ids", "_emitted")

    def __init__(
        self,
        decode: Callable[[Sequence[int]], str],
        *,
        cleanup: bool = False,
        context_tokens: int = 6,
        max_window_tokens: int = 512,
    ) -> None:
        if context_tokens < 1:
            raise ValueError("context_tokens must be >= 1")
        self._decode = decode
        self._cleanup = cleanup
        self._k = context_tokens
        self._max_window = max(max_window_tokens, 4 * context_tokens)
        self._ids: list[int] = []  # the window ids[p:]
        self._emitted = 0  # characters of decode(window) already emitted

    @classmethod
    def for_tokenizer(cls, tokenizer: Any, skip_special_tokens: bool = True, **kwargs: Any) -> IncrementalDetokenizer:
        """Build one for a Hugging Face tokenizer (clean-up probed once per call; prefer
        :class:`DetokenizerFactory` when making many)."""
        return DetokenizerFactory(tokenizer, skip_special_tokens, **kwargs)()

    def _held(self, text: str) -> int:
        """Number of trailing characters of ``text`` that may still change."""
        n = len(text)
        i = n
        while i > 0 and text[i - 1] == REPLACEMENT_CHAR:
            i -= 1
        held = n - i
        if held == 0 and self._cleanup:
            for partial in _CLEANUP_PARTIALS:
                if text.endswith(partial):
                    return len(partial)
        return held

    def add(self, new_ids: Iterable[int]) -> str:
        """Add generated token ids (any number, also none); return the text that is now final.

        Returns:
            The delta (possibly ``""``) to append to the text streamed so far.
        """
        new = [int(t) for t in new_ids]
        if not new:
            return ""
        self._ids.extend(new)
        text = self._decode(self._ids)
        end = len(text) - self._held(text)
        delta = ""
        if end > self._emitted:
            delta = text[self._emitted : end]
            self._emitted = end
        if end == len(text) and len(self._ids) > 2 * self._k:
            self._trim(text)
        elif len(self._ids) > self._max_window:
            # edge 3: an endless held tail (a run of invalid bytes): release it and cut, cost stays bounded
            delta += text[self._emitted :]
            self._emitted = len(text)
            self._trim(text, force=True)
        return delta

    def flush(self, drop_partial: bool = False) -> str:
        """End of stream: return the held tail (may contain U+FFFD for a cut-off character).

        ``drop_partial``: leave out a trailing run of U+FFFD, i.e. a character the stream's end cut inside
        (``max_tokens`` reached mid-character); what a server sends its client, which cannot complete the
        character later. Without it the tail is exactly what ``decode`` of the whole sequence shows.
        """
        if not self._ids:
            return ""
        text = self._decode(self._ids)
        delta = text[self._emitted :] if len(text) > self._emitted else ""
        if drop_partial:
            delta = delta.rstrip(REPLACEMENT_CHAR)
        self._emitted = len(text)
        return delta

    def _trim(self, text: str, force: bool = False) -> None:
        """Move the window start to a safe cut (see module docstring); called when nothing is held."""
        ids = self._ids
        n = len(ids)
        if force:
            cut = n - self._k
            self._ids = ids[cut:]
            self._emitted = len(self._decode(self._ids))
            return
        # Try cuts leaving k, k+1, ... 2k-1 tokens; the first whose text is a non-empty suffix wins.
        for keep in range(self._k, min(2 * self._k, n)):
            cut = n - keep
            tail = self._decode(ids[cut:])
            if tail and text.endswith(tail) and self._held(tail) == 0:
                self._ids = ids[cut:]
                self._emitted = len(tail)
                return
        if n > self._max_window:  # edge 3: bounded cost wins over exactness
            cut = n - self._k
            tail = self._decode(ids[cut:])
            self._ids = ids[cut:]
            self._emitted = len(tail)


class DetokenizerFactory:
    """Creates :class:`IncrementalDetokenizer` objects for one tokenizer and ``skip_special_tokens``.

    Probes clean-up once. Call the factory to get a fresh detokenizer; :meth:`decode` is the matching
    non-streaming decode.
    """

    def __init__(self, tokenizer: Any, skip_special_tokens: bool = True, **kwargs: Any) -> None:
        self.tokenizer = tokenizer
        self.skip_special_tokens = skip_special_tokens
        self.decode = decode_fn(tokenizer, skip_special_tokens)
        self.cleanup = cleanup_active(self.decode, lambda s: tokenizer.encode(s, add_special_tokens=False))
        self._kwargs = kwargs

    def __call__(self) -> IncrementalDetokenizer:
        return IncrementalDetokenizer(self.decode, cleanup=self.cleanup, **self._kwargs)


class DetokenizerCache:
    """Thread-safe LRU of streaming detokenizer states, keyed per (request key, sequence index, beam).

    Args:
        factory: makes a new detokenizer for an unseen key.
        max_streams: LRU bound (the ``detokenizer_max_streams`` parameter); the least recently used
            stream is dropped when a new one would exceed it. A dropped stream that sends again starts
            from scratch (its next delta lacks the window context: a missing space at worst).
    """

    def __init__(self, factory: Callable[[], IncrementalDetokenizer], max_streams: int = 1024) -> None:
        if max_streams < 1:
            raise ValueError("max_streams must be >= 1")
        self._factory = factory
        self.max_streams = max_streams
        self._states: OrderedDict[Hashable, IncrementalDetokenizer] = OrderedDict()
        self._lock = threading.Lock()
        self.evictions = 0

    def __len__(self) -> int:
        with self._lock:
            return len(self._states)

    def __contains__(self, key: Hashable) -> bool:
        with self._lock:
            return key in self._states

    def add(self, key: Hashable, new_ids: Iterable[int]) -> str:
        """Feed ``new_ids`` to the stream ``key`` (created on first use); return its text delta."""
        with self._lock:
            state = self._states.get(key)
            if state is None:
                state = self._factory()
                self._states[key] = state
                while len(self._states) > self.max_streams:
                    self._states.popitem(last=False)
                    self.evictions += 1
            else:
                self._states.move_to_end(key)
            return state.add(new_ids)

    def drop(self, where: Callable[[Hashable], bool]) -> int:
        """Forget every state whose key ``where`` accepts (held text included). Returns how many."""
        with self._lock:
            gone = [k for k in self._states if where(k)]
            for k in gone:
                del self._states[k]
        return len(gone)

    def finish(self, key: Hashable) -> str:
        """End the stream ``key``: return its held tail (``flush(drop_partial=True)``: no U+FFFD for a
        character the end cut inside) and drop its state."""
        with self._lock:
            state = self._states.pop(key, None)
        return state.flush(drop_partial=True) if state is not None else ""
