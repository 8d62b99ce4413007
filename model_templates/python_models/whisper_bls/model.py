"""whisper_bls (layout whisper): WAV + WAV_LENS + TEXT_PREFIX -> TRANSCRIPTS through the tensorrt_llm model.

All logic lives in the vendored ``repo_builder_runtime`` package (whisper_bls.py); the checkpoint's facts,
tokenizer and feature extractor are in ``whisper/`` beside this file.
"""

import triton_python_backend_utils as pb_utils
from repo_builder_runtime.whisper_bls import WhisperBLS


class TritonPythonModel:
    """Not decoupled: one response per request, a bad request fails alone."""

    def initialize(self, args):
        self.bls = WhisperBLS(pb_utils, args)

    def execute(self, requests):
        return self.bls.execute(requests)

    def finalize(self):
        pass
