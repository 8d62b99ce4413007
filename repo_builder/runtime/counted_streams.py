"""The counted ensemble streams of postprocessing: a stream that preprocessing registered in the shared
:class:`~.stream_ledger.StreamLedger` counts its tokens against the request's ``max_tokens`` and ends (held tail
emitted, state dropped, id marked ended) when it uses them up, sends no new token, or ends on a recorded stop
sequence (the module docstring of :mod:`.postprocessing`, "End of an ensemble stream").

:class:`CountedStreams` is a base of :class:`~.postprocessing.Postprocessor`, which sets the attributes it
declares; moved here from :mod:`.postprocessing`. Vendored with the rest of ``runtime/``.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from .detokenizer import DetokenizerCache
from .stream_ledger import STOP_INTS, StreamLedger
from .wordlists import StopWordIndex


class CountedStreams:
    """The ledger-counted streams of a :class:`~.postprocessing.Postprocessor` (its attributes, set there)."""

    ledger: StreamLedger | None
    streams: DetokenizerCache
    max_streams: int
    #: stream key -> [ledger slot, slot key, tokens left, StopWordIndex or None, last generated ids]
    _budgets: OrderedDict[tuple, list[Any]]

    def _empty_id_registered(self) -> bool:
        """True while a stream of the empty request id is registered (preprocessing keyed it alone)."""
        assert self.ledger is not None
        return ("ens", "", 0, 0, 0, 0, 0) in self._budgets or self.ledger.lookup("") is not None

    def _empty_id_in_ledger(self) -> bool:
        """True while the ledger holds a stream of the empty request id (the check of the state shared by
        several postprocessing instances, where this instance's budgets say nothing)."""
        return self.ledger is not None and self.ledger.lookup("") is not None

    def _counted(self, stream_key: tuple, request_id: str, ids: list[int], raw: list[int]) -> str:
        """The delta of a stream that preprocessing may have registered in the ledger: counted against
        the request's ``max_tokens``; the response that uses it up, the one that holds no new token, and
        the one whose generated ids end with one of the request's stop sequences (recorded in the ledger:
        the engine stops there) end the stream (held tail emitted, state dropped, id marked ended).
        ``ids``: the ids to decode; ``raw``: the engine's ids of this response (padded-vocabulary ids
        included), which are what is counted and matched."""
        assert self.ledger is not None
        key = (*stream_key, 0, 0, 0)
        budgets = self._budgets
        left = budgets.get(key)
        if left is None:
            if key in self.streams:
                return self.streams.add(key, ids)  # a stream the ledger does not know: never ended here
            found = self.ledger.lookup(request_id)
            if found is None:
                return self.streams.add(key, ids)
            stops = self.ledger.stop_sequences(found[0], found[1])
            index = StopWordIndex(stops) if stops else None
            left = budgets[key] = [*found, index, []]
            while len(budgets) > self.max_streams:  # streams that stopped short of their budget
                budgets.popitem(last=False)
        text = self.streams.add(key, ids)
        left[2] -= len(raw)
        index = left[3]
        stopped = False
        if index is not None and raw:
            tail = left[4]
            tail.extend(raw)
            del tail[: max(0, len(tail) - self._STOP_TAIL)]
            stopped = index.ends_with_any(tail)
        if left[2] <= 0 or not raw or stopped:  # budget used up, the stream's last (empty) response, a stop
            text += self.streams.finish(key)
            del budgets[key]
            self.ledger.end(left[0], left[1])
        return text

    #: generated ids kept per counted stream for the stop-sequence match (a recorded sequence is shorter)
    _STOP_TAIL = STOP_INTS

    def end_failed(self, request_id: str, correlation_id: int | str = 0) -> None:
        """Free what a counted ensemble stream of ``request_id`` holds after this model failed one of its
        responses (the ensemble then runs no further step of that request): its state and its ledger slot."""
        if self.ledger is None:
            return
        key = ("ens", request_id, correlation_id, 0, 0, 0, 0)
        left = self._budgets.pop(key, None)
        if left is None and key in self.streams:
            found = self.ledger.lookup(request_id)
            left = list(found) if found is not None else None
        self.streams.finish(key)
        if left is not None:
            self.ledger.end(left[0], left[1])
