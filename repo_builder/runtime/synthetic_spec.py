"""``synthetic_engine.json``: the one home of the synthetic engine's spec format (vendored; standard library only).

A synthetic engine dir (engine kind ``synthetic``, served by :mod:`.synthetic`) holds one JSON object::

    {"vocab_size": 32000, "max_batch_size": 64, "max_input_len": 1024, "max_seq_len": 2048}

Every key is optional (defaults :data:`SPEC_DEFAULTS`; tokens, except ``max_batch_size`` in requests). Read by
the synthetic engine when it loads and by ``repo_builder.engine`` at render time; this module imports nothing
but the standard library and :mod:`.errors`, so a render of a synthetic engine does not import numpy.
"""

from __future__ import annotations

import json
from pathlib import Path

from .errors import EngineLoadError

SPEC_FILE = "synthetic_engine.json"
#: ids 0-2 are <unk>/<s>/</s> in LLaMA-style vocabularies; the engine emits ids from here on.
FIRST_TOKEN = 3
#: Keys of synthetic_engine.json and their defaults (tokens / requests).
SPEC_DEFAULTS = {"vocab_size": 32000, "max_batch_size": 64, "max_input_len": 1024, "max_seq_len": 2048}


class SpecError(EngineLoadError):
    """``synthetic_engine.json`` is unusable: ``path`` is the file, ``problem`` what is wrong with it (the
    message is ``tensorrt_llm: <path>: <problem>``, as the model's load error shows it)."""

    def __init__(self, path: Path, problem: str) -> None:
        self.path = path
        self.problem = problem
        super().__init__(f"tensorrt_llm: {path}: {problem}")


def read_spec(engine_dir: str | Path) -> dict[str, int]:
    """Read and check ``<engine_dir>/synthetic_engine.json``; missing keys take :data:`SPEC_DEFAULTS`.

    Returns:
        {key of SPEC_DEFAULTS: positive int}.
    Raises:
        EngineLoadError: the file is missing.
        SpecError: bad JSON, not an object, an unknown key, or a value that is not a positive integer
            (``vocab_size`` must exceed 3; ``max_input_len`` must be below ``max_seq_len``).
    """
    path = Path(engine_dir) / SPEC_FILE
    if not path.is_file():
        raise EngineLoadError(
            f"tensorrt_llm: engine_dir '{engine_dir}' has no {SPEC_FILE}; a synthetic engine "
            f'dir needs one like {{"vocab_size": 32000, "max_batch_size": 64, '
            f'"max_input_len": 1024, "max_seq_len": 2048}}'
        )
    try:
        raw = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise SpecError(path, f"not valid JSON: {exc}") from exc
    if not isinstance(raw, dict):
        raise SpecError(path, "expected a JSON object")
    unknown = sorted(set(raw) - set(SPEC_DEFAULTS))
    if unknown:
        raise SpecError(path, f"unknown key(s) {unknown}; known: {sorted(SPEC_DEFAULTS)}")
    spec: dict[str, int] = {}
    for key, default in SPEC_DEFAULTS.items():
        value = raw.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise SpecError(path, f"'{key}' must be a positive integer, got {value!r}")
        spec[key] = value
    if spec["vocab_size"] <= FIRST_TOKEN:
        raise SpecError(path, f"'vocab_size' must be > {FIRST_TOKEN}")
    if spec["max_input_len"] >= spec["max_seq_len"]:
        raise SpecError(
            path,
            f"'max_input_len' ({spec['max_input_len']}) must be below 'max_seq_len' ({spec['max_seq_len']})",
        )
    return spec
