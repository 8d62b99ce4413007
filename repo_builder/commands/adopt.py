"""CLI commands ``adopt``, ``diff`` and ``upgrade`` (argument parsing and display only; the work is in
:mod:`repo_builder.adopt`, :mod:`repo_builder.semdiff` and :mod:`repo_builder.upgrade`)."""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import typer

from ..cli import command
from ..cli_options import REQUIRED, option

_GROUP_TITLES = {
    "renamed_inputs": "renamed or retyped inputs",
    "new_inputs": "new inputs and outputs",
    "new_parameters": "new parameters (with their defaults)",
    "dropped_keys": "dropped keys",
    "changed_defaults": "changed defaults",
    "new_models": "new models",
    "other": "other changes",
}


def _print_findings(findings: list[Any]) -> None:
    by_file: dict[str, list[Any]] = defaultdict(list)
    for f in findings:
        by_file[f.file].append(f)
    for file, items in sorted(by_file.items()):
        holes = [f.key for f in items if f.kind == "placeholder"]
        for f in items:
            if f.kind != "placeholder":
                typer.echo(f"  {file}: {f.key}: [{f.kind}] {f.message}")
        if holes:
            typer.echo(
                f"  {file}: [placeholder] {len(holes)} key(s) left as ${{...}} (NVIDIA's backend reads them as unset; "
                f"adopted as unset): {', '.join(holes)}"
            )


@dataclass(frozen=True, kw_only=True)
class AdoptArgs:
    """``repo-builder adopt`` options."""

    repo: Path = option(
        REQUIRED, help="Repository filled by hand from NVIDIA's inflight_batcher_llm templates.", argument=True
    )
    engine_dir: Path | None = option(None, "--engine-dir", help="The engine it serves (cross-checked).")
    tokenizer_dir: Path | None = option(None, "--tokenizer-dir", help="The tokenizer it uses.")
    values_out: Path = option(REQUIRED, "--values-out", help="Values file to write (for render --values).")


@command(AdoptArgs)
def adopt(args: AdoptArgs) -> None:
    """Recover the values of a hand-filled repository into a values file; report what cannot be placed.

    Never writes into REPO. Render the result with `repo-builder render --profile PROFILE --values FILE`.
    """
    from ..adopt import adopt_repository, write_values_file

    adoption = adopt_repository(args.repo, engine_dir=args.engine_dir, tokenizer_dir=args.tokenizer_dir)
    out = write_values_file(adoption, args.values_out)
    tag = f", NVIDIA template {adoption.tag}" if adoption.tag else ""
    typer.echo(f"adopted {adoption.repo}: profile {adoption.profile}{tag}; {len(adoption.values)} value(s) -> {out}")
    for name, path in sorted(adoption.paths.items()):
        typer.echo(f"  {name}: {path}")
    if adoption.findings:
        typer.echo(f"{len(adoption.findings)} thing(s) not carried over:")
        _print_findings(adoption.findings)
    typer.echo(
        f"next: repo-builder render --profile {adoption.profile} --values {out} "
        f"--engine-dir {adoption.paths.get('engine_dir', 'ENGINE')} "
        f"--tokenizer-dir {adoption.paths.get('tokenizer_dir', 'TOKENIZER')} -o NEW"
    )


def _print_changes(changes: list[Any], *, grouped: bool) -> None:
    if grouped:
        from ..semdiff import group_changes

        for group, items in group_changes(changes).items():
            typer.echo(f"{_GROUP_TITLES[group]}:")
            by_fix: dict[str | None, list[Any]] = defaultdict(list)
            for c in items:
                by_fix[c.fix].append(c)
            for fix, cs in by_fix.items():
                if fix:
                    typer.echo(f"  [{fix}] {cs[0].reason}")
                else:
                    typer.echo("  [unexplained]")
                for c in cs:
                    typer.echo(f"    {c.model}: {c.item}: {_show(c.before)} -> {_show(c.after)}")
        return
    for c in changes:
        typer.echo(str(c))


def _show(value: Any) -> str:
    return "(absent)" if value is None else repr(value)


@dataclass(frozen=True, kw_only=True)
class DiffArgs:
    """``repo-builder diff`` options."""

    before: Path = option(REQUIRED, help="A model repository.", argument=True)
    after: Path = option(REQUIRED, help="Another one (e.g. the render of the first's adopted values).", argument=True)
    explained: bool = option(
        False, "--explained", help="Also list the changes a documented fix explains (docs/migration.md)."
    )


@command(DiffArgs)
def diff(args: DiffArgs) -> None:
    """Semantic diff of two model repositories, models paired by role; exit 1 when a change is unexplained."""
    from ..semdiff import semantic_diff, unexplained

    changes = semantic_diff(args.before, args.after)
    bad = unexplained(changes)
    shown = changes if args.explained else bad
    _print_changes(shown, grouped=False)
    typer.echo(
        f"{len(changes)} change(s): {len(changes) - len(bad)} explained by documented fixes, {len(bad)} unexplained"
    )
    if bad:
        raise typer.Exit(1)


@dataclass(frozen=True, kw_only=True)
class UpgradeArgs:
    """``repo-builder upgrade`` options (the keyword arguments of :func:`repo_builder.upgrade.upgrade_repository`
    under their names)."""

    repo: Path = option(REQUIRED, help="A hand-filled (or adopted) repository; only read.", argument=True)
    profile: str = option("trtllm-1.2", "--profile", help="The profile to upgrade to.")
    output: Path = option(REQUIRED, "--output", "-o", help="The new repository to create.")
    engine_dir: Path | None = option(None, "--engine-dir", help="Engine (default: the path REPO names).")
    tokenizer_dir: Path | None = option(None, "--tokenizer-dir", help="Tokenizer (default: the path REPO names).")
    engine_mode: str = option("reference", "--engine-mode", help="copy | hardlink | symlink | reference.")
    dry_run: bool = option(False, "--dry-run", help="Print the changes only; write nothing.")


@command(UpgradeArgs)
def upgrade(args: UpgradeArgs) -> None:
    """Re-render REPO for a newer profile: print the semantic diff grouped by kind with reasons, then write."""
    from ..upgrade import upgrade_repository

    def show(result: Any) -> None:
        a = result.adoption
        typer.echo(f"upgrade {a.repo}: profile {a.profile} -> {args.profile}")
        if a.findings:
            typer.echo(f"{len(a.findings)} thing(s) of REPO not carried over:")
            _print_findings(a.findings)
        _print_changes([*result.value_changes, *result.changes], grouped=True)

    fields = dataclasses.asdict(args)
    result = upgrade_repository(fields.pop("repo"), **fields, before_write=show)
    if result.written is None:
        typer.echo("dry run: nothing written")
    else:
        typer.echo(f"wrote {result.written}")
