"""Launching tritonserver on a model repository: find the binary, plan the ranks, preflight, start, wait, stop.

Public API (stable; other modules and tests use it)::

    from repo_builder.server import LaunchConfig, TritonServer, find_tritonserver

    with TritonServer(LaunchConfig(model_repo=repo, http_port=h, grpc_port=g, metrics_port=m)) as server:
        ...  # server.http_url, server.grpc_url, server.pids, server.log_tail(40)

Modules: :mod:`.binary` (finding tritonserver, nvidia-pytriton environment), :mod:`.config` (options,
repository scan, world-size resolution), :mod:`.command` (rank and mpirun argv), :mod:`.preflight` (ports,
/dev/shm, other servers), :mod:`.process` (``TritonServer``: start, wait-for-ready, wait, stop, pid files),
:mod:`.launch_processes` (which processes are ours, SIGTERM/SIGKILL, /dev/shm clean-up), :mod:`.probe` (HTTP
health/model-state probes), :mod:`.server_log` (log tail, load errors, follower), :mod:`.procs` (/proc helpers),
:mod:`.run` (foreground/detached launch and stop used by the CLI), :mod:`.options` (help texts and defaults).

Names are imported lazily so that ``repo_builder.server.options`` stays cheap for the CLI.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_EXPORTS = {
    "TritonBinary": "binary",
    "find_tritonserver": "binary",
    "launch_argv": "command",
    "rank_argv": "command",
    "shm_prefix": "command",
    "LaunchConfig": "config",
    "LaunchPlan": "config",
    "ModelEntry": "config",
    "RepositoryInfo": "config",
    "resolve_plan": "config",
    "scan_repository": "config",
    "TritonServer": "process",
    "LaunchInterrupted": "launch_state",
    "default_pid_file": "launch_state",
}

__all__ = sorted(_EXPORTS)

if TYPE_CHECKING:  # pragma: no cover
    from .binary import TritonBinary, find_tritonserver
    from .command import launch_argv, rank_argv, shm_prefix
    from .config import LaunchConfig, LaunchPlan, ModelEntry, RepositoryInfo, resolve_plan, scan_repository
    from .launch_state import LaunchInterrupted, default_pid_file
    from .process import TritonServer


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value
