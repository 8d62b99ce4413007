"""Code that runs inside the rendered Python-backend models.

This package is vendored by `repo-builder render` into each Python model's version folder as
``repo_builder_runtime/`` so a rendered repository runs in NVIDIA's Triton container without
repo-builder installed. Rules for every module here:

* relative imports only (``from . import text``), never ``import repo_builder``;
* import only what the Triton TRT-LLM container has: the standard library, numpy, transformers,
  tokenizers, sentencepiece, and torch (reference engine only);
* no import of ``triton_python_backend_utils`` at module level except in ``triton.py``, so the
  logic stays unit-testable in-process.
"""
