"""Logic of the ``preprocessing`` Python-backend model, free of Triton imports.

``model_templates/python_models/preprocessing/model.py`` reads the request tensors into a dict of numpy
arrays, calls :meth:`Preprocessor.process` per request and turns the result into output tensors (or an
error response when :class:`~.triton_io.RequestError` is raised: that request fails alone).

Tensor contract: ``model_templates/<profile>/contract.yaml`` (``preprocessing``). Output dtypes come from
the model config, so one implementation serves trtllm-1.2 (INT32 ``REQUEST_OUTPUT_LEN``/``OUT_END_ID``)
and trtllm-0.5 (UINT32). Every output declared in the config is produced for every request (a missing
output stalls the ensemble).

Parameters (docs/design.md): ``tokenizer_dir``, ``add_special_tokens`` (default true, B18),
``apply_chat_template`` (default false), ``trust_remote_code`` (default false), ``end_id``, ``pad_id``
(unset: :func:`~.special_ids.resolve_special_ids` from the tokenizer directory's
``generation_config.json``/``config.json``/tokenizer, B20), ``stop_token_ids`` (unset: the extra
``eos_token_id`` entries found by ``resolve_special_ids``), ``max_input_len``, ``max_seq_len`` (tokens;
unset = not checked).
"""

from __future__ import annotations

import time
from collections.abc import Collection, Mapping
from typing import Any

import numpy as np

from .limits import check
from .metrics import NULL_METRICS, Metrics
from .params import ModelParams
from .special_ids import resolve_special_ids
from .stream_keys import (  # noqa: F401  (re-exported: moved from this module)
    DIRECT_ONLY_OUTPUT,
    ENSEMBLE_ONLY_OUTPUT,
    EnsembleStreamKeys,
    FirstUseIds,
    KeySource,
    is_ensemble_step,
)
from .stream_ledger import StreamLedger
from .text import (
    TokenizerLoadError,
    WordEncoder,
    check_lengths,
    encode_prompt,
    has_chat_template,
    tokenizer_from_params,
)
from .triton_io import RequestError, output_dtypes, strings

# model input -> client-facing ensemble field (for error messages)
FIELDS = {
    "QUERY": "text_input",
    "DECODER_QUERY": "decoder_text_input",
    "REQUEST_OUTPUT_LEN": "max_tokens",
    "BAD_WORDS_DICT": "bad_words",
    "STOP_WORDS_DICT": "stop_words",
    "EMBEDDING_BIAS_WORDS": "embedding_bias_words",
    "EMBEDDING_BIAS_WEIGHTS": "embedding_bias_weights",
    "END_ID": "end_id",
    "PAD_ID": "pad_id",
    "PROMPT_TABLE_EXTRA_ID": "prompt_table_extra_id",
    "RETURN_PERF_METRICS": "return_perf_metrics",
    "STREAM": "stream",
}
INPUT_NAMES = tuple(FIELDS)


def _sequences(words: np.ndarray) -> list[list[int]]:
    """Row 0's token-id sequences of a ``[batch, 2, N]`` word list (ids, end offsets padded with -1)."""
    if words.shape[-1] == 0:
        return []
    ids, ends = words[0, 0].tolist(), words[0, 1].tolist()
    out, start = [], 0
    for end in ends:
        if end < 0:
            break
        out.append(ids[start:end])
        start = end
    return out


def instance_count(config: Mapping[str, Any]) -> int:
    """Model instances in ``config["instance_group"]`` (count defaults to 1 per group; no group: 1)."""
    groups = config.get("instance_group") or []
    return sum(int(g.get("count", 1) or 1) for g in groups) if groups else 1


