"""The parsers of the three ``config.json`` layouts into :class:`~.info.EngineInfo` fields.

* old (``build.py`` before TRT-LLM 0.8): top-level ``builder_config`` + ``plugin_config``;
* new (``trtllm-build`` 0.8+): ``version`` + ``pretrained_config`` + ``build_config``;
* hf: a Hugging Face checkpoint's ``config.json`` (served by the CPU reference engine).

Each parser gets the parsed JSON after :func:`.sections.check_config` accepted it and returns the keyword
arguments of :class:`~.info.EngineInfo` (without ``kind``, ``dir``, ``rank_files``, ``weight_files``).
Key facts by generation (see tests/assets/engines/SOURCE.md): old 0.5 files have no ``max_beam_width`` (= 1)
and use ``tensor_parallel``/``pipeline_parallel``; old files and new 0.8 files give ``max_output_len``
(max_seq_len = max_input_len + max_output_len); 0.13+ give ``max_seq_len`` and ``kv_cache_type``
(``"PAGED"``, lower case ``"paged"`` in 1.2); plugin values are strings, null or false.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from ..errors import EngineError
from ..profile.dtypes import dtype_bytes

#: TRT-LLM SpeculativeDecodingMode bit values (build_config.speculative_decoding_mode) -> name.
SPECULATIVE_MODES = {
    1: "none",
    2: "draft_tokens_external",
    4: "medusa",
    8: "lookahead_decoding",
    16: "explicit_draft_tokens",
    32: "eagle",
}


#: The CPU reference engine batches at most this many requests (requests).
HF_MAX_BATCH_SIZE = 8
#: repo-builder's Python engines (CPU reference, synthetic) verify at most this many draft tokens per request
#: (``max_draft_len``): they stand in for a target engine built with ``trtllm-build --speculative_decoding_mode
#: draft_tokens_external --max_draft_len 8``.
HF_MAX_DRAFT_LEN = 8


def _plugin_str(value: Any) -> str | None:
    """A plugin setting as a string (``"float16"``, ``"auto"``) or None when off (null / false)."""
    if value is None or value is False:
        return None
    return str(value)


def _lora_dtype(plugin: Any, model_dtype: Any) -> str | None:
    """The dtype LoRA weights must have: the base model's, since TensorRT-LLM refuses request weights of another
    dtype (``loraValidateRequestTensors``: "Expected lora weights to be the same data type as base model"); the
    lora_plugin's (``"float16"``) when the model's is not given; None without the plugin."""
    name = _plugin_str(plugin)
    if name is None:
        return None
    if model_dtype:
        return str(model_dtype)
    return None if name == "auto" else name


def _int(value: Any, default: int | None = None) -> int | None:
    if value is None or isinstance(value, bool):
        return default
    return int(value)


def _kv_bytes(dtype: Any, kv_quant: Any) -> int | None:
    """Bytes per KV-cache value: 1 for an FP8/INT8 KV cache (QuantAlgo FP8 / INT8), else the dtype's size."""
    if isinstance(kv_quant, str) and kv_quant.upper() in ("FP8", "INT8"):
        return 1
    return dtype_bytes(dtype)


def _head_size(hidden: int | None, heads: int | None, given: int | None) -> int | None:
    if given:
        return given
    return hidden // heads if hidden and heads and hidden % heads == 0 else None


def _quant_summary_old(quant_mode: int | None) -> str:
    """Summarise the old ``builder_config.quant_mode`` bit field (QuantMode: bit 0 = int4 weights,
    bit 1 = int8 weights, bit 2 = quantized activations; higher bits kept as the raw number)."""
    if not quant_mode:
        return "none"
    parts = []
    if quant_mode & 1:
        parts.append("int4_weights")
    if quant_mode & 2:
        parts.append("int8_weights")
    if quant_mode & 4:
        parts.append("int8_activations")
    parts.append(f"quant_mode={quant_mode}")
    return ", ".join(parts)


def _quant_summary_new(quant: dict[str, Any] | None) -> str:
    quant = quant or {}
    parts = [f"{k}={quant[k]}" for k in ("quant_algo", "kv_cache_quant_algo") if quant.get(k)]
    return ", ".join(parts) or "none"


