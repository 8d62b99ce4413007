"""A deadlock watchdog for a Python-backend stub: if no Python thread of the process can run for ``timeout_s``
seconds, the process writes every thread's traceback to stderr (the server log) and exits with code 1.

Why (measured on Triton 2.51, python_backend r24.10; the code is the same up to python_backend main): a BLS
stub that calls ``InferenceRequest.exec(decoupled=True)`` from several threads can deadlock on three locks.
The ``exec`` binding calls ``Stub::GetResponseIterator`` with the GIL held, which takes the stub's
``response_iterator_map_mu_``; the stub's ``ParentToStubMQMonitor`` thread holds that mutex while it
enqueues an engine response into an iterator (``ResponseIterator::EnqueueResponse`` takes the iterator's
``mu_``); and ``ResponseIterator::Next`` re-takes the GIL (end of its ``gil_scoped_release``) while it
holds that same ``mu_``. When the three meet, no Python thread runs again and every request of the
instance waits forever (gdb and py-spy stacks: docs/reliability.md). NVIDIA's BLS serves one request at a
time and never meets it; ours serves many at once. Nothing in Python can break the cycle, and no Python
thread can notice it (they all wait for the GIL), so the timer is ``faulthandler``'s C thread: a daemon
Python thread re-arms it every ``timeout_s / 4`` seconds, and only a process where Python cannot run at all
for ``timeout_s`` lets it fire. tritonserver 2.51 answers a dead stub's model with "Stub process ... is not
healthy"; ``repo-builder launch`` notices the dead model process and stops the server with an error naming
it, so an orchestrator restarts it instead of leaving clients hanging.
"""

from __future__ import annotations

import faulthandler
import sys
import threading
from typing import TextIO


class StubWatchdog:
    """Exit the process (code 1, all tracebacks to ``file``) when Python cannot run for ``timeout_s`` seconds.

    Args:
        timeout_s: seconds (> 0) without a chance for the heartbeat thread to run before the process exits.
        file: where faulthandler writes the tracebacks (default: stderr, which tritonserver logs).
    Raises:
        ValueError: ``timeout_s`` <= 0.
    """

    def __init__(self, timeout_s: float, file: TextIO | None = None) -> None:
        if timeout_s <= 0:
            raise ValueError(f"watchdog timeout must be > 0 s, got {timeout_s}")
        self.timeout_s = float(timeout_s)
        self._file = file if file is not None else sys.stderr
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _arm(self) -> None:
        faulthandler.dump_traceback_later(self.timeout_s, repeat=False, file=self._file, exit=True)

    def _beat(self) -> None:
        period = self.timeout_s / 4
        while not self._stop.wait(period):
            self._arm()

    def start(self) -> StubWatchdog:
        """Arm the timer and start the heartbeat thread; returns self."""
        self._arm()
        self._thread = threading.Thread(target=self._beat, name="repo-builder-watchdog", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Disarm the timer and end the heartbeat thread (model unload)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        faulthandler.cancel_dump_traceback_later()
