"""postprocessing (Python backend): token ids -> text, incrementally when streaming.

A thin adapter: all logic is ``repo_builder_runtime.postprocessing.Postprocessor`` (vendored by
``repo-builder render``), unit-tested without Triton. Streamed responses of one request (keyed by the
request id, correlation id and the engine's ``ARRIVAL_TIME_NS``, or by an explicit ``DETOKENIZER_KEY`` with ``STREAM``)
get only their new text, so the streamed text concatenates to the non-streaming text (no lost
SentencePiece spaces, no U+FFFD). The stream ledger shared with preprocessing (``stream_ledger.py``) tells
when a stream keyed by its request id alone has ended.

With several instances in a streaming repository, the streams' states live in shared memory
(``stream_state.py``), and each response is sent through the request's response sender before the stream's
next response may be decoded, so the text and its order are those of one instance.
"""

import json

import triton_python_backend_utils as pb_utils
from repo_builder_runtime.metrics import POST, for_model
from repo_builder_runtime.postprocessing import Postprocessor
from repo_builder_runtime.stream_ledger import StreamLedger, ledger_path
from repo_builder_runtime.stream_state import StreamStates
from repo_builder_runtime.triton_io import respond_each, send_each

INPUT_NAMES = (
    "TOKENS_BATCH",
    "SEQUENCE_LENGTH",
    "DETOKENIZER_KEY",
    "STREAM",
    "SEQUENCE_INDEX",
    "ARRIVAL_TIME_NS",
    "BATCH_INDEX",
    "FLUSH",
    "TOKEN_OFFSET",
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
        self.shared = None
        if self.core.wants_shared_states:
            path = ledger_path(args.get("model_name", ""), args.get("model_repository", ""))
            self.shared = StreamStates.open_for(path)
            if self.shared is None:
                pb_utils.Logger.log_warn(
                    "postprocessing: no shared stream state (model names that do not pair, or no /dev/shm): "
                    "streams use this instance's state; set postprocessing_instance_count to 1"
                )
        self.core.use_shared_states(self.shared)
        self.core.metrics = self.metrics = for_model(pb_utils, args, self.core.params, POST)
        self.metrics.add_collector(self.core.gauges)

    def execute(self, requests):
        if self.shared is not None:  # send each response before its stream's next one is decoded
            return send_each(
                pb_utils,
                requests,
                INPUT_NAMES,
                lambda inputs, request: self.core.process(inputs, request.request_id(), request.correlation_id()),
                "postprocessing",
                self.core.commit,
                metrics=self.metrics,
            )
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
        if self.shared is not None:
            self.core.use_shared_states(None)
            self.shared.close(unlink=True)
        if self.ledger is not None:
            self.core.use_ledger(None)
            self.ledger.close(unlink=True)
