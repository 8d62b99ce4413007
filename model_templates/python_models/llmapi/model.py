"""tensorrt_llm model of the llmapi profile: NVIDIA's llmapi tensor contract (text in, text out) over the
TensorRT-LLM LLM API.

Uses ``tensorrt_llm.LLM`` when it can be imported (NVIDIA's Triton TRT-LLM container), else repo-builder's CPU
stand-in; the LLM() arguments and triton_config come from ``1/model.yaml``. All logic lives in the vendored
``repo_builder_runtime`` package (llmapi_model.py, llmapi_standin.py).
"""

import triton_python_backend_utils as pb_utils
from repo_builder_runtime.llmapi_model import LLMAPIModel


class TritonPythonModel:
    """Every response goes through the request's response sender (several when streaming, else one)."""

    def initialize(self, args):
        self.model = LLMAPIModel(pb_utils, args)

    def execute(self, requests):
        return self.model.execute(requests)

    def finalize(self):
        self.model.finalize()
