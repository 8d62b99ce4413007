"""repo-builder validate: repository lint on small fixtures and on real hand-filled repositories."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import ENGINES, PROJECT, REPOS, asset

from repo_builder.repository.validate import validate_repository

MINI = PROJECT / "tests" / "fixtures" / "pbtxt" / "mini"


@pytest.fixture
def mini(tmp_path) -> Path:
    dst = tmp_path / "mini"
    shutil.copytree(MINI, dst)
    return dst


def edit(repo: Path, model: str, old: str, new: str, count: int = 1) -> None:
    path = repo / model / "config.pbtxt"
    text = path.read_text()
    assert text.count(old) >= 1, f"fixture text {old!r} not in {path}"
    path.write_text(text.replace(old, new, count))


def line_of(repo: Path, model: str, needle: str) -> int:
    for i, line in enumerate((repo / model / "config.pbtxt").read_text().splitlines(), 1):
        if needle in line:
            return i
    raise AssertionError(needle)


def lines(problems) -> list[str]:
    return [str(p) for p in problems]


def test_mini_fixture_is_valid():
    assert validate_repository(MINI) == []


def test_ensemble_input_dtype_mismatch(mini):
    edit(mini, "ensemble", '{ name: "max_tokens" data_type: TYPE_INT32', '{ name: "max_tokens" data_type: TYPE_UINT32')
    got = lines(validate_repository(mini))
    ln = line_of(mini, "ensemble", 'key: "REQUEST_OUTPUT_LEN" value: "max_tokens"')
    assert got == [
        f"ensemble/config.pbtxt:{ln}: dtype mismatch: 'max_tokens' is TYPE_UINT32 but "
        "preprocessing.REQUEST_OUTPUT_LEN expects TYPE_INT32"
    ]


def test_dtype_of_internal_tensor_comes_from_the_producing_step(mini):
    """Case B32: a producer output feeding a consumer input must have the same dtype."""
    edit(mini, "preprocessing", '{ name: "INPUT_ID" data_type: TYPE_INT32', '{ name: "INPUT_ID" data_type: TYPE_INT64')
    got = lines(validate_repository(mini))
    assert len(got) == 1
    assert "'_INPUT_ID' is TYPE_INT64 but tensorrt_llm.input_ids expects TYPE_INT32" in got[0]


def test_input_map_to_a_missing_step_input(mini):
    edit(mini, "ensemble", 'key: "QUERY"', 'key: "PROMPT"')
    got = lines(validate_repository(mini))
    assert any("input_map: 'preprocessing' has no input 'PROMPT'" in g for g in got)
    assert any("required input 'QUERY' is not fed" in g for g in got)


def test_output_map_from_a_missing_step_output(mini):
    edit(mini, "ensemble", 'key: "OUTPUT"', 'key: "TEXT"')
    got = lines(validate_repository(mini))
    assert any("output_map: 'postprocessing' has no output 'TEXT'" in g for g in got)


def test_required_step_input_not_fed(mini):
    """Case B32: every non-optional consumer input is supplied."""
    edit(mini, "ensemble", '      input_map { key: "input_lengths" value: "_REQUEST_INPUT_LEN" }\n', "")
    got = lines(validate_repository(mini))
    ln = line_of(mini, "ensemble", 'model_name: "tensorrt_llm"')
    assert got == [
        f"ensemble/config.pbtxt:{ln}: step 'tensorrt_llm': required input 'input_lengths' is not fed by input_map"
    ]


def test_optional_step_input_may_stay_unfed(mini):
    edit(mini, "ensemble", '      input_map { key: "streaming" value: "stream" }\n', "")
    assert validate_repository(mini) == []


def test_ensemble_output_produced_by_no_step(mini):
    edit(mini, "ensemble", 'value: "text_output"', 'value: "_TEXT"')
    got = lines(validate_repository(mini))
    ln = line_of(mini, "ensemble", 'name: "text_output"')
    assert f"ensemble/config.pbtxt:{ln}: ensemble output 'text_output': no step produces it" in got


def test_ensemble_output_produced_by_two_steps(mini):
    edit(
        mini,
        "ensemble",
        'output_map { key: "sequence_length" value: "_SEQUENCE_LENGTH" }',
        'output_map { key: "sequence_length" value: "_SEQUENCE_LENGTH" }\n'
        '      output_map { key: "output_ids" value: "text_output" }',
    )
    got = lines(validate_repository(mini))
    assert any("ensemble output 'text_output': produced by 2 steps (tensorrt_llm, postprocessing)" in g for g in got)


def test_tensor_that_is_never_produced(mini):
    edit(mini, "ensemble", 'value: "_REQUEST_INPUT_LEN" }\n      output_map', 'value: "_LEN" }\n      output_map')
    got = lines(validate_repository(mini))
    assert any(
        "'_REQUEST_INPUT_LEN' (for tensorrt_llm.input_lengths) is neither an ensemble input nor produced" in g
        for g in got
    )


def test_missing_step_model(mini):
    edit(mini, "ensemble", 'model_name: "postprocessing"', 'model_name: "detokenizer"')
    got = lines(validate_repository(mini))
    assert any("step model 'detokenizer' is not in the repository" in g for g in got)


def test_duplicate_input_name(mini):
    edit(
        mini,
        "postprocessing",
        '{ name: "SEQUENCE_LENGTH" data_type: TYPE_INT32 dims: [ -1 ] }',
        '{ name: "SEQUENCE_LENGTH" data_type: TYPE_INT32 dims: [ -1 ] },\n'
        '  { name: "SEQUENCE_LENGTH" data_type: TYPE_INT32 dims: [ -1 ] }',
    )
    got = lines(validate_repository(mini))
    assert any(
        g.startswith("postprocessing/config.pbtxt:") and "input 'SEQUENCE_LENGTH' declared twice" in g for g in got
    )


def test_name_differs_from_folder(mini):
    edit(mini, "postprocessing", 'name: "postprocessing"', 'name: "detok"')
    assert lines(validate_repository(mini)) == [
        "postprocessing/config.pbtxt:1: name 'detok' differs from the folder name 'postprocessing'"
    ]


def test_parse_error_is_reported_with_its_line(mini):
    edit(mini, "postprocessing", "max_batch_size: 4\n", "max_batch_size: 4\nmax_batch_sise: 8\n")
    got = lines(validate_repository(mini))
    assert len(got) == 1
    assert got[0].startswith("postprocessing/config.pbtxt:4: ") and "max_batch_sise" in got[0]


def test_placeholders_reported_per_line_even_when_unparsable(mini):
    """Case B01/B02: one line per unfilled placeholder, plus the parse error Triton would give."""
    edit(mini, "tensorrt_llm", "max_batch_size: 4", "max_batch_size: ${triton_max_batch_size}")
    edit(mini, "tensorrt_llm", 'string_value: "1"', 'string_value: "${max_beam_width}"')
    got = lines(validate_repository(mini))
    mb = line_of(mini, "tensorrt_llm", "${triton_max_batch_size}")
    bw = line_of(mini, "tensorrt_llm", "${max_beam_width}")
    assert f"tensorrt_llm/config.pbtxt:{mb}: unfilled placeholder ${{triton_max_batch_size}}" in got
    assert f"tensorrt_llm/config.pbtxt:{bw}: unfilled placeholder ${{max_beam_width}}" in got
    assert any(g.startswith(f"tensorrt_llm/config.pbtxt:{mb}: ") and "parse integer" in g for g in got)


def test_placeholder_inside_a_string_parses_but_is_reported(mini):
    edit(mini, "tensorrt_llm", 'string_value: "1"', 'string_value: "${max_beam_width}"')
    got = lines(validate_repository(mini))
    assert got == [
        f"tensorrt_llm/config.pbtxt:{line_of(mini, 'tensorrt_llm', '${')}: unfilled placeholder ${{max_beam_width}}"
    ]


def test_model_folder_without_config(mini):
    (mini / "stray" / "1").mkdir(parents=True)
    assert "stray: model folder without config.pbtxt (Triton cannot load it)" in lines(validate_repository(mini))


def test_more_than_one_trtllm_instance(mini):
    """Case B10: tensorrt_llm must run as one instance."""
    edit(mini, "tensorrt_llm", "count: 1", "count: 2")
    got = lines(validate_repository(mini))
    assert len(got) == 1 and "2 instances of the TensorRT-LLM model" in got[0]


def test_bls_model_name_must_exist(mini):
    edit(
        mini,
        "postprocessing",
        "instance_group",
        'parameters: { key: "tensorrt_llm_model_name" value: { string_value: "llm_main" } }\ninstance_group',
    )
    got = lines(validate_repository(mini))
    assert len(got) == 1 and "tensorrt_llm_model_name 'llm_main' is not a model of the repository" in got[0]


def _add_param(repo: Path, model: str, key: str, value: str) -> None:
    path = repo / model / "config.pbtxt"
    path.write_text(path.read_text() + f'parameters: {{ key: "{key}" value: {{ string_value: "{value}" }} }}\n')


def test_tokenizer_dir_must_exist_and_hold_tokenizer_files(mini, tmp_path):
    """Case B22: a path outside the server's filesystem (or a hub id) is refused."""
    _add_param(mini, "preprocessing", "tokenizer_dir", "/tensorrt_llm/tokenizer")
    empty = tmp_path / "empty"
    empty.mkdir()
    _add_param(mini, "postprocessing", "tokenizer_dir", str(empty))
    got = lines(validate_repository(mini))
    assert any(
        g.startswith("preprocessing/config.pbtxt:") and "'/tensorrt_llm/tokenizer' is not an existing" in g for g in got
    )
    assert any(g.startswith("postprocessing/config.pbtxt:") and "holds no tokenizer files" in g for g in got)
    assert len(got) == 2


