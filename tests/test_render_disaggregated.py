"""Layout disaggregated without a server (repo_builder/render/disaggregated.py): the models and their wiring, the
ranks computed for a TensorRT-LLM engine, the lock file, and every bad name or id refused naming its key, at
render and by ``validate`` (TensorRT-LLM engine directories from tests/deploy_support.py)."""

from __future__ import annotations

import json
import re

import pytest
from deploy_support import trtllm_engine

from repo_builder.errors import ParameterError, RenderError
from repo_builder.profile.contract import load_contract
from repo_builder.render import render_multi_repository, render_repository
from repo_builder.repository.lockfile import LOCK_NAME, read_lock
from repo_builder.repository.pbtxt import parse_model_config, string_parameters
from repo_builder.repository.validate import validate_repository
from repo_builder.testing import packaged_tokenizer


@pytest.fixture(scope="module")
def parts(tmp_path_factory):
    base = tmp_path_factory.mktemp("disagg")
    return {
        "tok": packaged_tokenizer("mistral-v1", base / "tok"),
        "tp2": trtllm_engine(base / "tp2", 2, 1),
        "tp1": trtllm_engine(base / "tp1", 1, 1),
    }


def config(repo, model):
    return parse_model_config((repo / model / "config.pbtxt").read_text())


def test_tp2_engine_gets_two_phase_models_with_their_ranks(parts, tmp_path):
    repo = tmp_path / "repo"
    render_repository(parts["tp2"], parts["tok"], repo, layout="disaggregated")
    assert sorted(p.name for p in repo.iterdir() if p.is_dir()) == [
        "context",
        "disaggregated_serving_bls",
        "ensemble",
        "generation",
        "postprocessing",
        "preprocessing",
    ]
    ctx, gen = string_parameters(config(repo, "context")), string_parameters(config(repo, "generation"))
    assert (ctx["participant_ids"], ctx["gpu_device_ids"]) == ("1,2", "0,1")
    assert (gen["participant_ids"], gen["gpu_device_ids"]) == ("3,4", "2,3")
    assert ctx["gpt_model_path"] == gen["gpt_model_path"] == str(repo / "context" / "1")  # one engine, placed once
    assert sorted(p.name for p in (repo / "context" / "1").iterdir()) == ["config.json", "rank0.engine", "rank1.engine"]
    lock = read_lock(repo).data
    assert lock["launch"]["world_size"] == 2  # the engine's tp x pp
    assert lock["launch"]["orchestrator_world_size"] == 5  # 2 + 2 engine ranks + the orchestrator
    assert lock["launch"]["tensorrt_llm_model_names"] == ["context", "generation"]
    assert lock["layout"]["models"] == {
        "context": "context",
        "generation": "generation",
        "bls": "disaggregated_serving_bls",
    }
    assert lock["values"]["generation_participant_ids"] == {"value": [[3, 4]], "origin": "engine"}
    assert validate_repository(repo, warnings=True) == []


def test_the_bls_has_the_engine_contract_minus_context_phase_params_and_the_ensemble_routes_through_it(parts, tmp_path):
    repo = tmp_path / "repo"
    render_repository(parts["tp1"], parts["tok"], repo, layout="disaggregated", streaming=False)
    bls = config(repo, "disaggregated_serving_bls")
    engine = load_contract("trtllm-1.2").models["tensorrt_llm"]
    assert [t.name for t in bls.input] == [t.name for t in engine.inputs if t.name != "context_phase_params"]
    assert [t.name for t in bls.output] == [t.name for t in engine.outputs if t.name != "context_phase_params"]
    assert bls.backend == "python" and not bls.model_transaction_policy.decoupled
    params = string_parameters(bls)
    assert (params["context_model_name"], params["generation_model_name"]) == ("context", "generation")
    steps = [s.model_name for s in config(repo, "ensemble").ensemble_scheduling.step]
    assert steps == ["preprocessing", "disaggregated_serving_bls", "postprocessing"]
    assert (repo / "disaggregated_serving_bls" / "1" / "repo_builder_runtime" / "disagg_bls.py").is_file()


def test_names_can_be_chosen(parts, tmp_path):
    repo = tmp_path / "repo"
    values = {"context_model_name": "prefill", "generation_model_name": "decode"}
    render_repository(parts["tp1"], parts["tok"], repo, layout="disaggregated", user_values=values)
    assert config(repo, "prefill").name == "prefill" and config(repo, "decode").name == "decode"
    assert read_lock(repo).data["launch"]["tensorrt_llm_model_names"] == ["prefill", "decode"]


