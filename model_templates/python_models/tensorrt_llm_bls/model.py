"""tensorrt_llm_bls: the ensemble pipeline as a Python-backend model (business-logic scripting).

A thin adapter over ``repo_builder_runtime.bls`` (vendored beside this file): it reads the
parameters and ``wiring.json``, turns ``pb_utils`` requests into numpy tensors, executes the step
models through BLS calls and sends the responses. All decisions (routing, validation, stop strings,
accumulation) are made by ``BLSCore``.

Concurrency: in decoupled mode ``execute`` hands every request to a thread pool and returns at once,
so a long generation never delays the next request's first token. BLS calls block in C++ with the
GIL released, so the threads overlap. In non-decoupled mode the requests of one ``execute`` call
run concurrently and their responses are returned together.

Parameters (config.pbtxt ``parameters``): ``tensorrt_llm_model_name`` (default ``tensorrt_llm``),
``accumulate_tokens`` (bool, default false), ``max_beam_width`` (int, default 1),
``bls_worker_threads`` (int, default 256: most requests in flight at once; more wait in a queue),
``bls_deadlock_timeout_s`` (int, default 60, 0 = off: the process exits with every thread's traceback in
the server log when no Python thread could run for that long; ``repo_builder_runtime/watchdog.py``),
``coalesce_streaming_responses`` (bool, default false: when the BLS falls behind a fast engine, the
streamed responses that are already waiting are merged into one postprocessing call and one response;
nothing is ever delayed to wait for more; fewer, larger chunks under load),
``bls_local_postprocessing`` (bool, default true: postprocessing's code runs in this process with
postprocessing's rendered config, ``postprocessing_config.json``, instead of a BLS call per response).

Cancelling the engine after a stop string: Triton 2.51's BLS response iterator has no ``cancel()``
(checked against the 2.51 stub), so when it is absent the BLS sends the engine a ``stop=true``
request with the same request id (TensorRT-LLM's stop signal) and then drains the remaining
responses; if the engine refuses ``stop`` the BLS only drains.
"""

from __future__ import annotations

import json
import os
import threading
from collections import deque
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import triton_python_backend_utils as pb_utils
from repo_builder_runtime.bls import (
    BLSCore,
    BLSRequestError,
    BLSSettings,
    BLSStepError,
    Wiring,
    WiringError,
    stack_rows,
)
from repo_builder_runtime.metrics import BLS, for_model
from repo_builder_runtime.params import ModelParams
from repo_builder_runtime.request_failure import fail_request, log_unexpected
from repo_builder_runtime.response_iterators import HOLD, held
from repo_builder_runtime.triton_io import (
    RequestError,
    is_client_error,
    requested_names,
    tensor_response,
    triton_error,
    use_fast_bytes_codec,
)

_FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
#: Failures that are not the server's fault (a refused request, a failed step): answered, never logged as errors.
_EXPECTED = (BLSRequestError, BLSStepError)
_STOP_INPUT = "stop"  # TensorRT-LLM's cancellation input: a request with the same id and stop=true


class _EngineStream:
    """Responses of one ``exec(decoupled=True)`` call as {name: numpy array}; empty ones skipped."""

    def __init__(
        self, caller: _Caller, model: str, inputs: Mapping[str, np.ndarray], outputs: Sequence[str], request_id: str
    ) -> None:
        self._caller = caller
        self._model = model
        self._inputs = inputs
        self._request_id = request_id
        req = pb_utils.InferenceRequest(
            model_name=model, inputs=caller.tensors(inputs), requested_output_names=list(outputs), request_id=request_id
        )
        self._it = req.exec(decoupled=True)

    def __iter__(self):
        model = self._model
        for resp in held(self._it):
            if resp.has_error():
                raise BLSStepError(model, resp.error().message(), is_client_error(pb_utils, resp.error()))
            tensors = resp.output_tensors()
            if tensors:
                yield {t.name(): t.as_numpy() for t in tensors}

    def batches(self):
        """Yield lists of the responses already received (at least one each, in order).

        A reader thread pulls responses from the engine while the request's worker postprocesses
        and sends; when the worker comes back, everything that arrived meanwhile is handed over at
        once, so the BLS can merge it into one postprocessing call and one response.
        """
        pending: deque = deque()
        cond = threading.Condition()
        state = {"done": False}

        def read() -> None:
            try:
                for item in self:
                    with cond:
                        pending.append(item)
                        cond.notify()
            except BaseException as exc:  # noqa: BLE001 - handed to the worker below
                with cond:
                    pending.append(exc)
            finally:
                with cond:
                    state["done"] = True
                    cond.notify()

        threading.Thread(target=read, name="bls-reader", daemon=True).start()
        while True:
            with cond:
                while not pending and not state["done"]:
                    cond.wait()
                items = list(pending)
                pending.clear()
                finished = state["done"]
            batch = []
            for item in items:
                if isinstance(item, BaseException):
                    if batch:
                        yield batch
                    raise item
                batch.append(item)
            if batch:
                yield batch
            if finished and not pending:
                return

    def cancel(self) -> None:
        cancel = getattr(self._it, "cancel", None)
        if cancel is not None:
            cancel()
            return
        self._caller.stop_request(self._model, self._inputs, self._request_id)


