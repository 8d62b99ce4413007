"""The files render writes beside each Python model: its ``model.py``, the vendored runtime, the BLS's wiring.

A rendered repository runs in NVIDIA's container without repo-builder installed: every Python model's version
folder gets ``model.py`` (from ``model_templates/python_models/<kind>/``) and a copy of ``repo_builder/runtime``
as ``repo_builder_runtime/``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..errors import TemplateError
from ..profile.contract import ProfileContract
from ..profile.paths import runtime_dir, templates_dir

#: Python model source kind per repository model (model_templates/python_models/<kind>/model.py).
PYTHON_MODEL_KINDS = {
    "preprocessing": "preprocessing",
    "postprocessing": "postprocessing",
    "tensorrt_llm_bls": "tensorrt_llm_bls",
}
ENGINE_MODEL_KINDS = {"hf": "reference_engine", "synthetic": "synthetic_engine"}
RUNTIME_FOLDER = "repo_builder_runtime"


def python_model_source(kind: str) -> bytes:
    """The bytes of ``model_templates/python_models/<kind>/model.py``.

    Raises:
        TemplateError: the file is missing (names it).
    """
    path = templates_dir() / "python_models" / kind / "model.py"
    if not path.is_file():
        raise TemplateError(
            "Python model source missing",
            path=path,
            hint=f"model_templates/python_models/{kind}/model.py must exist to render this model",
        )
    return path.read_bytes()


def runtime_files() -> dict[str, bytes]:
    """{path relative to the runtime package: bytes} of ``repo_builder/runtime`` (no ``__pycache__``/``.pyc``)."""
    root = runtime_dir()
    out = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        if any(part == "__pycache__" or part.startswith(".") for part in rel.parts) or path.suffix == ".pyc":
            continue
        if path.is_file():
            out[rel.as_posix()] = path.read_bytes()
    return out


def wiring_data(contract: ProfileContract, values: Mapping[str, Any]) -> dict[str, Any]:
    """``tensorrt_llm_bls/1/wiring.json``: the ensemble steps plus the BLS's inputs and outputs.

    ``{"profile": P, "steps": [{"model", "input_map", "output_map"}], "inputs": [tensor], "outputs": [tensor]}``
    where a tensor is ``{"name", "data_type", "dims", "optional"}`` with ``data_type_param`` resolved.
    """
    bls = contract.models["tensorrt_llm_bls"]

    def tensor(spec: Any) -> dict[str, Any]:
        dtype = spec.data_type if spec.data_type is not None else values.get(spec.data_type_param)
        return {"name": spec.name, "data_type": dtype, "dims": list(spec.dims), "optional": spec.optional}

    return {
        "profile": contract.profile,
        "steps": contract.wiring(),
        "inputs": [tensor(s) for s in bls.inputs],
        "outputs": [tensor(s) for s in bls.outputs],
    }
