"""The ``tensorrt_llm`` tensor contract for Python engines: request parsing, in-flight scheduling,
response building and the Triton adapter shared by the CPU reference engine and the synthetic engine.

The C++ TensorRT-LLM backend cannot run on a CPU machine, so repo-builder can put a Python model in the
``tensorrt_llm`` slot that keeps its exact tensor contract (names and dtypes are read from the model
config Triton passes to ``initialize``, so one model serves the ``trtllm-1.2`` and ``trtllm-0.5``
profiles). Everything here is independent of ``triton_python_backend_utils``: the Triton adapter
(:class:`TritonEngineModel`) receives that module as an argument, so the logic is unit-tested in-process.

Semantics (chosen to match TensorRT-LLM's executor; facts from ../shared/docs/upstream-reference.md §2.1
and TRT-LLM 1.2 ``LlmRequest``/sampling layers):

* **Greedy** unless sampling is asked for: ``runtime_top_k`` unset/0 and ``runtime_top_p`` unset/0 means
  greedy (TRT-LLM turns top_k=0, top_p=0 into top_k=1), ``runtime_top_k == 1`` is greedy, and
  ``temperature`` alone does not switch sampling on. ``temperature == 0`` is greedy too.
* ``end_id``: generation stops when the engine picks it; the end token is **not** part of ``output_ids``
  and not counted in ``sequence_length``. Without ``end_id`` there is no end-of-sequence stop (TRT-LLM
  executor default end id -1). ``min_tokens`` (0.5: ``min_length``) forbids ``end_id`` before that many
  generated tokens.
* ``stop_words_list`` (``[2, N]``: row 0 the concatenated token ids, row 1 the cumulative end offsets padded
  with -1): generation stops when the generated tokens end with one stop sequence; the stop sequence
  **is** part of the output.
* ``request_output_len``: at most that many new tokens (tokens). A prompt longer than ``max_input_len``, or
  not shorter than ``max_seq_len``, is an error naming ``input_ids``; ``prompt + request_output_len >
  max_seq_len`` clamps the output length to ``max_seq_len - prompt`` (TRT-LLM 1.x does the same, with a
  warning).
* ``exclude_input_in_output`` (request input overrides the model parameter of the same name): when false,
  a non-streaming ``output_ids`` is prompt + generated and ``sequence_length`` counts both. Streaming
  responses carry only the tokens generated since the previous response and never the prompt (the
  executor does not set ``returnAllGeneratedTokens``).
* ``beam_width`` must be 1 (beam search is not implemented); ``beam_width > max_beam_width`` and
  ``streaming`` with beam > 1 are errors naming ``beam_width``.
* ``stop`` = true cancels the in-flight request that has the same Triton request id (it finishes with the
  tokens it has) and is itself answered with an empty final response. A cancelled request
  (``response_sender.is_cancelled()``) is dropped and gets a final flag with no outputs.
* Every output declared in the model config is sent in every response with data (the ensemble fails
  with "unexpected deadlock, at least one output is not set" otherwise): outputs that are not computed
  are zeros of the declared dtype, with a batch dimension and ragged (-1) dims of size 1.
"""

from __future__ import annotations

import json
import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Protocol, Sequence as Seq

import numpy as np

from .params import ModelParams
from .triton_io import IOSpec

# --------------------------------------------------------------------------------------------------
# Model config I/O



class EngineLoadError(RuntimeError):
    """The engine directory or a model parameter is unusable; raised from ``initialize``.

    The message names the path or parameter key and says how to fix it (Triton shows it as the model's
    load error).
    """


class RequestError(ValueError):
    """A request is invalid; ``field`` is the request input at fault (shown in the error message).

    Only the offending request fails; the other requests keep going.
    """

    def __init__(self, field_name: str, message: str) -> None:
        self.field = field_name
        super().__init__(f"tensorrt_llm: input '{field_name}': {message}")


