"""The launcher against a real tritonserver (nvidia-pytriton's) on tiny numpy-only Python-backend repositories.

Every test copies its fixture repository (tests/fixtures/launcher) to a temporary folder, so "our" servers are
the tritonservers whose --model-repository is that folder, and picks fresh ports.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import urllib.request
from pathlib import Path

import pytest
from cli_support import assert_refused, cli_argv, run_cli
from conftest import PROJECT, free_ports, wait_for

from repo_builder.errors import LaunchError
from repo_builder.server import LaunchConfig, TritonServer, procs
from repo_builder.server.preflight import servers_on_repository

pytestmark = pytest.mark.server

FIXTURES = PROJECT / "tests" / "fixtures" / "launcher"
PREFIX_ARG = "--backend-config=python,shm-region-prefix-name="


@pytest.fixture
def mpirun() -> str:
    """mpirun's path; skips when it is missing outside CI, fails in CI (CI must `apt-get install openmpi-bin`)."""
    path = shutil.which("mpirun")
    if path is None:
        if os.environ.get("CI"):
            pytest.fail("mpirun is missing; CI must run `apt-get install -y openmpi-bin`")
        pytest.skip("mpirun is not installed (apt-get install openmpi-bin); world size > 1 needs it")
    return path


@pytest.fixture
def repo_copy(tmp_path: Path):
    """Copy a fixture repository; afterwards kill whatever still runs on it and remove its shm regions."""
    made: list[Path] = []

    def _copy(name: str = "tiny") -> Path:
        dst = tmp_path / f"{name}-{len(made)}"
        shutil.copytree(FIXTURES / name, dst)
        made.append(dst)
        return dst

    yield _copy
    for repo in made:
        leaked = servers_on_repository(repo)
        prefixes = {p for pid in leaked for p in rank_prefixes(pid)}
        for pid in leaked:
            try:
                os.killpg(procs.proc_info(pid).pgid, signal.SIGKILL)  # type: ignore[union-attr]
            except (ProcessLookupError, AttributeError):
                pass
        for prefix in prefixes:
            procs.remove_shm_files(prefix)
        assert not leaked, f"tritonserver processes left running on {repo}: {leaked}"


def rank_prefixes(pid: int) -> list[str]:
    return [a[len(PREFIX_ARG) :] for a in procs.cmdline(pid) if a.startswith(PREFIX_ARG)]


def ports3() -> dict[str, int]:
    h, g, m = free_ports(3)
    return {"http_port": h, "grpc_port": g, "metrics_port": m}


def cli_ports(p: dict[str, int]) -> list[str]:
    return [
        "--http_port",
        str(p["http_port"]),
        "--grpc_port",
        str(p["grpc_port"]),
        "--metrics_port",
        str(p["metrics_port"]),
    ]


def infer(http_url: str) -> list[int]:
    body = json.dumps({"inputs": [{"name": "input_ids", "datatype": "INT32", "shape": [3], "data": [1, 2, 3]}]})
    req = urllib.request.Request(f"{http_url}/v2/models/ensemble/infer", data=body.encode())
    with urllib.request.urlopen(req, timeout=10) as resp:
        return json.loads(resp.read())["outputs"][0]["data"]


def start_cli(args: list[str], out: Path) -> subprocess.Popen:
    with open(out, "wb") as fh:
        return subprocess.Popen(cli_argv(*args), stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)


def assert_all_gone(repo: Path, prefixes: list[str]) -> None:
    wait_for(lambda: not servers_on_repository(repo), 30, "tritonserver ranks to exit")
    for prefix in prefixes:
        assert procs.shm_files(prefix) == [], f"/dev/shm regions of {prefix} left behind"
    stubs = [pid for pid in procs.all_pids() if any(p in a for p in prefixes for a in procs.cmdline(pid))]
    assert stubs == [], f"processes of this launch left: {stubs}"


