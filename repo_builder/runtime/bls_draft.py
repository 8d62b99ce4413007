"""Draft-target speculative decoding in the BLS: the draft model proposes, the target model verifies.

Semantics follow NVIDIA's BLS (triton-inference-server/tensorrtllm_backend c2e65b8
``all_models/inflight_batcher_llm/tensorrt_llm_bls/1/lib/decode.py`` ``_spec_generate``, and
``tensorrt_llm_bls/config.pbtxt``): request inputs ``num_draft_tokens`` (INT32) and ``use_draft_logits``
(BOOL); BLS parameter ``tensorrt_llm_draft_model_name``. Each iteration

1. asks the draft model for ``min(num_draft_tokens, remaining - 1)`` tokens after the current ids (with
   ``return_generation_logits`` when ``use_draft_logits``);
2. sends the current ids with ``draft_input_ids`` (and ``draft_logits``) to the target with
   ``request_output_len = len(draft) + 1``; the target returns the draft prefix it accepts plus its own token;
3. appends them. It stops at ``request_output_len``, or when the target returns only draft tokens, fewer than
   it was allowed (an end token, a stop word: the engine stopped), or nothing.

This module is repo-builder's own loop, with these differences from NVIDIA's: the accepted tokens of every
iteration are streamed as they come (NVIDIA refuses ``stream`` with speculation); the engines are always asked
for the generated tokens alone (``exclude_input_in_output`` true) and the prompt is put in front for the
client when its request (or the model's default) says so, which avoids the breakage fixed upstream by
NVIDIA/TensorRT-LLM#11481. Perf outputs ``total_draft_tokens``, ``total_accepted_draft_tokens`` and
``acceptance_rate`` add up over the iterations.

Token stop words (``stop_words_list``): each engine call sees only its own new tokens, so a stop word whose
tokens arrive in two iterations (the accepted tokens come in chunks) is not seen by the engine. The loop
searches the whole generated sequence after every iteration, from the first new token on, and cuts it right
after the stop word, as the plain engine does (the stop word's tokens stay in the output, nothing after them).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Protocol

import numpy as np

from .engine_request import parse_word_list
from .errors import StepError
from .wordlists import StopWordIndex

INPUT_IDS = "input_ids"
INPUT_LENGTHS = "input_lengths"
REQUEST_OUTPUT_LEN = "request_output_len"
OUTPUT_IDS = "output_ids"
SEQUENCE_LENGTH = "sequence_length"
STOP_WORDS_LIST = "stop_words_list"
DRAFT_INPUT_IDS = "draft_input_ids"
DRAFT_LOGITS = "draft_logits"
GENERATION_LOGITS = "generation_logits"
_STATS = ("total_draft_tokens", "total_accepted_draft_tokens", "acceptance_rate")
#: engine inputs that are per call, set by the loop (the request's own values are replaced)
_PER_CALL = {
    INPUT_IDS,
    INPUT_LENGTHS,
    REQUEST_OUTPUT_LEN,
    "streaming",
    "exclude_input_in_output",
    DRAFT_INPUT_IDS,
    DRAFT_LOGITS,
    "return_generation_logits",
}


class Caller(Protocol):
    """The BLS's step caller (:class:`repo_builder.runtime.bls.StepCaller`)."""

    def call(
        self, model: str, inputs: Mapping[str, np.ndarray], outputs: Sequence[str], request_id: str
    ) -> Mapping[str, np.ndarray]: ...

    def stream(self, model: str, inputs: Mapping[str, np.ndarray], outputs: Sequence[str], request_id: str) -> Any: ...


def _tokens(resp: Mapping[str, np.ndarray], model: str) -> list[int]:
    """The generated token ids of a non-streaming, prompt-excluded engine response (one row, beam 1)."""
    ids = resp.get(OUTPUT_IDS)
    if ids is None:
        raise StepError(model, f"the response has no {OUTPUT_IDS}")
    row = np.asarray(ids).reshape(-1)
    length = resp.get(SEQUENCE_LENGTH)
    n = int(np.asarray(length).reshape(-1)[0]) if length is not None and np.asarray(length).size else row.size
    return [int(t) for t in row[:n]]


