"""End id / pad id / extra stop ids from model files (runtime/special_ids.py): B20, B21."""

from __future__ import annotations

import json

import pytest
from conftest import asset
from transformers import AutoTokenizer

from repo_builder.runtime.special_ids import resolve_special_ids


def load(name: str):
    return AutoTokenizer.from_pretrained(str(asset(name)), local_files_only=True)


def test_llama31_generation_config_wins():
    tok = load("llama3.1_tokenizer")
    ids = resolve_special_ids(tok, asset("llama3.1_tokenizer"))
    assert (ids.end_id, ids.pad_id, ids.stop_token_ids) == (128001, 128004, ())
    assert ids.sources == {
        "end_id": "generation_config.json eos_token_id",
        "pad_id": "generation_config.json pad_token_id",
    }


def test_qwen25_eos_list_without_tokenizer():
    """generation_config eos [151645, 151643]: the first is the end id, the rest stop ids; pad 151643."""
    d = asset("hf_model_configs", "qwen2.5-3b-instruct")
    ids = resolve_special_ids(None, d)
    assert (ids.end_id, ids.stop_token_ids, ids.pad_id) == (151645, (151643,), 151643)
    assert ids.sources["stop_token_ids"] == "generation_config.json eos_token_id"


def test_sentencepiece_pad_falls_back_to_end_id_and_tokenizer_is_not_changed():
    tok = load("mistral_v1_tokenizer")
    assert tok.pad_token is None
    ids = resolve_special_ids(tok, asset("mistral_v1_tokenizer"))
    assert (ids.end_id, ids.pad_id) == (2, 2)
    assert ids.sources == {"end_id": "tokenizer.eos_token_id", "pad_id": "end_id"}
    assert tok.pad_token is None  # never assigned (B21)


def test_hf_dir_config_json_pad():
    ids = resolve_special_ids(load("sp_tiny_hf_tokenizer"), asset("sp_tiny_hf_tokenizer"))
    assert (ids.end_id, ids.pad_id) == (2, 0)
    assert ids.sources["pad_id"] == "config.json pad_token_id"


def test_qwen1_tiktoken_ids_from_generation_config_b20():
    """Qwen-1's tokenizer has eos_token None (B20); its files give 151643."""
    ids = resolve_special_ids(None, asset("qwen1_tiktoken"))
    assert (ids.end_id, ids.pad_id) == (151643, 151643)


def test_explicit_values_win():
    d = asset("hf_model_configs", "qwen2.5-3b-instruct")
    ids = resolve_special_ids(None, d, explicit_end_id=151643, explicit_pad_id=0)
    assert (ids.end_id, ids.pad_id, ids.stop_token_ids) == (151643, 0, (151645,))
    assert ids.sources["end_id"] == "explicit" and ids.sources["pad_id"] == "explicit"


class ReadOnlyPadTokenizer:
    """Stands in for a remote-code tokenizer (ChatGLM) whose pad_token cannot be set (B21): the real
    ChatGLM code cannot be loaded here (tokenization_chatglm.py is not shipped with the assets)."""

    eos_token_id = 2

    @property
    def pad_token_id(self):
        return None

    @property
    def pad_token(self):
        return None

    @pad_token.setter
    def pad_token(self, value):
        raise AttributeError("can't set attribute 'pad_token'")


def test_read_only_pad_token_b21(tmp_path):
    ids = resolve_special_ids(ReadOnlyPadTokenizer(), tmp_path)
    assert (ids.end_id, ids.pad_id) == (2, 2)


def test_config_json_pad_for_chatglm_dir():
    ids = resolve_special_ids(ReadOnlyPadTokenizer(), asset("chatglm2_tokenizer"))
    assert (ids.end_id, ids.pad_id) == (2, 0)
    assert ids.sources["end_id"] == "config.json eos_token_id"


class NoEos:
    eos_token_id = None
    pad_token_id = None


def test_no_end_id_names_files_b20(tmp_path):
    with pytest.raises(ValueError) as exc:
        resolve_special_ids(NoEos(), tmp_path)
    text = str(exc.value)
    assert str(tmp_path / "generation_config.json") in text and str(tmp_path / "config.json") in text
    assert "tokenizer.eos_token_id" in text and "end_id" in text


def test_model_dirs_are_read_after_tokenizer_dir(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    (model / "generation_config.json").write_text(json.dumps({"eos_token_id": [7, 9, 7]}))
    ids = resolve_special_ids(NoEos(), tmp_path, model_dirs=[model])
    assert (ids.end_id, ids.stop_token_ids, ids.pad_id) == (7, (9,), 7)


def test_bad_json_names_file(tmp_path):
    (tmp_path / "generation_config.json").write_text("{oops")
    with pytest.raises(ValueError, match="generation_config.json"):
        resolve_special_ids(None, tmp_path)
