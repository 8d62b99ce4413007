"""A tiny random-weight Whisper checkpoint for the tests of layout ``whisper`` (``render --layout whisper``).

:func:`make_tiny_whisper` writes a ``WhisperForConditionalGeneration`` checkpoint (d_model 64, 2 encoder + 2
decoder layers, 80 mel bins, about 3.6 M parameters, 14 MB in fp32) with a real multilingual Whisper tokenizer
and a ``WhisperFeatureExtractor`` beside it, so the directory is a complete ``--engine-dir`` for the layout.
Its transcripts are gibberish: the weights are random.

Tokenizer: the byte-level BPE ranks are OpenAI's ``whisper/assets/multilingual.tiktoken`` (50257 ranks, MIT),
shipped by the PyPI sdist ``openai-whisper==20250625`` (installed with ``--no-deps`` by
``scripts/setup_env.sh``, never imported), converted to a ``tokenizer.json`` with transformers'
``TikTokenConverter``. The special tokens follow openai/whisper ``whisper/tokenizer.py`` (tag v20250625):
``<|endoftext|>``, ``<|startoftranscript|>``, one ``<|xx|>`` per language, ``<|translate|>``,
``<|transcribe|>``, ``<|startoflm|>``, ``<|startofprev|>``, ``<|nospeech|>``, ``<|notimestamps|>``, then 1501
timestamps ``<|0.00|>`` ... ``<|30.00|>``; with 99 languages that is vocabulary 51865 (tiny ... large-v2), with
100 (``yue`` added) 51866 (large-v3).
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

from .errors import RepoBuilderError

#: Whisper's language codes in token order (openai/whisper ``whisper/tokenizer.py`` ``LANGUAGES``, v20250625);
#: the first 99 are tiny ... large-v2's, ``yue`` is large-v3's 100th.
WHISPER_LANGUAGES = (
    "en zh de es ru ko fr ja pt tr pl ca nl ar sv it id hi fi vi he uk el ms cs ro da hu ta no th ur hr bg lt la "
    "mi ml cy sk te fa lv bn sr az sl kn et mk br eu is hy ne mn bs kk sq sw gl mr pa si km sn yo so af oc ka be "
    "tg sd gu am yi lo uz fo ht ps tk nn mt sa lb my bo tl mg as tt haw ln ha ba jw su yue"
).split()
#: GPT-2's pre-tokenizer pattern, which Whisper's tiktoken encodings use (openai/whisper ``get_encoding``).
_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
OPENAI_WHISPER_PIP = "openai-whisper==20250625"


def whisper_assets_dir() -> Path:
    """``whisper/assets`` of the installed ``openai-whisper`` package (found, not imported).

    Raises:
        RepoBuilderError: the package is not installed (the hint names the pip line).
    """
    spec = importlib.util.find_spec("whisper")
    if spec is None or not spec.submodule_search_locations:
        raise RepoBuilderError(
            "the PyPI package that ships Whisper's tokenizer ranks is not installed: openai-whisper",
            hint=f"pip install --no-deps {OPENAI_WHISPER_PIP}",
        )
    path = Path(list(spec.submodule_search_locations)[0]) / "assets"
    if not (path / "multilingual.tiktoken").is_file():
        raise RepoBuilderError("openai-whisper has no assets/multilingual.tiktoken", path=path)
    return path


def special_token_names(num_languages: int) -> list[str]:
    """The special tokens after the 50257 BPE ranks, in id order (timestamps excluded)."""
    langs = [f"<|{code}|>" for code in WHISPER_LANGUAGES[:num_languages]]
    return [
        "<|endoftext|>",
        "<|startoftranscript|>",
        *langs,
        "<|translate|>",
        "<|transcribe|>",
        "<|startoflm|>",
        "<|startofprev|>",
        "<|nospeech|>",
        "<|notimestamps|>",
    ]


def write_whisper_tokenizer(out_dir: str | Path, *, num_languages: int = 99) -> Path:
    """``tokenizer.json`` + ``tokenizer_config.json`` of Whisper's multilingual tokenizer in ``out_dir``.

    Raises:
        RepoBuilderError: openai-whisper is not installed.
    """
    from tokenizers import AddedToken
    from transformers.convert_slow_tokenizer import TikTokenConverter

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    ranks = whisper_assets_dir() / "multilingual.tiktoken"
    tok = TikTokenConverter(vocab_file=str(ranks), pattern=_PATTERN).converted()
    specials = special_token_names(num_languages)
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in specials])
    tok.add_tokens([AddedToken(f"<|{i * 0.02:.2f}|>", normalized=False) for i in range(1501)])
    tok.save(str(out / "tokenizer.json"))
    config = {
        "tokenizer_class": "WhisperTokenizer",
        "bos_token": "<|endoftext|>",
        "eos_token": "<|endoftext|>",
        "unk_token": "<|endoftext|>",
        "pad_token": "<|endoftext|>",
        "model_max_length": 1024,
    }
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    return out


def make_tiny_whisper(out_dir: str | Path, *, num_languages: int = 99, seed: int = 0) -> Path:
    """Write a random-weight tiny ``WhisperForConditionalGeneration`` checkpoint with its tokenizer and
    feature extractor to ``out_dir`` (see the module docstring). ``generation_config.json`` suppresses no
    tokens, so transformers' greedy ``generate`` is a plain argmax loop. The weights are drawn with std 0.3
    (not 0.02) so that the transcript varies from token to token and with the audio.

    Returns:
        ``out_dir``.
    Raises:
        RepoBuilderError: openai-whisper is not installed.
    """
    import torch
    from transformers import WhisperConfig, WhisperFeatureExtractor, WhisperForConditionalGeneration

    out = Path(out_dir)
    write_whisper_tokenizer(out, num_languages=num_languages)
    n_special = len(special_token_names(num_languages))
    vocab = 50257 + n_special + 1501
    sot = 50258
    config = WhisperConfig(
        vocab_size=vocab,
        num_mel_bins=80,
        d_model=64,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        encoder_ffn_dim=128,
        decoder_ffn_dim=128,
        max_source_positions=1500,
        max_target_positions=448,
        decoder_start_token_id=sot,
        eos_token_id=50257,
        bos_token_id=50257,
        pad_token_id=50257,
        begin_suppress_tokens=None,
        suppress_tokens=None,
        init_std=0.3,  # the default 0.02 makes a random tiny model repeat one token whatever the audio
    )
    torch.manual_seed(seed)
    model = WhisperForConditionalGeneration(config).eval()
    model.generation_config.suppress_tokens = None
    model.generation_config.begin_suppress_tokens = None
    model.generation_config.forced_decoder_ids = None
    model.save_pretrained(out)
    WhisperFeatureExtractor(feature_size=80).save_pretrained(out)
    return out
