"""One repository serving several LLMs (``render --model NAME=ENGINE_DIR,TOKENIZER_DIR`` repeated)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ..errors import RenderError, RepoBuilderError
from ..placement import PlacementPlan
from ..repository.lockfile import LOCK_NAME, dumps
from .llmapi import PreparedLLMAPIRender, prepare_llmapi_render
from .options import RenderOptions
from .plan import PreparedRender, RenderPlan, prepare_render
from .write import RenderResult, write_plan, write_repository

#: Name of one LLM in a repository holding several (``render --model NAME=ENGINE_DIR,TOKENIZER_DIR``).
_LLM_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


@contextmanager
def _named(name: str) -> Iterator[None]:
    """Prefix the message of a RepoBuilderError raised in the block with ``--model NAME: ``."""
    try:
        yield
    except RepoBuilderError as exc:
        exc.message = f"--model {name}: {exc.message}"
        raise


def _check_names(llms: list[tuple[str, str | Path, str | Path | None]]) -> None:
    """At least two LLMs, each named ``[A-Za-z0-9][A-Za-z0-9_.-]*`` (at most 64 characters) once."""
    if len(llms) < 2:
        raise RenderError(
            "several LLMs need at least two --model NAME=ENGINE_DIR,TOKENIZER_DIR",
            key="--model",
            hint="render one LLM with --engine-dir and --tokenizer-dir",
        )
    seen: set[str] = set()
    for name, _, _ in llms:
        if not _LLM_NAME.match(name):
            raise RenderError(
                f"'{name}' is not a model name: letters, digits, '_', '.', '-', starting with a "
                "letter or digit, at most 64 characters",
                key="--model",
            )
        if name in seen:
            raise RenderError(f"the name '{name}' is given twice", key="--model")
        seen.add(name)


def _combined_plan(
    opts: RenderOptions,
    prepared: list[tuple[str, PreparedRender | PreparedLLMAPIRender]],
    placement: PlacementPlan,
) -> RenderPlan:
    """Finish every LLM's plan and merge them into one repository with one lock file.

    Raises:
        RenderError: the engines need different world sizes; whatever :meth:`PreparedRender.finish` raises,
            prefixed by the LLM's name.
    """
    from .. import __version__
    from ..repository.lockfile import build_multi_lock

    plans: list[tuple[str, RenderPlan]] = []
    for name, prep in prepared:
        with _named(name):
            plans.append((name, prep.finish()))
    sizes = {name: plan.lock["launch"]["world_size"] for name, plan in plans}
    if len(set(sizes.values())) > 1:
        raise RenderError(
            "the engines need different world sizes (one launch serves them all): "
            + ", ".join(f"{n} {ws}" for n, ws in sizes.items()),
            key="--model",
            hint="serve engines built with the same tp x pp together",
        )
    files: dict[str, bytes] = {}
    for _, plan in plans:
        files.update({rel: data for rel, data in plan.files.items() if rel != LOCK_NAME})
    first = plans[0][1]
    lock = build_multi_lock(
        version=__version__,
        profile=opts.profile,
        llms=[(n, p.lock) for n, p in plans],
        files=files,
        serve_path=opts.serve_path,
    )
    files[LOCK_NAME] = dumps(lock)
    return RenderPlan(
        output=first.output,
        serve_root=first.serve_root,
        profile=opts.profile,
        engine=first.engine,
        tokenizer=first.tokenizer,
        resolution=first.resolution,
        placement=placement,
        files=files,
        empty_dirs=[d for _, p in plans for d in p.empty_dirs],
        lock=lock,
        warnings=[f"{n}: {w}" for n, p in plans for w in p.warnings],
    )


def render_multi_repository(
    llms: list[tuple[str, str | Path, str | Path | None]],
    output: str | Path,
    options: RenderOptions | None = None,
    **fields: Any,
) -> RenderResult:
    """Render one repository serving several LLMs: ``[(name, engine_dir, tokenizer_dir), ...]``.

    Each LLM gets its own five models named ``<name>_preprocessing``, ``<name>_tensorrt_llm``,
    ``<name>_postprocessing``, ``<name>_ensemble`` and ``<name>_tensorrt_llm_bls`` (rendered exactly as
    :func:`repo_builder.render.render_repository` renders one, with its own engine and tokenizer; the options,
    ``--set``/``--values`` among them, apply to all), and the repository one lock file listing them
    (:func:`repo_builder.lockfile.build_multi_lock`). The engines must need the same world size: one launch
    serves them all, ranks > 0 load every ``<name>_tensorrt_llm``. ``options`` and ``fields``: as for
    ``render_repository`` (:class:`RenderOptions`). Every engine is copied while the LLMs' files are rendered.

    An llmapi profile (``--profile llmapi-1.2``): each ``engine_dir`` is a Hugging Face checkpoint and
    ``tokenizer_dir`` may be None (the checkpoint's); each LLM gets ``<name>_tensorrt_llm`` (NVIDIA's llmapi
    model, its own ``1/model.yaml`` naming its own checkpoint) and, with ``text_front_doors``, its
    ``<name>_ensemble`` and ``<name>_tensorrt_llm_bls`` over it; the world size is each one's
    tensor x pipeline parallel size, which must agree.

    Raises:
        RenderError: fewer than two LLMs, a name that is not ``[A-Za-z0-9][A-Za-z0-9_.-]*`` or is repeated,
            engines with different world sizes; and whatever ``render_repository`` raises, prefixed by
            the LLM's name.
    """
    opts = RenderOptions.of(options, fields)
    if opts.draft_engine_dir is not None:
        raise RenderError("--draft-engine-dir serves one LLM", key="--draft-engine-dir")
    if opts.generation_engine_dir is not None:
        raise RenderError(
            "--generation-engine-dir is for layout disaggregated (one LLM)", key="--generation-engine-dir"
        )
    if opts.layout != "inflight_batcher_llm":
        raise RenderError(
            f"layout {opts.layout} serves one LLM; several --model are not supported with it",
            key="--layout",
            hint="render one repository per LLM",
        )
    _check_names(llms)
    from ..profile.contract import profile_layout

    llmapi = profile_layout(opts.profile) == "llmapi"
    prepared: list[tuple[str, PreparedRender | PreparedLLMAPIRender]] = []
    for name, engine_dir, tokenizer_dir in llms:
        with _named(name):
            if llmapi:
                prep: PreparedRender | PreparedLLMAPIRender = prepare_llmapi_render(
                    engine_dir, tokenizer_dir, output, opts, model_prefix=f"{name}_"
                )
            elif tokenizer_dir is None:
                raise RenderError(
                    "missing the tokenizer directory", key="--model", hint="NAME=ENGINE_DIR,TOKENIZER_DIR"
                )
            else:
                prep = prepare_render(engine_dir, tokenizer_dir, output, opts, model_prefix=f"{name}_")
            prepared.append((name, prep))
    first = prepared[0][1].placement
    placement = PlacementPlan(
        first.mode, first.source_dir, first.engine_subdir, [f for _, p in prepared for f in p.placement.files]
    )
    if opts.dry_run:
        return write_plan(_combined_plan(opts, prepared, placement), dry_run=True)
    return write_repository(
        prepared[0][1].output,
        placement,
        lambda: _combined_plan(opts, prepared, placement),
        progress=opts.progress,
    )