_ENCODER_HINTS = ("bert", "roberta", "encodermodel", "whisperencoder", "clip", "vit")


def _looks_like_encoder(architecture: str) -> bool:
    low = architecture.lower()
    return any(h in low for h in _ENCODER_HINTS)


def _sections(
    directory: Path, cfg: dict[str, Any], names: tuple[str, str], *, limits_in: str
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The two top-level sections ``names`` of a layout as objects ({} when absent); the one named ``limits_in``
    must give ``max_batch_size`` and ``max_input_len``.

    Raises:
        EngineError: a section is not an object, or a limit is missing (names the section).
    """
    first, second = (cfg.get(name) or {} for name in names)
    if not isinstance(first, dict) or not isinstance(second, dict):
        raise EngineError(f"{names[0]} and {names[1]} must be objects", path=directory / "config.json")
    limits = first if limits_in == names[0] else second
    missing = [k for k in ("max_batch_size", "max_input_len") if limits.get(k) is None]
    if missing:
        raise EngineError(f"{limits_in} lacks {', '.join(missing)}", path=directory / "config.json")
    return first, second


#: ``build_config.kv_cache_type`` values (TensorRT-LLM ``KVCacheType``: CONTINUOUS, PAGED, DISABLED; written by
#: trtllm-build 0.13+, before that ``plugin_config.paged_kv_cache`` true/false = paged/continuous).
KV_CACHE_TYPES = ("paged", "continuous", "disabled")


def _kv_cache_kind(kv_type: Any, paged: bool) -> str:
    """``paged`` / ``continuous`` / ``disabled`` from ``kv_cache_type`` (a name, any case, or the enum's
    ``KVCacheType.PAGED`` text), else from ``paged``."""
    if kv_type is None:
        return "paged" if paged else "continuous"
    text = str(kv_type).lower().rsplit(".", 1)[-1]
    return text if text in KV_CACHE_TYPES else ("paged" if paged else "continuous")


def parse_old(directory: Path, cfg: dict[str, Any]) -> dict[str, Any]:
    """The pre-0.8 layout (``builder_config`` + ``plugin_config``): world size = tensor_parallel x
    pipeline_parallel, max_seq_len = max_input_len + max_output_len (else max_position_embeddings).

    Raises:
        EngineError: a section is not an object, or max_batch_size / max_input_len is missing.
    """
    b, p = _sections(directory, cfg, ("builder_config", "plugin_config"), limits_in="builder_config")
    max_input = int(b["max_input_len"])
    max_output = _int(b.get("max_output_len"))
    architecture = str(b.get("name") or "unknown")
    tp = _int(b.get("tensor_parallel"), 1) or 1
    pp = _int(b.get("pipeline_parallel"), 1) or 1
    if "context_fmha" in p:
        context_fmha = bool(p["context_fmha"])
    elif "context_fmha_type" in p:
        context_fmha = bool(p["context_fmha_type"])
    else:
        context_fmha = bool(p.get("context_fmha_enabled", False))
    gpt_plugin = _plugin_str(p.get("gpt_attention_plugin"))
    bert_plugin = _plugin_str(p.get("bert_attention_plugin"))
    is_decoder = not (_looks_like_encoder(architecture) or (gpt_plugin is None and bert_plugin is not None))
    max_pos = _int(b.get("max_position_embeddings"))
    return dict(
        layout="old",
        trtllm_version=None,
        architecture=architecture,
        dtype=b.get("precision"),
        vocab_size=_int(b.get("vocab_size")),
        tp_size=tp,
        pp_size=pp,
        world_size=tp * pp,
        max_batch_size=int(b["max_batch_size"]),
        max_beam_width=_int(b.get("max_beam_width"), 1) or 1,
        max_input_len=max_input,
        max_seq_len=max_input + max_output if max_output is not None else (max_pos or max_input),
        max_num_tokens=_int(b.get("max_num_tokens")),
        max_position_embeddings=max_pos,
        logits_dtype="float32",
        gather_context_logits=bool(b.get("gather_context_logits", False)),
        gather_generation_logits=bool(b.get("gather_generation_logits", False)),
        paged_kv_cache=bool(p.get("paged_kv_cache", False)),
        kv_cache_type="paged" if p.get("paged_kv_cache") else "continuous",
        remove_input_padding=bool(p.get("remove_input_padding", False)),
        gpt_attention_plugin=gpt_plugin,
        context_fmha=context_fmha,
        use_paged_context_fmha=bool(p.get("use_paged_context_fmha", False)),
        tokens_per_block=_int(p.get("tokens_per_block")),
        max_draft_len=_int(b.get("max_draft_len"), 0) or 0,
        speculative_decoding_mode=None,
        quantization=_quant_summary_old(_int(b.get("quant_mode"))),
        is_decoder=is_decoder,
        num_layers=_int(b.get("num_layers")),
        num_kv_heads=_int(b.get("num_kv_heads")) or _int(b.get("num_heads")),
        head_size=_head_size(_int(b.get("hidden_size")), _int(b.get("num_heads")), None),
        hidden_size=_int(b.get("hidden_size")),
        kv_cache_bytes_per_value=1 if (_int(b.get("quant_mode")) or 0) & 128 else _kv_bytes(b.get("precision"), None),
        lora_plugin=_plugin_str(p.get("lora_plugin")),
        max_lora_rank=_int(b.get("max_lora_rank")),
        lora_target_modules=tuple(b.get("lora_target_modules") or ()),
        lora_dtype=_lora_dtype(p.get("lora_plugin"), b.get("precision")),
    )


def _max_seq_len_new(build: dict[str, Any], max_input: int, max_pos: int | None) -> int:
    """max_seq_len (tokens) of a 0.8+ ``build_config``: ``max_seq_len`` (0.13+), else ``max_input`` +
    ``max_output_len`` (0.8-0.12), else ``max_pos`` (max_position_embeddings) or ``max_input``.

    Raises:
        ValueError / TypeError: a length that ``int()`` refuses.
    """
    if build.get("max_seq_len") is not None:
        return int(build["max_seq_len"])
    if build.get("max_output_len") is not None:  # TRT-LLM 0.8-0.12
        return max_input + int(build["max_output_len"])
    return max_pos or max_input  # trtllm-build leaves it to max_position_embeddings


def _speculative_mode_name(spec_mode: Any) -> str | None:
    """``build_config.speculative_decoding_mode`` as a lower-case name: an int through
    :data:`SPECULATIVE_MODES` (unknown ones ``mode_<n>``), a string lower-cased, None when absent."""
    if isinstance(spec_mode, int):
        return SPECULATIVE_MODES.get(spec_mode, f"mode_{spec_mode}")
    if spec_mode is not None:
        return str(spec_mode).lower()
    return None


def parse_new(directory: Path, cfg: dict[str, Any]) -> dict[str, Any]:
    """The 0.8+ layout (``pretrained_config`` + ``build_config``): max_seq_len from ``max_seq_len`` (0.13+),
    else max_input_len + ``max_output_len`` (0.8-0.12), else max_position_embeddings; paged KV cache from
    ``kv_cache_type`` (0.13+) or ``plugin_config.paged_kv_cache``.

    Raises:
        EngineError: a section is not an object, or max_batch_size / max_input_len is missing.
    """
    pre, build = _sections(directory, cfg, ("pretrained_config", "build_config"), limits_in="build_config")
    plugin = build.get("plugin_config") or {}
    lora = build.get("lora_config") or {}
    mapping = pre.get("mapping") or {}
    tp = _int(mapping.get("tp_size"), 1) or 1
    pp = _int(mapping.get("pp_size"), 1) or 1
    cp = _int(mapping.get("cp_size"), 1) or 1
    world = _int(mapping.get("world_size"), tp * pp * cp) or tp * pp * cp
    max_input = int(build["max_input_len"])
    max_pos = _int(pre.get("max_position_embeddings"))
    max_seq = _max_seq_len_new(build, max_input, max_pos)
    kv_type = build.get("kv_cache_type")
    paged = str(kv_type).lower() == "paged" if kv_type is not None else bool(plugin.get("paged_kv_cache", False))
    kv_kind = _kv_cache_kind(kv_type, paged)
    spec_name = _speculative_mode_name(build.get("speculative_decoding_mode"))
    architecture = str(pre.get("architecture") or "unknown")
    gpt_plugin = _plugin_str(plugin.get("gpt_attention_plugin"))
    return dict(
        layout="new",
        trtllm_version=str(cfg.get("version")) if cfg.get("version") else None,
        architecture=architecture,
        dtype=pre.get("dtype"),
        vocab_size=_int(pre.get("vocab_size")),
        tp_size=tp,
        pp_size=pp,
        world_size=world,
        max_batch_size=int(build["max_batch_size"]),
        max_beam_width=_int(build.get("max_beam_width"), 1) or 1,
        max_input_len=max_input,
        max_seq_len=max_seq,
        max_num_tokens=_int(build.get("max_num_tokens")),
        max_position_embeddings=max_pos,
        logits_dtype=str(pre.get("logits_dtype") or "float32"),
        gather_context_logits=bool(build.get("gather_context_logits", False)),
        gather_generation_logits=bool(build.get("gather_generation_logits", False)),
        paged_kv_cache=paged,
        kv_cache_type=kv_kind,
        remove_input_padding=bool(plugin.get("remove_input_padding", False)),
        gpt_attention_plugin=gpt_plugin,
        context_fmha=bool(plugin.get("context_fmha", False)),
        use_paged_context_fmha=bool(plugin.get("use_paged_context_fmha", False)),
        tokens_per_block=_int(plugin.get("tokens_per_block")),
        max_draft_len=_int(build.get("max_draft_len"), _int(pre.get("max_draft_len"), 0)) or 0,
        speculative_decoding_mode=spec_name,
        num_medusa_heads=_int(pre.get("num_medusa_heads")),
        num_eagle_layers=_int(pre.get("num_eagle_layers")),
        max_non_leaves_per_layer=_int(pre.get("max_non_leaves_per_layer")),
        quantization=_quant_summary_new(pre.get("quantization")),
        is_decoder=not _looks_like_encoder(architecture),
        num_layers=_int(pre.get("num_hidden_layers")),
        num_kv_heads=_int(pre.get("num_key_value_heads")) or _int(pre.get("num_attention_heads")),
        head_size=_head_size(
            _int(pre.get("hidden_size")), _int(pre.get("num_attention_heads")), _int(pre.get("head_size"))
        ),
        hidden_size=_int(pre.get("hidden_size")),
        kv_cache_bytes_per_value=_kv_bytes(
            pre.get("dtype"), (pre.get("quantization") or {}).get("kv_cache_quant_algo")
        ),
        lora_plugin=_plugin_str(plugin.get("lora_plugin")),
        max_lora_rank=_int(lora.get("max_lora_rank")),
        lora_target_modules=tuple(lora.get("lora_target_modules") or ()),
        lora_dtype=_lora_dtype(plugin.get("lora_plugin"), pre.get("dtype")),
        max_loras=_int(lora.get("max_loras")),
    )


def parse_hf(directory: Path, cfg: dict[str, Any]) -> dict[str, Any]:
    """An HF checkpoint for the CPU reference engine: world size 1, beam 1, batch 8, logits float32,
    max_seq_len = max_position_embeddings (``n_positions`` / ``seq_length`` for older configs) and
    max_input_len = max_seq_len - 1 (at least one token must be generated)."""
    archs = cfg.get("architectures") or []
    architecture = str(archs[0]) if archs else "unknown"
    max_pos = _int(cfg.get("max_position_embeddings")) or _int(cfg.get("n_positions")) or _int(cfg.get("seq_length"))
    if not max_pos:
        raise EngineError(
            "HF config.json gives no max_position_embeddings (nor n_positions / seq_length)",
            path=directory / "config.json",
        )
    is_decoder = bool(re.search(r"(CausalLM|LMHeadModel)$", architecture)) and not cfg.get("is_encoder_decoder")
    dtype = cfg.get("torch_dtype") or cfg.get("dtype")
    return dict(
        layout="hf",
        architecture=architecture,
        dtype=str(dtype) if dtype else None,
        vocab_size=_int(cfg.get("vocab_size")),
        max_batch_size=HF_MAX_BATCH_SIZE,
        max_beam_width=1,
        max_draft_len=HF_MAX_DRAFT_LEN,
        max_input_len=max_pos - 1,
        max_seq_len=max_pos,
        max_position_embeddings=max_pos,
        logits_dtype="float32",
        is_decoder=is_decoder,
    )
