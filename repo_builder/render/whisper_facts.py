"""The facts layout ``whisper`` reads from a Hugging Face Whisper checkpoint (:func:`whisper_facts`: mel bins,
special ids, languages, the audio window), every one cross-checked between its files. Moved here from
:mod:`.whisper`, which re-exports every name.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import EngineError, TokenizerError

_TOKEN_NAMES = {
    "eot": "<|endoftext|>",
    "sot": "<|startoftranscript|>",
    "translate": "<|translate|>",
    "transcribe": "<|transcribe|>",
    "notimestamps": "<|notimestamps|>",
}


@dataclass(frozen=True)
class WhisperFacts:
    """What the layout needs from a Whisper checkpoint (every field read from its files).

    Attributes:
        num_mel_bins: mel bands of the encoder input (config ``num_mel_bins``; 80, or 128 for large-v3).
        vocab_size: config ``vocab_size`` (51865 for 99 languages, 51866 for 100, 51864 for ``.en``).
        num_languages: language tokens between ``<|startoftranscript|>`` and ``<|translate|>``.
        special_ids: {eot, sot, translate, transcribe, notimestamps: id} from tokenizer.json.
        languages: the language codes in id order (``en`` for ``<|en|>``).
        multilingual: vocab_size >= 51865 (OpenAI's ``is_multilingual`` rule).
        max_target_positions: decoder positions (prompt + generated tokens; 448).
        sampling_rate: Hz of ``WAV`` (16000); hop_length, n_fft: samples.
        chunk_seconds: the encoder window (30 s = 2 x max_source_positions frames of hop_length samples).
        default_prefix: the decoder prompt for an empty ``TEXT_PREFIX``.
    """

    num_mel_bins: int
    vocab_size: int
    num_languages: int
    special_ids: dict[str, int]
    languages: list[str]
    multilingual: bool
    max_target_positions: int
    sampling_rate: int
    hop_length: int
    n_fft: int
    chunk_seconds: int
    default_prefix: str
    default_prefix_ids: list[int] = field(default_factory=list)


def _read_json(path: Path, what: type[Exception] = EngineError) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise what(f"missing {path.name}", path=path) from exc  # type: ignore[call-arg]
    except (OSError, ValueError) as exc:
        raise what(f"not readable JSON: {exc}", path=path) from exc  # type: ignore[call-arg]
    if not isinstance(data, dict):
        raise what("must be a JSON object", path=path)  # type: ignore[call-arg]
    return data


def _int_key(cfg: Mapping[str, Any], key: str, path: Path) -> int:
    value = cfg.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise EngineError(f"needs a positive integer {key}, got {value!r}", key=key, path=path)
    return value


def _whisper_tokens(root: Path, cfg: Mapping[str, Any], vocab: int) -> tuple[dict[str, int], dict[str, int], list[str]]:
    """(added tokens {text: id}, special ids by short name of :data:`_TOKEN_NAMES`, language codes) of the
    tokenizer.json under ``root``, checked against config.json ``cfg`` (``decoder_start_token_id``,
    ``eos_token_id``) and ``vocab``.

    Raises:
        TokenizerError: tokenizer.json missing, a special token missing, the ids between <|startoftranscript|>
            and <|translate|> not all language tokens, or ids contradicting config.json (names the key).
    """
    tok_path = root / "tokenizer.json"
    tok = _read_json(tok_path, TokenizerError)
    added = {str(t.get("content")): int(t.get("id")) for t in tok.get("added_tokens") or [] if "content" in t}
    ids: dict[str, int] = {}
    for short, name in _TOKEN_NAMES.items():
        if name not in added:
            raise TokenizerError(f"has no special token {name}", key="added_tokens", path=tok_path)
        ids[short] = added[name]
    by_id = {v: k for k, v in added.items()}
    languages = [by_id[i][2:-2] for i in range(ids["sot"] + 1, ids["translate"]) if i in by_id]
    if len(languages) != ids["translate"] - ids["sot"] - 1:
        raise TokenizerError(
            "the ids between <|startoftranscript|> and <|translate|> are not all language tokens",
            key="added_tokens",
            path=tok_path,
        )
    for key, short in (("decoder_start_token_id", "sot"), ("eos_token_id", "eot")):
        if cfg.get(key) is not None and cfg.get(key) != ids[short]:
            raise TokenizerError(
                f"{_TOKEN_NAMES[short]} is {ids[short]} in tokenizer.json but config.json {key} is {cfg.get(key)}",
                key=key,
                path=tok_path,
            )
    if ids["notimestamps"] >= vocab:
        raise TokenizerError(
            f"<|notimestamps|> is {ids['notimestamps']}, outside config.json vocab_size {vocab}",
            key="vocab_size",
            path=tok_path,
        )
    return added, ids, languages


def _audio_window(root: Path, mels: int, max_source: int) -> tuple[int, int, int, int]:
    """(sampling rate Hz, hop length, n_fft, chunk seconds) of preprocessor_config.json under ``root``
    (Whisper's defaults 16000 / 160 / 400 / 30 where absent), checked against the encoder: ``mels`` features
    and 2 x ``max_source`` frames per chunk.

    Raises:
        EngineError: feature_size not num_mel_bins, or the chunk not the encoder's window (names the key).
    """
    pre_path = root / "preprocessor_config.json"
    pre = _read_json(pre_path) if pre_path.is_file() else {}
    feature_size = pre.get("feature_size", mels)
    if feature_size != mels:
        raise EngineError(
            f"feature_size {feature_size} but config.json num_mel_bins is {mels}", key="feature_size", path=pre_path
        )
    rate, hop, n_fft = (int(pre.get(k, d)) for k, d in (("sampling_rate", 16000), ("hop_length", 160), ("n_fft", 400)))
    chunk = int(pre.get("chunk_length", 30))
    frames = 2 * max_source  # the encoder's two strided convolutions halve the frames
    if chunk * rate // hop != frames:
        raise EngineError(
            f"chunk_length {chunk} s at {rate} Hz / hop {hop} is {chunk * rate // hop} frames, but the encoder takes "
            f"2 x max_source_positions = {frames}",
            key="chunk_length",
            path=pre_path,
        )
    return rate, hop, n_fft, chunk


def whisper_facts(checkpoint: str | Path) -> WhisperFacts:
    """Read and cross-check the facts of a Hugging Face Whisper checkpoint directory.

    Raises:
        EngineError: config.json missing, not a Whisper model, a key missing, or the encoder window and the
            feature extractor disagree (names the file and key).
        TokenizerError: tokenizer.json missing, a special token missing, or its ids contradict config.json
            (``decoder_start_token_id``, ``eos_token_id``, ``vocab_size``).
    """
    root = Path(checkpoint)
    cfg_path = root / "config.json"
    cfg = _read_json(cfg_path)
    if cfg.get("model_type") != "whisper":
        raise EngineError(
            f"model_type is {cfg.get('model_type')!r}, not 'whisper'",
            key="model_type",
            path=cfg_path,
            hint="layout whisper takes a WhisperForConditionalGeneration checkpoint",
        )
    mels = _int_key(cfg, "num_mel_bins", cfg_path)
    vocab = _int_key(cfg, "vocab_size", cfg_path)
    max_target = _int_key(cfg, "max_target_positions", cfg_path)
    max_source = _int_key(cfg, "max_source_positions", cfg_path)

    added, ids, languages = _whisper_tokens(root, cfg, vocab)
    rate, hop, n_fft, chunk = _audio_window(root, mels, max_source)
    multilingual = vocab >= 51865
    names = ["<|startoftranscript|>"]
    if multilingual and "en" in languages:
        names += ["<|en|>", "<|transcribe|>"]
    names.append("<|notimestamps|>")
    prefix_ids = [added[n] for n in names]
    return WhisperFacts(
        num_mel_bins=mels,
        vocab_size=vocab,
        num_languages=len(languages),
        special_ids=ids,
        languages=languages,
        multilingual=multilingual,
        max_target_positions=max_target,
        sampling_rate=rate,
        hop_length=hop,
        n_fft=n_fft,
        chunk_seconds=chunk,
        default_prefix="".join(names),
        default_prefix_ids=prefix_ids,
    )
