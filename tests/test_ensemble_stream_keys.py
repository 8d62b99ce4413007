"""How an ensemble stream is keyed without asking the engine for perf metrics on every request.

Facts (measured on Triton 2.51 here, see docs/performance.md section 8 "Ensemble key without perf
metrics"): the ensemble gives every step the client's request id, correlation id, flags and request
parameters, nothing per request; the Python backend of Triton 2.51 cannot set response parameters, newer
ones (python_backend r25.02+) can, and the ensemble (core r24.07+) then runs the later steps with a
``sequence_id`` response parameter as their correlation id. These tests check preprocessing's policy
and postprocessing's use of the correlation id, without Triton.
"""

from __future__ import annotations

import numpy as np
from _text_support import tokenizer as load
from test_postprocessing_model import post, text
from test_preprocessing_model import pre, q
from test_stream_ledger import ENSEMBLE_OUTPUTS

from repo_builder.runtime.preprocessing import EnsembleStreamKeys, FirstUseIds


def ask(p, request_id, **extra):
    inputs = {"QUERY": q("Deep learning"), "REQUEST_OUTPUT_LEN": np.array([[4]], np.int32), **extra}
    out = p.process(inputs, request_id, ENSEMBLE_OUTPUTS)
    return bool(out["OUT_RETURN_PERF_METRICS"].reshape(-1)[0]), dict(p.response_parameters)


def test_first_use_ids_answer_fresh_once_per_id():
    ids = FirstUseIds()
    assert ids.claim("a") and ids.claim("b") and ids.claim("req-1")
    assert not ids.claim("a") and not ids.claim("req-1")
    fresh = sum(ids.claim(f"id-{i}") for i in range(20000))
    assert fresh >= 19990  # a few hash collisions may answer "seen", never the reverse
    assert not any(ids.claim(f"id-{i}") for i in range(20000))


def test_perf_metrics_only_for_ids_that_could_be_ambiguous():
    p = pre()
    assert ask(p, "r1") == (False, {})  # first use of the id: postprocessing keys it (r1, 0)
    assert ask(p, "r2")[0] is False
    assert ask(p, "r1")[0] is True  # reused id: the engine's arrival_time_ns tells the two apart
    assert ask(p, "")[0] is True and ask(p, "")[0] is True  # empty ids always need it
    assert ask(p, None)[0] is True  # unknown id (a caller that does not pass it)
    # the client's return_perf_metrics is passed on
    assert ask(p, "r3", RETURN_PERF_METRICS=np.array([[True]], bool))[0] is True


def test_several_preprocessing_instances_always_ask_for_perf_metrics():
    p = pre()
    p.stream_keys = EnsembleStreamKeys(instances=2)
    assert ask(p, "fresh")[0] is True


def test_with_response_parameters_the_key_is_a_sequence_id_and_no_perf_metrics():
    p = pre()
    p.use_response_parameters(True)
    seen = set()
    for rid in ("", "", "same", "same"):
        perf, params = ask(p, rid)
        assert perf is False
        sid = params["sequence_id"]
        assert isinstance(sid, str) and sid.startswith("rb-") and sid not in seen
        seen.add(sid)


def test_trtllm_05_has_no_perf_metrics_to_ask_for():
    p = pre("trtllm-0.5")
    out = p.process({"QUERY": q("Deep learning"), "REQUEST_OUTPUT_LEN": np.array([[4]], np.uint32)}, "x")
    assert "OUT_RETURN_PERF_METRICS" not in out


def _chunk(ids):
    return {"TOKENS_BATCH": np.array([[list(ids)]], np.int32), "SEQUENCE_LENGTH": np.array([[len(ids)]], np.int32)}


def test_correlation_id_keys_streams_with_equal_or_empty_request_ids():
    """Two interleaved streams with the same request id, told apart by the correlation id alone."""
    llama = load("mistral_v1_tokenizer")
    a = llama.encode("Deep learning is a subset of machine learning", add_special_tokens=False)
    b = llama.encode("Vingt mille lieues sous les mers", add_special_tokens=False)
    for rid in ("", "same"):
        p = post()
        got: dict[int, list[str]] = {11: [], 22: []}
        for i in range(max(len(a), len(b))):
            if i < len(a):
                got[11] += text(p.process(_chunk([a[i]]), request_id=rid, correlation_id=11))
            if i < len(b):
                got[22] += text(p.process(_chunk([b[i]]), request_id=rid, correlation_id=22))
        assert "".join(got[11]) == llama.decode(a)
        assert "".join(got[22]) == llama.decode(b)


def test_first_use_key_and_arrival_key_of_one_id_do_not_meet():
    """Preprocessing's second mode: the first request of id X is keyed (X, 0), a later one (X, arrival)."""
    llama = load("mistral_v1_tokenizer")
    a = llama.encode("Deep learning is a subset of machine learning", add_special_tokens=False)
    b = llama.encode("Vingt mille lieues sous les mers", add_special_tokens=False)
    p = post()
    first, second = [], []
    for i in range(max(len(a), len(b))):
        if i < len(a):
            first += text(p.process(_chunk([a[i]]), request_id="X"))
        if i < len(b):
            inputs = {**_chunk([b[i]]), "ARRIVAL_TIME_NS": np.array([[123456789]], np.int64)}
            second += text(p.process(inputs, request_id="X"))
    assert "".join(first) == llama.decode(a) and "".join(second) == llama.decode(b)


def test_preprocessing_adapter_sends_sequence_id_where_the_backend_takes_response_parameters(monkeypatch):
    """The model.py adapter probes ``InferenceResponse(parameters=)`` once: with it (python_backend r25.02+)
    every response carries a fresh ``sequence_id`` and no perf metrics are asked for; without it (Triton 2.51,
    the plain fake) no parameters are sent and a repeated id asks for perf metrics."""
    import sys

    from _text_support import model_config
    from engine_fakes import FakeRequest, FakeResponse
    from test_preprocessing_model import LLAMA, load_model_py

    class ResponseWithParameters(FakeResponse):
        def __init__(self, output_tensors=None, error=None, parameters=None):
            super().__init__(output_tensors, error)
            self.parameters = parameters

    cfg = {"model_config": model_config("trtllm-1.2", "preprocessing", {"tokenizer_dir": LLAMA}, as_json=True)}
    good = {"QUERY": q("Deep learning"), "REQUEST_OUTPUT_LEN": np.array([[4]], np.int32)}

    module = load_model_py("preprocessing", monkeypatch)
    plain = module.TritonPythonModel()
    plain.initialize(cfg)
    step = list(ENSEMBLE_OUTPUTS)  # what the ensemble asks its preprocessing step for
    first, again = plain.execute([FakeRequest(good, "id-1", step), FakeRequest(good, "id-1", step)])
    assert not hasattr(first, "parameters")
    assert [bool(r.tensors["OUT_RETURN_PERF_METRICS"][0, 0]) for r in (first, again)] == [False, True]

    monkeypatch.setattr(sys.modules["triton_python_backend_utils"], "InferenceResponse", ResponseWithParameters)
    keyed = module.TritonPythonModel()
    keyed.initialize(cfg)
    responses = keyed.execute([FakeRequest(good, rid, step) for rid in ("id-1", "id-1", "")])
    ids = [r.parameters["sequence_id"] for r in responses]
    assert len(set(ids)) == 3 and all(isinstance(i, str) and i for i in ids)
    assert not any(bool(r.tensors["OUT_RETURN_PERF_METRICS"][0, 0]) for r in responses)
