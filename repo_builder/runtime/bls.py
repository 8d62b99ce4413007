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

Rooms: the wiring (:mod:`.bls_wiring`), the request plan (:mod:`.bls_request`), one engine request's post
steps (:mod:`.bls_row`), response merging and stop strings (:mod:`.bls_responses`), and here the flow
(:class:`BLSCore`); their names are re-exported here.

Facts: the field renames and validation rules follow NVIDIA's BLS (tensorrtllm_backend
``all_models/inflight_batcher_llm/tensorrt_llm_bls``, ``lib/decode.py`` and ``lib/triton_decoder.py``
at commit c2e65b8; string stop words from tag v0.19.0).
"""

from __future__ import annotations

import itertools
import os
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from .bls_calls import (  # noqa: F401  (re-exported: moved from this module)
    NON_STREAM_CANCEL_POLL_SECONDS,
    CancelWatch,
    EngineStream,
    Sender,
    StepCaller,
    _PendingCancel,
)
from .bls_request import (
    ARRIVAL_TIME_NS,
    BATCH_INDEX,
    BEAM_WIDTH,
    EXCLUDE_INPUT,
    MAX_TOKENS,
    NUM_DRAFT_TOKENS,
    NUM_RETURN_SEQUENCES,
    RETURN_PERF_METRICS,
    SEQUENCE_INDEX,
    STOP_WORDS,
    STREAM,
    TEXT_INPUT,
    BLSRequestError,
    BLSSettings,
    RequestPlan,
    parse_request,
    parse_word_list,
)
from .bls_responses import (
    MERGE_RULES,
    StopStringFilter,
    _encode_like,
    _SeqState,
    _sequence_runs,
    can_merge,
    filter_stream_texts,
    flush_stream_texts,
    merge_responses,
    stack_rows,
    tail_responses,
    truncate_at_stop,
)
from .bls_row import RowCall
from .bls_wiring import ENGINE_STEP_MODEL, Step, Wiring, WiringError
from .errors import StepError
from .metrics import NULL_METRICS, Metrics

__all__ = [
    "BATCH_INDEX",
    "BEAM_WIDTH",
    "CANCEL_POLL_EVERY",
    "CANCEL_POLL_SECONDS",
    "ENGINE_STEP_MODEL",
    "EXCLUDE_INPUT",
    "MAX_TOKENS",
    "MERGE_RULES",
    "NUM_DRAFT_TOKENS",
    "NUM_RETURN_SEQUENCES",
    "SEQUENCE_INDEX",
    "STOP_WORDS",
    "STREAM",
    "TEXT_INPUT",
    "BLSCore",
    "BLSRequestError",
    "BLSSettings",
    "BLSStepError",
    "EngineStream",
    "RequestPlan",
    "Sender",
    "Step",
    "StepCaller",
    "StopStringFilter",
    "Wiring",
    "WiringError",
    "can_merge",
    "merge_responses",
    "parse_request",
    "parse_word_list",
    "stack_rows",
    "truncate_at_stop",
]

#: How often (in engine responses) a streaming request polls the client-side cancellation flag;
#: polling is an IPC round trip in the Python backend, so it is not done per token.
CANCEL_POLL_EVERY = 16
#: ... and not more often than this (seconds): with a fast engine 16 responses take a few ms, and a
#: client's cancellation is still noticed within this time.
CANCEL_POLL_SECONDS = 0.05


#: A step model failed; the message starts with the step model's name.
BLSStepError = StepError


# --------------------------------------------------------------------------------------------------
# the request pipeline


_request_ids = itertools.count(1)
#: Makes the BLS's engine/postprocessing request ids unique across processes (several BLS instances share
#: one postprocessing model when ``bls_local_postprocessing`` is off, and its stream state is keyed by the id).
_PROCESS_TAG = os.urandom(4).hex()
#: The watcher of every non-streaming request of this process (:class:`CancelWatch`).
_CANCEL_WATCH = CancelWatch()

#: Ensemble tensors that postprocessing reads only to tell streams apart (``postprocessing.py``: the
#: ensemble key is request id + ``arrival_time_ns``, rows by ``batch_index``, sequences by
#: ``sequence_index``). The BLS sends one row per engine call under a request id of its own, so it asks the
#: engine for them only when the client requests them, or ``sequence_index`` when several sequences share
#: the call (``num_return_sequences`` > 1). Each one less is a tensor less in every engine response.
_STREAM_HINTS = (ARRIVAL_TIME_NS, BATCH_INDEX, SEQUENCE_INDEX)
#: The ensemble tensor of the engine's ``token_offset``, which orders a stream's responses across several
#: postprocessing instances (stream_state.py): asked for only where the post steps run as models, not in
#: this process (``bls_local_postprocessing``), where one state per stream lives here anyway.
TOKEN_OFFSET_TENSOR = "_TOKEN_OFFSET"


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
        self._post = [(s, list(s.output_map)) for s in wiring.post_steps]
        self._text_outputs = wiring.text_outputs
        self._engine_outputs_cache: dict[tuple[frozenset[str], bool], list[str]] = {}
        engine = wiring.engine_step
        # The engine's return_perf_metrics comes from preprocessing (true for the ensemble's stream key);
        # the BLS passes the client's own flag instead (NVIDIA's BLS sends the request's return_perf_metrics)
        # and does not ask preprocessing for that output, so preprocessing leaves its ensemble stream keys
        # (first-use ids, the stream ledger) to the ensemble's requests.
        src = engine.input_map.get(RETURN_PERF_METRICS)
        self._perf_source = src if src is not None and src not in wiring.inputs else None
        self._pre = [(s, [o for o, ens in s.output_map.items() if ens != self._perf_source]) for s in wiring.pre_steps]
        # model name -> in-process core (model.py's _Caller); a caller without that map (unit-test fakes)
        # counts as running the post steps itself
        local = getattr(caller, "local", None)
        self._post_in_process = not isinstance(local, Mapping) or all(s.model in local for s in wiring.post_steps)
        #: counts cancelled streams and stop-string hits (model.py sets :func:`.metrics.for_model`'s)
        self.metrics: Metrics = NULL_METRICS

    def _model_name(self, step: Step) -> str:
        return self.settings.engine_model if step.model == ENGINE_STEP_MODEL else step.model

    def _engine_outputs(self, wanted: frozenset[str], several_sequences: bool) -> list[str]:
        """Engine outputs to request: those behind ``wanted`` (client outputs) and the post steps' inputs,
        without the stream hints (:data:`_STREAM_HINTS`) nobody needs for this request."""
        key = (wanted, several_sequences)
        got = self._engine_outputs_cache.get(key)
        if got is None:
            skip = {h for h in _STREAM_HINTS if h not in wanted}
            if self._post_in_process or not self.wiring.post_steps:
                skip.add(TOKEN_OFFSET_TENSOR)
            if several_sequences:
                skip.discard(SEQUENCE_INDEX)
            omap = self.wiring.engine_step.output_map
            got = [o for o in self.wiring.engine_outputs_for(wanted) if omap[o] not in skip]
            self._engine_outputs_cache[key] = got
        return got

    def run(
        self,
        inputs: Mapping[str, np.ndarray],
        send: Sender,
        *,
        requested_outputs: Iterable[str] | None = None,
        request_id: str | None = None,
        cancelled: Callable[[], bool] | None = None,
    ) -> None:
        """Serve one BLS request: validate, run the steps, and call ``send`` for every response.

        ``send(..., final=True)`` is called exactly once, last, unless an exception escapes (the
        caller then sends the error with the final flag). Non-streaming requests get exactly one
        response per engine response, the last one flagged final (no empty final response).

        Args:
            inputs: the request tensors by BLS input name (batch dimension first).
            send: the response callback.
            requested_outputs: outputs the client asked for (None = all the BLS declares).
            request_id: the client's request id, used in the engine request id for tracing.
            cancelled: polled every ``CANCEL_POLL_EVERY`` engine responses, at most every
                ``CANCEL_POLL_SECONDS``; True stops the request.
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
        rid_base = f"{request_id}:{_PROCESS_TAG}-" if request_id else f"bls-{_PROCESS_TAG}-"
        rows: list[Mapping[str, np.ndarray]]
        if plan.batch_size > 1:
            rows = [
                {k: v[i : i + 1] if v.ndim and v.shape[0] == plan.batch_size else v for k, v in inputs.items()}
                for i in range(plan.batch_size)
            ]
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
                # every row's answer says which row it is (the engine call had one row, so the engine sent
                # none), as NVIDIA's backend tags each row's response of a batched request
                if outputs is not None and plan.batch_size > 1 and BATCH_INDEX in names:
                    outputs = dict(outputs)
                    outputs[BATCH_INDEX] = np.array([[_i]], dtype=np.int32)
                hold(outputs, final)

            self._run_row(row, row_plan, names, row_send, f"{rid_base}{next(_request_ids)}", cancelled)
        if held:
            send(held.pop(), True)
        else:
            send(None, True)

    # ---------------------------------------------------------------------------------------------

    def _run_row(
        self,
        inputs: Mapping[str, np.ndarray],
        plan: RequestPlan,
        names: tuple[str, ...],
        send: Sender,
        rid: str,
        cancelled: Callable[[], bool] | None,
    ) -> None:
        """One row's engine request ``rid``, however it ends (last response, stop string, cancellation,
        an error): then the caller's ``end_request(rid)``, if it has one, frees the postprocessing state of
        ``rid`` (each engine request has its own id, so nothing else holds it)."""
        try:
            self._serve_row(inputs, plan, names, send, rid, cancelled)
        finally:
            end = getattr(self.caller, "end_request", None)
            if end is not None:
                end(rid)

    def _serve_row(
        self,
        inputs: Mapping[str, np.ndarray],
        plan: RequestPlan,
        names: tuple[str, ...],
        send: Sender,
        rid: str,
        cancelled: Callable[[], bool] | None,
    ) -> None:
        """One row's engine request ``rid``: the pre steps, then the engine called once
        (:meth:`_serve_unary`), streamed for a non-streaming client (:meth:`_serve_once`) or streamed
        (:meth:`_serve_stream`), each of its responses through the post steps to ``send``."""
        env: dict[str, Any] = dict(inputs)
        for step, outputs in self._pre:
            step.scatter(self.caller.call(step.model, step.gather(env), outputs, rid), env)
        if self._perf_source is not None:
            asked = inputs.get(RETURN_PERF_METRICS)
            if asked is None:
                env.pop(self._perf_source, None)
            else:
                env[self._perf_source] = asked
        engine = self.wiring.engine_step
        engine_inputs = engine.gather(env)
        engine_outputs = self._engine_outputs(frozenset(names), plan.num_sequences > 1)
        model = self.settings.engine_model
        exclude = self.settings.exclude_input_default if plan.exclude_input is None else plan.exclude_input
        # an echoed prompt is not searched for stop strings; streamed responses never carry the prompt
        protected = "" if exclude or plan.stream else plan.prompt
        row = RowCall(self.caller, engine, self._post, plan, names, send, rid, env, protected)
        spec = self._speculative(plan, engine_inputs, engine_outputs, rid, exclude)
        if not self.settings.call_engine_decoupled:
            resp = next(iter(spec)) if spec else self.caller.call(model, engine_inputs, engine_outputs, rid)
            self._serve_unary(row, resp)
        elif not plan.stream:
            self._serve_once(row, engine_inputs, engine_outputs, spec, cancelled)
        else:
            stream = spec or self.caller.stream(model, engine_inputs, engine_outputs, rid)
            self._serve_stream(row, stream, engine_outputs, cancelled)

    def _serve_unary(self, row: RowCall, resp: Mapping[str, np.ndarray]) -> None:
        """The only engine response ``resp`` (a non-decoupled engine call) as the final BLS response, its
        texts cut at the first stop string."""
        penv = row.postprocess(resp)
        if row.plan.stop_words and self._trim_final(penv, self._text_outputs, row.plan, row.protected):
            self.metrics.inc("repo_builder_stop_strings_hit_total")
        row.send(row.assemble(penv), True)

    def _serve_once(
        self,
        row: RowCall,
        engine_inputs: Mapping[str, np.ndarray],
        engine_outputs: list[str],
        spec: Any,
        cancelled: Callable[[], bool] | None,
    ) -> None:
        """A non-streaming request to a decoupled engine (``spec``: the draft-target loop, or None): every
        engine response sent non-final (:meth:`run` holds the last back), its texts cut at stop strings."""
        plan, model = row.plan, self.settings.engine_model
        cut_all = bool(plan.stop_words)
        # The engine answers once, at its end (and python_backend's exec(decoupled=True) returns only
        # with the first response): a watcher polls the client meanwhile and stops the engine request
        # when the client is gone (the engine then answers with what it has, which nobody reads).
        target = _PendingCancel(self.caller, model, engine_inputs, row.rid)
        watch = _CANCEL_WATCH.add(cancelled, target, self.metrics) if cancelled is not None else None
        try:
            target.stream = stream_once = spec or self.caller.stream(model, engine_inputs, engine_outputs, row.rid)
            for resp in stream_once:
                penv = row.postprocess(resp)
                if plan.stop_words:
                    cut_all = self._trim_final(penv, self._text_outputs, plan, row.protected) and cut_all
                row.send(row.assemble(penv), False)
        finally:
            if watch is not None:
                _CANCEL_WATCH.remove(watch)
        if cut_all:  # every sequence ended at a stop string: counted as a stopped stream is
            self.metrics.inc("repo_builder_stop_strings_hit_total")

    def _serve_stream(
        self, row: RowCall, stream: Any, engine_outputs: list[str], cancelled: Callable[[], bool] | None
    ) -> None:
        """A streaming request: each engine response of ``stream`` (merged with those already waiting when
        coalescing) postprocessed and sent, through the stop-string filters when there are stop strings or
        ``accumulate_tokens``; the client polled (:data:`CANCEL_POLL_EVERY`, :data:`CANCEL_POLL_SECONDS`).
        A cancelled client or every sequence stopped cancels the engine request; else the text still held
        back is sent at the end (:meth:`_send_tail`)."""
        plan, send = row.plan, row.send
        text_work = bool(plan.stop_words) or (plan.stream and self.settings.accumulate_tokens)
        seqs: dict[Any, _SeqState] = {}
        accumulate = self.settings.accumulate_tokens
        coalesce = self.settings.coalesce and can_merge(engine_outputs)
        stopped_all = False
        count = 0
        polled = time.monotonic()
        batches_fn = getattr(stream, "batches", None) if coalesce else None
        responses: Iterator[Any] = batches_fn() if batches_fn is not None else ([r] for r in stream)
        for batch in responses:
            count += len(batch)
            if cancelled is not None and count >= CANCEL_POLL_EVERY:
                now = time.monotonic()
                if now - polled >= CANCEL_POLL_SECONDS:
                    count, polled = 0, now
                    if cancelled():
                        self.metrics.inc("repo_builder_streams_cancelled_total")
                        stream.cancel()
                        stopped_all = True
                        break
            for run in _sequence_runs(batch) if len(batch) > 1 else (batch,):
                penv = row.postprocess(merge_responses(run) if len(run) > 1 else run[0])
                if text_work:
                    filter_stream_texts(penv, self._text_outputs, seqs, plan.stop_words, row.protected, accumulate)
                    send(row.assemble(penv), False)
                    if plan.stop_words and self._all_stopped(seqs, plan):
                        self.metrics.inc("repo_builder_stop_strings_hit_total")
                        stream.cancel()
                        stopped_all = True
                        break
                else:
                    send(row.assemble(penv), False)
            if stopped_all:
                break
        if stopped_all:
            send(None, True)
            for _ in responses:  # drain what the engine produced before it saw the cancellation
                pass
            return
        self._send_tail(row, seqs, accumulate)

    @staticmethod
    def _send_tail(row: RowCall, seqs: Mapping[Any, _SeqState], accumulate: bool) -> None:
        """Flush text held back for a stop string that never completed: one response per sequence still
        holding some, the last one final (none: a final response without tensors)."""
        tail = tail_responses(flush_stream_texts(seqs, accumulate), row.names)
        if not tail:
            row.send(None, True)
            return
        for k, response in enumerate(tail):
            row.send(response, k == len(tail) - 1)

    def _speculative(
        self, plan: RequestPlan, inputs: Mapping[str, np.ndarray], outputs: list[str], rid: str, exclude: bool
    ) -> Any:
        """The draft-target loop (:class:`.bls_draft.SpeculativeStream`) for a request with ``num_draft_tokens``."""
        if not plan.num_draft_tokens or not self.settings.draft_model:
            return None
        from .bls_draft import SpeculativeStream

        return SpeculativeStream(
            self.caller,
            draft_model=self.settings.draft_model,
            target_model=self.settings.engine_model,
            inputs=inputs,
            outputs=outputs,
            request_id=rid,
            num_draft_tokens=plan.num_draft_tokens,
            use_draft_logits=plan.use_draft_logits,
            streaming=plan.stream,
            exclude_input=exclude,
            decoupled=self.settings.call_engine_decoupled,
        )

    @staticmethod
    def _all_stopped(seqs: Mapping[Any, _SeqState], plan: RequestPlan) -> bool:
        if not seqs or not all(st.filter.stopped for st in seqs.values()):
            return False
        seen = {key[1] for key in seqs}
        return len(seen) >= plan.num_sequences

    @staticmethod
    def _trim_final(penv: dict[str, Any], text_names: Sequence[str], plan: RequestPlan, protected: str) -> bool:
        """Cut each text output of a non-streaming response at its first stop string (after the echoed
        prompt ``protected``). Returns True when the response held text and every text was cut."""
        cut, seen = True, False
        for tname in text_names:
            arr = penv.get(tname)
            if arr is None:
                continue
            texts = []
            for item in arr.reshape(-1).tolist():
                t = item.decode("utf-8", "replace") if isinstance(item, bytes) else str(item)
                start = len(protected) if protected and t.startswith(protected) else 0
                kept, found = truncate_at_stop(t, plan.stop_words, start)
                seen, cut = True, cut and found
                texts.append(kept)
            penv[tname] = _encode_like(texts, arr)
        return seen and cut
