"""The server log of a launch: every rank's stdout/stderr in one file (mpirun ``--tag-output`` lines for N > 1).

:class:`ServerLog` reads it (the tail quoted in launch errors, the models that failed to load, what a stop
added); :func:`log_follower` copies it to the terminal of a foreground launch.
"""

from __future__ import annotations

import os
import re
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path

#: Lines of server log quoted in launch errors.
TAIL_LINES = 40
#: tritonserver 2.51's log line when in-flight requests outlived ``--exit-timeout-secs`` (``main.cc``); after
#: it the process hangs in its teardown until killed (measured: 30 s, the length of the request in flight).
EXIT_TIMEOUT_EXPIRED = "Exit timeout expired. Exiting immediately."

_LOAD_ERROR_RE = re.compile(r"failed to load '([^']+)' version \d+: ([^\n]*)")


class ServerLog:
    """Reading the log file at ``path`` (which may not exist yet: every reader then returns empty)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    def tail(self, n: int = TAIL_LINES) -> str:
        """The last ``n`` lines (empty string if there is no log yet)."""
        try:
            with open(self.path, "rb") as fh:
                lines = deque(fh, maxlen=n)
        except FileNotFoundError:
            return ""
        return b"".join(lines).decode("utf-8", "replace")

    def load_errors(self, max_bytes: int = 4 << 20) -> dict[str, str]:
        """``{model: first line of the reason}`` for every ``failed to load 'M' version V: ...`` in the log.

        Source: tritonserver 2.51 ``model_lifecycle.cc`` log lines; the reason's traceback (escaped ``\\n``)
        is cut at its first line. Only the last ``max_bytes`` of the log are read.
        """
        errors: dict[str, str] = {}
        for match in _LOAD_ERROR_RE.finditer(self._last(max_bytes, 0)):
            reason = match.group(2).split("\\n")[0].strip().rstrip('"')
            errors.setdefault(match.group(1), reason)
        return errors

    def size(self) -> int:
        """Bytes in the log now (0 if there is none)."""
        try:
            return self.path.stat().st_size
        except OSError:
            return 0

    def since(self, offset: int, max_bytes: int = 1 << 20) -> str:
        """What the log gained after byte ``offset`` (at most the last ``max_bytes``)."""
        return self._last(max_bytes, offset)

    def _last(self, max_bytes: int, offset: int) -> str:
        try:
            with open(self.path, "rb") as fh:
                fh.seek(0, os.SEEK_END)
                fh.seek(max(offset, fh.tell() - max_bytes))
                return fh.read().decode("utf-8", "replace")
        except OSError:
            return ""


def log_follower(path: Path, emit: Callable[[str], None], stop: Callable[[], bool]) -> None:
    """Copy lines appended to ``path`` to ``emit`` until ``stop()`` is true (run in a thread)."""
    pos = 0
    while True:
        try:
            with open(path, "rb") as fh:
                fh.seek(pos)
                chunk = fh.read()
                pos = fh.tell()
        except FileNotFoundError:
            chunk = b""
        if chunk:
            emit(chunk.decode("utf-8", "replace"))
        elif stop():
            return
        time.sleep(0.1)