@dataclass(frozen=True)
class ModelIO:
    """The inputs and outputs declared in a model config (``args["model_config"]``), in order."""

    inputs: dict[str, IOSpec]
    outputs: dict[str, IOSpec]

    @classmethod
    def from_config(cls, config: Mapping[str, Any] | str) -> "ModelIO":
        """Read ``input``/``output`` entries (``name``, ``data_type``, ``dims``, ``optional``)."""
        cfg = json.loads(config) if isinstance(config, str) else config

        def specs(key: str) -> dict[str, IOSpec]:
            out: dict[str, IOSpec] = {}
            for entry in cfg.get(key, []) or []:
                dims = tuple(int(d) for d in entry.get("dims", []))
                out[entry["name"]] = IOSpec(entry["name"], str(entry.get("data_type", "TYPE_FP32")), dims,
                                            bool(entry.get("optional", False)))
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
    "lora_task_id", "lora_weights", "lora_config", "prompt_embedding_table", "draft_input_ids",
    "draft_logits", "encoder_input_features", "decoder_input_ids", "cross_attention_mask",
    "mrope_rotary_cos_sin", "mrope_position_deltas", "context_phase_params", "guided_decoding_guide_type",
    "guided_decoding_guide", "lookahead_window_size", "lookahead_ngram_size",
    "lookahead_verification_set_size",
)
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
    ids = [int(x) for x in a[0]]
    words: list[list[int]] = []
    start = 0
    for off in a[1]:
        off = int(off)
        if off < 0:
            break
        if off < start or off > len(ids):
            raise RequestError(field_name, f"offsets must be cumulative end offsets within {len(ids)} ids, "
                                           f"got {[int(x) for x in a[1]]}")
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


def parse_request(tensors: Mapping[str, np.ndarray], io: ModelIO, limits: EngineLimits, *,
                  request_id: str = "") -> ParsedRequest:
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
            raise RequestError(name, "is not supported by the CPU reference/synthetic engine; "
                                     "remove it from the request (needs the TensorRT-LLM C++ backend)")
    for name in UNSUPPORTED_FLAGS:
        if _present(tensors, name):
            raise RequestError(name, "= true is not supported by the CPU reference/synthetic engine; "
                                     "send false or leave it out")
    if "input_ids" not in tensors or np.asarray(tensors["input_ids"]).size == 0:
        raise RequestError("input_ids", "is required and must hold at least one token id")
    ids = np.asarray(tensors["input_ids"])
    if ids.ndim == 1:
        ids = ids.reshape(1, -1)
    batch = ids.shape[0]
    ids = ids.reshape(batch, -1)
    if "request_output_len" not in tensors:
        raise RequestError("request_output_len", "is required")

    min_name = io.input_name("min_tokens", "min_length") or "min_tokens"
    seed_name = io.input_name("seed", "random_seed") or "seed"
    rows: list[GenerationRequest] = []
    streaming_any = False
    for b in range(batch):
        length = _scalar(tensors, "input_lengths", b, batch)
        row_ids = ids[b]
        if length is not None:
            length = int(length)
            if length <= 0 or length > row_ids.shape[0]:
                raise RequestError("input_lengths", f"{length} is not within 1..{row_ids.shape[0]} "
                                                    f"(the number of input_ids sent)")
            row_ids = row_ids[:length]
        prompt = [int(x) for x in row_ids]
        bad = [t for t in prompt if t < 0 or t >= limits.vocab_size]
        if bad:
            raise RequestError("input_ids", f"token id {bad[0]} is outside the vocabulary [0, {limits.vocab_size})")
        if len(prompt) > limits.max_input_len:
            raise RequestError("input_ids", f"prompt length {len(prompt)} exceeds max_input_len "
                                            f"{limits.max_input_len} (tokens); shorten the prompt")
        if len(prompt) >= limits.max_seq_len:
            raise RequestError("input_ids", f"prompt length {len(prompt)} leaves no room in max_seq_len "
                                            f"{limits.max_seq_len} (tokens); shorten the prompt")
        out_len = int(_scalar(tensors, "request_output_len", b, batch))
        if out_len <= 0:
            raise RequestError("request_output_len", f"must be > 0, got {out_len}")
        out_len = min(out_len, limits.max_seq_len - len(prompt))

        beam = _scalar(tensors, "beam_width", b, batch)
        beam = 1 if beam is None else int(beam)
        streaming = bool(_scalar(tensors, "streaming", b, batch) or False)
        if beam > limits.max_beam_width:
            raise RequestError("beam_width", f"{beam} exceeds max_beam_width {limits.max_beam_width}")
        if beam > 1 and streaming:
            raise RequestError("beam_width", "streaming is only supported with beam_width 1")
        if beam != 1:
            raise RequestError("beam_width", f"{beam}: beam search is not implemented by the CPU "
                                             "reference/synthetic engine; send beam_width 1")
        nret = _scalar(tensors, "num_return_sequences", b, batch)
        if nret is not None and int(nret) > 1:
            raise RequestError("num_return_sequences", f"{int(nret)}: only 1 is supported by the CPU engine")
        if streaming and not limits.decoupled:
            raise RequestError("streaming", "streaming is only supported if the model is deployed in "
                                            "decoupled mode (model_transaction_policy { decoupled: true })")
        streaming_any = streaming_any or streaming

        end_id = _scalar(tensors, "end_id", b, batch)
        pad_id = _scalar(tensors, "pad_id", b, batch)
        stop_words = parse_word_list(_rows3(tensors, "stop_words_list", b, batch), "stop_words_list")
        bad_words = parse_word_list(_rows3(tensors, "bad_words_list", b, batch), "bad_words_list")
        bias = None
        if "embedding_bias" in tensors and np.asarray(tensors["embedding_bias"]).size:
            bias_rows = np.asarray(tensors["embedding_bias"], dtype=np.float32).reshape(batch, -1)
            bias = bias_rows[b]
            if bias.size == 0 or not bias.any():
                bias = None
            elif bias.size != limits.vocab_size:
                raise RequestError("embedding_bias", f"has {bias.size} values, expected vocab size "
                                                     f"{limits.vocab_size} (or none)")

        def num(name: str, kind: Callable[[Any], Any]) -> Any:
            v = _scalar(tensors, name, b, batch)
            return None if v is None else kind(v)

        sampling = SamplingParams(
            temperature=num("temperature", float), top_k=num("runtime_top_k", int),
            top_p=num("runtime_top_p", float), repetition_penalty=num("repetition_penalty", float),
            presence_penalty=num("presence_penalty", float), frequency_penalty=num("frequency_penalty", float),
            min_tokens=num(min_name, int) or 0, seed=num(seed_name, int))
        if sampling.top_k is not None and sampling.top_k < 0:
            raise RequestError("runtime_top_k", f"must be >= 0, got {sampling.top_k}")
        if sampling.top_p is not None and not 0.0 <= sampling.top_p <= 1.0:
            raise RequestError("runtime_top_p", f"must be within [0, 1], got {sampling.top_p}")
        if sampling.temperature is not None and sampling.temperature < 0.0:
            raise RequestError("temperature", f"must be >= 0, got {sampling.temperature}")
        if sampling.repetition_penalty is not None and sampling.repetition_penalty <= 0.0:
            raise RequestError("repetition_penalty", f"must be > 0, got {sampling.repetition_penalty}")
        exclude = _scalar(tensors, "exclude_input_in_output", b, batch)
        rows.append(GenerationRequest(
            prompt=prompt, max_new_tokens=out_len,
            end_id=None if end_id is None else int(end_id), pad_id=None if pad_id is None else int(pad_id),
            stop_words=stop_words, bad_words=bad_words, embedding_bias=bias, sampling=sampling,
            return_log_probs=bool(_scalar(tensors, "return_log_probs", b, batch) or False),
            exclude_input_in_output=limits.exclude_input_in_output if exclude is None else bool(exclude),
            streaming=streaming, batch_index=b, request_id=request_id))
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


