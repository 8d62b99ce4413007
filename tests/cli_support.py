"""The ``repo-builder`` command line in a child process, the way a user runs it: its own interpreter, so exit
codes, signals, stdout and stderr are real (``python -m repo_builder``, the venv's console script's module)."""

from __future__ import annotations

import subprocess
import sys
from typing import Any


def cli_argv(*args: object) -> list[str]:
    """``[python, -m, repo_builder, *args]`` (each argument as text), for ``subprocess.Popen``."""
    return [sys.executable, "-m", "repo_builder", *map(str, args)]


def render_args(engine: object, tokenizer: object, out: object, *extra: object) -> list[str]:
    """The arguments of ``repo-builder render`` for one engine and tokenizer into ``out``, then ``extra``."""
    return ["render", "--engine-dir", str(engine), "--tokenizer-dir", str(tokenizer), "--output", str(out)] + [
        str(x) for x in extra
    ]


def run_cli(*args: object, timeout: float = 120, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    """``repo-builder ARGS`` run to its end, stdout and stderr captured as text; ``kwargs`` (e.g. ``env``) go to
    ``subprocess.run``.

    Raises:
        subprocess.TimeoutExpired: it ran past ``timeout`` seconds.
    """
    return subprocess.run(cli_argv(*args), capture_output=True, text=True, timeout=timeout, **kwargs)


def assert_refused(result: Any, *needles: str, code: int = 2) -> str:
    """Check that a command was refused the way every refusal must be: exit code ``code`` (a
    :class:`~repo_builder.errors.RepoBuilderError`'s 2), each of ``needles`` (the file, key or flag at fault, the
    fix) in its stderr, and no traceback anywhere. ``result`` is a ``subprocess.CompletedProcess`` of
    :func:`run_cli` or a ``typer.testing.CliRunner`` result. Returns the stderr."""
    exit_code = result.returncode if isinstance(result, subprocess.CompletedProcess) else result.exit_code
    err, out = result.stderr or "", result.stdout or ""
    assert exit_code == code, f"exit code {exit_code}, not {code}: {err or out}"
    for needle in needles:
        assert needle in err, f"{needle!r} not in {err!r}"
    assert "Traceback" not in err + out, err + out
    return err
