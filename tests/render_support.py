"""Helpers for the render/template/validate tests: template variables without an engine, a rendered repo on disk,
the multimodal renders and their in-process runtime, random test images."""

from __future__ import annotations

import base64
import io
from pathlib import Path
from typing import Any

import numpy as np

from repo_builder.profile.contract import MODEL_NAMES
from repo_builder.profile.schema import load_schema

# Values resolve() would derive from an engine; the tests of templates alone pass them explicitly.
STRUCTURAL = {
    "triton_max_batch_size": 8,
    "logits_datatype": "TYPE_FP32",
    "max_beam_width": 1,
    "engine_dir": "/srv/repo/tensorrt_llm/1",
    "tokenizer_dir": "/srv/tokenizer",
    "max_input_len": 100,
    "max_seq_len": 200,
}


def template_values(profile: str, engine_kind: str = "trtllm", **overrides: Any) -> dict[str, Any]:
    """{parameter: value} for every rendered parameter of ``profile``: schema defaults + STRUCTURAL + overrides."""
    params = load_schema().for_profile(profile)
    values = {name: p.default_for(profile) for name, p in params.items()}
    for name, value in STRUCTURAL.items():
        if name in params:
            values[name] = value
    if "triton_backend" in params:
        values["triton_backend"] = "tensorrtllm" if engine_kind == "trtllm" else "python"
    values.update(overrides)
    return values


def write_configs(root: Path, configs: dict[str, str]) -> Path:
    """Write {model: config text} as ``root/<model>/config.pbtxt`` plus empty version folders."""
    for model in MODEL_NAMES:
        if model in configs:
            (root / model / "1").mkdir(parents=True, exist_ok=True)
            (root / model / "config.pbtxt").write_text(configs[model])
    return root


def render_multimodal_two_images(checkpoint: Path, folder: Path) -> Path:
    """``folder/repo``: the layout multimodal rendered from ``checkpoint`` (a tiny LLaVA or Qwen2-VL) with
    ``multimodal_max_num_images`` 2, every other value from the checkpoint."""
    from repo_builder.render import RenderOptions
    from repo_builder.render.multimodal import render_multimodal_repository

    out = folder / "repo"
    render_multimodal_repository(checkpoint, out, RenderOptions(user_values={"multimodal_max_num_images": "2"}))
    return out


def multimodal_runtime(repo: Path) -> tuple[Any, Any, Any]:
    """The rendered multimodal ``repo``'s three served pieces, in-process: (``MultimodalText`` of preprocessing,
    ``VisionEncoder`` and ``PromptTableEngine`` of the engine folder ``tensorrt_llm/1/engine``)."""
    from repo_builder.runtime.multimodal import MultimodalText, PromptTableEngine, VisionEncoder

    engine_dir = repo / "tensorrt_llm" / "1" / "engine"
    return (
        MultimodalText(repo / "preprocessing" / "1" / "multimodal"),
        VisionEncoder(engine_dir),
        PromptTableEngine(engine_dir),
    )


def random_pixels(seed: int, size: tuple[int, int] = (60, 40)) -> np.ndarray:
    """A random RGB test image of ``size`` (width, height): uint8 ``[height, width, 3]``, the same for a seed."""
    return (np.random.default_rng(seed).random((size[1], size[0], 3)) * 255).astype(np.uint8)


def image_data_uri(array: np.ndarray, fmt: str = "PNG") -> str:
    """``array`` (uint8 ``[H, W, 3]``) encoded as a ``fmt`` image (PIL's format name) in a base64 data URI."""
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(array).save(buf, fmt)
    return f"data:image/{fmt.lower()};base64," + base64.b64encode(buf.getvalue()).decode()
