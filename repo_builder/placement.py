"""Putting engine files into a rendered repository: copy, hardlink, symlink or reference.

Where files go (``docs/design.md``):

* ``trtllm`` engines: ``config.json`` and ``rank<N>.engine`` into ``tensorrt_llm/1/``; the
  ``engine_dir`` parameter (``gpt_model_path``) points at that folder.
* ``hf`` checkpoints and ``synthetic`` engines (served by a Python model): every file of the engine dir
  (recursively, hidden files and ``__pycache__`` left out) into ``tensorrt_llm/1/engine/`` so the
  checkpoint can never clash with ``model.py`` or the vendored runtime beside it.
* ``reference``: no files; ``engine_dir`` points at the original directory (absolute path).

Copies use ``os.copy_file_range`` (kernel-side copy, reflinks where the filesystem has them, like
``cp``), falling back to ``os.sendfile`` and then to a 16 MiB buffered loop; files over 64 MiB get a rich
progress bar when ``progress=True``.
"""

from __future__ import annotations

import errno
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable

from .errors import RenderError

PLACEMENT_MODES = ("copy", "hardlink", "symlink", "reference")
PROGRESS_THRESHOLD = 64 * 1024 * 1024  # bytes: files above this get a progress bar
_CHUNK = 64 * 1024 * 1024  # bytes per kernel copy call (also the progress granularity)
_BUFFER = 16 * 1024 * 1024  # bytes: user-space fallback buffer

#: Folder of the tensorrt_llm model's version directory holding a Python-served checkpoint.
PYTHON_ENGINE_SUBDIR = "engine"


@dataclass(frozen=True)
class PlacedFile:
    """One engine file: absolute ``source`` and ``target`` relative to the repository root."""

    source: Path
    target: str
    size: int  # bytes


@dataclass
class PlacementPlan:
    """What :func:`place` will do.

    Attributes:
        mode: one of :data:`PLACEMENT_MODES`.
        source_dir: the engine directory given by the user (absolute).
        engine_subdir: folder inside the repository that becomes ``engine_dir`` (POSIX relative path), or
            None for ``reference`` (``engine_dir`` is then ``source_dir``).
        files: the files to place (empty for ``reference``).
    """

    mode: str
    source_dir: Path
    engine_subdir: str | None
    files: list[PlacedFile] = field(default_factory=list)

    @property
    def total_bytes(self) -> int:
        """Sum of the placed files' sizes (bytes)."""
        return sum(f.size for f in self.files)

    def engine_dir_in(self, repo_root: Path) -> Path:
        """The path ``engine_dir`` gets when the repository lives (or is served) at ``repo_root``."""
        if self.engine_subdir is None:
            return self.source_dir
        return repo_root / self.engine_subdir


def _engine_files(kind: str, source: Path) -> Iterable[tuple[Path, str]]:
    """(source file, path relative to the engine folder) for every file an engine of ``kind`` needs."""
    if kind == "trtllm":
        names = ["config.json"] + sorted(p.name for p in source.glob("rank*.engine"))
        for name in names:
            yield source / name, name
        return
    for path in sorted(source.rglob("*")):
        rel = path.relative_to(source)
        if any(part.startswith(".") or part == "__pycache__" for part in rel.parts):
            continue
        if path.is_file():
            yield path, rel.as_posix()


def plan_placement(kind: str, engine_dir: str | Path, mode: str = "copy") -> PlacementPlan:
    """Plan where the files of an engine of ``kind`` (``trtllm``, ``hf``, ``synthetic``) go.

    Raises:
        RenderError: unknown mode (names ``engine_mode``), or a needed file is missing.
    """
    if mode not in PLACEMENT_MODES:
        raise RenderError(f"unknown engine placement mode '{mode}'", key="engine_mode",
                          hint=f"choose one of {', '.join(PLACEMENT_MODES)}")
    source = Path(engine_dir).resolve()
    if mode == "reference":
        return PlacementPlan(mode, source, None, [])
    subdir = "tensorrt_llm/1" if kind == "trtllm" else f"tensorrt_llm/1/{PYTHON_ENGINE_SUBDIR}"
    files = []
    for src, rel in _engine_files(kind, source):
        if not src.is_file():
            raise RenderError("engine file missing", path=src, key="engine_dir")
        files.append(PlacedFile(src, f"{subdir}/{rel}", src.stat().st_size))
    return PlacementPlan(mode, source, subdir, files)


