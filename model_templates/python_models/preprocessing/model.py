"""preprocessing (Python backend): prompt -> token ids, word lists, embedding bias, end/pad ids.

A thin adapter: all logic is ``repo_builder_runtime.preprocessing.Preprocessor`` (vendored by
``repo-builder render``), unit-tested without Triton. Tensor names and dtypes come from this model's
config.pbtxt, so the same file serves every profile. A bad request (empty or non-UTF-8 ``text_input``,
``max_tokens`` <= 0, a prompt longer than the engine allows, malformed ``stop_words``...) gets an error
response naming the field; the other requests of the batch are served.
"""

import json

import triton_python_backend_utils as pb_utils
from repo_builder_runtime.preprocessing import INPUT_NAMES, Preprocessor
from repo_builder_runtime.triton_io import respond_each


class TritonPythonModel:
    """One response per request; requests fail independently."""

    def initialize(self, args):
        self.core = Preprocessor(json.loads(args["model_config"]))

    def execute(self, requests):
        return respond_each(
            pb_utils, requests, INPUT_NAMES, lambda inputs, _: self.core.process(inputs), "preprocessing"
        )

    def finalize(self):
        pass
