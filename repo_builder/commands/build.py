"""CLI commands ``render``, ``validate``, ``params`` and ``inspect`` (argument parsing and display only)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import typer

from ..cli import app, command, report_errors
from ..cli_options import REQUIRED, Opt, from_cli, option, typer_option
from ..errors import ParameterError


def _parse_sets(items: list[str] | None) -> dict[str, str]:
    """``["k=v", ...]`` -> ``{k: v}`` (split at the first ``=``; later keys win)."""
    out: dict[str, str] = {}
    for item in items or []:
        if "=" not in item:
            raise ParameterError(
                f"--set expects KEY=VALUE, got '{item}'", key=item, hint="e.g. --set kv_cache_free_gpu_mem_fraction=0.8"
            )
        key, value = item.split("=", 1)
        if not key.strip():
            raise ParameterError(f"--set expects KEY=VALUE, got '{item}' (empty key)", key=item)
        out[key.strip()] = value
    return out


def _console(stderr: bool = False):
    from rich.console import Console

    return Console(stderr=stderr, highlight=False, soft_wrap=True)


def _fmt(value: Any) -> str:
    if value is None:
        return "(unset)"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _print_plan(result: Any, console: Any) -> None:
    from rich.table import Table

    plan = result.plan
    console.print(
        f"[bold]dry run[/bold]: nothing written. Repository {plan.output} "
        f"({'exists' if result.existed else 'new'}), profile {plan.profile}"
    )
    files = Table(title="files", show_lines=False)
    files.add_column("path")
    files.add_column("bytes", justify="right")
    for rel, data in sorted(plan.files.items()):
        if "/repo_builder_runtime/" in rel:
            continue
        files.add_row(rel, str(len(data)))
    runtime = [r for r in plan.files if "/repo_builder_runtime/" in r]
    if runtime:
        files.add_row(f"<model>/1/repo_builder_runtime/ ({len(runtime)} vendored files)", "")
    console.print(files)
    pl = plan.placement
    target = pl.engine_dir_in(plan.serve_root)
    console.print(
        f"engine: {plan.engine.kind} at {pl.source_dir}; placement {pl.mode}: {len(pl.files)} file(s), "
        f"{pl.total_bytes / 2**20:.1f} MiB; engine_dir = {target}"
    )
    values = Table(title="values")
    values.add_column("parameter")
    values.add_column("value")
    values.add_column("origin")
    for name, rv in sorted(plan.resolution.values.items()):
        values.add_row(name, _fmt(rv.value), rv.origin)
    console.print(values)
    if result.existed:
        if result.diff:
            from rich.syntax import Syntax

            console.print(Syntax(result.diff, "diff", theme="ansi_dark", word_wrap=True))
        else:
            console.print("no differences from the existing repository")


#: The ``render`` options that say which engine(s) and tokenizer(s) go where (the rest are
#: :class:`repo_builder.render_options.RenderOptions` fields).
_RENDER_INPUTS = {
    "engine_dir": Opt(None, ("--engine-dir",), help="TRT-LLM engine dir, HF checkpoint or synthetic engine dir."),
    "tokenizer_dir": Opt(
        None,
        ("--tokenizer-dir",),
        help="Local Hugging Face tokenizer directory (llmapi profiles: default the checkpoint).",
    ),
    "checkpoint_dir": Opt(
        None,
        ("--checkpoint-dir",),
        help="Hugging Face checkpoint served through the LLM API (--profile llmapi-1.2; instead of --engine-dir).",
    ),
    "model": Opt(
        None,
        ("--model",),
        help="NAME=ENGINE_DIR,TOKENIZER_DIR: one of several LLMs in the repository (repeat; instead of "
        "--engine-dir/--tokenizer-dir). Its models are NAME_preprocessing, NAME_tensorrt_llm, NAME_ensemble, "
        "... With --profile llmapi-1.2: NAME=CHECKPOINT_DIR[,TOKENIZER_DIR], models NAME_tensorrt_llm, "
        "NAME_ensemble, NAME_tensorrt_llm_bls.",
    ),
    "output": Opt(REQUIRED, ("--output", "-o"), help="Repository directory to create."),
}


def _render(name: str) -> Any:
    """The ``typer.Option`` of ``render`` option ``name``: a :data:`_RENDER_INPUTS` entry or a
    :class:`repo_builder.render_options.RenderOptions` field."""
    from ..render_options import RenderOptions

    if name in _RENDER_INPUTS:
        return _RENDER_INPUTS[name].typer()
    return typer_option(RenderOptions, name)


@app.command()
@report_errors
def render(
    engine_dir: Path | None = _render("engine_dir"),
    tokenizer_dir: Path | None = _render("tokenizer_dir"),
    checkpoint_dir: Path | None = _render("checkpoint_dir"),
    model: list[str] | None = _render("model"),
    output: Path = _render("output"),
    profile: str = _render("profile"),
    user_values: list[str] | None = _render("user_values"),
    values_file: Path | None = _render("values_file"),
    engine_mode: str = _render("engine_mode"),
    streaming: bool | None = _render("streaming"),
    serve_path: Path | None = _render("serve_path"),
    force: bool = _render("force"),
    delete_unlisted: bool = _render("delete_unlisted"),
    dry_run: bool = _render("dry_run"),
    draft_engine_dir: Path | None = _render("draft_engine_dir"),
    layout: str = _render("layout"),
    generation_engine_dir: Path | None = _render("generation_engine_dir"),
) -> None:
    """Render a Triton model repository for an engine and a tokenizer.

    engine_dir (and the Python models' paths) are absolute paths inside the repository as rendered: serve the
    repository at --output, or pass --serve-path with the path the server sees (e.g. a container mount).
    tokenizer_dir is the --tokenizer-dir path; it must exist at the same path for the server.
    """
    cli = dict(locals())
    from ..errors import RenderError
    from ..profile.contract import profile_layout
    from ..render import RenderOptions
    from .render_llms import _checkpoint_as_engine, _render_llms

    llmapi = profile_layout(profile) == "llmapi"
    engine_dir = _checkpoint_as_engine(checkpoint_dir, engine_dir, profile, llmapi)
    if llmapi and layout != "inflight_batcher_llm":
        raise RenderError(
            f"--layout {layout} is not for profile {profile} (one tensorrt_llm model over the LLM API)",
            key="--layout",
            hint="drop --layout",
        )

    # every RenderOptions flag is a parameter of this function under its field's name
    cli["user_values"] = _parse_sets(user_values)
    options = from_cli(RenderOptions, cli, error=RenderError, progress=not dry_run)
    if layout == "whisper":
        _render_whisper(engine_dir, tokenizer_dir, output, options, bool(model))
        return
    if layout == "multimodal":
        _render_multimodal(engine_dir, tokenizer_dir, output, options, bool(model))
        return
    result = _render_llms(engine_dir, tokenizer_dir, model, output, options, llmapi)
    _report_render(result, dry_run)


def _report_render(result: Any, dry_run: bool) -> None:
    """Print a render's warnings (yellow, on stderr), then its plan (--dry-run) or a one-line summary on
    stdout."""
    if result.warnings:
        err = _console(stderr=True)
        for warning in result.warnings:
            err.print(f"[yellow]warning:[/yellow] {warning}")
    if dry_run:
        _print_plan(result, _console())
        return
    plan = result.plan
    verb = "replaced" if result.existed else "rendered"
    typer.echo(  # plain text: rich's import costs ~50 ms of a render's start-up
        f"{verb} {plan.output}: profile {plan.profile}, {len(plan.files)} files, engine {plan.engine.kind} "
        f"({plan.placement.mode}, {len(plan.placement.files)} file(s)), world size "
        f"{plan.lock['launch']['world_size']}"
    )


def _render_whisper(
    engine_dir: Path | None, tokenizer_dir: Path | None, output: Path, options: Any, several: bool
) -> None:
    """``render --layout whisper``: the checkpoint is --engine-dir (its tokenizer is read from it).

    Raises:
        RenderError: --model, a --tokenizer-dir other than the checkpoint, no --engine-dir, or --dry-run /
            --draft-engine-dir (not supported by this layout); whatever the renderer raises.
    """
    from ..errors import RenderError
    from ..render.whisper import render_whisper_repository

    if several or engine_dir is None:
        raise RenderError(
            "layout whisper renders one Whisper checkpoint", key="--engine-dir", hint="--engine-dir CHECKPOINT"
        )
    if tokenizer_dir is not None and Path(tokenizer_dir).resolve() != Path(engine_dir).resolve():
        raise RenderError(
            "layout whisper reads the tokenizer from the checkpoint", key="--tokenizer-dir", hint="drop --tokenizer-dir"
        )
    if options.dry_run:
        raise RenderError("--dry-run is not supported by layout whisper yet", key="--dry-run")
    if options.draft_engine_dir is not None:
        raise RenderError("layout whisper has no draft model", key="--draft-engine-dir")
    result = render_whisper_repository(engine_dir, output, options)
    f = result.facts
    verb = "replaced" if result.existed else "rendered"
    typer.echo(
        f"{verb} {result.output}: layout whisper, {len(result.files)} files, {f.num_mel_bins} mels, "
        f"{f.num_languages} languages, max_tokens {result.values['whisper_max_tokens'][0]}"
    )


def _render_multimodal(
    engine_dir: Path | None, tokenizer_dir: Path | None, output: Path, options: Any, several: bool
) -> None:
    """``render --layout multimodal``: the LLaVA checkpoint is --engine-dir (tokenizer and image processor too).

    Raises:
        RenderError: as :func:`_render_whisper`, for layout multimodal.
    """
    from ..errors import RenderError
    from ..render.multimodal import render_multimodal_repository

    if several or engine_dir is None:
        raise RenderError(
            "layout multimodal renders one LLaVA checkpoint", key="--engine-dir", hint="--engine-dir CHECKPOINT"
        )
    if tokenizer_dir is not None and Path(tokenizer_dir).resolve() != Path(engine_dir).resolve():
        raise RenderError(
            "layout multimodal reads the tokenizer from the checkpoint",
            key="--tokenizer-dir",
            hint="drop --tokenizer-dir",
        )
    if options.dry_run:
        raise RenderError("--dry-run is not supported by layout multimodal yet", key="--dry-run")
    if options.draft_engine_dir is not None:
        raise RenderError("layout multimodal has no draft model", key="--draft-engine-dir")
    result = render_multimodal_repository(engine_dir, output, options)
    f, v = result.facts, result.values
    verb = "replaced" if result.existed else "rendered"
    typer.echo(
        f"{verb} {result.output}: layout multimodal ({f.model_type}), {len(result.files)} files, "
        f"{f.features_per_image} features per image, prompt table {v['multimodal_max_prompt_table_size'][0]} rows"
    )


@dataclass(frozen=True, kw_only=True)
class ValidateArgs:
    """``repo-builder validate`` options."""

    repo: Path = option(REQUIRED, help="Model repository to check.", argument=True)
    engine_dir: Path | None = option(None, "--engine-dir", help="Engine dir to cross-check against.")
    engine_inputs: bool = option(
        False,
        "--engine-inputs",
        help="Also list the engine model's inputs a text client (ensemble, BLS) cannot reach, and why.",
    )


@command(ValidateArgs)
def validate(args: ValidateArgs) -> None:
    """Check a model repository; one line per problem (`model/file:line: message`), exit 1 when any."""
    from ..repository.validate import text_unreachable_inputs, validate_repository

    repo = args.repo
    problems = validate_repository(repo, engine_dir=args.engine_dir, warnings=True)
    for p in problems:
        typer.echo(str(p))
    if args.engine_inputs:
        for name, why in text_unreachable_inputs(repo):
            typer.echo(f"unreachable from text: {name} ({why})")
    errors = [p for p in problems if p.severity == "error"]
    if errors:
        typer.echo(f"{len(errors)} problem(s) in {repo}", err=True)
        raise typer.Exit(1)
    typer.echo(f"{repo}: valid" + (f" ({len(problems)} warning(s))" if problems else ""))


@dataclass(frozen=True, kw_only=True)
class ParamsArgs:
    """``repo-builder params`` options."""

    profile: str = option("trtllm-1.2", "--profile", help="Profile whose parameters to list.")
    as_json: bool = option(False, "--json", help="Print JSON rows instead of a table.")
    markdown: bool = option(False, "--markdown", help="Print a Markdown table (docs/parameters.md is this).")


@command(ParamsArgs)
def params(args: ParamsArgs) -> None:
    """List the parameters of a profile: name, models, type, default, allowed values, kind, description."""
    from ..profile.schema import load_schema

    profile = args.profile
    rows = load_schema().table(profile)
    if args.as_json:
        typer.echo(json.dumps(rows, indent=2))
        return
    if args.markdown:
        typer.echo(params_markdown(profile, rows), nl=False)
        return
    from rich.table import Table

    table = Table(title=f"parameters of {profile}", show_lines=False)
    for col in ("name", "models", "type", "default", "allowed", "kind", "description"):
        table.add_column(col, overflow="fold")
    for r in rows:
        table.add_row(
            r["name"], ",".join(r["models"]), r["type"], r["default"], r["allowed"], r["kind"], r["description"]
        )
    _console().print(table)


def params_markdown(profile: str, rows: list[dict[str, Any]]) -> str:
    """The parameter table of ``profile`` as Markdown (one row per parameter, from the schema)."""

    def cell(text: Any) -> str:
        return str(text).replace("|", "\\|").replace("\n", " ")

    cols = ("name", "models", "type", "default", "source", "allowed", "kind", "description")
    out = [f"## {profile}", "", "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in rows:
        source = r.get("source") or ""
        default = r["default"] or (f"from {source.split(':')[0]}" if source else "unset")
        values = [
            f"`{r['name']}`",
            ", ".join(r["models"]),
            r["type"],
            default,
            r.get("source") or "",
            r["allowed"],
            r["kind"],
            r["description"],
        ]
        if r.get("build_flag"):
            values[-1] += f" Set at engine build: `trtllm-build {r['build_flag']}`."
        out.append("| " + " | ".join(cell(v) for v in values) + " |")
    return "\n".join(out) + "\n"


def _engine_facts(info: Any) -> dict[str, Any]:
    return json.loads(info.model_dump_json())


@dataclass(frozen=True, kw_only=True)
class InspectArgs:
    """``repo-builder inspect`` options."""

    path: Path = option(REQUIRED, help="An engine dir, or a repository rendered by repo-builder.", argument=True)
    as_json: bool = option(False, "--json", help="Print JSON.")


@command(InspectArgs)
def inspect(args: InspectArgs) -> None:
    """Show what repo-builder derives from an engine dir, or a repository's lock file values and engine facts."""
    from ..engine import inspect_engine
    from ..errors import RepoBuilderError
    from ..repository.lockfile import read_lock

    path = args.path
    lock = read_lock(path) if path.is_dir() else None
    if lock is not None:
        data: dict[str, Any] = {"repository": str(path), "lock": lock.data}
        engine_dir = lock.engine.dir
        layout = lock.data.get("layout")  # whisper / multimodal: a checkpoint, its facts are in the lock file
        if layout is None and engine_dir and Path(engine_dir).is_dir():
            try:
                data["engine"] = _engine_facts(inspect_engine(engine_dir))
            except RepoBuilderError as exc:
                data["engine_error"] = str(exc)
    else:
        data = {"engine": _engine_facts(inspect_engine(path))}
    if args.as_json:
        typer.echo(json.dumps(data, indent=2, default=str))
        return
    from rich.table import Table

    console = _console()
    if lock is not None:
        console.print(
            f"repository {path}: profile {lock.profile}, engine {lock.engine.kind} "
            f"at {lock.engine.dir} ({lock.engine.placement}), "
            f"world size {lock.launch.world_size}" + (f", layout {layout}" if layout else "")
        )
        facts = lock.data.get("facts")
        if layout and isinstance(facts, dict):
            t = Table(title=f"facts of the {layout} checkpoint")
            t.add_column("fact")
            t.add_column("value", overflow="fold")
            for k, v in facts.items():
                t.add_row(str(k), _fmt(v))
            console.print(t)
        for llm in lock.llms:
            if llm.name:  # several LLMs: each with its own engine, tokenizer and values
                console.print(
                    f"LLM {llm.name}: models {', '.join(sorted(llm.models.values()))}; "
                    f"engine {llm.engine.get('kind')} at {llm.engine.get('dir')}; tokenizer "
                    f"{llm.tokenizer.get('dir')}"
                )
            t = Table(title=f"values of {llm.name}" if llm.name else "values")
            for col in ("parameter", "value", "origin"):
                t.add_column(col)
            for name, entry in llm.values.items():
                t.add_row(name, _fmt(entry.get("value")), str(entry.get("origin")))
            console.print(t)
    if "engine" in data:
        t = Table(title="engine")
        t.add_column("field")
        t.add_column("value", overflow="fold")
        for k, v in data["engine"].items():
            t.add_row(k, _fmt(v))
        console.print(t)
    if "engine_error" in data:
        console.print(f"[yellow]engine:[/yellow] {data['engine_error']}")
