"""Engine inspection: every engine config.json fixture in tests/assets/engines, HF checkpoints, synthetic
engines, and the errors a wrong --engine-dir gives (B11)."""

from __future__ import annotations

import json

import pytest
from conftest import ENGINES, asset

from repo_builder.engine import check_rank_files, engine_fingerprint, inspect_engine
from repo_builder.errors import EngineError

DECODER_ENGINES = sorted(p.name for p in ENGINES.iterdir() if p.is_dir() and p.name != "old-bert-base-benchmark")


def raw(name: str) -> dict:
    return json.loads((ENGINES / name / "config.json").read_text())


def expected_from_raw(cfg: dict) -> dict:
    """The values EngineInfo must carry, read straight from the JSON paths of each layout."""
    if "builder_config" in cfg:
        b, p = cfg["builder_config"], cfg["plugin_config"]
        tp = b.get("tensor_parallel", 1)
        pp = b.get("pipeline_parallel", 1)
        return {
            "layout": "old",
            "architecture": b["name"],
            "dtype": b["precision"],
            "vocab_size": b["vocab_size"],
            "tp_size": tp,
            "pp_size": pp,
            "world_size": tp * pp,
            "max_batch_size": b["max_batch_size"],
            "max_beam_width": b.get("max_beam_width", 1),
            "max_input_len": b["max_input_len"],
            "max_seq_len": b["max_input_len"] + b["max_output_len"],
            "max_num_tokens": b.get("max_num_tokens"),
            "logits_dtype": "float32",
            "paged_kv_cache": p["paged_kv_cache"],
            "remove_input_padding": p["remove_input_padding"],
            "gpt_attention_plugin": p["gpt_attention_plugin"],
            "use_paged_context_fmha": p.get("use_paged_context_fmha", False),
            "tokens_per_block": p["tokens_per_block"],
            "max_draft_len": b.get("max_draft_len", 0),
            "gather_generation_logits": b.get("gather_generation_logits", False),
            "gather_context_logits": b.get("gather_context_logits", False),
        }
    pre, build = cfg["pretrained_config"], cfg["build_config"]
    plugin = build["plugin_config"]
    m = pre["mapping"]
    seq = build.get("max_seq_len", None)
    if seq is None:
        seq = build["max_input_len"] + build["max_output_len"]
    kv = build.get("kv_cache_type")
    return {
        "layout": "new",
        "trtllm_version": cfg["version"],
        "architecture": pre["architecture"],
        "dtype": pre["dtype"],
        "vocab_size": pre["vocab_size"],
        "tp_size": m["tp_size"],
        "pp_size": m["pp_size"],
        "world_size": m["tp_size"] * m["pp_size"],
        "max_batch_size": build["max_batch_size"],
        "max_beam_width": build["max_beam_width"],
        "max_input_len": build["max_input_len"],
        "max_seq_len": seq,
        "max_num_tokens": build["max_num_tokens"],
        "logits_dtype": pre["logits_dtype"],
        "paged_kv_cache": (kv.lower() == "paged") if kv else plugin["paged_kv_cache"],
        "remove_input_padding": plugin["remove_input_padding"],
        "gpt_attention_plugin": plugin["gpt_attention_plugin"],
        "use_paged_context_fmha": plugin["use_paged_context_fmha"],
        "tokens_per_block": plugin["tokens_per_block"],
        "max_draft_len": build.get("max_draft_len", 0),
        "gather_generation_logits": build["gather_generation_logits"],
        "gather_context_logits": build["gather_context_logits"],
    }


@pytest.mark.parametrize("name", DECODER_ENGINES)
def test_engine_config_matches_raw_json(name):
    info = inspect_engine(ENGINES / name)
    assert info.kind == "trtllm" and info.is_decoder
    got = info.model_dump()
    exp = expected_from_raw(raw(name))
    assert {k: got[k] for k in exp} == exp


