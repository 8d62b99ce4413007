"""repo-builder: render, validate, launch and benchmark Triton model repositories for TensorRT-LLM."""

__version__ = "0.1.0"