def test_good_tokenizer_and_engine_paths_pass(mini, engine_copy):
    _add_param(mini, "preprocessing", "tokenizer_dir", str(asset("mistral_v1_tokenizer")))
    _add_param(mini, "tensorrt_llm", "gpt_model_path", str(engine_copy("v0.8-mistral-7b-dolphin")))
    assert validate_repository(mini) == []


def test_engine_path_without_config_json(mini, tmp_path):
    _add_param(mini, "tensorrt_llm", "gpt_model_path", str(tmp_path))
    got = lines(validate_repository(mini))
    assert len(got) == 1 and "holds no config.json" in got[0]


def test_paths_under_the_serve_path_are_looked_up_in_the_repository(mini, engine_copy):
    engine = mini / "tensorrt_llm" / "1"
    engine.mkdir()
    shutil.copy(engine_copy("v0.8-mistral-7b-dolphin") / "config.json", engine / "config.json")
    _add_param(mini, "tensorrt_llm", "gpt_model_path", "/models/tensorrt_llm/1")
    assert len(validate_repository(mini)) == 1  # not on this host
    assert validate_repository(mini, served_at="/models") == []


# ----------------------------------------------------------------------------- real hand-filled repositories


def _placeholder_lines(repo: Path) -> set[str]:
    """Independent scan: every line holding '${' -> "model/config.pbtxt:line"."""
    out = set()
    for cfg in sorted(repo.glob("*/config.pbtxt")):
        for i, line in enumerate(cfg.read_text().splitlines(), 1):
            if "${" in line:
                out.add(f"{cfg.parent.name}/config.pbtxt:{i}")
    return out