def test_world_size_two_ranks(repo_copy, mpirun, tmp_path: Path) -> None:
    repo = repo_copy()
    ports = ports3()
    server = TritonServer(
        LaunchConfig(model_repo=repo, world_size=2, log_file=tmp_path / "ts.log", timeout=120, **ports)
    )
    with server:
        ranks = server.rank_pids()
        assert sorted(ranks) == [0, 1]
        pid0, pid1 = ranks[0][0], ranks[1][0]
        prefixes = [rank_prefixes(pid0)[0], rank_prefixes(pid1)[0]]
        assert prefixes[0] != prefixes[1] and all(p.startswith(server.shm_prefix) for p in prefixes)
        # rank 0 serves every endpoint, rank 1 none of them
        assert set(ports.values()) <= procs.listening_tcp_ports(pid0)
        assert procs.listening_tcp_ports(pid1) == set()
        # rank 0 has a region per Python model (2), rank 1 only for tensorrt_llm (1)
        assert len(procs.shm_files(prefixes[0])) == 2
        assert len(procs.shm_files(prefixes[1])) == 1
        assert infer(server.http_url) == [4, 6, 8]
        assert server.pids[0] == server.processes.launcher_pid and procs.proc_info(server.pids[0]).comm == "mpirun"
    assert_all_gone(repo, prefixes)


def test_port_in_use_refused_before_start(repo_copy, tmp_path: Path) -> None:
    repo = repo_copy()
    ports = ports3()
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", ports["grpc_port"]))
        busy.listen()
        server = TritonServer(LaunchConfig(model_repo=repo, no_mpi=True, log_file=tmp_path / "ts.log", **ports))
        with pytest.raises(LaunchError) as err:
            server.start()
        assert err.value.key == "--grpc_port" and str(ports["grpc_port"]) in str(err.value)
        assert server.pids == [] and not (tmp_path / "ts.log").exists()
        out = run_cli("launch", str(repo), *cli_ports(ports), timeout=60)
    assert_refused(out, "--grpc_port", f"port {ports['grpc_port']}")
    assert servers_on_repository(repo) == []


def test_sigterm_to_launcher_stops_every_rank(repo_copy, mpirun, tmp_path: Path) -> None:
    repo = repo_copy()
    ports = ports3()
    out = tmp_path / "launch.out"
    proc = start_cli(
        ["launch", str(repo), "--world_size", "2", "--log-file", str(tmp_path / "ts.log"), *cli_ports(ports)], out
    )
    try:
        wait_for(lambda: "ready in" in out.read_text(), 120, "the launcher to report ready")
        ranks = servers_on_repository(repo)
        assert len(ranks) == 2
        prefixes = [p for pid in ranks for p in rank_prefixes(pid)]
        assert all(procs.shm_files(p) for p in prefixes)
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    text = out.read_text()
    assert code == 128 + signal.SIGTERM, text  # the shell's convention for "stopped by SIGTERM"
    # the server log was copied to stdout (foreground) and shows a graceful shutdown of both ranks
    assert "[1,0]<stderr>" in text and "[1,1]<stderr>" in text
    assert_all_gone(repo, prefixes)


def test_crashed_rank_is_cleaned_up(repo_copy, mpirun, tmp_path: Path) -> None:
    repo = repo_copy()
    ports = ports3()
    out = tmp_path / "launch.out"
    proc = start_cli(
        ["launch", str(repo), "--world_size", "2", "-q", "--log-file", str(tmp_path / "ts.log"), *cli_ports(ports)], out
    )
    try:
        wait_for(lambda: "ready in" in out.read_text(), 120, "the launcher to report ready")
        ranks = servers_on_repository(repo)
        prefixes = [p for pid in ranks for p in rank_prefixes(pid)]
        rank0 = next(pid for pid in ranks if rank_prefixes(pid)[0].endswith("_r0_"))
        os.kill(rank0, signal.SIGKILL)  # leaves its /dev/shm regions behind by itself
        code = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert code != 0, out.read_text()
    assert "exited with code" in out.read_text()
    assert_all_gone(repo, prefixes)


