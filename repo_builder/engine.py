"""Engine inspection: what an ``--engine-dir`` holds and the limits it was built with.

Three kinds of engine directory are understood (``EngineInfo.kind``):

* ``trtllm``: a TensorRT-LLM engine. Its ``config.json`` has either the old layout written by ``build.py``
  before TRT-LLM 0.8 (top-level ``builder_config`` + ``plugin_config``) or the new layout of
  ``trtllm-build`` 0.8+ (``version`` + ``pretrained_config`` + ``build_config``); the weights are
  ``rank<N>.engine`` files, one per rank (tp x pp).
* ``hf``: a Hugging Face checkpoint (``config.json`` with ``architectures`` + ``*.safetensors``/``*.bin``),
  served by repo-builder's CPU reference engine.
* ``synthetic``: a directory holding ``synthetic_engine.json`` (``vocab_size``, ``max_batch_size``,
  ``max_input_len``, ``max_seq_len``; defaults 32000 / 64 / 1024 / 2048), served by the synthetic engine.

Key facts by generation (see tests/assets/engines/SOURCE.md): old 0.5 files have no
``max_beam_width`` (= 1) and use ``tensor_parallel``/``pipeline_parallel``; old files and new 0.8 files give
``max_output_len`` (max_seq_len = max_input_len + max_output_len); 0.13+ give ``max_seq_len`` and
``kv_cache_type`` (``"PAGED"``, lower case ``"paged"`` in 1.2); plugin values are strings, null or false.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, PlainValidator, ValidationError

from .errors import EngineError

EngineKind = Literal["trtllm", "hf", "synthetic"]

SYNTHETIC_FILE = "synthetic_engine.json"
WEIGHT_PATTERNS = ("*.safetensors", "*.bin", "*.pt", "*.pth")
ENGINE_PATTERNS = ("*.engine",)

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


class EngineInfo(BaseModel):
    """What an engine directory holds (all lengths in tokens, batch sizes in requests).

    ``max_seq_len`` is prompt + output; for old layouts and TRT-LLM 0.8 it is ``max_input_len +
    max_output_len``. ``logits_dtype`` is a torch-style name (``float32``, ``float16``, ``bfloat16``).
    Plugin facts (``paged_kv_cache`` ...) are None for ``hf`` and ``synthetic`` engines, which do not
    have them. ``rank_files`` are the sorted ``rank*.engine`` names found (empty for other kinds).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: EngineKind
    dir: Path
    layout: Literal["old", "new", "hf", "synthetic"]
    trtllm_version: str | None = None
    architecture: str
    dtype: str | None = None
    vocab_size: int | None = None
    tp_size: int = 1
    pp_size: int = 1
    world_size: int = 1
    max_batch_size: int
    max_beam_width: int = 1
    max_input_len: int
    max_seq_len: int
    max_num_tokens: int | None = None
    max_position_embeddings: int | None = None
    logits_dtype: str = "float32"
    gather_context_logits: bool = False
    gather_generation_logits: bool = False
    paged_kv_cache: bool | None = None
    remove_input_padding: bool | None = None
    gpt_attention_plugin: str | None = None
    context_fmha: bool | None = None
    use_paged_context_fmha: bool | None = None
    tokens_per_block: int | None = None
    max_draft_len: int = 0
    speculative_decoding_mode: str | None = None
    quantization: str = "none"
    rank_files: tuple[str, ...] = ()
    weight_files: tuple[str, ...] = ()
    is_decoder: bool = True
    num_layers: int | None = None
    num_kv_heads: int | None = None
    head_size: int | None = None
    hidden_size: int | None = None
    kv_cache_bytes_per_value: int | None = None
    lora_plugin: str | None = None
    max_lora_rank: int | None = None
    lora_target_modules: tuple[str, ...] = ()

    def kv_bytes_per_token(self) -> int | None:
        """KV-cache bytes one token takes on one GPU: 2 (K and V) x layers / pp x KV heads / tp x head size x
        bytes per value (1 with an FP8/INT8 KV cache, else the model dtype's). None when a fact is missing."""
        num_layers, num_kv_heads = self.num_layers, self.num_kv_heads
        head_size, bytes_per_value = self.head_size, self.kv_cache_bytes_per_value
        if num_layers is None or num_kv_heads is None or head_size is None or bytes_per_value is None:
            return None
        layers = -(-num_layers // max(self.pp_size, 1))
        heads = max(1, -(-num_kv_heads // max(self.tp_size, 1)))
        return 2 * layers * heads * head_size * bytes_per_value

    @property
    def config_file(self) -> Path:
        """The file the facts were read from (``config.json`` or ``synthetic_engine.json``)."""
        return self.dir / (SYNTHETIC_FILE if self.kind == "synthetic" else "config.json")


# ---------------------------------------------------------------------- typed config.json
# The fields repo-builder reads, typed; every other key is allowed and ignored (extra="allow"). Field names
# follow TensorRT-LLM's writers: tensorrt_llm/builder.py (BuildConfig, PluginConfig) and
# tensorrt_llm/models/modeling_utils.py (PretrainedConfig, Mapping, QuantConfig) for the 0.8+ layout;
# examples/*/build.py of 0.5-0.7 for the old layout; transformers' PretrainedConfig for HF checkpoints.


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
        for err in exc.errors():
            key = ".".join(str(x) for x in err.get("loc", ())) or "(top level)"
            msg = str(err.get("msg", "invalid")).removeprefix("Value error, ")
            if err.get("type") in _PYDANTIC_TYPE_TEXT:
                msg = _PYDANTIC_TYPE_TEXT[err["type"]]
                if err["type"] != "missing":
                    msg += f", got {show_value(err.get('input'))}"
            lines.append((key, msg))
        hint = what or "engine_dir must hold the config.json written by trtllm-build"
        if len(lines) == 1:
            raise EngineError(lines[0][1], key=lines[0][0], path=path, hint=hint) from None
        raise EngineError(
            f"{len(lines)} problems:\n" + "\n".join(f"  {k}: {m}" for k, m in lines), path=path, hint=hint
        ) from None


# ---------------------------------------------------------------------- helpers
def _read_json(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise EngineError(f"cannot read: {exc.strerror or exc}", path=path) from exc
    except UnicodeDecodeError as exc:
        raise EngineError(
            f"not UTF-8 text (byte {exc.start}: {exc.reason}); JSON files are UTF-8",
            path=path,
            hint="engine_dir must hold the config.json written by trtllm-build",
        ) from None
    try:
        return json.loads(text)
    except RecursionError:
        raise EngineError("invalid JSON: nested too deeply", path=path) from None
    except json.JSONDecodeError as exc:
        raise EngineError(
            f"invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}",
            path=path,
            hint="engine_dir must hold the config.json written by trtllm-build",
        ) from exc


def _plugin_str(value: Any) -> str | None:
    """A plugin setting as a string (``"float16"``, ``"auto"``) or None when off (null / false)."""
    if value is None or value is False:
        return None
    return str(value)


def _int(value: Any, default: int | None = None) -> int | None:
    if value is None or isinstance(value, bool):
        return default
    return int(value)


def _rank_index(name: str) -> int:
    match = re.fullmatch(r"rank(\d+)\.engine", name)
    return int(match.group(1)) if match else 1 << 30


_DTYPE_BYTES = {
    "float32": 4,
    "float16": 2,
    "bfloat16": 2,
    "fp32": 4,
    "fp16": 2,
    "bf16": 2,
    "float8": 1,
    "fp8": 1,
    "int8": 1,
}


def _kv_bytes(dtype: Any, kv_quant: Any) -> int | None:
    """Bytes per KV-cache value: 1 for an FP8/INT8 KV cache (QuantAlgo FP8 / INT8), else the dtype's size."""
    if isinstance(kv_quant, str) and kv_quant.upper() in ("FP8", "INT8"):
        return 1
    return _DTYPE_BYTES.get(str(dtype).lower()) if dtype else None


def _head_size(hidden: int | None, heads: int | None, given: int | None) -> int | None:
    if given:
        return given
    return hidden // heads if hidden and heads and hidden % heads == 0 else None


def _list_files(directory: Path, patterns: tuple[str, ...]) -> tuple[str, ...]:
    names = {p.name for pattern in patterns for p in directory.glob(pattern) if p.is_file()}
    return tuple(sorted(names))


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


# ---------------------------------------------------------------------- parsers
def _parse_old(directory: Path, cfg: dict[str, Any]) -> dict[str, Any]:
    b = cfg.get("builder_config") or {}
    p = cfg.get("plugin_config") or {}
    if not isinstance(b, dict) or not isinstance(p, dict):
        raise EngineError("builder_config and plugin_config must be objects", path=directory / "config.json")
    missing = [k for k in ("max_batch_size", "max_input_len") if b.get(k) is None]
    if missing:
        raise EngineError(f"builder_config lacks {', '.join(missing)}", path=directory / "config.json")
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
    )


def _parse_new(directory: Path, cfg: dict[str, Any]) -> dict[str, Any]:
    pre = cfg.get("pretrained_config") or {}
    build = cfg.get("build_config") or {}
    if not isinstance(pre, dict) or not isinstance(build, dict):
        raise EngineError("pretrained_config and build_config must be objects", path=directory / "config.json")
    plugin = build.get("plugin_config") or {}
    lora = build.get("lora_config") or {}
    missing = [k for k in ("max_batch_size", "max_input_len") if build.get(k) is None]
    if missing:
        raise EngineError(f"build_config lacks {', '.join(missing)}", path=directory / "config.json")
    mapping = pre.get("mapping") or {}
    tp = _int(mapping.get("tp_size"), 1) or 1
    pp = _int(mapping.get("pp_size"), 1) or 1
    cp = _int(mapping.get("cp_size"), 1) or 1
    world = _int(mapping.get("world_size"), tp * pp * cp) or tp * pp * cp
    max_input = int(build["max_input_len"])
    max_pos = _int(pre.get("max_position_embeddings"))
    if build.get("max_seq_len") is not None:
        max_seq = int(build["max_seq_len"])
    elif build.get("max_output_len") is not None:  # TRT-LLM 0.8-0.12
        max_seq = max_input + int(build["max_output_len"])
    else:  # trtllm-build leaves it to max_position_embeddings
        max_seq = max_pos or max_input
    kv_type = build.get("kv_cache_type")
    paged = str(kv_type).lower() == "paged" if kv_type is not None else bool(plugin.get("paged_kv_cache", False))
    spec_mode = build.get("speculative_decoding_mode")
    if isinstance(spec_mode, int):
        spec_name: str | None = SPECULATIVE_MODES.get(spec_mode, f"mode_{spec_mode}")
    elif spec_mode is not None:
        spec_name = str(spec_mode).lower()
    else:
        spec_name = None
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
        remove_input_padding=bool(plugin.get("remove_input_padding", False)),
        gpt_attention_plugin=gpt_plugin,
        context_fmha=bool(plugin.get("context_fmha", False)),
        use_paged_context_fmha=bool(plugin.get("use_paged_context_fmha", False)),
        tokens_per_block=_int(plugin.get("tokens_per_block")),
        max_draft_len=_int(build.get("max_draft_len"), _int(pre.get("max_draft_len"), 0)) or 0,
        speculative_decoding_mode=spec_name,
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
    )


def _parse_hf(directory: Path, cfg: dict[str, Any]) -> dict[str, Any]:
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
        max_input_len=max_pos - 1,
        max_seq_len=max_pos,
        max_position_embeddings=max_pos,
        logits_dtype="float32",
        is_decoder=is_decoder,
    )


# ---------------------------------------------------------------------- public API
def inspect_engine(engine_dir: str | Path) -> EngineInfo:
    """Read an engine directory's configuration (it does not load or check the engine files).

    Args:
        engine_dir: a TRT-LLM engine dir, an HF checkpoint dir or a synthetic engine dir.
    Returns:
        The :class:`EngineInfo`; ``rank_files`` lists the ``rank*.engine`` files present (count checked by
        :func:`check_rank_files`, so that bare configs can be inspected).
    Raises:
        EngineError (naming the path): missing directory, no config.json, invalid JSON (line/column),
        a config.json that is neither a TRT-LLM engine nor an HF checkpoint with weights (B11), a TRT-LLM
        checkpoint that was not built yet, or an encoder-only engine such as BERT.
    """
    directory = Path(engine_dir).expanduser()
    if directory.is_symlink() and not directory.exists():
        raise EngineError(
            "the engine directory is a symbolic link that cannot be followed (it points nowhere or "
            "to itself: a symlink loop)",
            path=directory,
            hint="pass the real directory",
        )
    if not directory.exists():
        raise EngineError(
            "engine directory does not exist",
            path=directory,
            hint="pass the trtllm-build --output_dir (holding config.json and rank*.engine)",
        )
    if not directory.is_dir():
        raise EngineError("not a directory", path=directory, hint="pass the directory holding config.json, not a file")
    directory = directory.resolve()

    synthetic = directory / SYNTHETIC_FILE
    if synthetic.is_file():
        from .runtime.synthetic import SPEC_DEFAULTS, EngineLoadError, read_spec

        try:
            spec = read_spec(directory)
        except EngineLoadError as exc:
            raise EngineError(
                str(exc).split(": ", 2)[-1],
                path=synthetic,
                hint="keys (all optional): " + ", ".join(f"{k} (default {v})" for k, v in SPEC_DEFAULTS.items()),
            ) from None
        return EngineInfo(
            kind="synthetic",
            dir=directory,
            layout="synthetic",
            architecture="synthetic",
            dtype="float32",
            vocab_size=spec["vocab_size"],
            max_batch_size=spec["max_batch_size"],
            max_beam_width=1,
            max_input_len=spec["max_input_len"],
            max_seq_len=spec["max_seq_len"],
            logits_dtype="float32",
        )

    config = directory / "config.json"
    for special in (synthetic, config):
        if special.is_symlink() and not special.exists():
            raise EngineError(
                "a symbolic link that cannot be followed (it points nowhere, or to itself: a symlink loop)",
                path=special,
                hint="replace it with the file itself",
            )
    if not config.is_file():
        found = sorted(p.name for p in directory.iterdir())[:8]
        raise EngineError(
            "no config.json in the engine directory"
            + (f" (found: {', '.join(found)})" if found else " (the directory is empty)"),
            path=directory,
            hint=f"engine_dir must be the trtllm-build --output_dir, an HF checkpoint, or a dir with {SYNTHETIC_FILE}",
        )
    cfg = _read_json(config)
    if not isinstance(cfg, dict):
        raise EngineError("config.json is not a JSON object", path=config)

    if "builder_config" in cfg and "plugin_config" in cfg:
        check_config(OldLayout, cfg, config)
        fields = _parse_old(directory, cfg)
        kind: EngineKind = "trtllm"
    elif "pretrained_config" in cfg and "build_config" in cfg:
        check_config(NewLayout, cfg, config)
        fields = _parse_new(directory, cfg)
        kind = "trtllm"
    elif "architecture" in cfg and "mapping" in cfg:
        raise EngineError(
            "this is a TensorRT-LLM checkpoint (convert_checkpoint.py output), not an engine",
            path=config,
            hint=f"build it first: trtllm-build --checkpoint_dir {directory} --output_dir <engine_dir>",
        )
    elif cfg.get("architectures"):
        check_config(HFConfig, cfg, config, what="a Hugging Face checkpoint's config.json")
        weights = _list_files(directory, WEIGHT_PATTERNS)
        if not weights:
            raise EngineError(
                "config.json is a Hugging Face model config (architectures "
                f"{cfg['architectures']}), but the directory has no weights (*.safetensors, *.bin) and no "
                "build_config/pretrained_config: it is neither a TensorRT-LLM engine nor an HF checkpoint",
                path=config,
                hint="point --engine-dir at the trtllm-build output dir (config.json with "
                "build_config + rank*.engine), or at a full HF checkpoint for the CPU engine",
            )
        fields = _parse_hf(directory, cfg)
        fields["weight_files"] = weights
        kind = "hf"
    else:
        raise EngineError(
            "config.json is neither a TensorRT-LLM engine config (builder_config + plugin_config, or "
            "pretrained_config + build_config) nor a Hugging Face config (architectures)",
            path=config,
            hint="engine_dir must be the trtllm-build --output_dir",
        )

    _check_lengths(fields, config, kind, cfg)
    if kind == "trtllm":
        fields["rank_files"] = tuple(sorted(_list_files(directory, ENGINE_PATTERNS), key=_rank_index))
    info = EngineInfo(kind=kind, dir=directory, **fields)
    if not info.is_decoder:
        why = (
            "the engine was built without gpt_attention_plugin (plugin_config.gpt_attention_plugin is off), "
            "so it cannot generate tokens"
            if info.kind == "trtllm" and info.gpt_attention_plugin is None
            else "it is not a causal (text-generation) language model"
        )
        raise EngineError(
            f"architecture {info.architecture} is an encoder, not a text-generation decoder: {why}",
            path=config,
            hint="repo-builder serves decoder (GPT-style) engines built with trtllm-build --gpt_attention_plugin auto",
        )
    return info


def _check_lengths(fields: dict[str, Any], config: Path, kind: str, cfg: dict[str, Any]) -> None:
    """Lengths that contradict each other (tokens): max_seq_len (prompt + output) below max_input_len, or
    no room for a single generated token in an HF checkpoint.

    Raises:
        EngineError: naming the key of config.json that is too small.
    """
    max_input, max_seq = fields["max_input_len"], fields["max_seq_len"]
    if kind == "hf":
        if max_seq < 2:
            raise EngineError(
                f"max_position_embeddings {max_seq} leaves no room for a prompt and one generated token",
                key="max_position_embeddings",
                path=config,
            )
        return
    if max_seq >= max_input:
        return
    if fields.get("layout") == "old":
        key = (
            "builder_config.max_output_len"
            if "max_output_len" in cfg["builder_config"]
            else "builder_config.max_position_embeddings"
        )
    else:
        build = cfg["build_config"]
        key = (
            "build_config.max_seq_len"
            if build.get("max_seq_len") is not None
            else "build_config.max_output_len"
            if build.get("max_output_len") is not None
            else "pretrained_config.max_position_embeddings"
        )
    raise EngineError(
        f"the maximum sequence length (prompt + output) {max_seq} is below max_input_len {max_input}",
        key=key,
        path=config,
        hint="the engine cannot hold its own longest prompt; rebuild it with "
        "trtllm-build --max_seq_len above --max_input_len",
    )


def check_rank_files(info: EngineInfo) -> None:
    """Check that a TRT-LLM engine dir holds exactly ``rank0.engine`` .. ``rank{world_size-1}.engine``.

    Other kinds pass (an HF checkpoint's weights were checked by :func:`inspect_engine`).
    Raises:
        EngineError: the rank files do not match the world size (tp x pp) of config.json.
    """
    if info.kind != "trtllm":
        return
    n = info.world_size
    if len(info.rank_files) == n and list(info.rank_files) == [f"rank{r}.engine" for r in range(n)]:
        return
    expected = ", ".join(f"rank{r}.engine" for r in range(n)) if n <= 8 else f"rank0.engine .. rank{n - 1}.engine"
    found = ", ".join(info.rank_files[:16]) if info.rank_files else "none"
    if len(info.rank_files) > 16:
        found += f" and {len(info.rank_files) - 16} more"
    raise EngineError(
        f"the engine was built for world size {n} (tp {info.tp_size} x pp {info.pp_size}) and needs "
        f"{expected}; found {len(info.rank_files)} rank*.engine file(s): {found}",
        path=info.dir,
        hint="copy every rank file of the trtllm-build output, or rebuild with the right --tp_size/--pp_size",
    )


def engine_fingerprint(info: EngineInfo) -> str:
    """``"sha256:<hex>"`` over the config file's bytes and the names and sizes (bytes) of the engine and
    weight files. File contents are not read, so a 4 GiB engine is fingerprinted instantly."""
    digest = hashlib.sha256()
    config = info.config_file
    digest.update(config.name.encode() + b"\0" + config.read_bytes() + b"\0")
    patterns = ENGINE_PATTERNS + WEIGHT_PATTERNS
    files = sorted({p for pattern in patterns for p in info.dir.glob(pattern) if p.is_file()})
    for path in files:
        digest.update(f"{path.name}\0{path.stat().st_size}\0".encode())
    return "sha256:" + digest.hexdigest()