@pytest.mark.parametrize("name", sorted(p.name for p in REPOS.iterdir() if p.is_dir()))
def test_placeholders_in_real_repositories(name):
    repo = REPOS / name
    got = [p for p in validate_repository(repo) if p.message.startswith("unfilled placeholder")]
    assert {f"{p.file}:{p.line}" for p in got} == _placeholder_lines(repo)


def test_hayleyhu_placeholders_named():
    repo = REPOS / "hayleyhu-llama2-70b-tp2-v0.5"
    got = lines(validate_repository(repo))
    kv = line_of(repo, "tensorrt_llm", "${max_tokens_in_paged_kv_cache}")
    tok = line_of(repo, "preprocessing", "${tokenizer_dir}")
    assert f"tensorrt_llm/config.pbtxt:{kv}: unfilled placeholder ${{max_tokens_in_paged_kv_cache}}" in got
    assert f"preprocessing/config.pbtxt:{tok}: unfilled placeholder ${{tokenizer_dir}}" in got


def test_medusa_bls_parse_error_at_the_placeholder_line():
    """Case B02: Triton cannot parse the BLS config; the error names the line of ${triton_max_batch_size}."""
    got = lines(validate_repository(REPOS / "medusa-vicuna-v0.13"))
    ln = line_of(REPOS / "medusa-vicuna-v0.13", "tensorrt_llm_bls", "max_batch_size: ${triton_max_batch_size}")
    assert any(g.startswith(f"tensorrt_llm_bls/config.pbtxt:{ln}: ") and "parse integer" in g for g in got)


