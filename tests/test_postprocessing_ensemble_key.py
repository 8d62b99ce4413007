"""postprocessing in an ensemble: streaming state keyed by request id + the engine's ARRIVAL_TIME_NS.

Triton refuses an ensemble step whose inputs come from different decoupled models, so in the ensemble
postprocessing only sees tensorrt_llm outputs and the request id (see contract.yaml). These tests feed
responses the way the ensemble does (no DETOKENIZER_KEY, no STREAM) and check the text.
"""

from __future__ import annotations

import numpy as np
from _text_support import tokenizer as load
from test_postprocessing_model import B25_LONG, post, text

from repo_builder.profile.contract import load_contract


def response(ids, arrival=None):
    inputs = {"TOKENS_BATCH": np.array([[list(ids)]], np.int32), "SEQUENCE_LENGTH": np.array([[len(ids)]], np.int32)}
    if arrival is not None:
        inputs["ARRIVAL_TIME_NS"] = np.array([[arrival]], np.int64)
    return inputs


def test_ensemble_wiring_routes_only_engine_outputs_to_postprocessing():
    """Every postprocessing input in the ensemble comes from tensorrt_llm (Triton's decoupled rule)."""
    for profile in ("trtllm-1.2", "trtllm-0.5"):
        steps = load_contract(profile).models["ensemble"].steps
        engine_outputs = set(next(s for s in steps if s.model == "tensorrt_llm").output_map.values())
        post_step = next(s for s in steps if s.model == "postprocessing")
        assert set(post_step.input_map.values()) <= engine_outputs, profile


def test_streamed_deltas_join_to_the_whole_text_per_arrival_time():
    llama = load("mistral_v1_tokenizer")
    a = llama.encode("Deep learning is a subset of machine learning", add_special_tokens=False)
    b = B25_LONG
    p = post()
    deltas: dict[int, list[str]] = {1: [], 2: []}
    # interleave two requests with the same (empty) request id and different arrival times
    for i in range(max(len(a), len(b))):
        if i < len(a):
            deltas[1] += text(p.process(response([a[i]], arrival=1_000), request_id=""))
        if i < len(b):
            deltas[2] += text(p.process(response([b[i]], arrival=2_000), request_id=""))
    assert "".join(deltas[1]) == llama.decode(a) == "Deep learning is a subset of machine learning"
    assert "".join(deltas[2]) == llama.decode(b)
    assert all("\ufffd" not in d for d in deltas[1] + deltas[2])


def test_request_id_alone_keys_the_stream():
    """trtllm-0.5 engines return only output_ids: the request id is the key."""
    llama = load("mistral_v1_tokenizer")
    ids = llama.encode("Machine learning rocks", add_special_tokens=False)
    p = post(profile="trtllm-0.5")
    out = [text(p.process({"TOKENS_BATCH": np.array([[[t]]], np.int32)}, request_id="req-7"))[0] for t in ids]
    assert "".join(out) == "Machine learning rocks"


def test_non_streaming_response_through_the_keyed_path_is_the_whole_text():
    llama = load("mistral_v1_tokenizer")
    ids = llama.encode("What is machine learning?", add_special_tokens=False)
    assert text(post().process(response(ids, arrival=5), request_id="x")) == ["What is machine learning?"]


def test_without_any_key_each_response_is_decoded_alone():
    llama = load("mistral_v1_tokenizer")
    ids = llama.encode("Deep learning", add_special_tokens=False)
    p = post()
    out = [text(p.process(response([t])))[0] for t in ids]
    # no key: no state (upstream behaviour); SentencePiece drops the word space of a lone token
    assert "".join(out) == "Deeplearning"
