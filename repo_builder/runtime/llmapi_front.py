"""The text front doors of the llmapi profile (``ensemble`` and ``tensorrt_llm_bls``), free of Triton imports.

Both are Python-backend models with the text inputs and outputs of the engine profiles' ensemble (NVIDIA's
``inflight_batcher_llm`` names: ``text_input``, ``max_tokens``, ``stream``, ``stop_words``, ``top_k``, ...,
``text_output``, ``num_input_tokens``, ...; ``model_templates/llmapi-1.2/contract.yaml``). Each request is
forwarded, as one BLS call, to the llmapi ``tensorrt_llm`` model under its own input names (NVIDIA/TensorRT-LLM
v1.2.1 ``triton_backend/all_models/llmapi/``: ``text_input``, ``sampling_param_max_tokens``, ``streaming``,
...), and its responses are turned back into the ensemble's:

* text: the llmapi model streams the whole text so far (cumulative, as the LLM API does); the front door sends
  what is new in each response (a delta, as the engine ensemble streams), holding back a trailing U+FFFD (an
  incomplete UTF-8 character the next token completes). Streaming never echoes the prompt (as the engine
  ensemble); a non-streaming answer echoes it unless ``exclude_input_in_output`` is true (the ensemble's
  default, and the llmapi model's).
* renames: ``max_tokens`` -> ``sampling_param_max_tokens``, ``stream`` -> ``streaming``, ``stop_words`` ->
  ``sampling_param_stop`` (strings; the LLM API cuts the text before the stop string), ``top_k`` / ``top_p`` /
  ``temperature`` / ``presence_penalty`` / ``frequency_penalty`` / ``seed`` (or ``random_seed``) ->
  ``sampling_param_*``, ``return_perf_metrics`` -> ``sampling_param_return_perf_metrics``,
  ``return_log_probs`` -> ``return_cumulative_logprob`` (``cum_log_probs``; there are no per-token log-probs
  in the llmapi contract, so ``output_log_probs`` is not declared), ``return_num_input_tokens`` /
  ``return_num_output_tokens`` -> the same (repo-builder's inputs of the llmapi model).
* inputs the llmapi contract cannot honour are declared, so clients that send them with their neutral value
  work unchanged, and refused otherwise with an error naming the input: ``num_return_sequences`` and
  ``beam_width`` other than 1, non-empty ``bad_words``, ``end_id`` (the LLM API stops at the tokenizer's EOS),
  ``repetition_penalty`` other than 1, ``min_tokens`` / ``min_length`` above 1, ``return_context_logits`` /
  ``return_generation_logits`` true. ``pad_id`` and ``length_penalty`` (beam search only) change nothing for
  one sequence and are accepted.

Tensors here are numpy arrays; the front doors' have the batch dimension first (``max_batch_size`` 1), the
llmapi model's have none (its ``max_batch_size`` is 0).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .errors import RequestError

#: The llmapi model the front doors call (config parameter ``tensorrt_llm_model_name``).
ENGINE_MODEL = "tensorrt_llm"
#: Front-door input -> (llmapi input, numpy dtype of the llmapi input).
RENAMES: dict[str, tuple[str, Any]] = {
    "max_tokens": ("sampling_param_max_tokens", np.int32),
    "top_k": ("sampling_param_top_k", np.int32),
    "top_p": ("sampling_param_top_p", np.float32),
    "temperature": ("sampling_param_temperature", np.float32),
    "presence_penalty": ("sampling_param_presence_penalty", np.float32),
    "frequency_penalty": ("sampling_param_frequency_penalty", np.float32),
    "seed": ("sampling_param_seed", np.uint64),
    "random_seed": ("sampling_param_seed", np.uint64),
    "return_perf_metrics": ("sampling_param_return_perf_metrics", np.bool_),
    "return_log_probs": ("return_cumulative_logprob", np.bool_),
    "return_num_input_tokens": ("return_num_input_tokens", np.bool_),
    "return_num_output_tokens": ("return_num_output_tokens", np.bool_),
}
#: Inputs accepted only with a neutral value: name -> (is neutral, what is accepted).
NEUTRAL: dict[str, tuple[Any, str]] = {
    "num_return_sequences": (lambda v: int(v) == 1, "1 (the llmapi model returns one sequence)"),
    "beam_width": (lambda v: int(v) == 1, "1 (the llmapi model of TensorRT-LLM 1.2.1 has no beam search input)"),
    "end_id": (lambda v: False, "not sent (the LLM API stops at the tokenizer's EOS)"),
    "repetition_penalty": (lambda v: float(v) == 1.0, "1.0 (the llmapi contract has no repetition penalty)"),
    "min_tokens": (lambda v: int(v) <= 1, "at most 1 (the llmapi contract has no minimum length)"),
    "min_length": (lambda v: int(v) <= 1, "at most 1 (the llmapi contract has no minimum length)"),
    "return_context_logits": (lambda v: not bool(v), "false (the llmapi contract returns no logits)"),
    "return_generation_logits": (lambda v: not bool(v), "false (the llmapi contract returns no logits)"),
}
#: Accepted and not forwarded: no effect on one greedy or sampled sequence.
IGNORED = ("pad_id", "length_penalty")
#: llmapi perf-metric output -> front-door output (the ensemble's names).
PERF_OUTPUTS = {
    "kv_cache_alloc_new_blocks": "kv_cache_alloc_new_blocks",
    "kv_cache_reused_block": "kv_cache_reused_blocks",
    "kv_cache_alloc_total_blocks": "kv_cache_alloc_total_blocks",
    "arrival_time_ns": "arrival_time_ns",
    "first_scheduled_time_ns": "first_scheduled_time_ns",
    "first_token_time_ns": "first_token_time_ns",
    "last_token_time_ns": "last_token_time_ns",
    "acceptance_rate": "acceptance_rate",
    "total_accepted_draft_tokens": "total_accepted_draft_tokens",
    "total_draft_tokens": "total_draft_tokens",
}
_PASSED = {"num_input_tokens": "num_input_tokens", "num_output_tokens": "num_output_tokens"}
_PERF_DTYPES = {"acceptance_rate": np.float32}
_TIMES = ("arrival_time_ns", "first_scheduled_time_ns", "first_token_time_ns", "last_token_time_ns")


def _row(tensors: Mapping[str, np.ndarray], name: str) -> np.ndarray | None:
    """Input ``name`` of a front-door request (batch dimension first) as a flat array of its one row."""
    arr = tensors.get(name)
    if arr is None:
        return None
    arr = np.asarray(arr)
    if arr.ndim >= 1 and arr.shape[0] != 1:
        raise RequestError(name, f"one request per call: batch size {arr.shape[0]}, expected 1")
    return arr.reshape(-1)


def _scalar(tensors: Mapping[str, np.ndarray], name: str) -> Any:
    flat = _row(tensors, name)
    if flat is None or flat.size == 0:
        return None
    if flat.size != 1:
        raise RequestError(name, f"expected one value, got {flat.size}")
    return flat[0].item() if hasattr(flat[0], "item") else flat[0]


def _words(tensors: Mapping[str, np.ndarray], name: str) -> list[str]:
    """A word list input (BYTES ``[-1]``): the non-empty strings, each element split at commas as NVIDIA's
    preprocessing reads them (``"a,b"`` is two words)."""
    flat = _row(tensors, name)
    if flat is None:
        return []
    words: list[str] = []
    for item in flat:
        raw = item.decode("utf-8", errors="strict") if isinstance(item, bytes) else str(item)
        words.extend(w for w in raw.split(",") if w)
    return words


@dataclass
class FrontPlan:
    """One front-door request as a call of the llmapi model.

    Attributes:
        inputs: the llmapi model's inputs ({name: array without a batch dimension}).
        outputs: the llmapi outputs to ask for.
        stream: the client asked for streaming (``stream``); deltas are sent.
        engine_streams: the llmapi call streams (``streaming``): when the client streams, or when the llmapi
            model is decoupled (so that a cancelled request stops between tokens).
    """

    inputs: dict[str, np.ndarray]
    outputs: list[str]
    stream: bool
    engine_streams: bool


def plan_request(tensors: Mapping[str, np.ndarray], *, decoupled: bool, engine_decoupled: bool) -> FrontPlan:
    """The llmapi call for a front-door request ({input name: array, batch dimension first}).

    Args:
        decoupled: the front door is decoupled (``stream`` true needs it).
        engine_decoupled: the llmapi model is decoupled (its ``streaming`` needs it).
    Raises:
        RequestError: naming the input: ``text_input`` missing or empty, ``max_tokens`` missing or below 1,
            ``stream`` on a non-decoupled front door, a batch of more than one request, an input of
            :data:`NEUTRAL` with another value (the message says what is accepted), a bad stop word.
    """
    prompt = _scalar(tensors, "text_input")
    if prompt is None:
        raise RequestError("text_input", "is required (the prompt)")
    text = prompt.decode("utf-8", errors="replace") if isinstance(prompt, bytes) else str(prompt)
    if not text:
        raise RequestError("text_input", "is empty")
    max_tokens = _scalar(tensors, "max_tokens")
    if max_tokens is None:
        raise RequestError("max_tokens", "is required (the number of tokens to generate)")
    if int(max_tokens) < 1:
        raise RequestError("max_tokens", f"must be at least 1, got {max_tokens}")
    stream = bool(_scalar(tensors, "stream") or False)
    if stream and not decoupled:
        raise RequestError(
            "stream", "needs the decoupled model: render with --streaming (triton_config.decoupled: true)"
        )
    for name, (neutral, accepted) in NEUTRAL.items():
        value = _scalar(tensors, name)
        if value is not None and not neutral(value):
            raise RequestError(name, f"{value} cannot be served by the llmapi model; accepted: {accepted}")
    if _words(tensors, "bad_words"):
        raise RequestError("bad_words", "cannot be served by the llmapi model (its contract has no bad words)")
    engine_streams = stream or engine_decoupled
    inputs: dict[str, np.ndarray] = {"text_input": np.array([text.encode("utf-8")], dtype=np.object_)}
    for name, (target, dtype) in RENAMES.items():
        value = _scalar(tensors, name)
        if value is None or (name == "random_seed" and "sampling_param_seed" in inputs):
            continue
        try:
            inputs[target] = np.array([value], dtype=dtype)
        except (OverflowError, ValueError, TypeError):
            raise RequestError(name, f"{value!r} does not fit {np.dtype(dtype).name}") from None
    exclude = bool(_scalar(tensors, "exclude_input_in_output") or False)
    inputs["sampling_param_exclude_input_from_output"] = np.array([stream or exclude], dtype=np.bool_)
    inputs["streaming"] = np.array([engine_streams], dtype=np.bool_)
    inputs["return_finish_reason"] = np.array([True], dtype=np.bool_)
    try:
        stops = _words(tensors, "stop_words")
    except UnicodeDecodeError:
        raise RequestError("stop_words", "is not valid UTF-8") from None
    if stops:
        inputs["sampling_param_stop"] = np.array([w.encode("utf-8") for w in stops], dtype=np.object_)
    outputs = ["text_output", "finish_reason"]
    if "return_cumulative_logprob" in inputs and bool(inputs["return_cumulative_logprob"][0]):
        outputs.append("cumulative_logprob")
    for flag in ("return_num_input_tokens", "return_num_output_tokens"):
        if flag in inputs and bool(inputs[flag][0]):
            outputs.append(flag.replace("return_", ""))
    if "sampling_param_return_perf_metrics" in inputs and bool(inputs["sampling_param_return_perf_metrics"][0]):
        outputs.extend(PERF_OUTPUTS)
    return FrontPlan(inputs=inputs, outputs=outputs, stream=stream, engine_streams=engine_streams)


def front_message(message: str) -> str:
    """An llmapi model's error message in the front door's terms: ``'sampling_param_max_tokens'`` becomes
    ``'max_tokens'`` and so on (the client sent the front door's names)."""
    for name, (target, _) in RENAMES.items():
        if name != "random_seed":
            message = message.replace(f"'{target}'", f"'{name}'")
    return message.replace("'streaming'", "'stream'").replace("'sampling_param_stop'", "'stop_words'")


def _text_of(tensors: Mapping[str, np.ndarray]) -> str:
    arr = tensors.get("text_output")
    if arr is None:
        return ""
    flat = np.asarray(arr).reshape(-1)
    if flat.size == 0:
        return ""
    item = flat[0]
    return item.decode("utf-8", errors="replace") if isinstance(item, bytes) else str(item)


def _first(tensors: Mapping[str, np.ndarray], name: str) -> Any:
    flat = np.asarray(tensors[name]).reshape(-1)
    return flat[0] if flat.size else 0


@dataclass
class FrontResponder:
    """Turns the llmapi model's responses of one request into front-door responses.

    ``convert(tensors)`` -> (outputs or None when there is nothing to send yet, final): ``final`` is true for
    the response whose ``finish_reason`` is set (the llmapi model's last). Streaming: each ``text_output`` is
    what is new since the previous one and ``num_output_tokens`` the tokens since the previous one (NVIDIA's
    backend counts per response in a stream; the llmapi model counts all so far); otherwise the whole (last)
    text and count, sent once with the final flag.
    """

    stream: bool
    emitted: str = ""
    counted: int = 0
    last: dict[str, np.ndarray] = field(default_factory=dict)

    def convert(self, tensors: Mapping[str, np.ndarray]) -> tuple[dict[str, np.ndarray] | None, bool]:
        text = _text_of(tensors)
        reason = _text_of({"text_output": tensors["finish_reason"]}) if "finish_reason" in tensors else "None"
        final = reason not in ("", "None")
        out: dict[str, np.ndarray] = {}
        if "cumulative_logprob" in tensors:
            out["cum_log_probs"] = np.array([[float(_first(tensors, "cumulative_logprob"))]], dtype=np.float32)
        for src, dst in _PASSED.items():
            if src in tensors:
                out[dst] = np.array([[int(_first(tensors, src))]], dtype=np.int32)
        for src, dst in PERF_OUTPUTS.items():
            if src in tensors:
                value = _first(tensors, src)
                dtype = np.int64 if src in _TIMES else _PERF_DTYPES.get(src, np.int32)
                out[dst] = np.array([[value]], dtype=dtype)
        out["batch_index"] = np.zeros((1, 1), dtype=np.int32)
        out["sequence_index"] = np.zeros((1, 1), dtype=np.int32)
        if not self.stream:
            out["text_output"] = np.array([[text.encode("utf-8")]], dtype=np.object_)
            self.last = out
            return (out, True) if final else (None, False)
        visible = text if final else text.rstrip("\ufffd")
        if visible.startswith(self.emitted):
            delta = visible[len(self.emitted) :]
        else:  # the LLM re-decoded earlier text (should not happen): send only what follows the common prefix
            common = 0
            for a, b in zip(visible, self.emitted, strict=False):
                if a != b:
                    break
                common += 1
            delta = visible[max(common, len(self.emitted)) :] if len(visible) > len(self.emitted) else ""
        if not delta and not final:
            return None, False
        self.emitted += delta
        if "num_output_tokens" in out:  # per response in a stream, as NVIDIA's backend counts (the sum is the total)
            total = int(out["num_output_tokens"][0, 0])
            out["num_output_tokens"] = np.array([[total - self.counted]], dtype=np.int32)
            self.counted = total
        out["text_output"] = np.array([[delta.encode("utf-8")]], dtype=np.object_)
        return out, final

    def finish(self) -> dict[str, np.ndarray] | None:
        """What to send when the llmapi model's responses ended without a final one (a non-streaming answer
        cut short): the last text seen, else None (only the final flag)."""
        return self.last or None
