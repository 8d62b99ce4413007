"""Output building for Python engines: the sequences being generated (:class:`Sequence`, with the stop rules),
the output tensors of one response (:func:`build_outputs`) and one Triton request's sequences with the sink its
responses go to (:class:`RequestGroup`). Semantics: see :mod:`.engine_core`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from collections.abc import Sequence as Seq
from typing import Any, Protocol

import numpy as np

from .engine_request import GenerationRequest, ModelIO, ParsedRequest
from .triton_io import IOSpec
from .wordlists import StopWordIndex

# --------------------------------------------------------------------------------------------------
# Sequences and the backend protocol


class GenerationBackend(Protocol):
    """What the scheduler needs from an engine.

    ``step`` produces the next token of every given sequence (one decoding iteration) and returns
    ``(token_id, log_prob)`` per sequence, in order; it keeps per-sequence state in ``seq.state``.
    ``release`` frees that state when the sequence ends.
    """

    vocab_size: int

    def step(self, seqs: Seq[Sequence]) -> list[tuple[int, float]]: ...

    def release(self, seq: Sequence) -> None: ...


class Sequence:
    """One sequence being generated: its request, generated tokens and per-token log-probs."""

    __slots__ = (
        "req",
        "group",
        "tokens",
        "log_probs",
        "sent",
        "finished",
        "state",
        "first_scheduled_ns",
        "first_token_ns",
        "last_token_ns",
        "_stops",
    )

    def __init__(self, req: GenerationRequest, group: RequestGroup) -> None:
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
        self._stops = StopWordIndex(req.stop_words)

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
        if self._stops and self._stops.ends_with_any(self.tokens):
            self.finished = "stop_words"
        elif len(self.tokens) >= req.max_new_tokens:
            self.finished = "length"


# --------------------------------------------------------------------------------------------------
# Responses


class ResponseSink(Protocol):
    """Where a request's responses go (a Triton response sender, or a collector in tests)."""

    def send(self, outputs: dict[str, np.ndarray] | None, *, final: bool, error: str | None = None) -> None: ...

    def is_cancelled(self) -> bool: ...


def _filler(spec: IOSpec, batch: int) -> np.ndarray:
    shape = (batch, *[d if d > 0 else 1 for d in spec.dims])
    return np.zeros(shape, dtype=spec.numpy_dtype)


#: When NVIDIA's backend puts each optional output in a response (tensorrtllm_backend v0.19.0
#: ``inflight_batcher_llm/src/model_instance_state.cc``, the response loop): log probs only with
#: ``return_log_probs`` (the executor computes none otherwise), ``batch_index`` only when the request has
#: more than one row, ``sequence_index`` only with ``num_return_sequences`` > 1, perf metrics only with
#: ``return_perf_metrics``, logits only when asked for, ``context_phase_params`` only for context-only
#: requests; TRT-LLM 1.2's ``num_input_tokens``/``num_output_tokens`` with their ``return_num_*`` inputs.
#: Output name -> the gate (see :func:`_gate_open`); outputs not listed are never sent.
_GATES = {
    "output_ids": "always",
    "sequence_length": "always",
    "cum_log_probs": "log_probs",
    "output_log_probs": "log_probs",
    "batch_index": "batched",
    "num_input_tokens": "num_input_tokens",
    "num_output_tokens": "num_output_tokens",
    "kv_cache_alloc_new_blocks": "perf",
    "kv_cache_reused_blocks": "perf",
    "kv_cache_alloc_total_blocks": "perf",
    "arrival_time_ns": "perf",
    "first_scheduled_time_ns": "perf",
    "first_token_time_ns": "perf",
    "last_token_time_ns": "perf",
    "acceptance_rate": "perf",
    "total_accepted_draft_tokens": "perf",
    "total_draft_tokens": "perf",
    "token_offset": "streamed",  # repo-builder's: ordering across postprocessing instances (stream_state.py)
}
#: outputs computed here; the other gated ones (kv-cache and speculative-decoding stats) are zeros
_COMPUTED = {
    "output_ids",
    "sequence_length",
    "cum_log_probs",
    "output_log_probs",
    "batch_index",
    "num_input_tokens",
    "num_output_tokens",
    "arrival_time_ns",
    "first_scheduled_time_ns",
    "first_token_time_ns",
    "last_token_time_ns",
    "token_offset",
}
_PLANS: dict[int, tuple[ModelIO, list[tuple[str, str, Any, np.ndarray | None]]]] = {}


