"""How to render: one typed set of options for one LLM (:func:`~repo_builder.render.render_repository`) and for
several (:func:`~repo_builder.render.render_multi_repository`). Each field that is a ``render`` flag declares it
once (:func:`repo_builder.cli_options.option`: default, flags, help); the CLI builds its parameters from them.

Kept free of heavy imports (outside the render package) so ``repo-builder --help`` does not import render."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .cli_options import option


@dataclass(frozen=True, kw_only=True)
class RenderOptions:
    """Everything about a render except which engine(s) and tokenizer(s) go where.

    Attributes:
        profile: the template profile (``model_templates/<profile>/``), e.g. ``trtllm-1.2``.
        user_values: {parameter: value} (``--set``; wins over ``values_file``; applies to every LLM).
        values_file: a YAML mapping of parameter: value (``--values``).
        engine_mode: ``copy`` | ``hardlink`` | ``symlink`` | ``reference`` (see :mod:`repo_builder.placement`).
        streaming: drives ``decoupled_mode`` (None = the schema default).
        force: replace an existing repository: an empty directory, or one whose lock file proves repo-builder
            rendered it (valid :class:`repo_builder.lockfile.LockFile`) and that holds no file the lock file
            does not list.
        delete_unlisted: with ``force``, also delete files of the old repository that its lock file does not
            list (``--delete-unlisted``); without it such files make the render refuse, listing them.
        dry_run: write nothing; return the plan and a diff against the output.
        serve_path: the absolute path the server will see the repository at (container mounts, case B22);
            ``engine_dir`` inside the repository is written under it. Default: the output.
        progress: show a rich progress bar while copying engine files over 64 MiB.
        layout: ``inflight_batcher_llm`` (NVIDIA's ``all_models/inflight_batcher_llm``) or ``disaggregated``
            (``all_models/disaggregated_serving``: :mod:`repo_builder.render.disaggregated`).
        draft_engine_dir: a draft engine for speculative decoding: adds the ``tensorrt_llm_draft`` model
            (:mod:`repo_builder.render.speculative`).
        generation_engine_dir: layout disaggregated: the generation phase's engine when it is not the context's
            (:func:`repo_builder.render.disaggregated.check_generation_engine`).
    """

    profile: str = option("trtllm-1.2", "--profile", help="Template profile (see `repo-builder params`).")
    user_values: Mapping[str, Any] | None = option(
        None, "--set", help="KEY=VALUE parameter (repeatable; wins over --values)."
    )
    values_file: str | Path | None = option(None, "--values", help="YAML file of parameter: value.")
    engine_mode: str = option("copy", "--engine-mode", help="copy | hardlink | symlink | reference.")
    streaming: bool | None = option(
        None, "--streaming/--no-streaming", help="Decoupled (streaming) tensorrt_llm and BLS."
    )
    force: bool = option(
        False,
        "--force",
        help="Replace an existing repository that repo-builder rendered "
        "(its lock file must be valid and list every file).",
    )
    delete_unlisted: bool = option(
        False,
        "--delete-unlisted",
        help="With --force: also delete files of the old repository that its lock "
        "file does not list (otherwise the render refuses and lists them).",
    )
    dry_run: bool = option(False, "--dry-run", help="Show the plan and a diff; write nothing.")
    serve_path: str | Path | None = option(
        None,
        "--serve-path",
        help="Absolute path the server sees the repository at (container mount); engine_dir is written under it.",
    )
    progress: bool = False
    layout: str = option(
        "inflight_batcher_llm",
        "--layout",
        help="inflight_batcher_llm (default) | disaggregated: context and generation copies of the engine model "
        "joined by disaggregated_serving_bls | whisper: whisper_bls + an encoder-decoder tensorrt_llm from the "
        "Whisper checkpoint given as --engine-dir | multimodal: preprocessing + multimodal_encoders + an engine with "
        "a prompt table, from the LLaVA checkpoint given as --engine-dir (docs/layouts.md).",
    )
    draft_engine_dir: str | Path | None = option(
        None,
        "--draft-engine-dir",
        help="Draft engine for draft-target speculative decoding: adds tensorrt_llm_draft, which the BLS calls "
        "for requests with num_draft_tokens > 0 (docs/layouts.md).",
    )

    generation_engine_dir: str | Path | None = option(
        None,
        "--generation-engine-dir",
        help="Layout disaggregated: the generation phase's own engine (default: --engine-dir serves both). "
        "It must agree with the context engine on vocabulary, dtypes, KV-cache shape and beam width; its model "
        "points at it where it is (docs/layouts.md).",
    )

    @classmethod
    def of(cls, options: RenderOptions | None = None, fields: Mapping[str, Any] | None = None) -> RenderOptions:
        """``options`` (default: all defaults) with ``fields`` replaced: what the render functions accept as
        ``options`` plus keyword arguments.

        Raises:
            TypeError: a field that RenderOptions does not have (names it).
        """
        base = options if options is not None else cls()
        if not fields:
            return base
        unknown = sorted(set(fields) - {f.name for f in dataclasses.fields(cls)})
        if unknown:
            raise TypeError(f"unknown render option(s): {', '.join(unknown)}")
        return dataclasses.replace(base, **fields)
