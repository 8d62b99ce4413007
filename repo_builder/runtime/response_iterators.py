"""Finished ``exec(decoupled=True)`` response iterators, let go of only where Python holds the GIL.

Why (python_backend r24.10 = Triton 2.51, ``src/pb_response_iterator.cc`` and ``src/pb_stub.cc``; the same on
python_backend main): a BLS call's ``ResponseIterator`` keeps every response it handed out. When the final one
arrives, the iterator asks the stub's ``ServiceStubToParentRequests`` thread to erase it from the stub's
iterator map. If Python has already dropped its reference by then, that erase is the last reference, and the
iterator, its responses and their tensors' numpy arrays are destroyed on that C++ thread without the GIL. The
Python 3.12 stub dies of it (SIGSEGV in ``_PyObject_Free`` under ``ResponseIterator::~ResponseIterator`` <-
``Stub::SendCleanupId``, core dumps of the 3.12 stub serving our BLS tests). The 3.11 stub survives it by chance.

:func:`retire` keeps each finished iterator for ``HOLD_S`` seconds, far longer than the erase takes (one queue
hop), and releases the older ones on the calling Python thread. The last reference is then Python's, and the
iterator is destroyed with the GIL held.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

#: Seconds a finished iterator is kept before Python releases it (the stub's erase takes well under 1 ms).
HOLD_S = 3.0


class IteratorHold:
    """Finished response iterators kept for ``hold_s`` seconds; released, oldest first, by later calls.

    Args:
        hold_s: seconds (>= 0) each iterator is kept.
        clock: monotonic seconds (tests pass a fake).
    """

    def __init__(self, hold_s: float = HOLD_S, clock: Callable[[], float] = time.monotonic) -> None:
        self.hold_s = hold_s
        self._clock = clock
        self._lock = threading.Lock()
        self._held: deque[tuple[float, Any]] = deque()

    def retire(self, iterator: Any) -> None:
        """Keep ``iterator`` (None is ignored); let go of those held longer than ``hold_s``."""
        now = self._clock()
        released = []
        with self._lock:
            if iterator is not None:
                self._held.append((now, iterator))
            while self._held and now - self._held[0][0] >= self.hold_s:
                released.append(self._held.popleft())
        del released  # destroyed here, on a Python thread, outside the lock

    def __len__(self) -> int:
        with self._lock:
            return len(self._held)

    def clear(self) -> None:
        """Let go of every iterator now (model unload)."""
        with self._lock:
            held = list(self._held)
            self._held.clear()
        del held


#: The process's one hold (every BLS call of a stub goes through it).
HOLD = IteratorHold()


def retire(iterator: Any) -> None:
    """Hand a finished (or abandoned) ``exec(decoupled=True)`` iterator to :data:`HOLD`."""
    HOLD.retire(iterator)


def held(iterator: Any) -> Any:
    """Iterate ``iterator`` (an ``exec(decoupled=True)`` result); it is retired however the loop ends
    (exhausted, ``break``, an exception: a generator's ``finally`` runs when it is closed or collected)."""
    try:
        yield from iterator
    finally:
        retire(iterator)
