"""The processes of one launch: the launched process (mpirun or a single tritonserver), its tritonserver ranks
and their Python-backend stubs — finding them in ``/proc``, telling them from other servers', stopping them.

Facts this relies on (observed with tritonserver 2.51.0 of nvidia-pytriton 0.7.0 under Open MPI 4.1.4's mpirun):

* Every process the launcher starts lives in a new session (``start_new_session=True``), so "ours" is
  "session id == the launcher child's pid"; mpirun's ranks and the Python-backend stubs inherit it.
* A graceful stop is SIGTERM to the tritonserver *ranks*; mpirun then exits by itself. SIGTERM to mpirun
  kills the ranks at once and leaks their ``/dev/shm`` regions, so it is never the first step.
* A SIGKILLed server leaves its stub regions in ``/dev/shm``; they are removed by this launch's unique prefix,
  and the stream ledgers its models share (``runtime/stream_ledger.py``: named after the tritonserver pid).
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING

from ..runtime.stream_ledger import FILE_PREFIX as LEDGER_PREFIX
from . import procs
from .server_log import EXIT_TIMEOUT_EXPIRED, UNLOADING_MODELS, ServerLog

if TYPE_CHECKING:
    from .config import LaunchPlan

#: Poll interval (seconds) of readiness, waits and stops.
POLL_S = 0.05
#: Seconds processes of ours may outlive the last tritonserver rank during a stop (mpirun exits about 3 s
#: after its ranks, feasibility.md §8; a Python-backend stub whose server died has nothing left to do).
ORPHAN_GRACE_S = 5.0
#: How often (seconds) the model processes are checked while serving, and the log during a stop.
MODEL_POLL_S = 0.5
#: ``comm`` of a Python-backend stub process (``triton_python_backend_stub`` cut to 15 characters by the kernel).
STUB_COMM = "triton_python_backend_stub"[:15]
#: Seconds past a phase's bound before the stop gives up on it: tritonserver checks its state once a second.
PHASE_GRACE_S = 1.5


@dataclass
class StopReport:
    """What a stop waited for (seconds from the SIGTERM), as rank 0's log tells it.

    Attributes:
        in_flight_s: until no request was in flight any more and the models started to unload (None: not
            seen, e.g. no log, a server that had already exited, or the wait was cut).
        unload_s: how long the models took to unload after that (None: not seen to finish).
        in_flight_expired: requests were still in flight after the exit timeout (then killed).
        unload_expired: models were still unloading after the unload timeout (then killed).
    """

    in_flight_s: float | None = None
    unload_s: float | None = None
    in_flight_expired: bool = False
    unload_expired: bool = False

    def describe(self) -> str:
        """One line for the launcher's output, e.g. ``waited 0.0 s for in-flight requests, 6.2 s for models to
        unload``."""
        parts = []
        if self.in_flight_s is not None:
            parts.append(f"{self.in_flight_s:.1f} s for in-flight requests")
        if self.unload_s is not None:
            parts.append(f"{self.unload_s:.1f} s for models to unload")
        return "waited " + ", ".join(parts) if parts else ""


class LaunchProcesses:
    """The process tree of the launch ``launch_id``.

    Attributes:
        launch_id: unique per launch; ``<launch_id>_`` prefixes every ``/dev/shm`` region of its ranks.
        plan: the launch plan (mpirun or not, world size); rank discovery needs it. None: nothing to find.
        proc: the started process when this object started it (None for an attached ``--detach`` launch).
        launcher_pid, launcher_start: pid and start time (clock ticks) of mpirun or the single tritonserver.
        ranks: ``{rank: (pid, start time)}`` of the tritonserver ranks found so far.
        returncode: exit code of the launched process once it has exited (when we are its parent).
    """

    def __init__(self, launch_id: str) -> None:
        self.launch_id = launch_id
        self.plan: LaunchPlan | None = None
        self.proc: subprocess.Popen[bytes] | None = None
        self.launcher_pid: int | None = None
        self.launcher_start: int | None = None
        self.ranks: dict[int, tuple[int, int]] = {}
        self.returncode: int | None = None

    @property
    def shm_prefix(self) -> str:
        """Prefix shared by every ``/dev/shm`` region of this launch (``<launch_id>_``)."""
        return f"{self.launch_id}_"

    def spawn(self, argv: list[str], env: dict[str, str], log: IO[bytes]) -> None:
        """Start ``argv`` in a new session, output to ``log``.

        Raises:
            OSError: it cannot be executed.
        """
        self.proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
            close_fds=True,
        )
        self.launcher_pid = self.proc.pid
        info = procs.proc_info(self.proc.pid)
        self.launcher_start = info.start_time if info else None

    def alive(self) -> bool:
        """True while the launched process lives (reaps it, setting :attr:`returncode`, when it is our child)."""
        if self.proc is not None:
            code = self.proc.poll()
            if code is not None:
                self.returncode = code
                return False
            return True
        if self.launcher_pid is None:
            return False
        return procs.is_alive(self.launcher_pid, self.launcher_start)

    def _discover_ranks(self) -> None:
        if self.launcher_pid is None or self.plan is None:
            return
        if not self.plan.use_mpi:
            if 0 not in self.ranks and self.launcher_start is not None:
                self.ranks[0] = (self.launcher_pid, self.launcher_start)
            return
        if len(self.ranks) >= self.plan.world_size:
            return
        for info in procs.session_members(self.launcher_pid):
            if info.comm != "tritonserver" or any(ps[0] == info.pid for ps in self.ranks.values()):
                continue
            if procs.is_fork_before_exec(info):  # a rank starting a stub: its cmdline is the rank's for a moment
                continue
            for arg in procs.cmdline(info.pid):
                if arg.startswith("--backend-config=python,shm-region-prefix-name=" + self.shm_prefix):
                    rank = int(arg.rsplit("_r", 1)[1].rstrip("_"))
                    self.ranks[rank] = (info.pid, info.start_time)

    def rank_pids(self) -> dict[int, tuple[int, int]]:
        """``{rank: (pid, start time)}`` of the live tritonserver ranks found so far."""
        self._discover_ranks()
        return {r: ps for r, ps in self.ranks.items() if procs.is_alive(*ps)}

    @property
    def pids(self) -> list[int]:
        """Live processes: the launched process (mpirun or tritonserver) first, then the ranks."""
        out = []
        if self.launcher_pid is not None and procs.is_alive(self.launcher_pid, self.launcher_start):
            out.append(self.launcher_pid)
        for pid, _ in self.rank_pids().values():
            if pid not in out:
                out.append(pid)
        return out

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

    def ours(self) -> list[procs.ProcInfo]:
        """Every live process of this launch: session members, anything whose command line carries the launch
        id (stubs and ranks keep it even if they left the session), and the ranks found; never this process."""
        found: dict[int, procs.ProcInfo] = {}
        if self.launcher_pid is not None:
            # the session id outlives the launched process: ranks and stubs keep it
            for member in procs.session_members(self.launcher_pid):
                found[member.pid] = member
        for pid in procs.all_pids():
            if pid in found:
                continue
            argv = procs.cmdline(pid)
            if argv and any(self.launch_id in a for a in argv):
                info = procs.proc_info(pid)
                if info is not None and info.state not in ("Z", "X"):
                    found[pid] = info
        for pid, start in self.ranks.values():
            info = procs.proc_info(pid)
            if info is not None and info.start_time == start and info.state not in ("Z", "X"):
                found[pid] = info
        found.pop(os.getpid(), None)
        return list(found.values())

    def stop(
        self,
        timeout: float,
        log: ServerLog,
        kill_now: Callable[[], bool],
        exit_timeout: float | None = None,
        unload_timeout: float | None = None,
    ) -> StopReport:
        """Stop every process of this launch and remove its ``/dev/shm`` regions.

        SIGTERM goes to the tritonserver ranks (never first to mpirun, unless no rank has started). The wait
        has two phases, told apart by rank 0's log (:data:`UNLOADING_MODELS`): requests in flight, bounded by
        ``exit_timeout``, then the models' unloads, bounded by ``unload_timeout`` from their start, so a
        stop with nothing in flight is not cut because models unload slowly (tritonserver 2.51 counts both
        phases against one ``--exit-timeout-secs``, which the launcher therefore sets to their sum). Whatever
        is left of ours (ranks, stubs, mpirun) gets SIGKILL when a phase outlives its bound, after
        ``timeout`` seconds in all (at least the two bounds), when it outlives the last rank by
        :data:`ORPHAN_GRACE_S`, once ``log`` says :data:`EXIT_TIMEOUT_EXPIRED`, or as soon as ``kill_now()``
        is true (a second Ctrl-C).

        Returns:
            What the stop waited for (:class:`StopReport`).
        """
        report = StopReport()
        if self.launcher_pid is None:
            return report
        ranks, rank0 = self._signal_ranks()
        signalled = time.monotonic()
        bounds = (exit_timeout or 0) + (unload_timeout or 0) + 2 * PHASE_GRACE_S
        deadline = signalled + max(timeout, bounds if exit_timeout is not None and unload_timeout is not None else 0)
        unloading_at = self._wait_phases(
            report, log, kill_now, rank0, signalled, deadline, exit_timeout=exit_timeout, unload_timeout=unload_timeout
        )
        if unloading_at is not None and not report.unload_expired and not self.rank_pids():
            report.unload_s = time.monotonic() - unloading_at
        self._kill_leftovers()
        if self.proc is not None:
            try:
                self.returncode = self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        procs.remove_shm_files(self.shm_prefix)
        for pid, _start in ranks.values():  # stream ledgers a killed server's models could not remove
            procs.remove_shm_files(f"{LEDGER_PREFIX}{pid}-")
        return report

    def _signal_ranks(self) -> tuple[dict[int, tuple[int, int]], int | None]:
        """Send SIGTERM to every tritonserver rank (to mpirun itself when no rank has started yet).

        Returns:
            ``(ranks, rank0)``: :meth:`rank_pids` as it was ({rank: (pid, start time)}), and the pid whose log
            lines tell the stop's phases (rank 0's, else the launcher's; None when no rank had started).
        """
        assert self.launcher_pid is not None
        ranks = self.rank_pids()
        rank0 = ranks.get(0, (self.launcher_pid, 0))[0] if ranks else None
        if ranks:
            for pid, start in ranks.values():
                procs.send_signal(pid, signal.SIGTERM, start)
        elif self.alive():
            # mpirun has not started a rank yet: nothing can leak, stop mpirun itself
            procs.send_signal(self.launcher_pid, signal.SIGTERM, self.launcher_start)
        return ranks, rank0

    def _wait_phases(
        self,
        report: StopReport,
        log: ServerLog,
        kill_now: Callable[[], bool],
        rank0: int | None,
        signalled: float,
        deadline: float,
        *,
        exit_timeout: float | None,
        unload_timeout: float | None,
    ) -> float | None:
        """Wait until nothing of ours is left, ``deadline`` (``time.monotonic()`` seconds) passes, ``kill_now()``
        is true, a phase outlives its bound (see :meth:`stop`; ``report``'s ``in_flight_expired`` /
        ``unload_expired`` say which) or the last rank has been gone :data:`ORPHAN_GRACE_S`. Sets
        ``report.in_flight_s`` when rank ``rank0``'s log says the unloads began.

        Returns:
            when (``time.monotonic()``) the unloads began, None when the log never said so.
        """
        ranks_gone_at: float | None = None
        unloading_at: float | None = None
        log_from = log.size()
        next_log_check = time.monotonic()
        while time.monotonic() < deadline and not kill_now():
            self.alive()  # reaps our child
            if not self.ours():
                break
            now = time.monotonic()
            if now >= next_log_check:
                next_log_check = now + MODEL_POLL_S
                added = log.since(log_from)
                if unloading_at is None and _rank_logged(added, UNLOADING_MODELS, rank0):
                    unloading_at = now
                    report.in_flight_s = now - signalled
                if EXIT_TIMEOUT_EXPIRED in added:
                    # tritonserver's exit timeout ran out; tritonserver 2.51 then hangs in its teardown (the
                    # Python backend waits for the stubs' requests) instead of exiting
                    report.in_flight_expired = unloading_at is None
                    report.unload_expired = unloading_at is not None
                    break
                if unloading_at is None and exit_timeout is not None and now - signalled > exit_timeout + PHASE_GRACE_S:
                    report.in_flight_expired = True  # requests still in flight after the exit timeout
                    break
                if unloading_at is not None and unload_timeout is not None and now - unloading_at > unload_timeout:
                    report.unload_expired = True
                    break
            if not self.rank_pids():
                # every rank has exited: what is left (stubs, mpirun) gets a short grace, not the stop timeout
                ranks_gone_at = ranks_gone_at or time.monotonic()
                if time.monotonic() - ranks_gone_at >= ORPHAN_GRACE_S:
                    break
            time.sleep(POLL_S)
        return unloading_at

    def _kill_leftovers(self) -> None:
        """SIGKILL whatever of ours is left (ranks, stubs, mpirun and its process group), then wait up to 10 s
        for it to be gone."""
        assert self.launcher_pid is not None
        leftovers = self.ours()
        if leftovers:
            for info in leftovers:
                procs.send_signal(info.pid, signal.SIGKILL, info.start_time)
            procs.kill_group(self.launcher_pid, signal.SIGKILL)
            kill_deadline = time.monotonic() + 10
            while self.ours() and time.monotonic() < kill_deadline:
                self.alive()
                time.sleep(POLL_S)


def _rank_logged(text: str, marker: str, pid: int | None) -> bool:
    """True when ``text`` (log lines) holds ``marker`` on a line of the tritonserver process ``pid`` (its log
    lines carry it: ``I1203 16:44:47.271828 23858 server.cc:336] "..."``; None: any process)."""
    for line in text.splitlines():
        if marker in line and (pid is None or f" {pid} " in line):
            return True
    return False
