"""postprocessing (Python backend): token ids -> text, incrementally when streaming.

A thin adapter: all logic is ``repo_builder_runtime.postprocessing.Postprocessor`` (vendored by
``repo-builder render``), unit-tested without Triton. Streamed responses of one request (keyed by the
request id, correlation id and the engine's ``ARRIVAL_TIME_NS``, or by an explicit ``DETOKENIZER_KEY`` with ``STREAM``)
get only their new text, so the streamed text concatenates to the non-streaming text (no lost
SentencePiece spaces, no U+FFFD). The stream ledger shared with preprocessing (``stream_ledger.py``) tells
when a stream keyed by its request id alone has ended.
"""

import json

import triton_python_backend_utils as pb_utils
from repo_builder_runtime.metrics import POST, for_model
from repo_builder_runtime.postprocessing import Postprocessor
from repo_builder_runtime.stream_ledger import StreamLedger
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
        self.core.log = pb_utils.Logger.log_warn
        self.ledger = None
        if self.core.keys_ensemble_streams:
            self.ledger = StreamLedger.open_for(args.get("model_name", ""), args.get("model_repository", ""))
        self.core.use_ledger(self.ledger)
        self.core.metrics = self.metrics = for_model(pb_utils, args, self.core.params, POST)
        self.metrics.add_collector(self.core.gauges)

    def execute(self, requests):
        return respond_each(
            pb_utils,
            requests,
            INPUT_NAMES,
            lambda inputs, request: self.core.process(inputs, request.request_id(), request.correlation_id()),
            "postprocessing",
            metrics=self.metrics,
        )

    def finalize(self):
        self.metrics.close()
        if self.ledger is not None:
            self.core.use_ledger(None)
            self.ledger.close(unlink=True)
