"""preprocessing: Preprocessor (Triton-free logic) and the model.py adapter with a stand-in pb_utils.

The stand-in for triton_python_backend_utils (tests/engine_fakes.py) exists only because that module
lives inside Triton's stub process; serving behaviour is tested with a real tritonserver in
tests/e2e/test_ensemble_text.py.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
from _assets import TOKENIZERS
from _text_support import model_config, sentencepiece
from _text_support import tokenizer as load
from conftest import PROJECT, asset
from engine_fakes import FakeRequest, fake_pb_utils

from repo_builder.runtime.preprocessing import Preprocessor
from repo_builder.runtime.text import TokenizerLoadError
from repo_builder.runtime.triton_io import RequestError

LLAMA = asset("mistral_v1_tokenizer")  # SentencePiece with dummy prefix + byte fallback, like LLaMA-2's


def sp_ids(text: str) -> list[int]:
    """BOS + sentencepiece's own ids for ``text`` (the expected preprocessing output, computed without transformers)."""
    sp = sentencepiece("mistral_v1_tokenizer")
    return [sp.bos_id()] + sp.encode(text)


def q(*texts: str | bytes) -> np.ndarray:
    return np.array([[t.encode() if isinstance(t, str) else t] for t in texts], dtype=object)


def words(*rows: list[str]) -> np.ndarray:
    width = max(len(r) for r in rows)
    return np.array([[w.encode() for w in r] + [b""] * (width - len(r)) for r in rows], dtype=object)


def pre(profile: str = "trtllm-1.2", tokenizer_dir=LLAMA, **params) -> Preprocessor:
    params.setdefault("tokenizer_dir", tokenizer_dir)
    shared = tokenizer_dir.name in TOKENIZERS and Path(tokenizer_dir) == asset(tokenizer_dir.name)
    return Preprocessor(
        model_config(profile, "preprocessing", params), tokenizer=load(tokenizer_dir.name) if shared else None
    )


@pytest.fixture(scope="module")
def llama_pre() -> Preprocessor:
    return pre(max_input_len=2048, max_seq_len=2560)


def test_outputs_and_dtypes_trtllm_1_2(llama_pre):
    out = llama_pre.process(
        {
            "QUERY": q("What is machine learning?"),
            "REQUEST_OUTPUT_LEN": np.array([[16]], np.int32),
            "STOP_WORDS_DICT": words(["</s>", "\n"]),
            "BAD_WORDS_DICT": words(["branch"]),
        }
    )
    assert set(out) == {o["name"] for o in model_config("trtllm-1.2", "preprocessing")["output"]}
    assert out["INPUT_ID"].tolist() == [sp_ids("What is machine learning?")] and out["INPUT_ID"].dtype == np.int32
    assert out["REQUEST_INPUT_LEN"].tolist() == [[6]]
    assert out["REQUEST_OUTPUT_LEN"].tolist() == [[16]] and out["REQUEST_OUTPUT_LEN"].dtype == np.int32
    assert out["STOP_WORDS_IDS"].tolist() == [[[2, 13], [1, 2]]]  # B15 + B16 through the model
    assert 1 not in out["BAD_WORDS_IDS"][0, 0].tolist()
    assert out["OUT_END_ID"].tolist() == [[2]] and out["OUT_PAD_ID"].dtype == np.int32
    assert out["EMBEDDING_BIAS"].shape == (1, 0) and out["EMBEDDING_BIAS"].dtype == np.float32
    assert out["DETOKENIZER_KEY"].dtype == np.uint64 and out["DETOKENIZER_KEY"][0, 0] != 0
    assert out["OUT_PROMPT_TABLE_EXTRA_IDS"].shape == (1, 6)


