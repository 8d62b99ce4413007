"""tensorrt_llm slot of layout whisper, CPU reference engine in encoder-decoder mode: a Hugging Face
WhisperForConditionalGeneration run with transformers + torch (vendored ``repo_builder_runtime/whisper_engine.py``).
"""

import triton_python_backend_utils as pb_utils
from repo_builder_runtime.whisper_engine import WhisperEngineModel


class TritonPythonModel:
    """Not decoupled: one response per request, a bad request fails alone."""

    def initialize(self, args):
        self.engine = WhisperEngineModel(pb_utils, args)

    def execute(self, requests):
        return self.engine.execute(requests)

    def finalize(self):
        pass
