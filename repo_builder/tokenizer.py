"""Tokenizer inspection: check a ``--tokenizer-dir`` the way the served models will load it.

The preprocessing and postprocessing models load the tokenizer with ``transformers.AutoTokenizer``
from a local directory (``local_files_only=True``); repo-builder never downloads (B22). This module checks it
before anything is written, so that a wrong path, a missing file, a tokenizer that needs remote
code (ChatGLM, Qwen-1, Baichuan: B21) or one without an end id (B20) is reported at render time.

Render needs only a few facts (vocabulary size, the special token ids). For the two common layouts they are
read straight from the files, without importing transformers (which imports torch when it is installed,
seconds of start-up): a ``tokenizer.json`` read with the ``tokenizers`` library, and a SentencePiece
``tokenizer.model`` of a LLaMA-class tokenizer read with ``sentencepiece``, special tokens from
``tokenizer_config.json`` / ``special_tokens_map.json`` in both (:func:`inspect_tokenizer_files`). Every other
layout (byte-level BPE ``vocab.json``/``merges.txt``, tiktoken, remote code, a class that fills special tokens
from its own defaults) is loaded with ``AutoTokenizer`` as the served models will. ``tests/test_tokenizer_fast.py``
checks that both ways give the same facts for every tokenizer the tests have.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from .errors import TokenizerError
from .runtime.special_ids import resolve_special_ids
from .runtime.tokenizer_files import describe_tokenizer_files, has_tokenizer_files

_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.\-]*/[\w.\-]+$")


class TokenizerInfo(BaseModel):
    """What a tokenizer directory holds.

    ``vocab_size`` is ``len(tokenizer)`` (base vocabulary + added tokens: the number of ids it can emit).
    ``bos/eos/pad/unk_token_id`` are the tokenizer's own attributes (None when absent). ``end_id``,
    ``pad_id`` and ``stop_token_ids`` are resolved by :func:`repo_builder.runtime.special_ids.resolve_special_ids`
    (``special_id_sources`` tells where each came from); ``end_id`` is None when no file names one, and
    ``special_ids_error`` then says what was looked at (resolve() reports it unless the user sets ``end_id``).
    ``add_bos`` is True when encoding with special tokens puts ``bos_token_id`` first.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    dir: Path
    class_name: str
    vocab_size: int
    bos_token_id: int | None = None
    eos_token_id: int | None = None
    pad_token_id: int | None = None
    unk_token_id: int | None = None
    has_chat_template: bool = False
    add_bos: bool = False
    trust_remote_code: bool = False
    end_id: int | None = None
    pad_id: int | None = None
    stop_token_ids: tuple[int, ...] = ()
    special_id_sources: dict[str, str] = Field(default_factory=dict)
    special_ids_error: str | None = None


def _json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _remote_code_need(directory: Path) -> tuple[str, str | None] | None:
    """(tokenizer class, module file or None) when loading needs code from the directory, else None."""
    import transformers

    for name in ("tokenizer_config.json", "config.json"):
        data = _json(directory / name)
        auto = data.get("auto_map") or {}
        ref = auto.get("AutoTokenizer") if isinstance(auto, dict) else None
        if isinstance(ref, (list, tuple)):
            ref = next((r for r in ref if r), None)
        if isinstance(ref, str) and "." in ref:
            module, cls = ref.rsplit(".", 1)
            module = module.split("--")[-1]
            return cls, module.replace(".", "/") + ".py"
    for name in ("tokenizer_config.json", "config.json"):
        tok_class = _json(directory / name).get("tokenizer_class")
        if isinstance(tok_class, str) and tok_class:
            base = tok_class[:-4] if tok_class.endswith("Fast") else tok_class
            if not (hasattr(transformers, tok_class) or hasattr(transformers, base)):
                return tok_class, None
            return None
    return None


