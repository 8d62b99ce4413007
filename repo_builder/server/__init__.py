"""Launching tritonserver on a model repository: find the binary, plan the ranks, preflight, start, wait, stop.

Public API (stable; other modules and tests use it)::

    from repo_builder.server import LaunchConfig, TritonServer, find_tritonserver

    with TritonServer(LaunchConfig(model_repo=repo, http_port=h, grpc_port=g, metrics_port=m)) as server:
        ...  # server.http_url, server.grpc_url, server.pids, server.log_tail(40)

Modules: :mod:`.binary` (finding tritonserver, nvidia-pytriton environment), :mod:`.config` (options,
repository scan, world-size resolution), :mod:`.command` (rank and mpirun argv), :mod:`.preflight` (ports,
/dev/shm, other servers), :mod:`.process` (``TritonServer``), :mod:`.procs` (/proc helpers), :mod:`.run`
(foreground/detached launch and stop used by the CLI).
"""

from .binary import TritonBinary, find_tritonserver
from .command import launch_argv, rank_argv, shm_prefix
from .config import LaunchConfig, LaunchPlan, ModelEntry, RepositoryInfo, resolve_plan, scan_repository
from .process import TritonServer, default_pid_file

__all__ = ["LaunchConfig", "LaunchPlan", "ModelEntry", "RepositoryInfo", "TritonBinary", "TritonServer",
           "default_pid_file", "find_tritonserver", "launch_argv", "rank_argv", "resolve_plan", "scan_repository",
           "shm_prefix"]
