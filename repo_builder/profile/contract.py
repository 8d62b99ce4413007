"""The tensor contract of each profile: every model's inputs/outputs and the ensemble wiring.

The contract of profile ``P`` lives in ``model_templates/P/contract.yaml`` and nowhere else.
Templates render their ``input``/``output`` sections from it, ``repo-builder validate`` checks
repositories against it, the BLS model follows the same ensemble wiring (vendored as
``wiring.json``) and the tests read it. Adding a profile is adding a folder: no code changes.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, model_validator

from ..errors import RepoBuilderError
from .dtypes import TritonDType
from .paths import templates_dir
from .yamlio import safe_load

MODEL_NAMES = ("preprocessing", "tensorrt_llm", "postprocessing", "ensemble", "tensorrt_llm_bls")
#: Models only a layout other than inflight_batcher_llm renders (``render --layout``): {layout: models with a
#: template of their own}. ``disaggregated`` also renders ``context`` and ``generation`` from the tensorrt_llm
#: template (repo_builder/render/disaggregated.py); ``whisper`` renders its own ``tensorrt_llm`` template,
#: ``whisper_tensorrt_llm`` (repo_builder/render/whisper.py); ``multimodal`` renders all five of its models
#: from ``multimodal_*`` templates (repo_builder/render/multimodal.py).
LAYOUT_MODELS: dict[str, tuple[str, ...]] = {
    "disaggregated": ("disaggregated_serving_bls",),
    "whisper": ("whisper_bls",),
    "multimodal": ("multimodal_encoders",),
}
LAYOUT_MODEL_NAMES: tuple[str, ...] = tuple(m for models in LAYOUT_MODELS.values() for m in models)

#: How a profile's repository is laid out: ``ensemble`` (the five models of :data:`MODEL_NAMES`, NVIDIA's
#: inflight_batcher_llm) or ``llmapi`` (one Python-backend ``tensorrt_llm`` model over ``tensorrt_llm.LLM``
#: that takes and returns text: NVIDIA/TensorRT-LLM ``triton_backend/all_models/llmapi/``).
Layout = Literal["ensemble", "llmapi"]
#: The models of an ``llmapi`` profile.
LLMAPI_MODEL_NAMES = ("tensorrt_llm",)


class TensorSpec(BaseModel):
    """One input or output tensor of a Triton model.

    ``dims`` exclude the batch dimension (all models here have ``max_batch_size > 0``). Exactly one
    of ``data_type`` (a Triton ``TYPE_*`` name) and ``data_type_param`` (the parameter whose
    resolved value is the dtype, e.g. ``logits_datatype``) is set.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    data_type: TritonDType | None = None
    data_type_param: str | None = None
    dims: tuple[int, ...]
    optional: bool = False
    reshape: tuple[int, ...] | None = None
    allow_ragged_batch: bool = False
    ours: bool = False

    @model_validator(mode="after")
    def _one_dtype(self) -> TensorSpec:
        if (self.data_type is None) == (self.data_type_param is None):
            raise ValueError(f"tensor {self.name}: give exactly one of data_type and data_type_param")
        return self

    def dtype(self, values: dict[str, object] | None = None) -> str:
        """The Triton dtype name, resolving ``data_type_param`` from ``values``."""
        if self.data_type is not None:
            return self.data_type
        if values is None or self.data_type_param not in values:
            raise KeyError(f"tensor {self.name} needs parameter {self.data_type_param}")
        return str(values[self.data_type_param])


