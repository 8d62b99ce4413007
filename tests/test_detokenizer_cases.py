"""Incremental detokenizer on the reported cases (B24, B25; tests/cases/README.md), prefix-unstable tokenizers,
the documented edges, bounded per-token work, and the per-stream LRU cache."""

from __future__ import annotations

import threading

import pytest
from _text_support import B25_TEXT, b25_ids, sentencepiece
from _text_support import tokenizer as load
from conftest import asset
from transformers import AutoTokenizer

from repo_builder.runtime.detokenizer import (
    REPLACEMENT_CHAR,
    DetokenizerCache,
    DetokenizerFactory,
    IncrementalDetokenizer,
    cleanup_active,
    decode_fn,
)

B25_LONG = b25_ids("mistral_v1_tokenizer")
HELLO = sentencepiece("mistral_v1_tokenizer").piece_to_id("\u2581Hello")  # "▁Hello", read with sentencepiece


def feed(detok: IncrementalDetokenizer, ids: list[int], size: int = 1) -> list[str]:
    return [detok.add(ids[i : i + size]) for i in range(0, len(ids), size)]


@pytest.fixture(scope="module")
def llama():
    return load("mistral_v1_tokenizer")


@pytest.fixture(scope="module")
def gpt2():
    return load("gpt2_tokenizer")


# ---- B24: SentencePiece word spaces ---------------------------------------------------------------


def test_b24_per_token_stream_keeps_word_spaces(llama):
    ids = llama.encode("Deep learning is a subset of machine learning", add_special_tokens=False)
    # the reported bug: decoding each chunk alone drops every space
    assert "".join(llama.decode([i]) for i in ids) == "Deeplearningisasubsetofmachinelearning"
    deltas = feed(DetokenizerFactory(llama)(), ids)
    assert deltas == ["Deep", " learning", " is", " a", " subset", " of", " machine", " learning"]
    assert "".join(deltas) == llama.decode(ids) == "Deep learning is a subset of machine learning"


@pytest.mark.parametrize("name", ["sp_tiny_tokenizer", "mistral_v1_tokenizer", "gpt2_tokenizer", "qwen3_tokenizer"])
def test_b24_after_prompt_and_bos(name):
    tok = load(name)
    ids = tok.encode("What is deep learning? Deep learning is a subset of machine learning.")
    for skip in (True, False):
        d = DetokenizerFactory(tok, skip)()
        assert "".join(feed(d, ids)) + d.flush() == tok.decode(ids, skip_special_tokens=skip)


# ---- B25: byte-fallback characters -----------------------------------------------------------------


def test_b25_byte_tokens_are_held_until_the_character_is_complete(llama):
    assert llama.decode([235]) == REPLACEMENT_CHAR
    assert llama.decode([235, 194]) == REPLACEMENT_CHAR * 2
    assert llama.decode([235, 194, 176]) == "迭"
    assert feed(DetokenizerFactory(llama)(), [235, 194, 176]) == ["", "", "迭"]


@pytest.mark.parametrize("name", ["mistral_v1_tokenizer", "sp_tiny_hf_tokenizer"])
@pytest.mark.parametrize("size", [1, 2, 3, 5])
def test_b25_report_sequence(name, size):
    tok = load(name)
    ids = b25_ids(name)
    assert tok.encode(B25_TEXT, add_special_tokens=False) == ids  # transformers agrees with sentencepiece
    reference = tok.decode(ids, skip_special_tokens=True)
    assert REPLACEMENT_CHAR not in reference and reference == B25_TEXT
    deltas = feed(DetokenizerFactory(tok)(), ids, size)
    assert not any(REPLACEMENT_CHAR in d for d in deltas)
    assert "".join(deltas) == reference


@pytest.mark.parametrize(
    "name", ["sp_tiny_tokenizer", "mistral_v1_tokenizer", "gpt2_tokenizer", "llama3_tokenizer", "qwen3_tokenizer"]
)
def test_emoji_zwj_cjk_cyrillic_one_token_at_a_time(name):
    tok = load(name)
    text = "你有点聪明 🧘\u200d♀️ привет 👨\u200d👩\u200d👧\u200d👦 🇩🇪 迭代"
    ids = tok.encode(text, add_special_tokens=False)
    deltas = feed(DetokenizerFactory(tok)(), ids)
    assert not any(REPLACEMENT_CHAR in d for d in deltas)
    assert "".join(deltas) == tok.decode(ids) == text


