"""Bad inputs to render: every error names the key or file, and nothing is written or changed."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
from conftest import ENGINES, asset

from repo_builder.errors import (
    EngineError,
    ParameterError,
    RenderError,
    RepoBuilderError,
    TemplateError,
    TokenizerError,
)
from repo_builder.profile.paths import templates_dir
from repo_builder.render import render_repository


def snapshot(root: Path) -> dict[str, str]:
    """{relative path: sha256 or '<dir>'} of everything under ``root`` (hidden entries included)."""
    out = {}
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root).as_posix()
        out[rel] = "<dir>" if p.is_dir() and not p.is_symlink() else hashlib.sha256(p.read_bytes()).hexdigest()
    return out


@pytest.fixture
def work(tmp_path):
    """An empty parent directory for outputs; tests assert it stays exactly as it was."""
    d = tmp_path / "work"
    d.mkdir()
    return d


@pytest.fixture
def engine(engine_copy):
    return engine_copy("v0.8-mistral-7b-dolphin")


TOK = "mistral_v1_tokenizer"


def refuse(exc_type, work: Path, *args, match: list[str], **kwargs) -> RepoBuilderError:
    before = snapshot(work)
    with pytest.raises(exc_type) as err:
        render_repository(*args, **kwargs)
    text = str(err.value)
    for needle in match:
        assert needle in text, f"{needle!r} not in {text!r}"
    assert snapshot(work) == before, "a failed render left files behind"
    return err.value


#: Options render refuses: (case, error, render_repository keyword arguments, texts the message holds).
#: Each is rendered from the dolphin engine and the Mistral v1 tokenizer into work/repo.
REFUSED_OPTIONS = [
    pytest.param(
        ParameterError,
        {"user_values": {"kv_cache_fraction": "0.5"}},
        ["kv_cache_fraction", "kv_cache_free_gpu_mem_fraction"],
        id="unknown_key",
    ),
    pytest.param(
        ParameterError,
        {"user_values": {"triton_max_batch_size": "eight"}},
        ["triton_max_batch_size", "--set"],
        id="wrong_type",
    ),
    pytest.param(
        ParameterError,
        {"user_values": {"kv_cache_free_gpu_mem_fraction": "1.5"}},
        ["kv_cache_free_gpu_mem_fraction"],
        id="out_of_range",
    ),
    # Case B08: build-time settings are refused with the trtllm-build flag.
    pytest.param(
        ParameterError,
        {"user_values": {"max_input_len": "8192000"}},
        ["max_input_len", "--max_input_len"],
        id="build_time_key",
    ),
    # Case B06 (a).
    pytest.param(
        EngineError,
        {"user_values": {"enable_kv_cache_reuse": "true"}},
        ["enable_kv_cache_reuse", "use_paged_context_fmha"],
        id="kv_cache_reuse_without_paged_context_fmha",
    ),
    # Case B09.
    pytest.param(
        EngineError,
        {"user_values": {"logits_datatype": "TYPE_FP16"}},
        ["logits_datatype", "TYPE_FP16"],
        id="logits_dtype_contradicting_the_engine",
    ),
    pytest.param(
        ParameterError,
        {"streaming": True, "user_values": {"postprocessing_instance_count": "2"}},
        ["postprocessing_instance_count"],
        id="streaming_with_several_postprocessing_instances",
    ),
    pytest.param(RepoBuilderError, {"profile": "trtllm-9.9"}, ["trtllm-9.9", "trtllm-1.2"], id="unknown_profile"),
    pytest.param(RenderError, {"engine_mode": "move"}, ["move", "--engine-mode", "hardlink"], id="unknown_engine_mode"),
    pytest.param(RenderError, {"serve_path": "models"}, ["--serve-path", "absolute"], id="relative_serve_path"),
]


@pytest.mark.parametrize("error, options, match", REFUSED_OPTIONS)
def test_refused_option(work, engine, error, options, match):
    refuse(error, work, engine, asset(TOK), work / "repo", match=match, **options)


def test_legacy_recipe_keys(work, engine):
    """Case B04: removed keys and renamed enum values are refused, naming each key."""
    err = refuse(
        ParameterError,
        work,
        engine,
        asset(TOK),
        work / "repo",
        user_values={
            "tokenizer_type": "llama",
            "max_num_sequences": "4",
            "batch_scheduler_policy": "guaranteed_completion",
        },
        match=["tokenizer_type", "max_num_sequences", "guaranteed_no_evict"],
    )
    assert len(err.problems) == 3


def test_values_file_invalid_yaml(work, engine, tmp_path):
    values = tmp_path / "values.yaml"
    values.write_text("a: [1, 2\n")
    refuse(ParameterError, work, engine, asset(TOK), work / "repo", values_file=values, match=[str(values), "YAML"])


def test_values_file_not_a_mapping(work, engine, tmp_path):
    values = tmp_path / "values.yaml"
    values.write_text("- 1\n- 2\n")
    refuse(ParameterError, work, engine, asset(TOK), work / "repo", values_file=values, match=[str(values), "mapping"])


def test_values_file_missing(work, engine, tmp_path):
    refuse(
        ParameterError, work, engine, asset(TOK), work / "repo", values_file=tmp_path / "nope.yaml", match=["nope.yaml"]
    )


def test_values_file_bad_value_names_the_file_and_key(work, engine, tmp_path):
    values = tmp_path / "values.yaml"
    values.write_text("max_beam_width: wide\n")
    refuse(
        ParameterError,
        work,
        engine,
        asset(TOK),
        work / "repo",
        values_file=values,
        match=[str(values), "max_beam_width"],
    )


def test_missing_engine_dir(work, tmp_path):
    refuse(EngineError, work, tmp_path / "no-engine", asset(TOK), work / "repo", match=["no-engine"])


def test_engine_dir_with_an_hf_config_only(work, tmp_path):
    """Case B11: an HF config.json without weights is neither an engine nor a checkpoint."""
    eng = tmp_path / "hfcfg"
    eng.mkdir()
    shutil.copy(asset("llama3.1_tokenizer", "config.json"), eng / "config.json")
    refuse(EngineError, work, eng, asset(TOK), work / "repo", match=[str(eng / "config.json"), "architectures"])


def test_missing_rank_files(work):
    """Case B11: rank*.engine count must equal tp x pp."""
    refuse(
        EngineError,
        work,
        ENGINES / "old-llama2-7b-tp4",
        asset("sp_tiny_hf_tokenizer"),
        work / "repo",
        match=["old-llama2-7b-tp4", "rank0.engine, rank1.engine, rank2.engine, rank3.engine"],
    )


def test_bert_engine(work):
    refuse(
        EngineError,
        work,
        ENGINES / "old-bert-base-benchmark",
        asset(TOK),
        work / "repo",
        match=["old-bert-base-benchmark", "encoder"],
    )


def test_missing_tokenizer_dir(work, engine, tmp_path):
    refuse(TokenizerError, work, engine, tmp_path / "no-tokenizer", work / "repo", match=["no-tokenizer"])


def test_tokenizer_larger_than_engine_vocab(work, engine_copy):
    refuse(
        TokenizerError,
        work,
        engine_copy("v1.2-smollm-llama-beam5"),
        asset("gpt2_tokenizer"),
        work / "repo",
        match=["tokenizer_dir", "50257", "49152"],
    )


def test_beam_above_engine(work, engine_copy):
    """Case B07."""
    refuse(
        EngineError,
        work,
        engine_copy("v1.2-smollm-llama-beam5"),
        asset(TOK),
        work / "repo",
        user_values={"max_beam_width": "8"},
        match=["max_beam_width", "8", "5"],
    )


def test_output_exists_without_force(work, engine):
    out = work / "repo"
    render_repository(engine, asset(TOK), out)
    refuse(RenderError, work, engine, asset(TOK), out, user_values={"max_queue_size": "3"}, match=[str(out), "--force"])


def test_output_is_a_file(work, engine):
    out = work / "repo"
    out.write_text("x")
    refuse(RenderError, work, engine, asset(TOK), out, force=True, match=[str(out), "not a directory"])


def test_force_refuses_a_directory_repo_builder_did_not_render(work, engine):
    out = work / "mydata"
    out.mkdir()
    (out / "precious.txt").write_text("keep me")
    refuse(RenderError, work, engine, asset(TOK), out, force=True, match=[str(out), "repo-builder.lock.json"])


def test_force_refuses_to_replace_the_engine_or_tokenizer(tmp_path, engine_copy):
    engine = engine_copy("v0.8-mistral-7b-dolphin")
    parent = engine.parent
    refuse(RenderError, parent, engine, asset(TOK), parent, force=True, match=["inside the output"])
    refuse(RenderError, parent, engine, asset(TOK), engine / "repo", match=["inside the engine directory"])


def test_missing_python_model_source(work, engine, tmp_path, monkeypatch):
    templates = tmp_path / "templates"
    shutil.copytree(templates_dir(), templates)
    (templates / "python_models" / "postprocessing" / "model.py").unlink()
    monkeypatch.setenv("REPO_BUILDER_TEMPLATES", str(templates))
    refuse(
        TemplateError,
        work,
        engine,
        asset(TOK),
        work / "repo",
        match=[str(templates / "python_models" / "postprocessing" / "model.py")],
    )


def test_template_bug_fails_before_writing(work, engine, tmp_path, monkeypatch):
    templates = tmp_path / "templates"
    shutil.copytree(templates_dir(), templates)
    tpl = templates / "trtllm-1.2" / "tensorrt_llm" / "config.pbtxt.j2"
    tpl.write_text(
        tpl.read_text().replace(
            "max_batch_size: {{ triton_max_batch_size | pbint }}",
            "max_batch_size: {{ triton_max_batch_size | pbint }}\nbatch_size_max: 1",
        )
    )
    monkeypatch.setenv("REPO_BUILDER_TEMPLATES", str(templates))
    refuse(
        TemplateError, work, engine, asset(TOK), work / "repo", match=["tensorrt_llm/config.pbtxt", "batch_size_max"]
    )


def test_existing_repository_untouched_by_a_failed_forced_render(work, engine):
    out = work / "repo"
    render_repository(engine, asset(TOK), out)
    refuse(
        ParameterError,
        work,
        engine,
        asset(TOK),
        out,
        force=True,
        user_values={"max_queue_size": "-1"},
        match=["max_queue_size"],
    )
    assert json.loads((out / "repo-builder.lock.json").read_text())["values"]["max_queue_size"]["value"] == 0


def test_hub_id_tokenizer_is_named_as_a_hub_id(work, engine, monkeypatch):
    """B22 through render: the raw --tokenizer-dir text reaches the check, not a path resolved against cwd."""
    monkeypatch.chdir(work)
    refuse(
        TokenizerError,
        work,
        engine,
        "meta-llama/Llama-2-7b-hf",
        work / "repo",
        match=["meta-llama/Llama-2-7b-hf", "hub id", "never downloads"],
    )
