"""The layouts ``render --layout`` knows, the parameters only one layout reads, and the check that a render's
values fit its layout (:func:`check_layout_values`, run by :func:`~repo_builder.render.plan.prepare_render`
before the engine is inspected). Its own module so that the plan imports no layout module (each of which
imports the plan). The layouts themselves: docs/layouts.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..errors import ParameterError, RenderError

LAYOUTS = ("inflight_batcher_llm", "disaggregated", "whisper", "multimodal")
#: Parameters only layout disaggregated renders (refused by the plain layout, where nothing would read them).
LAYOUT_PARAMETERS = (
    "context_model_name",
    "generation_model_name",
    "disaggregated_serving_bls_count",
    "context_participant_ids",
    "generation_participant_ids",
    "context_gpu_device_ids",
    "generation_gpu_device_ids",
)
#: Parameters of the plain layout that layout disaggregated replaces by a pair (one per phase).
PHASE_KEYS = {"participant_ids": "participant_ids", "gpu_device_ids": "gpu_device_ids"}
#: Profiles layout disaggregated renders.
_PROFILES = ("trtllm-1.2",)
#: The parameters of layout whisper (model_templates/parameters.yaml, models [whisper_bls]).
WHISPER_PARAMETERS = ("whisper_max_tokens", "whisper_max_batch_size", "whisper_bls_count", "whisper_max_audio_seconds")
#: The parameters of layout multimodal (model_templates/parameters.yaml, models [multimodal_encoders]).
MULTIMODAL_PARAMETERS = ("multimodal_max_batch_size", "multimodal_max_num_images", "multimodal_max_prompt_table_size")


def check_layout_values(layout: str, profile: str, checked: Mapping[str, Any]) -> None:
    """Refuse values that the chosen layout would not use (the plain layout: the parameters of layouts
    disaggregated, whisper and multimodal; layout disaggregated: the single-model ``participant_ids`` and
    ``gpu_device_ids``, profile 0.5; any layout: an unknown one).

    Raises:
        RenderError: names ``--layout`` or the parameter.
    """
    if layout not in LAYOUTS:
        raise RenderError(f"unknown layout '{layout}'", key="--layout", hint=f"choose one of {', '.join(LAYOUTS)}")
    for own, what, func in (
        ("whisper", "a Whisper", "render_whisper_repository"),
        ("multimodal", "a LLaVA", "render_multimodal_repository"),
    ):
        if layout == own:
            raise RenderError(
                f"layout {own} is rendered from {what} checkpoint alone",
                key="--layout",
                hint=f"repo-builder render --layout {own} --engine-dir CHECKPOINT ({func})",
            )
    for own, names in (("whisper", WHISPER_PARAMETERS), ("multimodal", MULTIMODAL_PARAMETERS)):
        own_given = [k for k in names if k in checked]
        if own_given:
            raise ParameterError(
                f"{own_given[0]} is only read by layout {own}",
                key=own_given[0],
                hint=f"render with --layout {own}, or drop the key",
            )
    if layout != "disaggregated":
        given = [k for k in LAYOUT_PARAMETERS if k in checked]
        if given:
            raise ParameterError(
                f"{given[0]} is only read by layout disaggregated",
                key=given[0],
                hint="render with --layout disaggregated, or drop the key",
            )
        return
    if profile not in _PROFILES:
        raise RenderError(
            f"layout disaggregated needs profile {', '.join(_PROFILES)} (NVIDIA ships it from v0.15.0), not {profile}",
            key="--layout",
        )
    for key in PHASE_KEYS:
        if key in checked:
            raise ParameterError(
                f"{key} names the ranks of one tensorrt_llm model; layout disaggregated has two",
                key=key,
                hint=f"set context_{key} and generation_{key}",
            )
