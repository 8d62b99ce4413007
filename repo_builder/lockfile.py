"""The lock file ``repo-builder.lock.json`` at a rendered repository's root.

Format (``docs/design.md``)::

    {"tool": "repo-builder", "version": "0.1.0", "profile": "trtllm-1.2",
     "engine": {"dir": "/abs/engine", "kind": "trtllm", "placement": "copy", "fingerprint": "sha256:..."},
     "tokenizer": {"dir": "/abs/tokenizer"},
     "values": {"kv_cache_free_gpu_mem_fraction": {"value": 0.9, "origin": "default"}, ...},
     "launch": {"world_size": 1, "tensorrt_llm_model_names": ["tensorrt_llm"]},
     "serve_path": null,
     "files": {"preprocessing/config.pbtxt": "sha256:...", ...}}

``serve_path`` is the directory the repository is served at when that differs from where it was written
(``--serve-path``); paths inside the repository's parameters start with it. ``files`` holds the sha256 of
every rendered file except engine files and the lock file itself; ``engine_files`` lists the engine files
placed into the repository (relative paths; absent in lock files written before it existed). Together they
are every file repo-builder wrote, which is what ``render --force`` may replace. The file has no timestamp,
so rendering the same inputs twice gives the same bytes.

:func:`read_lock` checks the file against :class:`LockFile` (a pydantic model; unknown keys are kept, so a
newer repo-builder's lock file still reads) and names the key path of the first problems.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path, PurePosixPath
from typing import Any, Literal, Mapping

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from .errors import RenderError

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
    origin: Literal["default", "engine", "tokenizer", "user"]


class LockLaunch(_Open):
    """The ``launch`` block the launcher reads."""

    world_size: int = Field(ge=1)
    tensorrt_llm_model_names: list[str] = Field(min_length=1)


class LockFile(_Open):
    """``repo-builder.lock.json`` as repo-builder writes it (unknown keys allowed, known keys checked)."""

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

    @field_validator("engine_files")
    @classmethod
    def _engine_files(cls, value: list[str] | None) -> list[str] | None:
        for rel in value or []:
            _relative(rel)
        return value


def validation_text(exc: ValidationError, *, limit: int = 3) -> str:
    """The first ``limit`` problems of a pydantic ValidationError as ``key.path: message`` (``;``-joined)."""
    parts = []
    for err in exc.errors()[:limit]:
        where = ".".join(str(x) for x in err.get("loc", ())) or "(top level)"
        msg = str(err.get("msg", "invalid")).removeprefix("Value error, ")
        if err.get("type") == "missing":
            msg = "missing"
        parts.append(f"{where}: {msg}")
    more = len(exc.errors()) - limit
    return "; ".join(parts) + (f" (and {more} more)" if more > 0 else "")


def sha256_bytes(data: bytes) -> str:
    """``"sha256:<hex>"`` of ``data``."""
    return "sha256:" + hashlib.sha256(data).hexdigest()


def sha256_file(path: str | Path) -> str:
    """``"sha256:<hex>"`` of a file's bytes (read in 8 MiB blocks)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(8 * 1024 * 1024), b""):
            h.update(block)
    return "sha256:" + h.hexdigest()


def _jsonable(value: Any) -> Any:
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, list):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    return value


def build_lock(*, version: str, profile: str, engine: Mapping[str, Any], tokenizer_dir: str | Path,
               values: Mapping[str, tuple[Any, str]], world_size: int, tensorrt_llm_model_names: list[str],
               files: Mapping[str, bytes], serve_path: str | Path | None = None,
               engine_files: list[str] | tuple[str, ...] = ()) -> dict[str, Any]:
    """The lock file content as a dict.

    Args:
        engine: ``{"dir", "kind", "placement", "fingerprint"}``.
        values: {parameter: (value, origin)} with origin one of default/engine/tokenizer/user.
        files: {repository-relative POSIX path: bytes} of every rendered file except engine files.
        engine_files: repository-relative paths of the engine files placed (none for ``reference``).
    """
    return {
        "tool": "repo-builder",
        "version": version,
        "profile": profile,
        "engine": _jsonable(dict(engine)),
        "tokenizer": {"dir": str(tokenizer_dir)},
        "values": {name: {"value": _jsonable(v), "origin": origin} for name, (v, origin) in sorted(values.items())},
        "launch": {"world_size": int(world_size), "tensorrt_llm_model_names": list(tensorrt_llm_model_names)},
        "serve_path": str(serve_path) if serve_path is not None else None,
        "files": {rel: sha256_bytes(data) for rel, data in sorted(files.items())},
        "engine_files": sorted(engine_files),
    }


