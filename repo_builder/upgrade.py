"""``repo-builder upgrade``: re-render an adopted repository for a newer profile and say, before writing, what
changes and why.

Steps: :func:`repo_builder.adopt.adopt_repository` reads ``REPO``; :func:`carry_values` moves its values to the
new profile (a parameter the new profile lacks is dropped, a value that was the old profile's default follows
the new profile's default); the new repository is planned in memory (:func:`repo_builder.render.plan_render`),
its configs are compared with ``REPO``'s by :func:`repo_builder.semdiff.semantic_diff`, and only then, unless
``dry_run``, written atomically by :func:`repo_builder.render.render_repository` (a failed render leaves
nothing). ``REPO`` is only read.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .adopt import AdoptError, Adoption, adopt_repository, write_values_file
from .repository.pbtxt import config_model
from .semdiff import Change, explain, group_changes, semantic_diff


@dataclass
class Upgrade:
    """What :func:`upgrade_repository` found (and wrote, unless ``dry_run``).

    Attributes:
        adoption: the adopted ``REPO``.
        profile: the target profile.
        values: the values rendered for it.
        value_changes: per-parameter changes (dropped, default changed), as :class:`Change` of model ``values``.
        changes: the semantic diff ``REPO`` -> new repository.
        written: the new repository, or None for a dry run.
    """

    adoption: Adoption
    profile: str
    values: dict[str, Any]
    value_changes: list[Change] = field(default_factory=list)
    changes: list[Change] = field(default_factory=list)
    written: Path | None = None

    def groups(self) -> dict[str, list[Change]]:
        """Every change grouped as :func:`repo_builder.semdiff.group_changes` groups them."""
        return group_changes([*self.value_changes, *self.changes])


def carry_values(adoption: Adoption, profile: str) -> tuple[dict[str, Any], list[Change]]:
    """The adopted values moved to ``profile``, and what moving them changed.

    A parameter ``profile`` does not have is dropped (group dropped_keys); a value equal to the old profile's
    default, where ``profile``'s default differs, is left to the new default (changed_defaults) — the hand-filled
    file only restated the old template's value; any other value is the user's and is kept.
    """
    from .profile.schema import load_schema

    schema = load_schema()
    old_profile = adoption.profile
    target = schema.for_profile(profile)
    values: dict[str, Any] = {}
    changes: list[Change] = []
    for name, value in sorted(adoption.values.items()):
        param = schema.parameters[name]
        if name not in target:
            changes.append(
                Change(
                    "values",
                    f"parameter {name}",
                    value,
                    None,
                    "not-in-profile",
                    f"profile {profile} has no {name} (exists in {', '.join(param.profiles)}): {param.description}",
                )
            )
            continue
        old_default, new_default = param.default_for(old_profile), param.default_for(profile)
        if old_profile != profile and value == old_default and new_default != old_default:
            changes.append(
                Change(
                    "values",
                    f"default {name}",
                    old_default,
                    _default_shown(param, new_default),
                    "profile-default",
                    f"{old_profile}'s default, which the filled file restated; {profile} defaults to "
                    f"{new_default!r}: {param.description}",
                )
            )
            continue
        values[name] = value
    return values, changes


def upgrade_repository(
    repo: str | Path,
    *,
    profile: str,
    output: str | Path,
    engine_dir: str | Path | None = None,
    tokenizer_dir: str | Path | None = None,
    dry_run: bool = False,
    engine_mode: str = "reference",
    before_write: Callable[[Upgrade], None] | None = None,
) -> Upgrade:
    """Adopt ``repo``, carry its values to ``profile``, diff, and (unless ``dry_run``) render ``output``.

    ``engine_dir``/``tokenizer_dir`` default to the paths the repository names (gpt_model_path, tokenizer_dir).
    ``before_write`` is called with the finished diff before anything is written (the CLI prints it there).

    Raises:
        AdoptError: ``repo`` cannot be adopted, the engine or tokenizer path is unknown, or ``output`` is ``repo``.
        RepoBuilderError: the render's own errors (values the profile refuses, an existing output, ...).
    """
    from .render import RenderOptions, plan_render, render_repository

    adoption = adopt_repository(repo, engine_dir=engine_dir, tokenizer_dir=tokenizer_dir)
    out = Path(output).expanduser().absolute()
    if out.resolve() == adoption.repo.resolve() or adoption.repo.resolve() in out.resolve().parents:
        raise AdoptError("the new repository would be written into the adopted one", key="--output", path=out)
    engine = _path(adoption, "engine_dir", "--engine-dir")
    tokenizer = _path(adoption, "tokenizer_dir", "--tokenizer-dir")
    values, value_changes = carry_values(adoption, profile)
    result = Upgrade(adoption, profile, values, value_changes)
    work = Path(tempfile.mkdtemp(prefix="repo-builder-upgrade-"))
    try:
        # the values file lives only as long as the upgrade: the lock file records adopted_from, not its path
        source = {**adoption.values_document()["adopted_from"], "upgraded_to": profile, "transient_file": True}
        adopted = {"adopted_from": source, **values}
        values_file = work / "values.yaml"
        _write_yaml(values_file, adopted)
        options = RenderOptions(profile=profile, values_file=values_file, engine_mode=engine_mode)
        plan = plan_render(engine, tokenizer, out, options)
        configs = work / "configs"
        for rel, data in plan.files.items():
            if config_model(rel) is not None:
                (configs / rel).parent.mkdir(parents=True, exist_ok=True)
                (configs / rel).write_bytes(data)
        result.changes = [explain(c) for c in semantic_diff(adoption.repo, configs)]
        if before_write is not None:
            before_write(result)
        if not dry_run:
            render_repository(engine, tokenizer, out, options)
            result.written = out
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return result


def _default_shown(param: Any, default: Any) -> Any:
    if default is None and param.engine_source:
        return f"the engine's {param.engine_source}"
    return default


def _path(adoption: Adoption, name: str, flag: str) -> Path:
    text = adoption.paths.get(name)
    if not text or not Path(text).exists():
        raise AdoptError(
            f"the {name.replace('_', ' ')} {text!r} the repository names does not exist here" if text else f"no {name}",
            key=flag,
            path=adoption.repo,
            hint=f"pass {flag}",
        )
    return Path(text)


def _write_yaml(path: Path, data: dict[str, Any]) -> None:
    import yaml

    path.write_text(yaml.safe_dump(data, sort_keys=False, allow_unicode=True), encoding="utf-8")


__all__ = ["Upgrade", "carry_values", "upgrade_repository", "write_values_file"]
