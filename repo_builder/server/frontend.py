"""The OpenAI front end (:mod:`repo_builder.openai`) as a child of ``repo-builder launch --openai_port PORT``.

The launcher starts it as a separate process and never imports :mod:`repo_builder.openai` (fastapi and
uvicorn are optional: :func:`check_installed`).

Started once tritonserver is ready, as ``python -m repo_builder openai ... --watch-pid <rank 0>``: it shuts
down by itself when tritonserver exits, and its command line carries the launch id, so
:meth:`repo_builder.server.process.TritonServer.stop` (also ``repo-builder stop`` of a detached launch)
waits for it like for any other process of the launch. In the foreground, a stop sends it SIGTERM first
(uvicorn then closes open streams within a few seconds) and the launcher's exit code stays the server's;
if the front end dies on its own, the launch stops tritonserver and exits with the front end's code.
Its output goes to the server's log file.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..errors import LaunchError

POLL_S = 0.1


def check_installed() -> None:
    """Raise :class:`LaunchError` (naming ``--openai_port``) when fastapi/uvicorn are missing."""
    import importlib.util

    missing = [m for m in ("fastapi", "uvicorn") if importlib.util.find_spec(m) is None]
    if missing:
        raise LaunchError(
            f"--openai_port needs {', '.join(missing)}, which is not installed",
            key="--openai_port",
            hint="pip install 'repo-builder[openai]'",
        )


class FrontEnd:
    """One ``repo-builder openai`` process serving ``port`` for a ready :class:`TritonServer`."""

    def __init__(self, server: Any, port: int) -> None:
        self.server = server
        self.port = port
        self.proc: subprocess.Popen[bytes] | None = None

    def argv(self) -> list[str]:
        cfg = self.server.config
        ranks = self.server.rank_pids()
        watch = ":".join(map(str, ranks[0])) if 0 in ranks else str(self.server.processes.launcher_pid)
        return [
            sys.executable,
            "-m",
            "repo_builder",
            "openai",
            "--repo",
            os.path.abspath(cfg.model_repo),
            "--grpc-url",
            self.server.grpc_url,
            "--host",
            cfg.http_address,
            "--port",
            str(self.port),
            "--watch-pid",
            watch,
            "--log-level",
            "warning",
            f"--launch-id={self.server.launch_id}",
        ]

    def start(self, *, detach: bool = False) -> FrontEnd:
        with open(self.server.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                self.argv(), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=detach
            )
        return self

    @property
    def url(self) -> str:
        from .probe import connect_host

        return f"http://{connect_host(self.server.config.http_address)}:{self.port}"

    def wait_ready(self, timeout_s: float, interrupted: Callable[[], bool] = lambda: False) -> float:
        """Wait until ``GET /health`` answers 200.

        Raises:
            LaunchError: the process exited or did not become ready in ``timeout_s`` (the log tail is shown).
        """
        from .probe import connect_host, http_request

        assert self.proc is not None
        t0 = time.monotonic()
        host = connect_host(self.server.config.http_address)
        while time.monotonic() - t0 < timeout_s and not interrupted():
            code = self.proc.poll()
            if code is not None:
                raise LaunchError(
                    f"the OpenAI front end exited with code {code} before it was ready:\n{self.server.log_tail(20)}",
                    key="--openai_port",
                )
            got = http_request(host, self.port, "GET", "/health")
            if got is not None and got[0] == 200:
                return time.monotonic() - t0
            time.sleep(POLL_S)
        if interrupted():
            return time.monotonic() - t0
        self.stop()
        raise LaunchError(
            f"the OpenAI front end was not ready after {timeout_s:.0f} s:\n{self.server.log_tail(20)}",
            key="--openai_port",
        )

    def poll(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def stop(self, timeout_s: float = 10.0) -> int | None:
        """SIGTERM, then SIGKILL after ``timeout_s``; returns the exit code. Safe to call twice."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)
        return self.proc.returncode


def start_beside(server: Any, port: int, *, echo: Callable[[str], None], detach: bool = False) -> FrontEnd:
    """Start the front end for a ready ``server`` and wait until it serves (``config.timeout`` seconds).

    Raises:
        LaunchError: it failed to start (it is stopped; the caller stops the server).
    """
    front = FrontEnd(server, port).start(detach=detach)
    elapsed = front.wait_ready(server.config.timeout, lambda: bool(server.interrupted))
    echo(f"OpenAI API ready in {elapsed:.2f} s: {front.url}/v1 (model {served_name(server.config.model_repo)})")
    return front


def served_name(repo: Path) -> str:
    """The served model id(s), quoted and comma-separated (``'alpha', 'beta'`` for several LLMs)."""
    from ..repository.lockfile import read_lock_view, read_serving_info, repository_layout

    layout = repository_layout(repo)
    if layout == "whisper":  # repo_builder/openai/audio.py
        return "'whisper'"
    if layout == "multimodal":  # repo_builder/openai/vision.py
        from ..repository.lock_schema import multimodal_served_id as served_id

        view = read_lock_view(repo)  # the layout was read from it, or from an old file name (then LLaVA)
        facts = view.data.get("facts") if view is not None else None
        return f"'{served_id(facts if isinstance(facts, dict) else {})}'"
    try:
        return ", ".join(f"'{info.model_name}'" for info in read_serving_info(repo))
    except Exception:  # noqa: BLE001 - only for the message
        return "'?'"


def wait_either(server: Any, front: FrontEnd) -> tuple[int | None, int | None]:
    """Block until tritonserver exits, a stop is requested, a model process dies, or the front end exits.

    Returns:
        (what :meth:`TritonServer.wait` returned, the front end's exit code if it exited first, else None).
    """
    code = server.wait(until=lambda: front.poll() is not None)
    front_code = front.poll()
    if front_code is not None and (code is not None or server.interrupted or server.model_died is not None):
        front_code = None  # it went down with the server (watch-pid) or the stop: not the cause
    return code, front_code
