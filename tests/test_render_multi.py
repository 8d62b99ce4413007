"""Several LLMs in one repository, without a server: names, engine placement, the lock file, world sizes, and
what launch and deploy read from it (TensorRT-LLM engine directories from tests/deploy_support.py)."""

from __future__ import annotations

import json

import pytest
from cli_support import run_cli
from deploy_support import trtllm_engine

from repo_builder.deploy.facts import read_facts
from repo_builder.deploy.kubernetes import KubernetesOptions, manifests
from repo_builder.errors import RenderError
from repo_builder.render import render_multi_repository
from repo_builder.repository.lockfile import LOCK_NAME, lock_llms
from repo_builder.server.config import LaunchConfig, resolve_plan, scan_repository
from repo_builder.testing import packaged_tokenizer


@pytest.fixture(scope="module")
def parts(tmp_path_factory):
    base = tmp_path_factory.mktemp("multi")
    return {
        "tok1": packaged_tokenizer("mistral-v1", base / "tok1"),
        "tok1b": packaged_tokenizer("mistral-v1", base / "tok1b"),
        "tp2a": trtllm_engine(base / "tp2a", 2, 1),
        "tp2b": trtllm_engine(base / "tp2b", 2, 1),
        "tp1": trtllm_engine(base / "tp1", 1, 1),
        "base": base,
    }


def test_two_tp2_engines_share_one_launch(parts, tmp_path) -> None:
    repo = tmp_path / "repo"
    render_multi_repository(
        [("a", parts["tp2a"], parts["tok1"]), ("b", parts["tp2b"], parts["tok1b"])], repo, serve_path="/models/two"
    )
    lock = json.loads((repo / LOCK_NAME).read_text())
    assert lock["launch"]["world_size"] == 2
    assert lock["launch"]["tensorrt_llm_model_names"] == ["a_tensorrt_llm", "b_tensorrt_llm"]
    assert [(e["name"], e["engine"]["engine_dir"]) for e in lock_llms(lock)] == [
        ("a", "/models/two/a_tensorrt_llm/1"),
        ("b", "/models/two/b_tensorrt_llm/1"),
    ]
    for name in ("a", "b"):  # each engine placed in its own model folder
        assert sorted(p.name for p in (repo / f"{name}_tensorrt_llm" / "1").iterdir()) == [
            "config.json",
            "rank0.engine",
            "rank1.engine",
        ]
        bls = (repo / f"{name}_tensorrt_llm_bls" / "config.pbtxt").read_text()
        assert f'string_value: "{name}_tensorrt_llm"' in bls
    # the launcher's ranks > 0 load both engines
    plan = resolve_plan(LaunchConfig(model_repo=repo), scan_repository(repo), cpu_count=2, have_mpirun=True)
    assert (plan.world_size, plan.trtllm_models) == (2, ["a_tensorrt_llm", "b_tensorrt_llm"])
    # and so does a deployment
    (deployment, _) = manifests(read_facts(repo), KubernetesOptions(image="img", name="two", baked=True))
    command = deployment["spec"]["template"]["spec"]["containers"][0]["command"]
    rank1 = command[command.index(":") :]
    assert "--load-model=a_tensorrt_llm" in rank1 and "--load-model=b_tensorrt_llm" in rank1
    # inspect shows each LLM with its own values
    out = run_cli("inspect", str(repo))
    assert out.returncode == 0, out.stderr
    assert "LLM a: models a_ensemble" in out.stdout and "LLM b: models b_ensemble" in out.stdout
    assert "values of a" in out.stdout and "values of b" in out.stdout


def test_engines_with_different_world_sizes_are_refused(parts, tmp_path) -> None:
    with pytest.raises(RenderError) as err:
        render_multi_repository(
            [("a", parts["tp2a"], parts["tok1"]), ("b", parts["tp1"], parts["tok1"])], tmp_path / "repo"
        )
    assert err.value.key == "--model" and "a 2, b 1" in str(err.value)
    assert not (tmp_path / "repo").exists()
