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
every rendered file except engine files and the lock file itself. The file has no timestamp, so
rendering the same inputs twice gives the same bytes.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from .errors import RenderError

LOCK_NAME = "repo-builder.lock.json"


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
               files: Mapping[str, bytes], serve_path: str | Path | None = None) -> dict[str, Any]:
    """The lock file content as a dict.

    Args:
        engine: ``{"dir", "kind", "placement", "fingerprint"}``.
        values: {parameter: (value, origin)} with origin one of default/engine/tokenizer/user.
        files: {repository-relative POSIX path: bytes} of every rendered file except engine files.
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
    }


def dumps(lock: Mapping[str, Any]) -> bytes:
    """Serialize a lock dict (2-space indent, trailing newline, stable key order as built)."""
    return (json.dumps(lock, indent=2, ensure_ascii=False) + "\n").encode("utf-8")


def read_lock(repo: str | Path) -> dict[str, Any] | None:
    """The lock file of ``repo`` as a dict, or None when the repository has none.

    Raises:
        RenderError: the file exists but is not valid JSON or lacks the ``files``/``values`` keys.
    """
    path = Path(repo) / LOCK_NAME
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise RenderError(f"unreadable lock file: {exc}", path=path,
                          hint="re-render the repository with `repo-builder render --force`") from exc
    if not isinstance(data, dict) or not isinstance(data.get("files"), dict) or not isinstance(data.get("values"), dict):
        raise RenderError("malformed lock file (needs 'files' and 'values' objects)", path=path)
    return data


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


@dataclass(frozen=True)
class ServingInfo:
    """What a client-side front end (``repo-builder openai``) needs from a repository's lock file.

    Attributes:
        model_name: the name to serve the model under: the last component of the engine directory the
            repository was rendered from (``engine.dir``), e.g. ``llama-3-8b`` for ``/engines/llama-3-8b``.
        tokenizer_dir: the tokenizer directory as render read it (``tokenizer.dir``); the parameter
            ``tokenizer_dir`` (the path the server sees, ``--serve-path``) when the former is missing.
        profile: the template profile (``trtllm-1.2``, ``trtllm-0.5``).
        values: every resolved parameter value by name (``values.<name>.value``).
        path: the lock file.
    """

    model_name: str
    tokenizer_dir: Path | None
    profile: str
    values: dict[str, Any]
    path: Path

    def value(self, name: str, default: Any = None) -> Any:
        """The resolved value of parameter ``name`` (``default`` when unset or absent)."""
        got = self.values.get(name)
        return default if got is None else got


def read_serving_info(repo: str | Path) -> ServingInfo:
    """Read :class:`ServingInfo` from ``repo``'s lock file.

    Raises:
        RenderError: the repository has no lock file (names the path, hints at ``--served-model-name`` /
            ``--tokenizer-dir``), or it is unreadable or malformed (see :func:`read_lock`).
    """
    lock = read_lock(repo)
    path = Path(repo) / LOCK_NAME
    if lock is None:
        raise RenderError("no lock file: the repository was not rendered by repo-builder", path=path,
                          hint="render it with `repo-builder render`, or point --repo at a rendered repository")
    values = {name: (entry.get("value") if isinstance(entry, dict) else None)
              for name, entry in lock["values"].items()}
    engine = lock.get("engine") if isinstance(lock.get("engine"), dict) else {}
    engine_dir = str(engine.get("dir") or "").rstrip("/\\")
    name = Path(engine_dir).name if engine_dir else ""
    tokenizer = lock.get("tokenizer") if isinstance(lock.get("tokenizer"), dict) else {}
    tok_dir = tokenizer.get("dir") or values.get("tokenizer_dir")
    return ServingInfo(model_name=name or Path(repo).resolve().name, tokenizer_dir=Path(tok_dir) if tok_dir else None,
                       profile=str(lock.get("profile") or ""), values=values, path=path)
