"""What a launch keeps outside the repository and how a wait for it ends early: ``<tmp>/repo-builder/<kind>``
state folders (:func:`state_dir`), the pid file ``--detach`` writes by default (:func:`default_pid_file`), and
:class:`LaunchInterrupted` (a signal while waiting for the server). :mod:`.process` re-exports these names.
"""

from __future__ import annotations

import os
import signal
import tempfile
from pathlib import Path
from typing import Any

from ..errors import LaunchError


class LaunchInterrupted(LaunchError):
    """A signal arrived while waiting for the server; everything started was stopped.

    ``exit_code`` is 128 + the signal number (130 for SIGINT, 143 for SIGTERM), the shell's convention.
    """

    exit_code = 128 + signal.SIGINT

    def __init__(self, message: str, *, signum: int = signal.SIGINT, **kwargs: Any) -> None:
        super().__init__(message, **kwargs)
        self.signum = int(signum)
        self.exit_code = 128 + self.signum


def state_dir(kind: str) -> Path:
    """``<tmp>/repo-builder/<kind>`` (``logs`` or ``run``), created if needed."""
    path = Path(tempfile.gettempdir()) / "repo-builder" / kind
    path.mkdir(parents=True, exist_ok=True)
    return path


def default_pid_file(model_repo: Path) -> Path:
    """Where ``--detach`` writes its pid file for ``model_repo`` when ``--pid-file`` is not given."""
    import hashlib

    digest = hashlib.sha256(os.path.realpath(model_repo).encode()).hexdigest()[:16]
    return state_dir("run") / f"tritonserver-{digest}.json"


def write_pid_file(record: dict[str, Any], path: Path) -> Path:
    """Write the pid-file ``record`` (JSON) to ``path`` atomically (a temp file renamed over it); returns the path."""
    import json

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(record, indent=2) + "\n")
    os.replace(tmp, path)
    return path
