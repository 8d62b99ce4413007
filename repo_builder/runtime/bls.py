"""Logic of the ``tensorrt_llm_bls`` Python-backend model, free of Triton imports.

The BLS takes the ensemble's request inputs and returns the ensemble's outputs. It does what the
ensemble scheduler does, in Python: it walks the ensemble steps of the profile's tensor contract
(rendered beside the model as ``1/wiring.json``) and, for every step, builds the step model's inputs
from the request tensors and the outputs of earlier steps named in the step's ``input_map``
(optional ones only when present). So ``top_k`` reaches the engine as ``runtime_top_k``, ``stream`` as
``streaming``, ``length_penalty`` as ``len_penalty`` and so on, exactly as in the ensemble, without a
tensor name written here. On top of the ensemble it adds

* request validation with messages that name the request field (:func:`parse_request`);
* string stop sequences (``stop_words``) cut from the returned text: non-streaming at the first
  stop string, streaming with hold-back of text that could begin a stop string across chunks
  (:class:`StopStringFilter`), after which the engine request is cancelled;
* ``accumulate_tokens`` (upstream-compatible): every streamed ``text_output`` is the full text so
  far instead of a delta;
* hold-one-back for non-streaming requests to a decoupled BLS, so the last response carries the
  final flag (``/generate`` needs exactly one response).

The Triton side (``pb_utils`` requests, response sender, threads) lives in
``model_templates/python_models/tensorrt_llm_bls/model.py``, which implements :class:`StepCaller`.
Tensors here are numpy arrays with the batch dimension first (every model of the repository has
``max_batch_size > 0``): TYPE_STRING is an ``object`` array of ``bytes``, TYPE_BOOL ``bool_``, etc.

Facts: the field renames and validation rules follow NVIDIA's BLS (tensorrtllm_backend
``all_models/inflight_batcher_llm/tensorrt_llm_bls``, ``lib/decode.py`` and ``lib/triton_decoder.py``
at commit c2e65b8; string stop words from v0.19.0), see ../shared/docs/upstream-reference.md §2.5.
"""

from __future__ import annotations

import itertools
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping, Protocol, Sequence

import numpy as np

from .stopstrings import StopStringMatcher, trim_at_stop

#: The name the wiring gives the engine step; the BLS calls ``tensorrt_llm_model_name`` instead.
ENGINE_STEP_MODEL = "tensorrt_llm"

# Client-facing request fields and outputs the BLS itself reads (validation, stop strings,
# streaming). They are the BLS's own contract names (= the ensemble's), used in error messages;
# routing to the step models never uses them, it follows the wiring.
TEXT_INPUT = "text_input"
MAX_TOKENS = "max_tokens"
STREAM = "stream"
BEAM_WIDTH = "beam_width"
STOP_WORDS = "stop_words"
EXCLUDE_INPUT = "exclude_input_in_output"
NUM_RETURN_SEQUENCES = "num_return_sequences"
NUM_DRAFT_TOKENS = "num_draft_tokens"
SEQUENCE_INDEX = "sequence_index"
BATCH_INDEX = "batch_index"

#: How often (in engine responses) a streaming request polls the client-side cancellation flag;
#: polling is an IPC round trip in the Python backend, so it is not done per token.
CANCEL_POLL_EVERY = 16


class BLSRequestError(ValueError):
    """A bad request: the message names the request field (``"max_tokens: must be > 0 ..."``)."""

    def __init__(self, field_name: str, message: str) -> None:
        self.field = field_name
        super().__init__(f"{field_name}: {message}")


class BLSStepError(RuntimeError):
    """A step model failed; the message starts with the step model's name."""

    def __init__(self, model: str, message: str) -> None:
        self.model = model
        super().__init__(f"{model}: {message}")


class WiringError(ValueError):
    """``wiring.json`` is missing, malformed or inconsistent; the message names the file and key."""


# --------------------------------------------------------------------------------------------------
# wiring


@dataclass(frozen=True)
class Step:
    """One ensemble step: ``input_map`` is {step input: ensemble tensor}, ``output_map`` is
    {step output: ensemble tensor} (the contract's ``ensemble.steps`` entries)."""

    model: str
    input_map: Mapping[str, str]
    output_map: Mapping[str, str]

    def gather(self, env: Mapping[str, Any]) -> dict[str, Any]:
        """The step's inputs from ``env`` (ensemble tensor name -> array), renamed to the step's input
        names; ensemble tensors absent from ``env`` (optional inputs not sent) are left out."""
        return {dst: env[src] for dst, src in self.input_map.items() if src in env}

    def scatter(self, outputs: Mapping[str, Any], env: dict[str, Any]) -> None:
        """Store the step's ``outputs`` (step output name -> array) in ``env`` under their ensemble names."""
        omap = self.output_map
        for name, value in outputs.items():
            target = omap.get(name)
            if target is not None:
                env[target] = value


