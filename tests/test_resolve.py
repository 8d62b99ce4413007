"""resolve(): value origins, engine-derived defaults and every cross-check against engine and tokenizer."""

from __future__ import annotations

import json

import pytest
from conftest import ENGINES, asset

from repo_builder.engine import inspect_engine
from repo_builder.errors import EngineError, ParameterError, TokenizerError
from repo_builder.profile.schema import load_schema
from repo_builder.tokenizer import inspect_tokenizer
from repo_builder.values.resolve import resolve


@pytest.fixture(scope="module")
def sp_tok():
    return inspect_tokenizer(asset("mistral_v1_tokenizer"))


@pytest.fixture(scope="module")
def llama31_tok():
    return inspect_tokenizer(asset("llama3.1_tokenizer"))


def problems_of(exc) -> list[str]:
    return exc.value.problems


def test_every_parameter_resolved_with_origin(engine_copy, sp_tok):
    eng = inspect_engine(engine_copy("old-llama2-7b-tp4"))
    res = resolve("trtllm-1.2", eng, sp_tok, {})
    assert set(res.values) == set(load_schema().for_profile("trtllm-1.2"))
    assert set(res.as_template_vars()) == set(res.values)
    assert res["triton_max_batch_size"] == 8 and res.origin("triton_max_batch_size") == "engine"
    assert res["max_beam_width"] == 1 and res.origin("max_beam_width") == "engine"
    assert res["logits_datatype"] == "TYPE_FP32" and res.origin("logits_datatype") == "engine"
    assert res["prompt_embedding_table_data_type"] == "TYPE_FP16"
    assert res["triton_backend"] == "tensorrtllm" and res["engine_dir"] == str(eng.dir)
    assert res["tokenizer_dir"] == str(asset("mistral_v1_tokenizer").resolve())
    assert res.origin("tokenizer_dir") == "tokenizer"
    assert (res["end_id"], res["pad_id"]) == (2, 2) and res.origin("end_id") == "tokenizer"
    assert (res["max_input_len"], res["max_seq_len"]) == (2048, 2560)
    assert res["kv_cache_free_gpu_mem_fraction"] == 0.9 and res.origin("kv_cache_free_gpu_mem_fraction") == "default"
    assert res["max_tokens_in_paged_kv_cache"] is None
    assert res.world_size == 4
    assert res.as_strings()["exclude_input_in_output"] == "false"


def test_profile_defaults_05(engine_copy, sp_tok):
    eng = inspect_engine(engine_copy("old-llama2-7b-tp4"))
    res = resolve("trtllm-0.5", eng, sp_tok, {"max_num_sequences": "4"})
    assert res["kv_cache_free_gpu_mem_fraction"] == 0.85 and res["enable_trt_overlap"] is True
    assert res["max_num_sequences"] == 4 and res.origin("max_num_sequences") == "user"
    assert "logits_datatype" not in res.values


def test_engine_dir_in_repo(engine_copy, sp_tok):
    eng = inspect_engine(engine_copy("v0.8-mistral-7b-dolphin"))
    res = resolve("trtllm-1.2", eng, sp_tok, {}, engine_dir_in_repo="/models/repo/tensorrt_llm/1/engine")
    assert res["engine_dir"] == "/models/repo/tensorrt_llm/1/engine"


def test_streaming_sets_decoupled(engine_copy, sp_tok):
    eng = inspect_engine(engine_copy("v0.8-mistral-7b-dolphin"))
    res = resolve("trtllm-1.2", eng, sp_tok, {}, streaming=True)
    assert res["decoupled_mode"] is True and res.origin("decoupled_mode") == "user"
    default = resolve("trtllm-1.2", eng, sp_tok, {})
    assert default["decoupled_mode"] is True and default.origin("decoupled_mode") == "default"
    off = resolve("trtllm-1.2", eng, sp_tok, {}, streaming=False)
    assert off["decoupled_mode"] is False and off.origin("decoupled_mode") == "user"
    with pytest.raises(ParameterError, match="decoupled_mode: False contradicts --streaming"):
        resolve("trtllm-1.2", eng, sp_tok, {"decoupled_mode": "false"}, streaming=True)


def test_user_values_win_and_are_checked(engine_copy, sp_tok):
    eng = inspect_engine(engine_copy("v0.8-mistral-7b-dolphin"))
    res = resolve("trtllm-1.2", eng, sp_tok, {"triton_max_batch_size": "16", "end_id": "7"})
    assert res["triton_max_batch_size"] == 16 and res.origin("triton_max_batch_size") == "user"
    assert (res["end_id"], res["pad_id"]) == (7, 7)  # pad followed the end id it was derived from
    with pytest.raises(ParameterError, match="max_beam_width: expected an integer"):
        resolve("trtllm-1.2", eng, sp_tok, {"max_beam_width": "x"})


def test_kv_cache_reuse_default_adapts_to_engine(engine_copy, sp_tok):
    no_fmha = inspect_engine(engine_copy("v0.8-mistral-7b-dolphin"))
    res = resolve("trtllm-1.2", no_fmha, sp_tok, {})
    assert res["enable_kv_cache_reuse"] is False and res.origin("enable_kv_cache_reuse") == "engine"
    assert any("use_paged_context_fmha enable" in w for w in res.warnings)
    fmha = inspect_engine(engine_copy("old-gpt-starfish-3b-genlogits"))  # paged context FMHA, beam 1
    res = resolve("trtllm-1.2", fmha, inspect_tokenizer(asset("mistral_v1_tokenizer")), {})
    assert res["enable_kv_cache_reuse"] is True and res.origin("enable_kv_cache_reuse") == "default"


def test_inflight_batching_needs_paged_kv_padding_plugin(tmp_path, sp_tok):
    cfg = json.loads((ENGINES / "old-llama2-7b-tp4" / "config.json").read_text())
    cfg["builder_config"]["tensor_parallel"] = 1
    cfg["plugin_config"].update(paged_kv_cache=False, remove_input_padding=False, gpt_attention_plugin="float16")
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    (tmp_path / "rank0.engine").write_bytes(b"")
    eng = inspect_engine(tmp_path)
    with pytest.raises(EngineError) as exc:
        resolve("trtllm-1.2", eng, sp_tok, {})
    text = str(exc.value)
    assert "batching_strategy: in-flight batching" in text and "--kv_cache_type paged" in text
    assert "--remove_input_padding enable" in text and "gpt_attention_plugin" not in text.split("needs", 1)[1]
    res = resolve("trtllm-1.2", eng, sp_tok, {"batching_strategy": "V1"})
    assert res["batching_strategy"] == "V1"


def test_kv_cache_cap_smaller_than_one_sequence(engine_copy, sp_tok):
    eng = inspect_engine(engine_copy("old-gpt-starfish-3b-beam2"))  # max_seq_len 2048, beam 2
    tok = inspect_tokenizer(asset("mistral_v1_tokenizer"))
    with pytest.raises(ParameterError, match=r"max_tokens_in_paged_kv_cache: 4000 tokens .* 4096 tokens"):
        resolve("trtllm-1.2", eng, tok, {"max_tokens_in_paged_kv_cache": "4000"})
    assert (
        resolve("trtllm-1.2", eng, tok, {"max_tokens_in_paged_kv_cache": "4096"})["max_tokens_in_paged_kv_cache"]
        == 4096
    )


def test_tokenizer_vocab_larger_than_engine(engine_copy, llama31_tok):
    eng = inspect_engine(engine_copy("v0.8-mistral-7b-dolphin"))  # vocab 32001
    with pytest.raises(TokenizerError, match="128256 tokens but the engine's vocabulary is 32001"):
        resolve("trtllm-1.2", eng, llama31_tok, {})


def test_tokenizer_vocab_smaller_is_fine(engine_copy):
    eng = inspect_engine(engine_copy("v0.8-mistral-7b-dolphin"))  # 32001 vs the 32000-token Mistral tokenizer
    res = resolve("trtllm-1.2", eng, inspect_tokenizer(asset("mistral_v1_tokenizer")), {})
    assert res["end_id"] == 2


def test_postprocessing_instances_with_streaming(engine_copy, sp_tok):
    eng = inspect_engine(engine_copy("v0.8-mistral-7b-dolphin"))
    with pytest.raises(ParameterError, match="postprocessing_instance_count: 2 with streaming"):
        resolve("trtllm-1.2", eng, sp_tok, {"postprocessing_instance_count": "2"}, streaming=True)
    assert (
        resolve("trtllm-1.2", eng, sp_tok, {"postprocessing_instance_count": "2"}, streaming=False)[
            "postprocessing_instance_count"
        ]
        == 2
    )


def test_streaming_postprocessing_instances_with_a_python_engine(tmp_path, sp_tok):
    """repo-builder's Python engines send token_offset, so several streaming postprocessing instances can
    share their streams' states (runtime/stream_state.py); TensorRT-LLM engines are refused (test above)."""
    (tmp_path / "synthetic_engine.json").write_text('{"max_batch_size": 4}')
    res = resolve(
        "trtllm-1.2", inspect_engine(tmp_path), sp_tok, {"postprocessing_instance_count": "4"}, streaming=True
    )
    assert res["postprocessing_instance_count"] == 4


def test_chunked_context_needs_paged_context_fmha(engine_copy, sp_tok):
    eng = inspect_engine(engine_copy("v0.8-mistral-7b-dolphin"))
    with pytest.raises(EngineError, match="enable_chunked_context: .*--use_paged_context_fmha enable"):
        resolve("trtllm-1.2", eng, sp_tok, {"enable_chunked_context": "true"})


def test_lookahead_needs_its_sizes(engine_copy, sp_tok):
    eng = inspect_engine(engine_copy("v0.8-mistral-7b-dolphin"))
    with pytest.raises(ParameterError, match="decoding_mode: lookahead needs lookahead_ngram_size"):
        resolve("trtllm-1.2", eng, sp_tok, {"decoding_mode": "lookahead", "lookahead_window_size": "4"})


def test_streaming_with_beam_warns_b30(engine_copy):
    eng = inspect_engine(engine_copy("old-gpt-starfish-3b-beam2"))
    res = resolve(
        "trtllm-1.2",
        eng,
        inspect_tokenizer(asset("mistral_v1_tokenizer")),
        {"accumulate_tokens": "true"},
        streaming=True,
    )
    assert any("streaming with max_beam_width 2" in w for w in res.warnings)
    assert any("accumulate_tokens: with max_beam_width 2" in w for w in res.warnings)


def test_python_backend_with_trtllm_engine_needs_decoupled_b29(engine_copy, sp_tok):
    eng = inspect_engine(engine_copy("v0.8-mistral-7b-dolphin"))
    with pytest.raises(ParameterError, match="triton_backend: python with a TensorRT-LLM engine needs decoupled"):
        resolve("trtllm-1.2", eng, sp_tok, {"triton_backend": "python"}, streaming=False)
    res = resolve("trtllm-1.2", eng, sp_tok, {"triton_backend": "python"}, streaming=True)
    assert res["triton_backend"] == "python"


def test_rank_files_checked(engine_copy, sp_tok):
    eng = inspect_engine(engine_copy("old-llama2-7b-tp4", ranks=2))
    with pytest.raises(EngineError, match="world size 4.*found 2 rank"):
        resolve("trtllm-1.2", eng, sp_tok, {})


def test_all_problems_at_once(engine_copy, sp_tok):
    eng = inspect_engine(engine_copy("old-llama2-7b-tp4", ranks=1))
    with pytest.raises(ParameterError) as exc:
        resolve("trtllm-1.2", eng, sp_tok, {"max_beam_width": "2", "tensorrt_llm_instance_count": "2"})
    keys = [line.split(":")[0] for line in problems_of(exc)]
    assert keys == ["engine_dir", "max_beam_width", "tensorrt_llm_instance_count"]
    assert isinstance(exc.value, ParameterError)  # mixed classes


# ---------------------------------------------------------------- Python engines
def test_hf_checkpoint_resolution(tiny_llama):
    eng = inspect_engine(tiny_llama)
    tok = inspect_tokenizer(tiny_llama)
    res = resolve("trtllm-1.2", eng, tok, {})
    assert res["triton_backend"] == "python" and res.origin("triton_backend") == "engine"
    assert res["triton_max_batch_size"] == 8 and res["max_seq_len"] == 512 and res["max_input_len"] == 511
    assert res.world_size == 1 and res.engine_kind == "hf"
    with pytest.raises(ParameterError, match="triton_backend: tensorrtllm cannot serve a hf engine"):
        resolve("trtllm-1.2", eng, tok, {"triton_backend": "tensorrtllm"})


def test_synthetic_engine_resolution(tmp_path, sp_tok):
    (tmp_path / "synthetic_engine.json").write_text('{"max_batch_size": 4}')
    res = resolve("trtllm-0.5", inspect_engine(tmp_path), sp_tok, {"synthetic_token_delay_ms": "2.5"})
    # trtllm-0.5: 128 as v0.5.0's templates hard-code it, whatever the engine's max_batch_size (issue 12)
    assert res["triton_backend"] == "python" and res["triton_max_batch_size"] == 128
    assert res.origin("triton_max_batch_size") == "default" and not res.warnings
    assert resolve("trtllm-1.2", inspect_engine(tmp_path), sp_tok, {})["triton_max_batch_size"] == 4
    assert res["synthetic_token_delay_ms"] == 2.5


def test_no_tokenizer_means_required_tokenizer_dir(engine_copy):
    eng = inspect_engine(engine_copy("v0.8-mistral-7b-dolphin"))
    with pytest.raises(ParameterError, match="tokenizer_dir: required but unset; pass --tokenizer-dir"):
        resolve("trtllm-1.2", eng, None, {})


def test_prechecked_values_and_rank_files_are_not_checked_again(engine_copy, sp_tok):
    """Render types the user's values and checks the rank files before the engine copy starts; resolve(...,
    prechecked=True) trusts both (each check runs once on the render path)."""
    eng = inspect_engine(engine_copy("old-llama2-7b-tp4", ranks=2))
    res = resolve("trtllm-1.2", eng, sp_tok, {"end_id": 7}, prechecked=True)
    assert res["end_id"] == 7 and res.origin("end_id") == "user"
    with pytest.raises(EngineError, match="world size 4.*found 2 rank"):
        resolve("trtllm-1.2", eng, sp_tok, {"end_id": 7})