class EnsembleStep(BaseModel):
    """One ensemble step: ``input_map`` is {step input: ensemble tensor}, ``output_map`` is
    {step output: ensemble tensor}."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    model: str
    input_map: dict[str, str]
    output_map: dict[str, str]


class ModelContract(BaseModel):
    """Inputs, outputs and (for the ensemble) steps of one model."""

    model_config = ConfigDict(extra="forbid")

    inputs: list[TensorSpec] = Field(default_factory=list)
    outputs: list[TensorSpec] = Field(default_factory=list)
    steps: list[EnsembleStep] = Field(default_factory=list)
    inputs_from: str | None = None
    outputs_from: str | None = None
    extra_inputs: list[TensorSpec] = Field(default_factory=list)

    def input(self, name: str) -> TensorSpec:
        """The input called ``name``; KeyError if absent."""
        for spec in self.inputs:
            if spec.name == name:
                return spec
        raise KeyError(name)

    def output(self, name: str) -> TensorSpec:
        """The output called ``name``; KeyError if absent."""
        for spec in self.outputs:
            if spec.name == name:
                return spec
        raise KeyError(name)


class BackendReads(BaseModel):
    """How NVIDIA's C++ backend reads the tensorrt_llm model's inputs (``backend_reads`` of contract.yaml).

    ``dtypes``: {input name: the Triton dtype whose bytes the backend reads} (it casts the buffer, never checks
    the declared dtype, so an input declared otherwise is misread); ``read_as``: {declared name: the name the
    backend actually reads the value under}; ``text_unreachable``: {input: why the ensemble and BLS do not
    wire it}; ``source``: where the facts come from.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    source: str
    dtypes: dict[str, TritonDType]
    read_as: dict[str, str] = Field(default_factory=dict)
    text_unreachable: dict[str, str] = Field(default_factory=dict)


class ProfileContract(BaseModel):
    """The whole contract of one profile (``model_templates/<profile>/contract.yaml``)."""

    model_config = ConfigDict(extra="forbid")

    profile: str
    title: str
    trtllm_version: str
    triton_container: str
    layout: Layout = "ensemble"
    models: dict[str, ModelContract]
    backend_reads: BackendReads | None = None

    @model_validator(mode="after")
    def _resolve_inheritance(self) -> ProfileContract:
        for name, model in self.models.items():
            if model.inputs_from:
                model.inputs = list(self.models[model.inputs_from].inputs) + list(model.extra_inputs)
            if model.outputs_from:
                model.outputs = list(self.models[model.outputs_from].outputs)
            seen: set[str] = set()
            for spec in [*model.inputs]:
                if spec.name in seen:
                    raise ValueError(f"{self.profile}/{name}: input {spec.name} declared twice")
                seen.add(spec.name)
            seen = set()
            for spec in model.outputs:
                if spec.name in seen:
                    raise ValueError(f"{self.profile}/{name}: output {spec.name} declared twice")
                seen.add(spec.name)
        required = MODEL_NAMES if self.layout == "ensemble" else LLMAPI_MODEL_NAMES
        missing = [m for m in required if m not in self.models]
        if missing:
            raise ValueError(f"profile {self.profile} lacks models {missing}")
        return self

    def wiring(self) -> list[dict[str, object]]:
        """The ensemble steps as plain data (what the BLS model reads from ``wiring.json``)."""
        return [step.model_dump() for step in self.models["ensemble"].steps]


def list_profiles(layout: Layout | None = None) -> list[str]:
    """Names of all profiles: the folders of ``model_templates/`` holding a ``contract.yaml`` (only those of
    ``layout`` when given)."""
    names = sorted(p.parent.name for p in templates_dir().glob("*/contract.yaml"))
    if layout is None:
        return names
    return [n for n in names if load_contract(n).layout == layout]


def profile_layout(profile: str) -> Layout:
    """The layout of ``profile`` (``ensemble`` or ``llmapi``).

    Raises:
        RepoBuilderError: unknown profile.
    """
    return load_contract(profile).layout


@cache
def load_contract(profile: str) -> ProfileContract:
    """Load and check ``model_templates/<profile>/contract.yaml``.

    Raises:
        RepoBuilderError: unknown profile (the message lists the known ones) or a malformed file.
    """
    path: Path = templates_dir() / profile / "contract.yaml"
    if not path.is_file():
        raise RepoBuilderError(
            f"unknown profile '{profile}'", key="profile", hint=f"choose one of {', '.join(list_profiles())}"
        )
    try:
        return ProfileContract.model_validate(safe_load(path.read_text()))
    except (yaml.YAMLError, ValueError) as exc:
        raise RepoBuilderError(f"malformed tensor contract: {exc}", path=path) from exc
