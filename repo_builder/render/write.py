"""Writing a planned repository: atomically, with the engine copy overlapped with the rest of the render.

:func:`write_repository` creates a temp dir beside the output (same filesystem), starts placing the engine
files there in a background thread (:class:`repo_builder.placement.PlacementJob`) and, meanwhile, finishes
the plan in this thread (tokenizer inspection, resolve, templates: render's fixed ~0.25 s, which so hides
behind a ``copy`` of a large engine), writes the rendered files, validates the temp dir once the engine's
small files (its config) are there, waits for the large ones and renames it into place. A failure on either
side, or a signal, stops the copy, removes the temp dir (and the parent folders it created) and leaves an
existing repository untouched; with ``force`` the old repository is moved aside and deleted only after the
new one has been renamed into place. :func:`diff_against` is the dry run's unified diff.
"""

from __future__ import annotations

import difflib
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import Interrupted, RenderError
from ..placement import STOP_SIGNALS, PlacementJob, PlacementPlan
from .plan import RenderPlan


@dataclass
class RenderResult:
    """What :func:`repo_builder.render.render_repository` did: ``written`` is False for a dry run; ``diff`` is
    the unified diff against the repository that was at ``output`` before ('' when there was none or nothing
    changed)."""

    output: Path
    plan: RenderPlan
    written: bool
    diff: str
    existed: bool

    @property
    def warnings(self) -> list[str]:
        """Warnings from resolve (shown in yellow by the CLI)."""
        return self.plan.warnings


def diff_against(plan: RenderPlan, existing: Path) -> str:
    """Unified diff from the repository at ``existing`` to the planned files (engine files left out)."""
    chunks: list[str] = []
    old_files: set[str] = set()
    if existing.is_dir():
        engine_targets = {f.target for f in plan.placement.files}
        for path in sorted(existing.rglob("*")):
            rel = path.relative_to(existing).as_posix()
            if (
                path.is_file()
                and "__pycache__" not in rel
                and rel not in engine_targets
                and not rel.startswith("tensorrt_llm/1/engine/")
                and not path.name.endswith(".engine")
            ):
                old_files.add(rel)
    for rel in sorted(old_files | set(plan.files)):
        new = plan.files.get(rel)
        old = (existing / rel).read_bytes() if rel in old_files else None
        if old == new:
            continue
        try:
            old_lines = old.decode("utf-8").splitlines(keepends=True) if old is not None else []
            new_lines = new.decode("utf-8").splitlines(keepends=True) if new is not None else []
        except UnicodeDecodeError:
            chunks.append(f"Binary files a/{rel} and b/{rel} differ\n")
            continue
        chunks.extend(
            difflib.unified_diff(
                old_lines,
                new_lines,
                fromfile=f"a/{rel}" if old is not None else "/dev/null",
                tofile=f"b/{rel}" if new is not None else "/dev/null",
            )
        )
        if chunks and not chunks[-1].endswith("\n"):
            chunks[-1] += "\n"
    return "".join(chunks)


class _WriteSignals:
    """SIGTERM, SIGINT and SIGHUP during the write phase of :func:`write_repository`.

    While active (main thread only; elsewhere it does nothing), the first of these signals raises
    :class:`~repo_builder.errors.Interrupted` in the main thread at the point it is at, so the ``except`` of
    the write phase stops the engine copy, removes the temporary folder (and the parent folders it created)
    before the CLI exits with 128 + the signal number (143 SIGTERM, 130 SIGINT, 129 SIGHUP). Later signals
    are ignored so that cleanup finishes. Inside :meth:`deferred` a signal is only recorded and raised when
    the block ends: used for the two renames that swap the new repository in, which must not be split.

    :data:`WAKE` (SIGUSR1) gets a handler that does nothing: :meth:`kick` sends it to the copying thread, and
    a signal delivered to a thread makes its running ``copy_file_range`` call return early (measured: a
    1 GiB copy returned after 0.3 s), so a cancelled copy stops at once instead of after the whole file.
    """

    SIGNALS = STOP_SIGNALS
    WAKE = "SIGUSR1"

    def __init__(self) -> None:
        self.received: int | None = None
        self._raised = False
        self._defer = 0
        self._old: dict[int, Any] = {}
        self._wake: int | None = None

    def __enter__(self) -> _WriteSignals:
        import signal
        import threading

        if threading.current_thread() is threading.main_thread():
            for name in self.SIGNALS:
                num = getattr(signal, name, None)
                if num is not None:
                    self._old[num] = signal.signal(num, self._handle)
            wake = getattr(signal, self.WAKE, None)
            if wake is not None and hasattr(signal, "pthread_kill"):
                self._old[wake] = signal.signal(wake, _ignore)
                self._wake = wake
        return self

    def __exit__(self, *exc: Any) -> None:
        import signal

        for num, handler in self._old.items():
            signal.signal(num, handler)
        self._old.clear()
        self._wake = None

    def kick(self, thread_id: int) -> None:
        """Deliver :data:`WAKE` to the thread ``thread_id`` (a running thread of this process), so that a
        system call it is in returns early; does nothing when the handler is not installed."""
        import signal

        if self._wake is not None:
            signal.pthread_kill(thread_id, self._wake)

    def _interrupted(self) -> Interrupted:
        self._raised = True
        return Interrupted(self.received or 15, "the partial repository was removed; nothing was written")

    def _handle(self, signum: int, frame: Any) -> None:
        if self.received is not None:
            return
        self.received = signum
        if not self._defer:
            raise self._interrupted()

    @contextmanager
    def deferred(self, *, reraise: bool = True) -> Iterator[None]:
        """Record signals during the block; raise the recorded one when it ends (unless ``reraise`` is
        False or one was raised already)."""
        self._defer += 1
        try:
            yield
        finally:
            self._defer -= 1
        if reraise and self.received is not None and not self._raised and not self._defer:
            raise self._interrupted()