# --------------------------------------------------------------------------------------------------
# Sequences and the backend protocol


class GenerationBackend(Protocol):
    """What the scheduler needs from an engine.

    ``step`` produces the next token of every given sequence (one decoding iteration) and returns
    ``(token_id, log_prob)`` per sequence, in order; it keeps per-sequence state in ``seq.state``.
    ``release`` frees that state when the sequence ends.
    """

    vocab_size: int

    def step(self, seqs: Seq["Sequence"]) -> list[tuple[int, float]]: ...

    def release(self, seq: "Sequence") -> None: ...


class Sequence:
    """One sequence being generated: its request, generated tokens and per-token log-probs."""

    __slots__ = ("req", "group", "tokens", "log_probs", "sent", "finished", "state", "first_scheduled_ns",
                 "first_token_ns", "last_token_ns", "_max_stop")

    def __init__(self, req: GenerationRequest, group: "RequestGroup") -> None:
        self.req = req
        self.group = group
        self.tokens: list[int] = []
        self.log_probs: list[float] = []
        self.sent = 0
        self.finished: str | None = None
        self.state: Any = None
        self.first_scheduled_ns = 0
        self.first_token_ns = 0
        self.last_token_ns = 0
        self._max_stop = max((len(w) for w in req.stop_words), default=0)

    def accept(self, token: int, log_prob: float) -> None:
        """Apply the stop rules to a new token (end_id, stop words, length) and record it."""
        now = time.time_ns()
        if not self.first_token_ns:
            self.first_token_ns = now
        self.last_token_ns = now
        req = self.req
        if req.end_id is not None and token == req.end_id:
            self.finished = "end_id"
            return
        self.tokens.append(int(token))
        self.log_probs.append(float(log_prob))
        if self._max_stop and self._ends_with_stop_word():
            self.finished = "stop_words"
        elif len(self.tokens) >= req.max_new_tokens:
            self.finished = "length"

    def _ends_with_stop_word(self) -> bool:
        toks = self.tokens
        for word in self.req.stop_words:
            n = len(word)
            if n <= len(toks) and toks[-n:] == word:
                return True
        return False


