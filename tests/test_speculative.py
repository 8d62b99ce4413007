"""Draft-target speculative decoding without a server: the engines verify ``draft_input_ids``
(runtime/engine_draft.py) and the BLS loop (runtime/bls_draft.py) drives a draft and a target engine in-process.
Greedy speculative output equals the target's plain output, whatever ``num_draft_tokens`` and whether the draft
agrees (the same tiny LLaMA: every draft token accepted) or not (a draft that gets every third token wrong).
The reference engine, not the synthetic one: its next token depends on the whole context."""

from __future__ import annotations

import numpy as np
import pytest
from engine_fakes import engine_model_config, fake_pb_utils, init_args, req_inputs
from test_engine_phases import PhaseRequest, ids_of, run

from repo_builder.runtime.bls_draft import SpeculativeStream
from repo_builder.runtime.engine_phases import PhasedEngineModel
from repo_builder.runtime.errors import StepError
from repo_builder.runtime.reference import ReferenceBackend

PROMPT = [5, 17, 42, 8]


def _engine(checkpoint) -> PhasedEngineModel:
    cfg = engine_model_config(decoupled=True, params={"engine_dir": str(checkpoint), "reference_engine_threads": "1"})
    return PhasedEngineModel(fake_pb_utils(), init_args(cfg), ReferenceBackend.from_params)


@pytest.fixture(scope="module")
def engines(tiny_llama):
    model = _engine(tiny_llama)
    yield {"target": model, "other": model}
    model.finalize()


class Caller:
    """The BLS's StepCaller over in-process engine models (decoupled: ``stream``)."""

    def __init__(self, models):
        self.models = models
        self.calls: list[tuple[str, int]] = []

    def stream(self, model, inputs, outputs, request_id):
        self.calls.append((model, int(np.asarray(inputs["request_output_len"]).reshape(-1)[0])))
        for resp, _ in run(self.models[model], PhaseRequest(dict(inputs))):
            if resp is None:
                continue
            if resp.error is not None:
                raise StepError(model, resp.error.message(), True)
            out = dict(resp.tensors)
            if model == "other":  # a draft model that gets every third token wrong
                ids = out["output_ids"].copy()
                ids[..., 2::3] = (ids[..., 2::3] + 1) % 32000
                out["output_ids"] = ids
            yield out

    def call(self, model, inputs, outputs, request_id):
        return next(iter(self.stream(model, inputs, outputs, request_id)))


def speculate(engines, draft, n_draft, *, streaming=False, exclude=True, total=20, prompt=PROMPT, **extra):
    caller = Caller(engines)
    stream = SpeculativeStream(
        caller,
        draft_model=draft,
        target_model="target",
        inputs=req_inputs(prompt, total, **extra),
        outputs=["output_ids", "sequence_length", *extra.get("_outputs", [])],
        request_id="spec",
        num_draft_tokens=n_draft,
        use_draft_logits=False,
        streaming=streaming,
        exclude_input=exclude,
        decoupled=True,
    )
    responses = list(stream)
    return responses, stream, caller


def plain(engines, total=20, prompt=PROMPT, **extra):
    return ids_of(
        run(engines["target"], PhaseRequest(req_inputs(prompt, total, exclude_input_in_output=[True], **extra)))
    )


@pytest.mark.parametrize("n_draft", [1, 3, 8])
@pytest.mark.parametrize("draft", ["target", "other"])
def test_greedy_speculative_output_equals_plain_output(engines, draft, n_draft):
    want = plain(engines)
    (resp,), stream, _ = speculate(engines, draft, n_draft)
    assert resp["output_ids"].reshape(-1).tolist() == want
    if draft == "target":  # the same model drafts: every proposal is accepted
        assert stream.accepted_total == stream.draft_total > 0
    elif n_draft >= 3:  # the wrong third token is proposed
        assert 0 < stream.accepted_total < stream.draft_total
    print(
        f"draft {draft}, num_draft_tokens {n_draft}: {stream.accepted_total}/{stream.draft_total} accepted, "
        f"{stream.iterations} iterations for {len(want)} tokens"
    )
    streamed, _, _ = speculate(engines, draft, n_draft, streaming=True)
    assert [t for r in streamed for t in r["output_ids"].reshape(-1)] == want
    assert len(streamed) == stream.iterations  # one response per iteration: the accepted tokens + 1


def test_the_prompt_is_echoed_only_when_asked_and_end_id_stops(engines):
    want = plain(engines, end_id=[plain(engines)[6]])
    (resp,), stream, caller = speculate(engines, "target", 4, exclude=False, end_id=[plain(engines)[6]])
    assert resp["output_ids"].reshape(-1).tolist() == PROMPT + want and len(want) < 20
    assert all(n > 0 for _, n in caller.calls)