def test_outputs_and_dtypes_trtllm_0_5():
    p = pre("trtllm-0.5", asset("gpt2_tokenizer"))
    out = p.process(
        {
            "QUERY": q("What is machine learning?"),
            "REQUEST_OUTPUT_LEN": np.array([[8]], np.uint32),
            "STOP_WORDS_DICT": words([""]),
            "BAD_WORDS_DICT": words([""]),
        }
    )
    assert set(out) == {o["name"] for o in model_config("trtllm-0.5", "preprocessing")["output"]}
    assert out["REQUEST_OUTPUT_LEN"].dtype == np.uint32 and out["OUT_END_ID"].dtype == np.uint32
    assert out["OUT_END_ID"].tolist() == [[50256]]
    assert out["STOP_WORDS_IDS"].shape == (1, 2, 0)  # "" means no words
    assert out["INPUT_ID"].tolist() == [[2061, 318, 4572, 4673, 30]]


def test_batch_rows_are_padded_with_pad_id(llama_pre):
    out = llama_pre.process(
        {
            "QUERY": q("Hi", "What is machine learning?"),
            "REQUEST_OUTPUT_LEN": np.array([[4], [4]], np.int32),
            "PAD_ID": np.array([[0], [0]], np.int32),
            "END_ID": np.array([[2], [7]], np.int32),
        }
    )
    assert out["REQUEST_INPUT_LEN"].tolist() == [[2], [6]]
    assert sp_ids("Hi") == [1, sentencepiece("mistral_v1_tokenizer").piece_to_id("\u2581Hi")]
    assert out["INPUT_ID"][0].tolist() == sp_ids("Hi") + [0, 0, 0, 0]
    assert out["OUT_END_ID"].tolist() == [[2], [7]] and out["OUT_PAD_ID"].tolist() == [[0], [0]]
    keys = out["DETOKENIZER_KEY"].reshape(-1).tolist()
    assert len(set(keys)) == 2


def test_detokenizer_keys_unique_across_requests_and_instances():
    a, b = pre(), pre()
    keys = set()
    for p in (a, b):
        for _ in range(50):
            keys.add(
                int(
                    p.process({"QUERY": q("x"), "REQUEST_OUTPUT_LEN": np.array([[1]], np.int32)})["DETOKENIZER_KEY"][
                        0, 0
                    ]
                )
            )
    assert len(keys) == 100 and 0 not in keys


def test_stop_token_ids_parameter_and_embedding_bias(llama_pre):
    p = pre(stop_token_ids="7,9")
    out = p.process(
        {
            "QUERY": q("Hi"),
            "REQUEST_OUTPUT_LEN": np.array([[4]], np.int32),
            "EMBEDDING_BIAS_WORDS": words(["Hello"]),
            "EMBEDDING_BIAS_WEIGHTS": np.array([[1.5]], np.float32),
        }
    )
    assert out["STOP_WORDS_IDS"].tolist() == [[[7, 9], [1, 2]]]
    hello = sentencepiece("mistral_v1_tokenizer").piece_to_id("\u2581Hello")
    assert out["EMBEDDING_BIAS"].shape == (1, 32000) and out["EMBEDDING_BIAS"][0, hello] == 1.5