@dataclass(frozen=True)
class Wiring:
    """The ensemble steps plus the BLS's input and output names, from ``wiring.json``.

    ``steps`` before the engine step run once per request, the engine step streams, and the steps
    after it run once per engine response.
    """

    steps: tuple[Step, ...]
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    engine_index: int

    @classmethod
    def from_data(cls, data: Any, *, source: str = "wiring.json",
                  inputs: Iterable[str] | None = None, outputs: Iterable[str] | None = None) -> "Wiring":
        """Build from plain data: either a list of steps (``ProfileContract.wiring()``) or a dict
        ``{"steps": [...], "inputs": [...], "outputs": [...]}`` whose inputs/outputs are names or
        tensor dicts with a ``name``. ``inputs``/``outputs`` given here win (e.g. the BLS's own
        model config).

        Raises:
            WiringError: no or several engine steps, a step input fed by nothing, malformed entries.
        """
        if isinstance(data, Mapping):
            raw_steps = data.get("steps")
            data_inputs = data.get("inputs")
            data_outputs = data.get("outputs")
        else:
            raw_steps, data_inputs, data_outputs = data, None, None
        if not isinstance(raw_steps, list) or not raw_steps:
            raise WiringError(f"{source}: 'steps' must be a non-empty list of ensemble steps")
        steps = []
        for i, raw in enumerate(raw_steps):
            try:
                steps.append(Step(model=str(raw["model"]), input_map=dict(raw["input_map"]),
                                  output_map=dict(raw["output_map"])))
            except (KeyError, TypeError) as exc:
                raise WiringError(f"{source}: steps[{i}] needs 'model', 'input_map' and 'output_map'") from exc

        def names(items: Any) -> tuple[str, ...] | None:
            if items is None:
                return None
            return tuple(str(x["name"]) if isinstance(x, Mapping) else str(x) for x in items)

        in_names = names(inputs) or names(data_inputs)
        out_names = names(outputs) or names(data_outputs)
        engine = [i for i, s in enumerate(steps) if s.model == ENGINE_STEP_MODEL]
        if len(engine) != 1:
            raise WiringError(f"{source}: expected exactly one step with model '{ENGINE_STEP_MODEL}', "
                              f"found {len(engine)}")
        produced: set[str] = set()
        for s in steps:
            produced.update(s.output_map.values())
        if in_names is None:
            # Without an explicit list every tensor not produced by a step is a request input.
            in_names = tuple(dict.fromkeys(v for s in steps for v in s.input_map.values() if v not in produced))
        if out_names is None:
            out_names = tuple(v for s in steps for v in s.output_map.values() if not v.startswith("_"))
        available = set(in_names)
        for i, s in enumerate(steps):
            for dst, src in s.input_map.items():
                if src not in available:
                    raise WiringError(f"{source}: steps[{i}] ({s.model}) input '{dst}' reads '{src}', which is "
                                      "neither a request input nor an output of an earlier step")
            available.update(s.output_map.values())
        return cls(steps=tuple(steps), inputs=in_names, outputs=out_names, engine_index=engine[0])

    @classmethod
    def load(cls, path: str | Path, **kwargs: Any) -> "Wiring":
        """Read ``wiring.json``. Raises WiringError naming the file."""
        p = Path(path)
        try:
            data = json.loads(p.read_text())
        except OSError as exc:
            raise WiringError(f"{p}: cannot read the BLS wiring ({exc}); re-render the repository") from exc
        except json.JSONDecodeError as exc:
            raise WiringError(f"{p}: not valid JSON ({exc}); re-render the repository") from exc
        return cls.from_data(data, source=str(p), **kwargs)

    @property
    def pre_steps(self) -> tuple[Step, ...]:
        """Steps that run once before the engine (preprocessing)."""
        return self.steps[: self.engine_index]

    @property
    def engine_step(self) -> Step:
        """The engine step (``tensorrt_llm``)."""
        return self.steps[self.engine_index]

    @property
    def post_steps(self) -> tuple[Step, ...]:
        """Steps that run once per engine response (postprocessing)."""
        return self.steps[self.engine_index + 1:]

    @property
    def text_outputs(self) -> tuple[str, ...]:
        """Ensemble outputs produced by the post steps (``text_output``): where stop strings apply."""
        outs = set(self.outputs)
        return tuple(v for s in self.post_steps for v in s.output_map.values() if v in outs)

    def engine_outputs_for(self, wanted: Iterable[str]) -> list[str]:
        """Engine output names to request so that every post step gets its inputs and every
        ensemble tensor in ``wanted`` (client-requested outputs) is produced."""
        needed = set(wanted)
        for s in self.post_steps:
            needed.update(s.input_map.values())
        return [out for out, ens in self.engine_step.output_map.items() if ens in needed]


