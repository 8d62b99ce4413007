"""postprocessing: Postprocessor (Triton-free logic) and the model.py adapter (B24, B25, B27, B28)."""

from __future__ import annotations

import numpy as np
import pytest
from _text_support import b25_ids, model_config
from _text_support import tokenizer as load
from conftest import asset
from engine_fakes import FakeRequest
from test_preprocessing_model import load_model_py

from repo_builder.runtime.postprocessing import Postprocessor
from repo_builder.runtime.triton_io import RequestError

B25_LONG = b25_ids("mistral_v1_tokenizer")


def post(name: str = "mistral_v1_tokenizer", profile: str = "trtllm-1.2", **params) -> Postprocessor:
    params.setdefault("tokenizer_dir", asset(name))
    return Postprocessor(model_config(profile, "postprocessing", params), tokenizer=load(name))


def chunk(ids, key=None, stream=None, index=None, pad=0):
    inputs = {
        "TOKENS_BATCH": np.array([[list(ids) + [0] * pad]], np.int32),
        "SEQUENCE_LENGTH": np.array([[len(ids)]], np.int32),
    }
    if key is not None:
        inputs["DETOKENIZER_KEY"] = np.array([[key]], np.uint64)
    if stream is not None:
        inputs["STREAM"] = np.array([[stream]], bool)
    if index is not None:
        inputs["SEQUENCE_INDEX"] = np.array([[index]], np.int32)
    return inputs


def text(out) -> list:
    return [b.decode() for b in out["OUTPUT"].reshape(-1).tolist()]


# ---- non-streaming ----------------------------------------------------------------------------------------


def test_b27_special_tokens_not_in_text():
    llama = load("mistral_v1_tokenizer")
    ids = [1] + llama.encode("What is machine learning?", add_special_tokens=False) + [2, 2, 2]
    assert text(post().process(chunk(ids))) == ["What is machine learning?"]
    assert text(post(skip_special_tokens=False).process(chunk(ids)))[0].startswith("<s>")
    qwen = load("qwen3_tokenizer")
    ids = qwen.encode("Machine learning is a field.") + [151645]
    assert text(post("qwen3_tokenizer").process(chunk(ids))) == ["Machine learning is a field."]


def test_b28_generated_ids_only_do_not_contain_the_prompt():
    """With exclude_input_in_output the engine sends only generated ids; their text has no prompt."""
    llama = load("mistral_v1_tokenizer")
    generated = llama.encode("I am an assistant.", add_special_tokens=False)
    out = text(post().process(chunk(generated)))[0]
    assert out == "I am an assistant." and not out.startswith("who are you?")


def test_sequence_length_trims_padding_and_beams():
    llama = load("mistral_v1_tokenizer")
    a = llama.encode("Deep learning", add_special_tokens=False)
    b = llama.encode("Machine learning rocks", add_special_tokens=False)
    width = max(len(a), len(b)) + 3
    tokens = np.zeros((1, 2, width), np.int32)
    tokens[0, 0, : len(a)] = a
    tokens[0, 1, : len(b)] = b
    tokens[0, 0, len(a) :] = 15043  # garbage past the length must not be decoded
    p = post()
    out = p.process({"TOKENS_BATCH": tokens, "SEQUENCE_LENGTH": np.array([[len(a), len(b)]], np.int32)})
    assert out["OUTPUT"].shape == (2,) and out["OUTPUT"].dtype == object  # NVIDIA: 1-D [batch * beam]
    assert text(out) == ["Deep learning", "Machine learning rocks"]


def test_trtllm_0_5_shape_and_no_sequence_length():
    llama = load("mistral_v1_tokenizer")
    ids = llama.encode("Hello world", add_special_tokens=False)
    p = post(profile="trtllm-0.5")
    out = p.process({"TOKENS_BATCH": np.array([[ids]], np.int32)})
    assert out["OUTPUT"].shape == (1,) and text(out) == ["Hello world"]


def test_bad_tokens_input():
    with pytest.raises(RequestError):
        post().process({"TOKENS_BATCH": np.zeros((1, 1, 2), np.int32), "SEQUENCE_LENGTH": np.array([[1, 1, 1]])})