class _Caller:
    """``StepCaller`` over pb_utils BLS requests; models in ``local`` run in this process instead.

    ``local`` maps a model name to an object with ``process(inputs, request_id) -> outputs`` — the
    postprocessing model's own core (``Postprocessor``) when ``bls_local_postprocessing`` is on, which
    saves one round trip through tritonserver per streamed token.
    """

    def __init__(self, local: Mapping[str, object] | None = None) -> None:
        self.stop_supported: bool | None = None
        self.local = dict(local or {})

    @staticmethod
    def tensors(inputs: Mapping[str, np.ndarray]) -> list:
        return [pb_utils.Tensor(name, arr) for name, arr in inputs.items()]

    def call(
        self, model: str, inputs: Mapping[str, np.ndarray], outputs: Sequence[str], request_id: str
    ) -> dict[str, np.ndarray]:
        core = self.local.get(model)
        if core is not None:
            try:
                produced = core.process(inputs, request_id)
            except Exception as exc:  # noqa: BLE001 - surfaced like an error response of that model
                raise BLSStepError(model, str(exc), isinstance(exc, RequestError)) from exc
            return {name: produced[name] for name in outputs if name in produced}
        req = pb_utils.InferenceRequest(
            model_name=model, inputs=self.tensors(inputs), requested_output_names=list(outputs), request_id=request_id
        )
        resp = req.exec()
        if resp.has_error():
            raise BLSStepError(model, resp.error().message(), is_client_error(pb_utils, resp.error()))
        return {t.name(): t.as_numpy() for t in resp.output_tensors()}

    def stream(
        self, model: str, inputs: Mapping[str, np.ndarray], outputs: Sequence[str], request_id: str
    ) -> _EngineStream:
        return _EngineStream(self, model, inputs, outputs, request_id)

    def stop_request(self, model: str, inputs: Mapping[str, np.ndarray], request_id: str) -> None:
        """Send ``model`` a stop request for the in-flight request ``request_id`` (NVIDIA's ``stop`` input:
        the engine ends it with the tokens it has). Best effort: a model that refuses it is not asked again."""
        if self.stop_supported is False:
            return
        inputs = dict(inputs)
        inputs[_STOP_INPUT] = np.ones((1, 1), dtype=np.bool_)
        try:
            req = pb_utils.InferenceRequest(
                model_name=model, inputs=self.tensors(inputs), requested_output_names=[], request_id=request_id
            )
            for resp in held(req.exec(decoupled=True)):
                if resp.has_error():
                    self.stop_supported = False
                    pb_utils.Logger.log_warn(
                        f"tensorrt_llm_bls: model '{model}' refused the stop request "
                        f"({resp.error().message()}); stopped requests run to completion in the engine"
                    )
        except Exception as exc:  # noqa: BLE001 - best effort: cancellation must not fail the request
            self.stop_supported = False
            pb_utils.Logger.log_warn(f"tensorrt_llm_bls: stop request to '{model}' failed: {exc}")

    def end_request(self, request_id: str) -> None:
        """The engine request ``request_id`` ended (however): its local postprocessing state goes."""
        for core in self.local.values():
            core.end_request(request_id)


def _response(outputs: Mapping[str, np.ndarray], requested: frozenset[str] | None = None):
    return tensor_response(pb_utils, outputs, requested)


def _error_message(exc: BaseException) -> str:
    if isinstance(exc, (BLSRequestError, BLSStepError)):
        return str(exc)
    return f"tensorrt_llm_bls: {type(exc).__name__}: {exc}"


def _error(exc: BaseException):
    """The TritonError for ``exc``: INVALID_ARG (HTTP 400) for the client's mistakes, INTERNAL otherwise."""
    client = isinstance(exc, BLSRequestError) or (isinstance(exc, BLSStepError) and exc.client)
    return triton_error(pb_utils, _error_message(exc), client=client)