def check_tokenizer_dir(tokenizer_dir: str | Path) -> Path:
    """Check that ``tokenizer_dir`` is a local directory with tokenizer files; returns it resolved.

    Raises:
        TokenizerError: not a local directory (says so when it looks like a hub id "org/name": repo-builder
            never downloads), or no tokenizer files (tokenizer.json, tokenizer.model, vocab.json + merges.txt,
            *.tiktoken, tokenizer_config.json).
    """
    text = str(tokenizer_dir)
    path = Path(text).expanduser()
    if not path.exists():
        if _HUB_ID.match(text) and not text.startswith((".", "~")):
            raise TokenizerError(
                f"'{text}' is not a local directory; it looks like a Hugging Face hub id, and repo-builder never "
                "downloads",
                path=path,
                hint=f"download it first (e.g. `huggingface-cli download {text} --local-dir DIR`) and pass DIR",
            )
        raise TokenizerError(
            "tokenizer directory does not exist on this machine",
            path=path,
            hint="pass the local directory holding tokenizer.json / tokenizer.model / "
            "tokenizer_config.json (the path the server will see)",
        )
    if not path.is_dir():
        raise TokenizerError("not a directory", path=path, hint="pass the directory, not a file inside it")
    if not has_tokenizer_files(path):
        found = sorted(p.name for p in path.iterdir())[:8]
        raise TokenizerError(
            f"no tokenizer files in the directory (need one of {describe_tokenizer_files()})"
            + (f"; found: {', '.join(found)}" if found else "; it is empty"),
            path=path,
        )
    return path.resolve()


def load_tokenizer(tokenizer_dir: str | Path, *, trust_remote_code: bool = False) -> Any:
    """Load the tokenizer as the served models do (AutoTokenizer, local files only).

    Raises:
        TokenizerError: see :func:`check_tokenizer_dir`; remote code needed while ``trust_remote_code`` is
            off (names the tokenizer class and the setting); the code file is missing; any load failure
            (with the underlying message).
    """
    path = check_tokenizer_dir(tokenizer_dir)
    need = _remote_code_need(path)
    if need is not None:
        cls, module = need
        if not trust_remote_code:
            raise TokenizerError(
                f"the tokenizer ({cls}) is not part of transformers and needs code shipped with the model; "
                "trust_remote_code is off",
                path=path,
                hint="if you trust the code in this directory, set --set trust_remote_code=true"
                + (f" (the directory must contain {module})" if module else ""),
            )
        if module is None:
            raise TokenizerError(
                f"tokenizer_class {cls} is not part of transformers and no auto_map in tokenizer_config.json or "
                "config.json points to its code",
                path=path,
                hint="add the model's tokenization_*.py and an auto_map entry, or use a tokenizer.json export",
            )
        if not (path / module).is_file():
            raise TokenizerError(
                f"trust_remote_code is on but {module} (code of {cls}) is not in the directory; "
                "repo-builder never downloads",
                path=path,
                hint=f"copy {module} from the model repository into {path}",
            )
    from .runtime.text import TokenizerLoadError
    from .runtime.text import load_tokenizer as load_as_served

    try:  # the very loader the preprocessing/postprocessing models run
        return load_as_served(path, trust_remote_code=trust_remote_code)
    except TokenizerLoadError as exc:
        raise TokenizerError(f"could not load the tokenizer: {exc}", path=path) from exc


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


#: ``tokenizer_class`` values whose special tokens and vocabulary are exactly what the files say (transformers
#: 4.x/5.x classes that take ``tokenizer.json`` as is). The LLaMA classes' defaults for a SentencePiece-only
#: folder (bos ``<s>``, eos ``</s>``, unk ``<unk>``, BOS added) are those of transformers' ``LlamaTokenizer``.
_FILE_CLASSES = frozenset(
    {
        "PreTrainedTokenizerFast",
        "TokenizersBackend",
        "LlamaTokenizer",
        "LlamaTokenizerFast",
        "GPT2Tokenizer",
        "GPT2TokenizerFast",
        "Qwen2Tokenizer",
        "Qwen2TokenizerFast",
    }
)
_LLAMA_CLASSES = frozenset({"LlamaTokenizer", "LlamaTokenizerFast"})
_LLAMA_DEFAULTS = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}


