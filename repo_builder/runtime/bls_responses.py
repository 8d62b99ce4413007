"""BLS response merging: string stop sequences cut from the text (:func:`truncate_at_stop`,
:class:`StopStringFilter`), per-row responses stacked into one batch (:func:`stack_rows`), and coalescing of
streamed engine responses (:func:`merge_responses`, :data:`MERGE_RULES`). See :mod:`.bls`."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .bls_request import SEQUENCE_INDEX
from .stopstrings import StopStringMatcher, trim_at_stop

# --------------------------------------------------------------------------------------------------
# stop strings


# The one stop rule, on both paths: the text ends WITH the stop string and nothing after it. That is what
# the engine's token-level stop_words_list does (the stop sequence is part of output_ids, so the ensemble
# returns it) and what NVIDIA's BLS string check does (tensorrt_llm_bls/1/model.py check_stop_words at
# v0.19.0 keeps text[:index + len(stop_word)]), so ensemble and BLS return the same text.


def truncate_at_stop(text: str, stops: Sequence[str], start: int = 0) -> tuple[str, bool]:
    """Cut ``text`` after the earliest occurrence (at or after ``start``, in characters) of any stop string.

    Returns:
        (text up to and including the stop string, True) or (``text``, False) when no stop string occurs.
    """
    cut, which = trim_at_stop(text, stops, include_stop=True, start=start)
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
        self._matcher = StopStringMatcher(stops, include_stop=True)
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
    "output_ids": "concat",
    "sequence_length": "sum",
    "output_log_probs": "concat",
    "generation_logits": "concat_tokens",
    "context_logits": "first",
    "arrival_time_ns": "first",
    "first_scheduled_time_ns": "first",
    "first_token_time_ns": "first",
    "cum_log_probs": "last",
    "sequence_index": "last",
    "batch_index": "last",
    "last_token_time_ns": "last",
    "kv_cache_alloc_new_blocks": "last",
    "kv_cache_reused_blocks": "last",
    "kv_cache_alloc_total_blocks": "last",
    "acceptance_rate": "last",
    "total_accepted_draft_tokens": "last",
    "total_draft_tokens": "last",
    "num_input_tokens": "last",
    "num_output_tokens": "last",
    "context_phase_params": "last",
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


def _encode_like(texts: Sequence[str], like: np.ndarray) -> np.ndarray:
    """``texts`` as UTF-8 bytes in an object array shaped like ``like`` (moved here from :mod:`.bls`)."""
    out = np.empty(len(texts), dtype=object)
    out[:] = [t.encode("utf-8") for t in texts]
    return out.reshape(like.shape)


@dataclass
class _SeqState:
    """The BLS's stop-string state of one streamed sequence (moved here from :mod:`.bls`)."""

    filter: StopStringFilter
    text: str = ""  # accumulated emitted text (accumulate_tokens)


# --------------------------------------------------------------------------------------------------
# streamed text: stop strings and accumulation per sequence (moved here from :meth:`.bls.BLSCore._serve_row`)


def filter_stream_texts(
    penv: dict[str, Any],
    text_names: Sequence[str],
    seqs: dict[Any, _SeqState],
    stops: Sequence[str],
    protected: str,
    accumulate: bool,
) -> None:
    """Pass each text output of one postprocessed streamed response through its sequence's stop-string
    filter, in place: ``penv[name]`` becomes the text to emit now (with ``accumulate``, all of it so far),
    UTF-8 bytes shaped like before. ``seqs`` maps ``(text output, sequence index, element)`` to the
    sequence's state, created on first sight with ``stops`` and the echoed prompt ``protected``; the
    sequence index is ``penv``'s :data:`SEQUENCE_INDEX` (int32 ``[1, 1]``; absent: 0)."""
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
                st = seqs[key] = _SeqState(StopStringFilter(stops, protected))
            delta = item.decode("utf-8", "replace") if isinstance(item, bytes) else str(item)
            out, _ = st.filter.feed(delta)
            if accumulate:
                st.text += out
                out = st.text
            emitted.append(out)
        penv[tname] = _encode_like(emitted, arr)


def flush_stream_texts(seqs: Mapping[Any, _SeqState], accumulate: bool) -> list[tuple[str, Any, str]]:
    """The text each sequence of ``seqs`` (see :func:`filter_stream_texts`) still holds back for a stop
    string that never completed, as ``(text output, sequence index, text)`` grouped by text output in order
    of first appearance (with ``accumulate``, the text is all of the sequence's). Sequences holding nothing
    back are left out."""
    tail: dict[str, list[tuple[Any, str]]] = {}
    for (tname, seq_id, _j), st in seqs.items():
        rest = st.filter.flush()
        if rest:
            if accumulate:
                st.text += rest
                rest = st.text
            tail.setdefault(tname, []).append((seq_id, rest))
    return [(t, seq_id, text) for t, lst in tail.items() for seq_id, text in lst]


def tail_responses(items: Sequence[tuple[str, Any, str]], names: Sequence[str]) -> list[dict[str, np.ndarray]]:
    """One BLS response per :func:`flush_stream_texts` item, holding only the outputs among ``names``: the
    text (bytes ``[1]``, 1-D like postprocessing's) and :data:`SEQUENCE_INDEX` (int32 ``[1, 1]``)."""
    responses = []
    for tname, seq_id, text in items:
        response: dict[str, np.ndarray] = {}
        if tname in names:
            response[tname] = np.array([text.encode("utf-8")], dtype=object)  # 1-D, like postprocessing's
        if SEQUENCE_INDEX in names:
            response[SEQUENCE_INDEX] = np.array([[seq_id]], dtype=np.int32)
        responses.append(response)
    return responses
