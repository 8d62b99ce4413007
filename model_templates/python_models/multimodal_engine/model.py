"""multimodal_engine (layout multimodal): the vendored ``repo_builder_runtime/multimodal.py``
(PromptTableEngineModel).
"""

import triton_python_backend_utils as pb_utils
from repo_builder_runtime.multimodal import PromptTableEngineModel


class TritonPythonModel:
    """Not decoupled: one response per request, a bad request fails alone."""

    def initialize(self, args):
        self.model = PromptTableEngineModel(pb_utils, args)

    def execute(self, requests):
        return self.model.execute(requests)

    def finalize(self):
        pass