# pairs from tests/assets/triton_model_repos/SOURCE.md
PAIRS = {
    "hayleyhu-llama2-70b-tp2-v0.5": "old-llama2-70b-tp2-int8wo",
    "sfc-llama2-7b-tp4-v0.5": "old-llama2-7b-tp4",
    "codota-dolphin-mistral-v0.8": "v0.8-mistral-7b-dolphin",
    "codota-starchat-v0.7": "old-gpt-starchat-15b",
    "medusa-vicuna-v0.13": "v0.13-medusa-vicuna-7b",
}


def _engine_problems(repo: Path, engine: Path) -> list[str]:
    base = set(lines(validate_repository(repo, warnings=True)))
    return [g for g in lines(validate_repository(repo, engine_dir=engine, warnings=True)) if g not in base]


def test_hayleyhu_batch_size_above_the_engine(engine_copy):
    repo = REPOS / "hayleyhu-llama2-70b-tp2-v0.5"
    got = _engine_problems(repo, engine_copy(PAIRS[repo.name]))
    ln = line_of(repo, "tensorrt_llm", "max_batch_size: 64")
    # B08: a warning, as resolve() warns for the same value at render time
    assert got == [
        f"tensorrt_llm/config.pbtxt:{ln}: warning: max_batch_size: 64 is above the engine's "
        "max_batch_size 32: "
        "the engine runs at most 32 requests at once; a larger batch needs `trtllm-build --max_batch_size` "
        "(B08)"
    ]


def test_sfc_batch_size_above_the_engine(engine_copy):
    repo = REPOS / "sfc-llama2-7b-tp4-v0.5"
    got = _engine_problems(repo, engine_copy(PAIRS[repo.name]))
    assert len(got) == 1
    assert got[0].startswith("llama2-7B-hf-tp-4_llama_decoder/config.pbtxt:")
    assert "max_batch_size: 4096 is above the engine's max_batch_size 8" in got[0]


@pytest.mark.parametrize("name", ["codota-dolphin-mistral-v0.8", "codota-starchat-v0.7", "medusa-vicuna-v0.13"])
def test_consistent_real_pairs_have_no_engine_contradictions(name, engine_copy):
    assert _engine_problems(REPOS / name, engine_copy(PAIRS[name])) == []


def test_engine_without_rank_files_is_reported():
    """Case B11: the rank*.engine count must equal tp x pp."""
    repo = REPOS / "hayleyhu-llama2-70b-tp2-v0.5"
    got = _engine_problems(repo, ENGINES / PAIRS[repo.name])
    assert any("world size 2" in g and "rank0.engine, rank1.engine" in g for g in got)


# ----------------------------------------------------------------------------- engine contradictions (mini)


def _engine_lines(repo: Path, engine: Path) -> list[str]:
    return lines(validate_repository(repo, engine_dir=engine, warnings=True))


def test_max_beam_width_above_the_engine(mini, engine_copy):
    """Case B07."""
    edit(
        mini,
        "tensorrt_llm",
        'key: "max_beam_width" value: { string_value: "1" }',
        'key: "max_beam_width" value: { string_value: "4" }',
    )
    got = _engine_lines(mini, engine_copy("v0.8-mistral-7b-dolphin"))
    assert got == [
        f"tensorrt_llm/config.pbtxt:{line_of(mini, 'tensorrt_llm', 'max_beam_width')}: max_beam_width: 4 "
        "is above the engine's max_beam_width 1 (rebuild with `trtllm-build --max_beam_width 4`) (B07)"
    ]