class _FileTokenizer:
    """The two attributes :func:`resolve_special_ids` reads, for a tokenizer inspected from its files."""

    def __init__(self, eos_token_id: int | None, pad_token_id: int | None) -> None:
        self.eos_token_id = eos_token_id
        self.pad_token_id = pad_token_id


def _special_id_fields(tok: Any, path: Path) -> dict[str, Any]:
    """The :class:`TokenizerInfo` fields of :func:`resolve_special_ids` for ``tok`` (a tokenizer or a
    :class:`_FileTokenizer`) of the folder ``path``: ``end_id``, ``pad_id``, ``stop_token_ids`` and
    ``special_id_sources``, or ``special_ids_error`` (what was looked at) when no end id is found."""
    try:
        resolved = resolve_special_ids(tok, path)
    except ValueError as exc:
        return {"special_ids_error": str(exc)}
    return {
        "end_id": resolved.end_id,
        "pad_id": resolved.pad_id,
        "stop_token_ids": resolved.stop_token_ids,
        "special_id_sources": dict(resolved.sources),
    }


def _token_text(value: Any) -> str | None:
    """A special token as written in tokenizer_config.json: a string or an AddedToken dict (``content``)."""
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) and value else None


class _PieceVocab:
    """The vocabulary of a SentencePiece model as the few dict operations :func:`inspect_tokenizer_files` needs
    ({piece: id} plus added tokens), asked of the processor instead of building the 32,000-entry dict
    (``IdToPiece`` per id cost ~60 ms of every render of a LLaMA-class tokenizer)."""

    def __init__(self, sp: Any) -> None:
        self._sp = sp
        self._size = int(sp.GetPieceSize())
        self._extra: dict[str, int] = {}  # added tokens that are not pieces

    def _piece_id(self, piece: str) -> int | None:
        i = int(self._sp.PieceToId(piece))  # the unknown id for a text that is no piece
        return i if 0 <= i < self._size and self._sp.IdToPiece(i) == piece else None

    def get(self, piece: str) -> int | None:
        found = self._piece_id(piece)
        return found if found is not None else self._extra.get(piece)

    def setdefault(self, piece: str, token_id: int) -> int:
        found = self.get(piece)
        if found is not None:
            return found
        self._extra[piece] = token_id
        return token_id

    def values(self) -> set[int]:
        """The distinct ids: every piece id and the added tokens' ids."""
        return set(range(self._size)) | set(self._extra.values())


