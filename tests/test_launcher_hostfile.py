"""`repo-builder launch --hostfile`: ranks spread over hosts by Open MPI.

The multi-host test builds two real "hosts" on this machine: two network namespaces joined by a veth pair,
each with its own address (10.77.0.1 and 10.77.0.2, reachable only inside those namespaces). The launcher runs
in host A; mpirun reaches host B through its rsh agent (``OMPI_MCA_plm_rsh_agent``: a script that enters the
host's namespace with ``ip netns exec``), so rank 0 serves on A while rank 1 runs on B. Needs root (CI is root).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from cli_support import assert_refused, cli_argv
from conftest import PROJECT

from repo_builder.errors import LaunchError
from repo_builder.server import procs
from repo_builder.server.hostfile import is_local, rank_hosts, read_hostfile
from repo_builder.server.preflight import servers_on_repository

FIXTURE = PROJECT / "tests" / "fixtures" / "launcher" / "tiny"
PREFIX_ARG = "--backend-config=python,shm-region-prefix-name="


def hostfile(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "hosts"
    path.write_text(text)
    return path


def tiny_repo(tmp_path: Path) -> Path:
    repo = tmp_path / "tiny"
    shutil.copytree(FIXTURE, repo)
    (repo / "ensemble" / "1").mkdir(exist_ok=True)  # git keeps no empty folder
    return repo


def cli(*args: str, netns: str | None = None, env: dict | None = None, timeout: float = 120):
    argv = cli_argv(*args)
    if netns:
        argv = ["ip", "netns", "exec", netns, *argv]
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})})


# ---------------------------------------------------------------------------------------------- parsing
def test_ranks_fill_each_hosts_slots_in_file_order(tmp_path) -> None:
    hosts = read_hostfile(hostfile(tmp_path, "# cluster\nnode-a slots=2  # the head\n\nnode-b slots=2 max_slots=2\n"))
    assert [(h.host, h.slots, h.line) for h in hosts] == [("node-a", 2, 2), ("node-b", 2, 4)]
    assert rank_hosts(hosts, 4) == ["node-a", "node-a", "node-b", "node-b"]
    assert rank_hosts(hosts, 3) == ["node-a", "node-a", "node-b"]
    with pytest.raises(LaunchError, match="4 slot"):
        rank_hosts(hosts, 5)


@pytest.mark.parametrize(
    "text, message",
    [
        ("node-a\n", "line 1: node-a has no slots=N"),
        ("node-a slots=1\nnode-b slots=0\n", "line 2: node-b has slots=0"),
        ("node-a slots=1 cpus=4\n", "line 1: unknown field 'cpus=4'"),
        ("node-a slots=1\nnode-a slots=1\n", "line 2: node-a is listed twice"),
        ("# nothing\n", "lists no host"),
    ],
)
def test_bad_hostfiles_are_named(tmp_path, text, message) -> None:
    with pytest.raises(LaunchError) as err:
        read_hostfile(hostfile(tmp_path, text))
    assert message in str(err.value) and err.value.key == "--hostfile"


def test_local_names() -> None:
    assert is_local("localhost") and is_local("127.0.0.1")
    assert not is_local("192.0.2.1")  # TEST-NET-1: never an address of this machine
    assert not is_local("no-such-host.invalid")


def test_dry_run_prints_the_rank_to_host_mapping(tmp_path) -> None:
    if shutil.which("mpirun") is None:
        pytest.skip("mpirun is not installed (apt-get install openmpi-bin)")
    repo = tiny_repo(tmp_path)
    hosts = hostfile(tmp_path, "localhost slots=1\nnode-b slots=2\n")
    out = cli("launch", str(repo), "--world_size", "3", "--hostfile", str(hosts), "--dry-run")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[:3] == [
        "rank 0 -> localhost (all models + HTTP/gRPC/metrics)",
        "rank 1 -> node-b (tensorrt_llm)",
        "rank 2 -> node-b (tensorrt_llm)",
    ]
    argv = lines[-1].split()
    assert argv[0] == "mpirun" and argv[argv.index("--hostfile") + 1] == str(hosts)
    assert argv[argv.index("--map-by") + 1] == "slot"


def test_dry_run_shows_each_ranks_device_environment(tmp_path) -> None:
    """Per rank: the device variables it starts with (a remote host's own unless exported) and the GPU the
    C++ backend runs it on (gpu_device_ids' r-th id, else its local rank on its host)."""
    if shutil.which("mpirun") is None:
        pytest.skip("mpirun is not installed (apt-get install openmpi-bin)")
    repo = tiny_repo(tmp_path)
    config = repo / "tensorrt_llm" / "config.pbtxt"
    engine_text = config.read_text().replace('backend: "python"', 'backend: "tensorrtllm"')
    config.write_text(engine_text)
    hosts = hostfile(tmp_path, "localhost slots=2\nnode-b slots=2\n")
    env = {"CUDA_VISIBLE_DEVICES": "4,5,6,7"}
    out = cli("launch", str(repo), "--world_size", "3", "--hostfile", str(hosts), "--dry-run", env=env)
    assert out.returncode == 0, out.stderr
    devices = [line for line in out.stdout.splitlines() if " devices: " in line]
    assert devices == [
        "rank 0 devices: CUDA_VISIBLE_DEVICES=4,5,6,7; tensorrt_llm runs on visible GPU 0 (its local rank on "
        "localhost; gpu_device_ids unset)",
        "rank 1 devices: CUDA_VISIBLE_DEVICES=4,5,6,7; tensorrt_llm runs on visible GPU 1 (its local rank on "
        "localhost; gpu_device_ids unset)",
        "rank 2 devices: node-b's own environment; tensorrt_llm runs on visible GPU 0 (its local rank on node-b; "
        "gpu_device_ids unset)",
    ], out.stdout
    config.write_text(engine_text + 'parameters: { key: "gpu_device_ids" value: { string_value: "2,3" } }\n')
    out = cli("launch", str(repo), "--world_size", "3", "--hostfile", str(hosts), "--dry-run", env=env)
    devices = [line.split("; ", 1)[1] for line in out.stdout.splitlines() if " devices: " in line]
    assert devices == [
        "tensorrt_llm runs on visible GPU 2 (gpu_device_ids 2,3)",
        "tensorrt_llm runs on visible GPU 3 (gpu_device_ids 2,3)",
        "tensorrt_llm runs on no GPU of its own (gpu_device_ids 2,3 lists 2)",
    ], out.stdout


def test_first_host_must_be_this_machine(tmp_path) -> None:
    repo = tiny_repo(tmp_path)
    out = cli(
        "launch",
        str(repo),
        "--world_size",
        "2",
        "--hostfile",
        str(hostfile(tmp_path, "192.0.2.1 slots=1\nlocalhost slots=1\n")),
        "--dry-run",
    )
    assert_refused(out, "--hostfile", "192.0.2.1")
    assert "Traceback" not in out.stderr


# ---------------------------------------------------------------------------------------------- two real hosts
AGENT = """#!/bin/sh
# mpirun rsh agent: AGENT HOST COMMAND... runs COMMAND (a shell command line) inside HOST's network namespace
host="$1"; shift
echo "$host" >> {log}
case "$host" in
{cases}
  *) echo "unknown host $host" >&2; exit 1 ;;
esac
exec ip netns exec "$ns" /bin/sh -c "$*"
"""


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=30)


@pytest.fixture
def two_hosts():
    """Two network namespaces joined by a veth pair: ``{"A": (netns, address), "B": (netns, address)}``.

    Finalizer: kill whatever still runs inside them, then delete both (which removes the veth pair).
    """
    if os.geteuid() != 0:
        pytest.skip("network namespaces need root")
    if shutil.which("ip") is None or shutil.which("mpirun") is None:
        if os.environ.get("CI"):
            pytest.fail("ip (iproute2) and mpirun (openmpi-bin) are needed")
        pytest.skip("ip (iproute2) or mpirun (openmpi-bin) missing")
    tag = f"rb{os.getpid() % 100000}"
    hosts = {"A": (f"{tag}a", "10.77.0.1"), "B": (f"{tag}b", "10.77.0.2")}
    created = []
    try:
        for ns, _ in hosts.values():
            _ip("netns", "add", ns)
            created.append(ns)
        _ip("link", "add", f"{tag}va", "type", "veth", "peer", "name", f"{tag}vb")
        for side, (ns, address) in hosts.items():
            dev = f"{tag}v{side.lower()}"
            _ip("link", "set", dev, "netns", ns)
            _ip("-n", ns, "addr", "add", f"{address}/24", "dev", dev)
            _ip("-n", ns, "link", "set", dev, "up")
            _ip("-n", ns, "link", "set", "lo", "up")
        yield hosts
    finally:
        for ns in created:
            pids = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True).stdout.split()
            for pid in pids:
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except ProcessLookupError:
                    pass
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def _netns_inode(path: str) -> int:
    return os.stat(path).st_ino


