"""Where a repository may be written: outputs that would clobber an input or a repository repo-builder did not
render are refused before anything is written."""

from __future__ import annotations

from pathlib import Path

from ..errors import RenderError
from ..repository.lockfile import LEGACY_LAYOUT_FILES, LOCK_NAME


def check_output(
    output: Path,
    engine_dir: Path,
    tokenizer_dir: Path,
    *,
    force: bool,
    dry_run: bool,
    placement: str,
    delete_unlisted: bool = False,
) -> bool:
    """Refuse outputs that would clobber something; returns whether ``output`` exists."""
    exists = output.exists() or output.is_symlink()
    if exists and not output.is_dir():
        raise RenderError("output exists and is not a directory", path=output, key="--output")
    for src, what in ((engine_dir, "engine"), (tokenizer_dir, "tokenizer")):
        if src == output or output in src.parents:
            raise RenderError(
                f"the {what} directory lies inside the output repository; rendering there would replace it",
                path=output,
                key="--output",
                hint="choose another --output",
            )
    if placement != "reference" and engine_dir in output.parents:
        raise RenderError(
            "the output repository lies inside the engine directory",
            path=output,
            key="--output",
            hint="choose an --output outside the engine directory",
        )
    if exists and not dry_run:
        if not force:
            raise RenderError(
                "output already exists",
                path=output,
                key="--output",
                hint="pass --force to replace it, or --dry-run to see the difference",
            )
        if any(output.iterdir()):
            check_replaceable(output, delete_unlisted=delete_unlisted)
    return exists


def check_replaceable(output: Path, *, delete_unlisted: bool) -> None:
    """``render --force`` replaces ``output`` only when its lock file proves repo-builder rendered it (it
    parses and passes :class:`repo_builder.lockfile.LockFile`), and deletes files the lock file does not list
    only with ``delete_unlisted`` (``--delete-unlisted``); otherwise it refuses and lists them.

    Raises:
        RenderError: no lock file, a malformed one (naming the key), or unlisted files (listing them).
    """
    from ..repository.lockfile import read_lock, unlisted_files

    if not ((output / LOCK_NAME).is_file() or (output / LOCK_NAME).is_symlink()):
        legacy = [name for name in LEGACY_LAYOUT_FILES if (output / name).is_file()]
        if legacy:
            raise RenderError(
                f"refusing to replace the repository: it was rendered by an older repo-builder, whose layout "
                f"{LEGACY_LAYOUT_FILES[legacy[0]]} wrote {legacy[0]} instead of {LOCK_NAME} (no file hashes "
                f"to prove nothing in it was added or edited)",
                path=output,
                key="--output",
                hint="remove the directory yourself and render again, or choose another --output",
            )
        raise RenderError(
            f"refusing to replace a directory that repo-builder did not render (no {LOCK_NAME})",
            path=output,
            key="--output",
            hint="remove it yourself or choose another --output",
        )
    try:
        lock = read_lock(output)
    except RenderError as exc:
        raise RenderError(
            f"refusing to replace the directory: its lock file does not prove repo-builder "
            f"rendered it ({LOCK_NAME}: {exc.message})",
            path=output,
            key="--output",
            hint="remove the directory yourself or choose another --output",
        ) from None
    assert lock is not None
    extra = unlisted_files(output, lock)
    if extra and not delete_unlisted:
        shown = ", ".join(extra[:10]) + (f" and {len(extra) - 10} more" if len(extra) > 10 else "")
        raise RenderError(
            f"refusing to replace the repository: {len(extra)} file(s) in it were not rendered by "
            f"repo-builder (the lock file does not list them) and would be deleted: {shown}",
            path=output,
            key="--output",
            hint="move them out first, or pass --delete-unlisted to delete them with the old repository",
        )
