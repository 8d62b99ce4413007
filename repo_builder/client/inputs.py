"""Input preparation: request fields mapped onto a served model's inputs (dtypes and shapes from its config),
and the client-side checks that do not depend on the endpoint (B29a, B30)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import ClientError
from ..runtime.limits import LIMITS, check
from ..runtime.triton_io import IOSpec, RequestError
from .models import _EMPTY_WHEN_REQUIRED, ModelInfo


def _as_array(spec: IOSpec, value: Any, field_name: str, model: str) -> np.ndarray:
    """``value`` as a 1-D numpy array of the input's dtype; ClientError naming ``field_name`` if it does not fit."""
    values = list(value) if isinstance(value, (list, tuple, np.ndarray)) else [value]
    if spec.data_type == "TYPE_STRING":
        return np.array([v.encode("utf-8") if isinstance(v, str) else bytes(v) for v in values], dtype=np.object_)
    dtype = np.dtype(spec.numpy_dtype)
    try:
        if dtype.kind in "iu":
            ints = [int(v) for v in values]
            if any(isinstance(v, float) and not float(v).is_integer() for v in values):
                raise ValueError("not an integer")
            info = np.iinfo(dtype)
            bad = [v for v in ints if v < info.min or v > info.max]
            if bad:
                raise ClientError(
                    f"value {bad[0]} does not fit model '{model}' input '{spec.name}' ({spec.data_type})",
                    key=field_name,
                    hint="unsigned inputs (TensorRT-LLM v0.5-v0.6 templates) take no negative ids",
                )
            return np.array(ints, dtype=dtype)
        if dtype.kind == "b":
            if any(not isinstance(v, (bool, np.bool_)) for v in values):
                raise ValueError("not a boolean")
            return np.array(values, dtype=dtype)
        return np.array([float(v) for v in values], dtype=dtype)
    except (TypeError, ValueError) as exc:
        raise ClientError(
            f"value {value!r} is not valid for model '{model}' input '{spec.name}' ({spec.data_type}): {exc}",
            key=field_name,
        ) from None


def prepare_inputs(info: ModelInfo, fields: dict[str, Any]) -> dict[str, np.ndarray]:
    """Map request fields onto the model's inputs: ``{input name: array}`` with the model's dtypes and shapes.

    Shapes: a scalar becomes ``[1]``, a list ``[len]``; with ``max_batch_size > 0`` a leading 1 is added
    (``[1, 1]`` / ``[1, len]``). Required ``bad_words``/``stop_words`` of old ensembles are sent as ``[""]``.

    Raises:
        ClientError: a field the model has no input for, a value of the wrong type or range, or a required
            input missing (key = the field).
    """
    arrays: dict[str, np.ndarray] = {}
    for field_name, value in fields.items():
        if value is None:
            continue
        name = info.input_name(field_name)
        if name is None:
            raise ClientError(
                f"model '{info.name}' has no input for request field '{field_name}'",
                key=field_name,
                hint=f"its inputs are: {', '.join(sorted(info.inputs))}",
            )
        arr = _as_array(info.inputs[name], value, field_name, info.name)
        if info.max_batch_size > 0:
            arr = arr.reshape(1, -1)
        arrays[name] = arr
    for name, spec in info.inputs.items():
        if spec.optional or name in arrays:
            continue
        if name in _EMPTY_WHEN_REQUIRED:
            arr = np.array([b""], dtype=np.object_)
            arrays[name] = arr.reshape(1, -1) if info.max_batch_size > 0 else arr
        else:
            raise ClientError(f"model '{info.name}' requires input '{name}', which the request does not set", key=name)
    return arrays


def check_request(info: ModelInfo, fields: dict[str, Any]) -> None:
    """Client-side checks that do not depend on the endpoint.

    Raises:
        ClientError: ``beam_width`` > 1 with ``stream`` (B30); ``stream`` on a non-decoupled model (B29a);
            ``max_tokens`` not a positive integer; any numeric field outside its :data:`..runtime.limits.LIMITS`
            range, NaN or inf (``max_tokens`` 2**32 + 5, ``temperature`` 1e39), quoting the value given.
    """
    stream = bool(fields.get("stream"))
    beam = fields.get("beam_width")
    if stream and beam is not None and int(beam) > 1:
        raise ClientError(
            f"beam_width={beam} cannot be combined with stream=true: TensorRT-LLM streams only with a beam width of 1",
            key="beam_width",
            hint="set beam_width to 1 or turn streaming off",
        )
    if stream and not info.decoupled:
        raise ClientError(
            f"model '{info.name}' is not decoupled, so it cannot stream (the server would answer "
            "'Streaming is only supported if model is deployed using decoupled mode')",
            key="stream",
            hint="render the repository with streaming enabled, or send stream=false",
        )
    max_tokens = fields.get("max_tokens")
    if max_tokens is not None and (
        isinstance(max_tokens, bool) or not isinstance(max_tokens, (int, np.integer)) or int(max_tokens) <= 0
    ):
        raise ClientError(f"max_tokens must be a positive integer, got {max_tokens!r}", key="max_tokens")
    # the server's own limits (runtime/limits.py), checked here because Triton's HTTP front end wraps
    # integers that do not fit an INT32 input and turns reals beyond FP32 into inf before any model sees them
    for field_name, value in fields.items():
        spec = LIMITS.get(field_name)
        if spec is None or spec.field != field_name or value is None:
            continue
        for v in list(value) if isinstance(value, (list, tuple, np.ndarray)) else [value]:
            try:
                check(field_name, v)
            except RequestError as exc:
                raise ClientError(exc.message, key=field_name, hint=exc.hint) from None