@pytest.mark.server
def test_rank_zero_serves_on_host_a_while_rank_one_runs_on_host_b(two_hosts, tmp_path) -> None:
    (ns_a, addr_a), (ns_b, addr_b) = two_hosts["A"], two_hosts["B"]
    repo = tiny_repo(tmp_path)
    agent_log = tmp_path / "agent.log"
    agent = tmp_path / "netns-agent.sh"
    agent.write_text(AGENT.format(log=agent_log, cases=f"  {addr_a}) ns={ns_a} ;;\n  {addr_b}) ns={ns_b} ;;"))
    agent.chmod(0o755)
    hosts = hostfile(tmp_path, f"{addr_a} slots=1\n{addr_b} slots=1\n")
    pid_file = tmp_path / "launch.json"
    # Open MPI's own knobs: the rsh agent, and its TCP traffic kept on the veth link
    env = {
        "OMPI_MCA_plm_rsh_agent": str(agent),
        "OMPI_MCA_oob_tcp_if_include": "10.77.0.0/24",
        "OMPI_MCA_btl_tcp_if_include": "10.77.0.0/24",
    }
    dry = cli("launch", str(repo), "--world_size", "2", "--hostfile", str(hosts), "--dry-run", netns=ns_a, env=env)
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout.splitlines()[:2] == [
        f"rank 0 -> {addr_a} (all models + HTTP/gRPC/metrics)",
        f"rank 1 -> {addr_b} (tensorrt_llm)",
    ]
    out = cli(
        "launch",
        str(repo),
        "--world_size",
        "2",
        "--hostfile",
        str(hosts),
        "--detach",
        "--pid-file",
        str(pid_file),
        "--timeout",
        "240",
        "--log-file",
        str(tmp_path / "ts.log"),
        netns=ns_a,
        env=env,
        timeout=300,
    )
    try:
        assert out.returncode == 0, out.stdout + out.stderr + (tmp_path / "ts.log").read_text(errors="replace")[-3000:]
        ranks = {}
        for pid in servers_on_repository(repo):
            (prefix,) = [a[len(PREFIX_ARG) :] for a in procs.cmdline(pid) if a.startswith(PREFIX_ARG)]
            ranks[int(prefix.rsplit("_r", 1)[1].rstrip("_"))] = pid
        assert sorted(ranks) == [0, 1]
        # each rank runs in its own host's network namespace
        assert _netns_inode(f"/proc/{ranks[0]}/ns/net") == _netns_inode(f"/run/netns/{ns_a}")
        assert _netns_inode(f"/proc/{ranks[1]}/ns/net") == _netns_inode(f"/run/netns/{ns_b}")
        # mpirun went through the agent for host B (it starts host A's rank itself)
        assert agent_log.read_text().split() == [addr_b]
        # rank 0 answers on host A; the ensemble's tensorrt_llm step is served by rank 0 (rank 1 only loads it)
        query = (
            "import json, urllib.request\n"
            "body = json.dumps({'inputs': [{'name': 'input_ids', 'datatype': 'INT32', 'shape': [3], "
            "'data': [1, 2, 3]}]}).encode()\n"
            "req = urllib.request.Request('http://127.0.0.1:8000/v2/models/ensemble/infer', data=body)\n"
            "print(json.dumps(json.loads(urllib.request.urlopen(req, timeout=30).read())"
            "['outputs'][0]['data']))\n"
        )
        got = subprocess.run(
            ["ip", "netns", "exec", ns_a, sys.executable, "-c", query], capture_output=True, text=True, timeout=60
        )
        assert got.returncode == 0, got.stderr
        assert json.loads(got.stdout) == [4, 6, 8]
        launch_id = json.loads(pid_file.read_text())["launch_id"]
        assert procs.shm_files(f"{launch_id}_r1_"), "rank 1 (on host B) created its own Python-backend region"
    finally:
        stop = cli("stop", "--pid-file", str(pid_file), timeout=120)
    assert stop.returncode == 0, stop.stderr
    assert servers_on_repository(repo) == []
    assert procs.shm_files(f"{launch_id}_") == []
