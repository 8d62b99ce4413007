"""Rank discovery while a tritonserver forks: a forked child shows its parent's ``comm`` and command line until
it execs (tritonserver starts every Python-backend stub that way), and must never be taken for a rank or for a
second server on the repository.

The "tritonserver" here is the Python interpreter reached through a symlink named ``tritonserver`` (the kernel
takes ``comm`` from the name that was executed), started by a shell script standing in for mpirun; each rank
forks a child that stays un-exec'd. Before the fix, a CI run under load found a rank's forked child as rank 1
(its command line changed to the stub's a moment later).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from repo_builder.server import procs, shm_prefix
from repo_builder.server.launch_processes import LaunchProcesses
from repo_builder.server.preflight import servers_on_repository

RANK_CODE = "import os, time\nif os.fork() == 0:\n    time.sleep(120)\n    os._exit(0)\ntime.sleep(120)\n"


@pytest.fixture
def fake_launch(tmp_path: Path):
    """A fake mpirun (shell script, new session) starting two fake ranks that each fork a child."""
    binary = tmp_path / "bin" / "tritonserver"
    binary.parent.mkdir()
    binary.symlink_to(os.path.realpath(sys.executable))
    repo = tmp_path / "repo"
    repo.mkdir()
    launch = LaunchProcesses("rbtest" + os.urandom(4).hex())
    ranks = [
        f"'{binary}' -c '{RANK_CODE}' --model-repository='{repo}' "
        f"--backend-config=python,shm-region-prefix-name={shm_prefix(launch.launch_id, rank)} &"
        for rank in (0, 1)
    ]
    mpirun = tmp_path / "mpirun"
    mpirun.write_text("#!/bin/sh\n" + "\n".join(ranks) + "\nwait\n")
    mpirun.chmod(0o755)
    launch.plan = SimpleNamespace(use_mpi=True, world_size=2)  # type: ignore[assignment]
    with open(tmp_path / "log", "wb") as log:
        launch.spawn([str(mpirun)], dict(os.environ), log)
    try:
        yield launch, repo
    finally:
        for member in procs.session_members(launch.launcher_pid or -1):
            procs.send_signal(member.pid, 9, member.start_time)
        if launch.proc is not None:
            launch.proc.wait(timeout=10)


def _wait_for_forks(sid: int) -> list[procs.ProcInfo]:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        found = [m for m in procs.session_members(sid) if m.comm == "tritonserver"]
        if len(found) == 4:
            return found
        time.sleep(0.05)
    raise AssertionError(f"expected 2 ranks and 2 forked children, found {found}")


def test_ranks_are_found_by_their_own_pids_not_their_forked_children(fake_launch) -> None:
    launch, _repo = fake_launch
    members = _wait_for_forks(launch.launcher_pid)
    forked = {m.pid for m in members if procs.is_fork_before_exec(m)}
    parents = {m.pid for m in members} - forked
    assert len(forked) == 2 and len(parents) == 2
    ranks = launch.rank_pids()
    assert sorted(ranks) == [0, 1]
    assert {pid for pid, _ in ranks.values()} == parents
    for rank, (pid, _) in ranks.items():
        assert procs.proc_info(pid).ppid == launch.launcher_pid  # type: ignore[union-attr]
        assert any(a.endswith(f"_r{rank}_") for a in procs.cmdline(pid))


def test_a_forked_child_is_not_a_second_server_on_the_repository(fake_launch) -> None:
    launch, repo = fake_launch
    members = _wait_for_forks(launch.launcher_pid)
    parents = {m.pid for m in members if not procs.is_fork_before_exec(m)}
    assert sorted(servers_on_repository(repo)) == sorted(parents)