def test_streaming_with_beam_search(mini, engine_copy):
    """Case B30: decoupled + beam > 1."""
    edit(mini, "tensorrt_llm", "decoupled: false", "decoupled: true")
    edit(mini, "tensorrt_llm", 'string_value: "1"', 'string_value: "2"')
    engine = engine_copy("old-gpt-starfish-3b-beam2")
    got = _engine_lines(mini, engine)
    assert len(got) == 1 and "warning: decoupled: streaming with max_beam_width 2" in got[0]
    assert validate_repository(mini, engine_dir=engine) == []  # a warning: the repository is valid
    edit(mini, "tensorrt_llm", "decoupled: true", "decoupled: false")
    assert _engine_lines(mini, engine) == []


def test_logits_dtype_must_match_the_engine(mini, engine_copy):
    """Case B09."""
    edit(
        mini,
        "tensorrt_llm",
        '{ name: "sequence_length" data_type: TYPE_INT32 dims: [ -1 ] }',
        '{ name: "sequence_length" data_type: TYPE_INT32 dims: [ -1 ] },\n'
        '  { name: "generation_logits" data_type: TYPE_FP16 dims: [ -1, -1, -1 ] }',
    )
    got = _engine_lines(mini, engine_copy("old-gpt-starchat-15b"))
    assert len(got) == 1 and "logits data_type: TYPE_FP16 contradicts the engine's logits dtype float32" in got[0]


def test_kv_cache_reuse_needs_paged_context_fmha(mini, engine_copy):
    """Case B06 (a)."""
    _add_param(mini, "tensorrt_llm", "enable_kv_cache_reuse", "true")
    got = _engine_lines(mini, engine_copy("v0.8-mistral-7b-dolphin"))
    assert len(got) == 1 and "use_paged_context_fmha" in got[0]
    assert _engine_lines(mini, engine_copy("old-gpt-starfish-3b-beam2")) == []  # built with it; beam 1 here


def test_kv_cache_reuse_with_beam_search(mini, engine_copy):
    """Case B06 (b)."""
    _add_param(mini, "tensorrt_llm", "enable_kv_cache_reuse", "true")
    edit(mini, "tensorrt_llm", 'string_value: "1"', 'string_value: "2"')
    got = _engine_lines(mini, engine_copy("old-gpt-starfish-3b-beam2"))
    assert len(got) == 1 and "not supported with beam width > 1" in got[0]


def test_chunked_context_needs_paged_context_fmha(mini, engine_copy):
    _add_param(mini, "tensorrt_llm", "enable_chunked_context", "true")
    got = _engine_lines(mini, engine_copy("old-llama2-7b-tp4"))
    assert len(got) == 1
    assert "enable_chunked_context: needs an engine built with `trtllm-build --use_paged_context_fmha" in got[0]


def test_inflight_batching_without_paged_kv_cache(mini, engine_copy):
    engine = engine_copy("old-gpt-starchat-15b")
    cfg = json.loads((engine / "config.json").read_text())
    cfg["plugin_config"]["paged_kv_cache"] = False
    (engine / "config.json").write_text(json.dumps(cfg))
    got = _engine_lines(mini, engine)
    assert len(got) == 1
    assert "gpt_model_type: in-flight batching (inflight_fused_batching)" in got[0] and "paged KV cache" in got[0]
    edit(mini, "tensorrt_llm", "inflight_fused_batching", "V1")
    assert _engine_lines(mini, engine) == []


def test_engine_inputs_declared_as_the_cpp_backend_reads_them(tmp_path):
    """NVIDIA's v0.19.0 tensorrt_llm declares early_stopping TYPE_BOOL and mrope_position_deltas TYPE_INT64, but
    its C++ backend casts them to int32: validate warns, naming the input and the dtype to declare."""
    from conftest import asset

    nvidia = tmp_path / "nvidia"
    shutil.copytree(asset("nvidia_filled", "v0.19.0"), nvidia)
    problems = validate_repository(nvidia, warnings=True)
    by_input = {p.message.split("'")[1]: p for p in problems if p.message.startswith("input '")}
    assert "is declared TYPE_BOOL, but NVIDIA's C++ backend reads its bytes as TYPE_INT32" in (
        by_input["early_stopping"].message
    )
    assert by_input["early_stopping"].severity == "warning" and by_input["early_stopping"].line is not None
    assert "declared TYPE_INT64" in by_input["mrope_position_deltas"].message