# --------------------------------------------------------------------------------------------------
# Responses


class ResponseSink(Protocol):
    """Where a request's responses go (a Triton response sender, or a collector in tests)."""

    def send(self, outputs: dict[str, np.ndarray] | None, *, final: bool, error: str | None = None) -> None: ...

    def is_cancelled(self) -> bool: ...


def _filler(spec: IOSpec, batch: int) -> np.ndarray:
    shape = (batch, *[d if d > 0 else 1 for d in spec.dims])
    return np.zeros(shape, dtype=spec.numpy_dtype)


_COMPUTED = {"output_ids", "sequence_length", "cum_log_probs", "output_log_probs", "batch_index", "num_input_tokens",
             "num_output_tokens", "arrival_time_ns", "first_scheduled_time_ns", "first_token_time_ns",
             "last_token_time_ns"}
_PLANS: dict[int, tuple[ModelIO, list[tuple[str, Any, np.ndarray | None]]]] = {}


def _plan(io: ModelIO) -> list[tuple[str, Any, np.ndarray | None]]:
    """(name, numpy dtype, batch-1 zero filler or None when computed) per declared output, cached per ModelIO."""
    hit = _PLANS.get(id(io))
    if hit is None or hit[0] is not io:
        plan = [(name, spec.numpy_dtype, None if name in _COMPUTED else _filler(spec, 1))
                for name, spec in io.outputs.items()]
        for _name, _dt, filler in plan:
            if filler is not None:
                filler.setflags(write=False)
        hit = _PLANS[id(io)] = (io, plan)
    return hit[1]


def build_outputs(io: ModelIO, seqs: Seq[Sequence], *, streaming: bool,
                  arrival_ns: int = 0) -> dict[str, np.ndarray]:
    """The output tensors of one response for ``seqs`` (one per batch row, beam 1).

    Streaming: each sequence's tokens since its last response (``seq.sent``), never the prompt.
    Otherwise: all generated tokens, after the prompt when ``exclude_input_in_output`` is false.
    Shapes: ``output_ids`` ``[B, 1, T]`` (padded with pad_id, else end_id, else 0), ``sequence_length``
    ``[B, 1]``, ``cum_log_probs`` ``[B, 1]``, ``output_log_probs`` ``[B, 1, T_gen]`` (zeros unless
    ``return_log_probs``); ``batch_index``/``sequence_index``/``num_*_tokens``/``*_time_ns`` ``[B, 1]``;
    every other declared output is zeros (see module docstring; batch-1 fillers are shared read-only
    arrays). Dtypes come from the model config.
    """
    token_rows: list[list[int]] = []
    lp_rows: list[list[float]] = []
    for s in seqs:
        if streaming:
            token_rows.append(s.tokens[s.sent:])
            lp_rows.append(s.log_probs[s.sent:])
        else:
            token_rows.append(s.tokens if s.req.exclude_input_in_output else s.req.prompt + s.tokens)
            lp_rows.append(s.log_probs)
    batch = len(seqs)
    out: dict[str, np.ndarray] = {}
    for name, dt, filler in _plan(io):
        if filler is not None:
            out[name] = filler if batch == 1 else _filler(io.outputs[name], batch)
            continue
        if name == "output_ids":
            if batch == 1:
                arr = np.array(token_rows, dtype=dt).reshape(1, 1, -1)
            else:
                width = max(len(r) for r in token_rows)
                arr = np.zeros((batch, 1, width), dtype=dt)
                for i, (s, row) in enumerate(zip(seqs, token_rows)):
                    arr[i, 0, :] = s.req.pad_id if s.req.pad_id is not None else (s.req.end_id or 0)
                    arr[i, 0, :len(row)] = row
        elif name == "output_log_probs":
            width = max(max((len(r) for r in lp_rows), default=0), 1)
            arr = np.zeros((batch, 1, width), dtype=dt)
            for i, (s, row) in enumerate(zip(seqs, lp_rows)):
                if s.req.return_log_probs and row:
                    arr[i, 0, :len(row)] = row
        else:
            if name == "sequence_length":
                col = [len(r) for r in token_rows]
            elif name == "cum_log_probs":
                col = [sum(s.log_probs) if s.req.return_log_probs else 0.0 for s in seqs]
            elif name == "batch_index":
                col = [s.req.batch_index for s in seqs]
            elif name == "num_input_tokens":
                col = [len(s.req.prompt) for s in seqs]
            elif name == "num_output_tokens":
                col = [len(s.tokens) for s in seqs]
            elif name == "arrival_time_ns":
                col = [arrival_ns] * batch
            elif name == "first_scheduled_time_ns":
                col = [s.first_scheduled_ns for s in seqs]
            elif name == "first_token_time_ns":
                col = [s.first_token_ns for s in seqs]
            else:  # last_token_time_ns
                col = [s.last_token_ns for s in seqs]
            arr = np.array(col, dtype=dt).reshape(batch, 1)
        out[name] = arr
    return out


