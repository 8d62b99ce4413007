"""Disaggregated serving for the Python engines: context-only and generation-only requests, and
draft-token verification (``draft_input_ids``, :mod:`.engine_draft`).

NVIDIA's C++ backend reads the request parameter ``request_type`` (``context_and_generation``,
``context_only``, ``generation_only``; an unknown value logs an error and runs both phases) and maps it to
``executor::RequestType``. A context-only response carries the output ``context_phase_params`` (UINT8
``[1, n]``, the serialized ``executor::ContextPhaseParams``); a generation-only request sends it back as the
input of the same name and resumes from it (triton-inference-server/tensorrtllm_backend v0.19.0
``inflight_batcher_llm/src/utils.cc`` ``getRequestType``/``deserializeContextPhaseParams``,
``model_instance_state.cc``; ``all_models/disaggregated_serving/disaggregated_serving_bls/1/model.py``).

Here (:class:`PhasedEngineModel`, the reference and synthetic engines' Triton adapter):

* **context_only**: the prompt is prefilled and exactly one token is generated (the stop rules apply:
  an end token yields none). One non-streaming response: ``output_ids``/``sequence_length`` as for any
  request, plus ``context_phase_params``: UTF-8 JSON (:class:`ContextPhase`) holding the prompt, the first
  token(s) and their log-probs. It plays the role of NVIDIA's ``ContextPhaseParams``, not its format: it
  is opaque to clients, and no KV cache travels (the generation model prefills again).
* **generation_only**: ``context_phase_params`` is required and its prompt must equal ``input_ids``; the
  sequence starts with the context phase's tokens (they count towards ``request_output_len``, are part of
  ``output_ids`` and are streamed first) and decoding continues after them. Greedy output is therefore
  the output of a ``context_and_generation`` request, token for token.
* A context-only or generation-only request takes one row (one ``ContextPhaseParams`` per request).

Errors name the request parameter or input at fault (``tensorrt_llm: input 'context_phase_params': ...``)
and fail that request alone.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from .engine_core import TritonEngineModel
from .engine_draft import DRAFT_INPUT_IDS, DraftGroup, draft_tokens, limit_to_draft
from .engine_outputs import RequestGroup, ResponseSink, Sequence, build_outputs
from .engine_request import ParsedRequest, RequestError, parse_request

#: The request parameter NVIDIA's backend reads, and its values (tensorrtllm_backend v0.19.0 ``utils.cc``).
REQUEST_TYPE = "request_type"
CONTEXT_AND_GENERATION = "context_and_generation"
CONTEXT_ONLY = "context_only"
GENERATION_ONLY = "generation_only"
REQUEST_TYPES = (CONTEXT_AND_GENERATION, CONTEXT_ONLY, GENERATION_ONLY)
#: The tensor that carries a context phase from the context model to the generation model.
CONTEXT_PHASE_PARAMS = "context_phase_params"
_FORMAT = "repo-builder.context-phase.v1"


@dataclass(frozen=True)
class ContextPhase:
    """What a context-only request hands to the generation-only request that resumes it.

    Attributes:
        prompt: the prompt's token ids.
        tokens: the token(s) the context phase generated (empty when it picked the end token).
        log_probs: their log-probabilities (natural log), one per token.
        ended: True when the context phase picked ``end_id`` (the generation phase then generates nothing).
        request_id: the Triton request id of the context request (diagnostics only).
    """

    prompt: list[int]
    tokens: list[int]
    log_probs: list[float]
    ended: bool = False
    request_id: str = ""

    def encode(self) -> np.ndarray:
        """UINT8 ``[1, n]``: the UTF-8 JSON text of this object (the ``context_phase_params`` output)."""
        text = json.dumps(
            {
                "format": _FORMAT,
                "prompt": self.prompt,
                "tokens": self.tokens,
                "log_probs": self.log_probs,
                "ended": self.ended,
                "request_id": self.request_id,
            },
            separators=(",", ":"),
        )
        return np.frombuffer(text.encode("utf-8"), dtype=np.uint8).reshape(1, -1).copy()

    @classmethod
    def decode(cls, arr: Any) -> ContextPhase:
        """Read a ``context_phase_params`` tensor (UINT8, any shape with one row).

        Raises:
            RequestError: not the bytes a context-only request of this engine returned (names the input).
        """
        try:
            raw = np.asarray(arr, dtype=np.uint8).reshape(-1).tobytes()
            data = json.loads(raw.decode("utf-8"))
            if not isinstance(data, dict) or data.get("format") != _FORMAT:
                raise ValueError("unknown format")
            phase = cls(
                prompt=[int(t) for t in data["prompt"]],
                tokens=[int(t) for t in data["tokens"]],
                log_probs=[float(x) for x in data["log_probs"]],
                ended=bool(data.get("ended", False)),
                request_id=str(data.get("request_id", "")),
            )
        except (ValueError, TypeError, KeyError, UnicodeDecodeError):
            raise RequestError(
                CONTEXT_PHASE_PARAMS,
                "is not the context_phase_params output of a context-only request to a repo-builder engine",
                "send the tensor the context model returned, unchanged",
            ) from None
        if len(phase.log_probs) != len(phase.tokens):
            raise RequestError(CONTEXT_PHASE_PARAMS, "holds a different number of tokens and log-probs")
        return phase


def request_type(request: Any) -> str:
    """The ``request_type`` request parameter (``context_and_generation`` when absent).

    Raises:
        RequestError: a value other than :data:`REQUEST_TYPES` (NVIDIA's backend logs an error and runs both
            phases; refusing it names the mistake instead).
    """
    params = getattr(request, "parameters", None)
    if not callable(params):
        return CONTEXT_AND_GENERATION
    raw = params()
    try:
        data = json.loads(raw) if isinstance(raw, (str, bytes)) and raw else (raw or {})
    except ValueError:
        return CONTEXT_AND_GENERATION
    value = data.get(REQUEST_TYPE) if isinstance(data, Mapping) else None
    if value is None or value == "":
        return CONTEXT_AND_GENERATION
    if value not in REQUEST_TYPES:
        raise RequestError(REQUEST_TYPE, f"{value!r} is not one of {', '.join(REQUEST_TYPES)} (request parameter)")
    return str(value)


class _ContextGroup(RequestGroup):
    """A context-only request: one token, one response that also carries ``context_phase_params``."""

    def emit(self, stepped: Any) -> None:
        if self.done or not self.all_finished():
            return
        seq = self.seqs[0]
        phase = ContextPhase(
            prompt=list(seq.req.prompt),
            tokens=list(seq.tokens),
            log_probs=list(seq.log_probs),
            ended=seq.finished == "end_id",
            request_id=self.request_id,
        )
        outputs = build_outputs(self.io, self.seqs, streaming=False, arrival_ns=self.arrival_ns)
        if CONTEXT_PHASE_PARAMS in self.io.outputs:
            outputs[CONTEXT_PHASE_PARAMS] = phase.encode()
        self.done = True
        self.sink.send(outputs, final=True)


def _resume(seq: Sequence, phase: ContextPhase) -> None:
    """Start ``seq`` with the context phase's tokens and apply the stop rules to them."""
    if phase.ended:
        seq.finished = "end_id"
        return
    for token, log_prob in zip(phase.tokens, phase.log_probs):
        if seq.finished is not None:
            break
        seq.accept(token, log_prob)


