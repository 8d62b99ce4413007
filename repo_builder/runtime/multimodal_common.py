"""What the Python models of layout multimodal share (vendored with the rest of ``runtime/``): the facts file
(:func:`load_facts`), model parameters and scalar inputs, the checkpoint's loader and Qwen2-VL's rotary
positions (:func:`mrope_positions`). Moved here from :mod:`.multimodal`, which re-exports every name.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from .errors import EngineLoadError, ModelLoadError

FACTS_NAME = "multimodal.json"
FACTS_FOLDER = "multimodal"
QWEN2_VL = "qwen2_vl"


def _params(args: dict[str, Any]) -> dict[str, str]:
    config = json.loads(args["model_config"])
    return {k: v.get("string_value", "") for k, v in (config.get("parameters") or {}).items()}


def _scalar(array: np.ndarray | None, default: int | None = None) -> int | None:
    if array is None or np.asarray(array).size == 0:
        return default
    return int(np.asarray(array).reshape(-1)[0])


def _real(array: np.ndarray | None) -> float | None:
    if array is None or np.asarray(array).size == 0:
        return None
    return float(np.asarray(array).reshape(-1)[0])


def load_facts(folder: str | Path) -> dict[str, Any]:
    """``multimodal.json`` of ``folder``.

    Raises:
        ModelLoadError: missing or not JSON (names the path).
    """
    path = Path(folder) / FACTS_NAME
    try:
        return dict(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError) as exc:
        raise ModelLoadError(f"{path}: {exc}") from exc


def _import_torch() -> Any:
    try:
        import torch
    except ImportError as exc:  # pragma: no cover - torch is in the venv and the TRT-LLM container
        raise EngineLoadError("layout multimodal needs torch and transformers") from exc
    return torch


def _load_model(path: str | Path) -> Any:
    """The checkpoint as ``LlavaForConditionalGeneration`` or ``Qwen2VLForConditionalGeneration`` (by its
    config.json ``model_type``), fp32, eval mode.

    Raises:
        EngineLoadError: it does not load (names the path).
    """
    torch = _import_torch()
    try:
        model_type = json.loads((Path(path) / "config.json").read_text(encoding="utf-8")).get("model_type")
        if model_type == QWEN2_VL:
            from transformers import Qwen2VLForConditionalGeneration as cls
        else:
            from transformers import LlavaForConditionalGeneration as cls  # type: ignore[assignment]
        return cls.from_pretrained(str(path), dtype=torch.float32).eval()
    except Exception as exc:  # noqa: BLE001 - shown as the model's load error
        raise EngineLoadError(f"{path}: cannot load the {model_type or 'multimodal'} checkpoint: {exc}") from exc


def _text_model(model: Any) -> Any:
    """The decoder stack of a Qwen2-VL model (transformers 5: ``model.model.language_model``; 4.x: ``model.model``)."""
    return getattr(model.model, "language_model", model.model)


def mrope_positions(model: Any, vision_ids: list[int], grid_thw: np.ndarray, image_token_id: int) -> tuple[Any, int]:
    """Qwen2-VL's 3-D rotary positions of a prompt: ``([3, 1, L] int64 torch tensor, delta)``, from transformers'
    own ``get_rope_index`` (the decode step's position is ``L + step + delta`` on all three axes). Text-only:
    ``0 .. L-1`` on each axis, delta 0."""
    torch = _import_torch()
    import inspect

    ids = torch.tensor([vision_ids], dtype=torch.long)
    if grid_thw.shape[0] == 0:
        return torch.arange(len(vision_ids)).view(1, 1, -1).expand(3, 1, -1), 0
    owner = model.model if hasattr(model.model, "get_rope_index") else model
    kwargs: dict[str, Any] = {
        "image_grid_thw": torch.from_numpy(np.asarray(grid_thw, np.int64)),
        "attention_mask": torch.ones_like(ids),
    }
    if "mm_token_type_ids" in inspect.signature(owner.get_rope_index).parameters:  # transformers >= 5
        kwargs["mm_token_type_ids"] = (ids == image_token_id).int()
    positions, deltas = owner.get_rope_index(ids, **kwargs)
    return positions, int(np.asarray(deltas).reshape(-1)[0])
