"""The render / validate-engine cases of tests/cases/README.md (B03, B04, B06-B11, B20, B22), run through the
render front half: inspect_engine + check_rank_files -> inspect_tokenizer -> validate_user_values -> resolve.
Nothing is written when any of these raises."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import ENGINES, asset

from repo_builder.engine import check_rank_files, inspect_engine
from repo_builder.errors import EngineError, ParameterError, TokenizerError
from repo_builder.profile.schema import validate_user_values
from repo_builder.tokenizer import inspect_tokenizer
from repo_builder.values.resolve import Resolution, resolve


def front_half(
    engine_dir: Path,
    tokenizer_dir: str | Path,
    values: dict | None = None,
    *,
    profile: str = "trtllm-1.2",
    streaming: bool | None = None,
) -> Resolution:
    engine = inspect_engine(engine_dir)
    check_rank_files(engine)
    tokenizer = inspect_tokenizer(tokenizer_dir)
    checked = validate_user_values(profile, values or {}, source="--set")
    return resolve(profile, engine, tokenizer, checked, streaming=streaming)


def edited_engine(tmp_path: Path, name: str, edit) -> Path:
    """A copy of a real engine config with one build fact changed (and its rank files)."""
    dst = tmp_path / name
    dst.mkdir()
    cfg = json.loads((ENGINES / name / "config.json").read_text())
    edit(cfg)
    (dst / "config.json").write_text(json.dumps(cfg, indent=2))
    world = 1
    if "pretrained_config" in cfg:
        m = cfg["pretrained_config"]["mapping"]
        world = m.get("tp_size", 1) * m.get("pp_size", 1)
    else:
        world = cfg["builder_config"].get("tensor_parallel", 1) * cfg["builder_config"].get("pipeline_parallel", 1)
    for r in range(world):
        (dst / f"rank{r}.engine").write_bytes(b"")
    return dst


LLAMA2 = asset("mistral_v1_tokenizer")


# ---------------------------------------------------------------- B03
def test_b03_structured_list_values(engine_copy):
    res = front_half(
        engine_copy("v0.13-medusa-vicuna-7b"),
        LLAMA2,
        {
            "gpu_device_ids": "0,1;2,3",
            "participant_ids": "1,2;3,4",  # one MPI-rank group per device group (rules.gpu_placement)
            "medusa_choices": "{0, 0, 0}, {0, 1}",
            "decoding_mode": "medusa",
        },
    )
    assert res["gpu_device_ids"] == [[0, 1], [2, 3]] and res["participant_ids"] == [[1, 2], [3, 4]]
    text = res.as_strings()
    assert text["gpu_device_ids"] == "0,1;2,3"
    assert text["participant_ids"] == "1,2;3,4"
    assert text["medusa_choices"] == "{0, 0, 0}, {0, 1}"


# ---------------------------------------------------------------- B04
def test_b04_blog_recipe_refused_before_writing(engine_copy):
    values = {
        "tokenizer_type": "llama",
        "max_num_sequences": "4",
        "batch_scheduler_policy": "guaranteed_completion",
        "max_tokens_in_paged_kv_cache": "",
    }
    engine = engine_copy("old-llama2-7b-tp4")
    with pytest.raises(ParameterError) as exc:
        front_half(engine, asset("sp_tiny_hf_tokenizer"), values)
    text = str(exc.value)
    assert "tokenizer_type" in text and "removed upstream in v0.9" in text
    assert "max_num_sequences" in text and "trtllm-0.5 only" in text
    assert "guaranteed_completion" in text and "guaranteed_no_evict" in text and "max_utilization" in text
    # The recipe minus the obsolete keys works, and "" leaves the KV cap unset.
    res = front_half(
        engine,
        asset("sp_tiny_hf_tokenizer"),
        {"batch_scheduler_policy": "guaranteed_no_evict", "max_tokens_in_paged_kv_cache": ""},
    )
    assert res["max_tokens_in_paged_kv_cache"] is None and res.origin("max_tokens_in_paged_kv_cache") == "user"
    assert res.as_strings()["max_tokens_in_paged_kv_cache"] == ""


# ---------------------------------------------------------------- B06
def test_b06a_kv_reuse_without_paged_context_fmha(engine_copy):
    with pytest.raises(EngineError) as exc:
        front_half(engine_copy("old-gpt-starchat-15b"), LLAMA2, {"enable_kv_cache_reuse": "true"})
    text = str(exc.value)
    assert "enable_kv_cache_reuse" in text and "trtllm-build --use_paged_context_fmha enable" in text


def test_b06b_kv_reuse_with_beam_search(engine_copy):
    # starfish-3b-beam2 has paged context FMHA, so only the beam width blocks reuse.
    with pytest.raises(EngineError) as exc:
        front_half(
            engine_copy("old-gpt-starfish-3b-beam2"), LLAMA2, {"enable_kv_cache_reuse": "true", "max_beam_width": "2"}
        )
    text = str(exc.value)
    assert "beam width > 1" in text and "use_paged_context_fmha" not in text


def test_b06_default_is_not_an_error_but_false(engine_copy):
    res = front_half(engine_copy("old-gpt-starchat-15b"), LLAMA2)
    assert res["enable_kv_cache_reuse"] is False and res.warnings


# ---------------------------------------------------------------- B07 (engine side)
def test_b07_pbtxt_beam_follows_engine(tmp_path):
    def beam12(cfg):
        cfg["builder_config"]["max_beam_width"] = 12

    res = front_half(edited_engine(tmp_path, "old-gpt-starfish-3b-beam2", beam12), LLAMA2)
    assert res["max_beam_width"] == 12 and res.origin("max_beam_width") == "engine"


def test_b07_beam_above_engine_refused(engine_copy):
    with pytest.raises(EngineError, match=r"max_beam_width: 2 is above the engine's max_beam_width 1"):
        front_half(
            engine_copy("v0.17-qwen2.5-0.5b-sparktts-from-readme"), asset("qwen3_tokenizer"), {"max_beam_width": "2"}
        )


# ---------------------------------------------------------------- B08
def test_b08_triton_batch_above_engine_warns(engine_copy):
    engine = engine_copy("old-gpt-starfish-3b-genlogits")
    res = front_half(engine, LLAMA2, {"triton_max_batch_size": "8"})
    assert res["triton_max_batch_size"] == 8
    assert any("triton_max_batch_size: 8 is above the engine's max_batch_size 1" in w for w in res.warnings)
    assert front_half(engine, LLAMA2)["triton_max_batch_size"] == 1


def test_b08_build_time_key_refused(engine_copy):
    with pytest.raises(ParameterError) as exc:
        front_half(engine_copy("old-gpt-starfish-3b-genlogits"), LLAMA2, {"max_input_len": "8192000"})
    assert "max_input_len" in str(exc.value) and "trtllm-build --max_input_len" in str(exc.value)


# ---------------------------------------------------------------- B09
def test_b09_logits_datatype_from_engine_and_mismatch(tmp_path):
    def fp16_logits(cfg):
        cfg["pretrained_config"]["logits_dtype"] = "float16"

    engine = edited_engine(tmp_path, "v0.13-medusa-vicuna-7b", fp16_logits)
    res = front_half(engine, LLAMA2)
    assert res["logits_datatype"] == "TYPE_FP16" and res.origin("logits_datatype") == "engine"
    with pytest.raises(EngineError) as exc:
        front_half(engine, LLAMA2, {"logits_datatype": "TYPE_FP32"})
    assert "logits_datatype: TYPE_FP32 contradicts the engine's logits dtype float16" in str(exc.value)


# ---------------------------------------------------------------- B10
def test_b10_tensorrt_llm_instances(engine_copy):
    with pytest.raises(ParameterError) as exc:
        front_half(engine_copy("old-llama2-7b-tp4"), LLAMA2, {"tensorrt_llm_instance_count": "2"})
    text = str(exc.value)
    assert "tensorrt_llm_instance_count" in text and "gpu_device_ids" in text and "participant_ids" in text


# ---------------------------------------------------------------- B11
def test_b11_empty_engine_dir(tmp_path):
    with pytest.raises(EngineError, match="no config.json") as exc:
        front_half(tmp_path, LLAMA2)
    assert str(tmp_path) in str(exc.value)


def test_b11_hf_config_as_engine_dir(tmp_path):
    shutil.copy(asset("sp_tiny_hf_tokenizer", "config.json"), tmp_path / "config.json")
    with pytest.raises(EngineError) as exc:
        front_half(tmp_path, LLAMA2)
    assert str(tmp_path / "config.json") in str(exc.value) and "build_config" in str(exc.value)


def test_b11_rank_count(engine_copy):
    with pytest.raises(EngineError, match=r"world size 2 \(tp 2 x pp 1\).*found 1 rank"):
        front_half(engine_copy("old-llama2-70b-tp2-int8wo", ranks=1), LLAMA2)


# ---------------------------------------------------------------- B20
def _tokenizer_without_eos(tmp_path: Path) -> Path:
    d = tmp_path / "tok"
    d.mkdir()
    for name in ("vocab.json", "merges.txt"):
        shutil.copy(asset("gpt2_tokenizer", name), d / name)
    (d / "tokenizer_config.json").write_text(
        '{"tokenizer_class": "GPT2Tokenizer", "eos_token": null, "bos_token": null, "unk_token": null}'
    )
    return d


def test_b20_no_end_id_anywhere(engine_copy, tmp_path):
    tok = _tokenizer_without_eos(tmp_path)
    engine = engine_copy("v0.17-qwen2.5-0.5b-sparktts-from-readme")  # vocab 166000 holds GPT-2's 50257
    with pytest.raises(TokenizerError) as exc:
        front_half(engine, tok)
    text = str(exc.value)
    assert "end_id" in text and str(tok / "generation_config.json") in text and str(tok / "config.json") in text
    res = front_half(engine, tok, {"end_id": "50256"})
    assert (res["end_id"], res["pad_id"]) == (50256, 50256)


def test_b20_end_id_from_generation_config(engine_copy, tmp_path):
    tok = _tokenizer_without_eos(tmp_path)
    (tok / "generation_config.json").write_text('{"eos_token_id": [50256, 13], "pad_token_id": 0}')
    res = front_half(engine_copy("v0.17-qwen2.5-0.5b-sparktts-from-readme"), tok)
    assert (res["end_id"], res["pad_id"], res["stop_token_ids"]) == (50256, 0, [13])
    assert res.origin("end_id") == "tokenizer" and res.as_strings()["stop_token_ids"] == "13"


# ---------------------------------------------------------------- B22
def test_b22_hub_id_tokenizer(engine_copy):
    with pytest.raises(TokenizerError, match="hub id.*never downloads"):
        front_half(engine_copy("old-llama2-7b-tp4"), "meta-llama/Llama-2-7b-hf")


def test_b22_path_missing_on_this_machine(engine_copy, tmp_path):
    with pytest.raises(TokenizerError, match="does not exist") as exc:
        front_half(engine_copy("old-llama2-7b-tp4"), tmp_path / "tensorrt_llm" / "tokenizer")
    assert "tensorrt_llm/tokenizer" in str(exc.value)
