"""Stop/bad word lists ([batch, 2, N] ids/offsets) and embedding bias (B15, B16; tests/cases/README.md).

``llama`` is the packaged Mistral v1 SentencePiece (32000 pieces, dummy prefix, byte fallback: the same kind of
model as LLaMA-2's); token ids the assertions need are read with sentencepiece itself."""

from __future__ import annotations

import numpy as np
import pytest
from _assets import HF_TOKENIZERS
from _text_support import sentencepiece
from _text_support import tokenizer as load

from repo_builder.runtime.triton_io import RequestError
from repo_builder.runtime.wordlists import MAX_WORDS, WordEncoder, parse_token_ids


@pytest.fixture(scope="module")
def llama():
    return WordEncoder(load("mistral_v1_tokenizer"))


@pytest.fixture(scope="module")
def gpt2():
    return WordEncoder(load("gpt2_tokenizer"))


def sequences(wl: np.ndarray, row: int = 0) -> list[list[int]]:
    """Decode the [batch, 2, N] layout of one row back into its id sequences."""
    ids, offsets = wl[row, 0].tolist(), wl[row, 1].tolist()
    out, start = [], 0
    for end in offsets:
        if end < 0:
            break
        out.append(ids[start:end])
        start = end
    return out


# ---- B15 -----------------------------------------------------------------------------------------------


def test_b15_eos_text_is_the_eos_id_alone(llama):
    wl = llama.word_list([["</s>"]], "stop_words")
    assert wl.dtype == np.int32 and wl.tolist() == [[[2], [1]]]


def test_b15_word_has_no_bos(llama):
    tok = llama.tokenizer
    wl = llama.word_list([["branch"]], "stop_words")
    seqs = sequences(wl)
    assert all(1 not in s for s in seqs)  # no BOS anywhere
    assert tok.encode("branch", add_special_tokens=False) in seqs  # "▁branch", as generated after a space
    assert all(tok.decode(s) == "branch" for s in seqs)


@pytest.mark.parametrize("name", ["mistral_v1_tokenizer", "sp_tiny_tokenizer"])
def test_b16_newline_has_no_dummy_prefix(name):
    sp = sentencepiece(name)
    dummy, newline = sp.piece_to_id("\u2581"), sp.piece_to_id("<0x0A>")  # "▁" and the byte-fallback newline
    assert sp.encode("\n") == [dummy, newline]  # the reported bug input
    enc = WordEncoder(load(name))
    assert enc.tokenizer.encode("\n", add_special_tokens=False) == [dummy, newline]
    assert enc.word_list([["\n"]], "stop_words").tolist() == [[[newline], [1]]]


def test_b16_codellama_report_generation_stops(llama):
    """Report: the model generated a line ending in the newline token (LLaMA ids 29898 2749 1125 13); the stop
    list must contain the newline id alone so that it matches."""
    seqs = sequences(llama.word_list([["\n"]], "stop_words"))
    generated = sentencepiece("mistral_v1_tokenizer").encode("print(x)\n")
    assert generated[-1] == 13 and len(generated) > 1  # <0x0A>
    assert any(generated[-len(s) :] == s for s in seqs)


# ---- variants with and without a leading space ------------------------------------------------------


@pytest.mark.parametrize(
    "name", ["gpt2_tokenizer", "llama3_tokenizer", "qwen3_tokenizer", "mistral_v1_tokenizer", "sp_tiny_tokenizer"]
)
def test_stop_word_matches_with_and_without_space_before(name):
    enc = WordEncoder(load(name))
    tok = enc.tokenizer
    seqs = sequences(enc.word_list([["Hello"]], "stop_words"))
    for generated_text in ("Say:Hello", "Say: Hello", "Say:\nHello"):
        generated = tok.encode(generated_text, add_special_tokens=False)
        assert any(generated[-len(s) :] == s for s in seqs), (generated_text, generated, seqs)