class SpeculativeStream:
    """The draft-target loop as an engine stream (what :class:`~.bls.BLSCore` reads from the target).

    Args:
        caller: calls the draft and target models.
        draft_model, target_model: their Triton names.
        inputs: the engine inputs the BLS built for the target (``input_ids`` ``[1, L]`` INT32, ...).
        outputs: the engine outputs the BLS wants.
        request_id: the engine request id.
        num_draft_tokens: most tokens the draft proposes per iteration (> 0).
        use_draft_logits: pass the draft's generation logits to the target (``draft_logits``).
        streaming: yield each iteration's tokens; otherwise one response with all of them.
        exclude_input: False puts the prompt in front of a non-streaming ``output_ids``.
        decoupled: the engine models are decoupled (called with ``exec(decoupled=True)``).
    """

    def __init__(
        self,
        caller: Caller,
        *,
        draft_model: str,
        target_model: str,
        inputs: Mapping[str, np.ndarray],
        outputs: Sequence[str],
        request_id: str,
        num_draft_tokens: int,
        use_draft_logits: bool,
        streaming: bool,
        exclude_input: bool,
        decoupled: bool,
    ) -> None:
        self.caller = caller
        self.draft_model = draft_model
        self.target_model = target_model
        self.base = {k: v for k, v in inputs.items() if k not in _PER_CALL}
        ids = np.asarray(inputs[INPUT_IDS]).reshape(-1)
        lengths = inputs.get(INPUT_LENGTHS)
        n = int(np.asarray(lengths).reshape(-1)[0]) if lengths is not None else ids.size
        self.prompt = [int(t) for t in ids[:n]]
        self.total = int(np.asarray(inputs[REQUEST_OUTPUT_LEN]).reshape(-1)[0])
        self.outputs = list(dict.fromkeys([*outputs, OUTPUT_IDS, SEQUENCE_LENGTH]))
        self.request_id = request_id
        self.num_draft_tokens = num_draft_tokens
        self.use_draft_logits = use_draft_logits
        self.streaming = streaming
        self.exclude_input = exclude_input
        self.decoupled = decoupled
        self.cancelled = False
        self.stops = StopWordIndex(parse_word_list(inputs.get(STOP_WORDS_LIST), STOP_WORDS_LIST))
        self.draft_total = 0
        self.accepted_total = 0
        self.iterations = 0

    def _one(self, model: str, inputs: Mapping[str, np.ndarray], outputs: Sequence[str]) -> Mapping[str, np.ndarray]:
        if not self.decoupled:
            return self.caller.call(model, inputs, outputs, self.request_id)
        responses = list(self.caller.stream(model, inputs, outputs, self.request_id))
        if len(responses) != 1:
            raise StepError(model, f"a non-streaming request got {len(responses)} responses")
        return responses[0]

    def _inputs(self, ids: list[int], out_len: int) -> dict[str, np.ndarray]:
        return {
            **self.base,
            INPUT_IDS: np.array([ids], np.int32),
            INPUT_LENGTHS: np.array([[len(ids)]], np.int32),
            REQUEST_OUTPUT_LEN: np.array([[out_len]], np.int32),
            "streaming": np.array([[False]]),
            "exclude_input_in_output": np.array([[True]]),
        }

    def _step(self, ids: list[int], remaining: int) -> tuple[list[int], list[int], Mapping[str, np.ndarray]]:
        """One iteration: (draft, the target's tokens, the target's response)."""
        k = min(self.num_draft_tokens, remaining - 1)
        draft: list[int] = []
        logits = None
        if k > 0:
            d_inputs = self._inputs(ids, k)
            d_inputs.pop("return_perf_metrics", None)
            d_outputs = [OUTPUT_IDS, SEQUENCE_LENGTH]
            if self.use_draft_logits:
                d_inputs["return_generation_logits"] = np.array([[True]])
                d_outputs.append(GENERATION_LOGITS)
            d_resp = self._one(self.draft_model, d_inputs, d_outputs)
            draft = _tokens(d_resp, self.draft_model)
            if self.use_draft_logits and GENERATION_LOGITS in d_resp:
                gl = np.asarray(d_resp[GENERATION_LOGITS])
                logits = gl.reshape(gl.shape[-2], gl.shape[-1])[: len(draft)][None]
        t_inputs = self._inputs(ids, len(draft) + 1)
        if draft:
            t_inputs[DRAFT_INPUT_IDS] = np.array([draft], np.int32)
            if logits is not None:
                t_inputs[DRAFT_LOGITS] = logits
        t_resp = self._one(self.target_model, t_inputs, self.outputs)
        return draft, _tokens(t_resp, self.target_model), t_resp

    def _response(self, tokens: list[int], last: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        out = {k: np.asarray(v) for k, v in last.items() if k in self.outputs}
        out[OUTPUT_IDS] = np.array([[tokens]], np.int32)
        out[SEQUENCE_LENGTH] = np.array([[len(tokens)]], np.int32)
        for name in _STATS:
            if name in out:
                value: float = (
                    self.draft_total
                    if name == "total_draft_tokens"
                    else self.accepted_total
                    if name == "total_accepted_draft_tokens"
                    else (self.accepted_total / self.draft_total if self.draft_total else 0.0)
                )
                out[name] = np.full_like(out[name], value)
        return out

    def stop_end(self, generated: list[int], start: int) -> int | None:
        """Where a token stop word ends in ``generated`` (the index after its last token), searching the
        positions from ``start`` (the first token of this iteration) on; None when none ends there."""
        if not self.stops:
            return None
        for end in range(max(start, 0) + 1, len(generated) + 1):
            if self.stops.ends_with_any(generated[:end]):
                return end
        return None

    def __iter__(self) -> Iterator[dict[str, np.ndarray]]:
        generated: list[int] = []
        last: Mapping[str, np.ndarray] = {}
        while not self.cancelled and len(generated) < self.total:
            draft, got, last = self._step(self.prompt + generated, self.total - len(generated))
            self.iterations += 1
            accepted = next((i for i, (a, b) in enumerate(zip(draft, got)) if a != b), min(len(draft), len(got)))
            self.draft_total += len(draft)
            self.accepted_total += accepted
            before = len(generated)
            generated += got
            end = self.stop_end(generated, before)
            if end is not None:  # a stop word ends here (maybe begun in an earlier iteration): cut after it
                generated = generated[:end]
                got = generated[before:]
            if self.streaming and got:
                yield self._response(got, last)
            if end is not None:
                break
            if not got or (len(got) <= len(draft) and got == draft[: len(got)]):
                break  # the target stopped before its own token: end id, stop word or length
        if not self.streaming:
            yield self._response(generated if self.exclude_input else self.prompt + generated, last)

    def cancel(self) -> None:
        """Stop after the current iteration."""
        self.cancelled = True