def _rows(array: np.ndarray | None, batch: int) -> list[np.ndarray] | None:
    """Split a ``[batch, ...]`` request tensor into per-row flat arrays (a 1-D tensor is one row)."""
    if array is None:
        return None
    a = np.asarray(array)
    if a.ndim == 0:
        a = a.reshape(1, 1)
    elif a.ndim == 1:
        a = a.reshape(1, -1) if batch == 1 else a.reshape(batch, -1)
    if a.shape[0] != batch:
        if a.shape[0] == 1:
            a = np.repeat(a, batch, axis=0)
        else:
            raise RequestError("batch", f"an input has batch size {a.shape[0]}, text_input has {batch}")
    return [a[b].reshape(-1) for b in range(batch)]


def _strings(row: np.ndarray, field: str) -> list[str]:
    return strings(row, field) or []


def _ints(row: np.ndarray, field: str) -> list[int]:
    if row.dtype.kind not in "iub":
        raise RequestError(field, f"must be an integer, got dtype {row.dtype}")
    return [int(v) for v in row.tolist()]


def _prompts(query: np.ndarray | None) -> tuple[int, list[str]]:
    """``(batch, prompts)`` of ``QUERY`` (bytes ``[batch, 1]``; batch = its rows, a 0/1-D tensor is one row).

    Raises:
        RequestError: ``text_input`` missing, empty, non-UTF-8 or not one string per row.
    """
    if query is None or np.asarray(query).size == 0:
        raise RequestError("text_input", "is missing or empty", "send a non-empty prompt")
    q = np.asarray(query)
    batch = int(q.shape[0]) if q.ndim >= 2 else 1
    prompts = []
    for row in _rows(q, batch) or []:
        texts = _strings(row, "text_input")
        if len(texts) != 1:
            raise RequestError("text_input", f"must hold one string per batch row, got {len(texts)}")
        prompts.append(texts[0])
    return batch, prompts


def _max_tokens(out_len_rows: list[np.ndarray] | None) -> list[int]:
    """Each row's ``REQUEST_OUTPUT_LEN`` (tokens), checked against :data:`.limits.LIMITS`.

    Raises:
        RequestError: ``max_tokens`` missing, not an integer, not one value per row, or out of range.
    """
    if out_len_rows is None:
        raise RequestError("max_tokens", "is missing", "send max_tokens > 0")
    max_tokens: list[int] = []
    for row in out_len_rows:
        values = _ints(row, "max_tokens")
        if len(values) != 1:
            raise RequestError("max_tokens", f"must be one value per batch row, got {len(values)}")
        max_tokens.append(int(check("max_tokens", values[0])))
    return max_tokens


def _padded(ids_rows: list[list[int]], pad_ids: list[int]) -> np.ndarray:
    """int32 ``[len(ids_rows), longest]``: each row's ids, right-padded with that row's pad id."""
    longest = max(len(ids) for ids in ids_rows)
    padded = np.empty((len(ids_rows), longest), dtype=np.int32)
    for b, ids in enumerate(ids_rows):
        padded[b, :] = pad_ids[b]
        padded[b, : len(ids)] = ids
    return padded


