"""The typed sections of an engine's ``config.json``, and the check that turns a bad value into an EngineError.

The fields repo-builder reads, typed; every other key is allowed and ignored (extra="allow"). Field names
follow TensorRT-LLM's writers: tensorrt_llm/builder.py (BuildConfig, PluginConfig) and
tensorrt_llm/models/modeling_utils.py (PretrainedConfig, Mapping, QuantConfig) for the 0.8+ layout;
examples/*/build.py of 0.5-0.7 for the old layout; transformers' PretrainedConfig for HF checkpoints.
The parsers of :mod:`.layouts` read the values once :func:`check_config` passed them.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, PlainValidator, ValidationError

from ..errors import EngineError, field_problems


def show_value(value: Any) -> str:
    """A JSON value as the user wrote it: ``"8"``, ``null``, ``true``, ``[1, 2]`` (long values cut)."""
    try:
        text = json.dumps(value, ensure_ascii=False, allow_nan=True)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _int_field(minimum: int, *, required: bool = False):
    def check(value: Any) -> int | None:
        if value is None:
            if required:
                raise ValueError("expected an integer, got null")
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            if isinstance(value, float) and math.isfinite(value) and value.is_integer():
                value = int(value)
            else:
                raise ValueError(f"expected an integer, got {show_value(value)}")
        if value < minimum:
            raise ValueError(f"expected an integer >= {minimum}, got {value}")
        if value > 2**62:
            raise ValueError(f"{value} is implausibly large")
        return value

    return PlainValidator(check)


def _typed(kind: type, what: str):
    def check(value: Any) -> Any:
        if value is None or (isinstance(value, kind) and not (kind is int and isinstance(value, bool))):
            return value
        raise ValueError(f"expected {what}, got {show_value(value)}")

    return PlainValidator(check)


def _plugin(value: Any) -> Any:
    if value is None or isinstance(value, (bool, str)):
        return value
    raise ValueError(f'expected a plugin setting (a string such as "auto", false or null), got {show_value(value)}')


def _str_list(value: Any) -> Any:
    if value is None or (isinstance(value, list) and all(isinstance(v, str) for v in value)):
        return value
    raise ValueError(f"expected a list of strings, got {show_value(value)}")


def _spec_mode(value: Any) -> Any:
    if value is None or (isinstance(value, (int, str)) and not isinstance(value, bool)):
        return value
    raise ValueError(f"expected a mode number or name, got {show_value(value)}")


Pos = Annotated[int | None, _int_field(1)]
PosRequired = Annotated[int, _int_field(1, required=True)]
NonNeg = Annotated[int | None, _int_field(0)]
Str = Annotated[str | None, _typed(str, "a string")]
Bool = Annotated[bool | None, _typed(bool, "true or false")]
Plugin = Annotated[Any, PlainValidator(_plugin)]
StrList = Annotated[Any, PlainValidator(_str_list)]


class _Section(BaseModel):
    model_config = ConfigDict(extra="allow")


class OldBuilderConfig(_Section):
    """``builder_config`` of the pre-0.8 layout."""

    max_batch_size: PosRequired
    max_input_len: PosRequired
    max_output_len: Pos = None
    max_beam_width: Pos = None
    max_num_tokens: Pos = None
    max_position_embeddings: Pos = None
    max_draft_len: NonNeg = None
    name: Str = None
    precision: Str = None
    vocab_size: Pos = None
    tensor_parallel: Pos = None
    pipeline_parallel: Pos = None
    quant_mode: NonNeg = None
    gather_context_logits: Bool = None
    gather_generation_logits: Bool = None
    num_layers: Pos = None
    num_heads: Pos = None
    num_kv_heads: Pos = None
    hidden_size: Pos = None
    lora_target_modules: StrList = None
    max_lora_rank: NonNeg = None


class PluginConfig(_Section):
    """``plugin_config`` (top level in the old layout, inside ``build_config`` in the new one)."""

    gpt_attention_plugin: Plugin = None
    bert_attention_plugin: Plugin = None
    lora_plugin: Plugin = None
    context_fmha: Bool = None
    context_fmha_type: NonNeg = None
    context_fmha_enabled: Bool = None
    paged_kv_cache: Bool = None
    remove_input_padding: Bool = None
    use_paged_context_fmha: Bool = None
    tokens_per_block: Pos = None


class OldLayout(_Section):
    builder_config: OldBuilderConfig
    plugin_config: PluginConfig | None = None


class MappingConfig(_Section):
    world_size: Pos = None
    tp_size: Pos = None
    pp_size: Pos = None
    cp_size: Pos = None


class QuantConfig(_Section):
    quant_algo: Str = None
    kv_cache_quant_algo: Str = None


class PretrainedSection(_Section):
    """``pretrained_config`` of the 0.8+ layout."""

    architecture: Str = None
    dtype: Str = None
    logits_dtype: Str = None
    vocab_size: Pos = None
    max_position_embeddings: Pos = None
    max_draft_len: NonNeg = None
    num_medusa_heads: NonNeg = None
    num_eagle_layers: NonNeg = None
    max_non_leaves_per_layer: NonNeg = None
    hidden_size: Pos = None
    num_hidden_layers: Pos = None
    num_attention_heads: Pos = None
    num_key_value_heads: Pos = None
    head_size: Pos = None
    mapping: MappingConfig | None = None
    quantization: QuantConfig | None = None


class LoraSection(_Section):
    """``build_config.lora_config``."""

    lora_dir: StrList = None
    lora_target_modules: StrList = None
    max_lora_rank: NonNeg = None
    max_loras: Pos = None
    max_cpu_loras: Pos = None


class BuildSection(_Section):
    """``build_config`` of the 0.8+ layout."""

    max_batch_size: PosRequired
    max_input_len: PosRequired
    max_seq_len: Pos = None
    max_output_len: Pos = None
    max_beam_width: Pos = None
    max_num_tokens: Pos = None
    max_draft_len: NonNeg = None
    max_prompt_embedding_table_size: NonNeg = None
    kv_cache_type: Str = None
    speculative_decoding_mode: Annotated[Any, PlainValidator(_spec_mode)] = None
    gather_context_logits: Bool = None
    gather_generation_logits: Bool = None
    plugin_config: PluginConfig | None = None
    lora_config: LoraSection | None = None


class NewLayout(_Section):
    version: Annotated[Any, _typed(str, "a version string")] = None
    pretrained_config: PretrainedSection
    build_config: BuildSection


class HFConfig(_Section):
    """A Hugging Face ``config.json`` (the fields the CPU reference engine needs)."""

    architectures: StrList = None
    max_position_embeddings: Pos = None
    n_positions: Pos = None
    seq_length: Pos = None
    vocab_size: Pos = None
    torch_dtype: Str = None
    is_encoder_decoder: Bool = None


_PYDANTIC_TYPE_TEXT = {
    "model_type": "expected an object",
    "dict_type": "expected an object",
    "model_attributes_type": "expected an object",
    "missing": "missing (required)",
    "list_type": "expected a list",
}


def check_config(model: type[BaseModel], data: Any, path: Path, *, what: str = "") -> None:
    """Validate ``data`` (parsed JSON of ``path``) against ``model``.

    Raises:
        EngineError: naming ``path`` and the key path of each problem, e.g.
            ``engine/config.json: build_config.max_batch_size: expected an integer, got "8"``.
    """
    try:
        model.model_validate(data)
    except ValidationError as exc:
        lines = []
        for problem in field_problems(exc):
            msg = problem.message
            if problem.kind in _PYDANTIC_TYPE_TEXT:
                msg = _PYDANTIC_TYPE_TEXT[problem.kind]
                if not problem.missing:
                    msg += f", got {show_value(problem.input)}"
            lines.append((problem.key, msg))
        hint = what or "engine_dir must hold the config.json written by trtllm-build"
        if len(lines) == 1:
            raise EngineError(lines[0][1], key=lines[0][0], path=path, hint=hint) from None
        raise EngineError(
            f"{len(lines)} problems:\n" + "\n".join(f"  {k}: {m}" for k, m in lines), path=path, hint=hint
        ) from None