# --------------------------------------------------------------------------------------------------
# request parsing and validation


@dataclass(frozen=True)
class BLSSettings:
    """The BLS model's parameters (config.pbtxt ``parameters``) and transaction policy.

    Attributes:
        engine_model: ``tensorrt_llm_model_name``: the Triton model the engine step calls.
        accumulate_tokens: stream the full text so far in every response instead of deltas.
        max_beam_width: largest ``beam_width`` a request may ask for (the engine's build limit).
        decoupled: the BLS's ``model_transaction_policy.decoupled``; streaming needs it.
        engine_decoupled: whether to call the engine with ``exec(decoupled=True)``; render keeps it
            equal to ``decoupled`` (one streaming switch, case B29).
        coalesce: when several streamed engine responses are already waiting (the BLS is behind the
            engine), merge them into one postprocessing call and one response (see :data:`MERGE_RULES`).
            No response is ever delayed to wait for another. Off by default: clients then get one
            response per engine response, as from the ensemble.
    """

    engine_model: str = ENGINE_STEP_MODEL
    accumulate_tokens: bool = False
    max_beam_width: int = 1
    decoupled: bool = True
    engine_decoupled: bool | None = None
    coalesce: bool = False

    @property
    def call_engine_decoupled(self) -> bool:
        """True when the engine is called with ``exec(decoupled=True)``."""
        return self.decoupled if self.engine_decoupled is None else self.engine_decoupled


_TOKEN_IDS_RE = re.compile(r"^\s*\[\s*-?\d+(\s*,\s*-?\d+)*\s*\]\s*$")


def _scalar(inputs: Mapping[str, np.ndarray], name: str) -> Any:
    arr = inputs.get(name)
    if arr is None or arr.size == 0:
        return None
    return arr.reshape(-1)[0]


def _as_text(value: Any, field_name: str) -> str:
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise BLSRequestError(field_name, f"is not valid UTF-8 ({exc})") from exc
    if isinstance(value, str):
        return value
    raise BLSRequestError(field_name, f"must be strings (TYPE_STRING), got {type(value).__name__}")


def parse_word_list(value: Any, field_name: str = STOP_WORDS) -> list[str]:
    """The stop strings of a ``stop_words`` request tensor.

    Each element is one word or phrase, never split on commas, as repo-builder's preprocessing reads
    it (``wordlists.py``); elements that are JSON lists of integers (``"[13]"``) are token ids for the
    engine's token-level stop list, not text, and are skipped here; empty elements are dropped
    (trtllm-0.5 clients send ``""``). Accepts None, a str/bytes, or a sequence/array of str/bytes.

    Raises:
        BLSRequestError: naming ``field_name`` when an element is not a string or not UTF-8.
    """
    if value is None:
        return []
    if isinstance(value, (str, bytes)):
        items: Iterable[Any] = [value]
    elif isinstance(value, np.ndarray):
        if value.dtype != object and value.dtype.kind not in ("S", "U"):
            raise BLSRequestError(field_name, f"must be strings (TYPE_STRING), got dtype {value.dtype}")
        items = value.reshape(-1).tolist()
    elif isinstance(value, (list, tuple)):
        items = value
    else:
        raise BLSRequestError(field_name, f"must be a string or a list of strings, got {type(value).__name__}")
    words: list[str] = []
    for item in items:
        text = _as_text(item, field_name)
        if not text or _TOKEN_IDS_RE.match(text):
            continue
        words.append(text)
    return list(dict.fromkeys(words))


@dataclass(frozen=True)
class RequestPlan:
    """What the BLS decided about one request (one batch row) after validation.

    Attributes:
        stream: the client asked for streaming (``stream``).
        beam_width: requested beams (1 when absent).
        num_sequences: sequences the engine returns per request (``num_return_sequences``, else 1).
        stop_words: string stop sequences to cut from the text.
        prompt: ``text_input`` decoded.
        exclude_input: ``exclude_input_in_output`` when the request sets it, else None (engine default).
        batch_size: rows in the request (dimension 0 of ``text_input``).
    """

    stream: bool
    beam_width: int
    num_sequences: int
    stop_words: tuple[str, ...]
    prompt: str
    exclude_input: bool | None
    batch_size: int


