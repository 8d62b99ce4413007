"""The schema of the lock file ``repo-builder.lock.json`` (format: :mod:`.lockfile`): :class:`LockFile`, the object
every consumer reads, and its parts (:class:`LockEngine`, :class:`LockValue`, :class:`LaunchBlock`,
:class:`LockLaunch`, :class:`LockLLM`), pydantic models that keep unknown keys, and :func:`lock_llms` (the LLM
entries of a lock file as read). Reading, building and checking lock files is :mod:`.lockfile`, which
re-exports every name here.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, field_validator

from .pbtxt import config_model

LOCK_NAME = "repo-builder.lock.json"

_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")


def _relative(path: str) -> str:
    p = PurePosixPath(path)
    if not path or p.is_absolute() or ".." in p.parts or "\\" in path:
        raise ValueError(f"{path!r} is not a path inside the repository")
    return path


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)


class LockEngine(_Open):
    """The ``engine`` block."""

    dir: str
    kind: Literal["trtllm", "hf", "synthetic"]
    placement: Literal["copy", "hardlink", "symlink", "reference"]
    fingerprint: str


class LockValue(_Open):
    """One entry of ``values``: the typed value (any JSON) and where it came from."""

    value: Any = None
    #: ``checkpoint``: read from the Hugging Face checkpoint of layout whisper / multimodal.
    origin: Literal["default", "engine", "tokenizer", "user", "checkpoint"]


_Name = Annotated[str, Field(min_length=1)]


class LaunchBlock(_Open):
    """The ``launch`` block as a launcher reads it: every key optional (a hand-made lock file may hold only
    some, e.g. ``{"launch": {"world_size": 2}}``), each key that is there checked. See :func:`read_launch_block`."""

    world_size: int | None = Field(None, ge=1)
    tensorrt_llm_model_names: list[_Name] | None = None
    tp_size: int | None = Field(None, ge=1)
    pp_size: int | None = Field(None, ge=1)
    python_instances: dict[str, Annotated[int, Field(ge=0)]] | None = None
    #: Set when the engine models run in orchestrator mode with participant ids (layout disaggregated with a
    #: TensorRT-LLM engine): every participant + 1, NVIDIA's ``--world_size`` (repo_builder/render/disaggregated.py).
    orchestrator_world_size: int | None = Field(None, ge=2)


class LockLaunch(LaunchBlock):
    """The ``launch`` block as repo-builder writes it: world size and the models of ranks > 0 required.

    Lock files written before ``tp_size``/``pp_size``/``python_instances`` existed lack them (None).
    """

    world_size: int = Field(ge=1)
    tensorrt_llm_model_names: list[_Name] = Field(min_length=1)


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


@dataclass(frozen=True)
class LockLLM:
    """One LLM of a lock file (an ``llms[]`` entry, or the whole file of a single-LLM repository).

    Attributes:
        name: ``llms[].name`` (``render --model NAME=...``); None for a single-LLM repository.
        engine: its ``engine`` block (``{}`` when missing or not an object).
        tokenizer: its ``tokenizer`` block (``{}`` likewise).
        values: ``{parameter: {"value", "origin"}}`` (``{}`` likewise).
        models: role -> Triton model name (``ensemble`` -> ``NAME_ensemble`` when several, the role itself
            when one).
    """

    name: str | None
    engine: dict[str, Any]
    tokenizer: dict[str, Any]
    values: dict[str, Any]
    models: dict[str, str]

    @classmethod
    def from_entry(cls, entry: Mapping[str, Any]) -> LockLLM:
        """The entry of :func:`lock_llms`, leniently: wrong-typed sections read as empty."""
        name = entry.get("name")
        return cls(
            name=name if isinstance(name, str) and name else None,
            engine=_mapping(entry.get("engine")),
            tokenizer=_mapping(entry.get("tokenizer")),
            values=_mapping(entry.get("values")),
            models={str(k): str(v) for k, v in _mapping(entry.get("models")).items()},
        )

    @property
    def resolved(self) -> dict[str, Any]:
        """Every resolved parameter value by name (``values.<name>.value``; None where the entry is no object)."""
        return {name: (v.get("value") if isinstance(v, dict) else None) for name, v in self.values.items()}


def lock_models(files: Mapping[str, Any]) -> tuple[str, ...]:
    """The Triton models a lock file's ``files`` hold: the sorted ``<model>`` of each ``<model>/config.pbtxt``."""
    return tuple(sorted({m for m in map(config_model, files) if m is not None}))


class LockFile(_Open):
    """``repo-builder.lock.json`` as repo-builder writes it (unknown keys allowed, known keys checked).

    :func:`read_lock` returns it; :attr:`data` is the JSON object it was read from (``inspect --json`` prints
    it as it is), :attr:`llms` and :attr:`models` the views consumers need.
    """

    tool: Literal["repo-builder"]
    version: str
    profile: str
    engine: LockEngine
    tokenizer: dict[str, Any]
    values: dict[str, LockValue]
    launch: LockLaunch
    serve_path: str | None = None
    files: dict[str, str]
    engine_files: list[str] | None = None

    @field_validator("files")
    @classmethod
    def _files(cls, value: dict[str, str]) -> dict[str, str]:
        for rel, digest in value.items():
            _relative(rel)
            if not _DIGEST.match(digest):
                raise ValueError(f"{rel}: {digest!r} is not a sha256:<64 hex digits> digest")
        return value

    _data: dict[str, Any] = PrivateAttr(default_factory=dict)

    @field_validator("engine_files")
    @classmethod
    def _engine_files(cls, value: list[str] | None) -> list[str] | None:
        for rel in value or []:
            _relative(rel)
        return value

    @classmethod
    def from_data(cls, data: dict[str, Any]) -> LockFile:
        """``data`` checked (raises pydantic's ValidationError) and kept as :attr:`data`."""
        lock = cls.model_validate(data)
        lock._data = data
        return lock

    @property
    def data(self) -> dict[str, Any]:
        """The lock file's JSON object as read (unknown keys and key order included)."""
        return self._data

    @property
    def llms(self) -> list[LockLLM]:
        """Every LLM the lock file describes, in its order (:func:`lock_llms`); one entry for a single LLM."""
        return [LockLLM.from_entry(e) for e in lock_llms(self._data)]

    @property
    def models(self) -> tuple[str, ...]:
        """The Triton models of the repository (:func:`lock_models`)."""
        return lock_models(self.files)


def lock_llms(lock: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Every LLM a lock file describes: its ``llms`` list, or for a single-LLM lock one entry
    ``{"name": None, "engine", "tokenizer", "values", "models": {role: role}}``."""
    if isinstance(lock.get("llms"), list):
        return [dict(e) for e in lock["llms"] if isinstance(e, dict)]
    models = lock_models(lock.get("files", {}))
    return [
        {
            "name": None,
            "engine": lock.get("engine"),
            "tokenizer": lock.get("tokenizer"),
            "values": lock.get("values", {}),
            "models": {m: m for m in models},
        }
    ]


def multimodal_served_id(facts: Mapping[str, Any]) -> str:
    """The model id a multimodal repository is served under by default: its lock file's ``facts.model_type``
    with ``-`` for ``_`` (``llava``, ``qwen2-vl``); ``llava`` for a repository rendered before the facts held it."""
    return str(facts.get("model_type") or "llava").replace("_", "-")
