"""String-level stop sequences: cut generated text at the first stop string, also across stream chunks.

Token-level stop lists (``stop_words_list``) only match the exact token sequences they hold; the same
text can be tokenized differently when generated (NVIDIA/TensorRT-LLM#90), so the BLS also checks the
text. Upstream's BLS does this from v0.19.0 (``check_stop_words``, upstream-reference §5.3).

* :func:`trim_at_stop`: non-streaming; text before the earliest stop string.
* :class:`StopStringMatcher`: streaming; fed text deltas (e.g. from
  :class:`~.detokenizer.IncrementalDetokenizer`), it returns the text safe to emit now and holds back a
  suffix that could be the beginning of a stop string, so a stop string split over chunks is still
  found and never half-emitted.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass


def find_stop(text: str, stops: Sequence[str], start: int = 0) -> tuple[int, str | None]:
    """Earliest occurrence of any stop string in ``text`` at or after ``start`` (characters).

    Returns:
        (index, stop string) of the earliest match (the longest stop string on a tie), or (-1, None).
    """
    best, which = -1, None
    for stop in stops:
        if not stop:
            continue
        i = text.find(stop, start)
        if i >= 0 and (best < 0 or i < best or (i == best and len(stop) > len(which or ""))):
            best, which = i, stop
    return best, which


def trim_at_stop(
    text: str, stops: Sequence[str], *, include_stop: bool = False, start: int = 0
) -> tuple[str, str | None]:
    """Cut ``text`` at its first stop string (searching from ``start``, e.g. after an echoed prompt).

    Returns:
        (text up to the stop string, excluding it unless ``include_stop``; the stop string or None).
    """
    i, which = find_stop(text, stops, start)
    if which is None:
        return text, None
    return text[: i + (len(which) if include_stop else 0)], which


@dataclass
class StopResult:
    """What one :meth:`StopStringMatcher.feed` call decided.

    Attributes:
        text: text safe to emit now (may be ``""``).
        stopped: True once a stop string was found; everything after it is dropped.
        stop: the stop string found (None when not stopped).
        position: index (characters, in the whole fed text) where the stop string starts, or -1.
    """

    text: str
    stopped: bool = False
    stop: str | None = None
    position: int = -1


class StopStringMatcher:
    """Find the earliest stop string in a stream of text deltas and say how much text is safe to emit.

    Args:
        stops: the stop strings (empty ones are ignored; each is matched literally).
        include_stop: also emit the stop string itself when found.

    The held-back text is the longest suffix that is a proper prefix of some stop string, so at most
    ``max(len(stop)) - 1`` characters; each feed costs O((len(delta) + held) * distinct stop lengths *
    log(number of stops)), so 10,000 stop strings cost about what 10 do (docs/performance.md).
    """

    def __init__(self, stops: Sequence[str], *, include_stop: bool = False) -> None:
        self.stops = tuple(dict.fromkeys(s for s in stops if s))
        self.include_stop = include_stop
        self._max_hold = max((len(s) for s in self.stops), default=1) - 1
        # Index built once (linear in the stops): membership set, distinct lengths (longest first) and
        # the sorted stops, where the stops beginning with a text form one run starting at bisect_left.
        self._set = frozenset(self.stops)
        self._lengths = sorted({len(s) for s in self.stops}, reverse=True)
        self._sorted = sorted(self.stops)
        self._held = ""
        self._consumed = 0  # characters of the whole text before self._held
        self.stopped = False
        self.stop: str | None = None

    def _is_prefix(self, tail: str, proper: bool) -> bool:
        """Some stop string starts with ``tail`` (and is longer, when ``proper``): O(log stops)."""
        i = bisect_left(self._sorted, tail)
        if i < len(self._sorted) and self._sorted[i] == tail and proper:
            i += 1
        return i < len(self._sorted) and self._sorted[i].startswith(tail)

    def _find(self, text: str) -> tuple[int, str | None]:
        """:func:`find_stop` over ``text`` with the index: O(len(text) x distinct stop lengths)."""
        n = len(text)
        for i in range(n):
            for length in self._lengths:
                if length <= n - i and text[i : i + length] in self._set:
                    return i, text[i : i + length]
        return -1, None

    def _held_len(self, text: str) -> int:
        for n in range(min(self._max_hold, len(text)), 0, -1):
            if self._is_prefix(text[-n:], proper=False):
                return n
        return 0

    def _pending_start(self, text: str, limit: int) -> int | None:
        """Earliest index before ``limit`` where ``text``'s tail is a proper prefix of a stop string."""
        for q in range(max(0, len(text) - self._max_hold), limit):
            if self._is_prefix(text[q:], proper=True):
                return q
        return None

    def feed(self, delta: str) -> StopResult:
        """Add a text delta; return the text to emit now and whether a stop string was reached."""
        if self.stopped:
            return StopResult("", True, self.stop, -1)
        text = self._held + delta
        if not self.stops:
            self._consumed += len(text)
            self._held = ""
            return StopResult(text)
        i, which = self._find(text)
        if which is not None:
            # a longer stop string may still complete earlier than this one (or, when the stop string is
            # kept, at the same place: the longest one found there wins, as in find_stop)
            pending = self._pending_start(text, i + 1 if self.include_stop else i)
            if pending is not None:
                emit, self._held = text[:pending], text[pending:]
                self._consumed += len(emit)
                return StopResult(emit)
            self.stopped, self.stop = True, which
            position = self._consumed + i
            self._held = ""
            return StopResult(text[: i + (len(which) if self.include_stop else 0)], True, which, position)
        hold = self._held_len(text)
        emit = text[: len(text) - hold]
        self._held = text[len(text) - hold :]
        self._consumed += len(emit)
        return StopResult(emit)

    def flush(self) -> str:
        """End of stream: the held text, cut at a stop string it holds (held while a longer candidate
        starting earlier could still complete)."""
        if self.stopped:
            return ""
        text, self._held = self._held, ""
        i, which = self._find(text)
        if which is not None:  # held back for a longer candidate that never completed
            self.stopped, self.stop = True, which
            text = text[: i + (len(which) if self.include_stop else 0)]
        self._consumed += len(text)
        return text
