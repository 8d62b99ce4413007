"""The files of an engine directory: listing them, the rank-file check and the fingerprint for the lock file."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from ..errors import EngineError
from .info import ENGINE_PATTERNS, WEIGHT_PATTERNS, EngineInfo


def list_files(directory: Path, patterns: tuple[str, ...]) -> tuple[str, ...]:
    """Sorted names of the files in ``directory`` (not below it) matching any of the glob ``patterns``."""
    names = {p.name for pattern in patterns for p in directory.glob(pattern) if p.is_file()}
    return tuple(sorted(names))


def rank_index(name: str) -> int:
    """N of ``rank<N>.engine`` (sort key; other names sort last)."""
    match = re.fullmatch(r"rank(\d+)\.engine", name)
    return int(match.group(1)) if match else 1 << 30


def check_rank_files(info: EngineInfo) -> None:
    """Check that a TRT-LLM engine dir holds exactly ``rank0.engine`` .. ``rank{world_size-1}.engine``.

    Other kinds pass (an HF checkpoint's weights were checked by :func:`inspect_engine`).
    Raises:
        EngineError: the rank files do not match the world size (tp x pp) of config.json.
    """
    if info.kind != "trtllm":
        return
    n = info.world_size
    if len(info.rank_files) == n and list(info.rank_files) == [f"rank{r}.engine" for r in range(n)]:
        return
    expected = ", ".join(f"rank{r}.engine" for r in range(n)) if n <= 8 else f"rank0.engine .. rank{n - 1}.engine"
    found = ", ".join(info.rank_files[:16]) if info.rank_files else "none"
    if len(info.rank_files) > 16:
        found += f" and {len(info.rank_files) - 16} more"
    raise EngineError(
        f"the engine was built for world size {n} (tp {info.tp_size} x pp {info.pp_size}) and needs "
        f"{expected}; found {len(info.rank_files)} rank*.engine file(s): {found}",
        path=info.dir,
        hint="copy every rank file of the trtllm-build output, or rebuild with the right --tp_size/--pp_size",
    )


def engine_fingerprint(info: EngineInfo) -> str:
    """``"sha256:<hex>"`` over the config file's bytes and the names and sizes (bytes) of the engine and
    weight files. File contents are not read, so a 4 GiB engine is fingerprinted instantly."""
    return folder_fingerprint(info.config_file, info.dir)


def folder_fingerprint(config: Path, folder: Path) -> str:
    """:func:`engine_fingerprint` of a folder given its config file (``config.json`` of a Hugging Face
    checkpoint, for the checkpoint layouts whisper and multimodal, which read no :class:`EngineInfo`)."""
    digest = hashlib.sha256()
    digest.update(config.name.encode() + b"\0" + config.read_bytes() + b"\0")
    patterns = ENGINE_PATTERNS + WEIGHT_PATTERNS
    files = sorted({p for pattern in patterns for p in folder.glob(pattern) if p.is_file()})
    for path in files:
        digest.update(f"{path.name}\0{path.stat().st_size}\0".encode())
    return "sha256:" + digest.hexdigest()
