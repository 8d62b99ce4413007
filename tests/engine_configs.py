"""In-tree TensorRT-LLM engine folders for tests that must not need ../shared.

The two ``config.json`` layouts are written from the field names TensorRT-LLM's builders use (old
``build.py`` before 0.8: ``builder_config`` + ``plugin_config``; ``trtllm-build`` 0.8+: ``version`` +
``pretrained_config`` + ``build_config``, see TensorRT-LLM ``tensorrt_llm/builder.py`` ``BuildConfig``), trimmed
to what repo-builder reads. Sizes are those of a small LLaMA (vocabulary 32000 so the packaged Mistral v1
tokenizer fits it).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

NEW_LAYOUT: dict[str, Any] = {
    "version": "1.2.0rc6",
    "pretrained_config": {
        "architecture": "LlamaForCausalLM",
        "dtype": "float16",
        "vocab_size": 32000,
        "hidden_size": 512,
        "num_hidden_layers": 4,
        "num_attention_heads": 8,
        "num_key_value_heads": 4,
        "head_size": 64,
        "logits_dtype": "float32",
        "max_position_embeddings": 4096,
        "mapping": {"world_size": 1, "tp_size": 1, "pp_size": 1, "cp_size": 1},
        "quantization": {"quant_algo": None, "kv_cache_quant_algo": None},
    },
    "build_config": {
        "max_input_len": 1024,
        "max_seq_len": 2048,
        "max_batch_size": 8,
        "max_beam_width": 1,
        "max_num_tokens": 8192,
        "kv_cache_type": "paged",
        "gather_context_logits": False,
        "gather_generation_logits": False,
        "max_draft_len": 0,
        "speculative_decoding_mode": 1,
        "lora_config": {"lora_dir": [], "max_lora_rank": 64, "lora_target_modules": []},
        "plugin_config": {
            "gpt_attention_plugin": "float16",
            "context_fmha": True,
            "paged_kv_cache": True,
            "remove_input_padding": True,
            "tokens_per_block": 32,
            "use_paged_context_fmha": True,
            "lora_plugin": None,
        },
    },
}

OLD_LAYOUT: dict[str, Any] = {
    "builder_config": {
        "name": "llama",
        "precision": "float16",
        "vocab_size": 32000,
        "hidden_size": 512,
        "num_heads": 8,
        "num_kv_heads": 4,
        "num_layers": 4,
        "max_batch_size": 8,
        "max_beam_width": 2,
        "max_input_len": 1024,
        "max_output_len": 512,
        "max_position_embeddings": 4096,
        "tensor_parallel": 1,
        "pipeline_parallel": 1,
        "quant_mode": 0,
        "gather_context_logits": False,
        "gather_generation_logits": False,
        "max_draft_len": 0,
    },
    "plugin_config": {
        "gpt_attention_plugin": "float16",
        "context_fmha": True,
        "paged_kv_cache": True,
        "remove_input_padding": True,
        "tokens_per_block": 64,
        "use_paged_context_fmha": True,
        "lora_plugin": None,
    },
}


def config(layout: str = "new", **sections: dict[str, Any]) -> dict[str, Any]:
    """A deep copy of the ``layout`` (``"new"``/``"old"``) config with ``sections`` merged one level deep:
    ``config(build_config={"max_beam_width": 4})``."""
    out = copy.deepcopy(NEW_LAYOUT if layout == "new" else OLD_LAYOUT)
    for name, values in sections.items():
        if isinstance(values, dict) and isinstance(out.get(name), dict):
            for k, v in values.items():
                if isinstance(v, dict) and isinstance(out[name].get(k), dict):
                    out[name][k].update(v)
                else:
                    out[name][k] = v
        else:
            out[name] = values
    return out


def write_engine(directory: Path, cfg: dict[str, Any] | None = None, *, rank_size: int = 0, ranks: int = 1) -> Path:
    """Write ``config.json`` and ``ranks`` ``rank<N>.engine`` files of ``rank_size`` bytes (sparse) to
    ``directory``; returns it."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(cfg if cfg is not None else config(), indent=2))
    for r in range(ranks):
        with open(directory / f"rank{r}.engine", "wb") as f:
            if rank_size:
                f.truncate(rank_size)
    return directory


def packaged_mistral(tmp_path_factory: Any) -> Path:
    """The Mistral v1 SentencePiece tokenizer (32000 tokens) that the mistral-common package ships, as a
    tokenizer directory (for a session-scoped fixture)."""
    from repo_builder.testing import packaged_tokenizer

    return packaged_tokenizer("mistral-v1", tmp_path_factory.mktemp("mistral_v1"))
