"""Triton data types and the spellings repo-builder maps onto them: the one home of these facts.

* :data:`TritonDType` / :data:`TRITON_DTYPES`: the ``TYPE_*`` names of Triton's ``DataType`` enum
  (``model_config.proto``), the type of every tensor of the contract and of every ``dtype`` parameter.
* :data:`ENGINE_TO_TRITON`: engine dtype names as TensorRT-LLM writes them in ``config.json`` (torch style,
  ``pretrained_config.dtype`` / ``logits_dtype``, or the short ``builder_config.precision`` forms) -> ``TYPE_*``.
* :data:`DTYPE_ALIASES`: what a user may write for a ``dtype`` parameter (case-insensitive): the engine names
  plus ``float`` and ``half``.
* :data:`ENGINE_DTYPE_BYTES`: bytes per element of an engine dtype (KV-cache sizing), FP8/INT8 included.

The numpy map of the served models stays in ``repo_builder/runtime/triton_io.py``: the runtime is vendored into
each model and imports nothing outside itself.
"""

from __future__ import annotations

from typing import Literal, get_args

TritonDType = Literal[
    "TYPE_BOOL",
    "TYPE_UINT8",
    "TYPE_UINT16",
    "TYPE_UINT32",
    "TYPE_UINT64",
    "TYPE_INT8",
    "TYPE_INT16",
    "TYPE_INT32",
    "TYPE_INT64",
    "TYPE_FP16",
    "TYPE_FP32",
    "TYPE_FP64",
    "TYPE_STRING",
    "TYPE_BF16",
]

#: Triton data type names (``TYPE_*``) in the order of :data:`TritonDType`.
TRITON_DTYPES: tuple[str, ...] = get_args(TritonDType)

#: Engine dtype names (torch style, as in config.json) -> Triton dtype names.
ENGINE_TO_TRITON = {
    "float32": "TYPE_FP32",
    "float16": "TYPE_FP16",
    "bfloat16": "TYPE_BF16",
    "fp32": "TYPE_FP32",
    "fp16": "TYPE_FP16",
    "bf16": "TYPE_BF16",
}

#: Spellings accepted for Triton dtype values (case-insensitive), mapped to the Triton name.
DTYPE_ALIASES = {**ENGINE_TO_TRITON, "float": "TYPE_FP32", "half": "TYPE_FP16"}

#: Bytes per element of an engine dtype name (lower case).
ENGINE_DTYPE_BYTES = {
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


def triton_dtype(name: str | None) -> str | None:
    """``float16`` -> ``TYPE_FP16`` etc.; None for names without a Triton float equivalent."""
    return ENGINE_TO_TRITON.get(str(name).lower()) if name else None


def dtype_bytes(name: object) -> int | None:
    """Bytes per element of engine dtype ``name`` (``float16`` -> 2); None when unknown or unset."""
    return ENGINE_DTYPE_BYTES.get(str(name).lower()) if name else None
