"""Command options declared once (repo_builder/cli_options.py): the options dataclass field gives the typer
parameter (default, flags, help, bounds), the command gets one options object, and the domain object is built
from it field by field; one pydantic-error reader (errors.field_problems) gives the request-field paths."""

from __future__ import annotations

import dataclasses
import inspect
import re
from dataclasses import dataclass
from pathlib import Path

import pytest
import typer
from conftest import PROJECT
from pydantic import BaseModel, ConfigDict, ValidationError
from typer.testing import CliRunner

from repo_builder.cli import app
from repo_builder.cli_options import REQUIRED, command, forward, option, options_of
from repo_builder.errors import field_problems

COMMANDS = sorted((PROJECT / "repo_builder" / "commands").glob("*.py"))


@pytest.mark.parametrize("path", COMMANDS, ids=lambda p: p.name)
def test_no_command_declares_a_typer_parameter_by_hand(path: Path) -> None:
    """Every option and argument comes from an options field (``option``/``Opt``), never a ``typer.Option``."""
    assert re.findall(r"typer\.(?:Option|Argument)\(", path.read_text()) == []


@dataclass(frozen=True, kw_only=True)
class _Args:
    name: str = option(REQUIRED, help="Who to greet.", argument=True)
    times: int = option(1, "--times", "-t", ge=1, le=3, show_range=True, help="How often.")
    loud: bool = option(False, "--loud/--quiet", help="Shout.")
    secret: str | None = option(None, "--secret", hidden=True, help="Not shown.")
    words: list[str] = option([], "--word", help="Extra words (repeatable).")


def _app() -> tuple[typer.Typer, list[_Args]]:
    got: list[_Args] = []
    demo = typer.Typer(add_completion=False, rich_markup_mode=None)

    @demo.command()
    @command(_Args)
    def greet(args: _Args) -> None:
        """Greet someone."""
        got.append(args)

    @demo.callback()
    def _root() -> None:
        """Demo."""

    return demo, got


def test_the_fields_become_the_typer_parameters() -> None:
    demo, got = _app()
    res = CliRunner().invoke(demo, ["greet", "ada", "-t", "2", "--loud", "--word", "a", "--word", "b"])
    assert res.exit_code == 0, res.output
    assert got == [_Args(name="ada", times=2, loud=True, words=["a", "b"])]
    res = CliRunner().invoke(demo, ["greet", "ada"])
    assert got[-1] == _Args(name="ada")  # every default is the field's


def test_help_and_bounds_come_from_the_field() -> None:
    demo, _ = _app()
    shown = CliRunner().invoke(demo, ["greet", "--help"], env={"COLUMNS": "200"}).output
    assert "Greet someone." in shown and "Who to greet." in shown and "How often." in shown
    assert "1<=x<=3" in shown and "--loud / --quiet" in shown
    assert "--secret" not in shown
    res = CliRunner().invoke(demo, ["greet", "ada", "--times", "4"])
    assert res.exit_code == 2 and "--times" in res.output


def test_forward_takes_each_field_of_the_target_by_name() -> None:
    from repo_builder.commands.deploy import SlurmArgs
    from repo_builder.deploy.slurm import SlurmOptions

    args = SlurmArgs(repo=Path("r"), nodes=2, gpus_per_node=4, mpi="none", partition="p", ready_timeout=60)
    got = forward(SlurmOptions, args, name="job", binary=None)
    assert got == SlurmOptions(name="job", nodes=2, gpus_per_node=4, mpi="none", partition="p", ready_timeout=60)


@pytest.mark.parametrize(
    "name", ["generate", "top", "validate", "params", "inspect", "adopt", "diff", "upgrade", "openai", "stop"]
)
def test_each_command_takes_exactly_its_options_fields(name: str) -> None:
    """The registered command's parameters are one options dataclass's fields, each with the field's help."""
    (info,) = [c for c in app.registered_commands if (c.name or c.callback.__name__) == name]
    func = inspect.unwrap(info.callback, stop=lambda f: hasattr(f, "__signature__"))
    params = inspect.signature(func).parameters
    module = inspect.getmodule(func)
    classes = [v for v in vars(module).values() if isinstance(v, type) and dataclasses.is_dataclass(v)]
    (cls,) = [c for c in classes if options_of(c) and list(options_of(c)) == list(params)]
    for field, spec in options_of(cls).items():
        assert params[field].default.help == spec.help, field


def test_render_builds_every_render_option_from_its_parameters() -> None:
    """render forwards its parameters to RenderOptions by field name: every option field is a parameter."""
    from repo_builder.commands.build import render
    from repo_builder.render_options import RenderOptions

    params = inspect.signature(render).parameters
    assert set(options_of(RenderOptions)) <= set(params)


class _Part(BaseModel):
    model_config = ConfigDict(extra="forbid")
    text: str


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid")
    stop: str | list[str] | None = None
    parts: list[_Part] = []


def test_field_problems_give_the_request_field_path() -> None:
    with pytest.raises(ValidationError) as err:
        _Request.model_validate({"stop": ["a", 3], "parts": [{"text": "x"}, {"text": 1}]})
    paths = {p.path() for p in field_problems(err.value)}
    assert {"stop[1]", "parts[1].text"} <= paths
    errors = err.value.errors()  # FastAPI's RequestValidationError.errors() is such a list
    assert [p.path() for p in field_problems(errors)] == [p.path() for p in field_problems(err.value)]