_ARRIVAL_LOCK = threading.Lock()
_LAST_ARRIVAL = [0]


def _unique_arrival_ns() -> int:
    """Wall-clock arrival time (ns since the epoch), strictly increasing within the process.

    Postprocessing keys its streaming detokenizer state on (request id, ``arrival_time_ns``), so two
    requests of one model instance never share a value, even with equal (or empty) request ids.
    """
    with _ARRIVAL_LOCK:
        now = max(time.time_ns(), _LAST_ARRIVAL[0] + 1)
        _LAST_ARRIVAL[0] = now
        return now


class RequestGroup:
    """The sequences of one Triton request and the sink its responses go to.

    Streaming: every step with new tokens sends a response per sequence; the last one carries the final
    flag (or a final flag alone when the last step produced no token, e.g. the end token).
    Non-streaming: one response for all rows when every row has finished.
    """

    def __init__(self, parsed: ParsedRequest, sink: ResponseSink, io: ModelIO) -> None:
        self.request_id = parsed.request_id
        self.streaming = parsed.streaming
        self.sink = sink
        self.io = io
        self.seqs = [Sequence(r, self) for r in parsed.rows]
        self.arrival_ns = _unique_arrival_ns()
        self.done = False
        self.stop_requested = False
        self.last_cancel_check = 0.0

    def all_finished(self) -> bool:
        return all(s.finished is not None for s in self.seqs)

    def emit(self, stepped: Iterable[Sequence]) -> None:
        """Send what ``stepped`` (sequences of this group that just got a token) produced."""
        if self.done:
            return
        finished = self.all_finished()
        if self.streaming:
            pending = [s for s in stepped if len(s.tokens) > s.sent]
            for i, s in enumerate(pending):
                last = finished and i == len(pending) - 1
                self.sink.send(build_outputs(self.io, [s], streaming=True, arrival_ns=self.arrival_ns), final=last)
                s.sent = len(s.tokens)
            if finished:
                if not pending:
                    self.sink.send(None, final=True)
                self.done = True
        elif finished:
            self.sink.send(build_outputs(self.io, self.seqs, streaming=False, arrival_ns=self.arrival_ns),
                           final=True)
            self.done = True

    def fail(self, message: str) -> None:
        """Send an error as the final response (once)."""
        if not self.done:
            self.done = True
            for s in self.seqs:
                s.finished = s.finished or "error"
            self.sink.send(None, final=True, error=message)

    def drop(self) -> None:
        """End a cancelled request: final flag, no outputs."""
        if not self.done:
            self.done = True
            for s in self.seqs:
                s.finished = s.finished or "cancelled"
            self.sink.send(None, final=True)


# --------------------------------------------------------------------------------------------------
# Scheduler


