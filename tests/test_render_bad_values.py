"""Values that cannot go into config.pbtxt are refused naming the key (or argument), never blaming a
template or calling it a repo-builder bug: ``${`` in a value or a path, text that is not UTF-8, integers and
floats beyond what the backends parse (32-bit int, float32), NaN/Inf, malformed ``--set`` and values files."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from cli_support import assert_refused, render_args, run_cli
from engine_configs import packaged_mistral, write_engine

from repo_builder.commands.build import _parse_sets
from repo_builder.errors import ParameterError, RepoBuilderError
from repo_builder.render import render_repository

PROJECT = Path(__file__).resolve().parents[1]
BLAME = ("model_templates", ".j2", "repo-builder bug", "Traceback")


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    return packaged_mistral(tmp_path_factory)


@pytest.fixture
def engine(tmp_path):
    return write_engine(tmp_path / "engine")


def _refused(exc: BaseException, *needles: str) -> str:
    text = str(exc)
    assert isinstance(exc, RepoBuilderError), repr(exc)
    for needle in needles:
        assert needle in text, f"{needle!r} not in {text!r}"
    for word in BLAME:
        assert word not in text, f"{word!r} in {text!r}"
    return text


@pytest.mark.parametrize(
    "key,value,needle",
    [
        ("tensorrt_llm_model_name", "a${b}", "${"),
        ("xgrammar_tokenizer_info_path", "${xgrammar_tokenizer_info_path}", "${"),
        ("lora_prefetch_dir", "/x/${HOME}/lora", "${"),
        ("tensorrt_llm_model_name", "caf\udce9", "not valid UTF-8"),
        ("max_queue_size", "99999999999999999999", "32-bit integer"),
        ("triton_max_batch_size", str(2**31), "32-bit integer"),
        ("kv_cache_host_memory_bytes", str(2**64), "out of range"),
        ("synthetic_token_delay_ms", "1e39", "32-bit float"),
        ("synthetic_token_delay_ms", "nan", "finite"),
        ("kv_cache_free_gpu_mem_fraction", "inf", "finite"),
        ("kv_cache_free_gpu_mem_fraction", "-inf", "finite"),
        ("max_queue_size", "${max_queue_size}", "expected an integer"),
    ],
)
def test_bad_value_names_its_key(tmp_path, tok, engine, key, value, needle):
    out = tmp_path / "repo"
    with pytest.raises(ParameterError) as err:
        render_repository(engine, tok, out, user_values={key: value})
    _refused(err.value, f"{key}:", needle)
    assert not out.exists()


def test_a_large_byte_count_is_still_accepted(tmp_path, tok, engine):
    result = render_repository(
        engine, tok, tmp_path / "repo", dry_run=True, user_values={"kv_cache_host_memory_bytes": str(64 << 30)}
    )
    assert result.plan.resolution["kv_cache_host_memory_bytes"] == 64 << 30


@pytest.mark.parametrize("where", ["engine", "tokenizer", "output"])
def test_a_path_holding_a_placeholder_is_named(tmp_path, tok, engine, where):
    odd = tmp_path / "a${x}"
    odd.mkdir()
    kwargs = {}
    if where == "engine":
        engine = Path(shutil.copytree(engine, odd / "engine"))
        kwargs["engine_mode"] = "reference"
        key = "engine_dir"
    elif where == "tokenizer":
        tok = Path(shutil.copytree(tok, odd / "tok"))
        key = "tokenizer_dir"
    else:
        key = "engine_dir"
    out = (odd if where == "output" else tmp_path) / "repo"
    with pytest.raises(RepoBuilderError) as err:
        render_repository(engine, tok, out, **kwargs)
    _refused(err.value, f"{key}:", "${")
    assert not out.exists()


@pytest.mark.parametrize(
    "item,needle", [("max_queue_size", "expects KEY=VALUE"), ("=3", "empty key"), ("  =3", "empty key")]
)
def test_malformed_set_names_the_argument(item, needle):
    with pytest.raises(ParameterError) as err:
        _parse_sets([item])
    _refused(err.value, needle, repr(item).strip("'").strip())


@pytest.mark.parametrize(
    "text,needle",
    [
        ("max_queue_size: [1, 2\n", "not valid YAML"),
        ("- max_queue_size\n", "YAML mapping"),
        ("max_queue_size: {a: 1}\n", "max_queue_size: expected an integer"),
        ("tensorrt_llm_model_name: 5\n", "tensorrt_llm_model_name: expected a string"),
        ("kv_cache_free_gpu_mem_fraction: .nan\n", "kv_cache_free_gpu_mem_fraction: expected a finite number"),
        ("tensorrt_llm_model_name: '${x}'\n", "tensorrt_llm_model_name:"),
    ],
)
def test_malformed_values_file_names_the_file_or_key(tmp_path, tok, engine, text, needle):
    values = tmp_path / "values.yaml"
    values.write_text(text)
    with pytest.raises(ParameterError) as err:
        render_repository(engine, tok, tmp_path / "repo", values_file=values)
    _refused(err.value, needle)


def test_cli_reports_a_placeholder_value_without_traceback(tmp_path, tok, engine):
    proc = run_cli(*render_args(engine, tok, tmp_path / "repo", "--set", "tensorrt_llm_model_name=x${y}"), cwd=PROJECT)
    assert_refused(proc)
    _refused(RepoBuilderError(proc.stderr), "tensorrt_llm_model_name:", "${")
