"""Logic of the ``postprocessing`` Python-backend model, free of Triton imports.

Inputs (contract.yaml ``postprocessing``): ``TOKENS_BATCH`` int32 ``[batch, beam, len]``,
``SEQUENCE_LENGTH`` int32 ``[batch, beam]`` (absent in trtllm-0.5: the whole row is decoded), and
repo-builder's optional ``DETOKENIZER_KEY`` uint64 ``[batch, 1]``, ``STREAM`` bool ``[batch, 1]``,
``SEQUENCE_INDEX`` int32 ``[batch, 1]``, ``ARRIVAL_TIME_NS`` int64 ``[batch, 1]``, ``BATCH_INDEX`` int32
``[batch, 1]`` (the engine's batch_index: which row of a batched client request a response row is),
``TOKEN_OFFSET`` int32 ``[batch, 1]`` (the engine's token_offset: generated tokens earlier responses carried).

Output ``OUTPUT`` (TYPE_STRING, UTF-8 bytes): always 1-D ``[batch * beam]`` per request, whatever the
config's dims, which is what NVIDIA's postprocessing returns in every version (v0.5.0 builds it from a
flat list of ``decode()`` results, v0.19.0 from a flat slice of ``batch_decode``; tensorrtllm_backend
``all_models/inflight_batcher_llm/postprocessing/1/model.py``). Clients index it as ``output[0].decode()``
(``end_to_end_grpc_client.py``), so a ``[1, 1]`` text breaks them; the ensemble and the BLS pass the
shape through to ``text_output``.

Which responses belong to one request decides between two paths:

* Explicit key: ``DETOKENIZER_KEY`` != 0 (from preprocessing, for callers that are not an ensemble) with
  ``STREAM`` true -> the response's new tokens go to the incremental detokenizer of (key,
  ``SEQUENCE_INDEX`` or 0, beam); ``STREAM`` false -> decoded whole.
* Ensemble and BLS: Triton does not let an ensemble step mix inputs from preprocessing with inputs from
  the decoupled tensorrt_llm model, so the key is what the ensemble passes to every step -- the request
  id (which the BLS makes unique per client request) and the correlation id (preprocessing's
  ``sequence_id`` response parameter where the Python backend can send one, else the client's) --
  together with the engine's ``ARRIVAL_TIME_NS`` output when the engine sent it (preprocessing asks for
  perf metrics when the request id alone could be ambiguous: ``preprocessing.EnsembleStreamKeys``).
  Whenever that key is non-empty the incremental path is used (one state per request, batch row --
  ``BATCH_INDEX``, else the row's position in the response --, sequence and beam), for streaming and
  non-streaming requests alike: fed all ids at once it returns the whole text.
* No key at all (an empty request id, no correlation id, no arrival time, and no stream of the empty id
  registered in the ledger), or a repository whose engine is not decoupled (parameter ``decoupled_mode``
  false: no response can be a stream chunk): each response is decoded whole. That also keeps a client that
  reuses request ids (NVIDIA's ``end_to_end_test.py`` sends ``request_id=str(i)`` again and again) from
  continuing an earlier request's state.

Optional ``FLUSH`` (BOOL ``[batch, 1]``; not in the contract yet, for a caller that knows the end of
a stream, like the BLS): true on the last response emits the detokenizer's held tail (an incomplete
character at the end, see detokenizer.py edge 1) and drops the stream's state.

End of an ensemble stream: where preprocessing registered the request in the shared
:class:`~.stream_ledger.StreamLedger` (:meth:`Postprocessor.use_ledger`), a stream keyed by its request id
alone (one row, one beam, one sequence) counts its tokens against the request's ``max_tokens``; the
response that uses the budget up also emits the held tail, drops the state and marks the id ended, so the
next request with that id needs no perf metrics.

Several instances in a streaming repository (:attr:`Postprocessor.wants_shared_states`): a streamed response
of one sequence that carries the engine's ``TOKEN_OFFSET`` (INT32 ``[batch, 1]``, repo-builder's engines)
is served from the state every instance shares (:mod:`.stream_state`), in offset order; the model sends
each response and then calls :meth:`Postprocessor.commit`, which lets the stream's next response go.

Incremental states live in an LRU of ``detokenizer_max_streams`` streams; ``OUTPUT`` is the text delta
(B24, B25). Decoding uses ``skip_special_tokens`` (parameter, default true: no ``<s>``/``</s>``/``<|im_end|>``
in the text, B27).
"""

