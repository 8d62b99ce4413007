"""Putting engine files into a rendered repository: copy, hardlink, symlink or reference.

Where files go (``docs/design.md``):

* ``trtllm`` engines: ``config.json`` and ``rank<N>.engine`` into ``tensorrt_llm/1/``; the
  ``engine_dir`` parameter (``gpt_model_path``) points at that folder.
* ``hf`` checkpoints and ``synthetic`` engines (served by a Python model): every file of the engine dir
  (recursively, hidden files and ``__pycache__`` left out) into ``tensorrt_llm/1/engine/`` so the
  checkpoint can never clash with ``model.py`` or the vendored runtime beside it.
* ``reference``: no files; ``engine_dir`` points at the original directory (absolute path).

Copies are made like coreutils ``cp`` 9.x: ``posix_fadvise(POSIX_FADV_SEQUENTIAL)`` on the source, then
``os.copy_file_range`` asked for the whole rest of the file per call (kernel-side copy, reflinks where the
filesystem has them; Linux caps one call at about 2 GiB, so a 4 GiB engine takes two calls), falling back
to ``os.sendfile`` and then to a 16 MiB buffered loop (other filesystem, old kernel). Small pieces are
avoided on purpose: with a cold page cache every short call restarts the kernel's readahead, and 64 MiB
pieces made a 4 GiB copy about 2x slower than ``cp`` (``docs/performance.md`` section 4.1). The progress
bar (files over 64 MiB, ``progress=True``) is therefore not driven by the copy loop but by a thread that
reads the destination's size (``os.stat``) every 0.1 s while the kernel copies.
"""

from __future__ import annotations

import errno
import os
import shutil
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import RenderError

PLACEMENT_MODES = ("copy", "hardlink", "symlink", "reference")
PROGRESS_THRESHOLD = 64 * 1024 * 1024  # bytes: files above this get a progress bar
STOP_SIGNALS = ("SIGTERM", "SIGINT", "SIGHUP")  # what interrupts a render (render/write.py handles them)


def block_stop_signals() -> None:
    """Block :data:`STOP_SIGNALS` in the calling (helper) thread, so the kernel delivers them to the main
    thread: a main thread waiting in ``Thread.join`` is then woken at once (EINTR) and its handler runs before
    the render moves the repository into place. Without it a signal could land in the copying thread and
    the main thread would only see it after the copy, possibly during the final renames."""
    import signal

    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_BLOCK, {getattr(signal, n) for n in STOP_SIGNALS if hasattr(signal, n)})


#: bytes asked for per kernel copy call: in practice the whole rest of the file (the kernel caps a call
#: at ~2 GiB). Tests lower it to check the copy loop.
_CHUNK = 1 << 62
_BUFFER = 16 * 1024 * 1024  # bytes: user-space fallback buffer
_POLL_INTERVAL = 0.1  # seconds between two reads of the destination's size for the progress bar

#: Folder of the tensorrt_llm model's version directory holding a Python-served checkpoint.
PYTHON_ENGINE_SUBDIR = "engine"


class PlacementCancelled(Exception):
    """Placing stopped because :meth:`PlacementJob.cancel` asked it to (the caller removes what was placed)."""


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


def check_placement_mode(mode: str, key: str = "engine_mode") -> None:
    """Check that ``mode`` is an engine placement mode (render's ``--engine-mode``).

    Raises:
        RenderError: ``mode`` is not one of :data:`PLACEMENT_MODES` (names ``key``, e.g. ``--engine-mode``).
    """
    if mode not in PLACEMENT_MODES:
        raise RenderError(
            f"unknown engine placement mode '{mode}'", key=key, hint=f"choose one of {', '.join(PLACEMENT_MODES)}"
        )


def plan_placement(kind: str, engine_dir: str | Path, mode: str = "copy") -> PlacementPlan:
    """Plan where the files of an engine of ``kind`` (``trtllm``, ``hf``, ``synthetic``) go.

    Raises:
        RenderError: unknown mode (names ``engine_mode``), or a needed file is missing.
    """
    check_placement_mode(mode)
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


def _advise_sequential(fd: int) -> None:
    """Tell the kernel ``fd`` is read start to end (bigger readahead); best effort, like ``cp``."""
    if hasattr(os, "posix_fadvise"):
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)
        except OSError:
            pass