class Scheduler:
    """In-flight batching: every iteration steps all active sequences by one token.

    New requests join between iterations, so a long request never blocks a short one. Runs on its own
    thread (:meth:`start`) or, for tests, in the caller's thread (:meth:`run_until_idle`).

    Args:
        backend: produces tokens (see :class:`GenerationBackend`).
        max_active: most sequences stepped together; more wait in FIFO order.
        cancel_check_period_s: how often (seconds) each request's ``is_cancelled`` is polled
            (TRT-LLM's ``cancellation_check_period_ms`` default is 100 ms).
        log: called with warning/error text (e.g. ``pb_utils.Logger.log_error``).
    """

    def __init__(self, backend: GenerationBackend, *, max_active: int = 64, cancel_check_period_s: float = 0.1,
                 log: Callable[[str], None] | None = None, info: Callable[[str], None] | None = None) -> None:
        self.backend = backend
        self.max_active = max(1, int(max_active))
        self.cancel_check_period_s = cancel_check_period_s
        self.log = log or (lambda _msg: None)
        self.info = info or (lambda _msg: None)
        self._inbox: "queue.SimpleQueue[tuple[str, Any]]" = queue.SimpleQueue()
        self._waiting: list[Sequence] = []
        self._active: list[Sequence] = []
        self._groups: list[RequestGroup] = []
        self._thread: threading.Thread | None = None
        self._shutdown = False
        self.steps = 0

    # -- submission (any thread) --
    def submit(self, group: RequestGroup) -> None:
        """Queue a request group; thread-safe."""
        self._inbox.put(("submit", group))

    def stop_request(self, request_id: str) -> None:
        """Finish the in-flight requests whose Triton request id is ``request_id`` (``stop`` input)."""
        self._inbox.put(("stop", request_id))

    @property
    def alive(self) -> bool:
        """True while the scheduling thread runs (or when no thread was started)."""
        return self._thread is None or self._thread.is_alive()

    def start(self) -> None:
        """Run the scheduling loop on a daemon thread."""
        self._thread = threading.Thread(target=self._loop, name="repo-builder-engine", daemon=True)
        self._thread.start()

    def shutdown(self, timeout: float = 10.0) -> None:
        """Stop the loop; requests still running get an error response."""
        self._inbox.put(("shutdown", None))
        if self._thread is not None:
            self._thread.join(timeout)
        else:
            self._drain(block=False)

    # -- loop --
    def _loop(self) -> None:
        while not self._shutdown:
            self._drain(block=not (self._active or self._waiting))
            if self._shutdown:
                break
            if self._active or self._waiting:
                try:
                    self.run_step()
                except Exception as exc:  # noqa: BLE001 - keep serving; fail what was running
                    self.log(f"tensorrt_llm: scheduler step failed: {exc!r}")
                    for g in self._groups:
                        g.fail(f"tensorrt_llm: internal error: {exc}")
                    self._retire()
        for g in self._groups:
            g.fail("tensorrt_llm: the model is shutting down")
        self._groups.clear()

    def _drain(self, block: bool) -> None:
        try:
            item = self._inbox.get(timeout=0.5) if block else self._inbox.get_nowait()
        except queue.Empty:
            return
        while True:
            kind, value = item
            if kind == "submit":
                group: RequestGroup = value
                self._groups.append(group)
                self._waiting.extend(group.seqs)
                if not group.seqs:
                    group.emit([])
            elif kind == "stop":
                for g in self._groups:
                    if value and g.request_id == value:
                        g.stop_requested = True
            elif kind == "shutdown":
                self._shutdown = True
            try:
                item = self._inbox.get_nowait()
            except queue.Empty:
                return

    def run_until_idle(self, max_steps: int = 1_000_000) -> int:
        """Process the inbox and step until nothing is left (in the caller's thread). Returns steps run."""
        n = 0
        self._drain(block=False)
        while (self._active or self._waiting) and n < max_steps:
            self.run_step()
            n += 1
            self._drain(block=False)
        return n

    def run_step(self) -> None:
        """One iteration: take new requests, admit waiting sequences, honour stop/cancel, step, emit."""
        self._drain(block=False)
        while self._waiting and len(self._active) < self.max_active:
            seq = self._waiting.pop(0)
            seq.first_scheduled_ns = time.time_ns()
            self._active.append(seq)
        now = time.monotonic()
        for g in self._groups:
            if g.done:
                continue
            if g.stop_requested:
                for s in g.seqs:
                    if s.finished is None:
                        s.finished = "stopped"
                self.info(f"tensorrt_llm: request '{g.request_id}' stopped by a stop request after "
                          f"{sum(len(s.tokens) for s in g.seqs)} generated token(s)")
                g.emit(g.seqs)
            elif now - g.last_cancel_check >= self.cancel_check_period_s:
                g.last_cancel_check = now
                try:
                    cancelled = g.sink.is_cancelled()
                except Exception:  # noqa: BLE001 - a broken sender counts as cancelled
                    cancelled = True
                if cancelled:
                    self.info(f"tensorrt_llm: request '{g.request_id}' cancelled by the client after "
                              f"{sum(len(s.tokens) for s in g.seqs)} generated token(s)")
                    g.drop()
        self._retire()
        if not self._active:
            return
        batch = list(self._active)
        try:
            results = self.backend.step(batch)
        except Exception as exc:  # noqa: BLE001 - isolate the failing sequence(s)
            results = self._step_isolated(batch, exc)
        self.steps += 1
        touched: dict[int, tuple[RequestGroup, list[Sequence]]] = {}
        for seq, res in zip(batch, results):
            if res is None or seq.group.done:
                continue
            seq.accept(*res)
            touched.setdefault(id(seq.group), (seq.group, []))[1].append(seq)
        for group, seqs in touched.values():
            group.emit(seqs)
        self._retire()

    def _step_isolated(self, batch: list[Sequence], first_exc: Exception) -> list[tuple[int, float] | None]:
        self.log(f"tensorrt_llm: batched step failed ({first_exc!r}); retrying sequences one by one")
        results: list[tuple[int, float] | None] = []
        for seq in batch:
            try:
                results.append(self.backend.step([seq])[0])
            except Exception as exc:  # noqa: BLE001
                seq.group.fail(f"tensorrt_llm: generation failed: {exc}")
                results.append(None)
        return results

    def _retire(self) -> None:
        keep: list[Sequence] = []
        for seq in self._active:
            if seq.finished is not None or seq.group.done:
                try:
                    self.backend.release(seq)
                except Exception:  # noqa: BLE001
                    pass
            else:
                keep.append(seq)
        self._active = keep
        self._waiting = [s for s in self._waiting if not s.group.done and s.finished is None]
        self._groups = [g for g in self._groups if not g.done]