from __future__ import annotations

import sys
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from .counted_streams import CountedStreams
from .detokenizer import REPLACEMENT_CHAR, DetokenizerCache, DetokenizerFactory
from .limits import check_token_ids
from .metrics import NULL_METRICS, Metrics
from .params import ModelParams
from .stream_ledger import StreamLedger
from .stream_state import WINDOW, StreamOrderError, StreamStates, stream_hash
from .text import tokenizer_from_params
from .triton_io import RequestError


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _flag(array: np.ndarray | None, b: int) -> Any:
    """Row ``b``'s first value of a ``[batch, 1]`` input (row 0 when the input has a single row), or None."""
    if array is None:
        return None
    if type(array) is np.ndarray and array.size == 1:  # every streamed response: one row, one value
        return array.item()
    a = np.asarray(array)
    a = a.reshape(a.shape[0] if a.ndim else 1, -1)
    row = a[b] if a.shape[0] > b else a[0]
    return row[0].item() if row.size else None


#: ``TOKENS_BATCH`` shapes without their length: one row of one sequence (``[1, 1, len]`` or ``[1, len]``).
_ONE_SEQUENCE = ((1, 1), (1,))


class Postprocessor(CountedStreams):
    """Detokenizes engine responses.

    Args:
        model_config: the model config dict or JSON (``args["model_config"]``).
        tokenizer: an already loaded tokenizer (tests); default: loaded from ``tokenizer_dir``.
    Raises:
        TokenizerLoadError: ``tokenizer_dir`` unset, not local, or unloadable.
    """

    def __init__(self, model_config: Mapping[str, Any] | str, tokenizer: Any = None) -> None:
        self.params = params = ModelParams(model_config)
        self.tokenizer, self.tokenizer_dir = tokenizer_from_params(params, tokenizer)
        tokenizer = self.tokenizer
        self.skip_special_tokens = bool(params.bool("skip_special_tokens", True))
        self.max_streams = int(params.int("detokenizer_max_streams", 1024) or 1024)
        self.vocab_size = len(tokenizer)
        self.engine_streams = bool(params.bool("decoupled_mode", True))
        self.factory = DetokenizerFactory(tokenizer, self.skip_special_tokens)
        self.streams = DetokenizerCache(self.factory, self.max_streams)
        self.ledger: StreamLedger | None = None
        #: warning sink (model.py sets ``pb_utils.Logger.log_warn``; default: stderr, in Triton's log)
        self.log: Callable[[str], None] = _stderr
        self._undecodable_logged = False
        #: stream key -> [ledger slot, slot key, tokens left, StopWordIndex or None, last generated ids] of the
        #: streams counted against their budget
        self._budgets: OrderedDict[tuple, list[Any]] = OrderedDict()
        #: where detokenize times go (set by the model hosting this code: postprocessing, or the BLS)
        self.metrics: Metrics = NULL_METRICS
        #: states shared with the other instances (several instances, streaming: :meth:`use_shared_states`)
        self.shared: StreamStates | None = None
        self._shared_factory = DetokenizerFactory(tokenizer, self.skip_special_tokens, max_window_tokens=WINDOW)
        #: (slot, next offset, ended) of the response :meth:`process` just served from a shared state, which
        #: :meth:`commit` publishes once that response was sent
        self._pending: tuple[int, int, bool] | None = None
        self._no_offset_logged = False

    @property
    def keys_ensemble_streams(self) -> bool:
        """True when ensemble streams are keyed by request id and ``ARRIVAL_TIME_NS`` (a ledger helps)."""
        declared = {i.get("name") for i in self.params.config.get("input") or []}
        return self.engine_streams and "ARRIVAL_TIME_NS" in declared

    @property
    def wants_shared_states(self) -> bool:
        """True for a streaming repository's postprocessing with more than one instance that declares
        ``TOKEN_OFFSET``: its streams' detokenizer states go to :class:`~.stream_state.StreamStates`."""
        declared = {i.get("name") for i in self.params.config.get("input") or []}
        groups = self.params.config.get("instance_group") or []
        count = sum(int(g.get("count") or 1) for g in groups) if groups else 1
        return self.engine_streams and count > 1 and "TOKEN_OFFSET" in declared

    def use_shared_states(self, shared: StreamStates | None) -> None:
        """Serve streamed responses that carry ``TOKEN_OFFSET`` from ``shared`` (see stream_state.py); the
        caller sends each response, then calls :meth:`commit`."""
        self.shared = shared

    def commit(self) -> None:
        """After the response :meth:`process` returned (or the error it raised) was sent: let the stream's
        next response go (a no-op unless that response came from a shared state)."""
        pending, self._pending = self._pending, None
        if pending is not None and self.shared is not None:
            self.shared.publish(*pending)

    def use_ledger(self, ledger: StreamLedger | None) -> None:
        """Count registered ensemble streams against their budget (see the module docstring)."""
        self.ledger = ledger if self.keys_ensemble_streams else None

    def decode(self, ids: list[int]) -> str:
        """Non-streaming text of ``ids``, without a trailing U+FFFD run: a character the sequence's end cut
        inside (``max_tokens`` reached mid-character) is left out, as a stream holds it back
        (detokenizer.py edge 1), so no front door ever sends the client U+FFFD for it."""
        return self.factory.decode(ids).rstrip(REPLACEMENT_CHAR)

    def gauges(self) -> dict[tuple[str, str | None], float]:
        """The gauges of :data:`.metrics.FAMILIES` this object knows (a metrics collector): detokenizer
        states held and, with a ledger, the ensemble streams registered there."""
        got: dict[tuple[str, str | None], float] = {("repo_builder_detokenizer_streams", None): len(self.streams)}
        if self.ledger is not None:
            got[("repo_builder_stream_ledger_streams", None)] = self.ledger.registered()
        return got

    def process(
        self, inputs: Mapping[str, np.ndarray | None], request_id: str = "", correlation_id: int | str = 0
    ) -> dict[str, np.ndarray]:
        """:meth:`_process`; a request it refuses also ends the counted ensemble stream it belongs to
        (:meth:`end_failed`): the ensemble runs no further step of a request one step failed."""
        try:
            return self._process(inputs, request_id, correlation_id)
        except RequestError:
            self.end_failed(request_id, correlation_id)
            raise

    def _process(
        self, inputs: Mapping[str, np.ndarray | None], request_id: str = "", correlation_id: int | str = 0
    ) -> dict[str, np.ndarray]:
        """One request: input arrays by name -> ``{"OUTPUT": object array of UTF-8 bytes}``.

        ``request_id`` and ``correlation_id`` are the Triton request's (``request.request_id()``,
        ``request.correlation_id()``; the ensemble passes them to every step), part of the ensemble
        streaming key.

        Raises:
            RequestError: ``TOKENS_BATCH`` missing, of the wrong rank, or holding a negative token id within
                the sequence length; ``SEQUENCE_LENGTH`` shape mismatch. Ids at or past ``len(tokenizer)``
                decode as nothing (:meth:`_drop_undecodable`).
        """
        tokens = inputs.get("TOKENS_BATCH")
        if tokens is None:
            raise RequestError("TOKENS_BATCH", "is missing")
        if self.shared is not None and type(tokens) is np.ndarray and tokens.shape[:-1] in _ONE_SEQUENCE:
            shared = self._shared_sequence(inputs, tokens, request_id, correlation_id)
            if shared is not None:
                return shared
        if type(tokens) is np.ndarray and tokens.shape[:-1] in _ONE_SEQUENCE:
            one = self._one_sequence(inputs, tokens, request_id, correlation_id)
            if one is not None:
                return one
        t, seq_lens, row_ids = self._checked_rows(tokens, inputs.get("SEQUENCE_LENGTH"))
        batch, beam = t.shape[:2]
        t0 = time.perf_counter()
        texts = np.empty((batch, beam), dtype=object)
        for b in range(batch):
            self._decode_row(inputs, b, t, seq_lens, row_ids, texts, request_id, correlation_id)
        metrics = self.metrics
        if metrics.enabled:
            metrics.inc("repo_builder_detokenize_seconds_total", time.perf_counter() - t0)
            metrics.inc("repo_builder_detokenize_tokens_total", sum(len(ids) for row in row_ids for ids in row))
        return {"OUTPUT": texts.reshape(-1)}

    def _checked_rows(
        self, tokens: np.ndarray, lengths: np.ndarray | None
    ) -> tuple[np.ndarray, list[list[int]], list[list[list[int]]]]:
        """``(t, seq_lens, row_ids)`` of the general path: ``TOKENS_BATCH`` as ``[batch, beam, len]``, each
        sequence's length (``SEQUENCE_LENGTH`` ``[batch, beam]``; absent: ``len``) and each sequence's ids
        to decode (cut to its length, ids past the tokenizer's vocabulary dropped). Every row is checked
        before any state changes.

        Raises:
            RequestError: ``TOKENS_BATCH`` of the wrong rank or holding a negative id within the sequence
                length (naming it); ``SEQUENCE_LENGTH`` not one value per sequence.
        """
        t = np.asarray(tokens)
        if t.ndim == 2:  # [batch, len] (beam 1) with a batch dim, else [beam, len]
            t = t[:, None, :] if self.params.max_batch_size > 0 else t[None, :, :]
        if t.ndim != 3:
            raise RequestError("TOKENS_BATCH", f"must be [batch, beam, len], got shape {list(np.shape(tokens))}")
        batch, beam, length = t.shape
        if lengths is None:
            seq_lens = [[length] * beam for _ in range(batch)]
        else:
            seq_len = np.asarray(lengths).reshape(-1)
            if seq_len.size != batch * beam:
                raise RequestError("SEQUENCE_LENGTH", f"has {seq_len.size} values for {batch} x {beam} sequences")
            seq_lens = seq_len.reshape(batch, beam).tolist()  # Python ints: one conversion, not one per row
        # ids as Python lists (one tolist per sequence)
        row_ids: list[list[list[int]]] = []
        vocab = self.vocab_size
        for b in range(batch):
            row_ids.append([])
            for k in range(beam):
                ids = t[b, k, : max(0, min(int(seq_lens[b][k]), length))].tolist()
                if ids and min(ids) < 0:
                    check_token_ids("TOKENS_BATCH", t[b, k, : len(ids)], None)  # raises, naming the id
                if ids and max(ids) >= vocab:
                    ids = self._drop_undecodable(ids)
                row_ids[b].append(ids)
        return t, seq_lens, row_ids

    def _decode_row(
        self,
        inputs: Mapping[str, np.ndarray | None],
        b: int,
        t: np.ndarray,
        seq_lens: list[list[int]],
        row_ids: list[list[list[int]]],
        texts: np.ndarray,
        request_id: str,
        correlation_id: int | str,
    ) -> None:
        """Fill row ``b`` of ``texts`` (object ``[batch, beam]``, UTF-8 bytes) with the text of each of its
        sequences (:meth:`_checked_rows`' ``t``, ``seq_lens``, ``row_ids``): a ledger-counted stream's delta
        (:meth:`_counted`), a keyed stream's delta (``FLUSH``: with the held tail), else decoded whole."""
        batch, beam, length = t.shape
        seq_index, batch_index = inputs.get("SEQUENCE_INDEX"), inputs.get("BATCH_INDEX")
        stream_key: tuple | None = None
        if self.engine_streams:  # a non-decoupled engine answers once per request: decode whole
            alone = batch == beam == 1 and seq_index is None and batch_index is None
            stream_key, counted = self._stream_key(inputs, b, alone, request_id, correlation_id)
            if stream_key is not None and counted:
                raw = t[0, 0, : max(0, min(int(seq_lens[0][0]), length))].tolist()
                texts[0, 0] = self._counted(stream_key, request_id, row_ids[0][0], raw).encode("utf-8")
                return
        index = int(_flag(seq_index, b) or 0)
        row = _flag(batch_index, b)
        row = b if row is None else int(row)
        flush = bool(_flag(inputs.get("FLUSH"), b))
        for k in range(beam):
            ids = row_ids[b][k]
            if stream_key is not None:
                text = self.streams.add((*stream_key, row, index, k), ids)
                if flush:  # the caller's last response: emit the held tail, free the state
                    text += self.streams.finish((*stream_key, row, index, k))
            else:
                text = self.decode(ids)
            texts[b, k] = text.encode("utf-8")

    def _stream_key(
        self,
        inputs: Mapping[str, np.ndarray | None],
        b: int,
        alone: bool,
        request_id: str,
        correlation_id: int | str,
        *,
        shared: bool = False,
    ) -> tuple[tuple | None, bool]:
        """``(stream key, countable)`` of row ``b`` of a response from a streaming engine.

        The key: ``("bls", DETOKENIZER_KEY)`` where preprocessing's key is set (None unless ``STREAM`` is
        true: decoded whole), else the ensemble's ``("ens", request id, correlation id, ARRIVAL_TIME_NS or
        0)``, or ``("ens", "", 0, 0)`` for a countable stream of the empty id while one is registered (the
        ledger, and unless ``shared`` this instance's budgets too), else None (no key: decoded whole).
        ``countable``: an ensemble stream without arrival time where a ledger is in use and ``alone`` (one
        row, beam and sequence, no ``SEQUENCE_INDEX``/``BATCH_INDEX``): its tokens count against the
        request's ``max_tokens`` (:meth:`_counted`)."""
        key = _flag(inputs.get("DETOKENIZER_KEY"), b)
        if key is not None and int(key) != 0:  # BLS: preprocessing's key, streaming as the request says
            return (("bls", int(key)) if bool(_flag(inputs.get("STREAM"), b)) else None), False
        arrived = int(_flag(inputs.get("ARRIVAL_TIME_NS"), b) or 0)
        # one row, beam and sequence keyed by the id alone: the ledger may end it
        countable = self.ledger is not None and not arrived and alone
        if request_id or arrived or correlation_id:
            return ("ens", request_id, correlation_id, arrived), countable
        if countable and (self._empty_id_in_ledger() if shared else self._empty_id_registered()):
            return ("ens", "", 0, 0), countable  # an empty id is keyed alone only while registered
        return None, countable

    def _one_output(self, text: str, ids: list[int], t0: float) -> dict[str, np.ndarray]:
        """``{"OUTPUT": object [1]}`` holding ``text`` as UTF-8, the detokenize metrics counting ``ids`` and
        the time since ``t0`` (``time.perf_counter()``)."""
        out = np.empty(1, dtype=object)
        out[0] = text.encode("utf-8")
        metrics = self.metrics
        if metrics.enabled:
            metrics.inc("repo_builder_detokenize_seconds_total", time.perf_counter() - t0)
            metrics.inc("repo_builder_detokenize_tokens_total", len(ids))
        return {"OUTPUT": out}

    def _sequence_ids(self, tokens: np.ndarray, lengths: np.ndarray | None) -> tuple[list[int], int]:
        """(the ids of one streamed sequence to decode, how many the engine sent): ``TOKENS_BATCH`` flattened
        and cut to its ``SEQUENCE_LENGTH``, ids past the tokenizer's vocabulary dropped (logged).

        Raises:
            RequestError: ``SEQUENCE_LENGTH`` has more than one value, or an id is negative (naming it).
        """
        flat = tokens.reshape(-1)
        if lengths is not None:
            if np.size(lengths) != 1:
                raise RequestError("SEQUENCE_LENGTH", f"has {np.size(lengths)} values for 1 x 1 sequences")
            flat = flat[: max(0, int(np.asarray(lengths).reshape(-1)[0]))]
        ids = flat.tolist()
        sent = len(ids)
        if ids and min(ids) < 0:
            check_token_ids("TOKENS_BATCH", flat, None)  # raises, naming the id
        if ids and max(ids) >= self.vocab_size:
            ids = self._drop_undecodable(ids)
        return ids, sent

    def _one_sequence(
        self, inputs: Mapping[str, np.ndarray | None], tokens: np.ndarray, request_id: str, correlation_id: int | str
    ) -> dict[str, np.ndarray] | None:
        """What :meth:`process` returns for a streamed response of one sequence (``TOKENS_BATCH``
        ``[1, 1, len]`` or ``[1, len]``) keyed by the BLS's ``DETOKENIZER_KEY`` or by the request id (what
        the BLS sends with every streamed token: issue 27), with a few scalar reads instead of the per-row
        loops; None for anything else (a ledger-counted ensemble stream, no stream key, no streaming engine),
        which the general path then serves. Same stream key, same checks of the ids, same text."""
        if not self.engine_streams or self.params.max_batch_size <= 0:
            return None
        seq_index, batch_index = inputs.get("SEQUENCE_INDEX"), inputs.get("BATCH_INDEX")
        alone = seq_index is None and batch_index is None
        stream_key, countable = self._stream_key(inputs, 0, alone, request_id, correlation_id)
        if stream_key is None or countable:
            return None  # no stream key, or counted against the ledger's budget: the general path
        ids, _ = self._sequence_ids(tokens, inputs.get("SEQUENCE_LENGTH"))
        row = _flag(batch_index, 0)
        full_key = (*stream_key, 0 if row is None else int(row), int(_flag(seq_index, 0) or 0), 0)
        t0 = time.perf_counter()
        text = self.streams.add(full_key, ids)
        if bool(_flag(inputs.get("FLUSH"), 0)):  # the caller's last response: emit the held tail, free the state
            text += self.streams.finish(full_key)
        return self._one_output(text, ids, t0)

    def _shared_sequence(
        self, inputs: Mapping[str, np.ndarray | None], tokens: np.ndarray, request_id: str, correlation_id: int | str
    ) -> dict[str, np.ndarray] | None:
        """A streamed response of one sequence served from the state shared by every instance (several
        instances: stream_state.py), or None where the response carries no ``TOKEN_OFFSET`` (an engine that
        does not send it: the in-process state then, logged once) or no stream key. Same stream keys, same
        checks of the ids, same text as the one-instance paths (:meth:`_one_sequence`, :meth:`_counted`).

        Raises:
            RequestError: ``TOKEN_OFFSET`` names an order this stream's responses never reached within
                ``stream_state.WAIT_S`` (the later ones then go on), or the checks of the ids.
        """
        assert self.shared is not None
        offset_in = inputs.get("TOKEN_OFFSET")
        if offset_in is None:
            if not self._no_offset_logged:
                self._no_offset_logged = True
                self.log(
                    "postprocessing: several instances share streams, but the engine sent no token_offset "
                    "(NVIDIA's backend does not): responses are detokenized with this instance's state, so a "
                    "stream's text can be wrong; set postprocessing_instance_count to 1. Logged once."
                )
            return None
        seq_index, batch_index = inputs.get("SEQUENCE_INDEX"), inputs.get("BATCH_INDEX")
        alone = seq_index is None and batch_index is None
        stream_key, countable = self._stream_key(inputs, 0, alone, request_id, correlation_id, shared=True)
        if stream_key is None:
            return None
        ids, sent = self._sequence_ids(tokens, inputs.get("SEQUENCE_LENGTH"))
        row = _flag(batch_index, 0)
        full_key = (*stream_key, 0 if row is None else int(row), int(_flag(seq_index, 0) or 0), 0)
        h = stream_hash(full_key)
        offset = int(_flag(offset_in, 0) or 0)
        shared = self.shared
        t0 = time.perf_counter()
        try:
            slot = shared.acquire(h, offset)
        except StreamOrderError as exc:
            shared.skip_to(h, offset + sent)
            raise RequestError("TOKEN_OFFSET", str(exc)) from None
        self._pending = (slot, offset + sent, False)  # published by commit() even if decoding fails
        det = shared.load(slot, self._shared_factory())
        text, ended = self._shared_delta(slot, det, ids, sent, offset == 0 and countable, request_id)
        if bool(_flag(inputs.get("FLUSH"), 0)):
            text += det.flush(drop_partial=True)
            ended = True
        shared.store(slot, det)
        self._pending = (slot, offset + sent, ended)
        return self._one_output(text, ids, t0)

    def _shared_delta(
        self, slot: int, det: Any, ids: list[int], sent: int, first_counted: bool, request_id: str
    ) -> tuple[str, bool]:
        """``(text delta, ended)`` of a shared stream's response: ``ids`` (of the ``sent`` the engine sent)
        fed to the stream's detokenizer ``det`` (loaded from ``slot``), counted against the request's
        ``max_tokens`` where the stream has a budget (its first response, ``first_counted``, takes it from
        the ledger's registration of ``request_id``), as :meth:`_counted` does with one instance: the
        response that uses it up, or holds no token, emits the held tail and ends the ledger's stream."""
        shared = self.shared
        assert shared is not None
        left, ledger_slot, ledger_key = shared.budget(slot)
        if first_counted:
            assert self.ledger is not None
            found = self.ledger.lookup(request_id)
            if found is not None:
                ledger_slot, ledger_key, left = found
        text = det.add(ids)
        ended = False
        if left > 0:  # counted against the request's max_tokens, as _counted does with one instance
            left -= sent
            if left <= 0 or not ids:
                text += det.flush(drop_partial=True)
                ended = True
                assert self.ledger is not None
                self.ledger.end(ledger_slot, ledger_key)
            shared.set_budget(slot, max(left, 0), ledger_slot, ledger_key)
        elif not ids:
            ended = True  # only a stream's last response carries no token
        return text, ended

    def _drop_undecodable(self, ids: list[int]) -> list[int]:
        """``ids`` without those at or past the tokenizer's size, which decode as nothing.

        Engines are often built with a vocabulary padded past the tokenizer's (``vocab_size`` rounded up to
        a multiple of 64 or of the tensor-parallel size; TensorRT-LLM ``convert_checkpoint.py``), and the
        logits of the padding ids are not always masked, so a (random-weight, fine-tuned, quantized) engine
        can pick one. The client never sent such an id, so the request must not fail on it: the id is
        dropped from the text and the first occurrence is logged once per model instance, naming the id,
        the tokenizer's size and the count dropped from that sequence. Negative ids are never engine output
        (padding past ``sequence_length`` is not read) and stay a request error naming ``TOKENS_BATCH``.
        """
        vocab = self.vocab_size
        kept = [i for i in ids if i < vocab]
        if not self._undecodable_logged:
            self._undecodable_logged = True
            first = next(i for i in ids if i >= vocab)
            self.log(
                f"postprocessing: the engine returned token id {first} ({len(ids) - len(kept)} id(s) in this "
                f"sequence) at or past the tokenizer's size {vocab}; such ids decode as nothing (the engine's "
                "vocabulary is padded past the tokenizer's). Logged once."
            )
        return kept

    def end_request(self, request_id: str) -> int:
        """Drop every detokenizer state of ``request_id``'s streams (the BLS, which knows when each of its
        engine requests ended, however it ended). Returns how many were dropped."""
        return self.streams.drop(lambda k: type(k) is tuple and len(k) > 1 and k[1] == request_id)