def test_model_that_fails_to_load(repo_copy, tmp_path: Path) -> None:
    repo = repo_copy("broken")
    ports = ports3()
    out = run_cli("launch", str(repo), "--no-mpi", "-q", "--log-file", str(tmp_path / "ts.log"), *cli_ports(ports))
    assert out.returncode != 0
    assert "exited with code 1 before it was ready" in out.stderr
    assert "last 40 lines of" in out.stderr and "fails to load on purpose" in out.stderr
    # the reason is quoted on its own, whatever the log tail holds
    summary = out.stderr.split("models that failed to load:")[1].split("---")[0]
    assert "broken: " in summary and "RuntimeError: launcher fixture: this model fails to load on purpose" in summary
    assert servers_on_repository(repo) == []
    stubs = [p for p in procs.all_pids() if any(str(repo) in a for a in procs.cmdline(p))]
    assert stubs == []


def test_detach_and_stop(repo_copy, tmp_path: Path) -> None:
    repo = repo_copy()
    ports = ports3()
    pid_file = tmp_path / "ts.pid"
    out = run_cli(
        "launch",
        str(repo),
        "--detach",
        "--pid-file",
        str(pid_file),
        "--log-file",
        str(tmp_path / "ts.log"),
        *cli_ports(ports),
    )
    try:
        assert out.returncode == 0, out.stderr
        record = json.loads(pid_file.read_text())
        ((rank0_pid, _),) = record["ranks"].values()
        prefix = record["launch_id"] + "_"
        assert procs.is_alive(rank0_pid) and procs.shm_files(prefix)
        assert infer(f"http://127.0.0.1:{ports['http_port']}") == [4, 6, 8]
        # a second launch on the same repository is refused, unless --force
        again = run_cli("launch", str(repo), "--dry-run", *cli_ports(ports3()), timeout=60)
        assert_refused(again, "already running on this repository")
        assert str(rank0_pid) in again.stderr
        forced = run_cli("launch", str(repo), "--dry-run", "--force", *cli_ports(ports3()), timeout=60)
        assert forced.returncode == 0 and "--force" in forced.stdout
    finally:
        stopped = run_cli("stop", "--pid-file", str(pid_file))
    assert stopped.returncode == 0, stopped.stderr
    assert not pid_file.exists()
    assert_all_gone(repo, [prefix])


def test_detach_and_stop_by_repository(repo_copy, tmp_path: Path) -> None:
    repo = repo_copy()
    out = run_cli(
        "launch", str(repo), "--detach", "--no-mpi", "--log-file", str(tmp_path / "ts.log"), *cli_ports(ports3())
    )
    assert out.returncode == 0, out.stderr
    (pid,) = servers_on_repository(repo)
    prefix = rank_prefixes(pid)[0]
    stopped = run_cli("stop", str(repo))
    assert stopped.returncode == 0, stopped.stderr
    assert_all_gone(repo, [prefix])
    again = run_cli("stop", str(repo), timeout=60)
    assert_refused(again, "no detached launch")


def test_lock_file_world_size_is_used(repo_copy, mpirun, tmp_path: Path) -> None:
    repo = repo_copy()
    (repo / "repo-builder.lock.json").write_text(
        json.dumps({"launch": {"world_size": 2, "tensorrt_llm_model_names": ["tensorrt_llm"]}})
    )
    with TritonServer(LaunchConfig(model_repo=repo, log_file=tmp_path / "ts.log", timeout=120, **ports3())) as server:
        assert server.plan.world_size == 2 and "lock" in server.plan.world_size_origin
        assert sorted(server.rank_pids()) == [0, 1]
        prefixes = [server.rank_shm_prefix(0), server.rank_shm_prefix(1)]
    assert_all_gone(repo, prefixes)
    with pytest.raises(LaunchError, match="contradicts"):
        TritonServer(LaunchConfig(model_repo=repo, world_size=3, **ports3())).start()
    assert servers_on_repository(repo) == []


