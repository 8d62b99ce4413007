"""Rendering a Triton model repository: templates, vendoring, engine placement, atomic write, dry run.

Pipeline of :func:`render_repository` (``docs/design.md``)::

    check the mode, the output and the serve path -> validate_user_values (--values file, then --set)
    -> inspect_engine (+ rank files) -> plan the engine placement                        [plan.prepare_render]
    -> temp dir beside the output (same filesystem); engine files placed from a thread   [write.write_repository]
       meanwhile: inspect_tokenizer -> resolve -> render every template to text -> parse each with protobuf
       text_format, scan for "${" -> vendor the runtime -> lock file                     [plan.PreparedRender.finish]
    -> write the files -> validate the temp dir (once the engine's small files are placed) -> wait for the large
       engine files -> atomic rename

Bad input that needs no tokenizer (mode, output, values, engine) is refused before anything is written. A
failure after that (a tokenizer, a contradiction found by resolve, a template bug, a failed copy, a signal)
stops the engine copy and removes the temp dir; an existing repository is never modified unless ``force`` is
set, and then it is moved aside and deleted only after the new one has been renamed into place. ``dry_run``
goes through the same steps up to the write and returns the plan plus a unified diff against the existing
repository.

Rooms: :mod:`.options` (:class:`RenderOptions`), :mod:`.templates` (Jinja2 environment, filters, template
variables, :func:`render_configs`), :mod:`.vendor` (Python model sources, vendored runtime, the BLS's
wiring), :mod:`.output` (which outputs may be written or replaced), :mod:`.plan` (:class:`RenderPlan`,
:func:`plan_render`), :mod:`.write` (atomic write with the overlapped copy, signals, dry-run diff),
:mod:`.multi` (several LLMs in one repository), :mod:`.disaggregated` (``--layout disaggregated``). Import the
public names from here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import RepoBuilderError
from .llmapi import PreparedLLMAPIRender, prepare_llmapi_render
from .multi import render_multi_repository
from .options import RenderOptions
from .plan import PreparedRender, RenderPlan, plan_render, prepare_render
from .templates import (
    RESERVED_TEMPLATE_VARS,
    TRITON_DTYPES,
    make_environment,
    model_template_vars,
    param_text,
    render_configs,
    template_parameter_names,
    template_path,
)
from .vendor import ENGINE_MODEL_KINDS, PYTHON_MODEL_KINDS, RUNTIME_FOLDER, runtime_files, wiring_data
from .write import RenderResult, diff_against, write_plan, write_repository


def render_repository(
    engine_dir: str | Path,
    tokenizer_dir: str | Path | None,
    output: str | Path,
    options: RenderOptions | None = None,
    **fields: Any,
) -> RenderResult:
    """Render a Triton model repository for an engine and a tokenizer.

    Args:
        engine_dir: a TRT-LLM engine dir (``config.json`` + ``rank<N>.engine``), an HF checkpoint (served
            by the CPU reference engine) or a synthetic engine dir (``synthetic_engine.json``); for an llmapi
            profile (``llmapi-1.2``) the Hugging Face checkpoint the LLM API serves (``--checkpoint-dir``).
        tokenizer_dir: a local Hugging Face tokenizer directory (llmapi profiles: None = the checkpoint's).
        output: the repository directory to create.
        options: how to render (:class:`RenderOptions`: profile, ``--set``/``--values``, engine mode,
            streaming, force, dry run, serve path, progress); default: all defaults.
        fields: :class:`RenderOptions` fields replacing those of ``options`` (``engine_mode="reference"``...).
    Returns:
        RenderResult.
    Raises:
        RepoBuilderError subclasses naming the key or file: EngineError, TokenizerError, ParameterError,
        TemplateError, RenderError (output exists, placement failed, the rendered repository failed validation);
        Interrupted (a signal during the write); TypeError: an unknown option.
    """
    from ..profile.contract import profile_layout

    opts = RenderOptions.of(options, fields)
    prepared: PreparedRender | PreparedLLMAPIRender
    if opts.generation_engine_dir is not None and opts.layout != "disaggregated":
        from ..errors import RenderError

        raise RenderError(
            f"--generation-engine-dir is for layout disaggregated, not {opts.layout}",
            key="--generation-engine-dir",
            hint="add --layout disaggregated, or drop the flag",
        )
    if profile_layout(opts.profile) == "llmapi":
        from ..errors import RenderError

        if opts.draft_engine_dir is not None:
            raise RenderError(
                f"a draft engine is not for profile {opts.profile}",
                key="--draft-engine-dir",
                hint="set speculative_config.* (decoding_type, max_draft_len, speculative_model) instead",
            )
        if opts.layout != "inflight_batcher_llm":
            raise RenderError(f"layout {opts.layout} is not for profile {opts.profile}", key="--layout")
        prepared = prepare_llmapi_render(engine_dir, tokenizer_dir, output, opts)
    else:
        if tokenizer_dir is None:
            from ..errors import RenderError

            raise RenderError("missing --tokenizer-dir", key="--tokenizer-dir")
        if opts.draft_engine_dir is not None:
            from .speculative import render_speculative_repository

            return render_speculative_repository(engine_dir, tokenizer_dir, output, opts)
        if opts.layout == "disaggregated":
            from .disaggregated import render_disaggregated_repository

            return render_disaggregated_repository(engine_dir, tokenizer_dir, output, opts)
        prepared = prepare_render(engine_dir, tokenizer_dir, output, opts)
    if opts.dry_run:
        return write_plan(prepared.finish(), dry_run=True)
    return write_repository(prepared.output, prepared.placement, prepared.finish, progress=opts.progress)


__all__ = [
    "ENGINE_MODEL_KINDS",
    "PYTHON_MODEL_KINDS",
    "RESERVED_TEMPLATE_VARS",
    "RUNTIME_FOLDER",
    "TRITON_DTYPES",
    "PreparedLLMAPIRender",
    "PreparedRender",
    "RenderOptions",
    "RenderPlan",
    "RenderResult",
    "RepoBuilderError",
    "diff_against",
    "make_environment",
    "model_template_vars",
    "param_text",
    "prepare_llmapi_render",
    "plan_render",
    "prepare_render",
    "render_configs",
    "render_multi_repository",
    "render_repository",
    "runtime_files",
    "template_parameter_names",
    "template_path",
    "wiring_data",
    "write_plan",
    "write_repository",
]
