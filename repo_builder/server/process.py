"""``TritonServer``: start tritonserver (one process or mpirun ranks), wait until ready, stop cleanly.

Lifecycle facts this relies on (../shared/docs/feasibility.md §8, §9; tritonserver 2.51.0):

* Every process the launcher starts lives in a new session (``start_new_session=True``), so "ours" is
  "session id == the launcher child's pid"; mpirun's ranks and the Python-backend stubs inherit it.
* A graceful stop is SIGTERM to the tritonserver *ranks*; mpirun then exits by itself. SIGTERM to mpirun
  kills the ranks at once and leaks their ``/dev/shm`` regions, so it is never the first step.
* A SIGKILLed server leaves its stub regions in ``/dev/shm``; they are removed by this launch's unique prefix.
* A readiness probe can be answered by another server on the same port, so readiness also requires that
  our rank 0 is alive and holds the listening HTTP socket.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..errors import LaunchError
from . import procs
from .binary import TritonBinary, find_tritonserver
from .command import launch_argv, rank_argv, shm_prefix
from .config import LaunchConfig, LaunchPlan, RepositoryInfo, resolve_plan, scan_repository
from .preflight import check_no_other_server, check_ports, check_shm, shm_requirement


class LaunchInterrupted(LaunchError):
    """A signal arrived while waiting for the server; everything started was stopped.

    ``exit_code`` is 128 + the signal number (130 for SIGINT, 143 for SIGTERM), the shell's convention.
    """

    exit_code = 128 + signal.SIGINT

    def __init__(self, message: str, *, signum: int = signal.SIGINT, **kwargs: Any) -> None:
        super().__init__(message, **kwargs)
        self.signum = int(signum)
        self.exit_code = 128 + self.signum


_LOAD_ERROR_RE = re.compile(r"failed to load '([^']+)' version \d+: ([^\n]*)")

#: Readiness poll interval (seconds).
POLL_S = 0.05
#: Lines of server log quoted in launch errors.
TAIL_LINES = 40
#: Seconds processes of ours may outlive the last tritonserver rank during a stop (mpirun exits about 3 s
#: after its ranks, feasibility.md §8; a Python-backend stub whose server died has nothing left to do).
ORPHAN_GRACE_S = 5.0
#: How often (seconds) :meth:`TritonServer.wait` checks that every model process is still alive.
MODEL_POLL_S = 0.5
#: tritonserver 2.51's log line when in-flight requests outlived ``--exit-timeout-secs`` (``main.cc``); after
#: it the process hangs in its teardown until killed (measured: 30 s, the length of the request in flight).
EXIT_TIMEOUT_EXPIRED = "Exit timeout expired. Exiting immediately."
#: ``comm`` of a Python-backend stub process (``triton_python_backend_stub`` cut to 15 characters by the kernel).
STUB_COMM = "triton_python_backend_stub"[:15]


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


def _connect_host(address: str) -> str:
    return {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(address, address)


def http_request(host: str, port: int, method: str, path: str, timeout_s: float = 2.0) -> tuple[int, bytes] | None:
    """One HTTP request to a Triton endpoint (POST sends ``{}``): ``(status, body)``, or None if nobody answers."""
    conn = http.client.HTTPConnection(host, port, timeout=timeout_s)
    try:
        conn.request(
            method,
            path,
            body=b"{}" if method == "POST" else None,
            headers={"Content-Type": "application/json"} if method == "POST" else {},
        )
        resp = conn.getresponse()
        return resp.status, resp.read()
    except (OSError, http.client.HTTPException):
        return None
    finally:
        conn.close()


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
        self.launch_id = "rb" + secrets.token_hex(4)
        self.notes: list[str] = []
        self.argv: list[str] = []
        self.env: dict[str, str] = {}
        self.returncode: int | None = None
        self.plan: LaunchPlan | None = None
        self.repository: RepositoryInfo | None = None
        self.log_path: Path = (
            Path(config.log_file) if config.log_file else state_dir("logs") / f"tritonserver-{self.launch_id}.log"
        )
        self._binary = binary
        self._proc: subprocess.Popen[bytes] | None = None
        self._launcher_pid: int | None = None
        self._launcher_start: int | None = None
        self._rank_pids: dict[int, tuple[int, int]] = {}
        self._started_at: float | None = None
        self._stopped = False
        self._kill_now = False
        #: pid files a detached launch was recorded in (set by :meth:`attach`).
        self.pid_files: list[str] = []
        #: signal number set by :meth:`interrupt` (foreground launch: SIGINT/SIGTERM received), else 0.
        self.interrupted = 0
        #: set by :meth:`stop` when tritonserver gave up on in-flight requests (then it is SIGKILLed at once).
        self.exit_timeout_expired = False
        #: ``(model, pid)`` of the first model process :meth:`wait` saw die while the server ran, else None.
        self.model_died: tuple[str, int] | None = None

    # ------------------------------------------------------------------ addresses
    @property
    def http_url(self) -> str:
        """``http://host:port`` of rank 0 (for requests/curl; tritonclient.http wants :attr:`http_hostport`)."""
        return f"http://{self.http_hostport}"

    @property
    def http_hostport(self) -> str:
        """``host:port`` of rank 0's HTTP endpoint (the ``url`` tritonclient.http expects)."""
        host = _connect_host(self.config.http_address)
        return f"[{host}]:{self.config.http_port}" if ":" in host else f"{host}:{self.config.http_port}"

    @property
    def grpc_url(self) -> str:
        """``host:port`` of rank 0's gRPC endpoint (the ``url`` tritonclient.grpc expects)."""
        host = _connect_host(self.config.http_address)
        return f"[{host}]:{self.config.grpc_port}" if ":" in host else f"{host}:{self.config.grpc_port}"

    @property
    def metrics_url(self) -> str:
        """``http://host:port/metrics`` of rank 0."""
        host = _connect_host(self.config.http_address)
        return f"http://{host}:{self.config.metrics_port}/metrics"

    @property
    def shm_prefix(self) -> str:
        """Prefix shared by every ``/dev/shm`` region of this launch (``<launch_id>_``)."""
        return f"{self.launch_id}_"

    def rank_shm_prefix(self, rank: int) -> str:
        """``shm-region-prefix-name`` given to ``rank``."""
        return shm_prefix(self.launch_id, rank)

    @property
    def pids(self) -> list[int]:
        """Live processes of this launch: the launched process (mpirun or tritonserver) first, then the ranks."""
        out = []
        if self._launcher_pid is not None and procs.is_alive(self._launcher_pid, self._launcher_start):
            out.append(self._launcher_pid)
        for pid, _ in self.rank_pids().values():
            if pid not in out:
                out.append(pid)
        return out

    def rank_pids(self) -> dict[int, tuple[int, int]]:
        """``{rank: (pid, start time)}`` of the live tritonserver ranks found so far."""
        self._discover_ranks()
        return {r: ps for r, ps in self._rank_pids.items() if procs.is_alive(*ps)}

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
        self.notes = list(plan.notes)
        others = check_no_other_server(cfg.model_repo, cfg.force)
        if others:
            self.notes.append(
                f"--force: starting although tritonserver pid {', '.join(map(str, others))} "
                "already serves this repository"
            )
        ports = {"--http_port": cfg.http_port, "--grpc_port": cfg.grpc_port, "--metrics_port": cfg.metrics_port}
        if cfg.openai_port is not None:
            from ..openai.launch import check_installed

            check_installed()
            ports["--openai_port"] = cfg.openai_port
        self.notes += check_ports(cfg.http_address, ports)
        hosts = plan.rank_hosts
        local = None if hosts is None else [r for r, h in enumerate(hosts) if h == hosts[0]]
        stubs, needed = shm_requirement(repo, plan.trtllm_models, plan.world_size, ranks=local)
        check_shm(stubs, needed)
        repo_path = Path(os.path.abspath(cfg.model_repo))
        ranks = [
            rank_argv(
                binary=binary.path,
                backend_args=binary.server_args(),
                model_repo=repo_path,
                rank=r,
                launch_id=self.launch_id,
                http_address=cfg.http_address,
                http_port=cfg.http_port,
                grpc_port=cfg.grpc_port,
                metrics_port=cfg.metrics_port,
                trtllm_models=plan.trtllm_models,
                verbose=cfg.log,
                extra_args=cfg.server_args,
                exit_timeout=cfg.exit_timeout,
            )
            for r in range(plan.world_size)
        ]
        env = dict(binary.env)
        if cfg.multi_model:
            env["TRTLLM_ORCHESTRATOR"] = "1"
        self.env = env
        self.argv = launch_argv(
            ranks,
            use_mpi=plan.use_mpi,
            oversubscribe=plan.oversubscribe,
            export_env=sorted(env),
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
        if self._proc is not None or self._launcher_pid is not None:
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
                self._proc = subprocess.Popen(
                    self.argv,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=env,
                    start_new_session=True,
                    close_fds=True,
                )
            except OSError as exc:
                raise LaunchError(f"cannot execute {self.argv[0]}: {exc}", key="--tritonserver") from exc
        self._launcher_pid = self._proc.pid
        info = procs.proc_info(self._proc.pid)
        self._launcher_start = info.start_time if info else None
        return self

    def _sid(self) -> int | None:
        return self._launcher_pid

    def _discover_ranks(self) -> None:
        if self._launcher_pid is None or self.plan is None:
            return
        if not self.plan.use_mpi:
            if 0 not in self._rank_pids and self._launcher_start is not None:
                self._rank_pids[0] = (self._launcher_pid, self._launcher_start)
            return
        if len(self._rank_pids) >= self.plan.world_size:
            return
        for info in procs.session_members(self._launcher_pid):
            if info.comm != "tritonserver" or any(ps[0] == info.pid for ps in self._rank_pids.values()):
                continue
            for arg in procs.cmdline(info.pid):
                if arg.startswith("--backend-config=python,shm-region-prefix-name=" + self.shm_prefix):
                    rank = int(arg.rsplit("_r", 1)[1].rstrip("_"))
                    self._rank_pids[rank] = (info.pid, info.start_time)

    def _launcher_alive(self) -> bool:
        if self._proc is not None:
            code = self._proc.poll()
            if code is not None:
                self.returncode = code
                return False
            return True
        if self._launcher_pid is None:
            return False
        return procs.is_alive(self._launcher_pid, self._launcher_start)

    def log_tail(self, n: int = TAIL_LINES) -> str:
        """The last ``n`` lines of the server log (empty string if there is none yet)."""
        try:
            with open(self.log_path, "rb") as fh:
                lines = deque(fh, maxlen=n)
        except FileNotFoundError:
            return ""
        return b"".join(lines).decode("utf-8", "replace")

    def load_errors(self, max_bytes: int = 4 << 20) -> dict[str, str]:
        """``{model: first line of the reason}`` for every ``failed to load 'M' version V: ...`` in the log.

        Source: tritonserver 2.51 ``model_lifecycle.cc`` log lines; the reason's traceback (escaped ``\\n``)
        is cut at its first line. Only the last ``max_bytes`` of the log are read.
        """
        try:
            with open(self.log_path, "rb") as fh:
                fh.seek(0, os.SEEK_END)
                fh.seek(max(0, fh.tell() - max_bytes))
                text = fh.read().decode("utf-8", "replace")
        except FileNotFoundError:
            return {}
        errors: dict[str, str] = {}
        for match in _LOAD_ERROR_RE.finditer(text):
            reason = match.group(2).split("\\n")[0].strip().rstrip('"')
            errors.setdefault(match.group(1), reason)
        return errors

    def _fail(self, message: str, **kwargs: Any) -> LaunchError:
        self.stop()
        errors = self.load_errors()
        if errors:
            message += "\nmodels that failed to load:\n" + "\n".join(f"  {m}: {r}" for m, r in errors.items())
            kwargs.setdefault("key", next(iter(errors)))
        tail = self.log_tail(TAIL_LINES).rstrip()
        text = f"{message}\n--- last {TAIL_LINES} lines of {self.log_path} ---\n{tail}" if tail else message
        return LaunchError(text, **kwargs)

    def _request(self, method: str, path: str) -> tuple[int, bytes] | None:
        return http_request(_connect_host(self.config.http_address), self.config.http_port, method, path)

    def model_states(self) -> dict[str, tuple[str, str]] | None:
        """``{model: (state, reason)}`` from rank 0's ``POST /v2/repository/index``; ``None`` if it does not answer."""
        got = self._request("POST", "/v2/repository/index")
        if got is None or got[0] != 200:
            return None
        states: dict[str, tuple[str, str]] = {}
        for entry in json.loads(got[1] or b"[]"):
            states[entry.get("name", "")] = (entry.get("state", ""), entry.get("reason", ""))
        return states

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
            if not self._launcher_alive():
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
                health = self._request("GET", "/v2/health/ready")
                if health is not None and health[0] == 200:
                    last_states = self.model_states() or {}
                    failed = {m: r for m, (s, r) in last_states.items() if s == "UNAVAILABLE" and m in expected}
                    if failed:
                        name, reason = sorted(failed.items())[0]
                        raise self._fail(f"model {name} failed to load: {reason}", key=name)
                    if all(last_states.get(m, ("", ""))[0] == "READY" for m in expected):
                        rank0_pid = live[0][0]
                        if self.config.http_port in procs.listening_tcp_ports(rank0_pid):
                            return time.monotonic() - self._started_at
                        # Only a listener positively held by a process that is not ours counts as another
                        # server; sockets of an earlier server that are closing (TIME_WAIT, FIN_WAIT) never
                        # listen, and a listener we could not attribute is looked at again on the next poll.
                        ours = {info.pid for info in self._our_processes()}
                        foreign = sorted(procs.port_listeners(self.config.http_port) - ours)
                        if foreign:
                            who = ", ".join(f"{pid} ({procs.comm(pid)})" for pid in foreign)
                            raise self._fail(
                                f"port {self.config.http_port} answers, but it is held by pid {who}, "
                                f"not by our tritonserver (pid {rank0_pid})",
                                key="--http_port",
                                hint="another server uses the port; pick another --http_port",
                            )
            if time.monotonic() >= deadline:
                pending = sorted(m for m in expected if (last_states or {}).get(m, ("",))[0] != "READY")
                detail = (
                    ", ".join(
                        f"{m} ({(last_states or {}).get(m, ('not listed',))[0] or 'not listed'})" for m in pending
                    )
                    if last_states is not None
                    else f"{self.http_url}/v2/health/ready never returned 200"
                )
                raise self._fail(
                    f"not ready after {timeout:g} s: {detail}",
                    key="--timeout",
                    hint="raise --timeout if models load slowly",
                )
            time.sleep(POLL_S)

    def model_processes(self) -> dict[int, tuple[int, str]]:
        """``{pid: (start time, model name)}`` of the live Python-backend stub processes of our ranks.

        A stub is a child of a rank whose ``comm`` is :data:`STUB_COMM`; its first argument is the model's
        ``<repo>/<model>/<version>/model.py`` (python backend r24.10 ``stub_launcher.cc``), which names the model.
        """
        ranks = {pid for pid, _ in self.rank_pids().values()}
        out: dict[int, tuple[int, str]] = {}
        for rank in ranks:
            for info in procs.children(rank):
                if info.comm != STUB_COMM:
                    continue
                argv = procs.cmdline(info.pid)
                parts = Path(argv[1]).parts if len(argv) > 1 else ()
                out[info.pid] = (info.start_time, parts[-3] if len(parts) >= 3 else "?")
        return out

    def _serving(self) -> bool:
        got = self._request("GET", "/v2/health/ready")
        return got is not None and got[0] == 200

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
        while self._launcher_alive():
            if self._kill_now or self.interrupted or (until is not None and until()):
                return None
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                return None
            if watch_models and now >= next_check:
                next_check = now + MODEL_POLL_S
                dead = [(name, pid) for pid, (start, name) in watched.items() if not procs.is_alive(pid, start)]
                if dead and self._launcher_alive() and self._serving():
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

    def request_kill(self) -> None:
        """Make a running :meth:`stop` (or :meth:`wait`) skip the graceful wait and SIGKILL now (second Ctrl-C)."""
        self._kill_now = True

    def _our_processes(self) -> list[procs.ProcInfo]:
        found: dict[int, procs.ProcInfo] = {}
        if self._launcher_pid is not None:
            # the session id outlives the launched process: ranks and stubs keep it
            for member in procs.session_members(self._launcher_pid):
                found[member.pid] = member
        # stubs and ranks carry our prefix on their command line even if a process left the session
        for pid in procs.all_pids():
            if pid in found:
                continue
            argv = procs.cmdline(pid)
            if argv and any(self.launch_id in a for a in argv):
                info = procs.proc_info(pid)
                if info is not None and info.state not in ("Z", "X"):
                    found[pid] = info
        for pid, start in self._rank_pids.values():
            info = procs.proc_info(pid)
            if info is not None and info.start_time == start and info.state not in ("Z", "X"):
                found[pid] = info
        found.pop(os.getpid(), None)
        return list(found.values())

    def stop(self, timeout_s: float | None = None) -> int | None:
        """Stop every process of this launch and remove its ``/dev/shm`` regions; returns the exit code.

        SIGTERM goes to the tritonserver ranks (never first to mpirun); after ``timeout_s`` (default
        ``config.stop_timeout``) whatever is left of ours (ranks, stubs, mpirun) gets SIGKILL, and so does what
        outlives the last rank by :data:`ORPHAN_GRACE_S`, and everything once the log says
        :data:`EXIT_TIMEOUT_EXPIRED` (``config.exit_timeout`` after the SIGTERM when requests are in flight).
        Safe to call twice and on a server that already exited.
        """
        timeout = self.config.stop_timeout if timeout_s is None else timeout_s
        if self._launcher_pid is None:
            return None
        ranks = self.rank_pids()
        if ranks:
            for pid, start in ranks.values():
                procs.send_signal(pid, signal.SIGTERM, start)
        elif self._launcher_alive():
            # mpirun has not started a rank yet: nothing can leak, stop mpirun itself
            procs.send_signal(self._launcher_pid, signal.SIGTERM, self._launcher_start)
        deadline = time.monotonic() + timeout
        ranks_gone_at: float | None = None
        log_from = self._log_size()
        next_log_check = time.monotonic()
        while time.monotonic() < deadline and not self._kill_now:
            self._launcher_alive()  # reaps our child
            if not self._our_processes():
                break
            if time.monotonic() >= next_log_check:
                next_log_check = time.monotonic() + MODEL_POLL_S
                if EXIT_TIMEOUT_EXPIRED in self._log_since(log_from):
                    # in-flight requests outlived --exit-timeout-secs; tritonserver 2.51 then hangs in its
                    # teardown (the Python backend waits for the stubs' requests) instead of exiting
                    self.exit_timeout_expired = True
                    break
            if not self.rank_pids():
                # every rank has exited: what is left (stubs, mpirun) gets a short grace, not the stop timeout
                ranks_gone_at = ranks_gone_at or time.monotonic()
                if time.monotonic() - ranks_gone_at >= ORPHAN_GRACE_S:
                    break
            time.sleep(POLL_S)
        leftovers = self._our_processes()
        if leftovers:
            for info in leftovers:
                procs.send_signal(info.pid, signal.SIGKILL, info.start_time)
            procs.kill_group(self._launcher_pid, signal.SIGKILL)
            kill_deadline = time.monotonic() + 10
            while self._our_processes() and time.monotonic() < kill_deadline:
                self._launcher_alive()
                time.sleep(POLL_S)
        if self._proc is not None:
            try:
                self.returncode = self._proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        procs.remove_shm_files(self.shm_prefix)
        self._stopped = True
        return self.returncode

    def _log_size(self) -> int:
        try:
            return self.log_path.stat().st_size
        except OSError:
            return 0

    def _log_since(self, offset: int, max_bytes: int = 1 << 20) -> str:
        """What the server log gained after byte ``offset`` (at most the last ``max_bytes``)."""
        try:
            with open(self.log_path, "rb") as fh:
                fh.seek(0, os.SEEK_END)
                fh.seek(max(offset, fh.tell() - max_bytes))
                return fh.read().decode("utf-8", "replace")
        except OSError:
            return ""

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
            "launcher_pid": self._launcher_pid,
            "launcher_start": self._launcher_start,
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
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps({**self.pid_record(), **(extra or {})}, indent=2) + "\n")
        os.replace(tmp, path)
        return path

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
            server._launcher_pid = int(record["launcher_pid"])
            server._launcher_start = record.get("launcher_start")
            server._rank_pids = {int(r): (int(ps[0]), int(ps[1])) for r, ps in record.get("ranks", {}).items()}
            server.log_path = Path(record["log_file"])
            server.pid_files = [str(p) for p in record.get("pid_files", [])]
            from .config import LaunchPlan as _Plan

            server.plan = _Plan(
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
        return self._launcher_alive()


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