def test_another_server_on_the_port_does_not_count_as_ready(repo_copy, tmp_path: Path) -> None:
    """Readiness requires our rank 0 to hold the port: a port taken after preflight makes tritonserver exit."""
    repo = repo_copy()
    ports = ports3()
    server = TritonServer(LaunchConfig(model_repo=repo, no_mpi=True, log_file=tmp_path / "ts.log", timeout=60, **ports))
    server.prepare()  # preflight passes: the port is still free
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", ports["http_port"]))
        busy.listen()
        server.start()
        with pytest.raises(LaunchError) as err:
            server.wait_ready()
    assert "before it was ready" in str(err.value) or "not from our tritonserver" in str(err.value)
    assert server.pids == []
    assert procs.shm_files(server.shm_prefix) == []


def test_sigint_in_foreground_without_mpi(repo_copy, tmp_path: Path) -> None:
    repo = repo_copy()
    out = tmp_path / "launch.out"
    proc = start_cli(
        ["launch", str(repo), "--no-mpi", "-q", "--log-file", str(tmp_path / "ts.log"), *cli_ports(ports3())], out
    )
    try:
        wait_for(lambda: "ready in" in out.read_text(), 120, "the launcher to report ready")
        (pid,) = servers_on_repository(repo)
        prefixes = rank_prefixes(pid)
        assert procs.proc_info(pid).ppid == proc.pid  # the single rank runs without mpirun
        proc.send_signal(signal.SIGINT)
        code = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert code == 128 + signal.SIGINT, out.read_text()
    assert "successfully unloaded" in (tmp_path / "ts.log").read_text()  # graceful, not killed
    assert_all_gone(repo, prefixes)


def test_stop_escalates_to_sigkill(repo_copy, tmp_path: Path) -> None:
    """A model whose finalize() hangs keeps tritonserver alive after SIGTERM: stop() must SIGKILL and clean up."""
    repo = repo_copy("hang_on_stop")
    server = TritonServer(
        LaunchConfig(model_repo=repo, no_mpi=True, log_file=tmp_path / "ts.log", stop_timeout=2, **ports3())
    )
    with server:
        prefix = server.rank_shm_prefix(0)
        assert procs.shm_files(prefix)
    assert server.returncode == -signal.SIGKILL
    assert_all_gone(repo, [prefix])


def test_second_signal_kills_at_once(repo_copy, tmp_path: Path) -> None:
    """First SIGTERM starts a graceful stop that hangs (finalize sleeps); the second one SIGKILLs right away."""
    repo = repo_copy("hang_on_stop")
    out = tmp_path / "launch.out"
    proc = start_cli(
        [
            "launch",
            str(repo),
            "--no-mpi",
            "-q",
            "--stop-timeout",
            "600",
            "--log-file",
            str(tmp_path / "ts.log"),
            *cli_ports(ports3()),
        ],
        out,
    )
    try:
        wait_for(lambda: "ready in" in out.read_text(), 120, "the launcher to report ready")
        (pid,) = servers_on_repository(repo)
        prefixes = rank_prefixes(pid)
        proc.send_signal(signal.SIGTERM)
        wait_for(lambda: "stopping tritonserver" in out.read_text(), 30, "the launcher to start stopping")
        assert proc.poll() is None  # still waiting for the graceful stop (stop timeout 600 s)
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert code == 128 + signal.SIGTERM, out.read_text()
    assert "killed with SIGKILL" in out.read_text()  # not the graceful stop, which would take 600 s
    assert_all_gone(repo, prefixes)


def test_restart_right_after_stop_on_the_same_ports(repo_copy, tmp_path: Path) -> None:
    """Issue 13 item 16: the sockets of the server just stopped (TIME_WAIT on its ports) are no other server."""
    repo = repo_copy()
    ports = ports3()
    config = dict(model_repo=repo, no_mpi=True, log_file=tmp_path / "ts.log", timeout=120, **ports)
    with TritonServer(LaunchConfig(**config)) as first:
        for _ in range(5):
            assert infer(first.http_url) == [4, 6, 8]  # urllib closes each connection: TIME_WAIT on the port
        prefixes = [first.rank_shm_prefix(0)]
    with TritonServer(LaunchConfig(**config)) as second:
        assert infer(second.http_url) == [4, 6, 8]
        prefixes.append(second.rank_shm_prefix(0))
    assert_all_gone(repo, prefixes)
