"""What an engine directory holds: :class:`EngineInfo` (the facts render and validate read) and its kinds.

Filled by :func:`repo_builder.engine.inspect_engine` from the parsers of :mod:`.layouts`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict

from ..runtime.synthetic_spec import SPEC_FILE as SYNTHETIC_FILE

EngineKind = Literal["trtllm", "hf", "synthetic"]

#: Files of an HF checkpoint's weights and of a TRT-LLM engine's ranks (glob patterns in the engine dir).
WEIGHT_PATTERNS = ("*.safetensors", "*.bin", "*.pt", "*.pth")
ENGINE_PATTERNS = ("*.engine",)


class EngineInfo(BaseModel):
    """What an engine directory holds (all lengths in tokens, batch sizes in requests).

    ``max_seq_len`` is prompt + output; for old layouts and TRT-LLM 0.8 it is ``max_input_len +
    max_output_len``. ``logits_dtype`` is a torch-style name (``float32``, ``float16``, ``bfloat16``).
    ``kv_cache_type`` is how the engine keeps keys and values between steps: ``paged`` (blocks of
    ``tokens_per_block`` tokens), ``continuous`` (one max_seq_len slab per sequence, allocated at load) or
    ``disabled`` (no KV cache: nothing carries a sequence's keys and values to the next step; TensorRT-LLM's
    own executor tests, ``cpp/tests/.../executorTest``, expect one generated token per request from such an engine).
    LoRA facts: ``lora_plugin`` (the plugin setting, None = built without LoRA), ``lora_dtype`` (the dtype
    adapter weights must have: the plugin's, the model's for ``auto``), ``max_lora_rank``, ``lora_target_modules``
    (TensorRT-LLM module names: ``attn_q``, ``mlp_h_to_4h`` ...), ``max_loras`` (adapters per engine step).
    Speculative facts: ``max_draft_len`` (draft tokens per step; for the CPU reference engine the stand-in limit
    :data:`~.layouts.HF_MAX_DRAFT_LEN`), ``speculative_decoding_mode`` (``draft_tokens_external``, ``medusa``,
    ``lookahead_decoding``, ``eagle`` ...), and the tree limits from ``pretrained_config``: ``num_medusa_heads``
    (a Medusa tree's deepest path), ``num_eagle_layers`` (an EAGLE tree's depth) and ``max_non_leaves_per_layer``
    (NVIDIA/TensorRT-LLM ``cpp/tensorrt_llm/runtime/gptJsonConfig.cpp``).
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
    kv_cache_type: Literal["paged", "continuous", "disabled"] | None = None
    remove_input_padding: bool | None = None
    gpt_attention_plugin: str | None = None
    context_fmha: bool | None = None
    use_paged_context_fmha: bool | None = None
    tokens_per_block: int | None = None
    max_draft_len: int = 0
    speculative_decoding_mode: str | None = None
    num_medusa_heads: int | None = None
    num_eagle_layers: int | None = None
    max_non_leaves_per_layer: int | None = None
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
    lora_dtype: str | None = None
    max_loras: int | None = None

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


__all__ = ["ENGINE_PATTERNS", "SYNTHETIC_FILE", "WEIGHT_PATTERNS", "EngineInfo", "EngineKind"]
