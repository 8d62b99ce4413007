"""Property: streamed deltas concatenate to the non-streaming decode, for every local tokenizer.

For every test tokenizer that AutoTokenizer loads without remote code (tests/_assets.py
HF_TOKENIZERS: the tiny trained SentencePiece (tokenizer.model alone and with its tokenizer.json), Mistral v1
SentencePiece, GPT-2, Llama 3, Llama 3.1, Qwen3; chatglm2/3 and qwen1 need remote code and are left out),
random token-id sequences and the encodings of random texts (CJK, emoji
with ZWJ sequences and flags, Cyrillic, ASCII punctuation, newlines, special-token texts) are split into
random chunk sizes and streamed through IncrementalDetokenizer, with skip_special_tokens true and false:

    "".join(deltas) + flush() == tokenizer.decode(ids, skip_special_tokens=...)

For text that was encoded from valid UTF-8, no delta contains U+FFFD.

Excluded by `assume`, exactly the documented edge 2 of repo_builder/runtime/detokenizer.py: a
SentencePiece byte-fallback run (consecutive <0xNN> tokens) that is invalid UTF-8 as a whole but has a
valid, complete prefix at a token boundary (ByteFallback then renders the whole run as U+FFFD in
`decode`, after the stream already sent the valid characters). tests/test_detokenizer_cases.py pins the
behaviour in that case.
"""

from __future__ import annotations

import pytest
from _text_support import byte_run_invalidated
from _text_support import tokenizer as load
from conftest import HF_TOKENIZERS
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from repo_builder.runtime.detokenizer import REPLACEMENT_CHAR, DetokenizerFactory

PIECES = [
    "你有点聪明",
    "迭代",
    "🧘\u200d♀️",
    "👨\u200d👩\u200d👧\u200d👦",
    "🇩🇪",
    "😀",
    "привет мир",
    "Ёжик",
    "Deep learning is a subset of machine learning",
    " the cat",
    "Hello , world !",
    "it 's",
    "\n",
    "\n\n",
    "  ",
    "\t",
    "a.b",
    "x",
    "</s>",
    "<s>",
    "<|im_end|>",
    "<|endoftext|>",
    "€",
    "ß",
    "naïve",
    "日本語の文章",
]

texts = st.lists(st.one_of(st.sampled_from(PIECES), st.text(max_size=6)), min_size=1, max_size=8).map("".join)


def stream(factory, ids: list[int], sizes: list[int]) -> list[str]:
    d = factory()
    out, i, j = [], 0, 0
    while i < len(ids):
        k = sizes[j % len(sizes)]
        out.append(d.add(ids[i : i + k]))
        i, j = i + k, j + 1
    out.append(d.flush())
    return out


@pytest.fixture(scope="module", params=HF_TOKENIZERS)
def tok(request):
    return load(request.param)


SETTINGS = settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)


@pytest.mark.parametrize("skip", [True, False])
@SETTINGS
@given(data=st.data())
def test_random_ids_concatenate_to_decode(tok, skip, data):
    vocab = len(tok)
    special = sorted(set(tok.all_special_ids))
    # mix uniformly random ids with byte-ish low ids and special ids, so byte runs and specials occur
    one_id = st.one_of(
        st.integers(0, vocab - 1),
        st.integers(0, 300),
        st.sampled_from(special) if special else st.integers(0, vocab - 1),
    )
    ids = data.draw(st.lists(one_id, min_size=1, max_size=60), label="ids")
    sizes = data.draw(st.lists(st.integers(1, 7), min_size=1, max_size=6), label="chunk sizes")
    assume(not byte_run_invalidated(tok, ids, skip))
    factory = DetokenizerFactory(tok, skip)
    assert "".join(stream(factory, ids, sizes)) == tok.decode(ids, skip_special_tokens=skip)


@pytest.mark.parametrize("skip", [True, False])
@SETTINGS
@given(text=texts, sizes=st.lists(st.integers(1, 9), min_size=1, max_size=6))
def test_random_text_streams_exactly_and_without_replacement_chars(tok, skip, text, sizes):
    ids = tok.encode(text, add_special_tokens=False)
    assume(ids)
    factory = DetokenizerFactory(tok, skip)
    deltas = stream(factory, ids, sizes)
    assert "".join(deltas) == tok.decode(ids, skip_special_tokens=skip)
    reference = tok.decode(ids, skip_special_tokens=skip)
    if REPLACEMENT_CHAR not in reference:  # valid UTF-8 text: never a U+FFFD in any delta
        assert not any(REPLACEMENT_CHAR in d for d in deltas)


@pytest.mark.parametrize("skip", [True, False])
@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)
@given(parts=st.lists(texts, min_size=8, max_size=30), size=st.integers(1, 4))
def test_long_streams_with_window_trimming(tok, skip, parts, size):
    """Long enough for many window cuts (context_tokens=6), also across special tokens."""
    ids: list[int] = []
    for p in parts:
        ids.extend(tok.encode(p, add_special_tokens=False))
        if tok.eos_token_id is not None:
            ids.append(tok.eos_token_id)
    assume(not byte_run_invalidated(tok, ids, skip))
    factory = DetokenizerFactory(tok, skip)
    assert "".join(stream(factory, ids, [size])) == tok.decode(ids, skip_special_tokens=skip)
