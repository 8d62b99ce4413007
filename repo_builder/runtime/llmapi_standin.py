"""A CPU stand-in for the part of TensorRT-LLM's LLM API (``tensorrt_llm.LLM``, v1.2.1) that the llmapi
model uses, so that an llmapi repository loads and answers in a tritonserver without TensorRT-LLM or a GPU.

What the llmapi model (:mod:`.llmapi_model`) calls, with the LLM API's names and meanings
(NVIDIA/TensorRT-LLM v1.2.1 ``tensorrt_llm/llmapi/llm.py``, ``tensorrt_llm/sampling_params.py``):

* ``LLM(model=DIR, **llm_args)``: loads the Hugging Face checkpoint ``DIR`` with transformers and its
  tokenizer; ``dtype`` (``auto`` = fp32 here, the reference engine's dtype on the CPU; ``float16``,
  ``bfloat16``), ``trust_remote_code``, ``max_seq_len`` (tokens; default the checkpoint's
  ``max_position_embeddings``) and ``max_batch_size`` (sequences stepped together) are used; every other
  LLM() argument of model.yaml (parallel sizes, KV-cache config, ...) is accepted and has no effect on a CPU.
* ``LLM.generate_async(prompt, sampling_params=SamplingParams(...), streaming=bool)`` -> :class:`RequestOutput`,
  which is async-iterable (one item per step with new tokens when streaming, one final item otherwise) and
  has ``abort()``; ``LLM.shutdown()``. A bool in the third (``lora_request``) position, where NVIDIA's 1.2.1
  model.py passes its streaming flag, means no adapter and no streaming, as in TensorRT-LLM 1.2.1.
* :class:`SamplingParams`: ``max_tokens`` (default 32, as upstream), ``end_id``/``pad_id`` (default: the
  tokenizer's EOS / PAD), ``stop`` (strings; the text is cut before the stop string, ``stop_reason`` names
  it), ``temperature``/``top_k``/``top_p`` (greedy when temperature is 0, top_k 1, or none given),
  ``seed``, ``presence_penalty``, ``frequency_penalty``, ``exclude_input_from_output`` (False: ``text``
  starts with the prompt), ``return_perf_metrics``; ``best_of`` > 1 is refused.
* :class:`CompletionOutput` ``text`` is cumulative (the whole text so far, as the LLM API streams it),
  ``token_ids`` the generated ids, ``finish_reason`` ``stop`` | ``length`` | ``cancelled``,
  ``stop_reason`` (the stop string, else None), ``cumulative_logprob`` (sum of the chosen tokens'
  log-probabilities).

The tokens come from repo-builder's reference engine (:class:`.reference.ReferenceBackend`) driven by its
in-flight scheduler (:class:`.engine_scheduler.Scheduler`) on a thread of its own, so concurrent requests
are batched in flight and greedy decoding equals transformers' greedy ``generate`` token for token.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
import uuid
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

from .engine_outputs import RequestGroup, Sequence
from .engine_request import GenerationRequest, ParsedRequest
from .engine_request import SamplingParams as EngineSampling

#: SamplingParams.max_tokens when a request gives none (the LLM API's default).
DEFAULT_MAX_TOKENS = 32
_DTYPES = {"auto": "fp32", "float32": "fp32", "float16": "fp16", "bfloat16": "bf16"}


@dataclass
class SamplingParams:
    """The subset of ``tensorrt_llm.SamplingParams`` the llmapi model passes (None = not given)."""

    max_tokens: int | None = None
    end_id: int | None = None
    pad_id: int | None = None
    stop: str | list[str] | None = None
    temperature: float | None = None
    top_k: int | None = None
    top_p: float | None = None
    best_of: int | None = None
    seed: int | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    exclude_input_from_output: bool = True
    return_perf_metrics: bool = False
    n: int = 1

    def stop_strings(self) -> list[str]:
        """``stop`` as a list of non-empty strings (a str, bytes, or a list/array of them)."""
        raw = self.stop
        if raw is None:
            return []
        items = [raw] if isinstance(raw, (str, bytes)) else list(raw)
        out = []
        for item in items:
            text = item.decode("utf-8") if isinstance(item, bytes) else str(item)
            if text:
                out.append(text)
        return out


@dataclass
class KvCacheMetrics:
    """Per-request KV-cache metrics (all 0 here: the stand-in has no block manager)."""

    num_total_allocated_blocks: int = 0
    num_new_allocated_blocks: int = 0
    num_reused_blocks: int = 0
    num_missed_blocks: int = 0
    kv_cache_hit_rate: float = 0.0


@dataclass
class TimingMetrics:
    """Per-request times as ``datetime.timedelta`` since the epoch, the type the LLM API gives (NVIDIA's 1.2.1
    model.py turns each into nanoseconds with ``pandas.Timedelta(...).value``)."""

    arrival_time: timedelta = timedelta(0)
    first_scheduled_time: timedelta = timedelta(0)
    first_token_time: timedelta = timedelta(0)
    last_token_time: timedelta = timedelta(0)


@dataclass
class SpeculativeDecodingMetrics:
    """Per-request speculative-decoding metrics (all 0 here: no draft model)."""

    acceptance_rate: float = 0.0
    total_accepted_draft_tokens: int = 0
    total_draft_tokens: int = 0


@dataclass
class RequestPerfMetrics:
    """``CompletionOutput.request_perf_metrics`` when the request asked for perf metrics."""

    timing_metrics: TimingMetrics = field(default_factory=TimingMetrics)
    kv_cache_metrics: KvCacheMetrics = field(default_factory=KvCacheMetrics)
    speculative_decoding: SpeculativeDecodingMetrics = field(default_factory=SpeculativeDecodingMetrics)


@dataclass
class CompletionOutput:
    """One generated sequence (``RequestOutput.outputs[i]``)."""

    index: int
    text: str = ""
    token_ids: list[int] = field(default_factory=list)
    cumulative_logprob: float | None = None
    finish_reason: str | None = None
    stop_reason: str | int | None = None
    request_perf_metrics: RequestPerfMetrics | None = None


class GenerationError(RuntimeError):
    """A request the stand-in refuses or could not finish (the message names the field)."""


_END = object()


class RequestOutput:
    """The result of :meth:`LLM.generate_async`: async-iterable over its states, abortable.

    Each item is this object itself with ``outputs``/``finished`` updated (as in the LLM API). A failure
    raises :class:`GenerationError` from the iteration.
    """

    def __init__(self, request_id: int, prompt: str, prompt_token_ids: list[int], streaming: bool) -> None:
        self.request_id = request_id
        self.prompt = prompt
        self.prompt_token_ids = prompt_token_ids
        self.outputs: list[CompletionOutput] = [CompletionOutput(index=0)]
        self.finished = False
        self.streaming = streaming
        self._queue: asyncio.Queue[Any] = asyncio.Queue()
        self._loop = asyncio.get_running_loop()
        self._abort: Any = None

    # called from the scheduler thread
    def _push(self, item: Any) -> None:
        self._loop.call_soon_threadsafe(self._queue.put_nowait, item)

    def abort(self) -> None:
        """Stop generating; the last item then has ``finish_reason`` ``cancelled`` (any thread)."""
        if self._abort is not None and not self.finished:
            self._abort()

    def __aiter__(self) -> RequestOutput:
        return self

    async def __anext__(self) -> RequestOutput:
        if self.finished:
            raise StopAsyncIteration
        item = await self._queue.get()
        if item is _END:
            raise StopAsyncIteration
        if isinstance(item, BaseException):
            self.finished = True
            raise item
        output, finished = item
        self.outputs = [output]
        self.finished = finished
        return self

    async def aresult(self) -> RequestOutput:
        """Wait for the final state."""
        async for _ in self:
            pass
        return self


class _Sink:
    """The scheduler's response sink of one request: never cancelled by itself (``abort`` stops it)."""

    def send(self, outputs: Any, *, final: bool, error: str | None = None) -> None:  # pragma: no cover
        return None

    def is_cancelled(self) -> bool:
        return False