# ---- bad requests name the field ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "inputs,field,needle",
    [
        ({"QUERY": q(""), "REQUEST_OUTPUT_LEN": np.array([[4]], np.int32)}, "text_input", "empty"),
        ({"QUERY": q(b"\xff\xfe bad"), "REQUEST_OUTPUT_LEN": np.array([[4]], np.int32)}, "text_input", "UTF-8"),
        (
            {"QUERY": q("hi"), "REQUEST_OUTPUT_LEN": np.array([[0]], np.int32)},
            "max_tokens",
            "within [1, 2147483647], got 0",
        ),
        ({"QUERY": q("hi"), "REQUEST_OUTPUT_LEN": np.array([[-3]], np.int32)}, "max_tokens", "-3"),
        ({"QUERY": q("hello " * 3000), "REQUEST_OUTPUT_LEN": np.array([[4]], np.int32)}, "text_input", "2048"),
        # 2001 pieces + BOS: within max_input_len 2048, but 2002 + 1000 > max_seq_len 2560
        ({"QUERY": q("Hello " * 2000), "REQUEST_OUTPUT_LEN": np.array([[1000]], np.int32)}, "max_tokens", "2560"),
        (
            {
                "QUERY": q("hi"),
                "REQUEST_OUTPUT_LEN": np.array([[4]], np.int32),
                "STOP_WORDS_DICT": words(["[1, x]", "[1.5]"]),
            },
            "stop_words",
            "[1.5]",
        ),
        (
            {
                "QUERY": q("hi"),
                "REQUEST_OUTPUT_LEN": np.array([[4]], np.int32),
                "STOP_WORDS_DICT": np.array([[b"\xc3"]], dtype=object),
            },
            "stop_words",
            "UTF-8",
        ),
        (
            {
                "QUERY": q("hi"),
                "REQUEST_OUTPUT_LEN": np.array([[4]], np.int32),
                "STOP_WORDS_DICT": np.array([[3]], dtype=object),
            },
            "stop_words",
            "strings",
        ),
        (
            {
                "QUERY": q("hi"),
                "REQUEST_OUTPUT_LEN": np.array([[4]], np.int32),
                "EMBEDDING_BIAS_WORDS": words(["a", "b"]),
                "EMBEDDING_BIAS_WEIGHTS": np.array([[1.0]], np.float32),
            },
            "embedding_bias_words",
            "embedding_bias_weights",
        ),
    ],
)
def test_bad_requests(llama_pre, inputs, field, needle):
    with pytest.raises(RequestError) as err:
        llama_pre.process(inputs)
    assert err.value.field == field and needle in str(err.value)


# ---- B20: end/pad ids at run time via special_ids ---------------------------------------------------------


def _gpt2_copy(tmp_path, generation_config=None, no_specials=False):
    d = tmp_path / "tok"
    shutil.copytree(asset("gpt2_tokenizer"), d)
    if no_specials:
        cfg = json.loads((d / "tokenizer_config.json").read_text())
        cfg.update({k: None for k in ("eos_token", "bos_token", "unk_token", "pad_token")})
        (d / "tokenizer_config.json").write_text(json.dumps(cfg))
    if generation_config is not None:
        (d / "generation_config.json").write_text(json.dumps(generation_config))
    return d


def test_b20_end_id_from_generation_config(tmp_path):
    d = _gpt2_copy(tmp_path, {"eos_token_id": [198, 50256], "pad_token_id": 0}, no_specials=True)
    p = Preprocessor(model_config("trtllm-1.2", "preprocessing", {"tokenizer_dir": d}))
    assert p.tokenizer.eos_token_id is None
    out = p.process({"QUERY": q("Hi"), "REQUEST_OUTPUT_LEN": np.array([[4]], np.int32)})
    assert out["OUT_END_ID"].tolist() == [[198]] and out["OUT_PAD_ID"].tolist() == [[0]]
    assert out["STOP_WORDS_IDS"].tolist() == [[[50256], [1]]]  # the other eos id stops too


def test_b20_no_end_id_anywhere_fails_requests_not_the_model(tmp_path):
    d = _gpt2_copy(tmp_path, no_specials=True)
    p = Preprocessor(model_config("trtllm-1.2", "preprocessing", {"tokenizer_dir": d}))
    with pytest.raises(RequestError) as err:
        p.process({"QUERY": q("Hi"), "REQUEST_OUTPUT_LEN": np.array([[4]], np.int32)})
    assert err.value.field == "end_id" and "generation_config.json" in str(err.value)
    out = p.process(
        {
            "QUERY": q("Hi"),
            "REQUEST_OUTPUT_LEN": np.array([[4]], np.int32),
            "END_ID": np.array([[50256]], np.int32),
            "PAD_ID": np.array([[50256]], np.int32),
        }
    )
    assert out["OUT_END_ID"].tolist() == [[50256]]


