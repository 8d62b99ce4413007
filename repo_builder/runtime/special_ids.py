"""End id, pad id and extra stop ids of a model, from its files rather than from ``tokenizer.eos_token``.

Vendored into the Python models (relative imports only). Render calls it to write ``end_id``/``pad_id``/
``stop_token_ids`` into preprocessing's config; preprocessing calls it again at run time when a parameter is
unset (a hand-made repository).

Order (the first that gives a value wins):

* end id: the explicit value; ``generation_config.json`` ``eos_token_id`` (an int, or a list whose first
  entry is the end id and whose other entries become ``stop_token_ids``, e.g. Qwen2.5 ``[151645, 151643]``);
  ``config.json`` ``eos_token_id`` (same rule); ``tokenizer.eos_token_id``.
* pad id: the explicit value; ``generation_config.json`` / ``config.json`` ``pad_token_id``;
  ``tokenizer.pad_token_id``; else the end id.

The tokenizer is only read, never changed: upstream's ``tokenizer.pad_token = tokenizer.eos_token`` fails
on tokenizers whose ``pad_token`` cannot be set (ChatGLM, B21). Tokenizers without ``eos_token`` (Qwen-1,
B20) get their end id from ``generation_config.json``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MODEL_FILES = ("generation_config.json", "config.json")


@dataclass(frozen=True)
class SpecialIds:
    """Resolved token ids (vocabulary indices) and, per field, where each came from.

    ``sources`` maps ``end_id``/``pad_id``/``stop_token_ids`` to a text such as
    ``"generation_config.json eos_token_id"``, ``"tokenizer.eos_token_id"``, ``"explicit"`` or ``"end_id"``.
    """

    end_id: int
    pad_id: int
    stop_token_ids: tuple[int, ...] = ()
    sources: dict[str, str] = field(default_factory=dict)


def _valid_id(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _ids(value: Any) -> list[int]:
    """``eos_token_id`` as a list of ids (an int, a list of ints, or nothing)."""
    if _valid_id(value):
        return [value]
    if isinstance(value, (list, tuple)):
        return [v for v in value if _valid_id(v)]
    return []


def _read(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path}: cannot read token ids: {exc}") from exc
    return data if isinstance(data, dict) else {}


def _attr(tokenizer: Any, name: str) -> int | None:
    if tokenizer is None:
        return None
    try:
        value = getattr(tokenizer, name, None)
    except Exception:  # some remote-code tokenizers raise from these properties
        return None
    return value if _valid_id(value) else None


def resolve_special_ids(
    tokenizer: Any,
    tokenizer_dir: str | Path | None,
    explicit_end_id: int | None = None,
    explicit_pad_id: int | None = None,
    *,
    model_dirs: Sequence[str | Path] = (),
) -> SpecialIds:
    """Resolve end / pad / extra stop ids (see the module docstring for the order).

    Args:
        tokenizer: a loaded tokenizer (only read), or None when only model files are available.
        tokenizer_dir: directory holding ``generation_config.json`` / ``config.json`` (may be None).
        explicit_end_id, explicit_pad_id: values given by the user; they win.
        model_dirs: further directories to read the two files from, after ``tokenizer_dir``
            (e.g. an HF checkpoint dir).
    Returns:
        :class:`SpecialIds`; ``stop_token_ids`` never contains ``end_id``.
    Raises:
        ValueError: no end id anywhere (the message names every file and attribute looked at), or an
            unreadable JSON file.
    """
    dirs = [Path(d) for d in ([tokenizer_dir] if tokenizer_dir is not None else []) + list(model_dirs)]
    files = [(d / name, _read(d / name)) for d in dirs for name in MODEL_FILES]
    sources: dict[str, str] = {}

    eos_list: list[int] = []
    eos_source = ""
    for path, data in files:
        ids = _ids(data.get("eos_token_id"))
        if ids:
            eos_list, eos_source = ids, f"{path.name} eos_token_id"
            break

    if explicit_end_id is not None:
        end_id = int(explicit_end_id)
        sources["end_id"] = "explicit"
    elif eos_list:
        end_id = eos_list[0]
        sources["end_id"] = eos_source
    else:
        tok_eos = _attr(tokenizer, "eos_token_id")
        if tok_eos is None:
            looked = [f"{path} (eos_token_id{'' if path.is_file() else ': no such file'})" for path, _ in files]
            looked.append("tokenizer.eos_token_id" + (" (None)" if tokenizer is not None else " (no tokenizer)"))
            raise ValueError(
                "no end id found: looked at " + ", ".join(looked) + "; set end_id explicitly (e.g. --set end_id=<id>)"
            )
        end_id = tok_eos
        sources["end_id"] = "tokenizer.eos_token_id"

    stops = tuple(dict.fromkeys(i for i in eos_list if i != end_id))
    if stops:
        sources["stop_token_ids"] = eos_source

    if explicit_pad_id is not None:
        pad_id = int(explicit_pad_id)
        sources["pad_id"] = "explicit"
    else:
        pad_id = -1
        for path, data in files:
            if _valid_id(data.get("pad_token_id")):
                pad_id = data["pad_token_id"]
                sources["pad_id"] = f"{path.name} pad_token_id"
                break
        if pad_id < 0:
            tok_pad = _attr(tokenizer, "pad_token_id")
            if tok_pad is not None:
                pad_id = tok_pad
                sources["pad_id"] = "tokenizer.pad_token_id"
            else:
                pad_id = end_id
                sources["pad_id"] = "end_id"
    return SpecialIds(end_id=end_id, pad_id=pad_id, stop_token_ids=stops, sources=sources)