def test_gpt2_both_variants(gpt2):
    tok = gpt2.tokenizer
    seqs = sequences(gpt2.word_list([["Hello"]], "stop_words"))
    assert seqs == [tok.encode("Hello"), tok.encode(" Hello")] == [[15496], [18435]]
    # a word that starts with a space gets no extra-space variant
    assert sequences(gpt2.word_list([[" Hello"]], "stop_words")) == [[18435]]


def test_commas_are_never_split(gpt2):
    tok = gpt2.tokenizer
    seqs = sequences(gpt2.word_list([["a, b", "c"]], "stop_words"))
    comma = tok.convert_tokens_to_ids(",")
    phrase = [s for s in seqs if comma in s]
    assert phrase and all(tok.decode(s).strip() == "a, b" for s in phrase)
    assert len(seqs) == 4  # "a, b" x2 variants, "c" x2 variants


def test_special_token_texts(llama):
    qwen = WordEncoder(load("qwen3_tokenizer"))
    assert sequences(qwen.word_list([["<|im_end|>"]], "stop_words")) == [[151645]]


# ---- raw ids -----------------------------------------------------------------------------------------


def test_raw_token_ids(llama):
    assert llama.word_list([["[13]", "[29871, 13]"]], "stop_words").tolist() == [[[13, 29871, 13], [1, 3, -1]]]


@pytest.mark.parametrize("word", ["[1.5]", "[]", "[32000]", "[-1]", "[true]"])
def test_bad_raw_ids_name_the_field(llama, word):
    with pytest.raises(RequestError) as err:
        llama.word_list([[word]], "stop_words")
    assert err.value.field == "stop_words" and word in str(err.value)


def test_bracketed_text_is_text(llama):
    assert parse_token_ids("[INST]", 32000, "stop_words") is None
    seqs = sequences(llama.word_list([["[INST]"]], "stop_words"))
    assert seqs and all(llama.tokenizer.decode(s) == "[INST]" for s in seqs)


# ---- layout ------------------------------------------------------------------------------------------


def test_layout_padding_per_batch_row(llama):
    wl = llama.word_list([["</s>"], ["\n", "</s>"], None], "stop_words", extra_ids=[7])
    assert wl.shape == (3, 2, 3) and wl.dtype == np.int32
    assert wl.tolist() == [[[2, 7, 0], [1, 2, -1]], [[13, 2, 7], [1, 2, 3]], [[7, 0, 0], [1, -1, -1]]]


def test_empty_lists(llama):
    assert llama.word_list([None, [], [""]], "bad_words").shape == (3, 2, 0)


def test_stop_token_ids_appended_once(llama):
    wl = llama.word_list([["[7]"]], "stop_words", extra_ids=[7, 9])
    assert sequences(wl) == [[7], [9]]


# ---- embedding bias ------------------------------------------------------------------------------------


def test_embedding_bias(llama):
    bias = llama.embedding_bias([["Hello", "world"]], [[2.0, -1.5]], batch=1)
    assert bias.shape == (1, 32000) and bias.dtype == np.float32
    tok = llama.tokenizer
    assert bias[0, tok.encode("Hello", add_special_tokens=False)[0]] == 2.0
    assert bias[0, tok.encode("world", add_special_tokens=False)[0]] == -1.5
    dummy = sentencepiece("mistral_v1_tokenizer").piece_to_id("\u2581")
    assert bias[0, 1] == 0.0 and bias[0, dummy] == 0.0  # neither BOS nor the dummy prefix
    assert np.count_nonzero(bias) == len({t for w in ("Hello", "world") for s in llama.text_variants(w) for t in s})


def test_embedding_bias_errors_name_the_fields(llama):
    with pytest.raises(RequestError) as err:
        llama.embedding_bias([["a", "b"]], [[1.0]], batch=1)
    assert err.value.field == "embedding_bias_words" and "embedding_bias_weights" in str(err.value)
    with pytest.raises(RequestError) as err:
        llama.embedding_bias([["a"]], None, batch=1)
    assert err.value.field == "embedding_bias_weights"
    assert llama.embedding_bias(None, None, batch=2).shape == (2, 0)


