"""tensorrt_llm slot, synthetic engine: deterministic tokens at synthetic_token_delay_ms per token.

Keeps the TensorRT-LLM tensor contract read from this model's config.pbtxt (any profile). Parameters:
engine_dir (holds synthetic_engine.json), synthetic_token_delay_ms, max_beam_width,
exclude_input_in_output, max_input_len, max_seq_len. All logic lives in the vendored
``repo_builder_runtime`` package (engine_core.py, synthetic.py).
"""

import triton_python_backend_utils as pb_utils
from repo_builder_runtime.engine_phases import PhasedEngineModel
from repo_builder_runtime.synthetic import SyntheticBackend


class TritonPythonModel:
    """Decoupled: responses go through each request's response sender; otherwise one per request."""

    def initialize(self, args):
        self.engine = PhasedEngineModel(pb_utils, args, SyntheticBackend.from_params)

    def execute(self, requests):
        return self.engine.execute(requests)

    def finalize(self):
        self.engine.finalize()