class _Group(RequestGroup):
    """One request in the scheduler; turns the scheduler's steps into :class:`CompletionOutput` states."""

    def __init__(self, llm: LLM, result: RequestOutput, req: GenerationRequest, params: SamplingParams) -> None:
        super().__init__(
            ParsedRequest(rows=[req], request_id=req.request_id, streaming=result.streaming),
            _Sink(),
            None,  # type: ignore[arg-type]  # no Triton tensors: emit() is overridden
        )
        self.llm = llm
        self.result = result
        self.params = params
        self.stops = params.stop_strings()
        self.arrival = time.time()

    def _state(self, seq: Sequence) -> CompletionOutput:
        tok = self.llm.tokenizer
        generated = str(tok.decode(seq.tokens, skip_special_tokens=True))
        reason, stop_reason = None, None
        if self.stops:
            cut = [(generated.find(s), s) for s in self.stops if s in generated]
            if cut:
                at, which = min(cut)
                generated, reason, stop_reason = generated[:at], "stop", which
                seq.finished = seq.finished or "stop_words"
        if reason is None and seq.finished is not None:
            reason = {"end_id": "stop", "length": "length", "stop_words": "stop"}.get(seq.finished, "cancelled")
        text = generated
        if not self.params.exclude_input_from_output:
            text = str(tok.decode(self.result.prompt_token_ids + seq.tokens, skip_special_tokens=True))
            if stop_reason is not None:  # keep the cut: the prompt's text, then the generated text up to the stop
                text = str(tok.decode(self.result.prompt_token_ids, skip_special_tokens=True)) + generated
        perf = None
        if self.params.return_perf_metrics:
            perf = RequestPerfMetrics(
                TimingMetrics(
                    timedelta(seconds=self.arrival),
                    timedelta(microseconds=seq.first_scheduled_ns / 1e3),
                    timedelta(microseconds=seq.first_token_ns / 1e3),
                    timedelta(microseconds=seq.last_token_ns / 1e3),
                )
            )
        return CompletionOutput(
            index=0,
            text=text,
            token_ids=list(seq.tokens),
            cumulative_logprob=float(sum(seq.log_probs)),
            finish_reason=reason,
            stop_reason=stop_reason,
            request_perf_metrics=perf,
        )

    def emit(self, stepped: Any) -> None:
        if self.done:
            return
        seq = self.seqs[0]
        state = self._state(seq)  # may finish the sequence on a stop string
        finished = seq.finished is not None
        if finished or self.streaming:
            self.result._push((state, finished))
        if finished:
            self.done = True
            self.result._push(_END)

    def fail(self, message: str) -> None:
        if not self.done:
            self.done = True
            self.result._push(GenerationError(message))

    def drop(self) -> None:
        if not self.done:
            self.seqs[0].finished = self.seqs[0].finished or "cancelled"
            self.emit(self.seqs)


