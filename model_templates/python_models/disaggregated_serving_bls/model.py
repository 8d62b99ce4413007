"""disaggregated_serving_bls: a request's context phase on one engine model, its generation phase on another.

A thin adapter over ``repo_builder_runtime.disagg_bls`` (vendored beside this file). Parameters:
``context_model_name``, ``generation_model_name``. Decoupled mode: every request runs on a worker thread
(``bls_worker_threads`` of them, default 256) and ``execute`` returns at once; otherwise the requests of one
``execute`` call run concurrently and their responses are returned together.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import triton_python_backend_utils as pb_utils
from repo_builder_runtime.disagg_bls import DisaggregatedCore, DisaggregatedSettings, as_declared, reshaped_dims
from repo_builder_runtime.errors import StepError
from repo_builder_runtime.params import ModelParams
from repo_builder_runtime.request_failure import fail_request, log_unexpected
from repo_builder_runtime.response_iterators import HOLD, held
from repo_builder_runtime.triton_io import is_client_error, requested_names, tensor_response, triton_error

_FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
_MODEL = "disaggregated_serving_bls"


class _Caller:
    """BLS requests through pb_utils (request parameters need python_backend r23.10+)."""

    @staticmethod
    def _request(model, inputs, parameters, outputs, request_id):
        return pb_utils.InferenceRequest(
            model_name=model,
            inputs=[pb_utils.Tensor(n, a) for n, a in inputs.items()],
            requested_output_names=list(outputs),
            request_id=request_id,
            parameters=dict(parameters),
        )

    @staticmethod
    def _tensors(model, resp):
        if resp.has_error():
            raise StepError(model, resp.error().message(), is_client_error(pb_utils, resp.error()))
        return {t.name(): t.as_numpy() for t in resp.output_tensors()}

    def call(self, model, inputs, parameters, outputs, request_id):
        return self._tensors(model, self._request(model, inputs, parameters, outputs, request_id).exec())

    def stream(self, model, inputs, parameters, outputs, request_id):
        for resp in held(self._request(model, inputs, parameters, outputs, request_id).exec(decoupled=True)):
            tensors = self._tensors(model, resp)
            if tensors:
                yield tensors


def _response(outputs, requested=None):
    return tensor_response(pb_utils, outputs, requested)


def _error(exc):
    client = isinstance(exc, StepError) and exc.client
    text = str(exc) if isinstance(exc, StepError) else f"disaggregated_serving_bls: {type(exc).__name__}: {exc}"
    return triton_error(pb_utils, text, client=client)


class TritonPythonModel:
    """The disaggregated_serving_bls model."""

    def initialize(self, args):
        params = ModelParams(args["model_config"])
        self.decoupled = params.decoupled
        settings = DisaggregatedSettings(
            context_model=params.str("context_model_name", "context") or "context",
            generation_model=params.str("generation_model_name", "generation") or "generation",
            decoupled=self.decoupled,
            outputs=tuple(o["name"] for o in params.config.get("output", [])),
        )
        self.core = DisaggregatedCore(settings, _Caller())
        self.reshaped = reshaped_dims(params.config)
        self.pool = ThreadPoolExecutor(
            max_workers=int(params.int("bls_worker_threads", 256) or 256), thread_name_prefix="disagg"
        )

    def _inputs(self, request):
        return as_declared({t.name(): t.as_numpy() for t in request.inputs()}, self.reshaped)

    def _serve_decoupled(self, request, sender):
        final_sent = False
        requested = requested_names(request)

        def send(outputs, final):
            nonlocal final_sent
            if outputs is None:
                sender.send(flags=_FINAL)
            else:
                sender.send(_response(outputs, requested), flags=_FINAL if final else 0)
            final_sent = final_sent or final

        try:
            self.core.run(
                self._inputs(request),
                send,
                requested_outputs=request.requested_output_names(),
                request_id=request.request_id(),
            )
        except Exception as exc:  # noqa: BLE001 - every failure becomes this request's error response
            fail_request(
                exc,
                model=_MODEL,
                expected=(StepError,),
                logger=pb_utils.Logger,
                send_error=None
                if final_sent
                else lambda e: sender.send(pb_utils.InferenceResponse(error=_error(e)), flags=_FINAL),
            )

    def _serve_once(self, request):
        got = []
        try:
            self.core.run(
                self._inputs(request),
                lambda outputs, final: got.append(outputs) if outputs is not None else None,
                requested_outputs=request.requested_output_names(),
                request_id=request.request_id(),
            )
            return _response(got[-1] if got else {})
        except Exception as exc:  # noqa: BLE001
            log_unexpected(exc, model=_MODEL, expected=(StepError,), logger=pb_utils.Logger)
            return pb_utils.InferenceResponse(error=_error(exc))

    def execute(self, requests):
        if self.decoupled:
            for request in requests:
                self.pool.submit(self._serve_decoupled, request, request.get_response_sender())
            return None
        return list(self.pool.map(self._serve_once, requests))

    def finalize(self):
        self.pool.shutdown(wait=True)
        HOLD.clear()
