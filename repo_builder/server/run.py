"""What ``repo-builder launch`` and ``repo-builder stop`` do (the CLI only parses arguments and calls these).

Foreground launch (default) stays attached like a container entry point should (case B13: upstream's
script returned at once): it copies the server log to stdout, turns SIGINT/SIGTERM into a bounded stop of
the tritonserver ranks (never to mpirun first) and exits 128 + the signal, watches every model's Python
process (a dead one stops the server, exit :data:`MODEL_DIED_EXIT`) and otherwise returns the server's
exit code. ``--detach`` returns once the server is ready and leaves a pid file for ``repo-builder stop``;
nothing watches a detached server.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from ..errors import LaunchError
from .config import LaunchConfig
from .launch_state import LaunchInterrupted, default_pid_file
from .preflight import servers_on_repository
from .process import TritonServer
from .server_log import log_follower


def _exit_code(code: int | None, fallback: int) -> int:
    if code is None:
        return fallback
    return 128 - code if code < 0 else code  # Popen reports death by signal N as -N


def _describe_ready(server: TritonServer, elapsed: float) -> str:
    plan = server.plan
    ranks = f"{plan.world_size} rank(s){' via mpirun' if plan.use_mpi else ''}" if plan else "1 rank"
    models = len(server.repository.models) if server.repository else 0
    return (
        f"ready in {elapsed:.2f} s: {models} model(s) READY, {ranks}; HTTP {server.http_url}, "
        f"gRPC {server.grpc_url}, metrics {server.metrics_url}"
    )


#: Exit code of a foreground launch stopped because a model process died (tritonserver's own codes are 0/1).
MODEL_DIED_EXIT = 3


def _echo_dry_run(server: TritonServer, config: LaunchConfig, echo: Callable[[str], None]) -> None:
    """Echo what a ``--dry-run`` launch would run (nothing is started): each rank's host (with a hostfile), the
    orchestrator's participants or each rank's devices, then the command line, one shell-quoted line."""
    import shlex

    plan = server.plan
    if plan is not None and plan.rank_hosts is not None:
        for rank, host in enumerate(plan.rank_hosts):
            role = "all models + HTTP/gRPC/metrics" if rank == 0 else ",".join(plan.trtllm_models)
            echo(f"rank {rank} -> {host} ({role})")
    if plan is not None and plan.orchestrator is not None:
        for line in plan.orchestrator.lines():
            echo(line)
    elif plan is not None:
        import os

        from .devices import rank_device_lines

        env = {**os.environ, **server.env}
        for line in rank_device_lines(
            config.model_repo,
            plan.trtllm_models[0],
            plan.world_size,
            env,
            rank_hosts=plan.rank_hosts,
            exported=tuple(server.env),
        ):
            echo(line)
    echo(" ".join(shlex.quote(a) for a in server.argv))


def _launch_detached(server: TritonServer, config: LaunchConfig, echo: Callable[[str], None]) -> None:
    """Start ``server``, wait until it is ready, start the OpenAI front end beside it (``--openai-port``) and
    write the pid file(s) ``repo-builder stop`` reads (``--pid-file`` and always the default location).

    Raises:
        LaunchError: the server never became ready (the caller stops what was started).
    """
    server.start()
    elapsed = server.wait_ready()
    default = default_pid_file(config.model_repo)
    pid_file = Path(config.pid_file) if config.pid_file else default
    # the default location always gets a copy, so `repo-builder stop REPO` finds any detached launch
    files = sorted({str(pid_file.absolute()), str(default)})
    echo(_describe_ready(server, elapsed))
    if config.openai_port is not None:
        from .frontend import start_beside

        start_beside(server, config.openai_port, echo=echo, detach=True)  # exits when tritonserver does
    for path in files:
        server.write_pid_file(Path(path), extra={"pid_files": files})
    echo(
        f"detached (pids {' '.join(map(str, server.pids))}); pid file {pid_file}; stop with: "
        f"repo-builder stop --pid-file {pid_file}"
    )


def _log_thread(server: TritonServer, done: threading.Event) -> threading.Thread:
    """A daemon thread (not started) that copies the server log to stdout until ``done`` is set."""

    def emit(text: str) -> None:
        sys.stdout.write(text)
        sys.stdout.flush()

    return threading.Thread(target=log_follower, args=(server.log_path, emit, done.is_set), daemon=True)


def _serve_foreground(
    server: TritonServer, config: LaunchConfig, follower: threading.Thread | None, echo: Callable[[str], None]
) -> int:
    """Start ``server`` (and ``follower``), wait until it is ready, then until it or the OpenAI front end
    (``--openai-port``) exits; stop it and return the launch's exit code (see :func:`launch`).

    Raises:
        LaunchError: the server never became ready (the caller stops what was started).
    """
    server.start()
    if follower is not None:
        follower.start()
    elapsed = server.wait_ready()
    echo(_describe_ready(server, elapsed))
    if config.openai_port is not None:
        from .frontend import start_beside, wait_either

        front = start_beside(server, config.openai_port, echo=echo)
        code, front_code = wait_either(server, front)
        front.stop()  # before the server, so no request is left half-served by a stopping Triton
        if front_code is not None:
            echo(f"error: the OpenAI front end exited with code {front_code}; stopping tritonserver")
            server.stop()
            return front_code or 1
    else:
        code = server.wait()
    return _stop_after_serving(server, config, code, echo)


def _stop_after_serving(
    server: TritonServer, config: LaunchConfig, code: int | None, echo: Callable[[str], None]
) -> int:
    """Say why serving ended, stop ``server`` (its exit code was ``code``, None when unknown), say how the stop
    went, and return the launch's exit code: 128 + the signal, :data:`MODEL_DIED_EXIT`, else the server's."""
    if server.interrupted:
        echo(
            f"signal {server.interrupted}: stopping tritonserver (ranks get SIGTERM, in-flight requests "
            f"{config.exit_timeout} s; a second signal kills)"
        )
    elif server.model_died is not None:
        name, pid = server.model_died
        echo(
            f"error: model '{name}': its Python backend process (pid {pid}) died; tritonserver cannot serve "
            "it any more, stopping tritonserver"
        )
    else:
        echo(f"tritonserver exited with code {code}; cleaning up")
    code = server.stop()
    if server.stop_report.describe():
        echo(f"stop: {server.stop_report.describe()}")
    if server.stop_report.unload_expired:
        echo(
            f"models were still unloading after --unload-timeout {config.unload_timeout:g} s (no request was in "
            "flight); tritonserver was killed"
        )
    elif server.exit_timeout_expired:
        echo(
            f"in-flight requests did not finish within --exit-timeout {config.exit_timeout} s; they were "
            "failed and tritonserver was killed (it does not exit by itself then)"
        )
    elif code == -signal.SIGKILL:
        echo(f"tritonserver did not stop in time and was killed with SIGKILL; see {server.log_path}")
    if server.interrupted:
        return 128 + server.interrupted
    if server.model_died is not None:
        return MODEL_DIED_EXIT
    return _exit_code(code, 1)


def launch(
    config: LaunchConfig, *, echo: Callable[[str], None] = print, follow_log: bool = True, dry_run: bool = False
) -> int:
    """Run ``repo-builder launch``: preflight, start, wait for ready, then stay attached or detach.

    SIGINT/SIGTERM are caught from the start: before the server is ready they stop everything started and
    raise :class:`~.process.LaunchInterrupted` (exit code 128 + the signal); in the foreground they stop
    the server (ranks get SIGTERM and ``config.exit_timeout`` seconds for in-flight requests, what is left
    after ``config.stop_timeout`` gets SIGKILL, the launch's ``/dev/shm`` regions are removed) and the
    launch returns 128 + the signal (130 for SIGINT, 143 for SIGTERM) whatever the server's own code.

    Returns:
        the process exit code: 0 after ``--detach`` or ``dry_run``; 128+N after signal N;
        :data:`MODEL_DIED_EXIT` when a model's Python process died while serving (the server is stopped);
        otherwise the server's exit code (128+N when it died from signal N).

    Raises:
        LaunchError: a preflight check failed (nothing started) or the server never became ready (everything
            stopped; the message ends with the log tail).
        LaunchInterrupted: a signal arrived before the server was ready.
    """
    server = TritonServer(config)
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}

    def on_signal(signum: int, _frame: object) -> None:
        server.interrupt(signum)

    for sig in previous:
        signal.signal(sig, on_signal)
    done = threading.Event()
    follower = None
    detached = False
    try:
        server.prepare()
        for note in server.notes:
            echo(f"note: {note}")
        if dry_run:
            _echo_dry_run(server, config, echo)
            return 0
        plan = server.plan
        assert plan is not None
        echo(f"world size {plan.world_size} ({plan.world_size_origin}); log: {server.log_path}")
        if server.interrupted:
            raise LaunchInterrupted(
                f"interrupted by signal {server.interrupted} before the server was started",
                key="signal",
                signum=server.interrupted,
            )

        if config.detach:
            _launch_detached(server, config, echo)
            detached = True  # the server outlives this process
            return 0

        if follow_log:
            follower = _log_thread(server, done)
        return _serve_foreground(server, config, follower, echo)
    finally:
        if not detached:
            server.stop()  # no-op when nothing started or already stopped; covers errors and signals
        done.set()
        if follower is not None and follower.is_alive():
            follower.join(timeout=2)
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def stop(
    *,
    pid_file: Path | None = None,
    model_repo: Path | None = None,
    timeout: float | None = None,
    echo: Callable[[str], None] = print,
) -> int:
    """Run ``repo-builder stop``: stop a ``--detach`` launch cleanly and remove its pid file.

    ``timeout``: seconds of graceful stop before SIGKILL; None = the launch's own ``stop_timeout``.

    Raises:
        LaunchError: neither a pid file nor a repository was given, or there is no pid file for it.
    """
    if pid_file is None:
        if model_repo is None:
            raise LaunchError("nothing to stop: give --pid-file or the repository", key="--pid-file")
        pid_file = default_pid_file(model_repo)
        if not pid_file.is_file():
            others = servers_on_repository(model_repo)
            hint = (
                (
                    f"tritonserver pid {', '.join(map(str, others))} serves it but was not started with "
                    "`repo-builder launch --detach`; stop it with kill -TERM <pid>"
                )
                if others
                else "was it started with `repo-builder launch --detach` (or with --pid-file)?"
            )
            raise LaunchError("no detached launch recorded for this repository", path=model_repo, hint=hint)
    server = TritonServer.attach(pid_file)
    running = server.is_running() or bool(server.processes.ours())
    t0 = time.monotonic()
    server.stop(timeout)
    for path in {str(pid_file), *server.pid_files}:
        try:
            # a copy at the default location may belong to a newer launch on the same repository
            if path != str(pid_file) and TritonServer.attach(Path(path)).launch_id != server.launch_id:
                continue
            os.unlink(path)
        except (FileNotFoundError, LaunchError):
            pass
    if running:
        waited = server.stop_report.describe()
        echo(f"stopped launch {server.launch_id} in {time.monotonic() - t0:.1f} s" + (f" ({waited})" if waited else ""))
    else:
        echo(f"launch {server.launch_id} was no longer running; cleaned up")
    return 0