class LLM:
    """``tensorrt_llm.LLM`` on the CPU (see the module docstring for what is used).

    Raises:
        GenerationError: the checkpoint or its tokenizer cannot be loaded, or ``dtype`` is not one of
            auto, float32, float16, bfloat16 (names the argument).
    """

    def __init__(
        self,
        model: str,
        tokenizer: str | None = None,
        *,
        dtype: str = "auto",
        trust_remote_code: bool = False,
        max_seq_len: int | None = None,
        max_batch_size: int | None = None,
        num_threads: int = 0,
        **ignored: Any,
    ) -> None:
        from .engine_scheduler import Scheduler
        from .reference import ReferenceBackend, engine_threads

        if str(dtype) not in _DTYPES:
            raise GenerationError(f"LLM argument 'dtype' = {dtype!r} is not one of {', '.join(_DTYPES)}")
        path = Path(model)
        try:
            from transformers import AutoTokenizer

            self.tokenizer = AutoTokenizer.from_pretrained(
                str(tokenizer or path), trust_remote_code=bool(trust_remote_code)
            )
        except Exception as exc:  # noqa: BLE001 - report any loader failure with the path
            raise GenerationError(f"LLM argument 'model': cannot load the tokenizer of '{path}': {exc}") from exc
        self.backend = ReferenceBackend(path, num_threads=engine_threads(num_threads), dtype=_DTYPES[str(dtype)])
        self.max_seq_len = int(max_seq_len or self.backend.max_seq_len or 2048)
        self.ignored_args = sorted(ignored)
        self.scheduler = Scheduler(self.backend, max_active=int(max_batch_size or 64))
        self.scheduler.start()
        self._ids = itertools.count(1)
        self._lock = threading.Lock()

    def generate_async(
        self,
        inputs: str,
        sampling_params: SamplingParams | None = None,
        lora_request: Any = None,
        prompt_adapter_request: Any = None,
        streaming: bool = False,
        **kwargs: Any,
    ) -> RequestOutput:
        """Queue one prompt (call from a running asyncio loop; the result is delivered on it).

        Raises:
            GenerationError: ``lora_request`` given (no LoRA here), ``best_of``/``n`` > 1, ``max_tokens`` < 1,
                or a prompt that leaves no room below ``max_seq_len`` (each names the field).
        """
        if isinstance(lora_request, bool):
            # NVIDIA's 1.2.1 model.py calls generate_async(prompt, params, streaming): its streaming flag lands
            # here (fixed after 1.2.1 by NVIDIA/TensorRT-LLM PR #14079). TensorRT-LLM 1.2.1 serves such a call
            # as no adapter and not streamed (one final item, as triton-inference-server/server#8896's drafts
            # observed), and so does the stand-in.
            lora_request = None
        if lora_request is not None or prompt_adapter_request is not None:
            raise GenerationError("lora_request: LoRA adapters are not served by the CPU stand-in")
        if not isinstance(inputs, str):
            raise GenerationError("inputs: the CPU stand-in takes one text prompt")
        params = sampling_params or SamplingParams()
        if (params.best_of or 1) > 1 or params.n > 1:
            raise GenerationError("sampling_param_best_of: only 1 sequence per request is served by the CPU stand-in")
        max_tokens = DEFAULT_MAX_TOKENS if params.max_tokens is None else int(params.max_tokens)
        if max_tokens < 1:
            raise GenerationError(f"sampling_param_max_tokens: must be at least 1, got {max_tokens}")
        prompt_ids = [int(t) for t in self.tokenizer.encode(inputs, add_special_tokens=True)]
        room = self.max_seq_len - len(prompt_ids)
        if room < 1:
            raise GenerationError(
                f"text_input: the prompt has {len(prompt_ids)} tokens; max_seq_len is {self.max_seq_len}"
            )
        end_id = params.end_id if params.end_id is not None else self.tokenizer.eos_token_id
        pad_id = params.pad_id if params.pad_id is not None else (self.tokenizer.pad_token_id or end_id)
        request = GenerationRequest(
            prompt=prompt_ids,
            max_new_tokens=min(max_tokens, room),
            end_id=None if end_id is None else int(end_id),
            pad_id=None if pad_id is None else int(pad_id),
            sampling=EngineSampling(
                temperature=params.temperature,
                top_k=params.top_k,
                top_p=params.top_p,
                presence_penalty=params.presence_penalty,
                frequency_penalty=params.frequency_penalty,
                seed=params.seed,
            ),
            streaming=bool(streaming),
            request_id=uuid.uuid4().hex,
        )
        result = RequestOutput(next(self._ids), inputs, prompt_ids, bool(streaming))
        group = _Group(self, result, request, params)
        result._abort = lambda: self.scheduler.stop_request(request.request_id)
        self.scheduler.submit(group)
        return result

    def shutdown(self) -> None:
        """Stop the scheduler thread (requests still running get an error)."""
        self.scheduler.shutdown()