def test_perf_outputs_add_up_over_the_iterations(engines):
    extra = {
        "return_perf_metrics": [True],
        "_outputs": ["total_draft_tokens", "total_accepted_draft_tokens", "acceptance_rate"],
    }
    (resp,), stream, _ = speculate(engines, "target", 3, **extra)
    assert int(resp["total_draft_tokens"].reshape(-1)[0]) == stream.draft_total > 0
    assert int(resp["total_accepted_draft_tokens"].reshape(-1)[0]) == stream.accepted_total
    assert float(resp["acceptance_rate"].reshape(-1)[0]) == pytest.approx(1.0)


def test_the_engine_returns_the_accepted_draft_and_its_own_token(engines):
    want = plain(engines, total=6)
    draft = want[:2] + [(want[2] + 1) % 32000, want[3]]
    inputs = req_inputs(PROMPT, 5, exclude_input_in_output=[True], draft_input_ids=np.array([draft], np.int32))
    inputs["return_perf_metrics"] = np.array([True])
    ((resp, _),) = run(engines["target"], PhaseRequest(inputs))
    assert resp.tensors["output_ids"].reshape(-1).tolist() == want[:3]  # 2 accepted + the target's token
    assert int(resp.tensors["total_accepted_draft_tokens"].reshape(-1)[0]) == 2
    assert int(resp.tensors["total_draft_tokens"].reshape(-1)[0]) == 4
    bad = req_inputs(PROMPT, 5, draft_input_ids=np.array([[40_000]], np.int32))
    ((resp, _),) = run(engines["target"], PhaseRequest(bad))
    assert "'draft_input_ids'" in resp.error.message()


def test_num_draft_tokens_above_the_targets_max_draft_len_is_refused_naming_the_field():
    from repo_builder.runtime.bls_request import BLSRequestError, BLSSettings, parse_request

    settings = BLSSettings(draft_model="tensorrt_llm_draft", max_draft_len=4)
    base = {"text_input": np.array([[b"hi"]], dtype=object), "max_tokens": np.array([[8]], np.int32)}
    plan = parse_request({**base, "num_draft_tokens": np.array([[4]], np.int32)}, settings)
    assert plan.num_draft_tokens == 4
    with pytest.raises(BLSRequestError, match=r"num_draft_tokens.*5 is larger than the target engine's max_draft_len"):
        parse_request({**base, "num_draft_tokens": np.array([[5]], np.int32)}, settings)


def test_the_engine_refuses_a_draft_longer_than_its_max_draft_len(tiny_llama):
    cfg = engine_model_config(
        decoupled=True,
        params={"engine_dir": str(tiny_llama), "reference_engine_threads": "1", "max_draft_len": "2"},
    )
    model = PhasedEngineModel(fake_pb_utils(), init_args(cfg), ReferenceBackend.from_params)
    try:
        inputs = req_inputs(PROMPT, 5, draft_input_ids=np.array([[1, 2, 3]], np.int32))
        ((resp, _),) = run(model, PhaseRequest(inputs))
        assert "'draft_input_ids'" in resp.error.message() and "max_draft_len (2)" in resp.error.message()
        ok = req_inputs(PROMPT, 5, draft_input_ids=np.array([[1, 2]], np.int32))
        ((resp, _),) = run(model, PhaseRequest(ok))
        assert resp.error is None
    finally:
        model.finalize()


#: a prompt whose greedy continuation by the tiny LLaMA changes token at index 5 (77 x 5, then 25130 ...)
VARIED_PROMPT = [3000, 12, 450, 77]


@pytest.mark.parametrize("streaming", [False, True])
def test_a_stop_word_spanning_two_iterations_cuts_the_output_as_plain_does(engines, streaming):
    """With num_draft_tokens 1 and a draft that is always accepted, every iteration returns 2 tokens (indices 0-1,
    2-3, 4-5, ...): the stop word of tokens 3-5 arrives in two chunks, and neither engine call sees it whole. The
    output ends right after it, as the plain engine's does."""
    want = plain(engines, prompt=VARIED_PROMPT)
    word = want[3:6]
    assert word not in [want[j : j + 3] for j in range(3)]  # it ends first at index 5
    stops = {"stop_words_list": np.array([[word, [3, -1, -1]]], np.int32)}
    expected = plain(engines, prompt=VARIED_PROMPT, **stops)
    assert expected == want[:6]
    responses, stream, _ = speculate(engines, "target", 1, streaming=streaming, prompt=VARIED_PROMPT, **stops)
    assert [t for r in responses for t in r["output_ids"].reshape(-1)] == expected
    assert stream.iterations == 3
