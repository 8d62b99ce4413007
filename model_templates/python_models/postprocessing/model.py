"""postprocessing (Python backend): token ids -> text, incrementally when streaming.

A thin adapter: all logic is ``repo_builder_runtime.postprocessing.Postprocessor`` (vendored by
``repo-builder render``), unit-tested without Triton. Streamed responses of one request (keyed by the
request id and the engine's ``ARRIVAL_TIME_NS``, or by an explicit ``DETOKENIZER_KEY`` with ``STREAM``)
get only their new text, so the streamed text concatenates to the non-streaming text (no lost
SentencePiece spaces, no U+FFFD).
"""

import json

import triton_python_backend_utils as pb_utils

from repo_builder_runtime.postprocessing import Postprocessor
from repo_builder_runtime.triton_io import RequestError, error_response, get_input

INPUT_NAMES = ("TOKENS_BATCH", "SEQUENCE_LENGTH", "DETOKENIZER_KEY", "STREAM", "SEQUENCE_INDEX", "ARRIVAL_TIME_NS",
               "FLUSH")


class TritonPythonModel:
    """One response per request; requests fail independently."""

    def initialize(self, args):
        self.core = Postprocessor(json.loads(args["model_config"]))

    def execute(self, requests):
        responses = []
        for request in requests:
            try:
                inputs = {name: get_input(pb_utils, request, name) for name in INPUT_NAMES}
                outputs = self.core.process(inputs, request.request_id())
                tensors = [pb_utils.Tensor(name, array) for name, array in outputs.items()]
                responses.append(pb_utils.InferenceResponse(output_tensors=tensors))
            except RequestError as exc:
                responses.append(error_response(pb_utils, exc))
            except Exception as exc:  # a bug must not take the other requests down
                responses.append(error_response(
                    pb_utils, RuntimeError(f"postprocessing failed: {type(exc).__name__}: {exc}")))
        return responses

    def finalize(self):
        pass
