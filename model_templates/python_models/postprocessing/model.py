"""postprocessing (Python backend): token ids -> text, incrementally when streaming.

A thin adapter: all logic is ``repo_builder_runtime.postprocessing.Postprocessor`` (vendored by
``repo-builder render``), unit-tested without Triton. Streamed responses of one request (keyed by the
request id, correlation id and the engine's ``ARRIVAL_TIME_NS``, or by an explicit ``DETOKENIZER_KEY`` with ``STREAM``)
get only their new text, so the streamed text concatenates to the non-streaming text (no lost
SentencePiece spaces, no U+FFFD).
"""

import json

import triton_python_backend_utils as pb_utils
from repo_builder_runtime.postprocessing import Postprocessor
from repo_builder_runtime.triton_io import respond_each

INPUT_NAMES = (
    "TOKENS_BATCH",
    "SEQUENCE_LENGTH",
    "DETOKENIZER_KEY",
    "STREAM",
    "SEQUENCE_INDEX",
    "ARRIVAL_TIME_NS",
    "BATCH_INDEX",
    "FLUSH",
)


class TritonPythonModel:
    """One response per request; requests fail independently."""

    def initialize(self, args):
        self.core = Postprocessor(json.loads(args["model_config"]))

    def execute(self, requests):
        return respond_each(
            pb_utils,
            requests,
            INPUT_NAMES,
            lambda inputs, request: self.core.process(inputs, request.request_id(), request.correlation_id()),
            "postprocessing",
        )

    def finalize(self):
        pass