def _plan(io: ModelIO) -> list[tuple[str, str, Any, np.ndarray | None]]:
    """(name, gate, numpy dtype, batch-1 zero filler or None when computed) per declared output that NVIDIA's
    backend can send, cached per ModelIO."""
    hit = _PLANS.get(id(io))
    if hit is None or hit[0] is not io:
        plan = [
            (name, _GATES[name], spec.numpy_dtype, None if name in _COMPUTED else _filler(spec, 1))
            for name, spec in io.outputs.items()
            if name in _GATES
        ]
        for _name, _gate, _dt, filler in plan:
            if filler is not None:
                filler.setflags(write=False)
        hit = _PLANS[id(io)] = (io, plan)
    return hit[1]


def _gate_open(gate: str, req: GenerationRequest) -> bool:
    if gate == "always":
        return True
    if gate == "log_probs":
        return req.return_log_probs
    if gate == "batched":
        return req.batch_size > 1
    if gate == "perf":
        return req.return_perf_metrics
    if gate == "num_input_tokens":
        return req.return_num_input_tokens
    return req.return_num_output_tokens


def build_outputs(io: ModelIO, seqs: Seq[Sequence], *, streaming: bool, arrival_ns: int = 0) -> dict[str, np.ndarray]:
    """The output tensors of one response for ``seqs`` (one per batch row, beam 1).

    Streaming: each sequence's tokens since its last response (``seq.sent``), never the prompt.
    Otherwise: all generated tokens, after the prompt when ``exclude_input_in_output`` is false.
    Shapes: ``output_ids`` ``[B, 1, T]`` (padded with pad_id, else end_id, else 0), ``sequence_length``
    ``[B, 1]``, ``cum_log_probs`` ``[B, 1]``, ``output_log_probs`` ``[B, 1, T_gen]``;
    ``token_offset`` ``[B, 1]`` only when streaming (each sequence's generated tokens sent before this
    response: 0, 1, 2, ... for one token per response; ours, read by postprocessing's shared stream state),
    ``batch_index``/``num_*_tokens``/``*_time_ns`` ``[B, 1]`` (``num_output_tokens`` counts the generated
    tokens of this response when streaming, all of them otherwise, so a client summing a stream's values
    gets the total -- the OpenAI frontend does); kv-cache and speculative-decoding stats are zeros
    (batch-1 fillers are shared read-only arrays). Only the outputs NVIDIA's backend would send for this
    request are present (:data:`_GATES`: e.g. no perf metrics unless ``return_perf_metrics``); a missing
    output is simply absent from the ensemble's response (Triton 2.51 allows it: core #399). Dtypes come
    from the model config.
    """
    token_rows: list[list[int]] = []
    lp_rows: list[list[float]] = []
    for s in seqs:
        if streaming:
            token_rows.append(s.tokens[s.sent :])
            lp_rows.append(s.log_probs[s.sent :])
        else:
            token_rows.append(s.tokens if s.req.exclude_input_in_output else s.req.prompt + s.tokens)
            lp_rows.append(s.log_probs)
    batch = len(seqs)
    out: dict[str, np.ndarray] = {}
    for name, gate, dt, filler in _plan(io):
        if gate == "streamed":
            if not streaming:
                continue
        elif gate != "always" and not any(_gate_open(gate, s.req) for s in seqs):
            continue
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
                    arr[i, 0, : len(row)] = row
        elif name == "output_log_probs":
            width = max(max((len(r) for r in lp_rows), default=0), 1)
            arr = np.zeros((batch, 1, width), dtype=dt)
            for i, (s, lps) in enumerate(zip(seqs, lp_rows)):
                if s.req.return_log_probs and lps:
                    arr[i, 0, : len(lps)] = lps
        elif name == "sequence_length" and batch == 1:
            arr = np.array([[len(token_rows[0])]], dtype=dt)
        else:
            col: list[float]  # one value per sequence (ints, or log-probabilities)
            if name == "sequence_length":
                col = [len(r) for r in token_rows]
            elif name == "cum_log_probs":
                col = [sum(s.log_probs) if s.req.return_log_probs else 0.0 for s in seqs]
            elif name == "batch_index":
                col = [s.req.batch_index for s in seqs]
            elif name == "num_input_tokens":
                col = [len(s.req.prompt) for s in seqs]
            elif name == "num_output_tokens":  # per response, like NVIDIA's: a stream's values add up
                col = [len(r) for r in token_rows] if streaming else [len(s.tokens) for s in seqs]
            elif name == "token_offset":  # generated tokens of the sequence sent in earlier responses
                col = [s.sent for s in seqs]
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
    Non-streaming, ``split_rows`` (a decoupled model): one response per row as soon as that row has
    finished, each ``[1, ...]`` and tagged with its ``batch_index`` when the request has several rows; the
    last one carries the final flag. That is how NVIDIA's backend answers a batched request (tensorrtllm_backend
    v0.19.0 ``utils.cc`` splits the batch into one executor request per row, ``model_instance_state.cc`` sends
    each row's response with its ``batchIndex``), so clients that file responses under ``batch_index[0][0]``
    and read ``output[0]`` (``end_to_end_grpc_client.py --batch-inputs``) get every row.
    Non-streaming otherwise (a model that is not decoupled sends exactly one response): all rows stacked.
    """

    def __init__(self, parsed: ParsedRequest, sink: ResponseSink, io: ModelIO, *, split_rows: bool = False) -> None:
        self.request_id = parsed.request_id
        self.streaming = parsed.streaming
        self.sink = sink
        self.io = io
        self.split_rows = split_rows
        self.seqs = [Sequence(r, self) for r in parsed.rows]
        self._rows_sent: set[int] = set()
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
                if not pending:  # e.g. the end token: no new token, but the stream must say it ended
                    self._send_empty_final()
                self.done = True
        elif self.split_rows and len(self.seqs) > 1:
            ready = [i for i, s in enumerate(self.seqs) if s.finished is not None and i not in self._rows_sent]
            for n, i in enumerate(ready):
                self._rows_sent.add(i)
                last = finished and n == len(ready) - 1
                outputs = build_outputs(self.io, [self.seqs[i]], streaming=False, arrival_ns=self.arrival_ns)
                self.sink.send(outputs, final=last)
            if finished:
                self.done = True
        elif finished:
            self.sink.send(build_outputs(self.io, self.seqs, streaming=False, arrival_ns=self.arrival_ns), final=True)
            self.done = True

    def fail(self, message: str) -> None:
        """Send an error as the final response (once)."""
        if not self.done:
            self.done = True
            for s in self.seqs:
                s.finished = s.finished or "error"
            self.sink.send(None, final=True, error=message)

    def drop(self) -> None:
        """End a cancelled request: final flag, no outputs (streaming: no new tokens, see
        :meth:`_send_empty_final`)."""
        if not self.done:
            self.done = True
            for s in self.seqs:
                s.finished = s.finished or "cancelled"
            if self.streaming:
                self._send_empty_final()
            else:
                self.sink.send(None, final=True)

    def _send_empty_final(self) -> None:
        """The final response of a stream whose last step produced no token: the outputs of zero new tokens
        (``output_ids`` ``[1, 1, 0]``, ``sequence_length`` ``[[0]]``), not a bare final flag. Triton's gRPC
        front end drops a bare flag unless the client set ``enable_empty_final_response``, so such a client
        would never see ``triton_final_response`` true; and an ensemble needs tensors to run postprocessing
        on, so it can flag its own last response final. NVIDIA's backend likewise ends every executor
        request with a response object, whose token list may be empty."""
        if not self.seqs:  # a request of no rows has nothing to describe
            self.sink.send(None, final=True)
            return
        last = self.seqs[-1]
        self.sink.send(build_outputs(self.io, [last], streaming=True, arrival_ns=self.arrival_ns), final=True)
