"""preprocessing (Python backend): prompt -> token ids, word lists, embedding bias, end/pad ids.

A thin adapter: all logic is ``repo_builder_runtime.preprocessing.Preprocessor`` (vendored by
``repo-builder render``), unit-tested without Triton. Tensor names and dtypes come from this model's
config.pbtxt, so the same file serves every profile. A bad request (empty or non-UTF-8 ``text_input``,
``max_tokens`` <= 0, a prompt longer than the engine allows, malformed ``stop_words``...) gets an error
response naming the field; the other requests of the batch are served.
"""

import json

import triton_python_backend_utils as pb_utils
from repo_builder_runtime.metrics import PRE, for_model
from repo_builder_runtime.preprocessing import INPUT_NAMES, Preprocessor
from repo_builder_runtime.stream_ledger import StreamLedger
from repo_builder_runtime.triton_io import respond_each, response_parameters_supported


class TritonPythonModel:
    """One response per request; requests fail independently.

    Where the Python backend supports response parameters, each response carries ``sequence_id`` = a
    fresh key, which the ensemble hands to tensorrt_llm and postprocessing as their correlation id
    (postprocessing's streaming key, see ``EnsembleStreamKeys``). Elsewhere (Triton 2.51) the stream ledger
    shared with postprocessing (``stream_ledger.py``) lets a reused request id go without perf metrics once
    its earlier stream has ended.
    """

    def initialize(self, args):
        self.core = Preprocessor(json.loads(args["model_config"]))
        self.ledger = None
        supported = response_parameters_supported(pb_utils)
        if self.core.keys_ensemble_streams and not supported:
            self.ledger = StreamLedger.open_for(args.get("model_name", ""), args.get("model_repository", ""))
        self.core.use_response_parameters(supported, self.ledger)
        self.core.metrics = self.metrics = for_model(pb_utils, args, self.core.params, PRE)

    def execute(self, requests):
        return respond_each(
            pb_utils,
            requests,
            INPUT_NAMES,
            lambda inputs, request: self.core.process(inputs, request.request_id(), request.requested_output_names()),
            "preprocessing",
            lambda _request: self.core.response_parameters,
            self.metrics,
        )

    def finalize(self):
        self.metrics.close()
        if self.ledger is not None:
            self.ledger.close()  # postprocessing removes the file; a reloaded preprocessing maps it again
