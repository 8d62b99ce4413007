"""Text and YAML values -> the typed values of the parameter schema (:mod:`.schema` ``Parameter.coerce``): integers,
floats, integer lists (``"1,2"``), groups (``"0,1;2,3"``), tuples (``"{0, 1}, {0, 2}"``), and the check that a text
can be written into config.pbtxt (:func:`check_text_value`). Each raises ValueError saying what was expected.
"""

from __future__ import annotations

import math
import re
from typing import Any

# INT32_MAX: the largest integer a parameter without an explicit ``max`` takes (the backends parse integer
# parameters with ``std::stoi``; Triton's structural fields max_batch_size, count, max_queue_size are 32-bit).
# FLOAT32_MAX: the largest float parameter (the C++ backend parses them with ``std::stof``).
from ..runtime.numeric_ranges import FLOAT32_MAX, INT32_MAX  # noqa: F401  (re-exported)

# ---------------------------------------------------------------------- conversions

#: How each parameter type reads in messages ("expected an integer").
TYPE_TEXT = {
    "int": "an integer",
    "float": "a number",
    "bool": "a boolean (true/false)",
    "str": "a string",
    "path": "a path",
    "enum": "one of the allowed values",
    "dtype": "a Triton data type",
    "int_list": 'a comma-separated list of integers ("1,2,3")',
    "int_list_groups": 'integer lists separated by ";" ("0,1;2,3")',
    "int_tuples": 'brace groups of integers ("{0,0,0}, {0,1}")',
}


def check_text_value(text: str) -> str:
    """``text`` when it can be written into config.pbtxt as a parameter value; raises ValueError otherwise.

    Refused: text that is not valid UTF-8 (a lone surrogate, as Python decodes undecodable bytes of argv or
    file names), and text holding ``${``: NVIDIA's ``fill_template.py``, the backends and ``repo-builder
    validate`` read ``${...}`` as an unfilled template placeholder, so the value would count as unset.
    """
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(f"{text!r} is not valid UTF-8 (config.pbtxt is UTF-8 text)") from None
    if "${" in text:
        raise ValueError(
            f"{text!r} holds '${{', which Triton's tooling reads as an unfilled placeholder "
            "(the backends would treat the value as unset); remove it, or rename the path"
        )
    return text


def number_text(value: float) -> str:
    return repr(value) if isinstance(value, float) else str(value)


def to_int(value: Any) -> int:
    if isinstance(value, bool):
        raise ValueError(f"expected an integer, got {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            pass
    raise ValueError(f"expected an integer, got {value!r}")


def to_float(value: Any) -> float:
    if isinstance(value, bool):
        raise ValueError(f"expected a number, got {value!r}")
    if isinstance(value, (int, float)):
        out = float(value)
    elif isinstance(value, str):
        try:
            out = float(value.strip())
        except ValueError:
            raise ValueError(f"expected a number, got {value!r}") from None
    else:
        raise ValueError(f"expected a number, got {value!r}")
    if not math.isfinite(out):
        raise ValueError(f"expected a finite number, got {value!r}")
    return out


def ints_from_text(text: str, what: str) -> list[int]:
    parts = [p.strip() for p in text.split(",")]
    if any(p == "" for p in parts):
        raise ValueError(f"expected {what}, got {text!r} (empty item)")
    try:
        return [int(p) for p in parts]
    except ValueError:
        raise ValueError(f"expected {what}, got {text!r}") from None


def to_int_list(value: Any) -> list[int]:
    what = TYPE_TEXT["int_list"]
    if isinstance(value, str):
        return ints_from_text(value, what)
    if isinstance(value, (list, tuple)):
        try:
            return [to_int(v) for v in value]
        except ValueError:
            raise ValueError(f"expected {what}, got {value!r}") from None
    return [to_int(value)]


def to_groups(value: Any) -> list[list[int]]:
    what = TYPE_TEXT["int_list_groups"]
    if isinstance(value, str):
        return [ints_from_text(group, what) for group in value.split(";")]
    if isinstance(value, (list, tuple)):
        if all(isinstance(v, (list, tuple)) for v in value) and value:
            return [to_int_list(v) for v in value]
        return [to_int_list(list(value))]
    return [[to_int(value)]]


TUPLE_RE = re.compile(r"\{([^{}]*)\}")


def to_tuples(value: Any) -> list[list[int]]:
    what = TYPE_TEXT["int_tuples"]
    if isinstance(value, str):
        text = value.strip()
        groups = TUPLE_RE.findall(text)
        rest = TUPLE_RE.sub("", text).replace(",", "").strip()
        if not groups or rest:
            raise ValueError(f"expected {what}, got {value!r}")
        return [ints_from_text(g, what) for g in groups]
    if isinstance(value, (list, tuple)) and value and all(isinstance(v, (list, tuple)) for v in value):
        return [to_int_list(v) for v in value]
    raise ValueError(f"expected {what}, got {value!r}")
