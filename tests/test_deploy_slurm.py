"""`repo-builder deploy slurm`: the generated sbatch script, and the script run for real on a one-node Slurm
cluster (Debian's slurm-wlm: slurmctld + slurmd started by the test with a generated slurm.conf in tmp,
``auth/none``, one fake GPU as a count-only GRES), serving the tiny random LLaMA repository with the real
tritonserver through ``srun --mpi=pmix --multi-prog``, queried over HTTP, then stopped the way Slurm stops a
job at its time limit (``--signal=B:TERM`` -> the script's trap -> SIGTERM to the step).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
from cli_support import assert_refused, run_cli
from conftest import free_ports
from deploy_support import greedy_text, http_generate, rendered_repo, tiny_llama_repo

from repo_builder.deploy.facts import DeployError, read_facts
from repo_builder.deploy.slurm import SlurmOptions, script
from repo_builder.server import procs
from repo_builder.server.preflight import servers_on_repository

PROMPT = "What is machine learning?"


def multi_prog_lines(text: str) -> list[str]:
    lines = text.splitlines()
    start = lines.index('cat > "$CONF" <<EOF') + 1
    return lines[start : lines.index("EOF", start)]


# ---------------------------------------------------------------------------------------------- the script
def test_two_nodes_four_ranks_script(tmp_path) -> None:
    facts = read_facts(rendered_repo(tmp_path, 2, 2))
    text = script(facts, SlurmOptions(name="llama", nodes=2, partition="gpu", time="04:00:00"))
    subprocess.run(["bash", "-n"], input=text, text=True, check=True)
    sbatch = [line.split(None, 1)[1] for line in text.splitlines() if line.startswith("#SBATCH ")]
    assert sbatch == [
        "--job-name=llama",
        "--nodes=2",
        "--ntasks-per-node=2",
        "--output=llama-%j.out",
        "--signal=B:TERM@120",
        "--gpus-per-node=2",
        "--partition=gpu",
        "--time=04:00:00",
    ]
    assert "srun --nodes=2 --ntasks=4 --ntasks-per-node=2 --mpi=pmix --kill-on-bad-exit=1 --multi-prog" in text
    lines = multi_prog_lines(text)
    assert [line.split()[0] for line in lines] == ["0", "1", "2", "3"]
    for rank, line in enumerate(lines):
        argv = line.split()[1:]
        assert argv[0] == "/opt/tritonserver/bin/tritonserver" and "--model-repository=/models/llama" in argv
        assert f"--backend-config=python,shm-region-prefix-name=rb${{SLURM_JOB_ID}}_r{rank}_" in argv
        if rank == 0:
            assert "--http-port=8000" in argv and "--load-model=tensorrt_llm" not in argv
        else:
            assert argv[-5:] == [
                "--load-model=tensorrt_llm",
                "--allow-http=false",
                "--allow-grpc=false",
                "--allow-metrics=false",
                "--exit-timeout-secs=25",  # launch's defaults: --exit-timeout 5 + --unload-timeout 20
            ]


def test_stop_timeouts_and_histogram_latencies_pass_through_like_launch(tmp_path) -> None:
    """launch's --exit-timeout/--unload-timeout/--histogram-latencies: every rank gets --exit-timeout-secs = their
    sum, Slurm's stop signal comes early enough for it, rank 0 exports Triton's latency distributions."""
    from repo_builder.server.command import LATENCY_DISTRIBUTIONS

    facts = read_facts(rendered_repo(tmp_path, 2, 2))
    opts = SlurmOptions(name="llama", nodes=2, exit_timeout=10, unload_timeout=199.5, histogram_latencies=True)
    text = script(facts, opts)
    assert "#SBATCH --signal=B:TERM@240" in text.splitlines()  # 10 + 200 s + 30 s for the clean-up
    lines = [line.split()[1:] for line in multi_prog_lines(text)]
    assert all("--exit-timeout-secs=210" in argv for argv in lines)
    assert all(f"--metrics-config={s}" in lines[0] for s in LATENCY_DISTRIBUTIONS)
    assert not any(a.startswith("--metrics-config") for argv in lines[1:] for a in argv)
    with pytest.raises(DeployError, match="--unload-timeout"):
        script(facts, SlurmOptions(name="llama", nodes=2, unload_timeout=0))


def test_layout_that_contradicts_the_lock_file_is_refused(tmp_path) -> None:
    repo = rendered_repo(tmp_path, 2, 2)
    out = run_cli("deploy", "slurm", str(repo), "--nodes", "2", "--gpus-per-node", "1")
    assert_refused(out, "--gpus-per-node", "world size 4")
    assert "Traceback" not in out.stderr and out.stdout == ""


# ---------------------------------------------------------------------------------------------- a real cluster
def _require_slurm() -> None:
    missing = [b for b in ("slurmctld", "slurmd", "sbatch") if shutil.which(b) is None]
    if missing:
        if os.geteuid() == 0 and os.environ.get("CI"):
            pytest.fail(f"{', '.join(missing)} missing; scripts/setup_env.sh installs slurm-wlm as root")
        pytest.skip(f"{', '.join(missing)} not installed (root: apt-get install slurm-wlm libpmix-dev)")
    if os.geteuid() != 0:
        pytest.skip("the one-node Slurm cluster runs slurmd as root (it starts jobs as their user)")


def _wait(cond, timeout: float, what: str, log: Path | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.5)
    tail = "\n".join(log.read_text(errors="replace").splitlines()[-40:]) if log and log.exists() else ""
    raise AssertionError(f"timed out after {timeout} s waiting for {what}\n{tail}")


@pytest.fixture
def slurm_cluster(tmp_path):
    """A one-node Slurm cluster on this machine; yields the environment for sbatch/squeue/scancel."""
    _require_slurm()
    root = tmp_path / "slurm"
    for sub in ("state", "spool", "log"):
        (root / sub).mkdir(parents=True)
    node = socket.gethostname().split(".")[0]
    ctld_port, d_port = free_ports(2)
    (root / "slurm.conf").write_text(
        "\n".join(
            [
                "ClusterName=rbtest",
                f"SlurmctldHost={node}(127.0.0.1)",
                f"SlurmctldPort={ctld_port}",
                f"SlurmdPort={d_port}",
                "AuthType=auth/none",
                "CredType=cred/none",
                "SlurmUser=root",
                "SlurmdUser=root",
                f"StateSaveLocation={root}/state",
                f"SlurmdSpoolDir={root}/spool",
                f"SlurmctldPidFile={root}/slurmctld.pid",
                f"SlurmdPidFile={root}/slurmd.pid",
                f"SlurmctldLogFile={root}/log/slurmctld.log",
                f"SlurmdLogFile={root}/log/slurmd.log",
                "ProctrackType=proctrack/linuxproc",
                "TaskPlugin=task/none",
                "SelectType=select/cons_tres",
                "SelectTypeParameters=CR_CPU",
                "MpiDefault=none",
                "ReturnToService=2",
                "SchedulerType=sched/builtin",
                "JobAcctGatherType=jobacct_gather/none",
                "AccountingStorageType=accounting_storage/none",
                "KillWait=60",
                "GresTypes=gpu",
                f"NodeName={node} NodeAddr=127.0.0.1 CPUs={os.cpu_count() or 1} RealMemory=2000 Gres=gpu:1",
                "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP",
                "",
            ]
        )
    )
    # a count-only GPU: the script's `#SBATCH --gpus-per-node` is schedulable without a device
    (root / "gres.conf").write_text(f"NodeName={node} Name=gpu File=/dev/null\n")
    env = dict(os.environ, SLURM_CONF=str(root / "slurm.conf"))
    daemons = []
    try:
        for daemon in ("slurmctld", "slurmd"):
            with open(root / "log" / f"{daemon}.out", "wb") as out:
                daemons.append(
                    subprocess.Popen(
                        [daemon, "-D", "-f", str(root / "slurm.conf")],
                        stdout=out,
                        stderr=subprocess.STDOUT,
                        env=env,
                        start_new_session=True,
                    )
                )
            time.sleep(1)

        def idle() -> bool:
            got = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True, env=env)
            return got.stdout.strip() == "idle"

        _wait(idle, 60, "the Slurm node to be idle", root / "log" / "slurmctld.log")
        yield env
    finally:
        subprocess.run(["scancel", "--full", "--user=root"], env=env, capture_output=True)
        for proc in reversed(daemons):
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _job_gone(env: dict, job: str) -> bool:
    out = subprocess.run(["squeue", "-h", "-j", job], capture_output=True, text=True, env=env)
    return out.stdout.strip() == ""


@pytest.mark.server
def test_sbatch_script_serves_the_tiny_model_under_slurm(slurm_cluster, tmp_path) -> None:
    from repo_builder.server import find_tritonserver

    env = slurm_cluster
    repo, ckpt = tiny_llama_repo(tmp_path / "model")
    http, grpc, metrics = free_ports(3)
    job_script = tmp_path / "serve.sbatch"
    out = run_cli(
        "deploy",
        "slurm",
        str(repo),
        "--nodes",
        "1",
        "--gpus-per-node",
        "1",
        "--tritonserver",
        str(find_tritonserver().path),
        "--http-port",
        str(http),
        "--grpc-port",
        str(grpc),
        "--metrics-port",
        str(metrics),
        "--ready-timeout",
        "600",
        "--name",
        "tiny",
        "--output",
        str(job_script),
        # launch's stop timeouts and latency metrics, passed on (a loaded machine unloads slowly)
        "--unload-timeout",
        "60",
        "--histogram-latencies",
    )
    assert out.returncode == 0, out.stderr
    sub = subprocess.run(
        ["sbatch", "--parsable", str(job_script)], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60
    )
    assert sub.returncode == 0, sub.stderr
    job = sub.stdout.strip().split(";")[0]
    log = tmp_path / f"tiny-{job}.out"
    try:
        _wait(
            lambda: log.exists() and "repo-builder: ready:" in log.read_text(errors="replace"),
            600,
            "the job to report ready",
            log,
        )
        # the server that answers is this job's rank 0, started by slurmstepd with the job's shm prefix
        (pid,) = servers_on_repository(repo)
        assert f"--backend-config=python,shm-region-prefix-name=rb{job}_r0_" in procs.cmdline(pid)
        assert "--exit-timeout-secs=65" in procs.cmdline(pid)
        parent = procs.proc_info(procs.proc_info(pid).ppid)
        assert parent is not None and parent.comm == "slurmstepd"
        body = http_generate(
            f"127.0.0.1:{http}",
            "ensemble",
            {"text_input": PROMPT, "max_tokens": 8, "bad_words": "", "stop_words": "", "exclude_input_in_output": True},
        )
        assert body["text_output"] == greedy_text(ckpt, PROMPT, 8)
        assert procs.shm_files(f"rb{job}_r0_"), "the job's Python-backend regions carry its prefix"
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics}/metrics", timeout=30) as resp:
            exported = resp.read().decode()
        assert 'nv_inference_request_summary_us_count{model="ensemble"' in exported  # --histogram-latencies
        # what Slurm does at the time limit (--signal=B:TERM@120): SIGTERM to the batch shell only
        subprocess.run(["scancel", "--batch", "--signal=TERM", job], env=env, check=True, timeout=60)
        _wait(lambda: _job_gone(env, job), 180, "the job to end", log)
    finally:
        subprocess.run(["scancel", job], env=env, capture_output=True)
    text = log.read_text(errors="replace")
    assert f"repo-builder: stopping tritonserver (SIGTERM to step {job}.0)" in text
    assert "successfully unloaded 'tensorrt_llm'" in text  # a graceful stop, not a kill
    _wait(lambda: not servers_on_repository(repo), 30, "tritonserver to exit")
    assert procs.shm_files(f"rb{job}_") == []
