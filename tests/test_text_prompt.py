"""Tokenizer loading (B21, B22), prompt encoding (B18, chat template) and length checks (B34)."""

from __future__ import annotations

import shutil

import pytest
from _text_support import sentencepiece
from _text_support import tokenizer as load
from conftest import HF_TOKENIZERS, asset

from repo_builder.runtime.text import (
    TokenizerLoadError,
    check_lengths,
    decode_ids,
    encode_prompt,
    load_tokenizer,
    render_chat,
)
from repo_builder.runtime.triton_io import RequestError

# ---- loading: local directories only ---------------------------------------------------------------


@pytest.mark.parametrize("path", ["/tensorrt_llm/tokenizer", "meta-llama/Llama-2-7b-hf"])
def test_b22_path_missing_in_this_filesystem_is_not_a_hub_id(path):
    with pytest.raises(TokenizerLoadError) as err:
        load_tokenizer(path)
    assert path in str(err.value) and "never downloads" in str(err.value)


def test_directory_without_tokenizer_files(tmp_path):
    with pytest.raises(TokenizerLoadError) as err:
        load_tokenizer(tmp_path, key="tokenizer_dir")
    assert str(tmp_path) in str(err.value) and "tokenizer.json" in str(err.value)


@pytest.mark.parametrize("name", ["chatglm2_tokenizer", "qwen1_tiktoken"])
def test_b21_remote_code_tokenizer_names_the_switch(name):
    """ChatGLM2 / Qwen-1 need their own tokenizer code, which the assets do not ship."""
    with pytest.raises(TokenizerLoadError) as err:
        load_tokenizer(asset(name))
    assert "trust_remote_code" in str(err.value) and name in str(err.value)


@pytest.mark.parametrize("name", HF_TOKENIZERS)
def test_every_local_tokenizer_loads(name):
    from test_tokenizer_inspect import EXPECTED

    tok = load_tokenizer(asset(name))
    assert len(tok) == EXPECTED[name][0]


def test_loads_from_a_copy_without_network(tmp_path):
    dst = tmp_path / "tok"
    shutil.copytree(asset("gpt2_tokenizer"), dst)
    assert load_tokenizer(dst).encode("What is machine learning?") == [2061, 318, 4572, 4673, 30]


# ---- B18: the HF default encoding --------------------------------------------------------------------


@pytest.mark.parametrize("name", HF_TOKENIZERS)
@pytest.mark.parametrize("prompt", ["how are you", "What is machine learning?"])
def test_b18_add_special_tokens_true_is_the_hf_default(name, prompt):
    tok = load(name)
    assert encode_prompt(tok, prompt) == tok(prompt)["input_ids"]


@pytest.mark.parametrize("name", ["mistral_v1_tokenizer", "sp_tiny_tokenizer"])
def test_b18_sentencepiece_ids(name):
    """LLaMA-style SentencePiece (dummy prefix, byte fallback): BOS then sentencepiece's own ids."""
    tok, sp = load(name), sentencepiece(name)
    for text in ("What is machine learning?", "你有点聪明 🧘\u200d♀️ привет"):
        ids = sp.encode(text)
        assert sp.id_to_piece(ids[0]).startswith("\u2581")  # the dummy prefix
        assert encode_prompt(tok, text) == [sp.bos_id()] + ids
        assert encode_prompt(tok, text, add_special_tokens=False) == ids
    assert any(sp.id_to_piece(i).startswith("<0x") for i in sp.encode("你有点聪明 🧘"))  # byte fallback
    assert encode_prompt(tok, "how are you")[0] == sp.bos_id() == 1


def test_b18_chatglm2_is_documented_not_loaded():
    """ChatGLM2's prefix ([gMASK]=64790, sop=64792) comes from its remote tokenizer code, which is not in
    the assets: AutoTokenizer cannot load it here without trust_remote_code + tokenization_chatglm.py."""
    with pytest.raises(TokenizerLoadError):
        load_tokenizer(asset("chatglm2_tokenizer"), trust_remote_code=True)


def test_empty_prompt_is_a_request_error():
    with pytest.raises(RequestError) as err:
        encode_prompt(load("gpt2_tokenizer"), "")
    assert err.value.field == "text_input"