# ---- prefix-unstable decodes -----------------------------------------------------------------------


def test_prefix_unstable_cleanup_spaces_gpt2():
    """GPT-2 with clean_up_tokenization_spaces forced on: decode("Hello"+" ") = "Hello " but
    decode("Hello"+" "+".") = "Hello." -- an emitted trailing space could not be taken back."""
    tok = AutoTokenizer.from_pretrained(
        asset("gpt2_tokenizer"),
        local_files_only=True,
        clean_up_tokenization_spaces=True,
        clean_up_tokenization_spaces_for_bpe_even_though_it_will_corrupt_output=True,
    )
    space, dot = tok.convert_tokens_to_ids("Ġ"), tok.convert_tokens_to_ids(".")
    hello = tok.encode("Hello", add_special_tokens=False)
    ids = (
        hello
        + [space, dot]
        + tok.encode(" It", add_special_tokens=False)
        + [space]
        + tok.encode("'s", add_special_tokens=False)
        + [space, tok.convert_tokens_to_ids(",")]
    )
    assert tok.decode(hello + [space]) == "Hello "
    assert tok.decode(hello + [space, dot]) == "Hello."  # not a prefix extension
    factory = DetokenizerFactory(tok, True)
    assert factory.cleanup
    for size in (1, 2, 3):
        d = factory()
        assert "".join(feed(d, ids, size)) + d.flush() == tok.decode(ids)
    # the plain GPT-2 tokenizer (transformers 5 skips clean-up for BPE) holds nothing back
    assert not DetokenizerFactory(load("gpt2_tokenizer"), True).cleanup


def test_prefix_unstable_byte_fallback(llama):
    """decode([235]) is not a prefix of decode([235, 194, 176]): nothing is emitted until it is."""
    assert not llama.decode([235, 194, 176]).startswith(llama.decode([235]))
    ids = (
        llama.encode("the cat", add_special_tokens=False)
        + [235, 194, 176]
        + llama.encode("the cat", add_special_tokens=False)
    )
    deltas = feed(DetokenizerFactory(llama)(), ids)
    assert "".join(deltas) == llama.decode(ids) == "the cat迭 the cat"
    assert "thecat" not in "".join(deltas)


def test_window_cut_before_skipped_special_token(llama):
    """decode([<s>, ▁Hello], skip) == "Hello" but in context the space stays ("X Hello"): the window
    start must not turn into a start-of-text."""
    assert llama.decode([1, HELLO], skip_special_tokens=True) == "Hello"
    words = llama.encode("one two three four five six seven eight nine ten", add_special_tokens=False)
    ids = words + [1] + llama.encode("Hello world", add_special_tokens=False)
    ids = ids * 6
    for skip in (True, False):
        for size in (1, 2, 4):
            d = DetokenizerFactory(llama, skip)()
            assert "".join(feed(d, ids, size)) + d.flush() == llama.decode(ids, skip_special_tokens=skip)


# ---- documented edges ------------------------------------------------------------------------------


def test_edge1_stream_cut_inside_a_character_needs_flush(llama):
    d = DetokenizerFactory(llama)()
    assert feed(d, [HELLO, 235, 194]) == ["Hello", "", ""]
    assert d.flush() == REPLACEMENT_CHAR * 2  # what decode shows for the cut bytes
    assert llama.decode([HELLO, 235, 194]) == "Hello" + REPLACEMENT_CHAR * 2


def test_servers_end_of_stream_drops_a_character_cut_by_the_end(llama):
    """Issue 28: the servers end a stream with DetokenizerCache.finish; a character that max_tokens cut inside
    is left out (the client cannot complete it later), never sent as U+FFFD; a whole character is kept."""
    cache = DetokenizerCache(DetokenizerFactory(llama), max_streams=4)
    assert cache.add("cut", [HELLO, 235, 194]) == "Hello"
    assert cache.finish("cut") == ""
    assert cache.add("whole", [HELLO, 235, 194, 176]) == "Hello迭"
    assert cache.finish("whole") == ""
    cache.add("held", [HELLO, 29871])  # a trailing space token: held (clean-up), then emitted at the end
    assert REPLACEMENT_CHAR not in cache.finish("held")


