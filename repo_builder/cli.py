"""The `repo-builder` command line: argument parsing and error display only.

Each group of commands lives in ``repo_builder/commands/<group>.py`` and registers itself on
``app``; heavy imports (transformers, torch, tritonclient) happen inside the command functions so
``repo-builder --help`` stays fast. A :class:`~repo_builder.errors.RepoBuilderError` is shown as one
red message (no traceback) and exits with code 2.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable
from typing import Any, TypeVar

import typer

from .errors import Interrupted, RepoBuilderError

app = typer.Typer(
    name="repo-builder",
    help="Render, validate, launch and benchmark Triton model repositories for TensorRT-LLM engines.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    # Plain click help: typer's rich help formatter imports rich.markdown/pretty/syntax (~0.1 s of the 0.3 s a
    # `--help` costs); measured with scripts/bench_startup.py, docs/performance.md.
    rich_markup_mode=None,
)

F = TypeVar("F", bound=Callable[..., Any])


@app.callback()
def _root() -> None:
    """Render, validate, launch and benchmark Triton model repositories for TensorRT-LLM engines."""


@app.command()
def version() -> None:
    """Print repo-builder's version."""
    from . import __version__

    typer.echo(__version__)


def report_errors(func: F) -> F:
    """Decorator for command functions: print a RepoBuilderError in red and exit with its code; an
    :class:`~repo_builder.errors.Interrupted` (a signal, after cleanup) exits with 128 + the signal number."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except RepoBuilderError as exc:
            from rich.console import Console

            console = Console(stderr=True)
            console.print(f"[bold red]error:[/bold red] {exc}", highlight=False, soft_wrap=True)
            raise typer.Exit(exc.exit_code) from None
        except Interrupted as exc:
            from rich.console import Console

            Console(stderr=True).print(f"[bold red]interrupted:[/bold red] {exc}", highlight=False, soft_wrap=True)
            raise typer.Exit(exc.exit_code) from None

    return wrapper  # type: ignore[return-value]


def command(cls: type, *, group: typer.Typer | None = None, name: str | None = None) -> Callable[[F], F]:
    """Decorator registering ``func(args: cls)`` as command ``name`` (default: the function's) of ``group``
    (default: :data:`app`): its parameters are the option fields of the dataclass ``cls``
    (:func:`repo_builder.cli_options.command`), its errors shown by :func:`report_errors`."""
    from .cli_options import command as options_command

    def wrap(func: F) -> F:
        registered = report_errors(options_command(cls)(func))
        (group or app).command(name)(registered)
        return registered  # type: ignore[return-value]

    return wrap


# Command modules, each registering its commands on `app` when imported.
_COMMAND_MODULES = ("build", "serve", "client", "deploy", "openai", "model", "adopt")
for _name in _COMMAND_MODULES:
    try:
        importlib.import_module(f"{__package__}.commands.{_name}")
    except ModuleNotFoundError as _exc:  # a command group not written yet
        if _exc.name != f"{__package__}.commands.{_name}":
            raise


def main() -> None:
    """Entry point used by ``python -m repo_builder``."""
    app()
