"""Text handling for the Python-backend models: one import point.

* :func:`load_tokenizer`: a tokenizer from a *local* directory only (B22: never a hub download).
* :func:`encode_prompt`: prompt -> token ids, HF-default special tokens (B18) and optional chat template.
* :func:`check_lengths`: prompt length vs the engine's ``max_input_len`` / ``max_seq_len`` (B34).
* :func:`decode_ids`: non-streaming decode with ``skip_special_tokens`` (B27).
* re-exported: :class:`~.detokenizer.IncrementalDetokenizer` and friends (streaming text, B24/B25),
  :class:`~.wordlists.WordEncoder` (stop/bad words B15/B16, embedding bias),
  :class:`~.stopstrings.StopStringMatcher` / :func:`~.stopstrings.trim_at_stop` (string stop sequences),
  :class:`~.triton_io.RequestError`.

Only the standard library, numpy and transformers are used; no ``repo_builder`` or Triton imports, so
``render`` can vendor this package as ``repo_builder_runtime/``.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .detokenizer import (  # noqa: F401
    REPLACEMENT_CHAR,
    DetokenizerCache,
    DetokenizerFactory,
    IncrementalDetokenizer,
    cleanup_active,
    decode_fn,
)
from .errors import ModelLoadError, RequestError
from .stopstrings import StopResult, StopStringMatcher, find_stop, trim_at_stop  # noqa: F401
from .tokenizer_files import TOKENIZER_FILES, describe_tokenizer_files, has_tokenizer_files  # noqa: F401
from .wordlists import WordEncoder, parse_token_ids  # noqa: F401


class TokenizerLoadError(ModelLoadError):
    """The tokenizer directory is missing, not local, or cannot be loaded; the message names the path."""


def load_tokenizer(path: str | os.PathLike[str], *, trust_remote_code: bool = False, key: str = "tokenizer_dir") -> Any:
    """Load a Hugging Face tokenizer from a local directory (``local_files_only=True``).

    Args:
        path: the tokenizer directory as the server sees it.
        trust_remote_code: allow the directory's own tokenizer code (ChatGLM, Qwen v1...), B21.
        key: the parameter name to put in error messages.
    Returns:
        the tokenizer (``transformers.PreTrainedTokenizerBase``).
    Raises:
        TokenizerLoadError: ``path`` is not a directory, holds no tokenizer file, or fails to load (the
            message names the path and, for remote-code tokenizers, the ``trust_remote_code`` switch).
    """
    p = Path(path)
    if not p.is_dir():
        raise TokenizerLoadError(
            f"{key} '{path}' is not a directory in this filesystem; repo-builder loads tokenizers from "
            "local directories only and never downloads from the Hugging Face hub "
            "(hint: mount the tokenizer into the server's filesystem and set the path it has there)"
        )
    if not has_tokenizer_files(p):
        raise TokenizerLoadError(
            f"{key} '{path}' holds none of {describe_tokenizer_files()} "
            "(hint: point it at the folder with the tokenizer files of the model)"
        )
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(str(p), local_files_only=True, trust_remote_code=trust_remote_code)
    except Exception as exc:  # transformers raises ValueError/OSError/ImportError/...
        text = str(exc)
        hint = ""
        if not trust_remote_code and (
            "trust_remote_code" in text or "custom code" in text or "does not exist" in text or _has_auto_map(p)
        ):
            hint = (
                " (hint: this tokenizer needs its own code (auto_map): set trust_remote_code to true"
                " and make sure its tokenization_*.py is in the directory)"
            )
        raise TokenizerLoadError(
            f"{key} '{path}': the tokenizer failed to load: {type(exc).__name__}: {text}{hint}"
        ) from exc


def tokenizer_from_params(params: Any, tokenizer: Any = None) -> tuple[Any, str | None]:
    """The tokenizer a model's ``tokenizer_dir``/``trust_remote_code`` parameters name, and that dir.

    Args:
        params: the model's :class:`.params.ModelParams`.
        tokenizer: an already loaded tokenizer (tests); returned as is.
    Raises:
        TokenizerLoadError: ``tokenizer_dir`` unset, not local, or unloadable.
    """
    tokenizer_dir = params.str("tokenizer_dir")
    if tokenizer is None:
        if not tokenizer_dir:
            raise TokenizerLoadError(
                f"model '{params.model_name}': parameter 'tokenizer_dir' is not set "
                "(hint: render the repository with --tokenizer-dir)"
            )
        tokenizer = load_tokenizer(tokenizer_dir, trust_remote_code=bool(params.bool("trust_remote_code", False)))
    return tokenizer, tokenizer_dir


def _has_auto_map(path: Path) -> bool:
    """True when tokenizer_config.json or config.json of ``path`` names remote code (``auto_map``)."""
    import json

    for name in ("tokenizer_config.json", "config.json"):
        try:
            if "auto_map" in json.loads((path / name).read_text(encoding="utf-8")):
                return True
        except (OSError, ValueError):
            continue
    return False


def has_chat_template(tokenizer: Any) -> bool:
    """True when the tokenizer carries a chat template (``tokenizer.chat_template``)."""
    return bool(getattr(tokenizer, "chat_template", None))


#: Stand-in user message whose rendering shows the template's text before and after a message.
_PROBE = "\x00repo-builder-chat-probe\x00"


def _template_frame(tokenizer: Any) -> tuple[str, str]:
    """(text before, text after) one user message in the tokenizer's chat template with the generation
    prompt (Mistral v1: ``("<s>[INST] ", " [/INST]")``); cached on the tokenizer object."""
    frame = getattr(tokenizer, "_repo_builder_chat_frame", None)
    if frame is None:
        rendered = tokenizer.apply_chat_template(
            [{"role": "user", "content": _PROBE}], tokenize=False, add_generation_prompt=True
        )
        before, _, after = rendered.partition(_PROBE)
        frame = (before, after)
        try:
            tokenizer._repo_builder_chat_frame = frame
        except AttributeError:
            pass
    return frame


def holds_chat_template(tokenizer: Any, prompt: str) -> bool:
    """True when ``prompt`` is already a rendered chat (by the client, or by ``repo-builder openai``): it
    starts with the template's text before a user message (with or without the BOS text), or ends with the
    generation prompt that follows the last message (a conversation with a system turn starts otherwise:
    LLaMA-3 ``<|start_header_id|>system``). Whitespace at either end is not looked at."""
    before, after = _template_frame(tokenizer)
    bos = getattr(tokenizer, "bos_token", None) or ""
    text = prompt.strip()
    heads = {before.strip(), before[len(bos) :].strip() if bos and before.startswith(bos) else ""} - {""}
    tail = after.strip()
    return any(text.startswith(h) for h in heads) or bool(tail and text.endswith(tail))


def render_chat(tokenizer: Any, prompt: str) -> str:
    """The prompt as one user message in the tokenizer's chat template, with the generation prompt; a
    prompt that already holds the template (:func:`holds_chat_template`) is returned as it is, so a chat
    is never templated twice."""
    if holds_chat_template(tokenizer, prompt):
        return prompt
    return tokenizer.apply_chat_template(
        [{"role": "user", "content": prompt}], tokenize=False, add_generation_prompt=True
    )


def encode_prompt(
    tokenizer: Any, text: str, *, add_special_tokens: bool = True, chat_template: bool = False
) -> list[int]:
    """Token ids of a prompt.

    Without a chat template: ``tokenizer.encode(text, add_special_tokens=add_special_tokens)``; with
    ``True`` this is the Hugging Face default encoding that reference runners use (B18; LLaMA-2
    ``"What is machine learning?"`` -> ``[1, 1724, 338, 4933, 6509, 29973]``).

    With ``chat_template``: the template is applied to the prompt as a single user message, unless the
    prompt already holds it (:func:`holds_chat_template`: a client rendered the chat itself).

    A text that already starts with the BOS token's text -- a rendered chat template (LLaMA-2/Mistral
    ``<s>[INST]``, LLaMA-3 ``<|begin_of_text|>``), whether rendered here or by a client such as
    ``repo-builder openai`` -- is encoded without special tokens, so no second BOS appears and the ids are
    those of Hugging Face's ``apply_chat_template(..., tokenize=True)``; otherwise ``add_special_tokens``
    applies.

    Either way a prompt that already starts with the BOS token (a client that sends ``"<s>[INST] ..."`` or
    a prompt it rendered with the chat template itself) keeps exactly one BOS: when the encoding starts
    with two BOS ids, the one the tokenizer added is dropped.

    Raises:
        RequestError: ``text_input`` is empty.
    """
    if text == "":
        raise RequestError("text_input", "is empty", "send a non-empty prompt")
    if chat_template:
        text = render_chat(tokenizer, text)
    bos = getattr(tokenizer, "bos_token", None)
    special = add_special_tokens and not (bos and text.startswith(bos))
    return _one_bos(tokenizer, list(tokenizer.encode(text, add_special_tokens=special)))


def _one_bos(tokenizer: Any, ids: list[int]) -> list[int]:
    """``ids`` without a duplicated leading BOS id (the prompt's own plus the tokenizer's)."""
    bos_id = getattr(tokenizer, "bos_token_id", None)
    if bos_id is not None and len(ids) >= 2 and ids[0] == bos_id and ids[1] == bos_id:
        return ids[1:]
    return ids


def check_lengths(
    prompt_tokens: int, max_tokens: int | None, *, max_input_len: int | None, max_seq_len: int | None
) -> None:
    """Reject a prompt the engine cannot take (B34), before it is queued.

    Args:
        prompt_tokens: prompt length in tokens.
        max_tokens: requested new tokens (the ``max_tokens`` field), or None.
        max_input_len / max_seq_len: the engine's limits in tokens (parameters from the engine
            config; None = unknown, not checked).
    Raises:
        RequestError: naming ``text_input`` (prompt longer than ``max_input_len``, or alone filling
            ``max_seq_len``) or ``max_tokens`` (prompt + max_tokens above ``max_seq_len``), with the numbers.
    """
    if max_input_len is not None and prompt_tokens > max_input_len:
        raise RequestError(
            "text_input",
            f"the prompt is {prompt_tokens} tokens, more than the engine's max_input_len of {max_input_len} tokens",
            "shorten the prompt",
        )
    if max_seq_len is not None:
        if prompt_tokens >= max_seq_len:
            raise RequestError(
                "text_input",
                f"the prompt is {prompt_tokens} tokens, which leaves no room "
                f"in the engine's max_seq_len of {max_seq_len} tokens",
                "shorten the prompt",
            )
        if max_tokens is not None and prompt_tokens + max_tokens > max_seq_len:
            raise RequestError(
                "max_tokens",
                f"prompt {prompt_tokens} tokens + max_tokens {max_tokens} = "
                f"{prompt_tokens + max_tokens} exceeds the engine's "
                f"max_seq_len of {max_seq_len} tokens",
                f"ask for at most {max_seq_len - prompt_tokens} tokens",
            )


def decode_ids(tokenizer: Any, ids: Sequence[int], *, skip_special_tokens: bool = True) -> str:
    """Non-streaming text of ``ids`` (``tokenizer.decode``); the reference the streaming deltas add up to."""
    return tokenizer.decode([int(i) for i in ids], skip_special_tokens=skip_special_tokens)