def test_explicit_parameters_win(tmp_path):
    d = _gpt2_copy(tmp_path, {"eos_token_id": 198})
    p = Preprocessor(
        model_config(
            "trtllm-1.2", "preprocessing", {"tokenizer_dir": d, "end_id": 7, "pad_id": 8, "stop_token_ids": ""}
        )
    )
    out = p.process({"QUERY": q("Hi"), "REQUEST_OUTPUT_LEN": np.array([[4]], np.int32)})
    assert out["OUT_END_ID"].tolist() == [[7]] and out["OUT_PAD_ID"].tolist() == [[8]]


def test_initialize_errors_name_the_parameter(tmp_path):
    with pytest.raises(TokenizerLoadError, match="tokenizer_dir"):
        Preprocessor(model_config("trtllm-1.2", "preprocessing", {}))
    with pytest.raises(TokenizerLoadError, match="/no/such/dir"):
        Preprocessor(model_config("trtllm-1.2", "preprocessing", {"tokenizer_dir": "/no/such/dir"}))
    with pytest.raises(TokenizerLoadError, match="chat_template"):
        Preprocessor(model_config("trtllm-1.2", "preprocessing", {"tokenizer_dir": LLAMA, "apply_chat_template": True}))


def test_chat_template_parameter():
    p = Preprocessor(
        model_config(
            "trtllm-1.2", "preprocessing", {"tokenizer_dir": asset("llama3_tokenizer"), "apply_chat_template": True}
        ),
        tokenizer=load("llama3_tokenizer"),
    )
    ids = p.process({"QUERY": q("Hi"), "REQUEST_OUTPUT_LEN": np.array([[4]], np.int32)})["INPUT_ID"][0].tolist()
    assert ids.count(128000) == 1 and 128006 in ids


# ---- model.py adapter -----------------------------------------------------------------------------------


def load_model_py(kind: str, monkeypatch):
    import repo_builder.runtime as runtime

    monkeypatch.setitem(sys.modules, "triton_python_backend_utils", fake_pb_utils())
    monkeypatch.setitem(sys.modules, "repo_builder_runtime", runtime)
    for sub in (
        "preprocessing",
        "postprocessing",
        "triton_io",
        "text",
        "detokenizer",
        "wordlists",
        "params",
        "stream_ledger",
    ):
        monkeypatch.setitem(
            sys.modules, f"repo_builder_runtime.{sub}", importlib.import_module(f"repo_builder.runtime.{sub}")
        )
    path = PROJECT / "model_templates" / "python_models" / kind / "model.py"
    spec = importlib.util.spec_from_file_location(f"_model_{kind}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_adapter_bad_request_fails_alone(monkeypatch):
    module = load_model_py("preprocessing", monkeypatch)
    model = module.TritonPythonModel()
    model.initialize(
        {
            "model_config": model_config(
                "trtllm-1.2", "preprocessing", {"tokenizer_dir": LLAMA, "max_input_len": 64}, as_json=True
            )
        }
    )
    good = {"QUERY": q("What is machine learning?"), "REQUEST_OUTPUT_LEN": np.array([[4]], np.int32)}
    bad = [
        {"QUERY": q(""), "REQUEST_OUTPUT_LEN": np.array([[4]], np.int32)},
        {"QUERY": q("hi"), "REQUEST_OUTPUT_LEN": np.array([[0]], np.int32)},
        {"QUERY": q("word " * 100), "REQUEST_OUTPUT_LEN": np.array([[4]], np.int32)},
    ]
    responses = model.execute([FakeRequest(good), *[FakeRequest(b) for b in bad], FakeRequest(good)])
    assert len(responses) == 5
    for r in (responses[0], responses[4]):
        assert r.error is None and r.tensors["INPUT_ID"].tolist() == [sp_ids("What is machine learning?")]
    messages = [r.error.message() for r in responses[1:4]]
    assert messages[0].startswith("text_input:") and "empty" in messages[0]
    assert messages[1].startswith("max_tokens:")
    assert messages[2].startswith("text_input:") and "max_input_len of 64" in messages[2]
