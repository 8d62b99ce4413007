"""The models of a repository as ``validate`` reads them: :class:`Problem` (one finding), :class:`RepoModel`
(a model folder with its parsed ``config.pbtxt`` and line lookups), :func:`load_models`, the TRT-LLM engine
models among them and the serve-path mapping of path parameters. Used by :mod:`.validate`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeGuard

from .lockfile import LockFile, read_lock
from .pbtxt import find_placeholders, read_model_folders, string_parameters

if TYPE_CHECKING:
    pass


ENGINE_PATH_KEYS = ("gpt_model_path", "engine_dir", "encoder_model_path")


@dataclass(frozen=True)
class Problem:
    """One finding: ``file`` is relative to the repository (``model/config.pbtxt``); ``line`` is 1-based.

    ``severity`` is ``"error"`` (the repository will not load or will misbehave) or ``"warning"`` (valid, but
    some requests will be refused, e.g. streaming with beam search, case B30).
    """

    file: str
    message: str
    line: int | None = None
    severity: str = "error"

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line else self.file
        prefix = "warning: " if self.severity == "warning" else ""
        return f"{where}: {prefix}{self.message}"


@dataclass
class RepoModel:
    name: str
    rel: str
    text: str
    config: Any | None  # ModelConfig, None when the file did not parse

    @property
    def cfg(self) -> Any:
        """The parsed ModelConfig; only for models whose config.pbtxt parsed (callers skip ``config is None``)."""
        if self.config is None:
            raise RuntimeError(f"{self.rel}: config.pbtxt did not parse")
        return self.config

    def line_of(self, pattern: str) -> int | None:
        """1-based line of the first line matching regex ``pattern``."""
        rx = re.compile(pattern)
        for i, line in enumerate(self.text.splitlines(), start=1):
            if rx.search(line):
                return i
        return None

    def param_line(self, key: str) -> int | None:
        """Line of ``key: "<key>"`` of a parameters entry."""
        return self.line_of(r'key\s*:\s*"' + re.escape(key) + r'"')

    def tensor_line(self, name: str) -> int | None:
        return self.line_of(r'name\s*:\s*"' + re.escape(name) + r'"')

    @property
    def params(self) -> dict[str, str]:
        return string_parameters(self.config) if self.config is not None else {}


def is_set(value: str | None) -> TypeGuard[str]:
    return value is not None and value.strip() != "" and "${" not in value


def load_models(root: Path, problems: list[Problem]) -> dict[str, RepoModel]:
    models: dict[str, RepoModel] = {}
    for folder in read_model_folders(root):
        if folder.unreadable == "missing":
            problems.append(Problem(folder.name, "model folder without config.pbtxt (Triton cannot load it)"))
            continue
        if folder.text is None:
            problems.append(Problem(folder.rel, f"unreadable: {folder.unreadable}"))
            continue
        for ph in find_placeholders(folder.text):
            problems.append(Problem(folder.rel, f"unfilled placeholder ${{{ph.name}}}", ph.line))
        if folder.error is not None:
            exc = folder.error
            detail = exc.message.split(": ", 1)[1] if exc.message.startswith("line ") else exc.message
            problems.append(Problem(folder.rel, detail, exc.line))
        models[folder.name] = RepoModel(folder.name, folder.rel, folder.text, folder.config)
    return models


def map_path(value: str, served_at: Path | None, root: Path) -> Path:
    p = Path(value)
    if served_at is not None:
        try:
            return root / p.relative_to(served_at)
        except ValueError:
            pass
    return p


def trtllm_models(models: dict[str, RepoModel]) -> list[RepoModel]:
    """Models that serve an engine: backend ``tensorrtllm``, or the model called ``tensorrt_llm`` (repo-builder's
    Python engines use backend python)."""
    return [
        m
        for m in models.values()
        if m.config is not None and (m.config.backend == "tensorrtllm" or m.name == "tensorrt_llm")
    ]


def lock_or_none(root: Path) -> LockFile | None:
    from ..errors import RepoBuilderError

    try:
        return read_lock(root)
    except RepoBuilderError:
        return None