@pytest.mark.parametrize(
    ("values", "key"),
    [
        ({"participant_ids": "1"}, "participant_ids"),
        ({"gpu_device_ids": "0"}, "gpu_device_ids"),
        ({"generation_model_name": "context"}, "generation_model_name"),
        ({"context_model_name": "ensemble"}, "context_model_name"),
        ({"context_model_name": "a/b"}, "context_model_name"),
        ({"context_participant_ids": "1"}, "context_participant_ids"),  # tp2: two ids per instance
        ({"context_participant_ids": "0,1"}, "context_participant_ids"),  # rank 0 is the orchestrator
        ({"context_participant_ids": "1,2", "generation_participant_ids": "2,3"}, "generation_participant_ids"),
        ({"generation_gpu_device_ids": "2,2"}, "generation_gpu_device_ids"),
    ],
)
def test_bad_names_and_ids_are_refused_naming_the_key(parts, tmp_path, values, key):
    repo = tmp_path / "repo"
    with pytest.raises((ParameterError, RenderError)) as err:
        render_repository(parts["tp2"], parts["tok"], repo, layout="disaggregated", user_values=values)
    assert err.value.key == key or key in str(err.value)
    assert re.search(rf"\b{key}\b", str(err.value))
    assert not repo.exists()


def test_layout_keys_and_layouts_are_checked(parts, tmp_path):
    with pytest.raises(ParameterError, match="context_model_name is only read by layout disaggregated"):
        render_repository(parts["tp1"], parts["tok"], tmp_path / "a", user_values={"context_model_name": "x"})
    with pytest.raises(RenderError, match="unknown layout 'disagg'") as err:
        render_repository(parts["tp1"], parts["tok"], tmp_path / "b", layout="disagg")
    assert err.value.key == "--layout"
    with pytest.raises(RenderError, match="layout disaggregated needs profile trtllm-1.2"):
        render_repository(parts["tp1"], parts["tok"], tmp_path / "c", layout="disaggregated", profile="trtllm-0.5")
    with pytest.raises(RenderError, match="serves one LLM"):
        render_multi_repository(
            [("a", parts["tp1"], parts["tok"]), ("b", parts["tp1"], parts["tok"])],
            tmp_path / "d",
            layout="disaggregated",
        )


def test_validate_finds_a_hand_broken_layout(parts, tmp_path):
    repo = tmp_path / "repo"
    render_repository(parts["tp1"], parts["tok"], repo, layout="disaggregated")
    (repo / LOCK_NAME).unlink()  # a hand-edited repository: only the configs speak
    ens = repo / "ensemble" / "config.pbtxt"
    ens.write_text(ens.read_text().replace('"disaggregated_serving_bls"', '"generation"'))
    gen = repo / "generation" / "config.pbtxt"
    gen.write_text(gen.read_text().replace('string_value: "2"', 'string_value: "1"'))
    bls = repo / "disaggregated_serving_bls" / "config.pbtxt"
    bls.write_text(bls.read_text().replace('string_value: "context"', 'string_value: "prefill"'))
    problems = [str(p) for p in validate_repository(repo)]
    assert any("ensemble/config.pbtxt" in p and "is a phase of disaggregated_serving_bls" in p for p in problems)
    assert any(
        p.startswith("disaggregated_serving_bls/config.pbtxt") and "context_model_name 'prefill'" in p for p in problems
    )
    bls.write_text(bls.read_text().replace('string_value: "prefill"', 'string_value: "context"'))
    problems = [str(p) for p in validate_repository(repo)]
    assert any(
        p.startswith("generation/config.pbtxt") and "participant_ids: rank 1 is also in" in p for p in problems
    ), problems


def test_dry_run_lists_the_layouts_files(parts, tmp_path):
    result = render_repository(parts["tp1"], parts["tok"], tmp_path / "repo", layout="disaggregated", dry_run=True)
    assert not (tmp_path / "repo").exists()
    assert "disaggregated_serving_bls/config.pbtxt" in result.plan.files
    assert json.loads(result.plan.files[LOCK_NAME])["layout"]["name"] == "disaggregated"


