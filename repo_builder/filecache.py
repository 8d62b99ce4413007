"""A small on-disk cache of derived bytes, for work that every ``repo-builder`` command repeats.

Render parses the same inputs in every process: ``parameters.yaml`` and the profile's ``contract.yaml``
(~40 ms each through PyYAML's constructor, even with libyaml) and the rendered ``config.pbtxt`` files
(protobuf's pure-Python ``text_format``, ~15 ms per config). Their results depend only on the input text and
the library versions, so they are kept in ``$XDG_CACHE_HOME/repo-builder/<kind>/`` (default ``~/.cache``),
one file per entry named by the SHA-256 of the key material (the input text plus everything the result
depends on), beside Jinja2's compiled templates (:func:`repo_builder.render.templates.make_environment`).

Rules: an entry is written to a temporary file and renamed, so a concurrent reader never sees half an entry;
every error (a read-only or missing home, a full disk, a damaged entry) falls back to computing the result,
never to a failure; a folder keeps at most :data:`MAX_ENTRIES` entries (the oldest half is dropped when a
write finds more). ``REPO_BUILDER_NO_CACHE=1`` turns the cache off (every result computed). Cost measured in
docs/performance.md, section 4.1b.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from pathlib import Path

#: Entries one kind's folder keeps; a write that finds more removes the oldest half (by modification time).
MAX_ENTRIES = 2048


def cache_dir(kind: str) -> Path | None:
    """``$XDG_CACHE_HOME/repo-builder/<kind>`` (default ``~/.cache/...``), created; None when caching is off
    (``REPO_BUILDER_NO_CACHE`` set to a non-empty value other than ``0``) or the folder cannot be created or
    written."""
    if os.environ.get("REPO_BUILDER_NO_CACHE", "0") not in ("", "0"):
        return None
    try:
        root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "repo-builder" / kind
        root.mkdir(parents=True, exist_ok=True)
    except (OSError, RuntimeError):  # RuntimeError: Path.home() without a home
        return None
    if not os.access(root, os.W_OK | os.X_OK):
        return None
    return root


def key_of(*parts: bytes | str) -> str:
    """The hex SHA-256 of ``parts``, each length-prefixed (so ``("ab", "c")`` and ``("a", "bc")`` differ)."""
    digest = hashlib.sha256()
    for part in parts:
        data = part.encode("utf-8", "surrogatepass") if isinstance(part, str) else part
        digest.update(len(data).to_bytes(8, "little"))
        digest.update(data)
    return digest.hexdigest()


def cached_bytes(kind: str, key: str, compute: Callable[[], bytes | None]) -> bytes | None:
    """The bytes stored under ``key`` (:func:`key_of`) in ``kind``'s folder, else ``compute()``'s result,
    stored when it is not None. Exceptions of ``compute`` propagate (nothing is stored)."""
    root = cache_dir(kind)
    if root is None:
        return compute()
    path = root / key
    try:
        return path.read_bytes()
    except OSError:
        pass
    data = compute()
    if data is not None:
        _store(root, path, data)
    return data


def _store(root: Path, path: Path, data: bytes) -> None:
    tmp = root / f".{path.name}.{os.getpid()}.tmp"
    try:
        tmp.write_bytes(data)
        os.replace(tmp, path)
    except OSError:
        try:
            tmp.unlink()
        except OSError:
            pass
        return
    try:
        with os.scandir(root) as it:
            entries = [e for e in it if not e.name.startswith(".")]
        if len(entries) > MAX_ENTRIES:
            entries.sort(key=lambda e: e.stat().st_mtime)
            for entry in entries[: len(entries) // 2]:
                os.unlink(entry.path)
    except OSError:
        pass
