"""Matching the token-id sequences of stop and bad words against a generated sequence, for the Python engines
(reference, synthetic): :class:`StopWordIndex` (does the output end with a stop word) and :class:`BadWordIndex`
(which next tokens would complete a bad word). :mod:`.wordlists` builds the sequences and re-exports these.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from .word_rows import (  # noqa: F401  (re-exported: moved from this module)
    MAX_WORD_BYTES,
    MAX_WORDS,
    check_word_row,
    parse_token_ids,
)


class StopWordIndex:
    """Which token-id sequences a generated token sequence ends with, in time independent of their number.

    The sequences are bucketed by their last id, so a new token is compared only with the sequences that end
    with it (the engine's per-token stop-word test; 10,000 stop words cost what 10 do).

    Args:
        words: token-id sequences (``stop_words_list`` decoded: lists of ints, kept, not copied); empty ones
            are ignored.
    """

    def __init__(self, words: Iterable[Sequence[int]]) -> None:
        self._by_last: dict[int, list[list[int]]] = {}
        by_last = self._by_last
        for word in words:
            if len(word):
                seq = word if type(word) is list else list(word)
                bucket = by_last.get(seq[-1])
                if bucket is None:
                    by_last[seq[-1]] = [seq]
                else:
                    bucket.append(seq)

    def __bool__(self) -> bool:
        return bool(self._by_last)

    def ends_with_any(self, tokens: list[int]) -> bool:
        """True when ``tokens`` (the generated ids so far, a list) ends with one of the sequences."""
        if not tokens:
            return False
        bucket = self._by_last.get(tokens[-1])
        if bucket is None:
            return False
        n_tokens = len(tokens)
        for word in bucket:
            n = len(word)
            if n <= n_tokens and (n == 1 or tokens[-n:] == word):
                return True
        return False


class BadWordIndex:
    """The ids to ban at the next step for TensorRT-LLM bad words, in time independent of their number.

    A bad word ``[..., p, t]`` bans ``t`` when the history ends with its prefix ``[..., p]``; a one-token word
    bans its token always. Prefixes are bucketed by their last id.

    Args:
        words: token-id sequences (``bad_words_list`` decoded); empty ones are ignored.
    """

    def __init__(self, words: Iterable[Sequence[int]]) -> None:
        self.always: list[int] = []
        self._by_last: dict[int, list[tuple[list[int], int]]] = {}
        for word in words:
            if not len(word):
                continue
            ids = [int(t) for t in word]
            if len(ids) == 1:
                self.always.append(ids[0])
            else:
                self._by_last.setdefault(ids[-2], []).append((ids[:-1], ids[-1]))

    def __bool__(self) -> bool:
        return bool(self.always or self._by_last)

    def banned(self, history: Sequence[int]) -> list[int]:
        """Ids the next token must not be, given ``history`` (prompt + generated ids)."""
        out = list(self.always)
        if history:
            n_hist = len(history)
            for prefix, token in self._by_last.get(history[-1], ()):
                n = len(prefix)
                if n <= n_hist and (n == 1 or list(history[-n:]) == prefix):
                    out.append(token)
        return out