# --------------------------------------------------------------------------------------------------
# Triton adapter


class CollectingSink:
    """A sink that keeps every response (non-decoupled models and tests)."""

    def __init__(self) -> None:
        self.responses: list[tuple[dict[str, np.ndarray] | None, bool, str | None]] = []
        self.event = threading.Event()
        self.cancelled = False

    def send(self, outputs: dict[str, np.ndarray] | None, *, final: bool, error: str | None = None) -> None:
        self.responses.append((outputs, final, error))
        if final:
            self.event.set()

    def is_cancelled(self) -> bool:
        return self.cancelled


class _DecoupledSink:
    def __init__(self, model: "TritonEngineModel", sender: Any) -> None:
        self.model = model
        self.sender = sender

    def send(self, outputs: dict[str, np.ndarray] | None, *, final: bool, error: str | None = None) -> None:
        pb = self.model.pb_utils
        flags = pb.TRITONSERVER_RESPONSE_COMPLETE_FINAL if final else 0
        if error is not None:
            self.sender.send(pb.InferenceResponse(output_tensors=[], error=pb.TritonError(error)), flags=flags)
        elif outputs is None:
            self.sender.send(flags=flags)
        else:
            self.sender.send(self.model.to_response(outputs), flags=flags)

    def is_cancelled(self) -> bool:
        return bool(self.sender.is_cancelled())


BackendFactory = Callable[[ModelParams, ModelIO], GenerationBackend]


