"""Several LLMs in one llmapi repository (``render --profile llmapi-1.2 --model NAME=CHECKPOINT_DIR[,TOKENIZER_DIR]``
repeated), without a server: each LLM's own ``NAME_tensorrt_llm`` (NVIDIA's llmapi model, its model.yaml naming
its own checkpoint) and front doors over it, one lock file listing them, and what validate, launch, deploy and
the OpenAI front end read from it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from repo_builder.deploy.facts import read_facts
from repo_builder.render import render_multi_repository
from repo_builder.repository.lockfile import LOCK_NAME, lock_llms, read_serving_info
from repo_builder.repository.pbtxt import parse_model_config
from repo_builder.repository.validate import validate_repository
from repo_builder.server.config import LaunchConfig, resolve_plan, scan_repository

PROFILE = "llmapi-1.2"
ROLES = ("tensorrt_llm", "ensemble", "tensorrt_llm_bls")


@pytest.fixture(scope="module")
def two(tiny_llama, tmp_path_factory) -> dict[str, Path]:
    """Two checkpoints: the session's tiny LLaMA and a second one with other weights and its own tokenizer."""
    from repo_builder.testing import make_tiny_llama, packaged_tokenizer

    base = tmp_path_factory.mktemp("llmapi_multi")
    tok = packaged_tokenizer("mistral-v3", base / "tok-beta")
    return {"alpha": tiny_llama, "beta": make_tiny_llama(base / "beta", tok, seed=0)}


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "repo_builder", "render", "--profile", PROFILE, *args],
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture(scope="module")
def repo(two, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("llmapi_multi_repo") / "two"
    got = _cli(
        "--model", f"alpha={two['alpha']}", "--model", f"beta={two['beta']},{two['beta']}",
        "--output", str(out), "--serve-path", "/models/two", "--streaming",
    )  # fmt: skip
    assert got.returncode == 0, got.stderr
    return out


def test_each_llm_gets_its_own_models_and_checkpoint(repo, two) -> None:
    assert sorted(p.name for p in repo.iterdir() if p.is_dir()) == sorted(f"{n}_{r}" for n in two for r in ROLES)
    for name in two:
        model_yaml = yaml.safe_load((repo / f"{name}_tensorrt_llm" / "1" / "model.yaml").read_text())
        assert model_yaml["model"] == f"/models/two/{name}_tensorrt_llm/1/engine"
        assert model_yaml["triton_config"] == {"max_batch_size": 0, "decoupled": True}
        copied = json.loads((repo / f"{name}_tensorrt_llm" / "1" / "engine" / "config.json").read_text())
        assert copied == json.loads((two[name] / "config.json").read_text())
        engine = parse_model_config((repo / f"{name}_tensorrt_llm" / "config.pbtxt").read_text())
        assert engine.name == f"{name}_tensorrt_llm" and engine.model_transaction_policy.decoupled
        for door in ("ensemble", "tensorrt_llm_bls"):
            config = parse_model_config((repo / f"{name}_{door}" / "config.pbtxt").read_text())
            assert config.name == f"{name}_{door}" and config.model_transaction_policy.decoupled
            assert config.parameters["tensorrt_llm_model_name"].string_value == f"{name}_tensorrt_llm"


def test_lock_file_lists_both_llms(repo, two) -> None:
    lock = json.loads((repo / LOCK_NAME).read_text())
    entries = lock_llms(lock)
    assert [e["name"] for e in entries] == ["alpha", "beta"]
    for entry in entries:
        name = entry["name"]
        assert entry["models"] == {role: f"{name}_{role}" for role in ROLES}
        assert entry["engine"]["dir"] == str(two[name]) and entry["engine"]["kind"] == "hf"
        assert entry["tokenizer"]["dir"] == str(two[name])
        assert entry["checkpoint"]["architecture"] == "LlamaForCausalLM"
        assert entry["values"]["model"]["value"] == f"/models/two/{name}_tensorrt_llm/1/engine"
    assert lock["profile"] == PROFILE
    assert lock["launch"]["world_size"] == 1
    assert lock["launch"]["tensorrt_llm_model_names"] == ["alpha_tensorrt_llm", "beta_tensorrt_llm"]
    assert lock["launch"]["python_instances"] == {f"{n}_{r}": 1 for n in two for r in ROLES}


def test_validate_launch_deploy_and_openai_read_it(repo, two) -> None:
    assert validate_repository(repo, warnings=True) == []
    plan = resolve_plan(LaunchConfig(model_repo=repo), scan_repository(repo), cpu_count=2, have_mpirun=True)
    assert (plan.world_size, plan.trtllm_models) == (1, ["alpha_tensorrt_llm", "beta_tensorrt_llm"])
    facts = read_facts(repo)
    assert facts.llms == ("alpha", "beta")
    assert facts.tensorrt_llm_models == ("alpha_tensorrt_llm", "beta_tensorrt_llm")
    infos = read_serving_info(repo)
    assert [(i.model_name, i.triton_model("ensemble"), str(i.tokenizer_dir)) for i in infos] == [
        ("alpha", "alpha_ensemble", str(two["alpha"])),
        ("beta", "beta_ensemble", str(two["beta"])),
    ]


def test_validate_names_the_llm_whose_model_yaml_is_bad(repo, tmp_path) -> None:
    import shutil

    edited = tmp_path / "edited"
    shutil.copytree(repo, edited, symlinks=True)
    path = edited / "beta_tensorrt_llm" / "1" / "model.yaml"
    path.write_text(path.read_text().replace("tensor_parallel_size: 1", "tensor_parallel_size: 3"))
    messages = [str(p) for p in validate_repository(edited, served_at="/models/two")]
    assert any(m.startswith("beta_tensorrt_llm/1/model.yaml:") and "num_attention_heads (4)" in m for m in messages)
    assert not any(m.startswith("alpha_") for m in messages), messages


def test_no_front_doors_leaves_nvidias_model_per_llm(two, tmp_path) -> None:
    out = tmp_path / "bare"
    render_multi_repository(
        [("alpha", two["alpha"], None), ("beta", two["beta"], None)],
        out,
        profile=PROFILE,
        engine_mode="reference",
        user_values={"text_front_doors": "false"},
    )
    assert sorted(p.name for p in out.iterdir() if p.is_dir()) == ["alpha_tensorrt_llm", "beta_tensorrt_llm"]
    lock = json.loads((out / LOCK_NAME).read_text())
    assert [e["models"] for e in lock_llms(lock)] == [
        {"tensorrt_llm": "alpha_tensorrt_llm"},
        {"tensorrt_llm": "beta_tensorrt_llm"},
    ]
    for name in two:  # reference: each model.yaml names its original checkpoint
        assert yaml.safe_load((out / f"{name}_tensorrt_llm/1/model.yaml").read_text())["model"] == str(two[name])
    assert validate_repository(out) == []


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--model", "alpha="], "NAME=CHECKPOINT_DIR[,TOKENIZER_DIR]"),
        (["--model", "alpha={a},"], "NAME=CHECKPOINT_DIR[,TOKENIZER_DIR]"),
        (["--model", "alpha={a}"], "at least two"),
        (["--model", "alpha={a}", "--model", "alpha={a}"], "given twice"),
        (
            ["--model", "alpha={a}", "--model", "beta={a}", "--checkpoint-dir", "{a}"],
            "--checkpoint-dir/--tokenizer-dir",
        ),
        (["--model", "alpha={a}", "--model", "beta={a}", "--set", "tensor_parallel_size=3"], "--model alpha:"),
        (["--model", "alpha={a}", "--model", "beta=/nonexistent/ckpt"], "--model beta:"),
    ],
)
def test_bad_model_options_are_named(two, tmp_path, args, needle) -> None:
    out = tmp_path / "out"
    got = _cli(*[a.format(a=two["alpha"]) for a in args], "--output", str(out))
    assert got.returncode == 2 and needle in got.stderr and "Traceback" not in got.stderr, got.stderr
    assert not out.exists()
