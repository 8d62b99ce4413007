"""What the llmapi profile needs from a Hugging Face checkpoint's ``config.json`` (and ``hf_quant_config.json``).

The LLM API loads the checkpoint itself (NVIDIA/TensorRT-LLM v1.2.1 ``tensorrt_llm.LLM``); render only reads
the facts that give defaults and bounds: the architecture, ``torch_dtype``, ``max_position_embeddings``, the
head, layer and expert counts that bound the parallel sizes, the quantization config, and ``auto_map``
(custom code, so ``trust_remote_code`` is needed).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import EngineError

#: Decoder architectures the TensorRT-LLM 1.2 PyTorch backend has a model for (its support matrix,
#: ``docs/source/models/supported-models.md`` of v1.2.x; checkpoint ``architectures[0]``). Others get a warning,
#: not an error: the list grows between releases and the stand-in serves any transformers causal LM.
SUPPORTED_ARCHITECTURES = frozenset(
    {
        "LlamaForCausalLM",
        "MistralForCausalLM",
        "MixtralForCausalLM",
        "Qwen2ForCausalLM",
        "Qwen3ForCausalLM",
        "Qwen3MoeForCausalLM",
        "Qwen2MoeForCausalLM",
        "Phi3ForCausalLM",
        "Gemma3ForCausalLM",
        "DeepseekV3ForCausalLM",
        "Exaone4ForCausalLM",
        "GptOssForCausalLM",
        "NemotronHForCausalLM",
        "NemotronForCausalLM",
        "Llama4ForConditionalGeneration",
    }
)
_EXPERT_KEYS = ("num_local_experts", "num_experts", "n_routed_experts")


@dataclass(frozen=True)
class CheckpointFacts:
    """The checkpoint facts of the llmapi profile (None = the key is absent).

    Attributes:
        architecture: ``architectures[0]``; ``model_type``: ``model_type``.
        torch_dtype: ``torch_dtype`` (or transformers 5's ``dtype``), e.g. ``bfloat16``.
        max_position_embeddings: context length (tokens).
        num_attention_heads / num_key_value_heads / num_hidden_layers: bounds of tensor / pipeline parallelism.
        num_experts: experts of a mixture-of-experts model (``num_local_experts``, ``num_experts`` or
            ``n_routed_experts``).
        quantization: ``quantization_config`` of config.json or the ``quantization`` block of
            ``hf_quant_config.json`` (ModelOpt), with ``source`` naming the file.
        auto_map: config.json has ``auto_map`` (custom modelling code).
    """

    dir: Path
    architecture: str
    model_type: str | None = None
    torch_dtype: str | None = None
    max_position_embeddings: int | None = None
    num_attention_heads: int | None = None
    num_key_value_heads: int | None = None
    num_hidden_layers: int | None = None
    num_experts: int | None = None
    quantization: dict[str, Any] | None = None
    auto_map: bool = False
    extra: dict[str, Any] = field(default_factory=dict)

    def lock_block(self) -> dict[str, Any]:
        """The lock file's ``checkpoint`` block (JSON types only)."""
        return {
            "architecture": self.architecture,
            "model_type": self.model_type,
            "torch_dtype": self.torch_dtype,
            "max_position_embeddings": self.max_position_embeddings,
            "num_attention_heads": self.num_attention_heads,
            "num_key_value_heads": self.num_key_value_heads,
            "num_hidden_layers": self.num_hidden_layers,
            "num_experts": self.num_experts,
            "quantization": self.quantization,
            "auto_map": self.auto_map,
        }


def _int(cfg: dict[str, Any], key: str, path: Path) -> int | None:
    value = cfg.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise EngineError(f"{key}: expected a positive integer, got {value!r}", path=path)
    return value


def read_checkpoint_facts(directory: str | Path) -> CheckpointFacts:
    """Read the facts of the checkpoint in ``directory``.

    Raises:
        EngineError: no ``config.json``, not JSON, no ``architectures`` list, or a count that is not a positive
            integer (names the file and key).
    """
    root = Path(directory)
    path = root / "config.json"
    try:
        cfg = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise EngineError(
            f"cannot read the checkpoint's config.json: {exc.strerror or exc}",
            path=path,
            hint="--checkpoint-dir must be a Hugging Face checkpoint folder (config.json + weights)",
        ) from exc
    except ValueError as exc:
        raise EngineError(f"not valid JSON: {exc}", path=path) from exc
    if not isinstance(cfg, dict):
        raise EngineError("config.json must hold a JSON object", path=path)
    text_cfg: dict[str, Any] = cfg["text_config"] if isinstance(cfg.get("text_config"), dict) else {}
    archs = cfg.get("architectures")
    if not isinstance(archs, list) or not archs or not all(isinstance(a, str) and a for a in archs):
        raise EngineError(
            "architectures: expected a non-empty list of model class names (e.g. [LlamaForCausalLM])", path=path
        )

    def pick(key: str) -> int | None:
        return _int(cfg, key, path) if key in cfg else _int(text_cfg, key, path)

    quant: dict[str, Any] | None = None
    if isinstance(cfg.get("quantization_config"), dict):
        quant = {"source": "config.json", **cfg["quantization_config"]}
    modelopt = root / "hf_quant_config.json"
    if quant is None and modelopt.is_file():
        try:
            data = json.loads(modelopt.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise EngineError(f"cannot read the quantization config: {exc}", path=modelopt) from exc
        block = data.get("quantization") if isinstance(data, dict) else None
        quant = {"source": "hf_quant_config.json", **(block if isinstance(block, dict) else {})}
    dtype = cfg.get("torch_dtype", cfg.get("dtype", text_cfg.get("torch_dtype")))
    experts = next((pick(k) for k in _EXPERT_KEYS if pick(k) is not None), None)
    return CheckpointFacts(
        dir=root,
        architecture=archs[0],
        model_type=cfg.get("model_type") if isinstance(cfg.get("model_type"), str) else None,
        torch_dtype=str(dtype) if dtype is not None else None,
        max_position_embeddings=pick("max_position_embeddings"),
        num_attention_heads=pick("num_attention_heads"),
        num_key_value_heads=pick("num_key_value_heads"),
        num_hidden_layers=pick("num_hidden_layers"),
        num_experts=experts,
        quantization=quant,
        auto_map=isinstance(cfg.get("auto_map"), dict) and bool(cfg["auto_map"]),
    )
