"""``deploy slurm`` / ``deploy kubernetes`` for an llmapi repository (``--profile llmapi-1.2``, tp 2 x pp 2):
the world size is tp x pp from the lock file; under srun every task runs ``trtllm-llmapi-launch`` + rank 0's
tritonserver command (TensorRT-LLM's backend docs ``docs/llmapi.md``); one Kubernetes node runs one plain
tritonserver (the LLM API spawns its workers) on world-size GPUs; several nodes run every rank through the
wrapper under the leader's mpirun (launch_triton_server.py's ``--trtllm_llmapi_launch``)."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from repo_builder.deploy.facts import DeployError, read_facts
from repo_builder.deploy.kubernetes import KubernetesOptions, manifests
from repo_builder.deploy.slurm import SlurmOptions, script
from repo_builder.render import render_repository
from repo_builder.server.command import LLMAPI_LAUNCH

SERVE = "/models/llmapi"


@pytest.fixture(scope="module")
def repo(tiny_llama, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("llmapi-deploy") / "repo"
    render_repository(
        tiny_llama,
        None,
        out,
        profile="llmapi-1.2",
        engine_mode="reference",
        serve_path=SERVE,
        user_values={"tensor_parallel_size": "2", "pipeline_parallel_size": "2"},
    )
    return out


def test_facts_world_size_is_tp_times_pp(repo):
    facts = read_facts(repo)
    assert facts.llmapi and (facts.world_size, facts.tp_size, facts.pp_size) == (4, 2, 2)
    assert facts.tensorrt_llm_models == ("tensorrt_llm",)
    assert {"ensemble", "tensorrt_llm", "tensorrt_llm_bls"} <= set(facts.models)


def _multi_prog(text: str) -> list[list[str]]:
    body = text.split("<<EOF\n", 1)[1].split("\nEOF\n", 1)[0]
    return [shlex.split(line) for line in body.splitlines()]


def test_slurm_runs_every_task_through_trtllm_llmapi_launch(repo):
    text = script(read_facts(repo), SlurmOptions(name="llm", nodes=2))
    lines = _multi_prog(text)
    assert [int(line[0]) for line in lines] == [0, 1, 2, 3]
    rank0 = lines[0][1:]
    assert rank0[0] == LLMAPI_LAUNCH and rank0[1].endswith("tritonserver")
    assert f"--model-repository={SERVE}" in rank0 and any(a.startswith("--http-port=") for a in rank0)
    assert all(line[1:] == rank0 for line in lines)  # the wrapper picks leader and workers
    assert "#SBATCH --nodes=2" in text and "#SBATCH --ntasks-per-node=2" in text
    assert "srun --nodes=2 --ntasks=4 --ntasks-per-node=2 --mpi=pmix" in text
    with pytest.raises(DeployError, match="world size 4"):
        script(read_facts(repo), SlurmOptions(name="llm", nodes=1, gpus_per_node=2))


def test_kubernetes_one_node_is_one_tritonserver_on_all_gpus(repo):
    docs = manifests(read_facts(repo), KubernetesOptions(image="img", name="llm", pvc="models"))
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    command = container["command"]
    assert command[0].endswith("tritonserver") and "mpirun" not in command and LLMAPI_LAUNCH not in command
    assert f"--model-repository={SERVE}" in command
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "4"


def test_kubernetes_several_nodes_wrap_every_rank(repo):
    docs = manifests(read_facts(repo), KubernetesOptions(image="img", name="llm", nodes=2, pvc="models"))
    lws = next(d for d in docs if d["kind"] == "LeaderWorkerSet")
    leader = lws["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["spec"]["containers"][0]
    script_text = leader["command"][-1] if leader.get("command") else leader["args"][-1]
    mpirun_line = next(line for line in script_text.splitlines() if line.startswith("exec mpirun"))
    argv = shlex.split(mpirun_line)[1:]
    ranks = " ".join(argv).split(" : ")
    assert len(ranks) == 4 and all(f"-n 1 {LLMAPI_LAUNCH} " in r for r in ranks), ranks


def test_launch_trtllm_llmapi_launch_prefixes_every_rank(repo, tmp_path, monkeypatch):
    """``launch --trtllm_llmapi_launch`` (launch_triton_server.py's flag): world size tp x pp from the lock file,
    each rank's tritonserver command behind the wrapper; without the wrapper on PATH, an error naming the flag."""
    import shutil

    from conftest import free_ports

    from repo_builder.errors import LaunchError
    from repo_builder.server import LaunchConfig, TritonServer

    if shutil.which("mpirun") is None:
        pytest.skip("mpirun (openmpi-bin) is not installed")
    http, grpc, metrics = free_ports(3)
    config = LaunchConfig(
        model_repo=repo, trtllm_llmapi_launch=True, http_port=http, grpc_port=grpc, metrics_port=metrics
    )
    with pytest.raises(LaunchError) as info:
        TritonServer(config).prepare()
    assert "--trtllm_llmapi_launch" in str(info.value) and LLMAPI_LAUNCH in str(info.value)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    wrapper = bin_dir / LLMAPI_LAUNCH
    wrapper.write_text('#!/bin/sh\nexec "$@"\n')
    wrapper.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{__import__('os').environ['PATH']}")
    server = TritonServer(config)
    argv = server.prepare()
    assert server.plan.world_size == 4 and argv[0] == "mpirun"
    ranks = " ".join(argv).split(" : ")
    assert len(ranks) == 4 and all(f"-n 1 {LLMAPI_LAUNCH} " in r for r in ranks), ranks
    assert "--load-model=tensorrt_llm" in ranks[1] and "--http-port" not in ranks[1]
