"""BLS request plan: validation of the client-facing request fields with messages that name the field
(:class:`BLSRequestError`), and the plan of one request (:func:`parse_request` -> :class:`RequestPlan`).
See :mod:`.bls`."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from .bls_wiring import ENGINE_STEP_MODEL
from .errors import RequestError
from .limits import LIMITS, check

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
USE_DRAFT_LOGITS = "use_draft_logits"
SEQUENCE_INDEX = "sequence_index"
BATCH_INDEX = "batch_index"
#: The client's switch for the engine's perf-metric outputs; also the engine input's name (contract).
RETURN_PERF_METRICS = "return_perf_metrics"
#: Engine output (perf metric) that postprocessing reads only to key ensemble streams; the BLS keys its
#: streams by a request id unique to this process, so it never needs it.
ARRIVAL_TIME_NS = "arrival_time_ns"


#: A bad request to the BLS: the message names the request field (``"max_tokens: must be > 0 ..."``).
BLSRequestError = RequestError


def check_numbers(inputs: Mapping[str, np.ndarray]) -> None:
    """Check every numeric field of :data:`.limits.LIMITS` the request carries, element by element.

    Raises:
        BLSRequestError: naming the first field whose value is out of range, NaN or inf.
    """
    for name, arr in inputs.items():
        spec = LIMITS.get(name)
        if spec is None or spec.field != name or arr is None or np.asarray(arr).size == 0:
            continue
        a = np.asarray(arr)
        if a.dtype.kind not in "iufb":
            continue  # the model config's dtype decides; Triton refuses other dtypes before the BLS runs
        for value in a.reshape(-1).tolist():
            check(name, value)


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
        exclude_input_default: the engine's ``exclude_input_in_output`` parameter (rendered into the BLS
            too): whether a non-streaming text starts with the echoed prompt when the request does not say.
        draft_model: ``tensorrt_llm_draft_model_name``: the draft model of speculative decoding (None: a request
            with ``num_draft_tokens`` > 0 is refused); :mod:`.bls_draft`.
        max_draft_len: the target engine's ``max_draft_len`` (parameter ``max_draft_len``, from the engine's
            config.json): most ``num_draft_tokens`` a request may ask for; None = unknown (not checked here).
    """

    engine_model: str = ENGINE_STEP_MODEL
    accumulate_tokens: bool = False
    max_beam_width: int = 1
    decoupled: bool = True
    engine_decoupled: bool | None = None
    coalesce: bool = False
    exclude_input_default: bool = False
    draft_model: str | None = None
    max_draft_len: int | None = None

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
        num_draft_tokens: draft tokens per speculative iteration (0: no speculation).
        use_draft_logits: the target verifies with the draft's logits.
    """

    stream: bool
    beam_width: int
    num_sequences: int
    stop_words: tuple[str, ...]
    prompt: str
    exclude_input: bool | None
    batch_size: int
    num_draft_tokens: int = 0
    use_draft_logits: bool = False


def _prompts(text: np.ndarray | None) -> tuple[int, list[str]]:
    """``(batch, prompts)`` of ``text_input`` (bytes ``[batch, 1]``; batch = dimension 0, a 0-D tensor is one).

    Raises:
        BLSRequestError: ``text_input`` missing, empty, holding an empty string or not UTF-8.
    """
    if text is None or text.size == 0:
        raise BLSRequestError(TEXT_INPUT, "is required and must be a non-empty string")
    batch = int(text.shape[0]) if text.ndim else 1
    prompts = [_as_text(t, TEXT_INPUT) for t in text.reshape(-1).tolist()]
    if any(p == "" for p in prompts):
        raise BLSRequestError(TEXT_INPUT, "must be a non-empty string")
    return batch, prompts


def _check_max_tokens(mt: np.ndarray | None) -> None:
    """Raise :class:`BLSRequestError` (``max_tokens``) unless it is present, non-empty and of an integer
    dtype (its range: :func:`check_numbers`)."""
    if mt is None or mt.size == 0:
        raise BLSRequestError(MAX_TOKENS, "is required: the number of tokens to generate (> 0)")
    if mt.dtype.kind not in "iu":
        raise BLSRequestError(MAX_TOKENS, f"must be an integer, got dtype {mt.dtype}")


def _check_stream_and_beams(stream: bool, beam: int, batch: int, settings: BLSSettings) -> None:
    """Raise :class:`BLSRequestError` for ``beam`` (``beam_width``) above ``max_beam_width``, ``stream`` on
    a non-decoupled BLS or with several beams (B30), ``accumulate_tokens`` with several beams, or ``stream``
    with ``batch`` > 1 rows; checked in that order."""
    if beam > settings.max_beam_width:
        raise BLSRequestError(
            BEAM_WIDTH,
            f"{beam} is above max_beam_width={settings.max_beam_width} of this "
            "repository (the engine's build limit); lower beam_width or rebuild "
            "the engine with a larger max_beam_width",
        )
    if stream and not settings.decoupled:
        raise BLSRequestError(
            STREAM,
            "streaming needs the decoupled (streaming) tensorrt_llm_bls; send "
            "stream=false or render the repository with streaming enabled",
        )
    if stream and beam > 1:
        raise BLSRequestError(
            BEAM_WIDTH, f"streaming is only supported with beam_width 1 (got {beam}); send stream=false for beam search"
        )
    if settings.accumulate_tokens and beam > 1:
        raise BLSRequestError(BEAM_WIDTH, f"accumulate_tokens is only implemented for beam_width 1 (got {beam})")
    if stream and batch > 1:
        raise BLSRequestError(
            TEXT_INPUT, f"a streaming request carries one prompt, got {batch}; send one request per prompt"
        )


def _check_draft(num_draft: int, batch: int, beam: int, num_seq: int, settings: BLSSettings) -> None:
    """Raise :class:`BLSRequestError` (``num_draft_tokens``, or the field that has several) for a negative
    ``num_draft``, or a positive one without a draft model, above ``max_draft_len``, or with several rows
    (``batch``), beams (``beam``) or sequences (``num_seq``)."""
    if num_draft < 0:
        raise BLSRequestError(NUM_DRAFT_TOKENS, f"must be >= 0, got {num_draft}")
    if num_draft > 0:
        if not settings.draft_model:
            raise BLSRequestError(
                NUM_DRAFT_TOKENS,
                "cannot perform speculative decoding without a draft model (tensorrt_llm_draft_model_name is "
                "unset in this repository); omit num_draft_tokens or send 0",
            )
        limit = settings.max_draft_len
        if limit is not None and num_draft > limit:
            raise BLSRequestError(
                NUM_DRAFT_TOKENS,
                f"{num_draft} is larger than the target engine's max_draft_len ({limit}: the most draft tokens it "
                f"verifies per step, fixed when the engine was built); send at most {limit}",
            )
        for bad, field in ((batch > 1, TEXT_INPUT), (beam > 1, BEAM_WIDTH), (num_seq > 1, NUM_RETURN_SEQUENCES)):
            if bad:
                raise BLSRequestError(field, "speculative decoding (num_draft_tokens > 0) takes one prompt, one beam")


def parse_request(inputs: Mapping[str, np.ndarray], settings: BLSSettings) -> RequestPlan:
    """Validate a request's tensors and return its plan.

    Args:
        inputs: request tensors by BLS input name, batch dimension first.
        settings: the BLS parameters.
    Raises:
        BLSRequestError: naming the field: empty ``text_input``; ``max_tokens`` missing; any numeric field
            out of its :data:`.limits.LIMITS` range, NaN or inf (``max_tokens`` <= 0, ``num_return_sequences`` 0,
            ``temperature`` NaN, ...);
            ``stop_words`` not strings; ``beam_width`` < 1 or above ``max_beam_width``; ``stream`` on a
            non-decoupled BLS or with ``beam_width`` > 1 (case B30); ``accumulate_tokens`` with
            ``beam_width`` > 1; ``num_draft_tokens`` > 0 without a draft model, above ``max_draft_len``, or with several
            rows, beams or sequences; ``stream`` with several rows.
    """
    batch, prompts = _prompts(inputs.get(TEXT_INPUT))
    _check_max_tokens(inputs.get(MAX_TOKENS))
    check_numbers(inputs)
    stream_v = _scalar(inputs, STREAM)
    stream = bool(stream_v) if stream_v is not None else False
    beam_v = _scalar(inputs, BEAM_WIDTH)
    beam = int(beam_v) if beam_v is not None else 1
    _check_stream_and_beams(stream, beam, batch, settings)
    nd = _scalar(inputs, NUM_DRAFT_TOKENS)
    num_draft = int(nd) if nd is not None else 0
    nrs = _scalar(inputs, NUM_RETURN_SEQUENCES)
    num_seq = int(nrs) if nrs is not None else 1  # >= 1: check_numbers (one rule with the engine)
    _check_draft(num_draft, batch, beam, num_seq, settings)
    stops = tuple(parse_word_list(inputs.get(STOP_WORDS), STOP_WORDS))
    ex = _scalar(inputs, EXCLUDE_INPUT)
    return RequestPlan(
        stream=stream,
        beam_width=beam,
        num_sequences=num_seq,
        stop_words=stops,
        prompt=prompts[0],
        exclude_input=None if ex is None else bool(ex),
        batch_size=batch,
        num_draft_tokens=num_draft,
        use_draft_logits=bool(_scalar(inputs, USE_DRAFT_LOGITS) or False),
    )