def parse_request(inputs: Mapping[str, np.ndarray], settings: BLSSettings) -> RequestPlan:
    """Validate a request's tensors and return its plan.

    Args:
        inputs: request tensors by BLS input name, batch dimension first.
        settings: the BLS parameters.
    Raises:
        BLSRequestError: naming the field: empty ``text_input``; ``max_tokens`` missing or <= 0;
            ``stop_words`` not strings; ``beam_width`` < 1 or above ``max_beam_width``; ``stream`` on a
            non-decoupled BLS or with ``beam_width`` > 1 (case B30); ``accumulate_tokens`` with
            ``beam_width`` > 1; ``num_draft_tokens`` > 0 (no draft model); ``stream`` with several rows.
    """
    text = inputs.get(TEXT_INPUT)
    if text is None or text.size == 0:
        raise BLSRequestError(TEXT_INPUT, "is required and must be a non-empty string")
    batch = int(text.shape[0]) if text.ndim else 1
    prompts = [_as_text(t, TEXT_INPUT) for t in text.reshape(-1).tolist()]
    if any(p == "" for p in prompts):
        raise BLSRequestError(TEXT_INPUT, "must be a non-empty string")
    mt = inputs.get(MAX_TOKENS)
    if mt is None or mt.size == 0:
        raise BLSRequestError(MAX_TOKENS, "is required: the number of tokens to generate (> 0)")
    if mt.dtype.kind not in "iu" or int(np.min(mt)) <= 0:
        raise BLSRequestError(MAX_TOKENS, f"must be an integer > 0, got {mt.reshape(-1).tolist()}")
    stream_v = _scalar(inputs, STREAM)
    stream = bool(stream_v) if stream_v is not None else False
    beam_v = _scalar(inputs, BEAM_WIDTH)
    beam = int(beam_v) if beam_v is not None else 1
    if beam < 1:
        raise BLSRequestError(BEAM_WIDTH, f"must be >= 1, got {beam}")
    if beam > settings.max_beam_width:
        raise BLSRequestError(BEAM_WIDTH, f"{beam} is above max_beam_width={settings.max_beam_width} of this "
                                          "repository (the engine's build limit); lower beam_width or rebuild "
                                          "the engine with a larger max_beam_width")
    if stream and not settings.decoupled:
        raise BLSRequestError(STREAM, "streaming needs the decoupled (streaming) tensorrt_llm_bls; send "
                                      "stream=false or render the repository with streaming enabled")
    if stream and beam > 1:
        raise BLSRequestError(BEAM_WIDTH, f"streaming is only supported with beam_width 1 (got {beam}); send "
                                          "stream=false for beam search")
    if settings.accumulate_tokens and beam > 1:
        raise BLSRequestError(BEAM_WIDTH, f"accumulate_tokens is only implemented for beam_width 1 (got {beam})")
    if stream and batch > 1:
        raise BLSRequestError(TEXT_INPUT, f"a streaming request carries one prompt, got {batch}; send one "
                                          "request per prompt")
    nd = _scalar(inputs, NUM_DRAFT_TOKENS)
    if nd is not None and int(nd) > 0:
        raise BLSRequestError(NUM_DRAFT_TOKENS, "speculative decoding with a draft model is not supported by "
                                                "this BLS; omit num_draft_tokens or send 0")
    nrs = _scalar(inputs, NUM_RETURN_SEQUENCES)
    num_seq = int(nrs) if nrs is not None else 1
    if num_seq < 1:
        raise BLSRequestError(NUM_RETURN_SEQUENCES, f"must be >= 1, got {num_seq}")
    stops = tuple(parse_word_list(inputs.get(STOP_WORDS), STOP_WORDS))
    ex = _scalar(inputs, EXCLUDE_INPUT)
    return RequestPlan(stream=stream, beam_width=beam, num_sequences=num_seq, stop_words=stops,
                       prompt=prompts[0], exclude_input=None if ex is None else bool(ex), batch_size=batch)


# --------------------------------------------------------------------------------------------------
# stop strings


def truncate_at_stop(text: str, stops: Sequence[str], start: int = 0) -> tuple[str, bool]:
    """Cut ``text`` at the earliest occurrence (at or after ``start``, in characters) of any stop string.

    Returns:
        (text before the stop string, True) or (``text``, False) when no stop string occurs.
    """
    cut, which = trim_at_stop(text, stops, start=start)
    return cut, which is not None