def _kernel_copy(fsrc, fdst, size: int, advance: Callable[[int], None]) -> None:
    """Copy ``size`` bytes between open files with copy_file_range, then sendfile, then read/write."""
    in_fd, out_fd = fsrc.fileno(), fdst.fileno()
    done = 0
    method = "copy_file_range" if hasattr(os, "copy_file_range") else "sendfile"
    while done < size:
        want = min(_CHUNK, size - done)
        try:
            if method == "copy_file_range":
                n = os.copy_file_range(in_fd, out_fd, want)
            elif method == "sendfile":
                n = os.sendfile(out_fd, in_fd, done, want)
            else:
                buf = fsrc.read(min(_BUFFER, want))
                n = len(buf)
                fdst.write(buf)
        except OSError as exc:
            if exc.errno in (errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP, errno.EBADF) \
                    and method != "buffered" and done == 0:
                method = "sendfile" if method == "copy_file_range" else "buffered"
                continue
            raise
        if n == 0:
            break
        done += n
        advance(n)
    if done != size:
        raise OSError(errno.EIO, f"short copy: {done} of {size} bytes")


def copy_file(src: Path, dst: Path, *, advance: Callable[[int], None] = lambda n: None) -> None:
    """Copy one file's bytes and permission bits (like ``cp``); ``advance(n)`` is called per chunk."""
    size = src.stat().st_size
    with open(src, "rb") as fsrc, open(dst, "wb") as fdst:
        _kernel_copy(fsrc, fdst, size, advance)
    shutil.copymode(src, dst)


def place(plan: PlacementPlan, repo_root: str | Path, *, dry_run: bool = False, progress: bool = False) -> None:
    """Place the engine files of ``plan`` under ``repo_root`` (does nothing when ``dry_run``).

    Raises:
        RenderError: a hardlink across filesystems (names the file and suggests ``copy``), or any
            other OS error while placing (names the file).
    """
    if dry_run or plan.mode == "reference":
        return
    root = Path(repo_root)
    big = [f for f in plan.files if f.size > PROGRESS_THRESHOLD] if plan.mode == "copy" else []
    bar = None
    task = None
    if progress and big:
        from rich.progress import (BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn,
                                   TransferSpeedColumn)

        bar = Progress(TextColumn("copying engine"), BarColumn(), DownloadColumn(), TransferSpeedColumn(),
                       TimeRemainingColumn(), transient=True)
        task = bar.add_task("copy", total=sum(f.size for f in big))
        bar.start()
    try:
        for item in plan.files:
            dst = root / item.target
            dst.parent.mkdir(parents=True, exist_ok=True)
            try:
                if plan.mode == "copy":
                    if bar is not None and item.size > PROGRESS_THRESHOLD:
                        copy_file(item.source, dst, advance=lambda n: bar.advance(task, n))
                    else:
                        copy_file(item.source, dst)
                elif plan.mode == "hardlink":
                    os.link(item.source, dst)
                elif plan.mode == "symlink":
                    os.symlink(item.source, dst)
            except OSError as exc:
                if plan.mode == "hardlink" and exc.errno == errno.EXDEV:
                    raise RenderError("cannot hardlink the engine file: the engine and the repository are on "
                                      "different filesystems", path=item.source,
                                      hint="use --engine-mode copy, symlink or reference") from exc
                raise RenderError(f"placing engine file ({plan.mode}) failed: {exc.strerror or exc}",
                                  path=item.source) from exc
    finally:
        if bar is not None:
            bar.stop()
