"""ensemble / tensorrt_llm_bls of the llmapi profile: the engine profiles' text front door over the llmapi
``tensorrt_llm`` model.

A thin adapter over ``repo_builder_runtime.llmapi_front`` (vendored beside this file), which maps the request's
ensemble inputs (``text_input``, ``max_tokens``, ``stream``, ``stop_words``, ...) onto the llmapi model's
(``text_input``, ``sampling_param_max_tokens``, ``streaming``, ``sampling_param_stop``, ...) and its responses
back (delta ``text_output`` when streaming, ``num_input_tokens``/``num_output_tokens``, ``cum_log_probs``, perf
metrics). Each request runs on a worker thread of its own: one BLS call to the llmapi model (streamed when that
model is decoupled), every response through the request's response sender (one when not streaming). A request
the client cancelled stops its llmapi request (``cancel()`` on the response iterator, else a ``stop`` request
with the same request id) and ends with a CANCELLED error.

Parameters (config.pbtxt ``parameters``): ``tensorrt_llm_model_name`` (default ``tensorrt_llm``), and
``front_worker_threads`` (default 256: most requests in flight at once; more wait in a queue). The llmapi model is
decoupled exactly when this model is (render writes the same ``--streaming`` value into both).
"""

from __future__ import annotations

import itertools
import os
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import triton_python_backend_utils as pb_utils
from repo_builder_runtime.llmapi_front import ENGINE_MODEL, FrontResponder, front_message, plan_request
from repo_builder_runtime.params import ModelParams
from repo_builder_runtime.response_iterators import HOLD, held
from repo_builder_runtime.triton_io import RequestError, is_client_error, requested_names, tensor_response, triton_error

_FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
_ids = itertools.count(1)
_TAG = os.urandom(4).hex()


class _Stopped(Exception):
    pass


class TritonPythonModel:
    """The llmapi profile's text front door (rendered as ``ensemble`` and as ``tensorrt_llm_bls``)."""

    def initialize(self, args):
        params = ModelParams(args["model_config"])
        self.name = params.model_name
        self.decoupled = params.decoupled
        self.engine = params.str("tensorrt_llm_model_name", ENGINE_MODEL) or ENGINE_MODEL
        workers = int(params.int("front_worker_threads", 256) or 256)
        self.pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix=f"{self.name}-front")

    def execute(self, requests):
        for request in requests:
            self.pool.submit(self._serve, request)
        return None

    # ------------------------------------------------------------------------------------------ one request
    def _send_error(self, sender, message, *, client=True, cancelled=False):
        error = triton_error(pb_utils, message, client=client)
        code = getattr(pb_utils.TritonError, "CANCELLED", None)
        if cancelled and code is not None:
            error = pb_utils.TritonError(message, code)
        sender.send(pb_utils.InferenceResponse(output_tensors=[], error=error), flags=_FINAL)

    @staticmethod
    def _response(outputs, requested=None):
        return tensor_response(pb_utils, outputs, requested)

    def _stop_engine(self, inner_id):
        """A ``stop`` request with the llmapi call's id (the llmapi model aborts it); errors are ignored."""
        try:
            req = pb_utils.InferenceRequest(
                model_name=self.engine,
                inputs=[pb_utils.Tensor("stop", np.array([True], dtype=np.bool_))],
                requested_output_names=[],
                request_id=inner_id,
            )
            for _ in held(req.exec(decoupled=True)) if self.decoupled else [req.exec()]:
                pass
        except Exception as exc:  # noqa: BLE001 - best effort
            pb_utils.Logger.log_warn(f"{self.name}: stop request to '{self.engine}' failed: {exc}")

    def _serve(self, request):
        sender = request.get_response_sender()
        requested = requested_names(request)
        try:
            tensors = {t.name(): t.as_numpy() for t in request.inputs()}
            plan = plan_request(tensors, decoupled=self.decoupled, engine_decoupled=self.decoupled)
        except RequestError as exc:
            self._send_error(sender, f"{self.name}: {exc}")
            return
        except Exception as exc:  # noqa: BLE001 - this request fails alone
            self._send_error(sender, f"{self.name}: {type(exc).__name__}: {exc}", client=False)
            return
        inner_id = f"{request.request_id() or 'front'}-{_TAG}-{next(_ids)}"
        responder = FrontResponder(stream=plan.stream)
        sent_final = False
        try:
            call = pb_utils.InferenceRequest(
                model_name=self.engine,
                inputs=[pb_utils.Tensor(n, a) for n, a in plan.inputs.items()],
                requested_output_names=plan.outputs,
                request_id=inner_id,
            )
            responses = call.exec(decoupled=True) if plan.engine_streams else iter([call.exec()])
            for resp in held(responses):
                if request.is_cancelled():
                    cancel = getattr(responses, "cancel", None)
                    if callable(cancel):
                        cancel()
                    else:
                        threading.Thread(target=self._stop_engine, args=(inner_id,), daemon=True).start()
                    raise _Stopped()
                if resp.has_error():
                    message = resp.error().message()
                    client = is_client_error(pb_utils, resp.error())
                    self._send_error(sender, f"{self.name}: {front_message(message)}", client=client)
                    sent_final = True
                    return
                outs = {t.name(): t.as_numpy() for t in resp.output_tensors()}
                if not outs:
                    continue
                converted, final = responder.convert(outs)
                if converted is not None:
                    sender.send(self._response(converted, requested), flags=_FINAL if final else 0)
                    sent_final = final
                if final:
                    break
            if not sent_final:
                last = None if plan.stream else responder.finish()
                if last is not None:
                    sender.send(self._response(last, requested), flags=_FINAL)
                elif plan.stream:
                    sender.send(flags=_FINAL)
                else:
                    self._send_error(sender, f"{self.name}: '{self.engine}' sent no text", client=False)
                sent_final = True
        except _Stopped:
            self._send_error(sender, f"{self.name}: request cancelled by the client", cancelled=True)
        except Exception as exc:  # noqa: BLE001 - this request fails alone
            if not sent_final:
                self._send_error(sender, f"{self.name}: {type(exc).__name__}: {exc}", client=False)

    def finalize(self):
        self.pool.shutdown(wait=False, cancel_futures=True)
        HOLD.clear()
