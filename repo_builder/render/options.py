"""How to render: one typed set of options for one LLM (:func:`~repo_builder.render.render_repository`) and for
several (:func:`~repo_builder.render.render_multi_repository`); the CLI's ``render`` flags fill it."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any


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
    """

    profile: str = "trtllm-1.2"
    user_values: Mapping[str, Any] | None = None
    values_file: str | Path | None = None
    engine_mode: str = "copy"
    streaming: bool | None = None
    force: bool = False
    delete_unlisted: bool = False
    dry_run: bool = False
    serve_path: str | Path | None = None
    progress: bool = False
    layout: str = "inflight_batcher_llm"
    draft_engine_dir: str | Path | None = None

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
