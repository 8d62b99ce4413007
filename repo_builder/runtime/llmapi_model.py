"""The body of the llmapi profile's ``tensorrt_llm`` model: NVIDIA's llmapi tensor contract served through the
LLM API, ``tensorrt_llm.LLM`` when it can be imported (NVIDIA's Triton TRT-LLM container), else the CPU
stand-in :mod:`.llmapi_standin`.

Facts of the contract (NVIDIA/TensorRT-LLM v1.2.1 ``triton_backend/all_models/llmapi/tensorrt_llm/``):

* ``1/model.yaml`` (``$LLM_CONFIG_PATH``, relative to the version folder, default ``model.yaml``): every key but
  ``triton_config`` is an ``LLM()`` argument (nested dicts such as ``kv_cache_config`` become config objects
  through ``tensorrt_llm.llmapi.llm_utils.update_llm_args_with_extra_dict``); ``triton_config.decoupled`` and
  ``triton_config.max_batch_size`` are required and must equal config.pbtxt's (checked at load here: a
  difference is a load error naming both files); ``triton_config.cancellation_check_period_ms`` (default 100).
* Inputs: ``text_input`` (one prompt, BYTES ``[1]``), ``streaming``, ``sampling_param_*`` (``best_of``,
  ``temperature``, ``top_k``, ``top_p``, ``frequency_penalty``, ``presence_penalty``, ``max_tokens``, ``stop``
  (BYTES ``[-1]``), ``seed``, ``exclude_input_from_output`` (default False: the text starts with the prompt),
  ``return_perf_metrics``), ``return_finish_reason``/``return_stop_reason``/``return_cumulative_logprob``, and
  ``stop`` (true: abort every request with the same Triton request id; the stop request itself gets a
  CANCELLED error).
* Inputs of ours (optional, so NVIDIA's clients are unaffected): ``return_num_input_tokens`` /
  ``return_num_output_tokens`` ask for the ``num_input_tokens`` / ``num_output_tokens`` outputs (the text front
  doors' usage counts).
* Outputs: ``text_output`` (cumulative when streaming, as the LLM API streams), the three requested extras and,
  with perf metrics, the KV-cache, timing and speculative-decoding metrics, each typed as config.pbtxt declares
  it (NVIDIA's model.py sends them all as strings; clients that parse JSON numbers get numbers here).

Differences from NVIDIA's 1.2.1 model.py, each a fix of a documented problem: ``streaming`` goes to
``generate_async`` by keyword (1.2.1 passes it in the ``lora_request`` position, so streaming yields one event);
a missing ``streaming`` is False; a bad request (no prompt, several prompts, a non-scalar, a value out of range)
fails alone with a message naming the input; a request stopped by a ``stop`` request still gets its final
response (``finish_reason`` ``cancelled``). Launched in an MPI world of several ranks (``tensor_parallel_size``
x ``pipeline_parallel_size`` under ``mpirun``), rank 0 hands the world to the LLM (``MpiCommSession``) and the
other ranks serve it, as NVIDIA's model does.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .errors import ModelLoadError, RequestError
from .triton_io import requested_names, tensor_response, triton_error

#: Environment variable that picks the LLM API: ``auto`` (default: tensorrt_llm when importable), ``standin``.
LLM_API_ENV = "REPO_BUILDER_LLM_API"
#: The sampling inputs, as (input name, SamplingParams field, kind, minimum).
SAMPLING_INPUTS = (
    ("sampling_param_best_of", "best_of", "int", 1),
    ("sampling_param_temperature", "temperature", "float", 0.0),
    ("sampling_param_top_k", "top_k", "int", 0),
    ("sampling_param_top_p", "top_p", "float", 0.0),
    ("sampling_param_frequency_penalty", "frequency_penalty", "float", None),
    ("sampling_param_presence_penalty", "presence_penalty", "float", None),
    ("sampling_param_max_tokens", "max_tokens", "int", 1),
    ("sampling_param_seed", "seed", "int", 0),
    ("sampling_param_exclude_input_from_output", "exclude_input_from_output", "bool", None),
    ("sampling_param_return_perf_metrics", "return_perf_metrics", "bool", None),
)
#: Defaults of NVIDIA's helpers.py for inputs a request leaves out.
SAMPLING_DEFAULTS = {"best_of": 1, "exclude_input_from_output": False, "return_perf_metrics": False}
OUTPUT_FLAGS = (
    "return_finish_reason",
    "return_stop_reason",
    "return_cumulative_logprob",
    # ours (not in NVIDIA's contract): the token counts the text front doors report (llmapi_front.py)
    "return_num_input_tokens",
    "return_num_output_tokens",
)


@dataclass
class LLMAPIRequest:
    """One request after parsing: the prompt, the SamplingParams keyword arguments, the flags."""

    prompt: str = ""
    sampling: dict[str, Any] = field(default_factory=dict)
    streaming: bool = False
    stop: bool = False
    outputs: dict[str, bool] = field(default_factory=dict)


def _scalar(tensors: Mapping[str, np.ndarray], name: str) -> Any:
    arr = tensors.get(name)
    if arr is None:
        return None
    arr = np.asarray(arr)
    if arr.size != 1:
        raise RequestError(name, f"expected one value, got shape {list(arr.shape)}")
    return arr.reshape(-1)[0].item()


def _text(value: Any, name: str) -> str:
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            raise RequestError(name, "is not valid UTF-8") from None
    return str(value)


def parse_request(tensors: Mapping[str, np.ndarray]) -> LLMAPIRequest:
    """The request's input tensors ({input name: numpy array}) as an :class:`LLMAPIRequest`.

    Raises:
        RequestError: naming the input: ``text_input`` missing, empty, not UTF-8 or holding more than one
            prompt; a scalar input with more than one value; a value below its minimum, ``top_p`` above 1.
    """
    req = LLMAPIRequest(stop=bool(_scalar(tensors, "stop") or False))
    if req.stop:
        return req
    raw = tensors.get("text_input")
    if raw is None:
        raise RequestError("text_input", "is required (the prompt)")
    arr = np.asarray(raw).reshape(-1)
    if arr.size != 1:
        raise RequestError("text_input", f"expected one prompt, got {arr.size} (the model takes one per request)")
    req.prompt = _text(arr[0], "text_input")
    if not req.prompt:
        raise RequestError("text_input", "is empty")
    req.streaming = bool(_scalar(tensors, "streaming") or False)  # None (not given) is False
    sampling: dict[str, Any] = {}
    for name, key, kind, minimum in SAMPLING_INPUTS:
        value = _scalar(tensors, name)
        if value is None:
            if key in SAMPLING_DEFAULTS:
                sampling[key] = SAMPLING_DEFAULTS[key]
            continue
        if kind == "bool":
            sampling[key] = bool(value)
            continue
        value = int(value) if kind == "int" else float(value)
        if kind == "float" and not np.isfinite(value):
            raise RequestError(name, f"must be a finite number, got {value}")
        if minimum is not None and value < minimum:
            raise RequestError(name, f"must be at least {minimum}, got {value}")
        if key == "top_p" and value > 1.0:
            raise RequestError(name, f"must be at most 1, got {value}")
        sampling[key] = value
    stop = tensors.get("sampling_param_stop")
    if stop is not None:
        words = [_text(w, "sampling_param_stop") for w in np.asarray(stop).reshape(-1)]
        if any(w == "" for w in words):
            raise RequestError("sampling_param_stop", "holds an empty stop string")
        sampling["stop"] = words
    req.sampling = sampling
    req.outputs = {flag: bool(_scalar(tensors, flag) or False) for flag in OUTPUT_FLAGS}
    return req


def _ns(value: Any) -> int:
    """A perf-metrics time (the LLM API's timedelta since the epoch, or seconds as a float) in nanoseconds."""
    if hasattr(value, "total_seconds"):  # exact: a float of seconds since the epoch holds ~0.2 us
        return (value.days * 86400 + value.seconds) * 1_000_000_000 + value.microseconds * 1000
    return int(round(float(value or 0) * 1e9))


def response_tensors(output: Any, flags: Mapping[str, bool]) -> dict[str, np.ndarray]:
    """{output name: array} for one ``RequestOutput`` state, typed as the contract declares them.

    ``text_output``: BYTES ``[n]`` (one per sequence); ``finish_reason``/``stop_reason``: BYTES ``[n]`` when
    asked (``"None"`` when there is none, as NVIDIA writes it); ``cumulative_logprob``: FP32 ``[n]``;
    ``num_input_tokens`` / ``num_output_tokens`` (ours): INT32 ``[1]``, the prompt's token count
    (``RequestOutput.prompt_token_ids``) and the tokens generated so far by the first sequence; with perf
    metrics the KV-cache metrics (INT32/FP32 ``[1]``), times (INT64 ns since the epoch ``[1]``) and
    speculative-decoding metrics (FP32/INT32 ``[1]``).
    """
    outs = list(output.outputs)
    tensors: dict[str, np.ndarray] = {
        "text_output": np.array([o.text.encode("utf-8") for o in outs], dtype=np.object_),
    }
    if flags.get("return_finish_reason"):
        tensors["finish_reason"] = np.array([str(o.finish_reason).encode() for o in outs], dtype=np.object_)
    if flags.get("return_stop_reason"):
        tensors["stop_reason"] = np.array([str(o.stop_reason).encode() for o in outs], dtype=np.object_)
    if flags.get("return_cumulative_logprob"):
        tensors["cumulative_logprob"] = np.array([float(o.cumulative_logprob or 0.0) for o in outs], dtype=np.float32)
    if flags.get("return_num_input_tokens"):
        tensors["num_input_tokens"] = np.array([len(getattr(output, "prompt_token_ids", None) or ())], dtype=np.int32)
    if flags.get("return_num_output_tokens"):
        tensors["num_output_tokens"] = np.array([len(outs[0].token_ids or ()) if outs else 0], dtype=np.int32)
    perf = getattr(outs[0], "request_perf_metrics", None) if outs else None
    if perf:
        kv, timing, spec = perf.kv_cache_metrics, perf.timing_metrics, perf.speculative_decoding
        i32 = np.int32
        tensors.update(
            kv_cache_reused_block=np.array([kv.num_reused_blocks], dtype=i32),
            kv_cache_missed_block=np.array([kv.num_missed_blocks], dtype=i32),
            kv_cache_alloc_new_blocks=np.array([kv.num_new_allocated_blocks], dtype=i32),
            kv_cache_alloc_total_blocks=np.array([kv.num_total_allocated_blocks], dtype=i32),
            kv_cache_hit_rate=np.array([kv.kv_cache_hit_rate], dtype=np.float32),
            arrival_time_ns=np.array([_ns(timing.arrival_time)], dtype=np.int64),
            first_scheduled_time_ns=np.array([_ns(timing.first_scheduled_time)], dtype=np.int64),
            first_token_time_ns=np.array([_ns(timing.first_token_time)], dtype=np.int64),
            last_token_time_ns=np.array([_ns(timing.last_token_time)], dtype=np.int64),
            acceptance_rate=np.array([spec.acceptance_rate], dtype=np.float32),
            total_accepted_draft_tokens=np.array([spec.total_accepted_draft_tokens], dtype=i32),
            total_draft_tokens=np.array([spec.total_draft_tokens], dtype=i32),
        )
    return tensors


def read_model_yaml(version_dir: str | Path, *, environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The LLM config: ``$LLM_CONFIG_PATH`` (default ``model.yaml``) under ``version_dir`` (an absolute path wins).

    Raises:
        ModelLoadError: missing, not YAML, not a mapping, or without ``triton_config.decoupled`` /
            ``triton_config.max_batch_size`` (names the file and key).
    """
    import yaml  # NVIDIA's container has PyYAML (its own llmapi model imports it)

    env = os.environ if environ is None else environ
    path = Path(version_dir) / env.get("LLM_CONFIG_PATH", "model.yaml")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ModelLoadError(f"tensorrt_llm: cannot read the LLM config {path}: {exc.strerror or exc}") from exc
    except yaml.YAMLError as exc:
        raise ModelLoadError(f"tensorrt_llm: {path} is not valid YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise ModelLoadError(f"tensorrt_llm: {path} must be a mapping of LLM() arguments")
    triton = data.get("triton_config")
    for key in ("decoupled", "max_batch_size"):
        if not isinstance(triton, dict) or key not in triton:
            raise ModelLoadError(f"tensorrt_llm: {path}: triton_config.{key} is required")
    if "model" not in data:
        raise ModelLoadError(f"tensorrt_llm: {path}: model is required (the checkpoint folder)")
    return data


def mpi_rank_size(environ: Mapping[str, str] | None = None) -> tuple[int, int]:
    """(rank, world size) of this process from Open MPI's / PMI's environment; (0, 1) outside MPI."""
    env = os.environ if environ is None else environ
    for rank_key, size_key in (("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"), ("PMI_RANK", "PMI_SIZE")):
        if rank_key in env:
            return int(env[rank_key]), int(env.get(size_key, "1"))
    return 0, 1


def load_llm_api(environ: Mapping[str, str] | None = None) -> tuple[str, Any, Any]:
    """(which, LLM class, SamplingParams class): ``tensorrt_llm`` when importable (and not overridden by
    ``REPO_BUILDER_LLM_API=standin``), else ``standin``."""
    env = os.environ if environ is None else environ
    if env.get(LLM_API_ENV, "auto") != "standin":
        try:
            from tensorrt_llm import LLM, SamplingParams

            return "tensorrt_llm", LLM, SamplingParams
        except ImportError:
            pass
    from .llmapi_standin import LLM as StandInLLM
    from .llmapi_standin import SamplingParams as StandInSamplingParams

    return "standin", StandInLLM, StandInSamplingParams


@dataclass
class _Tracked:
    request: Any
    result: Any
    triton_id: str
    cancelled: bool = False


class LLMAPIModel:
    """``initialize``/``execute``/``finalize`` of the llmapi ``tensorrt_llm`` model.

    Args:
        pb_utils: ``triton_python_backend_utils`` (injected for tests).
        args: ``initialize``'s arguments (``model_config`` JSON, ``model_repository``, ``model_version``).
        llm_factory: builds the LLM from the model.yaml arguments (tests); default :func:`load_llm_api`'s.
    Raises:
        ModelLoadError: model.yaml is missing or malformed, or its triton_config contradicts config.pbtxt.
    """

    def __init__(self, pb_utils: Any, args: Mapping[str, Any], llm_factory: Callable[..., Any] | None = None) -> None:
        self.pb = pb_utils
        cfg = json.loads(args["model_config"]) if isinstance(args["model_config"], str) else args["model_config"]
        version_dir = Path(str(args["model_repository"])) / str(args.get("model_version") or "1")
        config = read_model_yaml(version_dir)
        triton = config.pop("triton_config")
        self.decoupled = bool((cfg.get("model_transaction_policy") or {}).get("decoupled", False))
        pbtxt_batch = int(cfg.get("max_batch_size", 0) or 0)
        for key, mine in (("decoupled", self.decoupled), ("max_batch_size", pbtxt_batch)):
            theirs = triton[key]
            if (bool(theirs) if key == "decoupled" else int(theirs)) != mine:
                raise ModelLoadError(
                    f"tensorrt_llm: model.yaml triton_config.{key} is {theirs} but config.pbtxt has {mine}; "
                    "write the same value in both files (repo-builder render does)"
                )
        self.period_s = max(1, int(triton.get("cancellation_check_period_ms", 100) or 100)) / 1000.0
        self.rank, self.world = mpi_rank_size()
        self.which, llm_cls, self.sampling_cls = load_llm_api()
        self.llm: Any = None
        self._tracked: dict[int, _Tracked] = {}
        self._lock = threading.Lock()
        self._running = True
        if self.which == "tensorrt_llm":
            from tensorrt_llm.llmapi.llm_utils import update_llm_args_with_extra_dict

            llm_args = update_llm_args_with_extra_dict({}, config)
            if self.world > 1:
                from mpi4py.MPI import COMM_WORLD

                if self.rank > 0:  # serve the leader's LLM until it shuts down (NVIDIA's model does the same)
                    from mpi4py.futures import MPICommExecutor

                    with MPICommExecutor(COMM_WORLD):
                        pass
                    return
                from tensorrt_llm.llmapi import MpiCommSession

                llm_args["_mpi_session"] = MpiCommSession(comm=COMM_WORLD, n_workers=COMM_WORLD.Get_size())
        else:
            llm_args = config
            if self.rank > 0:  # the CPU stand-in runs on rank 0 alone
                return
        factory = llm_factory or llm_cls
        try:
            self.llm = factory(**llm_args)
        except Exception as exc:  # noqa: BLE001 - a load error naming the config
            raise ModelLoadError(f"tensorrt_llm: LLM({', '.join(sorted(llm_args))}) failed to start: {exc}") from exc
        self.loop = asyncio.new_event_loop()
        self._loop_thread = threading.Thread(target=self.loop.run_forever, name="llmapi-loop", daemon=True)
        self._loop_thread.start()
        self._cancel_thread = threading.Thread(target=self._watch_cancellation, name="llmapi-cancel", daemon=True)
        self._cancel_thread.start()

    # ------------------------------------------------------------------------------------------ responses
    def _send(
        self,
        sender: Any,
        tensors: Mapping[str, np.ndarray] | None,
        *,
        final: bool,
        requested: frozenset[str] | None = None,
    ) -> None:
        pb = self.pb
        flags = pb.TRITONSERVER_RESPONSE_COMPLETE_FINAL if final else 0
        if tensors is None:
            sender.send(flags=flags)
        else:
            sender.send(tensor_response(pb, tensors, requested), flags=flags)

    def _send_error(self, sender: Any, message: str, *, client: bool = True, cancelled: bool = False) -> None:
        pb = self.pb
        error = triton_error(pb, message, client=client)
        code = getattr(pb.TritonError, "CANCELLED", None)
        if cancelled and code is not None:
            error = pb.TritonError(message, code)
        sender.send(pb.InferenceResponse(output_tensors=[], error=error), flags=pb.TRITONSERVER_RESPONSE_COMPLETE_FINAL)

    # ------------------------------------------------------------------------------------------ requests
    def execute(self, requests: list[Any]) -> None:
        """Schedule every request on the LLM's event loop and return None (responses go through each
        request's response sender: several when streaming, else one)."""
        for request in requests:
            if self.llm is None:
                self._send_error(
                    request.get_response_sender(), f"tensorrt_llm: rank {self.rank} does not serve requests"
                )
                continue
            asyncio.run_coroutine_threadsafe(self._serve(request), self.loop)
        return None

    def _tensors(self, request: Any) -> dict[str, np.ndarray]:
        out: dict[str, np.ndarray] = {}
        for tensor in request.inputs():
            out[tensor.name()] = tensor.as_numpy()
        return out

    def _stop(self, triton_id: str, sender: Any) -> None:
        if not triton_id:
            self._send_error(sender, "stop: needs the request id of the request(s) to stop (triton-request-id)")
            return
        with self._lock:
            targets = [t for t in self._tracked.values() if t.triton_id == triton_id]
        for t in targets:
            t.result.abort()
        self._send_error(sender, f"stop: request '{triton_id}' cancelled by client", cancelled=True)

    async def _serve(self, request: Any) -> None:
        sender = request.get_response_sender()
        requested = requested_names(request)
        triton_id = str(request.request_id() or "")
        try:
            parsed = parse_request(self._tensors(request))
        except RequestError as exc:
            self._send_error(sender, f"tensorrt_llm: input '{exc.field}': {exc.message}")
            return
        if parsed.stop:
            self._stop(triton_id, sender)
            return
        if parsed.streaming and not self.decoupled:
            self._send_error(
                sender,
                "tensorrt_llm: input 'streaming': needs the decoupled model (render with --streaming, "
                "triton_config.decoupled: true)",
            )
            return
        tracked: _Tracked | None = None
        try:
            result = self.llm.generate_async(
                parsed.prompt, sampling_params=self.sampling_cls(**parsed.sampling), streaming=parsed.streaming
            )
            tracked = _Tracked(request, result, triton_id)
            with self._lock:
                self._tracked[id(tracked)] = tracked
            last = None
            async for state in result:
                last = state
                if parsed.streaming and not tracked.cancelled:
                    final = bool(state.finished)
                    if final:
                        self._untrack(tracked)
                    self._send(sender, response_tensors(state, parsed.outputs), final=final, requested=requested)
            self._untrack(tracked)
            if tracked.cancelled:
                self._send_error(sender, "tensorrt_llm: request cancelled by the client", cancelled=True)
            elif not parsed.streaming and last is not None:
                self._send(sender, response_tensors(last, parsed.outputs), final=True, requested=requested)
            elif last is None or not last.finished:
                self._send(sender, None, final=True)
        except Exception as exc:  # noqa: BLE001 - this request fails alone
            self._untrack(tracked)
            self._send_error(sender, f"tensorrt_llm: generation failed: {exc}", client=False)
        finally:
            self._untrack(tracked)

    def _untrack(self, tracked: _Tracked | None) -> None:
        """Stop watching ``tracked`` -- before its final response: Triton frees the request's response factory
        with the final response, and ``is_cancelled()`` on a freed one crashes tritonserver (seen with 24.10:
        SIGSEGV in ``TRITONBACKEND_ResponseFactoryIsCancelled``)."""
        if tracked is not None:
            with self._lock:
                self._tracked.pop(id(tracked), None)

    def _watch_cancellation(self) -> None:
        """Every ``cancellation_check_period_ms``: abort the requests Triton cancelled (client gone)."""
        import time

        while self._running:
            time.sleep(self.period_s)
            gone_now = []
            with self._lock:  # held while asking: a request untracked under the lock has no final response yet
                for t in self._tracked.values():
                    try:
                        gone = bool(t.request.is_cancelled())
                    except Exception:  # noqa: BLE001 - a request without the call is never cancelled
                        gone = False
                    if gone and not t.cancelled:
                        t.cancelled = True
                        gone_now.append(t)
            for t in gone_now:
                t.result.abort()

    def finalize(self) -> None:
        """Stop the watcher, shut the LLM down and stop the event loop."""
        self._running = False
        if self.llm is not None:
            try:
                self.llm.shutdown()
            finally:
                self.loop.call_soon_threadsafe(self.loop.stop)