class StopStringFilter:
    """Streaming stop-string matcher for one sequence: :class:`.stopstrings.StopStringMatcher` (hold-back
    of a suffix that could begin a stop string, across chunks) plus a protected prompt prefix.

    Args:
        stops: the stop strings (empty ones are ignored).
        protected_prefix: text known to start the output (the prompt when the request asked for
            ``exclude_input_in_output=false``); characters matching it at the start are emitted
            unchecked, so a stop string inside the echoed prompt does not cut the answer.
    """

    __slots__ = ("_matcher", "_prefix")

    def __init__(self, stops: Sequence[str], protected_prefix: str = "") -> None:
        self._matcher = StopStringMatcher(stops)
        self._prefix = protected_prefix

    @property
    def stopped(self) -> bool:
        """True once a stop string completed."""
        return self._matcher.stopped

    def feed(self, delta: str) -> tuple[str, bool]:
        """Add a text delta; return (text to emit now, stopped)."""
        head = ""
        if self._prefix and not self._matcher.stopped:
            n = 0
            limit = min(len(delta), len(self._prefix))
            while n < limit and delta[n] == self._prefix[n]:
                n += 1
            head, delta = delta[:n], delta[n:]
            self._prefix = self._prefix[n:] if not delta else ""
        res = self._matcher.feed(delta)
        return head + res.text, res.stopped

    def flush(self) -> str:
        """At the end of the stream: the held-back text (it did not become a stop string)."""
        return self._matcher.flush()


