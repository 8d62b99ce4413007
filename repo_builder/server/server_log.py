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
#: tritonserver 2.51's log line when no request is in flight any more during a stop and the models start to
#: unload (core r24.10 ``server.cc`` ``InferenceServer::Stop``). Before it the server waits for in-flight
#: requests, after it for the models' unloads; both under one ``--exit-timeout-secs`` counter.
UNLOADING_MODELS = "All models are stopped, unloading models"

_LOAD_ERROR_RE = re.compile(r"failed to load '([^']+)' version \d+: ([^\n]*)")
#: mpirun ``--tag-output`` prefixes (``[1,0]<stderr>:``), which also split one tritonserver line into pieces.
_MPI_TAG_RE = re.compile(r"\[\d+,\d+\]<std(?:out|err)>:")
#: tritonserver's error lines: ``E1203 08:23:17.875536 28951 model_repository_manager.cc:1460] "message"``.
_ERROR_LINE_RE = re.compile(r'^E\d{4} [\d:.]+\s+\d+ [\w.]+:\d+\] "?(.*?)"?\s*$')
#: what tritonserver prints when it gives up starting (``main.cc``): ``error: creating server: Internal - ...``.
_CREATE_SERVER_RE = re.compile(r"^error: creating server: (.*)$")
#: error lines every GPU-less start logs; not a cause (the CPU engines run without a GPU).
_NOISE = ("CudaDriverHelper", "CUDA driver version is insufficient", "DCGM", "pinned memory")


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

    def triton_errors(self, max_lines: int = 8, max_bytes: int = 4 << 20) -> list[str]:
        """The causes tritonserver logged for not starting, oldest first, each once: its ``E`` lines (``Poll failed
        for model directory 'stray': failed to open text file for read .../config.pbtxt``, an ensemble naming
        a model that is not available) and its final ``error: creating server: ...``, with mpirun's tags removed
        and the GPU-less start's own noise (:data:`_NOISE`) left out. At most ``max_lines``; the last line, the
        reason it exited, is always kept.

        Source: tritonserver 2.51 log format (``model_repository_manager.cc``, ``model_lifecycle.cc``, ``main.cc``).
        """
        found: list[str] = []
        final: str | None = None
        for raw in _MPI_TAG_RE.sub("", self._last(max_bytes, 0)).splitlines():
            line = raw.strip()
            match = _ERROR_LINE_RE.match(line)
            if match is not None:
                text = match.group(1).split("\\n")[0].strip()
                if text and not any(n in text for n in _NOISE) and text not in found:
                    found.append(text)
                continue
            match = _CREATE_SERVER_RE.match(line)
            if match is not None:
                final = f"creating server: {match.group(1).strip()}"
        if final is not None:
            found = [*found[: max_lines - 1], final]
        return found[:max_lines]

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