# ---- streaming ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["mistral_v1_tokenizer", "gpt2_tokenizer", "qwen3_tokenizer"])
def test_b24_streamed_deltas_concatenate_to_non_streaming(name):
    tok = load(name)
    ids = tok.encode(
        "Deep learning is a subset of machine learning. 你有点聪明 🧘\u200d♀️ привет", add_special_tokens=False
    )
    p = post(name)
    deltas = [text(p.process(chunk(ids[i : i + 1], key=11, stream=True, pad=2)))[0] for i in range(len(ids))]
    assert "".join(deltas) == text(p.process(chunk(ids)))[0]
    assert not any("\ufffd" in d for d in deltas)


def test_b25_report_ids_streamed():
    p = post()
    deltas = [text(p.process(chunk([t], key=3, stream=True)))[0] for t in B25_LONG]
    assert "\ufffd" not in "".join(deltas)
    assert "".join(deltas) == load("mistral_v1_tokenizer").decode(B25_LONG)


def test_interleaved_streams_keep_their_own_state():
    llama = load("mistral_v1_tokenizer")
    a = llama.encode("The cat sat on the mat", add_special_tokens=False)
    b = llama.encode("Привет, как дела?", add_special_tokens=False)
    p = post()
    got = {1: [], 2: [], (2, 1): []}
    for i in range(max(len(a), len(b))):
        if i < len(a):
            got[1].append(text(p.process(chunk(a[i : i + 1], key=1, stream=True)))[0])
        if i < len(b):
            got[2].append(text(p.process(chunk(b[i : i + 1], key=2, stream=True, index=0)))[0])
            got[(2, 1)].append(
                text(p.process(chunk(a[i : i + 1] if i < len(a) else [], key=2, stream=True, index=1)))[0]
            )
    assert "".join(got[1]) == llama.decode(a)
    assert "".join(got[2]) == llama.decode(b)
    assert "".join(got[(2, 1)]) == llama.decode(a[: len(b)])  # sequence index 1 of request 2


def test_stream_without_key_decodes_each_chunk_whole():
    llama = load("mistral_v1_tokenizer")
    ids = llama.encode("Deep learning", add_special_tokens=False)
    p = post()
    assert [text(p.process(chunk([t], stream=True)))[0] for t in ids] == [llama.decode([t]) for t in ids]
    assert len(p.streams) == 0


def test_lru_bound_from_parameter():
    p = post(detokenizer_max_streams=3)
    for key in range(1, 6):
        p.process(chunk([15043], key=key, stream=True))
    assert len(p.streams) == 3 and p.streams.evictions == 2


# ---- model.py adapter ------------------------------------------------------------------------------------


def test_adapter_streams_and_isolates_errors(monkeypatch):
    module = load_model_py("postprocessing", monkeypatch)
    model = module.TritonPythonModel()
    model.initialize(
        {
            "model_config": model_config(
                "trtllm-1.2", "postprocessing", {"tokenizer_dir": asset("mistral_v1_tokenizer")}, as_json=True
            )
        }
    )
    ids = load("mistral_v1_tokenizer").encode("Deep learning is fun", add_special_tokens=False)
    out = []
    for t in ids:
        responses = model.execute(
            [
                FakeRequest(chunk([t], key=9, stream=True)),
                FakeRequest(
                    {"TOKENS_BATCH": np.zeros((1, 1, 2), np.int32), "SEQUENCE_LENGTH": np.array([[1, 2, 3]], np.int32)}
                ),
            ]
        )
        assert responses[1].error is not None and "SEQUENCE_LENGTH" in responses[1].error.message()
        out.append(responses[0].tensors["OUTPUT"][0].decode())
    assert "".join(out) == "Deep learning is fun" and out[1] == " learning"


def test_flush_on_the_last_response_drops_a_cut_character_and_frees_the_state():
    llama = load("mistral_v1_tokenizer")
    ids = llama.encode("Hello", add_special_tokens=False) + [235, 194]  # ends inside a character
    assert llama.decode(ids).endswith("\ufffd")  # what a plain decode of the cut ids gives
    p = post()
    got = [text(p.process(chunk([t], key=4, stream=True)))[0] for t in ids[:-1]]
    last = chunk(ids[-1:], key=4, stream=True)
    last["FLUSH"] = np.array([[True]], bool)
    got.append(text(p.process(last))[0])
    assert "".join(got) == "Hello" and got[-1] == ""  # the partial character is dropped, never sent as U+FFFD
    assert len(p.streams) == 0