def stack_rows(responses: Sequence[Mapping[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """Join per-row responses of a multi-row non-streaming request into one response.

    Each output is concatenated along the batch dimension; rows whose shapes differ beyond it are
    padded at the end (zeros, ``b""`` for strings) to the largest shape. Outputs missing from some
    rows are left out.
    """
    if len(responses) == 1:
        return dict(responses[0])
    names = [n for n in responses[0] if all(n in r for r in responses)]
    out: dict[str, np.ndarray] = {}
    for n in names:
        arrs = [np.asarray(r[n]) for r in responses]
        if len({a.ndim for a in arrs}) != 1:
            continue
        shape = tuple(max(a.shape[d] for a in arrs) for d in range(1, arrs[0].ndim))
        padded = []
        for a in arrs:
            if a.shape[1:] != shape:
                fill = b"" if a.dtype == object else 0
                p = np.full((a.shape[0], *shape), fill, dtype=a.dtype)
                p[tuple(slice(0, k) for k in a.shape)] = a
                a = p
            padded.append(a)
        out[n] = np.concatenate(padded, axis=0)
    return out


# --------------------------------------------------------------------------------------------------
# coalescing of streamed engine responses

#: How consecutive streamed engine responses of one sequence merge into one when the BLS has fallen
#: behind the engine (several responses already waiting): engine output name -> rule. ``concat``
#: joins the new tokens (after trimming each response to its ``sequence_length``), ``concat_tokens``
#: joins along the token axis (second to last), ``sum`` adds, ``first``/``last`` keep one response's
#: value. Facts: TensorRT-LLM streaming responses carry only the tokens generated since the previous
#: response (executor default, upstream-reference §3); context logits and arrival/scheduling/first-token
#: times belong to the first response. An engine output without a rule disables coalescing for the
#: request, so per-token outputs are never lost.
MERGE_RULES: dict[str, str] = {
    "output_ids": "concat", "sequence_length": "sum", "output_log_probs": "concat",
    "generation_logits": "concat_tokens", "context_logits": "first", "arrival_time_ns": "first",
    "first_scheduled_time_ns": "first", "first_token_time_ns": "first",
    "cum_log_probs": "last", "sequence_index": "last", "batch_index": "last", "last_token_time_ns": "last",
    "kv_cache_alloc_new_blocks": "last", "kv_cache_reused_blocks": "last", "kv_cache_alloc_total_blocks": "last",
    "acceptance_rate": "last", "total_accepted_draft_tokens": "last", "total_draft_tokens": "last",
    "num_input_tokens": "last", "num_output_tokens": "last", "context_phase_params": "last",
}
_LENGTH_OUTPUT = "sequence_length"
_TOKEN_OUTPUTS = ("output_ids", "output_log_probs")


def can_merge(engine_outputs: Iterable[str]) -> bool:
    """True when every requested engine output has a merge rule (see :data:`MERGE_RULES`)."""
    return all(o in MERGE_RULES for o in engine_outputs)


def merge_responses(responses: Sequence[Mapping[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """Merge consecutive streamed engine responses of one sequence (beam width 1) into one.

    ``output_ids``/``output_log_probs`` ``[1, 1, n_i]`` become ``[1, 1, sum n_i]`` (each trimmed to its
    ``sequence_length`` when present), ``sequence_length`` ``[1, 1]`` the sum, the rest per
    :data:`MERGE_RULES` (unknown outputs: last). Responses lacking an output are skipped for it.
    """
    if len(responses) == 1:
        return dict(responses[0])
    out: dict[str, np.ndarray] = {}
    lengths = [r.get(_LENGTH_OUTPUT) for r in responses]
    names = dict.fromkeys(n for r in responses for n in r)
    for name in names:
        rule = MERGE_RULES.get(name, "last")
        vals = [(r[name], ln) for r, ln in zip(responses, lengths) if name in r]
        if rule == "concat":
            parts = []
            for v, ln in vals:
                if name in _TOKEN_OUTPUTS and ln is not None and v.ndim >= 1 and ln.size == 1:
                    v = v[..., : int(ln.reshape(-1)[0])]
                parts.append(v)
            out[name] = np.concatenate(parts, axis=-1) if len({p.shape[:-1] for p in parts}) == 1 else parts[-1]
        elif rule == "concat_tokens":
            parts = [v for v, _ in vals]
            ok = all(p.ndim >= 2 for p in parts) and len({p.shape[:-2] + p.shape[-1:] for p in parts}) == 1
            out[name] = np.concatenate(parts, axis=-2) if ok else parts[-1]
        elif rule == "sum":
            out[name] = np.sum([v for v, _ in vals], axis=0).astype(vals[0][0].dtype)
        elif rule == "first":
            out[name] = vals[0][0]
        else:
            out[name] = vals[-1][0]
    return out


def _sequence_runs(batch: Sequence[Mapping[str, np.ndarray]]) -> list[list[Mapping[str, np.ndarray]]]:
    """Split a batch of streamed responses into runs of consecutive responses of one sequence."""
    runs: list[list[Mapping[str, np.ndarray]]] = []
    last = object()
    for r in batch:
        si = r.get(SEQUENCE_INDEX)
        key = int(si.reshape(-1)[0]) if si is not None and si.size else 0
        if runs and key == last:
            runs[-1].append(r)
        else:
            runs.append([r])
            last = key
    return runs


# --------------------------------------------------------------------------------------------------
# the request pipeline


class EngineStream(Protocol):
    """Responses of one streaming engine call, each as {engine output name: array}."""

    def __iter__(self) -> Iterator[Mapping[str, np.ndarray]]: ...

    def cancel(self) -> None:
        """Ask the engine to stop generating for this request (best effort)."""

    # Optional: ``batches()`` yields lists of the responses already waiting (at least one, in order);
    # the BLS then merges them (coalescing). Streams without it are read one response at a time.


class StepCaller(Protocol):
    """How the BLS calls other models; implemented over ``pb_utils.InferenceRequest`` in model.py.

    Both methods raise :class:`BLSStepError` (message starting with the model name) when the model
    returns an error.
    """

    def call(self, model: str, inputs: Mapping[str, np.ndarray], outputs: Sequence[str],
             request_id: str) -> Mapping[str, np.ndarray]:
        """One request, one response: ``exec()``. Returns {output name: array}."""

    def stream(self, model: str, inputs: Mapping[str, np.ndarray], outputs: Sequence[str],
               request_id: str) -> EngineStream:
        """One request, many responses: ``exec(decoupled=True)``; empty responses are skipped."""


#: ``send(outputs, final)``: one BLS response; ``outputs`` None means "no tensors, only the flag".
Sender = Callable[[Mapping[str, np.ndarray] | None, bool], None]

_request_ids = itertools.count(1)


def _encode_like(texts: Sequence[str], like: np.ndarray) -> np.ndarray:
    out = np.empty(len(texts), dtype=object)
    out[:] = [t.encode("utf-8") for t in texts]
    return out.reshape(like.shape)


@dataclass
class _SeqState:
    filter: StopStringFilter
    text: str = ""  # accumulated emitted text (accumulate_tokens)


class BLSCore:
    """Runs requests through the wiring: pre steps, the engine (streamed or not), post steps per
    engine response, then text handling (stop strings, accumulation) and response assembly.

    Args:
        wiring: the ensemble steps and the BLS's input/output names.
        settings: the BLS parameters.
        caller: executes step models (``pb_utils`` BLS calls in model.py, fakes in unit tests).
    """

    def __init__(self, wiring: Wiring, settings: BLSSettings, caller: StepCaller) -> None:
        self.wiring = wiring
        self.settings = settings
        self.caller = caller
        self._pre = [(s, list(s.output_map)) for s in wiring.pre_steps]
        self._post = [(s, list(s.output_map)) for s in wiring.post_steps]
        self._text_outputs = wiring.text_outputs
        self._engine_outputs_cache: dict[frozenset[str], list[str]] = {}

    def _model_name(self, step: Step) -> str:
        return self.settings.engine_model if step.model == ENGINE_STEP_MODEL else step.model

    def _engine_outputs(self, wanted: frozenset[str]) -> list[str]:
        got = self._engine_outputs_cache.get(wanted)
        if got is None:
            got = self.wiring.engine_outputs_for(wanted)
            self._engine_outputs_cache[wanted] = got
        return got

    def run(self, inputs: Mapping[str, np.ndarray], send: Sender, *,
            requested_outputs: Iterable[str] | None = None, request_id: str | None = None,
            cancelled: Callable[[], bool] | None = None) -> None:
        """Serve one BLS request: validate, run the steps, and call ``send`` for every response.

        ``send(..., final=True)`` is called exactly once, last, unless an exception escapes (the
        caller then sends the error with the final flag). Non-streaming requests get exactly one
        response per engine response, the last one flagged final (no empty final response).

        Args:
            inputs: the request tensors by BLS input name (batch dimension first).
            send: the response callback.
            requested_outputs: outputs the client asked for (None = all the BLS declares).
            request_id: the client's request id, used in the engine request id for tracing.
            cancelled: polled every ``CANCEL_POLL_EVERY`` engine responses; True stops the request.
        Raises:
            BLSRequestError: the request is invalid (nothing was sent).
            BLSStepError: a step model failed (earlier streamed responses may have been sent).
        """
        plan = parse_request(inputs, self.settings)
        outs = self.wiring.outputs
        if requested_outputs is not None:
            req = set(requested_outputs)
            outs = tuple(o for o in outs if o in req)
        names = tuple(outs)
        rid_base = f"{request_id}:" if request_id else "bls-"
        if plan.batch_size > 1:
            rows = [{k: v[i:i + 1] if v.ndim and v.shape[0] == plan.batch_size else v for k, v in inputs.items()}
                    for i in range(plan.batch_size)]
        else:
            rows = [inputs]
        if plan.stream:
            self._run_row(rows[0], plan, names, send, f"{rid_base}{next(_request_ids)}", cancelled)
            return
        # Non-streaming: hold one response back so the last carries the final flag.
        held: list[dict[str, np.ndarray]] = []

        def hold(outputs: Mapping[str, np.ndarray] | None, final: bool) -> None:
            if outputs is None:
                return
            if held:
                send(held.pop(), False)
            held.append(dict(outputs))

        for i, row in enumerate(rows):
            row_plan = plan if plan.batch_size == 1 else parse_request(row, self.settings)

            def row_send(outputs: Mapping[str, np.ndarray] | None, final: bool, _i: int = i) -> None:
                if outputs is not None and plan.batch_size > 1 and BATCH_INDEX in outputs:
                    outputs = dict(outputs)
                    outputs[BATCH_INDEX] = np.full_like(outputs[BATCH_INDEX], _i)
                hold(outputs, final)

            self._run_row(row, row_plan, names, row_send, f"{rid_base}{next(_request_ids)}", cancelled)
        if held:
            send(held.pop(), True)
        else:
            send(None, True)

    # ---------------------------------------------------------------------------------------------

    def _run_row(self, inputs: Mapping[str, np.ndarray], plan: RequestPlan, names: tuple[str, ...],
                 send: Sender, rid: str, cancelled: Callable[[], bool] | None) -> None:
        env: dict[str, Any] = dict(inputs)
        for step, outputs in self._pre:
            step.scatter(self.caller.call(step.model, step.gather(env), outputs, rid), env)
        wanted = set(names)
        if plan.stream:
            wanted.add(SEQUENCE_INDEX)
        engine = self.wiring.engine_step
        engine_inputs = engine.gather(env)
        engine_outputs = self._engine_outputs(frozenset(wanted))
        model = self.settings.engine_model
        protected = plan.prompt if plan.exclude_input is False else ""
        text_work = bool(plan.stop_words) or (plan.stream and self.settings.accumulate_tokens)
        seqs: dict[Any, _SeqState] = {}
        text_names = self._text_outputs
        post = self._post

        def postprocess(resp: Mapping[str, np.ndarray]) -> dict[str, Any]:
            penv = env.copy()
            engine.scatter(resp, penv)
            for step, outs in post:
                step.scatter(self.caller.call(step.model, step.gather(penv), outs, rid), penv)
            return penv

        def assemble(penv: Mapping[str, Any]) -> dict[str, np.ndarray]:
            return {n: penv[n] for n in names if n in penv}

        if not self.settings.call_engine_decoupled:
            resp = self.caller.call(model, engine_inputs, engine_outputs, rid)
            penv = postprocess(resp)
            if plan.stop_words:
                self._trim_final(penv, text_names, plan, protected)
            send(assemble(penv), True)
            return

        stream = self.caller.stream(model, engine_inputs, engine_outputs, rid)
        if not plan.stream:
            for resp in stream:
                penv = postprocess(resp)
                if plan.stop_words:
                    self._trim_final(penv, text_names, plan, protected)
                send(assemble(penv), False)
            return

        # Streaming.
        accumulate = self.settings.accumulate_tokens
        coalesce = self.settings.coalesce and can_merge(engine_outputs)
        stopped_all = False
        count = 0
        batches_fn = getattr(stream, "batches", None) if coalesce else None
        responses: Iterator[Any] = batches_fn() if batches_fn is not None else ([r] for r in stream)
        for batch in responses:
            count += len(batch)
            if cancelled is not None and count >= CANCEL_POLL_EVERY:
                count = 0
                if cancelled():
                    stream.cancel()
                    stopped_all = True
                    break
            for run in (_sequence_runs(batch) if len(batch) > 1 else (batch,)):
                penv = postprocess(merge_responses(run) if len(run) > 1 else run[0])
                if text_work:
                    seq_arr = penv.get(SEQUENCE_INDEX)
                    seq_id = int(seq_arr.reshape(-1)[0]) if seq_arr is not None and seq_arr.size else 0
                    for tname in text_names:
                        arr = penv.get(tname)
                        if arr is None:
                            continue
                        flat = arr.reshape(-1).tolist()
                        emitted = []
                        for j, item in enumerate(flat):
                            key = (tname, seq_id, j)
                            st = seqs.get(key)
                            if st is None:
                                st = seqs[key] = _SeqState(StopStringFilter(plan.stop_words, protected))
                            delta = item.decode("utf-8", "replace") if isinstance(item, bytes) else str(item)
                            out, _ = st.filter.feed(delta)
                            if accumulate:
                                st.text += out
                                out = st.text
                            emitted.append(out)
                        penv[tname] = _encode_like(emitted, arr)
                    send(assemble(penv), False)
                    if plan.stop_words and self._all_stopped(seqs, plan):
                        stream.cancel()
                        stopped_all = True
                        break
                else:
                    send(assemble(penv), False)
            if stopped_all:
                break
        if stopped_all:
            send(None, True)
            for _ in responses:  # drain what the engine produced before it saw the cancellation
                pass
            return
        # Flush text held back for a stop string that never completed.
        tail: dict[str, list[tuple[Any, str]]] = {}
        for (tname, seq_id, _j), st in seqs.items():
            rest = st.filter.flush()
            if rest:
                if accumulate:
                    st.text += rest
                    rest = st.text
                tail.setdefault(tname, []).append((seq_id, rest))
        if not tail:
            send(None, True)
            return
        items = [(t, seq_id, text) for t, lst in tail.items() for seq_id, text in lst]
        for k, (tname, seq_id, text) in enumerate(items):
            outputs: dict[str, np.ndarray] = {}
            if tname in names:
                outputs[tname] = np.array([[text.encode("utf-8")]], dtype=object)
            if SEQUENCE_INDEX in names:
                outputs[SEQUENCE_INDEX] = np.array([[seq_id]], dtype=np.int32)
            send(outputs, k == len(items) - 1)

    @staticmethod
    def _all_stopped(seqs: Mapping[Any, _SeqState], plan: RequestPlan) -> bool:
        if not seqs or not all(st.filter.stopped for st in seqs.values()):
            return False
        seen = {key[1] for key in seqs}
        return len(seen) >= plan.num_sequences

    @staticmethod
    def _trim_final(penv: dict[str, Any], text_names: Sequence[str], plan: RequestPlan, protected: str) -> None:
        for tname in text_names:
            arr = penv.get(tname)
            if arr is None:
                continue
            texts = []
            for item in arr.reshape(-1).tolist():
                t = item.decode("utf-8", "replace") if isinstance(item, bytes) else str(item)
                start = len(protected) if protected and t.startswith(protected) else 0
                texts.append(truncate_at_stop(t, plan.stop_words, start)[0])
            penv[tname] = _encode_like(texts, arr)