class TritonEngineModel:
    """The body of a Python-backend ``tensorrt_llm`` model (``reference_engine``/``synthetic_engine``).

    Args:
        pb_utils: the ``triton_python_backend_utils`` module (injected so tests can pass a fake).
        args: the ``initialize`` arguments; ``args["model_config"]`` is the model config JSON.
        backend_factory: builds the generation backend from the parameters; raises EngineLoadError.
    The backend may define ``max_input_len``/``max_seq_len``/``max_batch_size`` attributes used when
    the parameters of the same names are unset.
    Raises:
        EngineLoadError: bad parameters or engine dir (the message names them).
    """

    def __init__(self, pb_utils: Any, args: Mapping[str, Any], backend_factory: BackendFactory) -> None:
        self.pb_utils = pb_utils
        cfg = json.loads(args["model_config"]) if isinstance(args["model_config"], str) else args["model_config"]
        self.params = ModelParams(cfg)
        self.io = ModelIO.from_config(cfg)
        self.decoupled = self.params.decoupled
        try:
            backend = backend_factory(self.params, self.io)
            max_input = self.params.int("max_input_len") or getattr(backend, "max_input_len", None)
            max_seq = self.params.int("max_seq_len") or getattr(backend, "max_seq_len", None)
            self.limits = EngineLimits(
                vocab_size=int(backend.vocab_size),
                max_input_len=int(max_input or max_seq or 1 << 30),
                max_seq_len=int(max_seq or 1 << 30),
                max_beam_width=int(self.params.int("max_beam_width") or 1),
                exclude_input_in_output=bool(self.params.bool("exclude_input_in_output", False)),
                decoupled=self.decoupled)
        except ValueError as exc:  # ParameterValueError from ModelParams
            raise EngineLoadError(str(exc)) from exc
        max_active = getattr(backend, "max_batch_size", None) or self.params.max_batch_size or 64
        logger = getattr(pb_utils, "Logger", None)
        log = getattr(logger, "log_warn", None)
        info = getattr(logger, "log_info", None)
        period_ms = self.params.int("cancellation_check_period_ms", 100) or 100
        self.scheduler = Scheduler(backend, max_active=int(max_active), cancel_check_period_s=period_ms / 1000.0,
                                   log=log, info=info)
        self.scheduler.start()

    def _tensors(self, request: Any) -> dict[str, np.ndarray]:
        out: dict[str, np.ndarray] = {}
        for name in self.io.inputs:
            t = self.pb_utils.get_input_tensor_by_name(request, name)
            if t is None:
                continue
            try:
                out[name] = t.as_numpy()
            except Exception:  # noqa: BLE001 - e.g. BF16; only presence matters for such inputs
                out[name] = np.ones((1,), dtype=np.bool_)
        return out

    def to_response(self, outputs: Mapping[str, np.ndarray]) -> Any:
        """A ``pb_utils.InferenceResponse`` holding ``outputs`` (BF16 outputs go through DLPack/torch)."""
        pb = self.pb_utils
        tensors = []
        for name, arr in outputs.items():
            if self.io.outputs[name].data_type == "TYPE_BF16":
                import torch  # the TRT-LLM container has torch

                tensors.append(pb.Tensor.from_dlpack(name, torch.from_numpy(arr).to(torch.bfloat16)))
            else:
                tensors.append(pb.Tensor(name, arr))
        return pb.InferenceResponse(output_tensors=tensors)

    def _parse(self, request: Any) -> ParsedRequest:
        rid = request.request_id() if hasattr(request, "request_id") else ""
        return parse_request(self._tensors(request), self.io, self.limits, request_id=rid or "")

    def execute(self, requests: list[Any]) -> list[Any] | None:
        """Decoupled: queue every request and return None (responses go through each response sender).
        Otherwise: step all requests together and return one response per request, in order."""
        pb = self.pb_utils
        if self.decoupled:
            for request in requests:
                sink = _DecoupledSink(self, request.get_response_sender())
                try:
                    parsed = self._parse(request)
                except RequestError as exc:
                    sink.send(None, final=True, error=str(exc))
                    continue
                if parsed.stop:
                    self.scheduler.stop_request(parsed.request_id)
                    sink.send(None, final=True)
                    continue
                self.scheduler.submit(RequestGroup(parsed, sink, self.io))
            return None
        sinks: list[CollectingSink | str | None] = []
        for request in requests:
            try:
                parsed = self._parse(request)
            except RequestError as exc:
                sinks.append(str(exc))
                continue
            if parsed.stop:
                self.scheduler.stop_request(parsed.request_id)
                sinks.append(None)
                continue
            sink = CollectingSink()
            self.scheduler.submit(RequestGroup(parsed, sink, self.io))
            sinks.append(sink)
        responses = []
        for sink in sinks:
            if sink is None:
                responses.append(pb.InferenceResponse(output_tensors=[]))
            elif isinstance(sink, str):
                responses.append(pb.InferenceResponse(output_tensors=[], error=pb.TritonError(sink)))
            else:
                while not sink.event.wait(1.0):
                    if not self.scheduler.alive:
                        sink.send(None, final=True, error="tensorrt_llm: the engine thread has stopped")
                outputs, _final, error = sink.responses[-1]
                if error is not None or outputs is None:
                    responses.append(pb.InferenceResponse(
                        output_tensors=[], error=pb.TritonError(error or "tensorrt_llm: request was cancelled")))
                else:
                    responses.append(self.to_response(outputs))
        return responses

    def finalize(self) -> None:
        """Stop the scheduler; unfinished requests get an error response."""
        self.scheduler.shutdown()