def _kernel_copy(fsrc, fdst, size: int, advance: Callable[[int], None], stop: threading.Event | None = None) -> None:
    """Copy ``size`` bytes between open files with copy_file_range, then sendfile, then read/write.

    Each kernel call asks for the whole rest of the file (at most :data:`_CHUNK` bytes); ``advance(n)``
    gets the bytes each call moved. Falls back to the next method only if the first call fails with
    EXDEV/ENOSYS/EINVAL/EOPNOTSUPP/EBADF (other filesystem, no kernel support). ``stop`` is looked at before
    every call; a signal delivered to the copying thread makes the running call return early
    (:meth:`PlacementJob.cancel`).

    Raises:
        OSError: the copy failed, or the source ended before ``size`` bytes (EIO, "short copy").
        PlacementCancelled: ``stop`` was set.
    """
    in_fd, out_fd = fsrc.fileno(), fdst.fileno()
    _advise_sequential(in_fd)
    done = 0
    method = "copy_file_range" if hasattr(os, "copy_file_range") else "sendfile"
    while done < size:
        if stop is not None and stop.is_set():
            raise PlacementCancelled(f"cancelled after {done} of {size} bytes")
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
            if (
                exc.errno in (errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP, errno.EBADF)
                and method != "buffered"
                and done == 0
            ):
                method = "sendfile" if method == "copy_file_range" else "buffered"
                continue
            raise
        if n == 0:
            break
        done += n
        advance(n)
    if done != size:
        raise OSError(errno.EIO, f"short copy: {done} of {size} bytes")


def copy_file(
    src: Path, dst: Path, *, advance: Callable[[int], None] = lambda n: None, stop: threading.Event | None = None
) -> None:
    """Copy one file's bytes and permission bits (like ``cp``); ``advance(n)`` is called per kernel call.

    Raises:
        OSError: from opening, copying or chmod (the caller names the file).
        PlacementCancelled: ``stop`` was set (see :func:`_kernel_copy`).
    """
    size = src.stat().st_size
    with open(src, "rb") as fsrc, open(dst, "wb") as fdst:
        _kernel_copy(fsrc, fdst, size, advance, stop)
    shutil.copymode(src, dst)


@contextmanager
def watch_size(path: Path, report: Callable[[int], None], interval: float | None = None) -> Iterator[None]:
    """While the ``with`` block runs, call ``report(bytes)`` with ``path``'s size (``os.stat``) from a
    daemon thread every ``interval`` seconds (default :data:`_POLL_INTERVAL`, 0.1 s).

    Sizes are reported only when they grew (never twice the same, never smaller); a missing file is
    skipped. The thread is stopped and joined when the block ends, also on an exception. Used for the
    progress bar of one-call kernel copies, which give no progress of their own.
    """
    stop = threading.Event()
    wait = _POLL_INTERVAL if interval is None else interval

    def poll() -> None:
        block_stop_signals()
        last = -1
        while not stop.wait(wait):
            try:
                now = os.stat(path).st_size
            except OSError:
                continue
            if now > last:
                last = now
                report(now)

    thread = threading.Thread(target=poll, name=f"repo-builder-progress:{path.name}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def _start_bar(total: int) -> tuple[Any, Any]:
    """A started, transient rich progress bar over ``total`` bytes and its task id (rich is imported here:
    its import costs a render's start-up)."""
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        Progress,
        TextColumn,
        TimeRemainingColumn,
        TransferSpeedColumn,
    )

    bar = Progress(
        TextColumn("copying engine"),
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
        transient=True,
    )
    task = bar.add_task("copy", total=total)
    bar.start()
    return bar, task


def _place_file(mode: str, source: Path, dst: Path, stop: threading.Event | None) -> None:
    """Place one engine file at ``dst`` by ``mode`` (``copy``, ``hardlink`` or ``symlink``; any other mode
    does nothing), without progress.

    Raises:
        OSError: from the copy, link or symlink call.
        PlacementCancelled: ``stop`` was set during a copy.
    """
    if mode == "copy":
        copy_file(source, dst, stop=stop)
    elif mode == "hardlink":
        os.link(source, dst)
    elif mode == "symlink":
        os.symlink(source, dst)


def _placement_error(mode: str, source: Path, exc: OSError) -> RenderError:
    """The :class:`RenderError` for ``exc`` raised while placing ``source`` by ``mode``: a hardlink across
    filesystems suggests another mode; any other error names the mode and the OS message."""
    if mode == "hardlink" and exc.errno == errno.EXDEV:
        return RenderError(
            "cannot hardlink the engine file: the engine and the repository are on different filesystems",
            path=source,
            hint="use --engine-mode copy, symlink or reference",
        )
    return RenderError(f"placing engine file ({mode}) failed: {exc.strerror or exc}", path=source)