def test_engine_spot_values_from_assets_readme():
    """Facts listed in tests/assets/engines/SOURCE.md, checked independently of the parser above."""
    assert inspect_engine(ENGINES / "old-llama2-7b-tp4").world_size == 4
    assert inspect_engine(ENGINES / "old-llama2-7b-tp4").max_beam_width == 1  # key absent
    assert inspect_engine(ENGINES / "old-llama2-7b-tp4").max_seq_len == 2048 + 512
    assert inspect_engine(ENGINES / "old-llama2-70b-tp2-int8wo").world_size == 2
    assert "int8_weights" in inspect_engine(ENGINES / "old-llama2-70b-tp2-int8wo").quantization
    assert inspect_engine(ENGINES / "old-gpt-starfish-3b-beam2").max_beam_width == 2
    assert inspect_engine(ENGINES / "old-gpt-starfish-3b-genlogits").gather_generation_logits is True
    dolphin = inspect_engine(ENGINES / "v0.8-mistral-7b-dolphin")
    assert (dolphin.vocab_size, dolphin.max_seq_len) == (32001, 15000 + 1024)
    medusa = inspect_engine(ENGINES / "v0.13-medusa-vicuna-7b")
    assert (medusa.max_draft_len, medusa.speculative_decoding_mode, medusa.max_seq_len) == (63, "medusa", 2111)
    smol = inspect_engine(ENGINES / "v1.2-smollm-llama-beam5")
    assert (smol.max_beam_width, smol.paged_kv_cache, smol.use_paged_context_fmha) == (5, True, True)
    assert smol.trtllm_version == "1.2.0rc6" and smol.dtype == "bfloat16" and smol.tokens_per_block == 32
    qwen = inspect_engine(ENGINES / "v0.17-qwen2.5-0.5b-sparktts-from-readme")
    assert (qwen.vocab_size, qwen.max_seq_len, qwen.max_batch_size) == (166000, 32768, 16)


def test_bert_encoder_is_refused_with_why():
    with pytest.raises(EngineError) as exc:
        inspect_engine(ENGINES / "old-bert-base-benchmark")
    text = str(exc.value)
    assert "old-bert-base-benchmark" in text
    assert "bert is an encoder" in text and "gpt_attention_plugin" in text


def test_rank_files_match_world_size(engine_copy):
    info = inspect_engine(engine_copy("old-llama2-7b-tp4"))
    assert info.rank_files == ("rank0.engine", "rank1.engine", "rank2.engine", "rank3.engine")
    check_rank_files(info)


@pytest.mark.parametrize(
    "name,ranks", [("old-llama2-7b-tp4", 1), ("old-llama2-70b-tp2-int8wo", 3), ("v1.2-smollm-llama-beam5", 0)]
)
def test_rank_file_count_mismatch_refused(engine_copy, name, ranks):
    info = inspect_engine(engine_copy(name, ranks=ranks))
    with pytest.raises(EngineError) as exc:
        check_rank_files(info)
    text = str(exc.value)
    assert name in text and f"world size {info.world_size}" in text and f"found {ranks} rank" in text


def test_wrong_rank_names_refused(engine_copy):
    d = engine_copy("old-llama2-70b-tp2-int8wo", ranks=0)
    (d / "rank0.engine").write_bytes(b"")
    (d / "rank2.engine").write_bytes(b"")
    with pytest.raises(EngineError, match="rank1.engine"):
        check_rank_files(inspect_engine(d))


# ---------------------------------------------------------------- B11: wrong engine_dir
def test_missing_dir(tmp_path):
    with pytest.raises(EngineError, match="does not exist") as exc:
        inspect_engine(tmp_path / "nope")
    assert str(tmp_path / "nope") in str(exc.value)


def test_empty_dir_b11(tmp_path):
    with pytest.raises(EngineError, match="no config.json.*empty") as exc:
        inspect_engine(tmp_path)
    assert str(tmp_path) in str(exc.value)


def test_invalid_json_shows_line_and_column(tmp_path):
    (tmp_path / "config.json").write_text('{\n  "builder_config": {\n    "max_batch_size": 8,,\n  }\n}\n')
    with pytest.raises(EngineError, match=r"invalid JSON at line 3 column \d+") as exc:
        inspect_engine(tmp_path)
    assert "config.json" in str(exc.value)


def test_hf_config_without_weights_is_not_an_engine_b11(tmp_path):
    """B11: engine_dir points at the HF model's config.json (no weights, no build_config)."""
    (tmp_path / "config.json").write_bytes(asset("sp_tiny_hf_tokenizer", "config.json").read_bytes())
    with pytest.raises(EngineError) as exc:
        inspect_engine(tmp_path)
    text = str(exc.value)
    assert "neither a TensorRT-LLM engine nor an HF checkpoint" in text and "config.json" in text
    assert "trtllm-build" in text