def dumps(lock: Mapping[str, Any]) -> bytes:
    """Serialize a lock dict (2-space indent, trailing newline, stable key order as built)."""
    return (json.dumps(lock, indent=2, ensure_ascii=False) + "\n").encode("utf-8")


def read_lock(repo: str | Path) -> dict[str, Any] | None:
    """The lock file of ``repo`` as a dict, or None when the repository has none.

    Raises:
        RenderError: the file exists but is unreadable, not JSON, or not a lock file repo-builder writes
            (:class:`LockFile`; the message names the key path, e.g. ``files.a/b: ... not a sha256 digest``).
    """
    path = Path(repo) / LOCK_NAME
    if not (path.is_file() or path.is_symlink()):
        return None
    hint = "re-render the repository with `repo-builder render --force`"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        raise RenderError(f"unreadable lock file: {why}", path=path, hint=hint) from exc
    if not isinstance(data, dict):
        raise RenderError("malformed lock file: not a JSON object", path=path, hint=hint)
    try:
        LockFile.model_validate(data)
    except ValidationError as exc:
        raise RenderError(f"malformed lock file: {validation_text(exc)}", path=path, hint=hint) from None
    return data


def engine_file_patterns(lock: Mapping[str, Any]) -> tuple[str, ...]:
    """Where a lock file without ``engine_files`` (older repo-builder) put engine files: glob patterns
    relative to the repository (``docs/design.md``: trtllm -> ``tensorrt_llm/1/config.json`` +
    ``rank*.engine``; hf/synthetic -> everything under ``tensorrt_llm/1/engine/``)."""
    engine = lock.get("engine") or {}
    if engine.get("placement") == "reference":
        return ()
    if engine.get("kind") == "trtllm":
        return ("tensorrt_llm/1/config.json", "tensorrt_llm/1/rank*.engine")
    return ("tensorrt_llm/1/engine/**",)


def unlisted_files(repo: str | Path, lock: Mapping[str, Any]) -> list[str]:
    """Files (and symlinks) under ``repo`` that the lock file does not list: neither a rendered file, the
    lock file itself, nor an engine file. ``__pycache__`` folders (Python writes them when Triton loads a
    model) are not counted. Sorted repository-relative POSIX paths."""
    import fnmatch

    root = Path(repo)
    listed = set(lock.get("files", {})) | {LOCK_NAME}
    engine_files = lock.get("engine_files")
    patterns: tuple[str, ...] = () if engine_files is not None else engine_file_patterns(lock)
    listed |= set(engine_files or ())
    out = []
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        if "__pycache__" in rel.parts or (path.is_dir() and not path.is_symlink()):
            continue
        text = rel.as_posix()
        if text in listed or any(fnmatch.fnmatchcase(text, p) for p in patterns):
            continue
        out.append(text)
    return out


def changed_files(repo: str | Path, lock: Mapping[str, Any]) -> list[tuple[str, str]]:
    """Files of ``repo`` whose sha256 differs from the lock file: [(relative path, "changed"|"missing")]."""
    root = Path(repo)
    out = []
    for rel, digest in lock.get("files", {}).items():
        path = root / rel
        if not path.is_file():
            out.append((rel, "missing"))
        elif sha256_file(path) != digest:
            out.append((rel, "changed"))
    return out