@pytest.mark.parametrize("name", ["mistral_v1_tokenizer", "gpt2_tokenizer"])
def test_one_sequence_fast_path_equals_the_general_path(name, monkeypatch):
    """The scalar path for one streamed sequence (what the BLS sends per token) gives the general path's
    outputs, shapes and errors: BLS key, request-id key, arrival time, sequence index, padding, FLUSH,
    ids past the vocabulary and a negative id."""
    import random

    rng = random.Random(27)
    fast, slow = post(name), post(name)
    monkeypatch.setattr(slow, "_one_sequence", lambda *a, **k: None)
    taken = []
    one = fast._one_sequence
    monkeypatch.setattr(fast, "_one_sequence", lambda *a: taken.append(one(*a)) or taken[-1])
    vocab = fast.vocab_size
    ids = B25_LONG + [rng.randrange(vocab) for _ in range(200)] + [vocab + 3]
    cases = [
        dict(key=7, stream=True),
        dict(key=7, stream=False),
        dict(request_id="r-1"),
        dict(request_id="r-2", index=1),
        dict(arrival=55),
        dict(request_id=""),
    ]
    for case in cases:
        fast_texts, slow_texts = [], []
        pos = 0
        while pos < len(ids):
            n = rng.choice([0, 1, 1, 1, 2, 3])
            part = ids[pos : pos + n]
            pos += n
            inputs = chunk(part, key=case.get("key"), stream=case.get("stream"), index=case.get("index"), pad=n % 2)
            if "arrival" in case:
                inputs["ARRIVAL_TIME_NS"] = np.array([[case["arrival"]]], np.int64)
            if pos >= len(ids):
                inputs["FLUSH"] = np.array([[True]])
            if rng.random() < 0.3:  # the [1, len] form
                inputs["TOKENS_BATCH"] = inputs["TOKENS_BATCH"][:, 0, :]
            rid = case.get("request_id", "")
            a, b = fast.process(dict(inputs), rid), slow.process(dict(inputs), rid)
            assert a["OUTPUT"].shape == b["OUTPUT"].shape and a["OUTPUT"].dtype == b["OUTPUT"].dtype
            fast_texts += text(a)
            slow_texts += text(b)
        assert fast_texts == slow_texts, case
    served = [r is not None for r in taken]
    assert any(served) and not all(served)  # the fast path ran, and refused the non-streaming BLS case
    bad = chunk([5, -1])
    for p in (fast, slow):
        with pytest.raises(RequestError, match="TOKENS_BATCH"):
            p.process(dict(bad), "r-x")
    wrong = chunk([5])
    wrong["SEQUENCE_LENGTH"] = np.array([[1, 1]], np.int32)
    for p in (fast, slow):
        with pytest.raises(RequestError, match="SEQUENCE_LENGTH"):
            p.process(dict(wrong), "r-y")


@pytest.mark.parametrize("profile", ["trtllm-1.2", "trtllm-0.5"])
def test_ids_past_the_tokenizer_decode_as_nothing_on_both_profiles(profile):
    """Issue 28 on both profiles: trtllm-0.5's postprocessing has no SEQUENCE_LENGTH (the whole row is
    decoded, v0.5.0's engine returns the prompt), and an id of a padded engine vocabulary there decodes as
    nothing too, logged once, instead of failing the request."""
    o = post(profile=profile)
    logged = []
    o.log = logged.append
    llama = load("mistral_v1_tokenizer")
    ids = llama.encode("Paris is nice", add_special_tokens=False)
    vocab = len(llama)
    inputs = {"TOKENS_BATCH": np.array([[[ids[0], vocab, *ids[1:], vocab + 63]]], np.int32)}
    if profile == "trtllm-1.2":
        inputs["SEQUENCE_LENGTH"] = np.array([[len(ids) + 2]], np.int32)
    for _ in range(2):
        assert text(o.process(inputs)) == [llama.decode(ids)]
    assert len(logged) == 1 and f"token id {vocab} (2 id(s) in this sequence)" in logged[0]