def test_edge2_invalid_byte_joins_an_emitted_run(llama):
    """ByteFallback turns the whole run into U+FFFD; the stream already sent the valid character."""
    ids = [235, 194, 176, 258]  # 迭 then byte 0xFF
    assert llama.decode(ids) == REPLACEMENT_CHAR * 4
    d = DetokenizerFactory(llama)()
    streamed = "".join(feed(d, ids)) + d.flush()
    assert streamed == "迭" + REPLACEMENT_CHAR * 3  # same length, first char kept


# ---- bounded work per token --------------------------------------------------------------------------


class CountingDecode:
    def __init__(self, tok):
        self.inner = decode_fn(tok, True)
        self.tokens = 0
        self.calls = 0

    def __call__(self, ids):
        self.tokens += len(ids)
        self.calls += 1
        return self.inner(ids)


@pytest.mark.parametrize("name", ["mistral_v1_tokenizer", "gpt2_tokenizer"])
def test_tokens_decoded_per_step_do_not_grow_with_length(name):
    tok = load(name)
    text = "Deep learning is a subset of machine learning. 你有点聪明 🧘\u200d♀️ привет!\n"
    base = tok.encode(text, add_special_tokens=False)
    per_token = {}
    for n in (256, 4096):
        ids = (base * (n // len(base) + 1))[:n]
        counter = CountingDecode(tok)
        d = IncrementalDetokenizer(counter)
        out = "".join(feed(d, ids)) + d.flush()
        assert out == tok.decode(ids)
        assert len(d._ids) <= 4 * 6 + 8  # the window stays small
        per_token[n] = counter.tokens / n
    # decoding the whole sequence per step would be ~n/2 tokens per token (128 vs 2048)
    assert per_token[4096] < 40 and per_token[4096] <= per_token[256] * 1.3


# ---- per-stream cache ---------------------------------------------------------------------------------


def test_cache_keeps_streams_apart_and_is_bounded(llama):
    factory = DetokenizerFactory(llama)
    cache = DetokenizerCache(factory, max_streams=2)
    a = llama.encode("Deep learning is fun", add_special_tokens=False)
    b = llama.encode("Привет мир как дела", add_special_tokens=False)
    out = {"a": [], "b": []}
    for i in range(max(len(a), len(b))):
        if i < len(a):
            out["a"].append(cache.add(("a", 0, 0), a[i : i + 1]))
        if i < len(b):
            out["b"].append(cache.add(("b", 0, 0), b[i : i + 1]))
    assert "".join(out["a"]) == llama.decode(a)
    assert "".join(out["b"]) == llama.decode(b)
    cache.add(("c", 0, 0), a[:1])
    assert len(cache) == 2 and cache.evictions == 1 and ("a", 0, 0) not in cache
    assert cache.finish(("c", 0, 0)) == "" and ("c", 0, 0) not in cache


def test_cache_concurrent_streams(gpt2):
    cache = DetokenizerCache(DetokenizerFactory(gpt2), max_streams=64)
    texts = [f"stream {k}: 迭代 привет 🧘\u200d♀️ the quick brown fox {k}" for k in range(8)]
    results: dict[int, str] = {}

    def run(k: int) -> None:
        ids = gpt2.encode(texts[k])
        results[k] = "".join(cache.add((k, 0, 0), ids[i : i + 1]) for i in range(len(ids)))

    threads = [threading.Thread(target=run, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == {k: texts[k] for k in range(8)}


def test_cleanup_probe():
    tok = load("mistral_v1_tokenizer")
    assert cleanup_active(decode_fn(tok, True), lambda s: tok.encode(s, add_special_tokens=False)) is False


def test_edge3_endless_invalid_byte_run_stays_bounded(llama):
    """Byte 0xE8 repeated forever never completes a character: the window is cut by force."""
    counter = CountingDecode(llama)
    d = IncrementalDetokenizer(counter, max_window_tokens=64)
    out = "".join(d.add([235]) for _ in range(2000))
    assert max(len(d._ids), 0) <= 64 + 1
    assert counter.tokens / 2000 < 80  # not ~1000 tokens per step
    assert set(out) == {REPLACEMENT_CHAR} and len(out) + len(d.flush()) == 2000
