"""Draft-token verification for the Python engines (``draft_input_ids``: draft-target speculative decoding).

TensorRT-LLM's ``draft_tokens_external`` mode (target engine built with ``--speculative_decoding_mode
draft_tokens_external --max_draft_len N``) takes the draft model's proposal as ``draft_input_ids`` and returns
the longest prefix of it the target agrees with, plus the target's own next token; the BLS then asks for
``request_output_len = len(draft) + 1`` (triton-inference-server/tensorrtllm_backend c2e65b8
``all_models/inflight_batcher_llm/tensorrt_llm_bls/1/lib/decode.py`` ``_spec_generate``). The perf outputs
``total_draft_tokens``, ``total_accepted_draft_tokens`` and ``acceptance_rate`` report it.

Here the target decodes one token per step as usual and the request ends at the first token that differs
from the draft (or after ``len(draft) + 1`` tokens, or at a stop rule), so the output is exactly what
TensorRT-LLM returns under greedy decoding: the accepted draft tokens plus one. It is verification without the
speed-up (one step per token, not one forward for the whole draft). ``draft_logits`` (the logits mode) is
refused by the request parser: these engines compute no logits.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from .engine_outputs import RequestGroup, ResponseSink, Sequence
from .engine_request import ParsedRequest, RequestError

DRAFT_INPUT_IDS = "draft_input_ids"


def draft_tokens(arr: Any, vocab_size: int, max_draft_len: int | None = None) -> list[int]:
    """The draft of one row: ``draft_input_ids`` INT32 ``[1, D]`` (or ``[D]``) as token ids.

    Raises:
        RequestError: ids outside the vocabulary, more than one row, or more than ``max_draft_len`` tokens (the
            engine parameter of that name; TensorRT-LLM refuses such a request too) (names the input).
    """
    a = np.asarray(arr)
    if a.ndim == 2 and a.shape[0] != 1:
        raise RequestError(DRAFT_INPUT_IDS, f"one row per request, got {a.shape[0]}")
    ids = [int(t) for t in a.reshape(-1)]
    if max_draft_len is not None and len(ids) > max_draft_len:
        raise RequestError(
            DRAFT_INPUT_IDS, f"has {len(ids)} draft tokens, more than this engine's max_draft_len ({max_draft_len})"
        )
    bad = [t for t in ids if t < 0 or t >= vocab_size]
    if bad:
        raise RequestError(DRAFT_INPUT_IDS, f"token id {bad[0]} is outside the vocabulary [0, {vocab_size})")
    return ids


def limit_to_draft(parsed: ParsedRequest, draft: list[int]) -> None:
    """At most ``len(draft) + 1`` new tokens for the request's one row (what verification can return)."""
    if len(parsed.rows) != 1:
        raise RequestError(DRAFT_INPUT_IDS, f"a request with a draft takes one row, got {len(parsed.rows)}")
    row = parsed.rows[0]
    row.max_new_tokens = min(row.max_new_tokens, len(draft) + 1)


class _StatsSink:
    """Adds the verification's counts to the perf outputs a response carries (when the request asked)."""

    def __init__(self, inner: ResponseSink, group: DraftGroup) -> None:
        self.inner = inner
        self.group = group

    def send(self, outputs: dict[str, np.ndarray] | None, *, final: bool, error: str | None = None, **kw: Any) -> None:
        if outputs:
            accepted, total = self.group.accepted, len(self.group.draft)
            for name, value in (
                ("total_draft_tokens", total),
                ("total_accepted_draft_tokens", accepted),
                ("acceptance_rate", accepted / total if total else 0.0),
            ):
                if name in outputs:
                    outputs[name] = np.full_like(outputs[name], value)
        self.inner.send(outputs, final=final, error=error, **kw)

    def is_cancelled(self) -> bool:
        return self.inner.is_cancelled()


class DraftGroup(RequestGroup):
    """A request with ``draft_input_ids``: it ends at the first token the target does not share with the draft."""

    def __init__(self, parsed: ParsedRequest, sink: ResponseSink, io: Any, draft: list[int]) -> None:
        super().__init__(parsed, _StatsSink(sink, self), io)
        self.draft = draft
        self.accepted = 0

    def emit(self, stepped: Iterable[Sequence]) -> None:
        seq = self.seqs[0]
        n = len(seq.tokens)
        if 0 < n <= len(self.draft) and self.accepted == n - 1:
            if seq.tokens[-1] == self.draft[n - 1]:
                self.accepted = n
            elif seq.finished is None:
                seq.finished = "draft_rejected"  # the target's own token ends the verification
        super().emit(stepped)
