"""``TritonServer``: start tritonserver (one process or mpirun ranks), wait until ready, stop cleanly.

Rooms it is built from: :mod:`.launch_processes` (which processes are ours, SIGTERM/SIGKILL, ``/dev/shm``
clean-up; the lifecycle facts), :mod:`.probe` (HTTP health and model-state probes), :mod:`.server_log`
(the log file: tail, load errors, follower), :mod:`.preflight` and :mod:`.command` (checks and argv).

A readiness probe can be answered by another server on the same port, so readiness also requires that our
rank 0 is alive and holds the listening HTTP socket (observed with tritonserver 2.51.0 of nvidia-pytriton 0.7.0).
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..errors import LaunchError
from . import procs
from .binary import TritonBinary, find_tritonserver
from .command import launch_argv, shm_prefix
from .config import LaunchConfig, LaunchPlan, RepositoryInfo, resolve_plan, scan_repository
from .launch_command import launch_env, rank_argvs
from .launch_processes import MODEL_POLL_S, POLL_S, LaunchProcesses, StopReport
from .launch_state import LaunchInterrupted, state_dir, write_pid_file
from .preflight import check_no_other_server, check_ports, check_shm, shm_requirement
from .probe import connect_host, is_ready, model_states
from .server_log import TAIL_LINES, ServerLog


class TritonServer:
    """A tritonserver launch on one model repository.

    Usage::

        with TritonServer(LaunchConfig(model_repo=repo, http_port=p1, grpc_port=p2, metrics_port=p3,
                                       no_mpi=True)) as server:   # start() + wait_ready(config.timeout)
            requests.post(f"{server.http_url}/v2/models/ensemble/generate", json=...)
        # leaving the block stops every rank and removes this launch's /dev/shm regions

    Attributes:
        config: the options.
        launch_id: unique per launch; prefix of every ``/dev/shm`` region the ranks create.
        log_path: file receiving the stdout/stderr of every rank (mpirun ``--tag-output`` lines for N > 1).
        notes: human-readable remarks made while planning (e.g. automatic ``--oversubscribe``).
        argv: the command started (``mpirun ...`` or a single tritonserver argv); set by :meth:`prepare`.
        returncode: exit code of the launched process once it has exited, else ``None``.
    """

    def __init__(self, config: LaunchConfig, *, binary: TritonBinary | None = None) -> None:
        self.config = config
        #: the processes of this launch (launched process, ranks, stubs).
        self.processes = LaunchProcesses("rb" + secrets.token_hex(4))
        self.notes: list[str] = []
        self.argv: list[str] = []
        self.env: dict[str, str] = {}
        self.plan: LaunchPlan | None = None
        self.repository: RepositoryInfo | None = None
        self.log_path: Path = (
            Path(config.log_file) if config.log_file else state_dir("logs") / f"tritonserver-{self.launch_id}.log"
        )
        self._binary = binary
        self._started_at: float | None = None
        self._kill_now = False
        #: pid files a detached launch was recorded in (set by :meth:`attach`).
        self.pid_files: list[str] = []
        #: signal number set by :meth:`interrupt` (foreground launch: SIGINT/SIGTERM received), else 0.
        self.interrupted = 0
        #: set by :meth:`stop` when tritonserver gave up on in-flight requests (then it is SIGKILLed at once).
        self.exit_timeout_expired = False
        #: what the last :meth:`stop` waited for (in-flight requests, model unloads)
        self.stop_report = StopReport()
        #: ``(model, pid)`` of the first model process :meth:`wait` saw die while the server ran, else None.
        self.model_died: tuple[str, int] | None = None

    # ------------------------------------------------------------------ identity and addresses
    @property
    def launch_id(self) -> str:
        """Unique per launch; prefix of every ``/dev/shm`` region the ranks create."""
        return self.processes.launch_id

    @launch_id.setter
    def launch_id(self, value: str) -> None:
        self.processes.launch_id = value

    @property
    def returncode(self) -> int | None:
        """Exit code of the launched process once it has exited, else ``None``."""
        return self.processes.returncode

    @property
    def log(self) -> ServerLog:
        """The server log at :attr:`log_path`."""
        return ServerLog(self.log_path)

    @property
    def http_url(self) -> str:
        """``http://host:port`` of rank 0 (for requests/curl; tritonclient.http wants :attr:`http_hostport`)."""
        return f"http://{self.http_hostport}"

    @property
    def http_hostport(self) -> str:
        """``host:port`` of rank 0's HTTP endpoint (the ``url`` tritonclient.http expects)."""
        host = connect_host(self.config.http_address)
        return f"[{host}]:{self.config.http_port}" if ":" in host else f"{host}:{self.config.http_port}"

    @property
    def grpc_url(self) -> str:
        """``host:port`` of rank 0's gRPC endpoint (the ``url`` tritonclient.grpc expects)."""
        host = connect_host(self.config.http_address)
        return f"[{host}]:{self.config.grpc_port}" if ":" in host else f"{host}:{self.config.grpc_port}"

    @property
    def metrics_url(self) -> str:
        """``http://host:port/metrics`` of rank 0."""
        host = connect_host(self.config.http_address)
        return f"http://{host}:{self.config.metrics_port}/metrics"

    @property
    def shm_prefix(self) -> str:
        """Prefix shared by every ``/dev/shm`` region of this launch (``<launch_id>_``)."""
        return self.processes.shm_prefix

    def rank_shm_prefix(self, rank: int) -> str:
        """``shm-region-prefix-name`` given to ``rank``."""
        return shm_prefix(self.launch_id, rank)

    @property
    def pids(self) -> list[int]:
        """Live processes of this launch: the launched process (mpirun or tritonserver) first, then the ranks."""
        return self.processes.pids

    def rank_pids(self) -> dict[int, tuple[int, int]]:
        """``{rank: (pid, start time)}`` of the live tritonserver ranks found so far."""
        return self.processes.rank_pids()

    # ------------------------------------------------------------------ planning
    def prepare(self) -> list[str]:
        """Run every preflight check and build the command without starting anything; returns the argv.

        Raises:
            LaunchError: the repository is missing/empty/unparsable, world size or names are inconsistent,
                a port is taken, /dev/shm is too small, another server uses the repository (without
                ``force``), or tritonserver/mpirun cannot be found.
        """
        cfg = self.config
        repo = scan_repository(cfg.model_repo)
        binary = self._binary or find_tritonserver(cfg.tritonserver)
        self._binary = binary
        mpirun = shutil.which("mpirun", path=binary.environ().get("PATH"))
        plan = resolve_plan(cfg, repo, cpu_count=os.cpu_count() or 1, have_mpirun=mpirun is not None)
        self.repository, self.plan = repo, plan
        self.processes.plan = plan
        self.notes = list(plan.notes)
        others = check_no_other_server(cfg.model_repo, cfg.force)
        if others:
            self.notes.append(
                f"--force: starting although tritonserver pid {', '.join(map(str, others))} "
                "already serves this repository"
            )
        ports = {"--http_port": cfg.http_port, "--grpc_port": cfg.grpc_port, "--metrics_port": cfg.metrics_port}
        if cfg.openai_port is not None:
            from .frontend import check_installed

            check_installed()
            ports["--openai_port"] = cfg.openai_port
        self.notes += check_ports(cfg.http_address, ports)
        hosts = plan.rank_hosts
        local = None if hosts is None else [r for r, h in enumerate(hosts) if h == hosts[0]]
        stubs, needed = shm_requirement(repo, plan.trtllm_models, plan.world_size, ranks=local)
        check_shm(stubs, needed)
        ranks = rank_argvs(cfg, binary, plan, self.launch_id)
        self.env = launch_env(cfg, binary, plan)
        self.argv = launch_argv(
            ranks,
            use_mpi=plan.use_mpi,
            oversubscribe=plan.oversubscribe,
            export_env=sorted(self.env),
            hostfile=cfg.hostfile,
            map_by=None if cfg.hostfile is None else "slot",
        )
        return self.argv

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> TritonServer:
        """Preflight (:meth:`prepare`) and start the processes; returns immediately (see :meth:`wait_ready`).

        Raises:
            LaunchError: a preflight check failed (nothing was started) or the command could not be executed.
        """
        if self.processes.launcher_pid is not None:
            raise LaunchError("this TritonServer was already started", hint="create a new TritonServer")
        if not self.argv:
            self.prepare()
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ)
        env.update(self.env)
        with open(self.log_path, "ab") as log:
            log.write(f"# repo-builder launch {self.launch_id}: {subprocess.list2cmdline(self.argv)}\n".encode())
            log.flush()
            self._started_at = time.monotonic()
            try:
                self.processes.spawn(self.argv, env, log)
            except OSError as exc:
                raise LaunchError(f"cannot execute {self.argv[0]}: {exc}", key="--tritonserver") from exc
        return self

    def log_tail(self, n: int = TAIL_LINES) -> str:
        """The last ``n`` lines of the server log (empty string if there is none yet)."""
        return self.log.tail(n)

    def load_errors(self) -> dict[str, str]:
        """``{model: first line of the reason}`` of every model the log says failed to load."""
        return self.log.load_errors()

    def _fail(self, message: str, **kwargs: Any) -> LaunchError:
        self.stop()
        errors = self.load_errors()
        if errors:
            message += "\nmodels that failed to load:\n" + "\n".join(f"  {m}: {r}" for m, r in errors.items())
            kwargs.setdefault("key", next(iter(errors)))
        logged = [line for line in self.log.triton_errors() if not any(r and r in line for r in errors.values())]
        if logged:  # what tritonserver said, which the log tail below may no longer show (mpirun's teardown)
            message += "\ntritonserver logged:\n" + "\n".join(f"  {line}" for line in logged)
        tail = self.log_tail(TAIL_LINES).rstrip()
        text = f"{message}\n--- last {TAIL_LINES} lines of {self.log_path} ---\n{tail}" if tail else message
        return LaunchError(text, **kwargs)

    def _endpoint(self) -> tuple[str, int]:
        return connect_host(self.config.http_address), self.config.http_port

    def model_states(self) -> dict[str, tuple[str, str]] | None:
        """``{model: (state, reason)}`` from rank 0's ``POST /v2/repository/index``; ``None`` if it does not answer."""
        return model_states(*self._endpoint())

    def wait_ready(self, timeout_s: float | None = None) -> float:
        """Block until ``/v2/health/ready`` answers 200 and every model of the repository is READY.

        Readiness counts only while our processes are alive (every rank found for N > 1) and rank 0 itself
        holds the listening HTTP socket, so another server on the same port cannot pass for ours. Polls every
        :data:`POLL_S` seconds.

        Returns:
            seconds from :meth:`start` to ready.

        Raises:
            LaunchError: a process exited, a model became UNAVAILABLE, the port belongs to someone else, or
                ``timeout_s`` (default ``config.timeout``) passed. Everything started is stopped first and the
                message ends with the log tail.
        """
        if self._started_at is None:
            raise LaunchError("wait_ready() before start()", hint="call start() first")
        timeout = self.config.timeout if timeout_s is None else timeout_s
        deadline = time.monotonic() + timeout
        expected = set(self.repository.model_names) if self.repository else set()
        world = self.plan.world_size if self.plan else 1
        seen_ranks: set[int] = set()
        last_states: dict[str, tuple[str, str]] | None = None
        while True:
            if self.interrupted:
                self.stop()
                raise LaunchInterrupted(
                    f"interrupted by signal {self.interrupted} before the server was ready; stopped",
                    key="signal",
                    signum=self.interrupted,
                )
            if not self.processes.alive():
                if self.interrupted:  # the signal arrived while we looked: the stop was ours
                    continue
                code = self.returncode
                raise self._fail(
                    f"tritonserver exited{f' with code {code}' if code is not None else ''} before it was ready"
                )
            live = self.rank_pids()
            gone = seen_ranks - set(live)
            if gone:
                raise self._fail(f"rank {min(gone)} exited before the server was ready")
            seen_ranks |= set(live)
            if len(live) == world and 0 in live:
                states, ready = self._poll_ready(live, expected)
                if states is not None:
                    last_states = states
                if ready:
                    return time.monotonic() - self._started_at
            if time.monotonic() >= deadline:
                raise self._not_ready_error(timeout, expected, last_states)
            time.sleep(POLL_S)

    def _poll_ready(
        self, live: dict[int, tuple[int, int]], expected: set[str]
    ) -> tuple[dict[str, tuple[str, str]] | None, bool]:
        """One readiness look while every rank lives (``live``: :meth:`rank_pids`, rank 0 included).

        Returns:
            ``(states, ready)``: rank 0's {model: (state, reason)} (None while ``/v2/health/ready`` does not
            answer 200), and whether every model of ``expected`` is READY and rank 0 holds the HTTP port.

        Raises:
            LaunchError: a model of ``expected`` is UNAVAILABLE, or a process not of this launch holds the HTTP
                port (everything started is stopped first, :meth:`_fail`).
        """
        if not is_ready(*self._endpoint()):
            return None, False
        states = self.model_states() or {}
        failed = {m: r for m, (s, r) in states.items() if s == "UNAVAILABLE" and m in expected}
        if failed:
            name, reason = sorted(failed.items())[0]
            raise self._fail(f"model {name} failed to load: {reason}", key=name)
        if not all(states.get(m, ("", ""))[0] == "READY" for m in expected):
            return states, False
        rank0_pid = live[0][0]
        if self.config.http_port in procs.listening_tcp_ports(rank0_pid):
            return states, True
        # Only a listener positively held by a process that is not ours counts as another
        # server; sockets of an earlier server that are closing (TIME_WAIT, FIN_WAIT) never
        # listen, and a listener we could not attribute is looked at again on the next poll.
        ours = {info.pid for info in self.processes.ours()}
        foreign = sorted(procs.port_listeners(self.config.http_port) - ours)
        if foreign:
            who = ", ".join(f"{pid} ({procs.comm(pid)})" for pid in foreign)
            raise self._fail(
                f"port {self.config.http_port} answers, but it is held by pid {who}, "
                f"not by our tritonserver (pid {rank0_pid})",
                key="--http_port",
                hint="another server uses the port; pick another --http_port",
            )
        return states, False

    def _not_ready_error(
        self, timeout: float, expected: set[str], last_states: dict[str, tuple[str, str]] | None
    ) -> LaunchError:
        """The error of a launch not ready after ``timeout`` seconds, naming the models of ``expected`` not READY
        in ``last_states`` (or that ``/v2/health/ready`` never answered 200); stops everything first (:meth:`_fail`)."""
        pending = sorted(m for m in expected if (last_states or {}).get(m, ("",))[0] != "READY")
        detail = (
            ", ".join(f"{m} ({(last_states or {}).get(m, ('not listed',))[0] or 'not listed'})" for m in pending)
            if last_states is not None
            else f"{self.http_url}/v2/health/ready never returned 200"
        )
        return self._fail(
            f"not ready after {timeout:g} s: {detail}",
            key="--timeout",
            hint="raise --timeout if models load slowly",
        )

    def model_processes(self) -> dict[int, tuple[int, str]]:
        """``{pid: (start time, model name)}`` of the live Python-backend stub processes of our ranks."""
        return self.processes.model_processes()

    def wait(
        self, timeout_s: float | None = None, *, watch_models: bool = True, until: Callable[[], bool] | None = None
    ) -> int | None:
        """Wait for the launched process to exit (``None`` = forever); returns its exit code or ``None``.

        ``until``: polled every :data:`POLL_S` seconds; True makes the wait return ``None`` (the OpenAI front
        end of ``launch --openai_port`` exited).

        Also returns ``None`` when :meth:`interrupt` was called, or (``watch_models``) when a model's Python
        stub process died while the server still reports itself ready: tritonserver 2.51 neither notices
        that (``/v2/health/ready`` stays 200) nor fails the requests the dead process held, so the launcher
        must. :attr:`model_died` then names the model and the pid. Stubs are checked every
        :data:`MODEL_POLL_S` seconds; stubs that appear later (a model loaded later) join the watch.
        """
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        watched = self.model_processes() if watch_models else {}
        next_check = time.monotonic() + MODEL_POLL_S
        while self.processes.alive():
            if self._kill_now or self.interrupted or (until is not None and until()):
                return None
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                return None
            if watch_models and now >= next_check:
                next_check = now + MODEL_POLL_S
                dead = [(name, pid) for pid, (start, name) in watched.items() if not procs.is_alive(pid, start)]
                if dead and self.processes.alive() and is_ready(*self._endpoint()):
                    # a stub that dies while the server shuts down by itself is part of that shutdown
                    self.model_died = dead[0]
                    return None
                for pid, entry in self.model_processes().items():
                    watched.setdefault(pid, entry)
                for _name, pid in dead:
                    watched.pop(pid, None)
            time.sleep(POLL_S)
        return self.returncode

    def interrupt(self, signum: int) -> None:
        """Note that a stop was requested (from a signal handler); :meth:`wait_ready` and :meth:`wait` return.

        A second call makes a running :meth:`stop` SIGKILL at once (second Ctrl-C).
        """
        if self.interrupted:
            self._kill_now = True
        self.interrupted = signum

    def stop(self, timeout_s: float | None = None) -> int | None:
        """Stop every process of this launch and remove its ``/dev/shm`` regions; returns the exit code.

        SIGTERM to the ranks, SIGKILL after ``timeout_s`` (default ``config.stop_timeout``), at once on a second
        interrupt or when tritonserver gave up on in-flight requests (``config.exit_timeout`` after the SIGTERM;
        then :attr:`exit_timeout_expired` is set): :meth:`.launch_processes.LaunchProcesses.stop`. Safe to call
        twice and on a server that already exited.
        """
        timeout = self.config.stop_timeout if timeout_s is None else timeout_s
        if self.processes.launcher_pid is None:
            return None
        cfg = self.config
        report = self.processes.stop(
            timeout, self.log, lambda: self._kill_now, exit_timeout=cfg.exit_timeout, unload_timeout=cfg.unload_timeout
        )
        self.stop_report = report
        if report.in_flight_expired:
            self.exit_timeout_expired = True
        return self.returncode

    def __enter__(self) -> TritonServer:
        self.start()
        self.wait_ready()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------------ detach / attach
    def pid_record(self) -> dict[str, Any]:
        """What ``--detach`` writes to the pid file (JSON): pids with start times, prefix, URLs, log path."""
        return {
            "launch_id": self.launch_id,
            "launcher_pid": self.processes.launcher_pid,
            "launcher_start": self.processes.launcher_start,
            "ranks": {str(r): list(ps) for r, ps in self.rank_pids().items()},
            "use_mpi": bool(self.plan and self.plan.use_mpi),
            "world_size": self.plan.world_size if self.plan else 1,
            "model_repo": os.path.abspath(self.config.model_repo),
            "http_url": self.http_url,
            "grpc_url": self.grpc_url,
            "log_file": str(self.log_path),
            "config": self.config.model_dump(mode="json"),
        }

    def write_pid_file(self, path: Path, extra: dict[str, Any] | None = None) -> Path:
        """Write :meth:`pid_record` (plus ``extra``) to ``path`` atomically; returns the path."""
        return write_pid_file({**self.pid_record(), **(extra or {})}, path)

    @classmethod
    def attach(cls, pid_file: Path) -> TritonServer:
        """A :class:`TritonServer` for a launch recorded by ``--detach`` (only :meth:`stop` and friends make sense).

        Raises:
            LaunchError: the pid file is missing or not a repo-builder pid file.
        """
        pid_file = Path(pid_file)
        try:
            record = json.loads(pid_file.read_text())
            config = LaunchConfig.model_validate(record["config"])
            server = cls(config)
            server.launch_id = str(record["launch_id"])
            processes = server.processes
            processes.launcher_pid = int(record["launcher_pid"])
            processes.launcher_start = record.get("launcher_start")
            processes.ranks = {int(r): (int(ps[0]), int(ps[1])) for r, ps in record.get("ranks", {}).items()}
            server.log_path = Path(record["log_file"])
            server.pid_files = [str(p) for p in record.get("pid_files", [])]
            server.plan = processes.plan = LaunchPlan(
                world_size=int(record.get("world_size", 1)),
                world_size_origin="pid file",
                trtllm_models=[],
                use_mpi=bool(record.get("use_mpi")),
                oversubscribe=False,
            )
        except FileNotFoundError:
            raise LaunchError(
                "no such pid file", path=pid_file, hint="was the server started with `repo-builder launch --detach`?"
            ) from None
        except (ValueError, KeyError, TypeError) as exc:
            raise LaunchError(f"not a repo-builder pid file: {exc}", path=pid_file) from None
        return server

    def is_running(self) -> bool:
        """True while the launched process (mpirun or the single tritonserver) is alive."""
        return self.processes.alive()