def _ignore(signum: int, frame: Any) -> None:
    """The handler of :data:`_WriteSignals.WAKE`: the signal only interrupts a system call."""


def _write_files(plan: RenderPlan, root: Path) -> None:
    """The rendered files and empty folders of ``plan`` under ``root`` (the engine files are placed apart)."""
    for rel in plan.empty_dirs:
        (root / rel).mkdir(parents=True, exist_ok=True)
    for rel, data in plan.files.items():
        target = root / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)


def write_plan(plan: RenderPlan, *, dry_run: bool = False, progress: bool = False) -> RenderResult:
    """Write a finished :class:`RenderPlan` atomically (:func:`write_repository`), or only diff it when
    ``dry_run``. See :func:`repo_builder.render.render_repository`.

    Raises:
        RenderError: writing failed or the written repository failed validation (nothing is left behind).
    """
    if dry_run:
        existed = plan.output.exists()
        diff = diff_against(plan, plan.output) if existed else ""
        return RenderResult(plan.output, plan, written=False, diff=diff, existed=existed)
    return write_repository(plan.output, plan.placement, lambda: plan, progress=progress)


def swap_into_place(tmp: Path, out: Path, existed: bool) -> None:
    """Rename the finished repository ``tmp`` to ``out``. An existing ``out`` (``existed``) is renamed aside
    first, put back when the second rename fails, and deleted only once the new one is in place.

    Raises:
        OSError: a rename failed; ``out`` is then as it was and ``tmp`` is left for the caller to remove.
    """
    old: Path | None = None
    if existed:
        old = Path(tempfile.mkdtemp(prefix=f".{out.name}.repo-builder-old-", dir=out.parent))
        os.rmdir(old)
        os.rename(out, old)
    try:
        os.rename(tmp, out)
    except OSError:
        if old is not None:
            os.rename(old, out)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def write_repository(
    out: Path, placement: PlacementPlan, make_plan: Callable[[], RenderPlan], *, progress: bool = False
) -> RenderResult:
    """Write the repository ``make_plan()`` plans at ``out``, placing ``placement`` (the plan's engine files)
    while ``make_plan`` runs.

    Args:
        out: the repository (absolute); its parent folders are created as needed.
        placement: the engine files; must be the placement of the plan ``make_plan`` returns.
        make_plan: finishes the plan (in this thread, while the engine files are placed in another).
        progress: a rich progress bar while copying engine files over 64 MiB.
    Raises:
        whatever ``make_plan`` raises; RenderError: placing or writing failed, or the written repository failed
        validation; Interrupted: SIGTERM/SIGINT/SIGHUP. In every case nothing is left behind.
    """
    existed = out.exists()
    created_parents: list[Path] = []
    parent = out.parent
    while not parent.exists():
        created_parents.append(parent)
        parent = parent.parent
    tmp: Path | None = None
    job: PlacementJob | None = None
    with _WriteSignals() as signals:
        try:
            for p in reversed(created_parents):
                p.mkdir()
            tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.repo-builder-tmp-", dir=out.parent))
            os.chmod(tmp, 0o755)
            job = PlacementJob(placement, tmp, progress=progress).start()
            plan = make_plan()
            if plan.placement is not placement:
                raise RenderError("the plan's engine placement is not the one being placed (a repo-builder bug)")
            diff = diff_against(plan, out) if existed else ""
            _write_files(plan, tmp)
            job.wait_small()  # validation reads the engine's config file, not its large files
            from ..repository.validate import validate_repository

            # the lock file's hashes are of the bytes just written: not read back (issue 27, start-up)
            problems = validate_repository(tmp, served_at=plan.serve_root, file_hashes=False)
            if problems:
                raise RenderError(
                    "the rendered repository failed validation (a repo-builder bug):\n"
                    + "\n".join(str(p) for p in problems),
                    path=out,
                )
            job.join()
            job = None
            with signals.deferred(reraise=False):  # the swap is two renames: a signal waits until both are done
                swap_into_place(tmp, out, existed)
                tmp = None
            if signals.received is not None:
                raise Interrupted(
                    signals.received,
                    f"the signal came while the finished repository was being "
                    f"moved into place; it is complete at {out}",
                )
        except BaseException as exc:
            with signals.deferred(reraise=False):  # cleanup is not cut short by a second signal
                if job is not None:
                    job.cancel(kick=signals.kick)
                if tmp is not None:
                    shutil.rmtree(tmp, ignore_errors=True)
                for p in created_parents:
                    try:
                        p.rmdir()
                    except OSError:
                        pass
            if isinstance(exc, OSError):
                raise RenderError(f"writing the repository failed: {exc.strerror or exc}", path=out) from exc
            raise
    return RenderResult(out, plan, written=True, diff=diff, existed=existed)
