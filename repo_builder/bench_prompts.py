"""The prompts of `repo-builder bench`: synthetic ones (random common English words, seeded per request so no
two share a prefix; exactly ``--input-tokens`` tokens with a tokenizer, else ``round(input_tokens *
WORDS_PER_TOKEN)`` words) and a JSONL prompt file (``--prompts``). See :mod:`repo_builder.bench`.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import ClientError

#: English words per token assumed when no tokenizer is given (rule of thumb for LLaMA/GPT vocabularies).
WORDS_PER_TOKEN = 0.75

_WORDS = (
    "the of and to in is was for that on as with by at from his an were are which this be has had it not "
    "one their first after new two its who they have her she been other time all into more during there "
    "only most years some over would these up city many where may world about school year state so people "
    "three later part between when both under water light river music small house family early "
    "team game long found known made second national high best called while since each well four then "
    "work number south north west east village university company film system life history book story "
    "government group area center church army power season place line field market island road model "
    "energy paper garden window question answer morning evening language simple careful quiet bright"
).split()


@dataclass
class Prompt:
    """One prompt: its text and, optionally, its own output length (tokens)."""

    text: str
    output_tokens: int | None = None


# --------------------------------------------------------------------------------------------------------
# Prompts
# --------------------------------------------------------------------------------------------------------


def synthetic_prompts(n: int, input_tokens: int, tokenizer: Any | None = None, seed: int = 0) -> list[Prompt]:
    """``n`` distinct prompts of about ``input_tokens`` tokens (exactly, when a tokenizer is given).

    Args:
        tokenizer: a Hugging Face tokenizer (``encode``/``decode``) or None for the word approximation.
    """
    prompts = []
    n_words = max(1, round(input_tokens * WORDS_PER_TOKEN))
    for i in range(n):
        rng = random.Random(f"{seed}:{i}")
        if tokenizer is None:
            prompts.append(Prompt(" ".join(rng.choice(_WORDS) for _ in range(n_words))))
            continue
        words: list[str] = []
        ids: list[int] = []
        while len(ids) < input_tokens:
            words.extend(rng.choice(_WORDS) for _ in range(input_tokens))
            ids = tokenizer.encode(" ".join(words), add_special_tokens=False)
        prompts.append(Prompt(tokenizer.decode(ids[:input_tokens], skip_special_tokens=True)))
    return prompts


def load_prompts(path: str | Path) -> list[Prompt]:
    """Read a JSONL prompt file: one object per line with ``text`` (or ``prompt``/``text_input``) and an
    optional ``output_tokens`` (or ``max_tokens``).

    Raises:
        ClientError: missing file, bad JSON or a line without text (key ``--prompts``, names the line).
    """
    file = Path(path)
    if not file.is_file():
        raise ClientError("prompt file not found", key="--prompts", path=file)
    prompts = []
    for number, line in enumerate(file.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except ValueError as exc:
            raise ClientError(f"line {number} is not JSON: {exc}", key="--prompts", path=file) from None
        if not isinstance(item, dict):
            raise ClientError(f"line {number} is not a JSON object", key="--prompts", path=file)
        text = item.get("text", item.get("prompt", item.get("text_input")))
        if not isinstance(text, str) or not text:
            raise ClientError(
                f"line {number} has no 'text' string",
                key="--prompts",
                path=file,
                hint='each line looks like {"text": "...", "output_tokens": 64}',
            )
        out = item.get("output_tokens", item.get("max_tokens"))
        prompts.append(Prompt(text, int(out) if out is not None else None))
    if not prompts:
        raise ClientError("prompt file holds no prompts", key="--prompts", path=file)
    return prompts
