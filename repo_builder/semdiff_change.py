"""One semantic difference of two repositories (:class:`Change`) and how :mod:`.semdiff` reads parameter values
(empty or ``${...}`` is absent; a value as the schema types it). Moved here from :mod:`.semdiff`, which re-exports
:class:`Change`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .repository.pbtxt import PLACEHOLDER_RE


@dataclass(frozen=True)
class Change:
    """One semantic difference.

    Attributes:
        model: the role (``tensorrt_llm``, ``preprocessing``, ...) or the folder name of an extra model.
        item: what differs: ``max_batch_size``, ``input QUERY``, ``input QUERY data_type``, ``parameter X``,
            ``step tensorrt_llm input_map[end_id]``, ``model`` (the whole model is new or gone).
        before, after: the value in the old and the new repository (None = absent).
        fix: the name of the :data:`FIXES` entry that explains it, or None.
        reason: that fix's reason.
    """

    model: str
    item: str
    before: Any
    after: Any
    fix: str | None = None
    reason: str | None = None

    def __str__(self) -> str:
        text = f"{self.model}: {self.item}: {_show(self.before)} -> {_show(self.after)}"
        if self.fix:
            text += f"  [{self.fix}]"
        return text


def _show(value: Any) -> str:
    return "(absent)" if value is None else repr(value)


def _param(value: str) -> str | None:
    return None if value.strip() == "" or PLACEHOLDER_RE.search(value) else value


def _schema_by_key() -> dict[str, Any]:
    from .profile.schema import load_schema

    out: dict[str, Any] = {}
    for p in load_schema().parameters.values():
        out.setdefault(p.key, p)
    return out


def _normalized(param: Any, text: str) -> str:
    """``text`` as the schema types it (``True``, ``true`` and ``1`` are one bool), written back the way
    repo-builder writes it; ``text`` itself when no parameter has the key or the schema refuses it."""
    if param is None or param.type is None:
        return text
    try:
        return str(param.format_value(param.coerce(text)))
    except (ValueError, TypeError):
        return text