class Preprocessor:
    """Tokenizes requests for the engine.

    Args:
        model_config: the model config dict or JSON (``args["model_config"]``).
        tokenizer: an already loaded tokenizer (tests); default: loaded from ``tokenizer_dir``.
    Raises:
        TokenizerLoadError: ``tokenizer_dir`` unset, not local, or unloadable; ``apply_chat_template``
            set for a tokenizer without a chat template.
        ParameterValueError: a parameter of the wrong type (names the key).
    """

    def __init__(self, model_config: Mapping[str, Any] | str, tokenizer: Any = None) -> None:
        self.params = params = ModelParams(model_config)
        self.tokenizer, self.tokenizer_dir = tokenizer_from_params(params, tokenizer)
        tokenizer = self.tokenizer
        self.add_special_tokens = bool(params.bool("add_special_tokens", True))
        self.chat_template = bool(params.bool("apply_chat_template", False))
        if self.chat_template and not has_chat_template(tokenizer):
            raise TokenizerLoadError(
                f"model '{params.model_name}': apply_chat_template is true but the "
                f"tokenizer in '{self.tokenizer_dir}' has no chat_template "
                "(hint: set apply_chat_template to false)"
            )
        self.max_input_len = params.int("max_input_len")
        self.max_seq_len = params.int("max_seq_len")
        end_id, pad_id = params.int("end_id"), params.int("pad_id")
        stop_ids = params.int_list("stop_token_ids")
        self.special_error: str | None = None
        self.end_id: int | None = end_id
        self.pad_id: int | None = pad_id
        if end_id is None or pad_id is None or stop_ids is None:
            try:
                resolved = resolve_special_ids(tokenizer, self.tokenizer_dir, end_id, pad_id)
                self.end_id, self.pad_id = resolved.end_id, resolved.pad_id
                if stop_ids is None:
                    stop_ids = list(resolved.stop_token_ids)
            except ValueError as exc:  # no end id anywhere: requests must send end_id (B20)
                self.special_error = str(exc)
        self.stop_token_ids = [int(i) for i in (stop_ids or [])]
        self.out_dtypes = output_dtypes(params.config)
        self.words = WordEncoder(tokenizer)
        self.keys = KeySource()
        self.stream_keys = EnsembleStreamKeys(instance_count(params.config))
        #: this model declares ``STREAM`` (trtllm-1.2 renders since issue 28): the ensemble wires the client's flag
        self.reads_stream = "STREAM" in {i.get("name") for i in params.config.get("input") or []}
        #: the response parameters of the last :meth:`process` call (the adapter sends them)
        self.response_parameters: dict[str, Any] = {}
        #: where tokenize and word-list times go (model.py sets :func:`.metrics.for_model`'s)
        self.metrics: Metrics = NULL_METRICS

    def use_response_parameters(self, supported: bool, ledger: StreamLedger | None = None) -> None:
        """Tell the core whether the Python backend can send response parameters, and give it the stream
        ledger it shares with postprocessing, if any (see :class:`EnsembleStreamKeys`)."""
        self.stream_keys = EnsembleStreamKeys(
            instance_count(self.params.config), response_parameters=supported, ledger=ledger
        )

    def _one_response(self, stream: np.ndarray | None) -> bool:
        """True when the engine answers this one-row request with one response: ``STREAM`` (the client's
        ``stream``, wired by the ensemble) false or absent. Only where this model declares ``STREAM``: an
        older repository's ensemble does not wire it, and its absence then says nothing."""
        if not self.reads_stream:
            return False
        return stream is None or np.asarray(stream).size == 0 or not bool(np.asarray(stream).reshape(-1)[0])

    @property
    def keys_ensemble_streams(self) -> bool:
        """True when this model decides the engine's ``return_perf_metrics`` for postprocessing's stream key
        (trtllm-1.2: ``OUT_RETURN_PERF_METRICS``); trtllm-0.5 has no perf metrics to ask for."""
        return "OUT_RETURN_PERF_METRICS" in self.out_dtypes

    # ---------------------------------------------------------------------------------------------

    def _special(self, rows: list[np.ndarray] | None, default: int | None, field: str, batch: int) -> list[int]:
        if rows is not None:
            return [int(check(field, _ints(r, field)[0])) if r.size else self._require(default, field) for r in rows]
        return [self._require(default, field)] * batch

    def _require(self, value: int | None, field: str) -> int:
        if value is None:
            raise RequestError(
                field,
                "is required: the model has no default ("
                + (self.special_error or "end_id/pad_id parameters unset")
                + ")",
                f"send {field} with the request or render with --set {field}=<id>",
            )
        return value

    def process(
        self,
        inputs: Mapping[str, np.ndarray | None],
        request_id: str | None = None,
        requested_outputs: Collection[str] | None = None,
    ) -> dict[str, np.ndarray]:
        """One request: input arrays by model input name -> output arrays by model output name.

        ``request_id`` is the Triton request id (None: unknown, treated like a repeated id).
        ``requested_outputs``: the outputs the caller asked for (``request.requested_output_names()``; None
        = all). Only an ensemble step touches the ensemble's stream keys (:func:`is_ensemble_step`): the BLS
        does not ask for ``OUT_RETURN_PERF_METRICS`` (it passes the client's flag to the engine itself), and
        a direct call asks for ``DETOKENIZER_KEY`` too (or for every output), so neither registers its id in
        the stream ledger nor gets perf metrics it did not ask for. After the
        call :attr:`response_parameters` holds the parameters for this request's response
        (``{"sequence_id": key}`` when :class:`EnsembleStreamKeys` uses response parameters, else ``{}``).

        Shapes (batch = rows of ``QUERY``): ``INPUT_ID`` int32 ``[batch, L]`` right-padded with the pad
        id, ``REQUEST_INPUT_LEN`` int32 ``[batch, 1]``, ``BAD_WORDS_IDS``/``STOP_WORDS_IDS`` int32
        ``[batch, 2, N]``, ``EMBEDDING_BIAS`` fp32 ``[batch, vocab]`` or ``[batch, 0]``,
        ``REQUEST_OUTPUT_LEN``/``OUT_END_ID``/``OUT_PAD_ID`` ``[batch, 1]`` (config dtype),
        ``DECODER_INPUT_ID`` int32 ``[batch, L_dec]`` (the tokenized ``DECODER_QUERY``, right-padded; without
        one ``[[pad_id]]``, as NVIDIA's preprocessing v0.11+ does) and ``REQUEST_DECODER_INPUT_LEN`` int32
        ``[batch, 1]``,
        ``OUT_PROMPT_TABLE_EXTRA_IDS`` uint64 ``[batch, L]``, ``DETOKENIZER_KEY`` uint64 ``[batch, 1]``,
        ``OUT_RETURN_PERF_METRICS`` bool ``[batch, 1]`` (the client's ``return_perf_metrics``, or true when
        postprocessing needs the engine's ``arrival_time_ns`` to key this request: :class:`EnsembleStreamKeys`).

        Raises:
            RequestError: naming the client field: empty/non-UTF-8 ``text_input``, ``max_tokens``, ``end_id``,
                ``pad_id`` or ``embedding_bias_weights`` outside their :data:`.limits.LIMITS` range,
                prompt too long (B34), malformed ``stop_words``/``bad_words``, mismatched embedding bias.
        """
        batch, prompts = _prompts(inputs.get("QUERY"))
        max_tokens = _max_tokens(_rows(inputs.get("REQUEST_OUTPUT_LEN"), batch))
        end_ids = self._special(_rows(inputs.get("END_ID"), batch), self.end_id, "end_id", batch)
        pad_ids = self._special(_rows(inputs.get("PAD_ID"), batch), self.pad_id, "pad_id", batch)
        ids_rows = self._encode_prompts(prompts, max_tokens)
        input_id = _padded(ids_rows, pad_ids)
        decoder_ids = self._decoder_ids(_rows(inputs.get("DECODER_QUERY"), batch), pad_ids)
        decoder_input_id = _padded(decoder_ids, pad_ids)
        stop_words, bad_words, bias = self._word_lists(inputs, batch)
        extra_ids = self._extra_ids(_rows(inputs.get("PROMPT_TABLE_EXTRA_ID"), batch), input_id)

        keys = self.keys.take(batch)
        perf_rows = _rows(inputs.get("RETURN_PERF_METRICS"), batch)
        perf_asked = [bool(r.size and r.reshape(-1)[0]) for r in perf_rows] if perf_rows else [False] * batch
        perf = self._key_stream(inputs, request_id, requested_outputs, max_tokens, stop_words, keys[0])
        produced = {
            "INPUT_ID": input_id,
            "REQUEST_INPUT_LEN": np.array([[len(ids)] for ids in ids_rows]),
            "DECODER_INPUT_ID": decoder_input_id,
            "REQUEST_DECODER_INPUT_LEN": np.array([[len(ids)] for ids in decoder_ids]),
            "BAD_WORDS_IDS": bad_words,
            "STOP_WORDS_IDS": stop_words,
            "EMBEDDING_BIAS": bias,
            "REQUEST_OUTPUT_LEN": np.array([[m] for m in max_tokens]),
            "OUT_END_ID": np.array([[e] for e in end_ids]),
            "OUT_PAD_ID": np.array([[p] for p in pad_ids]),
            "OUT_PROMPT_TABLE_EXTRA_IDS": extra_ids,
            "DETOKENIZER_KEY": np.array([[k] for k in keys], dtype=np.uint64),
            "OUT_RETURN_PERF_METRICS": np.array([[perf or asked] for asked in perf_asked], dtype=bool),
        }
        return self._cast_outputs(produced)

    def _encode_prompts(self, prompts: list[str], max_tokens: list[int]) -> list[list[int]]:
        """Token ids of each row's prompt (one list per batch row), counted in the tokenize metrics.

        Raises:
            RequestError: a prompt encodes to no tokens (``text_input``), or is too long for
                ``max_input_len``/``max_seq_len`` with its row's ``max_tokens`` (B34).
        """
        ids_rows = []
        t_tok = time.perf_counter()
        for b, prompt in enumerate(prompts):
            ids = encode_prompt(
                self.tokenizer, prompt, add_special_tokens=self.add_special_tokens, chat_template=self.chat_template
            )
            if not ids:
                raise RequestError("text_input", f"encodes to no tokens (batch row {b})")
            check_lengths(len(ids), max_tokens[b], max_input_len=self.max_input_len, max_seq_len=self.max_seq_len)
            ids_rows.append(ids)
        metrics = self.metrics
        if metrics.enabled:
            metrics.inc("repo_builder_tokenize_seconds_total", time.perf_counter() - t_tok)
            metrics.inc("repo_builder_tokenize_requests_total")
            metrics.inc("repo_builder_prompt_tokens_total", sum(len(ids) for ids in ids_rows))
        return ids_rows

    def _decoder_ids(self, dec_rows: list[np.ndarray] | None, pad_ids: list[int]) -> list[list[int]]:
        """Token ids of each row's ``DECODER_QUERY`` (no input, or one encoding to nothing: ``[pad_id]``).

        Raises:
            RequestError: a row does not hold exactly one string (``decoder_text_input``).
        """
        if dec_rows is None:
            return [[p] for p in pad_ids]
        decoder_ids = []
        for b, row in enumerate(dec_rows):
            texts = _strings(row, "decoder_text_input")
            if len(texts) != 1:
                raise RequestError("decoder_text_input", f"must hold one string per batch row, got {len(texts)}")
            ids = encode_prompt(self.tokenizer, texts[0], add_special_tokens=self.add_special_tokens)
            decoder_ids.append(ids or [pad_ids[b]])
        return decoder_ids

    def _word_lists(
        self, inputs: Mapping[str, np.ndarray | None], batch: int
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(STOP_WORDS_IDS, BAD_WORDS_IDS, EMBEDDING_BIAS)`` of the request, timed in the word-list metric.

        The word lists are int32 ``[batch, 2, N]`` (the stop list ends with :attr:`stop_token_ids`), the
        bias fp32 ``[batch, vocab]`` or ``[batch, 0]`` (:meth:`.text.WordEncoder.embedding_bias`).

        Raises:
            RequestError: malformed ``stop_words``/``bad_words``, ``embedding_bias_weights`` out of range,
                mismatched embedding bias words and weights.
        """

        def word_rows(name: str) -> list[list[str]] | None:
            rows = _rows(inputs.get(name), batch)
            if rows is None:
                return None
            # "" elements mean "no word" (v0.5 clients must send bad_words/stop_words: "")
            return [[w for w in _strings(r, FIELDS[name]) if w != ""] for r in rows]

        t_words = time.perf_counter()
        no_words: list[list[str] | None] = [None] * batch
        stop_rows: list[list[str]] | list[list[str] | None] = word_rows("STOP_WORDS_DICT") or no_words
        bad_rows: list[list[str]] | list[list[str] | None] = word_rows("BAD_WORDS_DICT") or no_words
        stop_words = self.words.word_list(stop_rows, "stop_words", self.stop_token_ids)
        bad_words = self.words.word_list(bad_rows, "bad_words")

        word_arrays = _rows(inputs.get("EMBEDDING_BIAS_WORDS"), batch)
        bias_words = None if word_arrays is None else [_strings(r, "embedding_bias_words") for r in word_arrays]
        weight_rows = _rows(inputs.get("EMBEDDING_BIAS_WEIGHTS"), batch)
        weights = (
            None
            if weight_rows is None
            else [[check("embedding_bias_weights", x) for x in r.tolist()] for r in weight_rows]
        )
        if weights is None and bias_words is not None and all(w == "" for r in bias_words for w in r):
            bias_words = None  # only "" placeholders: no bias asked for
        bias = self.words.embedding_bias(bias_words, weights, batch)
        self.metrics.inc("repo_builder_word_list_seconds_total", time.perf_counter() - t_words)
        return stop_words, bad_words, bias

    def _extra_ids(self, extra_rows: list[np.ndarray] | None, input_id: np.ndarray) -> np.ndarray:
        """``OUT_PROMPT_TABLE_EXTRA_IDS``: uint64 shaped like ``input_id`` (int32 ``[batch, L]``), each row's
        ``prompt_table_extra_id`` where its token id is a prompt-table id (>= the tokenizer's vocabulary
        size), else 0 (also everywhere when the input is absent or a row empty)."""
        extra_ids = np.zeros(input_id.shape, dtype=np.uint64)
        if extra_rows is not None:
            vocab = len(self.tokenizer)
            for b, row in enumerate(extra_rows):
                extra = _ints(row, "prompt_table_extra_id")
                if extra:
                    extra_ids[b, input_id[b] >= vocab] = extra[0]
        return extra_ids

    def _key_stream(
        self,
        inputs: Mapping[str, np.ndarray | None],
        request_id: str | None,
        requested_outputs: Collection[str] | None,
        max_tokens: list[int],
        stop_words: np.ndarray,
        key: int,
    ) -> bool:
        """Set :attr:`response_parameters` for the request whose first ``DETOKENIZER_KEY`` is ``key``, and
        return True when the engine must return perf metrics for postprocessing to key this ensemble stream
        (:meth:`EnsembleStreamKeys.perf_metrics_needed`; only on an ensemble step, see :meth:`process`)."""
        self.response_parameters = {}
        perf = False
        if self.keys_ensemble_streams and is_ensemble_step(requested_outputs):
            batch = len(max_tokens)
            budget: int | None = max_tokens[0] if batch == 1 else None
            if budget is not None and self._one_response(inputs.get("STREAM")):
                budget = 1  # the engine's only response ends it, however many tokens it holds
            stops = _sequences(stop_words) if budget is not None and budget > 1 else []
            perf = self.stream_keys.perf_metrics_needed(request_id, budget, stops)
        if self.stream_keys.response_parameters:
            # a string: no integer range to respect (python_backend sends parameters as JSON)
            self.response_parameters = {"sequence_id": f"rb-{key:016x}"}
        return perf

    def _cast_outputs(self, produced: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The outputs the model config declares, each cast to its config dtype.

        Raises:
            RequestError: the config declares an output missing from ``produced`` (``model``).
        """
        outputs = {}
        for name, dtype in self.out_dtypes.items():
            if name not in produced:
                raise RequestError("model", f"preprocessing does not know how to produce output {name}")
            outputs[name] = np.asarray(produced[name]).astype(dtype, copy=False)
        return outputs