def test_unrelated_json_refused(tmp_path):
    (tmp_path / "config.json").write_text('{"hello": 1}')
    with pytest.raises(EngineError, match="neither a TensorRT-LLM engine config"):
        inspect_engine(tmp_path)


def test_trtllm_checkpoint_not_built(tmp_path):
    (tmp_path / "config.json").write_text(
        json.dumps({"architecture": "LlamaForCausalLM", "dtype": "float16", "mapping": {"tp_size": 1, "pp_size": 1}})
    )
    with pytest.raises(EngineError, match="checkpoint.*not an engine") as exc:
        inspect_engine(tmp_path)
    assert "trtllm-build --checkpoint_dir" in str(exc.value)


# ---------------------------------------------------------------- HF checkpoint and synthetic engines
def test_hf_checkpoint(tiny_llama):
    info = inspect_engine(tiny_llama)
    cfg = json.loads((tiny_llama / "config.json").read_text())
    assert info.kind == "hf" and info.layout == "hf"
    assert info.architecture == "LlamaForCausalLM"
    assert info.vocab_size == cfg["vocab_size"] == 32000
    assert info.max_seq_len == cfg["max_position_embeddings"] and info.max_input_len == info.max_seq_len - 1
    assert (info.world_size, info.max_beam_width, info.max_batch_size, info.logits_dtype) == (1, 1, 8, "float32")
    assert info.weight_files and info.paged_kv_cache is None
    check_rank_files(info)  # no rank files needed


def test_synthetic_defaults_and_values(tmp_path):
    (tmp_path / "synthetic_engine.json").write_text("{}")
    info = inspect_engine(tmp_path)
    assert (info.kind, info.vocab_size, info.max_batch_size, info.max_input_len, info.max_seq_len) == (
        "synthetic",
        32000,
        64,
        1024,
        2048,
    )
    (tmp_path / "synthetic_engine.json").write_text('{"vocab_size": 100, "max_seq_len": 4096}')
    info = inspect_engine(tmp_path)
    assert (info.vocab_size, info.max_seq_len, info.max_input_len) == (100, 4096, 1024)


def test_synthetic_bad_spec(tmp_path):
    (tmp_path / "synthetic_engine.json").write_text('{"vocab_size": "many", "max_batch": 3}')
    with pytest.raises(EngineError) as exc:
        inspect_engine(tmp_path)
    assert "vocab_size" in str(exc.value) and "max_batch" in str(exc.value)


# ---------------------------------------------------------------- fingerprint
def test_fingerprint_uses_names_and_sizes_not_contents(engine_copy):
    d = engine_copy("v1.2-smollm-llama-beam5")
    info = inspect_engine(d)
    first = engine_fingerprint(info)
    assert first.startswith("sha256:") and first == engine_fingerprint(info)
    (d / "rank0.engine").write_bytes(b"a" * 1000)
    second = engine_fingerprint(info)
    assert second != first  # size changed
    (d / "rank0.engine").write_bytes(b"b" * 1000)
    assert engine_fingerprint(info) == second  # same name and size: contents are never read
    (d / "config.json").write_text((d / "config.json").read_text() + "\n")
    assert engine_fingerprint(info) != second  # config bytes count


@pytest.mark.parametrize(
    ("layout", "sections", "kind"),
    [
        ("new", {}, "paged"),
        ("new", {"build_config": {"kv_cache_type": "DISABLED"}}, "disabled"),
        ("new", {"build_config": {"kv_cache_type": "continuous"}}, "continuous"),
        ("new", {"build_config": {"kv_cache_type": None, "plugin_config": {"paged_kv_cache": False}}}, "continuous"),
        ("old", {}, "paged"),
        ("old", {"plugin_config": {"paged_kv_cache": False}}, "continuous"),
    ],
)
def test_kv_cache_type_is_read_from_either_layout(tmp_path, layout, sections, kind):
    from engine_configs import config, write_engine

    info = inspect_engine(write_engine(tmp_path / "e", config(layout, **sections)))
    assert info.kv_cache_type == kind and info.paged_kv_cache is (kind == "paged")