def place(
    plan: PlacementPlan,
    repo_root: str | Path,
    *,
    dry_run: bool = False,
    progress: bool = False,
    on_progress: Callable[[int, int], None] | None = None,
    progress_threshold: int | None = None,
    stop: threading.Event | None = None,
) -> None:
    """Place the engine files of ``plan`` under ``repo_root`` (does nothing when ``dry_run``).

    Args:
        progress: show a rich progress bar (transient) while ``copy`` copies files over the threshold.
        on_progress: also called as ``on_progress(bytes copied, total bytes)`` over those files, about
            every 0.1 s during each copy and once after each file (the last call has copied == total).
        progress_threshold: files over this many bytes get progress (default :data:`PROGRESS_THRESHOLD`,
            64 MiB).
        stop: when set (by another thread), placing stops before the next file or kernel copy call.

    Raises:
        PlacementCancelled: ``stop`` was set.
        RenderError: a hardlink across filesystems (names the file and suggests ``copy``), or any
            other OS error while placing (names the file).
    """
    if dry_run or plan.mode == "reference":
        return
    root = Path(repo_root)
    threshold = PROGRESS_THRESHOLD if progress_threshold is None else progress_threshold
    tracked = progress or on_progress is not None
    big = [f for f in plan.files if f.size > threshold] if plan.mode == "copy" and tracked else []
    total = sum(f.size for f in big)
    bar, task = _start_bar(total) if progress and big else (None, None)
    lock = threading.Lock()
    copied = 0  # bytes of the finished tracked files

    def report(done: int) -> None:
        with lock:
            if bar is not None and task is not None:
                bar.update(task, completed=done)
            if on_progress is not None:
                on_progress(done, total)

    try:
        for item in plan.files:
            if stop is not None and stop.is_set():
                raise PlacementCancelled("cancelled")
            dst = root / item.target
            dst.parent.mkdir(parents=True, exist_ok=True)
            try:
                if plan.mode == "copy" and big and item.size > threshold:

                    def on_size(n: int, base: int = copied, cap: int = item.size) -> None:
                        report(base + min(n, cap))

                    with watch_size(dst, on_size):
                        copy_file(item.source, dst, stop=stop)
                    copied += item.size
                    report(copied)
                else:
                    _place_file(plan.mode, item.source, dst, stop)
            except OSError as exc:
                raise _placement_error(plan.mode, item.source, exc) from exc
    finally:
        if bar is not None:
            bar.stop()


class PlacementJob:
    """:func:`place` in a background thread, so a render copies the engine while it renders the rest.

    ``start()`` starts the thread; ``join()`` waits for it and raises what :func:`place` raised there.
    Files of at most :data:`PROGRESS_THRESHOLD` bytes (an engine's ``config.json``, a checkpoint's small files)
    are placed first: ``wait_small()`` returns once they are, so that the repository can be validated while the
    large files are still being copied.
    ``cancel(kick)`` asks it to stop and waits until it has: :func:`place` stops before the next file or
    kernel call, and ``kick(thread id)``, called every ``interval`` seconds while the thread still runs, may
    deliver a signal to it so that a long ``copy_file_range`` call returns early (the render does that with
    ``SIGUSR1``, see ``repo_builder.render.write``; without a kick the running call finishes first). The
    thread id is only handed to ``kick`` while the thread is inside :func:`place` (never after it ended).
    """

    def __init__(self, plan: PlacementPlan, repo_root: str | Path, *, progress: bool = False) -> None:
        self.plan = plan
        self.root = Path(repo_root)
        self.progress = progress
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._small = threading.Event()
        self._lock = threading.Lock()
        self._placing = False
        self.thread = threading.Thread(target=self._run, name="repo-builder-placement", daemon=True)

    def start(self) -> PlacementJob:
        """Start placing; returns self."""
        with self._lock:
            self._placing = True
        self.thread.start()
        return self

    def _run(self) -> None:
        block_stop_signals()
        plan = self.plan
        small = [f for f in plan.files if f.size <= PROGRESS_THRESHOLD]
        large = [f for f in plan.files if f.size > PROGRESS_THRESHOLD]
        try:
            for files in (small, large):
                place(
                    PlacementPlan(plan.mode, plan.source_dir, plan.engine_subdir, files),
                    self.root,
                    progress=self.progress,
                    stop=self._stop,
                )
                self._small.set()
        except BaseException as exc:  # handed to join(); a KeyboardInterrupt from place() too
            self.error = exc
        finally:
            self._small.set()
            with self._lock:
                self._placing = False

    def wait_small(self) -> None:
        """Wait until the small files are placed (see the class).

        Raises:
            whatever :func:`place` raised so far.
        """
        self._small.wait()
        if self.error is not None:
            raise self.error

    def join(self) -> None:
        """Wait until every file is placed.

        Raises:
            whatever :func:`place` raised (RenderError naming the file, ...).
        """
        self.thread.join()
        if self.error is not None:
            error, self.error = self.error, None
            raise error

    def cancel(self, kick: Callable[[int], None] | None = None, interval: float = 0.05) -> None:
        """Stop placing and wait until the thread has ended (its error, if any, is dropped)."""
        self._stop.set()
        while self.thread.is_alive():
            with self._lock:
                ident = self.thread.ident if self._placing else None
                if kick is not None and ident is not None:
                    kick(ident)
            self.thread.join(interval)
        self.error = None
