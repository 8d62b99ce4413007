"""One exception family for every user-facing failure.

Every error carries enough context for a one-line message that names the file, key or request
field at fault and, where one exists, a hint that says how to fix it. The CLI turns a
:class:`RepoBuilderError` into a red message and exit code 2; anything else is a bug and keeps
its traceback.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pydantic import ValidationError as PydanticValidationError


class RepoBuilderError(Exception):
    """Base class of every error repo-builder reports to a user.

    Args:
        message: what is wrong, in one sentence.
        key: the parameter, config key or request field at fault, if any.
        path: the file or directory at fault, if any.
        hint: how to fix it, if known.
    """

    exit_code = 2

    def __init__(
        self, message: str, *, key: str | None = None, path: str | Path | None = None, hint: str | None = None
    ) -> None:
        self.message = message
        self.key = key
        self.path = Path(path) if path is not None else None
        self.hint = hint
        super().__init__(self.__str__())

    def __str__(self) -> str:
        where = []
        if self.path is not None:
            where.append(str(self.path))
        if self.key is not None:
            where.append(self.key)
        text = f"{': '.join(where)}: {self.message}" if where else self.message
        if self.hint:
            text += f" (hint: {self.hint})"
        return text


class ParameterError(RepoBuilderError):
    """A parameter value or key is invalid: unknown key, wrong type, out of range, wrong profile."""


class EngineError(RepoBuilderError):
    """The engine directory is missing, unreadable, not a decoder engine, or contradicts a value."""


class TokenizerError(RepoBuilderError):
    """The tokenizer directory is missing, not local, unloadable or inconsistent with the engine."""


class TemplateError(RepoBuilderError):
    """A template could not be rendered (undefined variable, bad escaping, unfilled placeholder)."""


class RenderError(RepoBuilderError):
    """Writing the repository failed (output exists, placement failed, lock file problem)."""


class LaunchError(RepoBuilderError):
    """tritonserver could not be found, started, made ready or stopped."""


class Interrupted(BaseException):
    """A signal (SIGTERM, SIGINT or SIGHUP) stopped a command after it cleaned up what it had started.

    A ``BaseException`` (like ``KeyboardInterrupt``) so that no ``except Exception`` on the way swallows it.
    ``exit_code`` follows the shell convention 128 + signal number: 143 for SIGTERM, 130 for SIGINT, 129 for
    SIGHUP. The CLI prints ``message`` and exits with that code.
    """

    def __init__(self, signum: int, message: str) -> None:
        import signal

        self.signum = int(signum)
        try:
            self.signal_name = signal.Signals(self.signum).name
        except ValueError:  # pragma: no cover - a signal number without a name
            self.signal_name = f"signal {self.signum}"
        self.exit_code = 128 + self.signum
        self.message = message
        super().__init__(f"interrupted by {self.signal_name}: {message}")


class ClientError(RepoBuilderError):
    """A request was refused by the client-side checks or failed on the server."""


class ModelConversionError(RepoBuilderError):
    """A packaged model (``repo-builder model``) is not installed, or converting it into a checkpoint failed."""


@dataclass(frozen=True)
class FieldProblem:
    """One error of a pydantic ``ValidationError``, in the terms repo-builder's messages use.

    Attributes:
        loc: the key path (``("build_config", "max_batch_size")``; list indexes as text).
        message: pydantic's message without its ``"Value error, "`` prefix.
        kind: pydantic's error type (``missing``, ``int_type``, ``extra_forbidden``, ...).
        input: the value at fault (None for a missing key).
        parts: ``loc`` as pydantic gives it (list indexes as ``int``, union member tags included), for
            :meth:`path`.
    """

    loc: tuple[str, ...]
    message: str
    kind: str
    input: Any = None
    parts: tuple[Any, ...] = ()

    @property
    def key(self) -> str:
        """``loc`` dotted (``build_config.max_batch_size``), ``(top level)`` when empty."""
        return ".".join(self.loc) or "(top level)"

    @property
    def missing(self) -> bool:
        return self.kind == "missing"

    def path(self, tags: frozenset[str] = frozenset()) -> str:
        """The request-field path of the problem: ``("messages", 0, "content")`` -> ``messages[0].content``.

        pydantic's union member tags are dropped: the builtin ones (``str``, ``list[str]``, ``none``,
        ``function-after[...]``, ...) and the model names in ``tags`` (e.g. ``{"TextPart"}``).
        """
        out = ""
        for part in self.parts:
            if isinstance(part, int):
                out += f"[{part}]"
            elif part in tags or part in _UNION_TAGS or "[" in part or part.startswith("function-"):
                continue
            else:
                out += ("." if out else "") + str(part)
        return out


#: pydantic's tags of builtin union members in an error's ``loc`` (``stop.list[str].1`` for ``str | list[str]``).
_UNION_TAGS = frozenset({"str", "int", "float", "bool", "dict", "list", "none", "constrained-float"})


def field_problems(exc: PydanticValidationError | Sequence[Mapping[str, Any]]) -> list[FieldProblem]:
    """Every error of a pydantic ``ValidationError`` (or its ``errors()`` list, e.g. FastAPI's
    ``RequestValidationError.errors()``) as a :class:`FieldProblem`: the one reader of pydantic's error dicts
    (the CLI, engine config, lock file, launch block and OpenAI request messages are built from it)."""
    errors = exc if isinstance(exc, Sequence) else exc.errors(include_url=False)
    return [
        FieldProblem(
            loc=tuple(str(x) for x in err.get("loc", ())),
            message=str(err.get("msg", "invalid")).removeprefix("Value error, "),
            kind=str(err.get("type", "")),
            input=err.get("input"),
            parts=tuple(err.get("loc", ())),
        )
        for err in errors
    ]


def field_problems_text(exc: PydanticValidationError, *, limit: int = 3) -> str:
    """The first ``limit`` problems as ``key.path: message`` (``missing`` for a missing key), ``;``-joined,
    with ``(and N more)`` when there are more."""
    problems = field_problems(exc)
    parts = [f"{p.key}: {'missing' if p.missing else p.message}" for p in problems[:limit]]
    more = len(problems) - limit
    return "; ".join(parts) + (f" (and {more} more)" if more > 0 else "")
