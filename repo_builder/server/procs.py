"""Linux process and shared-memory helpers read straight from ``/proc`` and ``/dev/shm``.

Everything here works on numbers the kernel reports (``/proc/<pid>/stat``, ``/proc/<pid>/cmdline``,
``/proc/net/tcp``), so the launcher can tell *its own* processes from other tritonservers: a process
is identified by its pid together with its start time (clock ticks since boot, field 22 of
``/proc/<pid>/stat``), which protects against pid reuse, and by its session id (field 6), which every
process the launcher starts inherits.
"""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass
from pathlib import Path

PROC = Path("/proc")
SHM_DIR = Path("/dev/shm")


@dataclass(frozen=True)
class ProcInfo:
    """One process as ``/proc/<pid>/stat`` describes it.

    Attributes:
        pid, ppid, pgid, sid: process, parent, process-group and session ids.
        state: one-letter state (``R``, ``S``, ``Z`` = zombie, ...).
        start_time: start time in clock ticks since boot (``stat`` field 22).
        comm: the executable name as the kernel keeps it (at most 15 characters).
    """

    pid: int
    ppid: int
    pgid: int
    sid: int
    state: str
    start_time: int
    comm: str


def proc_info(pid: int) -> ProcInfo | None:
    """The ``/proc/<pid>/stat`` fields of ``pid``, or ``None`` when there is no such process."""
    try:
        raw = (PROC / str(pid) / "stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    # comm may contain spaces and parentheses: it ends at the last ')'.
    lpar, rpar = raw.index("("), raw.rindex(")")
    comm = raw[lpar + 1 : rpar]
    fields = raw[rpar + 2 :].split()
    # fields[0] is stat field 3 (state); field N is fields[N - 3].
    return ProcInfo(
        pid=pid,
        ppid=int(fields[1]),
        pgid=int(fields[2]),
        sid=int(fields[3]),
        state=fields[0],
        start_time=int(fields[19]),
        comm=comm,
    )


def all_pids() -> list[int]:
    """Every pid currently listed in ``/proc``."""
    return [int(name) for name in os.listdir(PROC) if name.isdigit()]


def cmdline(pid: int) -> list[str]:
    """The argv of ``pid`` (empty for zombies, kernel threads and vanished processes)."""
    try:
        raw = (PROC / str(pid) / "cmdline").read_bytes()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return []
    return [part.decode("utf-8", "replace") for part in raw.split(b"\0") if part]


def is_alive(pid: int, start_time: int | None = None) -> bool:
    """True while ``pid`` exists, is not a zombie and (if given) still has ``start_time``."""
    info = proc_info(pid)
    if info is None or info.state in ("Z", "X"):
        return False
    return start_time is None or info.start_time == start_time


def is_fork_before_exec(info: ProcInfo) -> bool:
    """True when ``info`` is a child its parent forked that has not yet run ``exec``: same ``comm`` as the parent.

    Such a child shows its parent's ``comm`` and command line until it execs (tritonserver forks every
    Python-backend stub this way), so a scan that finds it must not take it for the parent; a moment later it
    is a ``triton_python_backend_stub`` with another command line.
    """
    parent = proc_info(info.ppid)
    return parent is not None and parent.comm == info.comm


def session_members(sid: int) -> list[ProcInfo]:
    """Every live (non-zombie) process whose session id is ``sid``."""
    out = []
    for pid in all_pids():
        info = proc_info(pid)
        if info is not None and info.sid == sid and info.state not in ("Z", "X"):
            out.append(info)
    return out


def children(pid: int) -> list[ProcInfo]:
    """The live direct children of ``pid``."""
    out = []
    for other in all_pids():
        info = proc_info(other)
        if info is not None and info.ppid == pid and info.state not in ("Z", "X"):
            out.append(info)
    return out


def send_signal(pid: int, sig: int, start_time: int | None = None) -> bool:
    """Send ``sig`` to ``pid`` if it is still the same live process; True when the signal was sent."""
    if not is_alive(pid, start_time):
        return False
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def _socket_inodes(pid: int) -> set[int]:
    inodes: set[int] = set()
    fd_dir = PROC / str(pid) / "fd"
    try:
        names = os.listdir(fd_dir)
    except (FileNotFoundError, PermissionError, ProcessLookupError):
        return inodes
    for name in names:
        try:
            target = os.readlink(fd_dir / name)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(int(target[8:-1]))
    return inodes


def _listeners() -> list[tuple[int, int]]:
    """``(port, socket inode)`` of every TCP socket in LISTEN state (IPv4 and IPv6).

    Source: ``/proc/net/tcp`` and ``/proc/net/tcp6``: state ``0A`` = LISTEN, local port in hex, inode in
    column 10. Sockets that are closing (TIME_WAIT ``06``, FIN_WAIT ``04``/``05``, CLOSE_WAIT ``08``, ...)
    are not listeners and never count.
    """
    out: list[tuple[int, int]] = []
    for table in ("tcp", "tcp6"):
        try:
            lines = (PROC / "net" / table).read_text().splitlines()[1:]
        except FileNotFoundError:
            continue
        for line in lines:
            parts = line.split()
            if len(parts) < 10 or parts[3] != "0A":
                continue
            out.append((int(parts[1].rsplit(":", 1)[1], 16), int(parts[9])))
    return out


def listening_tcp_ports(pid: int | None = None) -> set[int]:
    """TCP ports in LISTEN state (IPv4 and IPv6), all of them or only those whose socket ``pid`` holds.

    Source: :func:`_listeners` joined with the ``socket:[inode]`` links in ``/proc/<pid>/fd``.
    """
    inodes = _socket_inodes(pid) if pid is not None else None
    return {port for port, inode in _listeners() if inodes is None or inode in inodes}


def port_listeners(port: int) -> set[int]:
    """Pids of the processes holding a TCP socket that listens on ``port`` (empty when nobody listens).

    A listening socket inherited by a child counts for both processes.
    """
    inodes = {inode for p, inode in _listeners() if p == port}
    if not inodes:
        return set()
    return {pid for pid in all_pids() if _socket_inodes(pid) & inodes}


def comm(pid: int) -> str:
    """The kernel's name of ``pid`` (``?`` when it is gone)."""
    info = proc_info(pid)
    return info.comm if info is not None else "?"


def shm_files(prefix: str) -> list[Path]:
    """Files in ``/dev/shm`` whose name starts with ``prefix`` (the Python backend's stub regions)."""
    if not prefix:
        raise ValueError("refusing to list /dev/shm with an empty prefix")
    try:
        return sorted(p for p in SHM_DIR.iterdir() if p.name.startswith(prefix))
    except FileNotFoundError:
        return []


def remove_shm_files(prefix: str) -> list[Path]:
    """Delete the ``/dev/shm`` files of ``prefix``; returns the ones removed."""
    removed = []
    for path in shm_files(prefix):
        try:
            path.unlink()
            removed.append(path)
        except FileNotFoundError:
            pass
    return removed


def kill_group(pgid: int, sig: int = signal.SIGKILL) -> None:
    """``killpg`` that ignores a group that no longer exists."""
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass
