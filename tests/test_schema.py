"""The parameter schema (model_templates/parameters.yaml) and user-value validation."""

from __future__ import annotations

import re

import pytest

from repo_builder.errors import ParameterError
from repo_builder.profile.schema import load_schema, validate_user_values

# Every placeholder of the TRT-LLM 1.2.0rc8 tensorrt_llm template (triton_backend/all_models/
# inflight_batcher_llm/tensorrt_llm/config.pbtxt @ 0c8de69 of github.com/NVIDIA/TensorRT-LLM).
TRTLLM_12_PLACEHOLDERS = """
triton_backend triton_max_batch_size decoupled_mode max_queue_delay_microseconds max_queue_size
encoder_input_features_data_type logits_datatype prompt_embedding_table_data_type max_beam_width
batching_strategy engine_dir encoder_engine_dir max_tokens_in_paged_kv_cache max_attention_window_size
sink_token_length batch_scheduler_policy kv_cache_free_gpu_mem_fraction cross_kv_cache_fraction
kv_cache_host_memory_bytes kv_cache_onboard_blocks enable_trt_overlap exclude_input_in_output
cancellation_check_period_ms stats_check_period_ms iter_stats_max_iterations request_stats_max_iterations
enable_kv_cache_reuse normalize_log_probs enable_chunked_context gpu_device_ids participant_ids num_nodes
lora_cache_optimal_adapter_size lora_cache_max_adapter_size lora_cache_gpu_memory_fraction
lora_cache_host_memory_bytes lora_prefetch_dir decoding_mode lookahead_window_size lookahead_ngram_size
lookahead_verification_set_size medusa_choices eagle_choices gpu_weights_percent enable_context_fmha_fp32_acc
multi_block_mode cuda_graph_mode cuda_graph_cache_size speculative_decoding_fast_logits tokenizer_dir
guided_decoding_backend xgrammar_tokenizer_info_path
""".split()

# The seven placeholders of the v0.5.0 tensorrt_llm template.
TRTLLM_05_PLACEHOLDERS = [
    "decoupled_mode",
    "engine_dir",
    "max_tokens_in_paged_kv_cache",
    "batch_scheduler_policy",
    "kv_cache_free_gpu_mem_fraction",
    "max_num_sequences",
    "enable_trt_overlap",
]

# Parameters repo-builder's Python models read (docs/design.md).
PYTHON_MODEL_KEYS = {
    "preprocessing": [
        "tokenizer_dir",
        "add_special_tokens",
        "apply_chat_template",
        "trust_remote_code",
        "end_id",
        "pad_id",
        "stop_token_ids",
        "max_input_len",
        "max_seq_len",
    ],
    "postprocessing": ["tokenizer_dir", "skip_special_tokens", "trust_remote_code", "detokenizer_max_streams"],
    "tensorrt_llm_bls": ["tensorrt_llm_model_name", "accumulate_tokens", "max_beam_width"],
}


def problems(exc: pytest.ExceptionInfo) -> list[str]:
    return exc.value.problems


def test_every_trtllm_12_placeholder_is_a_tensorrt_llm_parameter():
    params = load_schema().for_profile("trtllm-1.2")
    missing = [n for n in TRTLLM_12_PLACEHOLDERS if n not in params or "tensorrt_llm" not in params[n].models]
    assert missing == []


def test_trtllm_05_has_its_placeholders_and_not_the_newer_ones():
    params = load_schema().for_profile("trtllm-0.5")
    assert [n for n in TRTLLM_05_PLACEHOLDERS if n not in params] == []
    assert "tokenizer_dir" in params and "triton_max_batch_size" in params
    for newer in ("logits_datatype", "enable_kv_cache_reuse", "prompt_embedding_table_data_type", "decoding_mode"):
        assert newer not in params


def test_python_model_keys_are_rendered_into_their_models():
    schema = load_schema()
    for model, keys in PYTHON_MODEL_KEYS.items():
        names = {p.key for p in schema.model_parameters("trtllm-1.2", model, "trtllm")}
        assert set(keys) <= names, (model, set(keys) - names)
    ref = {p.name for p in schema.model_parameters("trtllm-1.2", "tensorrt_llm", "hf")}
    assert {"engine_dir", "max_beam_width", "exclude_input_in_output", "max_input_len", "max_seq_len"} <= ref
    assert "kv_cache_free_gpu_mem_fraction" not in ref  # C++ backend only
    synth = {p.name for p in schema.model_parameters("trtllm-1.2", "tensorrt_llm", "synthetic")}
    assert "synthetic_token_delay_ms" in synth and "synthetic_token_delay_ms" not in ref
    cpp = {p.name for p in schema.model_parameters("trtllm-1.2", "tensorrt_llm", "trtllm")}
    assert "max_input_len" not in cpp  # build-time for the C++ backend (B08)


def test_defaults_differ_per_profile():
    params = load_schema().parameters
    assert params["kv_cache_free_gpu_mem_fraction"].default_for("trtllm-1.2") == 0.9
    assert params["kv_cache_free_gpu_mem_fraction"].default_for("trtllm-0.5") == 0.85
    assert params["enable_trt_overlap"].default_for("trtllm-0.5") is True
    assert params["enable_trt_overlap"].default_for("trtllm-1.2") is False
    assert params["exclude_input_in_output"].default_for("trtllm-1.2") is False  # NVIDIA's default (issue 12)
    assert "trtllm-0.5" not in params["exclude_input_in_output"].profiles  # v0.5.0 always returns the prompt
    assert params["skip_special_tokens"].default_for("trtllm-1.2") is True
    assert params["add_special_tokens"].default_for("trtllm-1.2") is True
    assert params["detokenizer_max_streams"].default_for("trtllm-1.2") == 1024
    assert params["max_tokens_in_paged_kv_cache"].default_for("trtllm-1.2") is None


def test_config_keys_follow_upstream():
    params = load_schema().parameters
    assert params["batching_strategy"].key == "gpt_model_type"
    assert params["engine_dir"].key == "gpt_model_path"
    assert params["encoder_engine_dir"].key == "encoder_model_path"
    assert params["kv_cache_free_gpu_mem_fraction"].key == "kv_cache_free_gpu_mem_fraction"


def test_set_strings_are_coerced():
    out = validate_user_values(
        "trtllm-1.2",
        {
            "kv_cache_free_gpu_mem_fraction": "0.5",
            "enable_kv_cache_reuse": "False",
            "max_beam_width": " 2 ",
            "stop_token_ids": "2,32000",
            "logits_datatype": "float16",
            "batch_scheduler_policy": "MAX_UTILIZATION",
        },
        source="--set",
    )
    assert out == {
        "kv_cache_free_gpu_mem_fraction": 0.5,
        "enable_kv_cache_reuse": False,
        "max_beam_width": 2,
        "stop_token_ids": [2, 32000],
        "logits_datatype": "TYPE_FP16",
        "batch_scheduler_policy": "max_utilization",
    }


def test_yaml_values_are_typed():
    out = validate_user_values(
        "trtllm-1.2",
        {"enable_chunked_context": True, "max_queue_size": 16, "gpu_weights_percent": 1},
        source="values.yaml",
    )
    assert out == {"enable_chunked_context": True, "max_queue_size": 16, "gpu_weights_percent": 1.0}


def test_b03_list_values_are_structured():
    out = validate_user_values(
        "trtllm-1.2",
        {
            "gpu_device_ids": "0,1;2,3",
            "participant_ids": "1,2",
            "medusa_choices": "{0, 0, 0}, {0, 1}",
            "max_attention_window_size": "4096,2048",
        },
        source="--set",
    )
    assert out["gpu_device_ids"] == [[0, 1], [2, 3]]
    assert out["participant_ids"] == [[1, 2]]
    assert out["medusa_choices"] == [[0, 0, 0], [0, 1]]
    assert out["max_attention_window_size"] == [4096, 2048]
    params = load_schema().parameters
    assert params["gpu_device_ids"].format_value(out["gpu_device_ids"]) == "0,1;2,3"
    assert params["medusa_choices"].format_value(out["medusa_choices"]) == "{0, 0, 0}, {0, 1}"
    # YAML lists give the same values.
    same = validate_user_values(
        "trtllm-1.2", {"gpu_device_ids": [[0, 1], [2, 3]], "medusa_choices": [[0, 0, 0], [0, 1]]}, source="v.yaml"
    )
    assert same["gpu_device_ids"] == out["gpu_device_ids"] and same["medusa_choices"] == out["medusa_choices"]
    with pytest.raises(ParameterError, match="medusa_choices"):
        validate_user_values("trtllm-1.2", {"medusa_choices": "0,0,0"}, source="--set")


def test_empty_string_means_unset():
    out = validate_user_values("trtllm-1.2", {"max_tokens_in_paged_kv_cache": "", "decoding_mode": ""}, source="--set")
    assert out == {"max_tokens_in_paged_kv_cache": None, "decoding_mode": None}


def test_structural_and_required_cannot_be_unset():
    with pytest.raises(ParameterError) as exc:
        validate_user_values("trtllm-1.2", {"triton_max_batch_size": "", "batching_strategy": ""}, source="--set")
    lines = problems(exc)
    assert any(line.startswith("triton_max_batch_size:") and "cannot be unset" in line for line in lines)
    assert any(line.startswith("batching_strategy:") for line in lines)


def test_unknown_key_did_you_mean():
    with pytest.raises(ParameterError) as exc:
        validate_user_values("trtllm-1.2", {"kv_cache_free_gpu_mem_fractoin": "0.5"}, source="--set")
    assert "did you mean 'kv_cache_free_gpu_mem_fraction'" in str(exc.value)
    assert "--set" in str(exc.value)


def test_wrong_type_names_key_and_type():
    with pytest.raises(ParameterError) as exc:
        validate_user_values(
            "trtllm-1.2", {"max_beam_width": "two", "enable_kv_cache_reuse": "maybe"}, source="cfg.yaml"
        )
    text = str(exc.value)
    assert "cfg.yaml" in text
    assert re.search(r"max_beam_width: expected an integer, got 'two'", text)
    assert re.search(r"enable_kv_cache_reuse: expected a boolean", text)


def test_out_of_range():
    with pytest.raises(ParameterError, match=r"kv_cache_free_gpu_mem_fraction: 1\.5 is out of range.*<= 1\.0"):
        validate_user_values("trtllm-1.2", {"kv_cache_free_gpu_mem_fraction": "1.5"}, source="--set")
    with pytest.raises(ParameterError, match=r"max_beam_width: 0 is out of range.*>= 1"):
        validate_user_values("trtllm-1.2", {"max_beam_width": 0}, source="--set")


def test_enum_typo_lists_allowed_and_closest():
    with pytest.raises(ParameterError) as exc:
        validate_user_values("trtllm-1.2", {"batching_strategy": "inflight_fused"}, source="--set")
    text = str(exc.value)
    assert "inflight_fused_batching, inflight_batching, V1" in text
    assert "did you mean 'inflight_fused_batching'" in text


def test_key_from_other_profile_names_the_profile():
    with pytest.raises(ParameterError, match="max_num_sequences: .*profile trtllm-0.5 only"):
        validate_user_values("trtllm-1.2", {"max_num_sequences": "4"}, source="--set")
    with pytest.raises(ParameterError, match="enable_kv_cache_reuse: .*profile trtllm-1.2 only"):
        validate_user_values("trtllm-0.5", {"enable_kv_cache_reuse": "true"}, source="--set")


@pytest.mark.parametrize(
    "key,flag",
    [
        ("max_input_len", "--max_input_len"),
        ("max_num_tokens", "--max_num_tokens"),
        ("max_batch_size", "--max_batch_size"),
        ("max_seq_len", "--max_seq_len"),
        ("max_output_len", "--max_seq_len"),
        ("use_paged_context_fmha", "--use_paged_context_fmha enable"),
    ],
)
def test_build_time_key_points_to_trtllm_build(key, flag):
    with pytest.raises(ParameterError) as exc:
        validate_user_values("trtllm-1.2", {key: "8192000"}, source="--set")
    assert f"{key}: a build-time setting" in str(exc.value)
    assert f"trtllm-build {flag}" in str(exc.value)


def test_b04_obsolete_keys_and_renamed_enum_all_reported():
    """B04: the NVIDIA-blog recipe, refused as a whole with one line per problem."""
    values = {
        "tokenizer_type": "llama",
        "max_num_sequences": "4",
        "batch_scheduler_policy": "guaranteed_completion",
        "max_tokens_in_paged_kv_cache": "",
    }
    with pytest.raises(ParameterError) as exc:
        validate_user_values("trtllm-1.2", values, source="--set")
    lines = problems(exc)
    assert len(lines) == 3
    assert "removed upstream in v0.9 (tokenizer_type)" in lines[0]
    assert lines[1].startswith("max_num_sequences:") and "trtllm-0.5" in lines[1]
    assert lines[2].startswith("batch_scheduler_policy:")
    assert "guaranteed_no_evict" in lines[2] and "max_utilization" in lines[2] and "renamed" in lines[2]
    # In the 0.5 profile max_num_sequences exists; the legacy enum value is still refused.
    with pytest.raises(ParameterError) as exc05:
        validate_user_values("trtllm-0.5", values, source="--set")
    assert [line.split(":")[0] for line in problems(exc05)] == ["tokenizer_type", "batch_scheduler_policy"]


def test_config_key_and_renamed_names_point_to_the_parameter():
    with pytest.raises(ParameterError) as exc:
        validate_user_values("trtllm-1.2", {"gpt_model_type": "V1", "max_kv_cache_length": "4096"}, source="--set")
    text = str(exc.value)
    assert "batching_strategy" in text and "max_attention_window_size" in text


def test_not_user_settable():
    with pytest.raises(ParameterError, match="engine_dir: set by repo-builder.*--engine-dir"):
        validate_user_values("trtllm-1.2", {"engine_dir": "/x"}, source="--set")


def test_table_rows():
    rows = {r["name"]: r for r in load_schema().table("trtllm-0.5")}
    assert rows["kv_cache_free_gpu_mem_fraction"]["default"] == "0.85"
    assert rows["max_num_sequences"]["other_profiles"] == []
    assert rows["max_input_len"]["build_flag"] == "--max_input_len"
    assert rows["triton_max_batch_size"]["source"] == "engine: max_batch_size"
    assert all(r["description"] for r in rows.values())


def test_unknown_profile():
    with pytest.raises(ParameterError, match="unknown profile"):
        validate_user_values("trtllm-9", {}, source="--set")


# ---------------------------------------------------------------- structural parameters name their config.pbtxt field
def test_every_structural_parameter_names_a_field_of_triton_model_config() -> None:
    """``config_field`` is a path of fields of Triton's ModelConfig message (validate and adopt read the value
    back from it and name it in their findings); a misspelt path fails here."""
    from repo_builder.repository.pbtxt import model_config_pb2

    structural = [p for p in load_schema().parameters.values() if p.kind == "structural"]
    assert structural
    for p in structural:
        assert p.config_field, p.name
        message = model_config_pb2().ModelConfig.DESCRIPTOR
        for part in p.config_field.split("."):
            assert part in message.fields_by_name, f"{p.name}: {p.config_field}: no field {part} in {message.name}"
            field = message.fields_by_name[part]
            message = field.message_type if field.message_type is not None else message


def test_config_field_goes_with_kind_structural_only() -> None:
    from repo_builder.profile.schema import Parameter

    base = {"name": "x", "profiles": ("trtllm-1.2",), "description": "d", "type": "int", "models": ("tensorrt_llm",)}
    with pytest.raises(ValueError, match="config_field"):
        Parameter(kind="structural", **base)
    with pytest.raises(ValueError, match="config_field"):
        Parameter(kind="runtime", config_field="max_batch_size", **base)
    assert Parameter(kind="structural", config_field="max_batch_size", **base).config_field == "max_batch_size"
