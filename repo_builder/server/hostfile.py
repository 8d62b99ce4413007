"""Open MPI hostfiles for multi-node launches: parse one, and say which host each rank runs on.

Format (Open MPI ``mpirun(1)``, "Specifying Host Nodes"): one host per line, ``HOST slots=N [max_slots=M]``,
``#`` starts a comment. repo-builder requires ``slots=`` on every line so the mapping does not depend on
the remote core count, and launches with ``--map-by slot``: ranks fill the first host's slots, then the next
host's, in file order; the MPMD contexts are ranks 0, 1, ... in order. So rank 0 (the one that serves the
endpoints) runs on the first host, which must be this machine: the launcher waits for readiness there.
"""

from __future__ import annotations

import re
import socket
from dataclasses import dataclass
from pathlib import Path

from ..errors import LaunchError

_SLOTS = re.compile(r"^(slots|max_slots|max-slots)=(\d+)$")


@dataclass(frozen=True)
class HostSlots:
    """One hostfile line: ``host`` and its ``slots`` (ranks it may run), with its 1-based ``line``."""

    host: str
    slots: int
    line: int


def read_hostfile(path: Path) -> list[HostSlots]:
    """Parse an Open MPI hostfile.

    Raises:
        LaunchError: the file cannot be read, a line lacks ``slots=N`` or has an unknown field or
            ``slots=0``, a host appears twice, or there is no host (each names ``--hostfile`` and the line).
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise LaunchError(f"cannot read the hostfile: {exc}", path=path, key="--hostfile") from None
    hosts: list[HostSlots] = []
    for number, raw in enumerate(text.splitlines(), 1):
        words = raw.split("#", 1)[0].split()
        if not words:
            continue
        host, fields = words[0], {}
        for word in words[1:]:
            match = _SLOTS.match(word)
            if not match:
                raise LaunchError(
                    f"line {number}: unknown field {word!r} (expected slots=N or max_slots=N)",
                    path=path,
                    key="--hostfile",
                )
            fields[match.group(1).replace("-", "_")] = int(match.group(2))
        if "slots" not in fields:
            raise LaunchError(
                f"line {number}: {host} has no slots=N",
                path=path,
                key="--hostfile",
                hint=f"write '{host} slots=<GPUs on {host}>' (one rank per GPU)",
            )
        if fields["slots"] < 1:
            raise LaunchError(
                f"line {number}: {host} has slots={fields['slots']}",
                path=path,
                key="--hostfile",
                hint="give every host at least one slot, or leave it out",
            )
        if any(h.host == host for h in hosts):
            raise LaunchError(f"line {number}: {host} is listed twice", path=path, key="--hostfile")
        hosts.append(HostSlots(host=host, slots=fields["slots"], line=number))
    if not hosts:
        raise LaunchError("the hostfile lists no host", path=path, key="--hostfile")
    return hosts


def rank_hosts(hosts: list[HostSlots], world_size: int, *, path: Path | None = None) -> list[str]:
    """The host of every rank under ``--map-by slot``: ``[host of rank 0, host of rank 1, ...]``.

    Raises:
        LaunchError: the hostfile has fewer slots than the world size.
    """
    out = [h.host for h in hosts for _ in range(h.slots)]
    if len(out) < world_size:
        raise LaunchError(
            f"the hostfile has {len(out)} slot(s) for world size {world_size} (one rank per GPU)",
            path=path,
            key="--hostfile",
            hint="add hosts or slots",
        )
    return out[:world_size]


def is_local(host: str) -> bool:
    """True when ``host`` names this machine: ``localhost``, its host name, or an address that can be bound
    here (every address of its resolved names must be local)."""
    if host in ("localhost", socket.gethostname(), socket.getfqdn()):
        return True
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except OSError:
        return False
    addresses = {str(info[4][0]) for info in infos}  # sockaddr[0] is the address string (IPv4 and IPv6)
    for address in addresses:
        family = socket.AF_INET6 if ":" in address else socket.AF_INET
        with socket.socket(family, socket.SOCK_STREAM) as sock:
            try:
                sock.bind((address, 0))
            except OSError:
                return False
    return bool(addresses)
