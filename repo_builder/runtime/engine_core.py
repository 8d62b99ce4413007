"""The ``tensorrt_llm`` tensor contract for Python engines: the Triton adapter (:class:`TritonEngineModel`)
shared by the CPU reference engine and the synthetic engine, on top of the request parser
(:mod:`.engine_request`), output building (:mod:`.engine_outputs`) and the in-flight scheduler
(:mod:`.engine_scheduler`), whose names are re-exported here.

The C++ TensorRT-LLM backend cannot run on a CPU machine, so repo-builder can put a Python model in the
``tensorrt_llm`` slot that keeps its exact tensor contract (names and dtypes are read from the model
config Triton passes to ``initialize``, so one model serves the ``trtllm-1.2`` and ``trtllm-0.5``
profiles). Everything here is independent of ``triton_python_backend_utils``: the Triton adapter
(:class:`TritonEngineModel`) receives that module as an argument, so the logic is unit-tested in-process.

Semantics (chosen to match TensorRT-LLM's executor; facts from tensorrtllm_backend's ``tensorrt_llm/config.pbtxt``
at commit c2e65b8 and NVIDIA/TensorRT-LLM 1.2 ``LlmRequest``/sampling layers):

* **Greedy** unless sampling is asked for: ``runtime_top_k`` unset/0 and ``runtime_top_p`` unset/0 means
  greedy (TRT-LLM turns top_k=0, top_p=0 into top_k=1), ``runtime_top_k == 1`` is greedy, and
  ``temperature`` alone does not switch sampling on. ``temperature == 0`` is greedy too.
* ``end_id``: generation stops when the engine picks it; the end token is **not** part of ``output_ids``
  and not counted in ``sequence_length``. Without ``end_id`` there is no end-of-sequence stop (TRT-LLM
  executor default end id -1). ``min_tokens`` (0.5: ``min_length``) forbids ``end_id`` before that many
  generated tokens.
* ``stop_words_list`` (``[2, N]``: row 0 the concatenated token ids, row 1 the cumulative end offsets padded
  with -1): generation stops when the generated tokens end with one stop sequence; the stop sequence
  **is** part of the output.
* ``request_output_len``: at most that many new tokens (tokens). A prompt longer than ``max_input_len``, or
  not shorter than ``max_seq_len``, is an error naming ``input_ids``; ``prompt + request_output_len >
  max_seq_len`` clamps the output length to ``max_seq_len - prompt`` (TRT-LLM 1.x does the same, with a
  warning).
* ``exclude_input_in_output`` (request input overrides the model parameter of the same name): when false,
  a non-streaming ``output_ids`` is prompt + generated and ``sequence_length`` counts both. Streaming
  responses carry only the tokens generated since the previous response and never the prompt (the
  executor does not set ``returnAllGeneratedTokens``).
* ``beam_width`` must be 1 (beam search is not implemented); ``beam_width > max_beam_width`` and
  ``streaming`` with beam > 1 are errors naming ``beam_width``.
* ``stop`` = true cancels the in-flight request that has the same Triton request id (it finishes with the
  tokens it has) and is itself answered with an empty final response. A cancelled request
  (``response_sender.is_cancelled()``) is dropped and gets a final flag with no outputs.
* Optional outputs are sent only when NVIDIA's backend would send them (``engine_outputs._GATES``):
  ``output_ids`` and ``sequence_length`` always; log probs with ``return_log_probs``; ``batch_index`` when
  the request has several rows; perf metrics with ``return_perf_metrics``; ``num_*_tokens`` with
  ``return_num_*_tokens``; never logits (asking for them is an error naming the input). An ensemble
  whose step leaves an output out simply omits it from its response (Triton 2.51 / core r24.10, #399;
  measured). Stats that are not computed (kv-cache, speculative decoding) are zeros of the declared dtype.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from .engine_outputs import GenerationBackend, RequestGroup, ResponseSink, Sequence, build_outputs
from .engine_request import (
    UNSUPPORTED_FLAGS,
    UNSUPPORTED_INPUTS,
    EngineLimits,
    EngineLoadError,
    GenerationRequest,
    ModelIO,
    ParsedRequest,
    RequestError,
    SamplingParams,
    parse_request,
    parse_word_list,
)
from .engine_scheduler import Scheduler
from .metrics import attach_engine_metrics
from .params import ModelParams
from .triton_io import only_requested, requested_names, triton_error

__all__ = [
    "UNSUPPORTED_FLAGS",
    "UNSUPPORTED_INPUTS",
    "BackendFactory",
    "CollectingSink",
    "EngineLimits",
    "EngineLoadError",
    "GenerationBackend",
    "GenerationRequest",
    "ModelIO",
    "ParsedRequest",
    "RequestError",
    "RequestGroup",
    "ResponseSink",
    "SamplingParams",
    "Scheduler",
    "Sequence",
    "TritonEngineModel",
    "build_outputs",
    "parse_request",
    "parse_word_list",
]


# --------------------------------------------------------------------------------------------------
# Triton adapter


class CollectingSink:
    """A sink that keeps every response (non-decoupled models and tests)."""

    def __init__(self) -> None:
        self.responses: list[tuple[dict[str, np.ndarray] | None, bool, str | None]] = []
        self.event = threading.Event()
        self.cancelled = False

    def send(self, outputs: dict[str, np.ndarray] | None, *, final: bool, error: str | None = None) -> None:
        self.responses.append((outputs, final, error))
        if final:
            self.event.set()

    def is_cancelled(self) -> bool:
        return self.cancelled


class _DecoupledSink:
    """The response sender of one request; responses carry only the outputs it asked for
    (:func:`.triton_io.only_requested` says why)."""

    def __init__(self, model: TritonEngineModel, sender: Any, requested: frozenset[str] | None = None) -> None:
        self.model = model
        self.sender = sender
        self.requested = requested

    def send(
        self, outputs: dict[str, np.ndarray] | None, *, final: bool, error: str | None = None, client: bool = False
    ) -> None:
        pb = self.model.pb_utils
        flags = pb.TRITONSERVER_RESPONSE_COMPLETE_FINAL if final else 0
        if error is not None:
            self.sender.send(
                pb.InferenceResponse(output_tensors=[], error=triton_error(pb, error, client=client)), flags=flags
            )
        elif outputs is None:
            self.sender.send(flags=flags)
        else:
            self.sender.send(self.model.to_response(only_requested(outputs, self.requested)), flags=flags)

    def is_cancelled(self) -> bool:
        return bool(self.sender.is_cancelled())


class _UnarySink(_DecoupledSink):
    """The response sender of a model that is not decoupled: exactly one response, always final.

    ``outputs`` None without an error (a request cancelled by the client) becomes an error response;
    ``{}`` (the answer to a ``stop`` request) an empty one.
    """

    def send(
        self, outputs: dict[str, np.ndarray] | None, *, final: bool, error: str | None = None, client: bool = False
    ) -> None:
        if not final:  # a non-decoupled request never streams; only the final response is sent
            return
        if outputs is None and error is None:
            error = "tensorrt_llm: request was cancelled"
        super().send(outputs, final=True, error=error, client=client)


BackendFactory = Callable[[ModelParams, ModelIO], GenerationBackend]


class TritonEngineModel:
    """The body of a Python-backend ``tensorrt_llm`` model (``reference_engine``/``synthetic_engine``).

    Args:
        pb_utils: the ``triton_python_backend_utils`` module (injected so tests can pass a fake).
        args: the ``initialize`` arguments; ``args["model_config"]`` is the model config JSON.
        backend_factory: builds the generation backend from the parameters; raises EngineLoadError.
    The backend may define ``max_input_len``/``max_seq_len``/``max_batch_size`` attributes used when
    the parameters of the same names are unset.
    Raises:
        EngineLoadError: bad parameters or engine dir (the message names them).
    """

    def __init__(self, pb_utils: Any, args: Mapping[str, Any], backend_factory: BackendFactory) -> None:
        self.pb_utils = pb_utils
        cfg = json.loads(args["model_config"]) if isinstance(args["model_config"], str) else args["model_config"]
        self.params = ModelParams(cfg).with_instance(args)
        self.io = ModelIO.from_config(cfg)
        self.decoupled = self.params.decoupled
        try:
            backend = backend_factory(self.params, self.io)
            max_input = self.params.int("max_input_len") or getattr(backend, "max_input_len", None)
            max_seq = self.params.int("max_seq_len") or getattr(backend, "max_seq_len", None)
            self.limits = EngineLimits(
                vocab_size=int(backend.vocab_size),
                max_input_len=int(max_input or max_seq or 1 << 30),
                max_seq_len=int(max_seq or 1 << 30),
                max_beam_width=int(self.params.int("max_beam_width") or 1),
                exclude_input_in_output=bool(self.params.bool("exclude_input_in_output", False)),
                decoupled=self.decoupled,
            )
        except ValueError as exc:  # ParameterValueError from ModelParams
            raise EngineLoadError(str(exc)) from exc
        max_active = getattr(backend, "max_batch_size", None) or self.params.max_batch_size or 64
        logger = getattr(pb_utils, "Logger", None)
        log = getattr(logger, "log_warn", None)
        info = getattr(logger, "log_info", None)
        period_ms = self.params.int("cancellation_check_period_ms", 100) or 100
        self.scheduler = Scheduler(
            backend, max_active=int(max_active), cancel_check_period_s=period_ms / 1000.0, log=log, info=info
        )
        self.metrics = attach_engine_metrics(pb_utils, args, self.params, self.scheduler, backend, self.limits)
        self.scheduler.start()

    def _tensors(self, request: Any) -> dict[str, np.ndarray]:
        out: dict[str, np.ndarray] = {}
        listing = getattr(request, "inputs", None)
        if callable(listing):  # one listing (get_input_tensor_by_name lists every input on each call)
            declared = self.io.inputs
            present = [(t.name(), t) for t in listing()]
            present = [(n, t) for n, t in present if n in declared]
        else:  # test doubles
            present = [(n, self.pb_utils.get_input_tensor_by_name(request, n)) for n in self.io.inputs]
        for name, t in present:
            if t is None:
                continue
            try:
                out[name] = t.as_numpy()
            except Exception:  # noqa: BLE001 - e.g. BF16; only presence matters for such inputs
                out[name] = np.ones((1,), dtype=np.bool_)
        return out

    def to_response(self, outputs: Mapping[str, np.ndarray]) -> Any:
        """A ``pb_utils.InferenceResponse`` holding ``outputs`` (BF16 outputs go through DLPack/torch)."""
        pb = self.pb_utils
        tensors = []
        for name, arr in outputs.items():
            if self.io.outputs[name].data_type == "TYPE_BF16":
                import torch  # the TRT-LLM container has torch

                tensors.append(pb.Tensor.from_dlpack(name, torch.from_numpy(arr).to(torch.bfloat16)))
            else:
                tensors.append(pb.Tensor(name, arr))
        return pb.InferenceResponse(output_tensors=tensors)

    def _parse(self, request: Any) -> ParsedRequest:
        rid = request.request_id() if hasattr(request, "request_id") else ""
        return parse_request(self._tensors(request), self.io, self.limits, request_id=rid or "")

    def execute(self, requests: list[Any]) -> None:
        """Queue every request and return None: responses go through each request's response sender,
        in both modes. Decoupled: as many responses as the request streams, the last one flagged final.
        Not decoupled: exactly one response per request (Triton 2.51's Python backend accepts the sender
        there too, measured), so requests that arrive while others run join the in-flight batch, and a
        ``stop`` request reaches the engine while the request it stops is still running (with a blocking
        ``execute`` it would wait behind it and stop nothing)."""
        for request in requests:
            sender = request.get_response_sender()
            sink = (_DecoupledSink if self.decoupled else _UnarySink)(self, sender, requested_names(request))
            try:
                parsed = self._parse(request)
            except RequestError as exc:
                self.metrics.refused(exc.field)
                sink.send(None, final=True, error=str(exc), client=True)
                continue
            if parsed.stop:
                self.scheduler.stop_request(parsed.request_id)
                sink.send({}, final=True)  # an empty response, flagged final (a bare flag can be dropped)
                continue
            group = self.make_group(request, parsed, sink)
            if group is not None:
                self.scheduler.submit(group)
        return None

    def make_group(self, request: Any, parsed: ParsedRequest, sink: ResponseSink) -> RequestGroup | None:
        """The request group the scheduler runs for a parsed request; None when it is already answered
        (a hook for :class:`.engine_phases.PhasedEngineModel`)."""
        return RequestGroup(parsed, sink, self.io, split_rows=self.decoupled)

    def finalize(self) -> None:
        """Stop the scheduler; unfinished requests get an error response."""
        self.scheduler.shutdown()
        self.metrics.close()
