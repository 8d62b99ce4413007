"""Logic of the ``postprocessing`` Python-backend model, free of Triton imports.

Inputs (contract.yaml ``postprocessing``): ``TOKENS_BATCH`` int32 ``[batch, beam, len]``,
``SEQUENCE_LENGTH`` int32 ``[batch, beam]`` (absent in trtllm-0.5: the whole row is decoded), and
repo-builder's optional ``DETOKENIZER_KEY`` uint64 ``[batch, 1]``, ``STREAM`` bool ``[batch, 1]``,
``SEQUENCE_INDEX`` int32 ``[batch, 1]``, ``ARRIVAL_TIME_NS`` int64 ``[batch, 1]``.

Output ``OUTPUT`` (TYPE_STRING, UTF-8 bytes): ``[batch, beam]`` when the config declares dims ``[-1]``
with ``max_batch_size > 0`` (trtllm-1.2), ``[batch, beam, 1]`` for dims ``[-1, -1]`` (trtllm-0.5),
``[batch * beam]`` for a model without a batch dimension and dims ``[-1]``.

Which responses belong to one request decides between two paths:

* Explicit key: ``DETOKENIZER_KEY`` != 0 (from preprocessing, for callers that are not an ensemble) with
  ``STREAM`` true -> the response's new tokens go to the incremental detokenizer of (key,
  ``SEQUENCE_INDEX`` or 0, beam); ``STREAM`` false -> decoded whole.
* Ensemble and BLS: Triton does not let an ensemble step mix inputs from preprocessing with inputs from
  the decoupled tensorrt_llm model, so the key is the request id (which the ensemble propagates to every
  step, and which the BLS makes unique per client request) together with the engine's
  ``ARRIVAL_TIME_NS`` output (repo-builder's preprocessing always asks for perf metrics). Whenever that
  key is non-empty the incremental path is used, for streaming and non-streaming requests alike: fed all
  ids at once it returns the whole text.
* No key at all: each response is decoded whole (correct for non-streaming requests).

Optional ``FLUSH`` (BOOL ``[batch, 1]``; not in the contract yet, for a caller that knows the end of
a stream, like the BLS): true on the last response emits the detokenizer's held tail (an incomplete
character at the end, see detokenizer.py edge 1) and drops the stream's state.

Incremental states live in an LRU of ``detokenizer_max_streams`` streams; ``OUTPUT`` is the text delta
(B24, B25). Decoding uses ``skip_special_tokens`` (parameter, default true: no ``<s>``/``</s>``/``<|im_end|>``
in the text, B27).
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from .detokenizer import DetokenizerCache, DetokenizerFactory
from .limits import check_token_ids
from .params import ModelParams
from .text import tokenizer_from_params
from .triton_io import RequestError, output_dims


def _flag(array: np.ndarray | None, b: int) -> Any:
    if array is None:
        return None
    a = np.asarray(array).reshape(np.asarray(array).shape[0] if np.asarray(array).ndim else 1, -1)
    row = a[b] if a.shape[0] > b else a[0]
    return row[0].item() if row.size else None


class Postprocessor:
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
        self.factory = DetokenizerFactory(tokenizer, self.skip_special_tokens)
        self.streams = DetokenizerCache(self.factory, self.max_streams)
        dims = output_dims(params.config).get("OUTPUT", [-1])
        self.output_rank = len(dims) + (1 if params.max_batch_size > 0 else 0)

    def decode(self, ids: list[int]) -> str:
        """Non-streaming text of ``ids``."""
        return self.factory.decode(ids)

    def process(self, inputs: Mapping[str, np.ndarray | None], request_id: str = "") -> dict[str, np.ndarray]:
        """One request: input arrays by name -> ``{"OUTPUT": object array of UTF-8 bytes}``.

        ``request_id`` is the Triton request id (``request.request_id()``; the ensemble passes the
        client's id to every step), part of the ensemble streaming key.

        Raises:
            RequestError: ``TOKENS_BATCH`` missing, of the wrong rank, or holding a token id outside
                ``[0, len(tokenizer))`` within the sequence length; ``SEQUENCE_LENGTH`` shape mismatch.
        """
        tokens = inputs.get("TOKENS_BATCH")
        if tokens is None:
            raise RequestError("TOKENS_BATCH", "is missing")
        t = np.asarray(tokens)
        if t.ndim == 2:  # [batch, len] (beam 1) with a batch dim, else [beam, len]
            t = t[:, None, :] if self.params.max_batch_size > 0 else t[None, :, :]
        if t.ndim != 3:
            raise RequestError("TOKENS_BATCH", f"must be [batch, beam, len], got shape {list(np.shape(tokens))}")
        batch, beam, length = t.shape
        lengths = inputs.get("SEQUENCE_LENGTH")
        if lengths is None:
            seq_len = np.full((batch, beam), length, dtype=np.int64)
        else:
            seq_len = np.asarray(lengths).reshape(-1)
            if seq_len.size != batch * beam:
                raise RequestError("SEQUENCE_LENGTH", f"has {seq_len.size} values for {batch} x {beam} sequences")
            seq_len = seq_len.reshape(batch, beam)
        for b in range(batch):
            for k in range(beam):
                check_token_ids("TOKENS_BATCH", t[b, k, :max(0, min(int(seq_len[b, k]), length))], self.vocab_size)
        keys, stream, seq_index = inputs.get("DETOKENIZER_KEY"), inputs.get("STREAM"), inputs.get("SEQUENCE_INDEX")
        arrival = inputs.get("ARRIVAL_TIME_NS")

        texts = np.empty((batch, beam), dtype=object)
        for b in range(batch):
            key = _flag(keys, b)
            stream_key: tuple | None = None
            if key is not None and int(key) != 0:  # BLS: preprocessing's key, streaming as the request says
                if bool(_flag(stream, b)):
                    stream_key = ("bls", int(key))
            else:  # ensemble: request id + the engine's arrival time of this request
                arrived = int(_flag(arrival, b) or 0)
                if request_id or arrived:
                    stream_key = ("ens", request_id, arrived)
            index = int(_flag(seq_index, b) or 0)
            flush = bool(_flag(inputs.get("FLUSH"), b))
            for k in range(beam):
                n = max(0, min(int(seq_len[b, k]), length))
                ids = [int(x) for x in t[b, k, :n].tolist()]
                if stream_key is not None:
                    text = self.streams.add((*stream_key, index, k), ids)
                    if flush:  # the caller's last response: emit the held tail, free the state
                        text += self.streams.finish((*stream_key, index, k))
                else:
                    text = self.decode(ids)
                texts[b, k] = text.encode("utf-8")
        if self.output_rank <= 1:
            out = texts.reshape(-1)
        elif self.output_rank == 2:
            out = texts
        else:
            out = texts.reshape(batch, beam, *([1] * (self.output_rank - 2)))
        return {"OUTPUT": out}