def inspect_tokenizer_files(path: Path) -> TokenizerInfo | None:
    """The render-time facts of a tokenizer read from its files, without transformers; None when the layout
    needs transformers (see the module docstring).

    ``tokenizer.json`` is read with ``tokenizers.Tokenizer.from_file``; a SentencePiece ``tokenizer.model``
    (LLaMA-class, no ``tokenizer.json``) with ``sentencepiece``. Special tokens come from
    ``tokenizer_config.json`` and ``special_tokens_map.json``; ``vocab_size`` counts the base vocabulary plus
    every added token (``len(tokenizer)`` in transformers).
    """
    config = _json(path / "tokenizer_config.json")
    if "auto_map" in config or "auto_map" in _json(path / "config.json"):
        return None
    cls = config.get("tokenizer_class") or ("PreTrainedTokenizerFast" if (path / "tokenizer.json").is_file() else None)
    if not isinstance(cls, str) or cls not in _FILE_CLASSES:  # a hand-edited file may hold any JSON value
        return None
    specials = {**_json(path / "special_tokens_map.json"), **config}
    text = {name: _token_text(specials.get(name)) for name in ("bos_token", "eos_token", "pad_token", "unk_token")}
    added = {
        int(k): _token_text(v)
        for k, v in (config.get("added_tokens_decoder") or {}).items()
        if str(k).isdigit() and _token_text(v)
    }
    vocab: dict[str, int] | _PieceVocab
    to_id: Callable[[str], int | None]
    if (path / "tokenizer.json").is_file():
        from tokenizers import Tokenizer

        try:
            tok = Tokenizer.from_file(str(path / "tokenizer.json"))
        except Exception:  # noqa: BLE001 - a file tokenizers cannot read: let AutoTokenizer report it
            return None
        vocab = tok.get_vocab(with_added_tokens=True)
        if text["eos_token"] is None:
            return None  # the class would fill it from its own defaults
        to_id = vocab.get
        add_bos_default = None
        encoded = tok.encode("a", add_special_tokens=True).ids
    elif (path / "tokenizer.model").is_file() and cls in _LLAMA_CLASSES:
        import sentencepiece

        sp = sentencepiece.SentencePieceProcessor()
        try:
            if not sp.Load(str(path / "tokenizer.model")):
                return None
        except Exception:  # noqa: BLE001 - e.g. Llama 3's tiktoken file named tokenizer.model
            return None
        vocab = _PieceVocab(sp)
        text = {k: v if v is not None or k == "pad_token" else _LLAMA_DEFAULTS[k] for k, v in text.items()}
        to_id = vocab.get
        add_bos_default = True
        encoded = None
    else:
        return None
    for token_id, content in added.items():
        vocab.setdefault(content, token_id)  # type: ignore[arg-type]
    ids: dict[str, Any] = {name[:-6] + "_token_id": (to_id(t) if t is not None else None) for name, t in text.items()}
    if text["eos_token"] is not None and ids["eos_token_id"] is None:
        return None  # a special token missing from the vocabulary: let AutoTokenizer say what it does
    bos = ids["bos_token_id"]
    if "add_bos_token" in config and cls in _LLAMA_CLASSES | {"PreTrainedTokenizerFast", "TokenizersBackend"}:
        add_bos = bool(config["add_bos_token"]) and bos is not None
    elif encoded is not None:
        add_bos = bos is not None and bool(encoded) and encoded[0] == bos
    else:
        add_bos = bool(add_bos_default) and bos is not None
    fields = _special_id_fields(_FileTokenizer(ids["eos_token_id"], ids["pad_token_id"]), path)
    chat = bool(config.get("chat_template")) or (path / "chat_template.jinja").is_file()
    return TokenizerInfo(
        dir=path.resolve(),
        class_name=str(cls),
        vocab_size=len(set(vocab.values())),
        has_chat_template=chat,
        add_bos=add_bos,
        **ids,
        **fields,
    )


def inspect_tokenizer(tokenizer_dir: str | Path, *, trust_remote_code: bool = False) -> TokenizerInfo:
    """Load ``tokenizer_dir`` and describe it.

    Returns:
        :class:`TokenizerInfo`.
    Raises:
        TokenizerError: see :func:`load_tokenizer`.
    """
    path = check_tokenizer_dir(tokenizer_dir)
    from_files = inspect_tokenizer_files(path)
    if from_files is not None:
        return from_files.model_copy(update={"trust_remote_code": trust_remote_code})
    tok = load_tokenizer(tokenizer_dir, trust_remote_code=trust_remote_code)
    bos = _int_or_none(getattr(tok, "bos_token_id", None))
    add_bos = False
    if bos is not None:
        try:
            ids = tok.encode("a", add_special_tokens=True)
            add_bos = bool(ids) and ids[0] == bos
        except Exception:  # pragma: no cover - a tokenizer that cannot encode "a" is reported at run time
            add_bos = False
    chat = getattr(tok, "chat_template", None)
    fields = _special_id_fields(tok, path)
    return TokenizerInfo(
        dir=path,
        class_name=type(tok).__name__,
        vocab_size=len(tok),
        bos_token_id=bos,
        eos_token_id=_int_or_none(getattr(tok, "eos_token_id", None)),
        pad_token_id=_int_or_none(getattr(tok, "pad_token_id", None)),
        unk_token_id=_int_or_none(getattr(tok, "unk_token_id", None)),
        has_chat_template=bool(chat),
        add_bos=add_bos,
        trust_remote_code=trust_remote_code,
        **fields,
    )
