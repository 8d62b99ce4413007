"""Checks run before any process starts: ports, ``/dev/shm`` space, other servers on the same repository."""

from __future__ import annotations

import errno
import os
import socket
from collections.abc import Iterable
from pathlib import Path

from ..errors import LaunchError
from . import procs
from .config import RepositoryInfo

#: Size of one Python-backend stub region at start (python backend ``shm-default-byte-size`` default, bytes).
STUB_REGION_BYTES = 1 << 20
#: Room per stub for growth (``shm-growth-byte-size`` is 1 MiB; tensors larger than the region grow it).
STUB_HEADROOM_BYTES = 1 << 20
#: Fixed headroom on top (bytes).
SHM_BASE_HEADROOM_BYTES = 16 << 20


def check_ports(address: str, ports: dict[str, int]) -> list[str]:
    """Refuse ports that another process listens on, or that are repeated; returns notes for the user.

    ``ports`` maps the flag (``--http_port``) to the port. A port is tried by binding ``(address, port)``
    with ``SO_REUSEADDR``, as tritonserver's endpoints bind, so sockets in TIME_WAIT from an earlier server do
    not count. Only a *listener* makes a port taken: when the bind fails with EADDRINUSE but no socket
    listens on the port (/proc/net/tcp), what holds it is a connection that is still closing (FIN_WAIT,
    CLOSE_WAIT, LAST_ACK); that is not another server, so the launch goes on with a note (tritonserver
    reports its own bind error if the socket is still there when it binds).

    Raises:
        LaunchError: two flags name the same port, or a process listens on a port (names the flag, the port
            and the listening pid).
    """
    seen: dict[int, str] = {}
    for flag, port in ports.items():
        if port in seen:
            raise LaunchError(
                f"{flag} and {seen[port]} are both {port}", key=flag, hint="give each endpoint its own port"
            )
        seen[port] = flag
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    notes: list[str] = []
    for flag, port in ports.items():
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((address, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                holders = sorted(procs.port_listeners(port))
                if holders or port in procs.listening_tcp_ports():
                    who = f" by pid {', '.join(f'{p} ({procs.comm(p)})' for p in holders)}" if holders else ""
                    raise LaunchError(
                        f"port {port} on {address} is already in use{who}",
                        key=flag,
                        hint=f"stop whatever listens on {port} or pass another {flag}",
                    ) from None
                notes.append(
                    f"{flag} {port}: no process listens on it, only a connection that "
                    "is still closing there (FIN_WAIT/CLOSE_WAIT); starting anyway"
                )
                continue
            if exc.errno == errno.EADDRNOTAVAIL:
                raise LaunchError(
                    f"cannot bind {address}: no such local address",
                    key="--http-address",
                    hint="use 127.0.0.1 or 0.0.0.0",
                ) from None
            raise LaunchError(f"cannot bind {address}:{port}: {exc}", key=flag) from None
        finally:
            sock.close()
    return notes


def shm_requirement(
    repo: RepositoryInfo, trtllm_models: list[str], world_size: int, ranks: Iterable[int] | None = None
) -> tuple[int, int]:
    """``(stub count, bytes needed in /dev/shm)`` for the ranks of a launch that share one ``/dev/shm``.

    Rank 0 starts one stub per Python-backend model instance; every rank > 0 those of ``trtllm_models``.
    Each stub needs :data:`STUB_REGION_BYTES` plus :data:`STUB_HEADROOM_BYTES`, plus
    :data:`SHM_BASE_HEADROOM_BYTES` once. ``ranks`` (default: all ``world_size`` ranks) names the ranks that run
    on one host or pod (a Kubernetes pod or Slurm node of a multi-node launch holds only some of them).
    """
    rank0 = sum(m.python_instances for m in repo.models)
    other = sum(m.python_instances for m in repo.models if m.name in trtllm_models)
    stubs = sum(rank0 if r == 0 else other for r in (range(world_size) if ranks is None else ranks))
    return stubs, stubs * (STUB_REGION_BYTES + STUB_HEADROOM_BYTES) + SHM_BASE_HEADROOM_BYTES


def check_shm(stubs: int, needed: int, shm_dir: Path = procs.SHM_DIR) -> int:
    """Refuse to start when ``shm_dir`` has less than ``needed`` bytes free; returns the free bytes.

    Raises:
        LaunchError: ``/dev/shm`` is missing or too small (gives the numbers and the Docker fix).
    """
    if stubs == 0:
        return -1
    try:
        st = os.statvfs(shm_dir)
    except FileNotFoundError:
        raise LaunchError(
            f"{shm_dir} does not exist; the Python backend keeps one shared-memory region per model instance there",
            path=shm_dir,
            hint="mount a tmpfs on /dev/shm",
        ) from None
    free = st.f_bavail * st.f_frsize
    if free < needed:
        mib = 1 << 20
        raise LaunchError(
            f"{free / mib:.1f} MiB free in {shm_dir}, but {stubs} Python model instance(s) need about "
            f"{needed / mib:.0f} MiB ({STUB_REGION_BYTES // mib} MiB region + {STUB_HEADROOM_BYTES // mib} MiB growth "
            f"each, + {SHM_BASE_HEADROOM_BYTES // mib} MiB)",
            path=shm_dir,
            hint="give the container more shared memory (docker run --shm-size=1g) or lower the instance counts",
        )
    return free


def _repository_arg(argv: list[str]) -> list[str]:
    out = []
    for i, arg in enumerate(argv):
        for flag in ("--model-repository", "--model-store"):
            if arg == flag and i + 1 < len(argv):
                out.append(argv[i + 1])
            elif arg.startswith(flag + "="):
                out.append(arg.split("=", 1)[1])
    return out


def servers_on_repository(repo: Path, exclude_sid: int | None = None) -> list[int]:
    """Pids of live tritonserver processes whose ``--model-repository`` is ``repo`` (after resolving paths).

    Reads ``/proc/<pid>/cmdline`` of every process, so sleeping servers count too (upstream's
    ``pgrep -r R`` only sees running ones).
    """
    target = os.path.realpath(repo)
    found = []
    for pid in procs.all_pids():
        argv = procs.cmdline(pid)
        if not argv or os.path.basename(argv[0]) != "tritonserver":
            continue
        info = procs.proc_info(pid)
        if info is None or info.state in ("Z", "X") or (exclude_sid is not None and info.sid == exclude_sid):
            continue
        if procs.is_fork_before_exec(info):  # a server starting a stub, not a second server
            continue
        try:
            cwd = os.readlink(f"/proc/{pid}/cwd")
        except OSError:
            cwd = "/"
        for value in _repository_arg(argv):
            if os.path.realpath(os.path.join(cwd, value)) == target:
                found.append(pid)
                break
    return found


def check_no_other_server(repo: Path, force: bool) -> list[int]:
    """Refuse when another tritonserver serves ``repo`` unless ``force``; returns the pids found.

    Raises:
        LaunchError: another server runs on the repository and ``force`` is False.
    """
    pids = servers_on_repository(repo)
    if pids and not force:
        raise LaunchError(
            f"tritonserver already running on this repository (pid {', '.join(map(str, pids))})",
            path=repo,
            hint="stop it (`repo-builder stop REPO` or kill the pid) or pass --force to start anyway",
        )
    return pids