# ---- large lists: batched encoding and de-duplication (timings: docs/performance.md, not asserted) --------


@pytest.mark.parametrize("name", ["mistral_v1_tokenizer", "gpt2_tokenizer", "qwen3_tokenizer"])
def test_many_words_encode_like_one_word_at_a_time(name):
    """The batched path (hundreds of words in one Rust call) gives each word the same sequences as a
    request with that word alone, in the order of first occurrence, each sequence once."""
    words = (
        ["Hello", " Hello", "\n", "</s>", "[13]", "a, b", "Hello", "stop", "world"]
        + [f"w{i} end" for i in range(300)]
        + ["stop", "[13]"]
    )
    batched = sequences(WordEncoder(load(name)).word_list([words], "stop_words"))
    one = WordEncoder(load(name))  # fresh cache: every word encoded on its own
    expected: list[list[int]] = []
    for w in words:
        for seq in sequences(one.word_list([[w]], "stop_words")):
            if seq not in expected:
                expected.append(seq)
    assert batched == expected
    assert len({tuple(s) for s in batched}) == len(batched)


def test_duplicates_across_words_and_extra_ids_kept_once(llama):
    wl = llama.word_list([["[13]", "\n", "[13]", "[2]"]], "stop_words", extra_ids=[2, 13, 5])
    assert sequences(wl) == [[13], [2], [5]]


def test_word_list_size_limits_name_the_field(llama):
    from repo_builder.runtime.wordlists import MAX_WORD_BYTES

    with pytest.raises(RequestError) as err:
        llama.word_list([["x"] * (MAX_WORDS + 1)], "stop_words")
    assert err.value.field == "stop_words" and str(MAX_WORDS) in str(err.value)
    with pytest.raises(RequestError) as err:
        llama.word_list([["é" * (MAX_WORD_BYTES // 2 + 1)]], "bad_words")  # 2 bytes per character
    assert err.value.field == "bad_words" and str(MAX_WORD_BYTES) in str(err.value)
    with pytest.raises(RequestError) as err:
        llama.embedding_bias([["x"] * (MAX_WORDS + 1)], [[1.0] * (MAX_WORDS + 1)], batch=1)
    assert err.value.field == "embedding_bias_words"


def _varied_words(specials: list[str]) -> list[str]:
    """Words that probe the joined encoding: spaces and newlines at either end, digits, contractions, CJK,
    emoji, byte-fallback characters, bracketed text, special-token texts alone and inside words."""
    import random

    rng = random.Random(15)
    alphabet = list("abcXYZ019 ',.-_\n\t") + ["日本", "語", "🙂", "é", "ï", "İ", "▁", "Ġ", "[INST]", "'s", "  "]
    words = ["Hello", " Hello", "Hello ", "\n", " ", "  x  ", "don't", "a, b", "12345", "\n\nEnd", "日本語"]
    words += specials + [f"x{s}y" for s in specials] + [f" {s}" for s in specials]
    words += ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 6))) for _ in range(600)]
    words += [f"stopword{i} phrase" for i in range(300)]
    return words