def test_launch_plans_the_orchestrator_ranks_and_refuses_ids_that_do_not_add_up(parts, tmp_path):
    """``launch`` starts NVIDIA's orchestrator mode: world size = both phases' engine ranks + 1, every rank > 0 loads
    both engine models, the two TRTLLM_ORCHESTRATOR variables; --dry-run lists which rank runs what on which GPU."""
    import shutil
    import subprocess
    import sys

    from repo_builder.errors import LaunchError
    from repo_builder.server.config import LaunchConfig, resolve_plan, scan_repository

    repo = tmp_path / "repo"
    render_repository(parts["tp2"], parts["tok"], repo, layout="disaggregated")
    plan = resolve_plan(LaunchConfig(model_repo=repo), scan_repository(repo), cpu_count=2, have_mpirun=True)
    assert plan.world_size == 5 and plan.trtllm_models == ["context", "generation"]
    assert [(p.rank, p.model, p.engine_rank, p.gpu) for p in plan.orchestrator.participants] == [
        (1, "context", 0, 0),
        (2, "context", 1, 1),
        (3, "generation", 0, 2),
        (4, "generation", 1, 3),
    ]
    with pytest.raises(LaunchError, match="--world_size 5") as err:
        resolve_plan(LaunchConfig(model_repo=repo, world_size=2), scan_repository(repo), cpu_count=2, have_mpirun=True)
    assert err.value.key == "launch.orchestrator_world_size"
    if shutil.which("mpirun") is not None:
        out = subprocess.run(
            [sys.executable, "-m", "repo_builder", "launch", str(repo), "--dry-run", "--http_port", "18987",
             "--grpc_port", "18988", "--metrics_port", "18989"],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert out.returncode == 0, out.stderr
        lines = out.stdout.splitlines()
        assert "rank 0: orchestrator (every model, HTTP/gRPC/metrics; no engine rank), world size 5" in lines
        assert "rank 3: generation participant (instance 0, engine rank 0), GPU 2" in lines
        argv = lines[-1].split()
        assert argv[0] == "mpirun" and argv.count("-n") == 5
        assert {"TRTLLM_ORCHESTRATOR", "TRTLLM_ORCHESTRATOR_SPAWN_PROCESSES"} <= {
            argv[i + 1] for i, a in enumerate(argv) if a == "-x"
        }
        assert lines[-1].count("--load-model=context --load-model=generation") == 4
    # a hand edit that takes a rank away from generation: named by model and key
    gen = repo / "generation" / "config.pbtxt"
    gen.write_text(gen.read_text().replace('string_value: "3,4"', 'string_value: "3,5"'))
    with pytest.raises(LaunchError, match="leave rank") as err:
        resolve_plan(LaunchConfig(model_repo=repo), scan_repository(repo), cpu_count=2, have_mpirun=True)
    assert err.value.key == "context participant_ids"
    gen.write_text(gen.read_text().replace('string_value: "3,5"', 'string_value: "3"'))
    with pytest.raises(LaunchError, match="its engine has 2") as err:
        resolve_plan(LaunchConfig(model_repo=repo), scan_repository(repo), cpu_count=2, have_mpirun=True)
    assert err.value.key == "generation participant_ids"


def test_deploy_generators_write_the_orchestrator_launch(parts, tmp_path):
    from repo_builder.deploy.facts import DeployError, read_facts
    from repo_builder.deploy.kubernetes import KubernetesOptions, manifests
    from repo_builder.deploy.slurm import SlurmOptions, script

    repo = tmp_path / "repo"
    render_repository(parts["tp1"], parts["tok"], repo, layout="disaggregated")
    facts = read_facts(repo)
    assert facts.world_size == 3 and facts.orchestrator.gpu_count == 2
    text = script(facts, SlurmOptions(name="disagg", nodes=1))
    assert "#SBATCH --ntasks-per-node=3" in text and "#SBATCH --gpus-per-node=2" in text
    assert "export TRTLLM_ORCHESTRATOR=1" in text and "export TRTLLM_ORCHESTRATOR_SPAWN_PROCESSES=0" in text
    assert "# rank 2: generation participant (instance 0, engine rank 0), GPU 1" in text
    assert [ln.split()[0] for ln in text.splitlines() if "--load-model=context --load-model=generation" in ln] == [
        "1",
        "2",
    ]
    with pytest.raises(DeployError) as err:
        script(facts, SlurmOptions(name="disagg", nodes=2))
    assert err.value.key == "--nodes"
    with pytest.raises(DeployError) as err:
        script(facts, SlurmOptions(name="disagg", nodes=1, gpus_per_node=3))
    assert err.value.key == "--gpus-per-node"
    deployment = manifests(facts, KubernetesOptions(name="disagg", image="img", pvc="models"))[0]
    pod = deployment["spec"]["template"]
    container = pod["spec"]["containers"][0]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "2"
    assert {"name": "TRTLLM_ORCHESTRATOR_SPAWN_PROCESSES", "value": "0"} in container["env"]
    command = container["command"]
    assert command[0] == "mpirun" and command.count("-n") == 3 and "TRTLLM_ORCHESTRATOR" in command
    assert "rank 1: context participant" in pod["metadata"]["annotations"]["repo-builder/ranks"]


def _edited_engine(src, out, **build):
    """A copy of the fake TensorRT-LLM engine ``src`` with ``build`` keys changed (pretrained_config if the key is
    there, else build_config)."""
    import shutil

    shutil.copytree(src, out)
    cfg = json.loads((out / "config.json").read_text())
    for key, value in build.items():
        section = "pretrained_config" if key in cfg["pretrained_config"] else "build_config"
        cfg[section][key] = value
    (out / "config.json").write_text(json.dumps(cfg))
    return out


def test_separate_generation_engine_gets_its_own_ranks_and_is_recorded(parts, tmp_path):
    """--generation-engine-dir: a tp1 generation engine beside a tp2 context engine (NVIDIA lets the phases
    differ in parallelism): its model points at it where it is, its participant follows the context's, the world
    size is 2 + 1 + 1, and the lock file records both engines."""
    repo = tmp_path / "repo"
    gen_dir = tmp_path / "gen_tp1"
    import shutil

    shutil.copytree(parts["tp1"], gen_dir)
    render_repository(parts["tp2"], parts["tok"], repo, layout="disaggregated", generation_engine_dir=gen_dir)
    ctx, gen = string_parameters(config(repo, "context")), string_parameters(config(repo, "generation"))
    assert ctx["gpt_model_path"] == str(repo / "context" / "1")
    assert gen["gpt_model_path"] == str(gen_dir)
    assert (ctx["participant_ids"], gen["participant_ids"], gen["gpu_device_ids"]) == ("1,2", "3", "2")
    assert not any((repo / "generation" / "1").iterdir())  # referenced, not copied
    lock = read_lock(repo).data
    assert lock["engine"]["dir"] == str(parts["tp2"])
    assert lock["layout"]["generation_engine"]["dir"] == str(gen_dir)
    assert lock["layout"]["generation_engine"]["world_size"] == 1
    assert lock["launch"]["orchestrator_world_size"] == 4
    assert not [p for p in validate_repository(repo) if p.severity == "error"]
    from repo_builder.server.config import LaunchConfig, resolve_plan, scan_repository

    plan = resolve_plan(LaunchConfig(model_repo=repo), scan_repository(repo), cpu_count=2, have_mpirun=True)
    assert plan.world_size == 4 and [p.model for p in plan.orchestrator.participants] == [
        "context",
        "context",
        "generation",
    ]


@pytest.mark.parametrize(
    ("edit", "key"),
    [
        ({"vocab_size": 32064}, "vocab_size"),
        ({"dtype": "bfloat16"}, "dtype"),
        ({"logits_dtype": "float16"}, "logits_dtype"),
        ({"max_beam_width": 4}, "max_beam_width"),
        ({"max_seq_len": 1536}, "max_seq_len"),
        ({"architecture": "MistralForCausalLM"}, "architecture"),
    ],
)
def test_generation_engine_that_disagrees_is_refused_naming_the_key(parts, tmp_path, edit, key):
    from repo_builder.errors import EngineError

    gen_dir = _edited_engine(parts["tp1"], tmp_path / "gen", **edit)
    with pytest.raises(EngineError) as err:
        render_repository(
            parts["tp1"], parts["tok"], tmp_path / "repo", layout="disaggregated", generation_engine_dir=gen_dir
        )
    assert err.value.key == key and err.value.path == gen_dir / "config.json"
    assert not (tmp_path / "repo").exists()


def test_generation_engine_dir_needs_layout_disaggregated(parts, tmp_path):
    with pytest.raises(RenderError) as err:
        render_repository(parts["tp1"], parts["tok"], tmp_path / "repo", generation_engine_dir=parts["tp1"])
    assert err.value.key == "--generation-engine-dir"


def test_generation_checkpoint_with_another_tokenizer_is_refused_naming_the_file(tiny_llama, tmp_path):
    """HF checkpoints (the CPU reference engine): the generation model points at its own checkpoint; one whose
    tokenizer.json differs from the context checkpoint's is refused naming that file."""
    import shutil

    from repo_builder.errors import EngineError

    gen_dir = tmp_path / "gen_ckpt"
    shutil.copytree(tiny_llama, gen_dir)
    repo = tmp_path / "repo"
    render_repository(tiny_llama, tiny_llama, repo, layout="disaggregated", generation_engine_dir=gen_dir)
    assert string_parameters(config(repo, "generation"))["engine_dir"] == str(gen_dir)
    assert string_parameters(config(repo, "context"))["engine_dir"] == str(repo / "context" / "1" / "engine")
    tok = next(n for n in ("tokenizer.json", "tokenizer.model") if (gen_dir / n).is_file())
    (gen_dir / tok).write_bytes((gen_dir / tok).read_bytes() + b" ")
    with pytest.raises(EngineError) as err:
        render_repository(
            tiny_llama, tiny_llama, tmp_path / "repo2", layout="disaggregated", generation_engine_dir=gen_dir
        )
    assert err.value.key == tok and err.value.path == gen_dir / tok
