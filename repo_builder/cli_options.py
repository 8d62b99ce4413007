"""Command options declared once: default, flags, help and bounds on the options class field.

An options class (a dataclass such as :class:`repo_builder.bench.BenchSettings`, or the field table behind a
pydantic model such as :class:`repo_builder.server.config.LaunchConfig`) declares each option with
:func:`option` (dataclass field) or :class:`Opt` (table entry). :func:`typer_option` turns that one declaration
into the command's ``typer.Option``; :func:`check_options` enforces the bounds with pydantic (the field
constraints ``ge``/``gt``/``le``, ``min_length``, ``item_ge``, ``choices``) and reports the first problem through
:func:`repo_builder.errors.field_problems`, naming the option's flag.

Kept free of heavy imports (no pydantic, no typer at import time) so ``repo-builder --help`` does not pay for
them beyond what typer itself costs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from .errors import RepoBuilderError

#: The default of a required option (``typer.Option(...)``).
REQUIRED: Any = ...


@dataclass(frozen=True)
class Opt:
    """One command option.

    Attributes:
        default: the default (:data:`REQUIRED` for none); ``default_factory`` for mutable ones.
        flags: the command-line spellings (``"--stream/--no-stream"`` for a boolean pair); the first names the
            option in error messages.
        help: the ``--help`` text.
        ge, gt, le: numeric bounds (pydantic field constraints).
        min_length: at least this many items (a list option).
        item_ge: every item of a list option at least this.
        choices: the only values allowed (a text option).
        parse: turns the command-line text into the field's value (e.g. ``"1,4,16"`` -> ``[1, 4, 16]``); the
            command-line default is then ``show(default)``.
        show: the command-line text of the default for a ``parse`` option (default: items joined by commas).
        argument: a positional argument (``typer.Argument``; ``flags`` empty) instead of an option.
        show_range: also give the bounds to typer (``min=ge``/``gt``, ``max=le``), which checks them while
            parsing and shows them in ``--help``.
        hidden: left out of ``--help``.
        show_default: False hides the default in ``--help`` (None: typer's choice).
    """

    default: Any = REQUIRED
    flags: tuple[str, ...] = ()
    help: str = ""
    default_factory: Callable[[], Any] | None = None
    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    min_length: int | None = None
    item_ge: float | None = None
    choices: tuple[str, ...] | None = None
    parse: Callable[[str], Any] | None = None
    show: Callable[[Any], str] | None = None
    argument: bool = False
    show_range: bool = False
    hidden: bool = False
    show_default: bool | None = None

    @property
    def value(self) -> Any:
        """The default value (a fresh one from ``default_factory``)."""
        return self.default_factory() if self.default_factory is not None else self.default

    @property
    def flag(self) -> str:
        """The first spelling of the option (``--stream`` for ``--stream/--no-stream``)."""
        return self.flags[0].split("/")[0] if self.flags else ""

    def cli_default(self) -> Any:
        """The default as the command line takes it (text for a ``parse`` option)."""
        value = self.value
        if self.parse is not None and value is not REQUIRED and value is not None:
            return (self.show or _comma_joined)(value)
        return value

    def typer(self, **overrides: Any) -> Any:
        """The ``typer.Option`` of this option; ``overrides`` replace ``default`` or ``help`` or add further
        ``typer.Option`` keyword arguments."""
        import typer

        default = overrides.pop("default", self.cli_default())
        text = overrides.pop("help", self.help)
        if self.show_range:
            low = self.ge if self.ge is not None else self.gt
            overrides = {"min": low, "max": self.le, **overrides}
        if self.hidden:
            overrides.setdefault("hidden", True)
        if self.show_default is not None:
            overrides.setdefault("show_default", self.show_default)
        if self.argument:
            return typer.Argument(default, help=text, **overrides)
        return typer.Option(default, *self.flags, help=text, **overrides)

    def pydantic(self) -> Any:
        """The pydantic ``Field`` of this option: default, bounds and ``description`` (the help)."""
        from pydantic import Field

        kwargs: dict[str, Any] = {"description": self.help, **self.bounds()}
        if self.default_factory is not None:
            return Field(default_factory=self.default_factory, **kwargs)
        return Field(self.default, **kwargs)

    def bounds(self) -> dict[str, Any]:
        """The pydantic constraints of this option (``ge``, ``gt``, ``le``, ``min_length``)."""
        pairs = (("ge", self.ge), ("gt", self.gt), ("le", self.le), ("min_length", self.min_length))
        return {k: v for k, v in pairs if v is not None}


def _comma_joined(value: Any) -> str:
    return ",".join(str(v) for v in value)


def option(default: Any = REQUIRED, *flags: str, help: str, **kw: Any) -> Any:
    """A dataclass field declaring a command option (:class:`Opt`, kept in the field's metadata).

    ``default`` may be a list (it becomes the field's ``default_factory``)."""
    if isinstance(default, list):
        items = list(default)
        kw["default_factory"] = lambda: list(items)
        default = REQUIRED
    spec = Opt(default=default, flags=tuple(flags), help=help, **kw)
    if spec.default_factory is not None:
        return dataclasses.field(default_factory=spec.default_factory, metadata={"option": spec})
    if default is REQUIRED:
        return dataclasses.field(metadata={"option": spec})
    return dataclasses.field(default=default, metadata={"option": spec})


def options_of(cls: type) -> dict[str, Opt]:
    """{field name: :class:`Opt`} of every option field of the dataclass ``cls``, in declaration order."""
    return {f.name: f.metadata["option"] for f in dataclasses.fields(cls) if "option" in f.metadata}


def command(cls: type) -> Callable[[Callable[[Any], Any]], Callable[..., Any]]:
    """Decorator: the command function ``func(args)`` becomes one whose parameters are the option fields of the
    dataclass ``cls`` (in declaration order, each typed by its field and defaulted by :meth:`Opt.typer`), so
    typer builds the command from ``cls`` alone; ``func`` gets one ``cls`` instance built from them.

    Register the result with ``app.command(...)`` (under :func:`repo_builder.cli.report_errors`).
    """
    import functools
    import inspect
    import typing

    def wrap(func: Callable[[Any], Any]) -> Callable[..., Any]:
        hints = typing.get_type_hints(cls)
        params = [
            inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=spec.typer(), annotation=hints[name])
            for name, spec in options_of(cls).items()
        ]

        @functools.wraps(func)
        def run(**values: Any) -> Any:
            return func(cls(**values))

        del run.__wrapped__  # the signature is cls's, not func's
        run.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
        run.__annotations__ = {p.name: p.annotation for p in params}
        return run

    return wrap


def forward(cls: type, source: Any, **fields: Any) -> Any:
    """An instance of the dataclass ``cls`` with each of its fields that ``source`` (an object, e.g. a
    command's options) has taken from it; ``fields`` are added or win."""
    names = {f.name for f in dataclasses.fields(cls)} - set(fields)
    taken = {name: getattr(source, name) for name in names if hasattr(source, name)}
    return cls(**taken, **fields)


def typer_option(cls: type, name: str, **overrides: Any) -> Any:
    """The ``typer.Option`` of field ``name`` of the dataclass ``cls`` (see :meth:`Opt.typer`)."""
    return options_of(cls)[name].typer(**overrides)


def from_cli(cls: type, values: Mapping[str, Any], *, error: type[RepoBuilderError], **extra: Any) -> Any:
    """An instance of the dataclass ``cls`` from a command's parameters (``values``, e.g. ``locals()``: each
    option field under its own name; other names ignored), each ``parse`` option parsed, plus the fields
    ``extra`` (not options, e.g. derived ones), then checked (:func:`check_options`)."""
    fields = dict(extra)
    for name, spec in options_of(cls).items():
        if name not in values:
            continue
        value = values[name]
        if spec.parse is not None and isinstance(value, str):
            value = spec.parse(value)
        fields[name] = value
    obj = cls(**fields)
    check_options(obj, error=error)
    return obj


def check_options(obj: Any, *, error: type[RepoBuilderError]) -> None:
    """Check every option field of the dataclass instance ``obj`` against its bounds (pydantic), raising
    ``error(message, key=<flag>)`` for the first problem.

    Raises:
        error: a value is out of its bounds or not one of its ``choices`` (names the option's flag).
    """
    from typing import Annotated, Literal

    from pydantic import Field, ValidationError, create_model

    from .errors import field_problems

    specs = options_of(type(obj))
    fields: dict[str, Any] = {}
    for name, spec in specs.items():
        bounds = spec.bounds()
        kind: Any = Any
        if spec.choices is not None:
            kind = Literal[spec.choices]
        elif spec.item_ge is not None or spec.min_length is not None:
            kind = list[Annotated[float, Field(ge=spec.item_ge)]]
        elif bounds:
            kind = float | None
        fields[name] = (kind, Field(**bounds))
    model = create_model(f"{type(obj).__name__}Check", **fields)
    try:
        model.model_validate({name: getattr(obj, name) for name in specs})
    except ValidationError as exc:
        first = field_problems(exc)[0]
        spec = specs[first.loc[0]]
        inner = "".join(f" (item {x})" for x in first.loc[1:])
        raise error(f"{first.message}{inner}, got {first.input!r}", key=spec.flag) from None
