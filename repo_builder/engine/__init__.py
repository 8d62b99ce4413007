"""Engine inspection: what an ``--engine-dir`` holds and the limits it was built with.

Three kinds of engine directory are understood (``EngineInfo.kind``):

* ``trtllm``: a TensorRT-LLM engine. Its ``config.json`` has either the old layout written by ``build.py``
  before TRT-LLM 0.8 (top-level ``builder_config`` + ``plugin_config``) or the new layout of
  ``trtllm-build`` 0.8+ (``version`` + ``pretrained_config`` + ``build_config``); the weights are
  ``rank<N>.engine`` files, one per rank (tp x pp).
* ``hf``: a Hugging Face checkpoint (``config.json`` with ``architectures`` + ``*.safetensors``/``*.bin``),
  served by repo-builder's CPU reference engine.
* ``synthetic``: a directory holding ``synthetic_engine.json`` (format: ``repo_builder.runtime.synthetic_spec``),
  served by the synthetic engine.

Rooms: :mod:`.info` (``EngineInfo``), :mod:`.sections` (the typed ``config.json`` sections and the check
naming a bad key), :mod:`.layouts` (the parsers of the old, new and HF layouts), :mod:`.inspection`
(``inspect_engine``), :mod:`.files` (rank-file check, fingerprint). Import the public names from here.
"""

from __future__ import annotations

from .files import check_rank_files, engine_fingerprint
from .info import ENGINE_PATTERNS, SYNTHETIC_FILE, WEIGHT_PATTERNS, EngineInfo, EngineKind
from .inspection import inspect_engine
from .layouts import HF_MAX_BATCH_SIZE, HF_MAX_DRAFT_LEN, SPECULATIVE_MODES
from .sections import check_config, show_value

__all__ = [
    "ENGINE_PATTERNS",
    "HF_MAX_BATCH_SIZE",
    "HF_MAX_DRAFT_LEN",
    "SPECULATIVE_MODES",
    "SYNTHETIC_FILE",
    "WEIGHT_PATTERNS",
    "EngineInfo",
    "EngineKind",
    "check_config",
    "check_rank_files",
    "engine_fingerprint",
    "inspect_engine",
    "show_value",
]