# ---- chat template -------------------------------------------------------------------------------------


def test_chat_template_llama3_single_bos():
    tok = load("llama3_tokenizer")
    rendered = render_chat(tok, "Hi there")
    assert rendered.startswith("<|begin_of_text|>")
    ids = encode_prompt(tok, "Hi there", chat_template=True)
    assert ids.count(tok.bos_token_id) == 1 and ids[0] == tok.bos_token_id
    assert ids == tok.encode(rendered, add_special_tokens=False)


def test_chat_template_qwen3_user_message():
    tok = load("qwen3_tokenizer")
    ids = encode_prompt(tok, "Hi there", chat_template=True)
    text = tok.decode(ids)
    assert text.startswith("<|im_start|>user\nHi there<|im_end|>") and text.endswith("<|im_start|>assistant\n")


def _template_ids(tok, messages) -> list[int]:
    got = tok.apply_chat_template(messages, tokenize=True, add_generation_prompt=True)
    return list(got["input_ids"] if hasattr(got, "keys") else got)


@pytest.mark.parametrize("name", ["llama3_tokenizer", "qwen3_tokenizer"])
def test_prompt_already_holding_the_chat_template_is_not_templated_again(name):
    """Issue 28: a client (or repo-builder openai) that rendered the chat itself sends the rendered text; with
    apply_chat_template on, preprocessing must encode it as it is: one template, one BOS, the ids of
    apply_chat_template(tokenize=True). Also for a conversation with a system turn. A plain prompt, also
    one that names a role, is still templated."""
    tok = load(name)
    once = render_chat(tok, "Hi there")
    assert render_chat(tok, once) == once
    assert encode_prompt(tok, once, chat_template=True) == _template_ids(tok, [{"role": "user", "content": "Hi there"}])
    chat = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Name a colour."}]
    rendered = tok.apply_chat_template(chat, tokenize=False, add_generation_prompt=True)
    assert render_chat(tok, rendered) == rendered
    assert encode_prompt(tok, rendered, chat_template=True) == _template_ids(tok, chat)
    plain = "You are the assistant. What is the user asking?"
    assert render_chat(tok, plain) != plain and plain in render_chat(tok, plain)


# ---- B34: lengths ------------------------------------------------------------------------------------


def test_b34_prompt_longer_than_max_input_len():
    with pytest.raises(RequestError) as err:
        check_lengths(5056, 100, max_input_len=2048, max_seq_len=2560)
    assert err.value.field == "text_input"
    assert "5056" in str(err.value) and "2048" in str(err.value)


def test_b34_prompt_plus_max_tokens_above_max_seq_len():
    with pytest.raises(RequestError) as err:
        check_lengths(2000, 1000, max_input_len=2048, max_seq_len=2560)
    assert err.value.field == "max_tokens"
    assert all(n in str(err.value) for n in ("2000", "1000", "3000", "2560", "560"))


def test_b34_within_limits_and_unknown_limits():
    check_lengths(2000, 560, max_input_len=2048, max_seq_len=2560)
    check_lengths(10**6, 10**6, max_input_len=None, max_seq_len=None)


def test_b34_counts_tokens_with_the_same_tokenizer():
    tok = load("mistral_v1_tokenizer")
    prompt = "hello " * 3000
    n = len(encode_prompt(tok, prompt))
    assert n > 2048
    with pytest.raises(RequestError, match=f"the prompt is {n} tokens"):
        check_lengths(n, 10, max_input_len=2048, max_seq_len=2560)


# ---- B27 decode -------------------------------------------------------------------------------------


def test_b27_decode_skips_special_tokens():
    llama = load("mistral_v1_tokenizer")
    ids = [1] + llama.encode("What is machine learning?", add_special_tokens=False) + [2]
    assert decode_ids(llama, ids) == "What is machine learning?"
    assert decode_ids(llama, ids, skip_special_tokens=False).startswith("<s>")
    qwen = load("qwen3_tokenizer")
    ids = qwen.encode("Machine learning is a field.") + [151645]
    assert "<|im_end|>" not in decode_ids(qwen, ids)
    assert decode_ids(qwen, ids, skip_special_tokens=False).endswith("<|im_end|>")
