"""The LLM inputs of ``repo-builder render``: --checkpoint-dir / --engine-dir / --tokenizer-dir / --model
checked and handed to the renderer (split out of :mod:`repo_builder.commands.build`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def _checkpoint_as_engine(
    checkpoint_dir: Path | None, engine_dir: Path | None, profile: str, llmapi: bool
) -> Path | None:
    """The engine folder ``render`` works on: --checkpoint-dir when given (llmapi profiles only), else
    --engine-dir (either may be None).

    Raises:
        RenderError: both flags given, or --checkpoint-dir with a profile that is not llmapi.
    """
    from ..errors import RenderError

    if checkpoint_dir is not None:
        if engine_dir is not None:
            raise RenderError("--checkpoint-dir and --engine-dir exclude each other", key="--checkpoint-dir")
        if not llmapi:
            raise RenderError(
                f"--checkpoint-dir is for the llmapi profiles, not {profile}",
                key="--checkpoint-dir",
                hint="add --profile llmapi-1.2, or pass the checkpoint as --engine-dir (CPU reference engine)",
            )
        engine_dir = checkpoint_dir
    return engine_dir


def _render_llms(
    engine_dir: Path | None,
    tokenizer_dir: Path | None,
    model: list[str] | None,
    output: Path,
    options: Any,
    llmapi: bool,
) -> Any:
    """Render the LLM layouts: several ``--model NAME=...`` entries, or one engine (or llmapi checkpoint)
    with its tokenizer; returns the renderer's result (``.plan``, ``.warnings``, ``.existed``).

    Raises:
        RenderError: --model mixed with --engine-dir/--tokenizer-dir (or --checkpoint-dir), a missing
            --checkpoint-dir / --engine-dir / --tokenizer-dir; whatever the renderer raises.
    """
    from ..errors import RenderError
    from ..render import render_multi_repository, render_repository

    if model:
        if engine_dir is not None or tokenizer_dir is not None:
            flags = "--checkpoint-dir/--tokenizer-dir" if llmapi else "--engine-dir/--tokenizer-dir"
            shape = "NAME=CHECKPOINT_DIR[,TOKENIZER_DIR]" if llmapi else "NAME=ENGINE_DIR,TOKENIZER_DIR"
            raise RenderError(
                f"--model and {flags} exclude each other",
                key="--model",
                hint=f"give every LLM as --model {shape}",
            )
        return render_multi_repository([_parse_model(m, llmapi=llmapi) for m in model], output, options)
    if llmapi:
        if engine_dir is None:
            raise RenderError(
                "missing --checkpoint-dir", key="--checkpoint-dir", hint="the Hugging Face checkpoint folder"
            )
        return render_repository(engine_dir, tokenizer_dir, output, options)
    if engine_dir is None or tokenizer_dir is None:
        missing = [flag for flag, v in (("--engine-dir", engine_dir), ("--tokenizer-dir", tokenizer_dir)) if v is None]
        raise RenderError(
            f"missing {' and '.join(missing)}",
            key=missing[0],
            hint="give --engine-dir and --tokenizer-dir, or --model NAME=ENGINE_DIR,TOKENIZER_DIR "
            "for each of several LLMs",
        )
    return render_repository(engine_dir, tokenizer_dir, output, options)


def _parse_model(text: str, *, llmapi: bool = False) -> tuple[str, Path, Path | None]:
    """``NAME=ENGINE_DIR,TOKENIZER_DIR`` -> (name, engine dir, tokenizer dir); for an llmapi profile
    ``NAME=CHECKPOINT_DIR[,TOKENIZER_DIR]`` (tokenizer None: the checkpoint's).

    Raises:
        RenderError: another shape (names ``--model`` and the text).
    """
    from ..errors import RenderError

    name, sep, dirs = text.partition("=")
    engine, comma, tokenizer = dirs.partition(",")
    if llmapi and sep and name.strip() and engine.strip() and (not comma or tokenizer.strip()):
        return name.strip(), Path(engine.strip()), Path(tokenizer.strip()) if comma else None
    if not sep or not comma or not name.strip() or not engine.strip() or not tokenizer.strip():
        shape = "NAME=CHECKPOINT_DIR[,TOKENIZER_DIR]" if llmapi else "NAME=ENGINE_DIR,TOKENIZER_DIR"
        example = "--model smol=/hf/smollm2" if llmapi else "--model llama=/engines/llama,/hf/llama"
        raise RenderError(f"'{text}' is not {shape}", key="--model", hint=f"e.g. {example}")
    return name.strip(), Path(engine.strip()), Path(tokenizer.strip())
