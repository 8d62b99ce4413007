"""The ``tensorrt_llm`` request parser for Python engines and its limits: the model config's inputs and
outputs (:class:`ModelIO`), what the engine accepts (:class:`EngineLimits`), and one Triton request turned
into per-row :class:`GenerationRequest` s (:func:`parse_request`). Semantics: see :mod:`.engine_core`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from . import errors
from .errors import EngineLoadError  # noqa: F401  (re-exported: the engines import it from here)
from .limits import LIMITS, check
from .triton_io import IOSpec

# --------------------------------------------------------------------------------------------------
# Model config I/O


class RequestError(errors.RequestError):
    """A request to the engine is invalid; ``field`` is the ``tensorrt_llm`` input at fault.

    Only the offending request fails; the other requests keep going. The message reads
    ``tensorrt_llm: input '<field>': <message>`` (the engine's inputs are not the client's field names).
    """

    def __str__(self) -> str:
        return f"tensorrt_llm: input '{self.field}': {self.message}" + (f" (hint: {self.hint})" if self.hint else "")


def _checked(name: str, value: Any, **kwargs: Any) -> Any:
    """:func:`.limits.check` under the engine input's name, mentioning the client's name when it differs."""
    spec = LIMITS[name]
    try:
        return check(name, value, field=name, **kwargs)
    except errors.RequestError as exc:
        alias = f" ({spec.field} in the ensemble and BLS)" if spec.field != name else ""
        raise RequestError(name, f"{exc.message}{alias}", exc.hint) from None


@dataclass(frozen=True)
class ModelIO:
    """The inputs and outputs declared in a model config (``args["model_config"]``), in order."""

    inputs: dict[str, IOSpec]
    outputs: dict[str, IOSpec]

    @classmethod
    def from_config(cls, config: Mapping[str, Any] | str) -> ModelIO:
        """Read ``input``/``output`` entries (``name``, ``data_type``, ``dims``, ``optional``)."""
        cfg = json.loads(config) if isinstance(config, str) else config

        def specs(key: str) -> dict[str, IOSpec]:
            out: dict[str, IOSpec] = {}
            for entry in cfg.get(key, []) or []:
                dims = tuple(int(d) for d in entry.get("dims", []))
                out[entry["name"]] = IOSpec(
                    entry["name"], str(entry.get("data_type", "TYPE_FP32")), dims, bool(entry.get("optional", False))
                )
            return out

        return cls(specs("input"), specs("output"))

    def input_name(self, *candidates: str) -> str | None:
        """The first of ``candidates`` the config declares (e.g. ``min_tokens`` vs 0.5's ``min_length``)."""
        for name in candidates:
            if name in self.inputs:
                return name
        return None


# --------------------------------------------------------------------------------------------------
# Requests

#: Inputs of the contract the Python engines cannot honour; a request that carries them (non-empty, or
#: true for flags) fails with an error naming the input.
UNSUPPORTED_INPUTS: tuple[str, ...] = (
    "lora_task_id",
    "lora_weights",
    "lora_config",
    "prompt_embedding_table",
    "draft_input_ids",
    "draft_logits",
    "encoder_input_features",
    "cross_attention_mask",
    "mrope_rotary_cos_sin",
    "mrope_position_deltas",
    "context_phase_params",
    "guided_decoding_guide_type",
    "guided_decoding_guide",
    "lookahead_window_size",
    "lookahead_ngram_size",
    "lookahead_verification_set_size",
)
# ``decoder_input_ids``/``decoder_input_lengths`` are accepted and ignored: the engines here are decoder-only,
# and NVIDIA's end_to_end_test.py (v0.19.0) forwards preprocessing's DECODER_INPUT_ID placeholder
# ([[pad_id]], length 1) to tensorrt_llm on every request.

#: Boolean inputs whose ``true`` value asks for something the Python engines do not compute.
UNSUPPORTED_FLAGS: tuple[str, ...] = ("return_context_logits", "return_generation_logits", "skip_cross_attn_blocks")


@dataclass(frozen=True)
class EngineLimits:
    """What the engine accepts (tokens), from config.pbtxt parameters or the engine dir.

    ``max_input_len``/``max_seq_len`` are the TRT-LLM build limits (``max_seq_len`` = prompt + output);
    ``max_beam_width`` is the parameter of the same name; ``exclude_input_in_output`` is the model
    parameter's default; ``decoupled`` is the model transaction policy.
    """

    vocab_size: int
    max_input_len: int
    max_seq_len: int
    max_beam_width: int = 1
    exclude_input_in_output: bool = False
    decoupled: bool = True


@dataclass(frozen=True)
class SamplingParams:
    """Per-request sampling configuration (``None`` = not given)."""

    temperature: float | None = None
    top_k: int | None = None
    top_p: float | None = None
    repetition_penalty: float | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    min_tokens: int = 0
    seed: int | None = None

    @property
    def greedy(self) -> bool:
        """True for greedy decoding: no top_k/top_p (or both 0), top_k == 1, or temperature 0."""
        if self.temperature is not None and self.temperature <= 0.0:
            return True
        if self.top_k == 1:
            return True
        return (self.top_k in (None, 0)) and (self.top_p is None or self.top_p <= 0.0)


@dataclass
class GenerationRequest:
    """One sequence to generate (one batch row of a Triton request).

    ``prompt`` are token ids; ``max_new_tokens`` is in tokens (already clamped to ``max_seq_len``);
    ``stop_words``/``bad_words`` are lists of token-id sequences; ``embedding_bias`` is FP32 ``[vocab]``.
    """

    prompt: list[int]
    max_new_tokens: int
    end_id: int | None = None
    pad_id: int | None = None
    stop_words: list[list[int]] = field(default_factory=list)
    bad_words: list[list[int]] = field(default_factory=list)
    embedding_bias: np.ndarray | None = None
    sampling: SamplingParams = field(default_factory=SamplingParams)
    return_log_probs: bool = False
    exclude_input_in_output: bool = False
    streaming: bool = False
    batch_index: int = 0
    request_id: str = ""
    #: rows of the Triton request this row belongs to (``batch_index`` is only sent when > 1)
    batch_size: int = 1
    return_perf_metrics: bool = False
    return_num_input_tokens: bool = False
    return_num_output_tokens: bool = False


@dataclass
class ParsedRequest:
    """A Triton request after parsing: its rows, or a ``stop`` command for ``request_id``."""

    rows: list[GenerationRequest]
    request_id: str = ""
    streaming: bool = False
    stop: bool = False


def _rows(arr: np.ndarray, batch: int) -> np.ndarray:
    """``arr`` as ``[batch, -1]`` (scalars per row become ``[batch, 1]``)."""
    return np.asarray(arr).reshape(batch, -1)


def _scalar(tensors: Mapping[str, np.ndarray], name: str | None, row: int, batch: int) -> Any:
    if name is None or name not in tensors:
        return None
    arr = np.asarray(tensors[name])
    if arr.size == 0:
        return None
    flat = arr.reshape(-1)
    if flat.size == batch:
        return flat[row].item()
    if flat.size == 1:
        return flat[0].item()
    return _rows(arr, batch)[row][0].item()


def parse_word_list(arr: np.ndarray | None, field_name: str) -> list[list[int]]:
    """Decode one row of a TRT-LLM word list: ``[2, N]`` INT32, row 0 the concatenated ids, row 1 the
    cumulative end offsets (-1 padding). Returns the words as id lists; raises RequestError naming
    ``field_name`` for a malformed list."""
    if arr is None:
        return []
    a = np.asarray(arr)
    if a.size == 0:
        return []
    if a.ndim == 3 and a.shape[0] == 1:
        a = a[0]
    if a.ndim != 2 or a.shape[0] != 2:
        raise RequestError(field_name, f"expected shape [2, N] (ids row, offsets row), got {list(a.shape)}")
    ids = a[0].tolist()
    words: list[list[int]] = []
    start = 0
    for off in a[1].tolist():
        if off < 0:
            break
        if off < start or off > len(ids):
            raise RequestError(
                field_name,
                f"offsets must be cumulative end offsets within {len(ids)} ids, got {[int(x) for x in a[1]]}",
            )
        if off > start:
            words.append(ids[start:off])
        start = off
    return words


def _present(tensors: Mapping[str, np.ndarray], name: str) -> bool:
    if name not in tensors:
        return False
    arr = tensors[name]
    try:
        a = np.asarray(arr)
    except Exception:  # noqa: BLE001 - an unconvertible tensor (e.g. BF16) still counts as given
        return True
    if a.size == 0:
        return False
    if a.dtype == np.bool_:
        return bool(a.any())
    if a.dtype == np.object_:
        return any(bool(x) for x in a.reshape(-1))
    return True


# Over 80 lines on purpose: one pass over a request's tensors per batch row, each field checked where it is read
# (RequestError naming it); split, the parts would hand the row's dozen parsed values back and forth.
def parse_request(
    tensors: Mapping[str, np.ndarray], io: ModelIO, limits: EngineLimits, *, request_id: str = ""
) -> ParsedRequest:
    """Turn the input tensors of one Triton request into :class:`GenerationRequest` rows.

    Args:
        tensors: input name -> numpy array as Triton delivers them (batch dim first; ``input_ids``
            ``[B, L]`` INT32, scalars ``[B]`` or ``[B, 1]``; 0.5 integer inputs are UINT32).
        io: the model's declared inputs (decides ``min_tokens``/``min_length``, ``seed``/``random_seed``).
        limits: engine limits and defaults.
        request_id: the Triton request id (used by ``stop``).
    Raises:
        RequestError: naming the input at fault.
    """
    stop = bool(_scalar(tensors, "stop", 0, 1) or False)
    if stop:
        return ParsedRequest(rows=[], request_id=request_id, stop=True)
    for name in UNSUPPORTED_INPUTS:
        if _present(tensors, name):
            raise RequestError(
                name,
                "is not supported by the CPU reference/synthetic engine; "
                "remove it from the request (needs the TensorRT-LLM C++ backend)",
            )
    for name in UNSUPPORTED_FLAGS:
        if _present(tensors, name):
            raise RequestError(
                name, "= true is not supported by the CPU reference/synthetic engine; send false or leave it out"
            )
    if "input_ids" not in tensors or np.asarray(tensors["input_ids"]).size == 0:
        raise RequestError("input_ids", "is required and must hold at least one token id")
    ids = np.asarray(tensors["input_ids"])
    if ids.ndim == 1:
        ids = ids.reshape(1, -1)
    batch = ids.shape[0]
    ids = ids.reshape(batch, -1)
    if "request_output_len" not in tensors:
        raise RequestError("request_output_len", "is required")

    # trtllm-1.2 declares both the current names and the v0.5.0-v0.19.0 ones (min_length, random_seed):
    # the current name wins when a request sends both.
    min_name = next((n for n in ("min_tokens", "min_length") if n in tensors), None)
    seed_name = next((n for n in ("seed", "random_seed") if n in tensors), None)
    rows: list[GenerationRequest] = []
    streaming_any = False
    for b in range(batch):
        length = _scalar(tensors, "input_lengths", b, batch)
        row_ids = ids[b]
        if length is not None:
            length = int(length)
            if length <= 0 or length > row_ids.shape[0]:
                raise RequestError(
                    "input_lengths", f"{length} is not within 1..{row_ids.shape[0]} (the number of input_ids sent)"
                )
            row_ids = row_ids[:length]
        prompt = [int(x) for x in row_ids]
        bad = [t for t in prompt if t < 0 or t >= limits.vocab_size]
        if bad:
            raise RequestError("input_ids", f"token id {bad[0]} is outside the vocabulary [0, {limits.vocab_size})")
        if len(prompt) > limits.max_input_len:
            raise RequestError(
                "input_ids",
                f"prompt length {len(prompt)} exceeds max_input_len "
                f"{limits.max_input_len} (tokens); shorten the prompt",
            )
        if len(prompt) >= limits.max_seq_len:
            raise RequestError(
                "input_ids",
                f"prompt length {len(prompt)} leaves no room in max_seq_len "
                f"{limits.max_seq_len} (tokens); shorten the prompt",
            )
        out_len = _checked("request_output_len", _scalar(tensors, "request_output_len", b, batch))
        out_len = min(out_len, limits.max_seq_len - len(prompt))

        beam = _scalar(tensors, "beam_width", b, batch)
        beam = 1 if beam is None else _checked("beam_width", beam)
        streaming = bool(_scalar(tensors, "streaming", b, batch) or False)
        if beam > limits.max_beam_width:
            raise RequestError("beam_width", f"{beam} exceeds max_beam_width {limits.max_beam_width}")
        if beam > 1 and streaming:
            raise RequestError("beam_width", "streaming is only supported with beam_width 1")
        if beam != 1:
            raise RequestError(
                "beam_width",
                f"{beam}: beam search is not implemented by the CPU reference/synthetic engine; send beam_width 1",
            )
        nret = _scalar(tensors, "num_return_sequences", b, batch)
        if nret is not None and _checked("num_return_sequences", nret) > 1:
            raise RequestError("num_return_sequences", f"{int(nret)}: only 1 is supported by the CPU engine")
        if streaming and not limits.decoupled:
            raise RequestError(
                "streaming",
                "streaming is only supported if the model is deployed in "
                "decoupled mode (model_transaction_policy { decoupled: true })",
            )
        streaming_any = streaming_any or streaming

        end_id = _scalar(tensors, "end_id", b, batch)
        pad_id = _scalar(tensors, "pad_id", b, batch)
        end_id = None if end_id is None else _checked("end_id", end_id)
        pad_id = None if pad_id is None else _checked("pad_id", pad_id)
        stop_words = parse_word_list(_rows3(tensors, "stop_words_list", b, batch), "stop_words_list")
        bad_words = parse_word_list(_rows3(tensors, "bad_words_list", b, batch), "bad_words_list")
        bias = None
        if "embedding_bias" in tensors and np.asarray(tensors["embedding_bias"]).size:
            bias_rows = np.asarray(tensors["embedding_bias"], dtype=np.float32).reshape(batch, -1)
            bias = bias_rows[b]
            if bias.size == 0 or not bias.any():
                bias = None
            elif bias.size != limits.vocab_size:
                raise RequestError(
                    "embedding_bias", f"has {bias.size} values, expected vocab size {limits.vocab_size} (or none)"
                )

        def num(name: str | None, kind: Callable[[Any], Any], b: int = b) -> Any:
            v = _scalar(tensors, name, b, batch)
            if v is None or name is None:
                return None
            return kind(_checked(name, v)) if name in LIMITS else kind(v)

        sampling = SamplingParams(
            temperature=num("temperature", float),
            top_k=num("runtime_top_k", int),
            top_p=num("runtime_top_p", float),
            repetition_penalty=num("repetition_penalty", float),
            presence_penalty=num("presence_penalty", float),
            frequency_penalty=num("frequency_penalty", float),
            min_tokens=num(min_name, int) or 0,
            seed=num(seed_name, int),
        )
        for other in ("len_penalty", "beam_search_diversity_rate", "runtime_top_p_min", "runtime_top_p_decay"):
            num(other, float)  # not used by the CPU engines, but refused out of range like everywhere
        exclude = _scalar(tensors, "exclude_input_in_output", b, batch)
        rows.append(
            GenerationRequest(
                prompt=prompt,
                max_new_tokens=out_len,
                end_id=None if end_id is None else int(end_id),
                pad_id=None if pad_id is None else int(pad_id),
                stop_words=stop_words,
                bad_words=bad_words,
                embedding_bias=bias,
                sampling=sampling,
                return_log_probs=bool(_scalar(tensors, "return_log_probs", b, batch) or False),
                exclude_input_in_output=limits.exclude_input_in_output if exclude is None else bool(exclude),
                streaming=streaming,
                batch_index=b,
                request_id=request_id,
                batch_size=batch,
                return_perf_metrics=bool(_scalar(tensors, "return_perf_metrics", b, batch) or False),
                return_num_input_tokens=bool(_scalar(tensors, "return_num_input_tokens", b, batch) or False),
                return_num_output_tokens=bool(_scalar(tensors, "return_num_output_tokens", b, batch) or False),
            )
        )
    return ParsedRequest(rows=rows, request_id=request_id, streaming=streaming_any)


def _rows3(tensors: Mapping[str, np.ndarray], name: str, row: int, batch: int) -> np.ndarray | None:
    """Row ``row`` of a ``[B, 2, N]`` word list (or the ``[2, N]`` list of an unbatched tensor)."""
    if name not in tensors:
        return None
    a = np.asarray(tensors[name])
    if a.size == 0:
        return None
    if a.ndim == 3:
        if a.shape[0] != batch:
            raise RequestError(name, f"batch dimension {a.shape[0]} differs from input_ids' {batch}")
        return a[row]
    return a