class TritonPythonModel:
    """The tensorrt_llm_bls model."""

    def initialize(self, args: dict[str, Any]) -> None:
        params = ModelParams(args["model_config"])
        cfg = params.config
        # one text tensor per streamed token: its (de)serialization without numpy iteration (triton_io.py)
        use_fast_bytes_codec(pb_utils)
        self.decoupled = params.decoupled
        self.settings = BLSSettings(
            engine_model=params.str("tensorrt_llm_model_name", "tensorrt_llm") or "tensorrt_llm",
            accumulate_tokens=bool(params.bool("accumulate_tokens", False)),
            max_beam_width=int(params.int("max_beam_width", 1) or 1),
            decoupled=self.decoupled,
            coalesce=bool(params.bool("coalesce_streaming_responses", False)),
            exclude_input_default=bool(params.bool("exclude_input_in_output", False)),
            draft_model=params.str("tensorrt_llm_draft_model_name") or None,
            max_draft_len=params.int("max_draft_len"),
        )
        here = os.path.dirname(os.path.abspath(__file__))
        try:
            wiring = Wiring.load(
                os.path.join(here, "wiring.json"),
                inputs=[i["name"] for i in cfg.get("input", [])] or None,
                outputs=[o["name"] for o in cfg.get("output", [])] or None,
            )
        except WiringError as exc:
            raise pb_utils.TritonModelException(str(exc)) from exc
        local = {}
        post_config = os.path.join(here, "postprocessing_config.json")
        # postprocessing_config.json is the config of the one step after the engine (postprocessing, or
        # <name>_postprocessing in a repository serving several LLMs): that step runs in this process.
        if (
            bool(params.bool("bls_local_postprocessing", True))
            and os.path.isfile(post_config)
            and len(wiring.post_steps) == 1
        ):
            from repo_builder_runtime.postprocessing import Postprocessor

            with open(post_config, encoding="utf-8") as fh:
                post = Postprocessor(json.load(fh))
            post.log = pb_utils.Logger.log_warn
            local[wiring.post_steps[0].model] = post
        self.metrics = for_model(pb_utils, args, params, BLS)
        for post in local.values():
            post.metrics = self.metrics
            self.metrics.add_collector(post.gauges)
        self.core = BLSCore(wiring, self.settings, _Caller(local))
        self.core.metrics = self.metrics
        workers = int(params.int("bls_worker_threads", 256) or 256)
        self.pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="bls")
        self.watchdog = None
        deadlock_s = int(params.int("bls_deadlock_timeout_s", 60, minimum=0) or 0)
        if deadlock_s > 0:
            from repo_builder_runtime.watchdog import StubWatchdog

            self.watchdog = StubWatchdog(deadlock_s).start()

    # --------------------------------------------------------------------------------------------

    @staticmethod
    def _inputs(request) -> dict[str, np.ndarray]:
        return {t.name(): t.as_numpy() for t in request.inputs()}

    def _serve_decoupled(self, request, sender) -> None:
        final_sent = False
        requested = requested_names(request)

        def send(outputs: Mapping[str, np.ndarray] | None, final: bool) -> None:
            nonlocal final_sent
            if outputs is None:
                # a response object, not a bare flag: Triton's gRPC front end drops a bare final flag unless
                # the client set enable_empty_final_response, and the client would never see the stream end
                sender.send(pb_utils.InferenceResponse(output_tensors=[]), flags=_FINAL)
            else:
                sender.send(_response(outputs, requested), flags=_FINAL if final else 0)
            final_sent = final_sent or final

        is_cancelled = getattr(sender, "is_cancelled", None) or getattr(request, "is_cancelled", None)
        try:
            self.core.run(
                self._inputs(request),
                send,
                requested_outputs=request.requested_output_names(),
                request_id=request.request_id(),
                cancelled=is_cancelled,
            )
        except Exception as exc:  # noqa: BLE001 - every failure becomes this request's error response
            if isinstance(exc, BLSRequestError):
                self.metrics.refused(exc.field)
            fail_request(
                exc,
                model="tensorrt_llm_bls",
                expected=_EXPECTED,
                logger=pb_utils.Logger,
                send_error=None
                if final_sent
                else lambda e: sender.send(pb_utils.InferenceResponse(error=_error(e)), flags=_FINAL),
            )

    def _serve_once(self, request):
        collected: list[dict[str, np.ndarray]] = []

        def send(outputs: Mapping[str, np.ndarray] | None, final: bool) -> None:
            if outputs is not None:
                collected.append(dict(outputs))

        try:
            self.core.run(
                self._inputs(request),
                send,
                requested_outputs=request.requested_output_names(),
                request_id=request.request_id(),
            )
            return _response(stack_rows(collected) if collected else {})
        except Exception as exc:  # noqa: BLE001
            if isinstance(exc, BLSRequestError):
                self.metrics.refused(exc.field)
            log_unexpected(exc, model="tensorrt_llm_bls", expected=_EXPECTED, logger=pb_utils.Logger)
            return pb_utils.InferenceResponse(error=_error(exc))

    def execute(self, requests):
        if self.decoupled:
            for request in requests:
                self.pool.submit(self._serve_decoupled, request, request.get_response_sender())
            return None
        if len(requests) == 1:
            return [self._serve_once(requests[0])]
        return list(self.pool.map(self._serve_once, requests))

    def finalize(self) -> None:
        if self.watchdog is not None:
            self.watchdog.stop()
        self.pool.shutdown(wait=True)
        HOLD.clear()
        self.metrics.close()
