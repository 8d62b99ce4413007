"""Malformed engine and tokenizer folders end in a RepoBuilderError naming the file and the key, never a
traceback: wrong-typed fields (string for int, list for object, null, bool for int, negative sizes),
non-UTF-8 and invalid JSON, symlink loops, lengths that contradict each other. The property tests mutate one
field of a real config at a time and run everything render does before writing."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from engine_configs import config, packaged_mistral, write_engine
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from repo_builder.engine import check_rank_files, engine_fingerprint, inspect_engine
from repo_builder.errors import EngineError, RepoBuilderError
from repo_builder.render import render_configs
from repo_builder.tokenizer import inspect_tokenizer
from repo_builder.values.resolve import resolve

HF_CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "vocab_size": 32000,
    "max_position_embeddings": 512,
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "torch_dtype": "float32",
}
SYNTHETIC = {"vocab_size": 32000, "max_batch_size": 4, "max_input_len": 64, "max_seq_len": 128}


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    return packaged_mistral(tmp_path_factory)


@pytest.fixture(scope="module")
def tok_info(tok):
    return inspect_tokenizer(tok)


def key_paths(data: Any, prefix: tuple = ()) -> list[tuple]:
    """Every key path of nested dicts (sections and leaves)."""
    out = []
    if isinstance(data, dict):
        for k, v in data.items():
            out.append(prefix + (k,))
            out.extend(key_paths(v, prefix + (k,)))
    return out


def set_path(data: dict, path: tuple, value: Any) -> None:
    for k in path[:-1]:
        data = data[k]
    data[path[-1]] = value


WEIRD = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.sampled_from([0, -1, 1, 2**31, 2**63]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=8),
    st.sampled_from(["8", "", "paged", "auto"]),
    st.lists(st.integers(0, 3), max_size=3),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)


def run_everything(engine_dir: Path, tok_info, profile: str = "trtllm-1.2") -> None:
    """What plan_render does with an engine dir before writing anything."""
    info = inspect_engine(engine_dir)
    check_rank_files(info)
    engine_fingerprint(info)
    res = resolve(profile, info, tok_info, {})
    render_configs(profile, res.as_template_vars(), engine_kind=info.kind)


def check_only_repo_builder_errors(engine_dir: Path, tok_info) -> None:
    try:
        run_everything(engine_dir, tok_info)
    except RepoBuilderError as exc:
        text = str(exc)
        assert "Traceback" not in text


@pytest.mark.parametrize("layout", ["new", "old"])
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_a_mutated_trtllm_config_gives_only_repo_builder_errors(tmp_path, tok_info, layout, data):
    cfg = config(layout)
    path = data.draw(st.sampled_from(key_paths(cfg)))
    set_path(cfg, path, data.draw(WEIRD))
    check_only_repo_builder_errors(write_engine(tmp_path / "engine", cfg), tok_info)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_a_mutated_hf_config_gives_only_repo_builder_errors(tmp_path, tok_info, data):
    cfg = dict(HF_CONFIG)
    cfg[data.draw(st.sampled_from(sorted(cfg)))] = data.draw(WEIRD)
    d = tmp_path / "hf"
    d.mkdir(exist_ok=True)
    (d / "config.json").write_text(json.dumps(cfg))
    (d / "model.safetensors").write_bytes(b"")
    check_only_repo_builder_errors(d, tok_info)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_a_mutated_synthetic_spec_gives_only_repo_builder_errors(tmp_path, tok_info, data):
    spec = dict(SYNTHETIC)
    spec[data.draw(st.sampled_from(sorted(spec) + ["extra_key"]))] = data.draw(WEIRD)
    d = tmp_path / "syn"
    d.mkdir(exist_ok=True)
    (d / "synthetic_engine.json").write_text(json.dumps(spec))
    check_only_repo_builder_errors(d, tok_info)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_mutated_tokenizer_files_give_only_tokenizer_errors(tmp_path, tok, data):
    import shutil

    d = tmp_path / "tok"
    if d.exists():
        shutil.rmtree(d)
    shutil.copytree(tok, d)
    name = data.draw(st.sampled_from(["tokenizer_config.json", "generation_config.json", "config.json"]))
    current = json.loads((d / name).read_text()) if (d / name).exists() else {}
    key = data.draw(st.sampled_from(sorted(current) + ["eos_token_id", "pad_token_id", "bos_token_id"]))
    current[key] = data.draw(WEIRD)
    (d / name).write_text(json.dumps(current))
    try:
        inspect_tokenizer(d)
    except RepoBuilderError:
        pass


# ------------------------------------------------------------------ named cases, with the message they give
@pytest.mark.parametrize(
    "sections,key,needle",
    [
        ({"build_config": {"max_batch_size": "8"}}, "build_config.max_batch_size", 'expected an integer, got "8"'),
        ({"build_config": {"max_batch_size": None}}, "build_config.max_batch_size", "expected an integer, got null"),
        ({"build_config": {"max_beam_width": True}}, "build_config.max_beam_width", "expected an integer, got true"),
        ({"build_config": {"max_input_len": -5}}, "build_config.max_input_len", "expected an integer >= 1, got -5"),
        ({"build_config": {"plugin_config": [1, 2]}}, "build_config.plugin_config", "expected an object, got [1, 2]"),
        ({"pretrained_config": {"mapping": "tp2"}}, "pretrained_config.mapping", 'expected an object, got "tp2"'),
        ({"pretrained_config": {"vocab_size": 0}}, "pretrained_config.vocab_size", "expected an integer >= 1"),
        (
            {"build_config": {"plugin_config": {"tokens_per_block": "32"}}},
            "build_config.plugin_config.tokens_per_block",
            "expected an integer",
        ),
        ({"build_config": {"max_seq_len": 100}}, "build_config.max_seq_len", "below max_input_len 1024"),
        ({"build_config": {"max_seq_len": None, "max_output_len": -1}}, "build_config.max_output_len", ">= 1, got -1"),
    ],
)
def test_wrong_typed_field_names_file_and_key(tmp_path, sections, key, needle):
    engine = write_engine(tmp_path / "engine", config("new", **sections))
    with pytest.raises(EngineError) as err:
        inspect_engine(engine)
    text = str(err.value)
    assert f"{engine / 'config.json'}: {key}: " in text and needle in text, text


def test_old_layout_output_len_below_zero_is_named(tmp_path):
    engine = write_engine(tmp_path / "engine", config("old", builder_config={"max_output_len": -1}))
    with pytest.raises(EngineError, match=r"builder_config\.max_output_len: expected an integer >= 1, got -1"):
        inspect_engine(engine)


def test_non_utf8_config_is_named(tmp_path):
    engine = write_engine(tmp_path / "engine")
    (engine / "config.json").write_bytes(b'{"build_config": "\xff\xfe"}')
    with pytest.raises(EngineError, match="config.json: not UTF-8"):
        inspect_engine(engine)


def test_deeply_nested_json_is_named(tmp_path):
    engine = write_engine(tmp_path / "engine")
    (engine / "config.json").write_text("[" * 100000 + "]" * 100000)
    with pytest.raises(EngineError, match="config.json"):
        inspect_engine(engine)


@pytest.mark.parametrize("which", ["dir", "config.json", "synthetic_engine.json"])
def test_symlink_loops_are_named(tmp_path, which):
    if which == "dir":
        loop = tmp_path / "loop"
        os.symlink(loop, loop)
        target = loop
    else:
        target = tmp_path / "engine"
        target.mkdir()
        os.symlink(target / which, target / which)
    with pytest.raises(EngineError, match="symlink loop") as err:
        inspect_engine(target)
    assert str(target if which == "dir" else target / which) in str(err.value)


def test_a_loop_inside_a_python_engine_dir_is_not_followed(tmp_path, tok):
    from repo_builder.render import render_repository

    d = tmp_path / "syn"
    d.mkdir()
    (d / "synthetic_engine.json").write_text(json.dumps(SYNTHETIC))
    os.symlink(d, d / "again")  # a directory loop
    os.symlink(d / "self", d / "self")  # a file loop
    result = render_repository(d, tok, tmp_path / "repo")
    placed = sorted(
        p.relative_to(tmp_path / "repo").as_posix()
        for p in (tmp_path / "repo" / "tensorrt_llm" / "1" / "engine").rglob("*")
    )
    assert result.written and placed == ["tensorrt_llm/1/engine/synthetic_engine.json"]