class PhasedEngineModel(TritonEngineModel):
    """:class:`~.engine_core.TritonEngineModel` that honours ``request_type`` and ``context_phase_params``.

    A request without ``request_type`` (or ``context_and_generation``) is served exactly as before; so is
    every request of a model whose config does not declare ``context_phase_params``.
    """

    def _parse(self, request: Any) -> ParsedRequest:
        kind = request_type(request)
        tensors = self._tensors(request)
        params = tensors.pop(CONTEXT_PHASE_PARAMS, None)
        draft = tensors.pop(DRAFT_INPUT_IDS, None)
        rid = request.request_id() if hasattr(request, "request_id") else ""
        parsed = parse_request(tensors, self.io, self.limits, request_id=rid or "")
        if draft is not None and np.asarray(draft).size and not parsed.stop:
            if kind != CONTEXT_AND_GENERATION:
                raise RequestError(DRAFT_INPUT_IDS, f"is not read by a {kind} request", "send it without request_type")
            limit_to_draft(parsed, draft_tokens(draft, self.limits.vocab_size, self.params.int("max_draft_len")))
        if kind == CONTEXT_AND_GENERATION:
            if params is not None and np.asarray(params).size:
                raise RequestError(
                    CONTEXT_PHASE_PARAMS,
                    "is only read by a generation-only request",
                    f"send request parameter {REQUEST_TYPE}={GENERATION_ONLY}, or leave the input out",
                )
            return parsed
        if parsed.stop:
            return parsed
        if len(parsed.rows) != 1:
            raise RequestError("input_ids", f"a {kind} request takes one row, got {len(parsed.rows)}")
        row = parsed.rows[0]
        if kind == CONTEXT_ONLY:
            row.max_new_tokens = min(row.max_new_tokens, 1)
            row.streaming = False
            parsed.streaming = False
            return parsed
        if params is None or not np.asarray(params).size:
            raise RequestError(
                CONTEXT_PHASE_PARAMS,
                "is required by a generation-only request",
                "send the context_phase_params output of the context-only request",
            )
        phase = ContextPhase.decode(params)
        if phase.prompt != row.prompt:
            raise RequestError(
                CONTEXT_PHASE_PARAMS,
                f"belongs to another prompt ({len(phase.prompt)} tokens; input_ids has {len(row.prompt)})",
                "send the same input_ids as the context-only request",
            )
        return parsed

    def make_group(self, request: Any, parsed: ParsedRequest, sink: ResponseSink) -> RequestGroup | None:
        kind = request_type(request) if parsed.rows else CONTEXT_AND_GENERATION
        draft = self.pb_utils.get_input_tensor_by_name(request, DRAFT_INPUT_IDS)
        if draft is not None and draft.as_numpy().size:
            return DraftGroup(parsed, sink, self.io, draft_tokens(draft.as_numpy(), self.limits.vocab_size))
        if kind == CONTEXT_ONLY:
            return _ContextGroup(parsed, sink, self.io)
        group = RequestGroup(parsed, sink, self.io, split_rows=self.decoupled)
        if kind != GENERATION_ONLY:
            return group
        arr = self.pb_utils.get_input_tensor_by_name(request, CONTEXT_PHASE_PARAMS)
        _resume(group.seqs[0], ContextPhase.decode(arr.as_numpy()))
        if group.streaming or group.all_finished():
            group.emit(group.seqs)  # the context phase's tokens go out first
        return None if group.done else group
