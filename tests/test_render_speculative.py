"""``render --draft-engine-dir``: the tensorrt_llm_draft model, the BLS's draft name, the lock file, and the draft
engines refused naming the key (TensorRT-LLM engine directories from tests/deploy_support.py)."""

from __future__ import annotations

import json

import pytest
from deploy_support import trtllm_engine

from repo_builder.errors import EngineError, ParameterError, RenderError
from repo_builder.render import render_repository
from repo_builder.repository.lockfile import read_lock
from repo_builder.repository.pbtxt import parse_model_config, string_parameters
from repo_builder.repository.validate import validate_repository
from repo_builder.testing import packaged_tokenizer


def _with_draft_len(engine, n):
    cfg_path = engine / "config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["build_config"]["max_draft_len"] = n
    cfg["build_config"]["speculative_decoding_mode"] = 2  # draft_tokens_external
    cfg_path.write_text(json.dumps(cfg))
    return engine


@pytest.fixture(scope="module")
def parts(tmp_path_factory):
    base = tmp_path_factory.mktemp("spec")
    return {
        "tok": packaged_tokenizer("mistral-v1", base / "tok"),
        "target": _with_draft_len(trtllm_engine(base / "target", 1, 1), 4),
        "plain": trtllm_engine(base / "plain", 1, 1),
        "draft": trtllm_engine(base / "draft", 1, 1),
        "tp2": trtllm_engine(base / "tp2", 2, 1),
    }


def params(repo, model):
    return string_parameters(parse_model_config((repo / model / "config.pbtxt").read_text()))


def test_the_draft_model_is_rendered_and_named_by_the_bls(parts, tmp_path):
    repo = tmp_path / "repo"
    render_repository(parts["target"], parts["tok"], repo, draft_engine_dir=parts["draft"])
    assert params(repo, "tensorrt_llm_bls")["tensorrt_llm_draft_model_name"] == "tensorrt_llm_draft"
    assert params(repo, "tensorrt_llm_draft")["gpt_model_path"] == str(parts["draft"].resolve())
    assert params(repo, "tensorrt_llm")["gpt_model_path"] == str(repo / "tensorrt_llm" / "1")
    lock = read_lock(repo).data
    assert lock["launch"]["tensorrt_llm_model_names"] == ["tensorrt_llm", "tensorrt_llm_draft"]
    assert lock["draft"]["dir"] == str(parts["draft"].resolve())
    assert validate_repository(repo) == []


@pytest.mark.parametrize(
    ("target", "draft", "key"),
    [("plain", "draft", "max_draft_len"), ("target", "tp2", "--draft-engine-dir")],
)
def test_bad_drafts_are_refused_naming_the_key(parts, tmp_path, target, draft, key):
    with pytest.raises(EngineError) as err:
        render_repository(parts[target], parts["tok"], tmp_path / "repo", draft_engine_dir=parts[draft])
    assert err.value.key == key
    assert not (tmp_path / "repo").exists()


def test_a_draft_name_without_a_draft_engine_is_still_refused(parts, tmp_path):
    with pytest.raises(ParameterError, match="tensorrt_llm_draft_model_name"):
        render_repository(
            parts["target"], parts["tok"], tmp_path / "a", user_values={"tensorrt_llm_draft_model_name": "d"}
        )
    with pytest.raises(RenderError, match="default layout only"):
        render_repository(
            parts["target"], parts["tok"], tmp_path / "b", draft_engine_dir=parts["draft"], layout="disaggregated"
        )


def test_validate_finds_a_missing_draft_model(parts, tmp_path):
    import shutil

    repo = tmp_path / "repo"
    render_repository(parts["target"], parts["tok"], repo, draft_engine_dir=parts["draft"])
    shutil.rmtree(repo / "tensorrt_llm_draft")
    problems = [str(p) for p in validate_repository(repo)]
    assert any("tensorrt_llm_draft_model_name 'tensorrt_llm_draft' is not a model" in p for p in problems), problems
