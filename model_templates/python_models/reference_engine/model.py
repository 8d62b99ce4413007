"""tensorrt_llm slot, CPU reference engine: a Hugging Face checkpoint run with transformers + torch.

Keeps the TensorRT-LLM tensor contract read from this model's config.pbtxt (any profile). Parameters:
engine_dir, max_beam_width, exclude_input_in_output, max_input_len, max_seq_len. All logic lives in the
vendored ``repo_builder_runtime`` package (engine_core.py, reference.py).
"""

import triton_python_backend_utils as pb_utils
from repo_builder_runtime.engine_phases import PhasedEngineModel
from repo_builder_runtime.reference import ReferenceBackend


class TritonPythonModel:
    """Decoupled: responses go through each request's response sender; otherwise one per request."""

    def initialize(self, args):
        self.engine = PhasedEngineModel(pb_utils, args, ReferenceBackend.from_params)

    def execute(self, requests):
        return self.engine.execute(requests)

    def finalize(self):
        self.engine.finalize()
