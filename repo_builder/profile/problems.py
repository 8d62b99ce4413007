"""One error for many problems: how every checker of user values reports all its findings at once."""

from __future__ import annotations

from ..errors import ParameterError


def problems_error(problems: list[str], *, source: str, cls: type[ParameterError] = ParameterError) -> ParameterError:
    """One error listing ``problems`` (one per line, each naming its key); ``.problems`` holds the lines."""
    exc = cls(f"{len(problems)} problem(s) in values from {source}:\n" + "\n".join(problems))
    exc.problems = list(problems)  # type: ignore[attr-defined]
    return exc