@pytest.mark.parametrize("name", ["smollm2", *HF_TOKENIZERS])
def test_joined_encoding_gives_the_ids_of_one_encode_per_text(name, request):
    """The joined Rust encode (many texts behind a special token, split at its id) is in use for every
    tokenizer the tests cover, and every text gets exactly the ids that one ``tokenizer.encode`` per text
    gives: LLaMA/Mistral SentencePiece (Metaspace, prepend_scheme first), GPT-2, Llama 3, Qwen 3, SmolLM2."""
    if name == "smollm2":
        from repo_builder.runtime.text import load_tokenizer

        tok = load_tokenizer(request.getfixturevalue("smollm2_dir"))
    else:
        tok = load(name)
    enc = WordEncoder(tok, cache_size=0, row_cache_words=0)
    assert enc.joined, name
    specials = [str(s) for s in tok.all_special_tokens]
    words = _varied_words(specials)
    bodies = words + [" " + w for w in words]
    got = enc._after_anchor_many(bodies)
    assert len(got) == len(bodies)
    anchor = tok.encode("\n", add_special_tokens=False)
    for body, ids in zip(bodies, got):
        full = tok.encode("\n" + body, add_special_tokens=False)  # one encode per text: the reference
        want = tuple(full[len(anchor) :]) if len(full) > len(anchor) and full[: len(anchor)] == anchor else None
        assert ids == want, (body, ids, want)
    # and the whole word list equals the one built one word at a time
    one = WordEncoder(tok, cache_size=0, row_cache_words=0)
    expected: list[list[int]] = []
    for w in words:
        for seq in one.text_variants(w):
            if seq and seq not in expected:
                expected.append(seq)
    assert sequences(enc.word_list([words], "stop_words")) == expected


def test_repeated_lists_come_from_the_row_cache(llama):
    enc = WordEncoder(llama.tokenizer)
    words = [f"w{i} end" for i in range(50)]
    first = enc.word_list([words], "stop_words", extra_ids=[7])
    calls = []
    enc._after_anchor_codes = lambda bodies: calls.append(bodies)  # type: ignore[method-assign]
    again = enc.word_list([list(words)], "bad_words", extra_ids=[7])
    assert calls == [] and again.tolist() == first.tolist()
    with pytest.raises(RequestError):  # limits still apply to a cached row
        enc.word_list([words + ["x"] * MAX_WORDS], "stop_words")


# ---- engine-side indexes: same answers as a scan over every word ------------------------------------------


def test_stop_and_bad_word_indexes_equal_a_scan_over_every_word():
    import random

    from repo_builder.runtime.wordlists import BadWordIndex, StopWordIndex

    rng = random.Random(15)
    for _ in range(200):
        words = [[rng.randrange(6) for _ in range(rng.randint(0, 3))] for _ in range(rng.randint(0, 12))]
        history = [rng.randrange(6) for _ in range(rng.randint(0, 5))]
        stops = StopWordIndex(words)
        scan_stop = any(w and len(w) <= len(history) and history[-len(w) :] == w for w in words)
        assert stops.ends_with_any(history) == scan_stop and bool(stops) == any(words)
        scan_bad = set()
        for w in words:
            if w and (len(w) == 1 or (len(w) - 1 <= len(history) and history[-(len(w) - 1) :] == w[:-1])):
                scan_bad.add(w[-1])
        assert set(BadWordIndex(words).banned(history)) == scan_bad


# ---- code-point strings (the word-list path's form of a token-id sequence) ------------------------------------


def test_code_strings_round_trip_every_id_range():
    """Ids as code points: surrogate ids (55296-57343) and the top of the range come back unchanged, and a raw-id
    element in the surrogate range reaches the word list as sent (Qwen 3: 151,669 ids)."""
    from repo_builder.runtime.wordlists import MAX_CODE_ID, codes_to_ids, ids_to_codes

    ids = [0, 1, 13, 55295, 55296, 56000, 57343, 57344, 65535, 65536, 151645, MAX_CODE_ID]
    codes = ids_to_codes(ids)
    assert len(codes) == len(ids) and [ord(c) for c in codes] == ids
    assert codes_to_ids(codes).tolist() == ids and codes_to_ids(codes).dtype == np.int32
    qwen = WordEncoder(load("qwen3_tokenizer"))
    wl = qwen.word_list([["[55296, 57343]", "[56000]", "[55296, 57343]"]], "stop_words", extra_ids=[56000, 7])
    assert sequences(wl) == [[55296, 57343], [56000], [7]]
    assert qwen.sequences("[57343, 13]", "stop_words") == [[57343, 13]]
