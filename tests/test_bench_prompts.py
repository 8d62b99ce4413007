"""Benchmark prompts and request building (no server)."""

from __future__ import annotations

import json

import pytest
from conftest import asset

from repo_builder.bench import (
    WORDS_PER_TOKEN,
    BenchSettings,
    Prompt,
    build_request,
    load_prompts,
    parse_concurrency,
    synthetic_prompts,
)
from repo_builder.client import ModelInfo
from repo_builder.errors import ClientError


def test_word_approximation_without_tokenizer():
    prompts = synthetic_prompts(5, 100, None, seed=1)
    assert all(len(p.text.split()) == round(100 * WORDS_PER_TOKEN) for p in prompts)
    assert len({p.text for p in prompts}) == 5  # distinct prompts
    assert len({tuple(p.text.split()[:3]) for p in prompts}) == 5  # no two share a 3-word prefix
    assert synthetic_prompts(5, 100, None, seed=1) == prompts  # deterministic per seed
    assert synthetic_prompts(5, 100, None, seed=2) != prompts


@pytest.mark.parametrize("name", ["mistral_v1_tokenizer", "gpt2_tokenizer"])
def test_tokenizer_sized_prompts(name):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(asset(name)))
    for p in synthetic_prompts(4, 64, tok):
        n = len(tok.encode(p.text, add_special_tokens=False))
        assert abs(n - 64) <= 2, n  # cut at exactly 64 ids; re-encoding may move the boundary by a token


def test_load_prompts_accepts_field_spellings_and_names_bad_lines(tmp_path):
    f = tmp_path / "p.jsonl"
    f.write_text('{"text": "a"}\n\n{"prompt": "b", "output_tokens": 5}\n{"text_input": "c", "max_tokens": 7}\n')
    assert load_prompts(f) == [Prompt("a"), Prompt("b", 5), Prompt("c", 7)]
    f.write_text('{"text": "a"}\nnot json\n')
    with pytest.raises(ClientError, match="line 2") as exc:
        load_prompts(f)
    assert exc.value.key == "--prompts"
    f.write_text(json.dumps({"text": ""}) + "\n")
    with pytest.raises(ClientError, match="line 1"):
        load_prompts(f)
    with pytest.raises(ClientError) as exc:
        load_prompts(tmp_path / "missing.jsonl")
    assert exc.value.key == "--prompts"


def test_parse_concurrency_and_settings_checks():
    assert parse_concurrency("1,4, 16") == [1, 4, 16]
    for bad in ("", "0", "1,x", "-2"):
        with pytest.raises(ClientError) as exc:
            parse_concurrency(bad)
        assert exc.value.key == "--concurrency"
    with pytest.raises(ClientError) as exc:
        BenchSettings(requests=0).check()
    assert exc.value.key == "--requests"


def _info(inputs: list[str]) -> ModelInfo:
    return ModelInfo.from_config(
        {
            "name": "ensemble",
            "max_batch_size": 8,
            "input": [
                {"name": n, "data_type": "TYPE_INT32", "dims": [1], "optional": n not in ("text_input", "max_tokens")}
                for n in inputs
            ],
        }
    )


def test_build_request_asks_for_exact_output_length_where_supported():
    s = BenchSettings(output_tokens=32, stream=True, end_id=-1)
    new = build_request(
        s, _info(["text_input", "max_tokens", "min_tokens", "exclude_input_in_output", "end_id"]), Prompt("hi")
    )
    assert (new.max_tokens, new.min_tokens, new.exclude_input_in_output, new.end_id, new.stream) == (
        32,
        32,
        True,
        -1,
        True,
    )
    old = build_request(
        BenchSettings(output_tokens=8), _info(["text_input", "max_tokens", "min_length"]), Prompt("hi", output_tokens=3)
    )
    assert (old.max_tokens, old.min_tokens, old.exclude_input_in_output) == (3, 3, None)  # min_length alias
    bare = build_request(
        BenchSettings(output_tokens=8, min_tokens=False),
        _info(["text_input", "max_tokens", "min_tokens"]),
        Prompt("hi"),
    )
    assert bare.min_tokens is None
