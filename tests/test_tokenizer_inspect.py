"""Tokenizer inspection (repo_builder/tokenizer.py) on the test tokenizers of tests/_assets.py: B20, B21, B22."""

from __future__ import annotations

import pytest
from conftest import HF_TOKENIZERS, asset

from repo_builder.errors import TokenizerError
from repo_builder.tokenizer import inspect_tokenizer


def _sentencepiece_facts(name: str) -> tuple[int, int, int, bool]:
    """(pieces, bos, eos, add_bos) read with sentencepiece itself, not through transformers."""
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=str(asset(name, "tokenizer.model")))
    return sp.get_piece_size(), sp.bos_id(), sp.eos_id(), True


# (vocab len, bos, eos, add_bos): packaged tokenizers from their documented facts
# (repo_builder/testing.py PACKAGED_TOKENIZERS), the trained ones from sentencepiece
EXPECTED = {
    "sp_tiny_tokenizer": _sentencepiece_facts("sp_tiny_tokenizer"),
    "sp_tiny_hf_tokenizer": _sentencepiece_facts("sp_tiny_hf_tokenizer"),
    "mistral_v1_tokenizer": (32000, 1, 2, True),
    "gpt2_tokenizer": (50257, 50256, 50256, False),
    "llama3_tokenizer": (128256, 128000, 128001, False),
    "llama3.1_tokenizer": (128256, 128000, 128001, True),
    "qwen3_tokenizer": (151669, None, 151645, False),
}


@pytest.mark.parametrize("name", HF_TOKENIZERS)
def test_real_tokenizers(name):
    info = inspect_tokenizer(asset(name))
    assert (info.vocab_size, info.bos_token_id, info.eos_token_id, info.add_bos) == EXPECTED[name]
    assert info.dir == asset(name).resolve()
    assert info.end_id is not None and info.special_ids_error is None


def test_special_ids_and_sources():
    l31 = inspect_tokenizer(asset("llama3.1_tokenizer"))
    assert (l31.end_id, l31.pad_id) == (128001, 128004)
    assert l31.special_id_sources["end_id"] == "generation_config.json eos_token_id"
    qwen3 = inspect_tokenizer(asset("qwen3_tokenizer"))
    assert (qwen3.end_id, qwen3.pad_id, qwen3.has_chat_template) == (151645, 151643, True)
    llama2 = inspect_tokenizer(asset("mistral_v1_tokenizer"))
    assert (llama2.end_id, llama2.pad_id, llama2.pad_token_id) == (2, 2, None)


@pytest.mark.parametrize(
    "name,cls",
    [
        ("qwen1_tiktoken", "QWenTokenizer"),
        ("chatglm2_tokenizer", "ChatGLMTokenizer"),
        ("chatglm3_tokenizer", "ChatGLMTokenizer"),
    ],
)
def test_remote_code_tokenizers_refused_when_not_trusted(name, cls):
    with pytest.raises(TokenizerError) as exc:
        inspect_tokenizer(asset(name))
    text = str(exc.value)
    assert name in text and cls in text
    assert "trust_remote_code is off" in text and "trust_remote_code=true" in text


def test_remote_code_file_missing_when_trusted():
    with pytest.raises(TokenizerError, match="tokenization_chatglm.py.*not in the directory.*never downloads"):
        inspect_tokenizer(asset("chatglm2_tokenizer"), trust_remote_code=True)
    with pytest.raises(TokenizerError, match="QWenTokenizer.*no auto_map"):
        inspect_tokenizer(asset("qwen1_tiktoken"), trust_remote_code=True)


def test_hub_id_is_refused_b22():
    with pytest.raises(TokenizerError) as exc:
        inspect_tokenizer("meta-llama/Llama-2-7b-hf")
    text = str(exc.value)
    assert "hub id" in text and "never downloads" in text and "meta-llama/Llama-2-7b-hf" in text


def test_missing_dir_b22(tmp_path):
    with pytest.raises(TokenizerError, match="does not exist") as exc:
        inspect_tokenizer(tmp_path / "tensorrt_llm" / "tokenizer")
    assert str(tmp_path / "tensorrt_llm" / "tokenizer") in str(exc.value)


def test_dir_without_tokenizer_files():
    d = asset("hf_model_configs", "qwen2.5-3b-instruct")
    with pytest.raises(TokenizerError, match="no tokenizer files.*found: config.json, generation_config.json"):
        inspect_tokenizer(d)


def test_file_instead_of_dir():
    with pytest.raises(TokenizerError, match="not a directory"):
        inspect_tokenizer(asset("mistral_v1_tokenizer", "tokenizer.model"))


def test_load_failure_carries_underlying_message(tmp_path):
    (tmp_path / "tokenizer.json").write_text("{not json")
    with pytest.raises(TokenizerError, match="could not load the tokenizer") as exc:
        inspect_tokenizer(tmp_path)
    assert str(tmp_path) in str(exc.value)


def test_no_end_id_is_recorded_not_raised(tmp_path):
    """B20 at inspection time: recorded, so that an explicit end_id can still fix it in resolve()."""
    import shutil

    shutil.copy(asset("gpt2_tokenizer", "vocab.json"), tmp_path / "vocab.json")
    shutil.copy(asset("gpt2_tokenizer", "merges.txt"), tmp_path / "merges.txt")
    (tmp_path / "tokenizer_config.json").write_text(
        '{"tokenizer_class": "GPT2Tokenizer", "eos_token": null, "bos_token": null, "unk_token": null}'
    )
    info = inspect_tokenizer(tmp_path)
    assert info.eos_token_id is None
    assert info.end_id is None and "no end id found" in info.special_ids_error
