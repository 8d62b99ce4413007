"""One table of per-field request limits, read by preprocessing, postprocessing, the BLS and the engines.

Every numeric request field that a client sends has one :class:`Limit` here: its kind (integer or real),
the range it must lie in, the name the client uses (the ensemble/BLS input, e.g. ``top_p``) and the
name of the ``tensorrt_llm`` input it reaches (``runtime_top_p``). :func:`check` applies it and raises
:class:`~.errors.RequestError` naming the client's field, the value received and the range, so every
model refuses a value with the same words.

What the models can and cannot see (tritonserver 2.51, ``http_server.cc`` ``ReadDataFromJsonHelper``):
Triton's HTTP front end reads a JSON integer into int64 and casts it to the input's type without a bounds
check, and a JSON real into a double cast to float. So ``max_tokens: 4294967301`` (2^32 + 5) reaches an
INT32 input as 5, and 10^12 as -727379968; 1e39 reaches an FP32 input as inf. A model cannot tell a wrapped
value from one that was sent; repo-builder's client (``repo_builder.client``) refuses out-of-range values
before sending, and a negative value that reaches a model names the INT32 range in its hint. Values a
model sees out of range (negative, zero where not allowed, NaN, inf, above the field's maximum) are refused.

Sources of the ranges: TensorRT-LLM's ``SamplingConfig`` checks (``executor/samplingConfig.cpp``:
``beamWidth > 0``, ``topK >= 0``, ``topP in [0, 1]``, ``temperature >= 0``, ``repetitionPenalty > 0``,
``minTokens >= 0``, ``numReturnSequences > 0``, ``topPDecay in (0, 1]``, ``topPMin in (0, 1]``) and the
tensor dtypes of ``model_templates/<profile>/contract.yaml``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from .errors import RequestError
from .numeric_ranges import FLOAT32_MAX as FP32_MAX  # anything larger sent as JSON arrives as inf
from .numeric_ranges import INT32_MAX, UINT64_MAX

WRAP_HINT = (
    f"integers above {INT32_MAX} do not fit this INT32 input and Triton's HTTP front end wraps them "
    "without an error, so a value you did not send may show here; send a value within the range"
)


@dataclass(frozen=True)
class Limit:
    """The range of one request field.

    Attributes:
        field: the client-facing name (ensemble / BLS input).
        kind: ``"int"`` or ``"float"`` (floats must be finite).
        low, high: inclusive bounds (``None`` = unbounded); ``low_open``: ``low`` itself is refused.
        engine: the ``tensorrt_llm`` input the value reaches (for messages from the engine).
        hint: how to fix a refused value.
    """

    field: str
    kind: str
    low: float | None
    high: float | None
    low_open: bool = False
    engine: str | None = None
    hint: str = ""

    def describe(self) -> str:
        """The allowed range in words, e.g. ``an integer within [1, 2147483647]``."""
        what = "an integer" if self.kind == "int" else "a finite number"
        if self.low is not None and self.high is not None:
            return f"{what} within {'(' if self.low_open else '['}{_num(self.low)}, {_num(self.high)}]"
        if self.low is not None:
            return f"{what} {'>' if self.low_open else '>='} {_num(self.low)}"
        if self.high is not None:
            return f"{what} <= {_num(self.high)}"
        return what


def _num(x: float) -> str:
    if isinstance(x, int):
        return str(x)
    return str(int(x)) if x.is_integer() and abs(x) < 1e15 else f"{x:g}"


def _limits(*entries: Limit) -> dict[str, Limit]:
    table: dict[str, Limit] = {}
    for entry in entries:
        table[entry.field] = entry
        if entry.engine and entry.engine != entry.field:
            table[entry.engine] = entry
    return table


#: Every numeric request field, by client name and by ``tensorrt_llm`` input name.
LIMITS: dict[str, Limit] = _limits(
    Limit(
        "max_tokens",
        "int",
        1,
        INT32_MAX,
        engine="request_output_len",
        hint="send the number of tokens to generate, at least 1",
    ),
    Limit(
        "num_return_sequences",
        "int",
        1,
        INT32_MAX,
        engine="num_return_sequences",
        hint="send 1 (or leave it out) for one sequence per prompt",
    ),
    Limit("beam_width", "int", 1, INT32_MAX, engine="beam_width", hint="send 1 for sampling or greedy decoding"),
    Limit("top_k", "int", 0, INT32_MAX, engine="runtime_top_k", hint="0 switches top-k sampling off"),
    Limit("top_p", "float", 0.0, 1.0, engine="runtime_top_p", hint="0 switches top-p sampling off"),
    Limit("runtime_top_p_min", "float", 0.0, 1.0, low_open=True),
    Limit("runtime_top_p_decay", "float", 0.0, 1.0, low_open=True),
    Limit("temperature", "float", 0.0, FP32_MAX, engine="temperature", hint="0 means greedy decoding"),
    Limit(
        "repetition_penalty",
        "float",
        0.0,
        FP32_MAX,
        low_open=True,
        engine="repetition_penalty",
        hint="1 means no penalty",
    ),
    Limit("presence_penalty", "float", -FP32_MAX, FP32_MAX, engine="presence_penalty", hint="0 means no penalty"),
    Limit("frequency_penalty", "float", -FP32_MAX, FP32_MAX, engine="frequency_penalty", hint="0 means no penalty"),
    Limit("length_penalty", "float", -FP32_MAX, FP32_MAX, engine="len_penalty", hint="1 means no penalty"),
    Limit("beam_search_diversity_rate", "float", 0.0, FP32_MAX, engine="beam_search_diversity_rate"),
    Limit("min_tokens", "int", 0, INT32_MAX, engine="min_tokens", hint="0 means no minimum"),
    Limit("min_length", "int", 0, INT32_MAX, hint="0 means no minimum"),  # trtllm-0.5's min_tokens
    Limit("seed", "int", 0, UINT64_MAX, engine="seed"),
    Limit("random_seed", "int", 0, UINT64_MAX),  # trtllm-0.5's seed
    Limit("end_id", "int", -1, INT32_MAX, engine="end_id", hint="a token id of the vocabulary, or -1 for none"),
    Limit("pad_id", "int", 0, INT32_MAX, engine="pad_id", hint="a token id of the vocabulary"),
    Limit("prompt_table_extra_id", "int", 0, UINT64_MAX, engine="prompt_table_extra_ids"),
    Limit("embedding_bias_weights", "float", -FP32_MAX, FP32_MAX, engine="embedding_bias"),
    Limit("draft_acceptance_threshold", "float", 0.0, FP32_MAX),
    Limit("lora_task_id", "int", 0, UINT64_MAX),
)


def limit(name: str) -> Limit:
    """The :class:`Limit` of ``name`` (client or engine name). Raises ``KeyError`` for an unknown field."""
    return LIMITS[name]


def check(
    name: str, value: Any, *, field: str | None = None, high: float | None = None, high_reason: str = ""
) -> int | float:
    """Check one value against ``LIMITS[name]`` and return it as ``int`` or ``float``.

    Args:
        name: the client or engine name of the field.
        value: a Python or numpy scalar.
        field: the name to put in the message (default: the client's name from the table).
        high: a tighter upper bound known at run time (e.g. ``max_beam_width``), with ``high_reason``.
    Raises:
        RequestError: not a number of the right kind, NaN/inf, or out of range; names the field, the value
            received and the allowed range.
    """
    spec = LIMITS[name]
    shown = field or spec.field
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise RequestError(shown, f"must be {spec.describe()}, got {value!r}", spec.hint or None)
    if spec.kind == "int":
        if isinstance(value, float):
            if not value.is_integer():
                raise RequestError(shown, f"must be an integer, got {value!r}", spec.hint or None)
            value = int(value)
    else:
        value = float(value)
        if math.isnan(value):
            raise RequestError(shown, f"must be {spec.describe()}, got NaN", spec.hint or None)
        if math.isinf(value):
            raise RequestError(
                shown,
                f"must be {spec.describe()}, got {'-' if value < 0 else ''}inf (values beyond "
                f"±{FP32_MAX:.4g} do not fit this FP32 input and arrive as inf)",
                spec.hint or None,
            )
    too_low = spec.low is not None and (value <= spec.low if spec.low_open else value < spec.low)
    if too_low or (spec.high is not None and value > spec.high):
        hint = spec.hint
        if spec.kind == "int" and value < 0 and spec.high == INT32_MAX:
            hint = f"{hint}; {WRAP_HINT}" if hint else WRAP_HINT
        raise RequestError(shown, f"must be {spec.describe()}, got {_num(value)}", hint or None)
    if high is not None and value > high:
        raise RequestError(shown, f"{_num(value)} exceeds {high_reason or _num(high)}", spec.hint or None)
    return value


def check_token_ids(field: str, ids: np.ndarray, vocab_size: int | None) -> None:
    """Refuse token ids below 0 or at/above ``vocab_size`` (when known), naming the first bad one.

    Raises:
        RequestError: names ``field``, the id and its position.
    """
    a = np.asarray(ids)
    if a.size == 0:
        return
    if a.dtype.kind not in "iub":
        raise RequestError(field, f"must hold integer token ids, got dtype {a.dtype}")
    bad = (a < 0) if vocab_size is None else ((a < 0) | (a >= vocab_size))
    if bad.any():
        pos = tuple(int(i) for i in np.argwhere(bad)[0])
        window = f"[0, {vocab_size})" if vocab_size is not None else ">= 0"
        raise RequestError(
            field,
            f"token id {int(a[pos])} at position {list(pos)} is outside the vocabulary {window}",
            "send token ids the tokenizer produced",
        )
