"""The synthetic engine: predictable tokens, engine-dir checks, pacing, and the full contract through the
Triton adapter (with a stand-in for triton_python_backend_utils)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from engine_fakes import FakeRequest, engine_model_config, fake_pb_utils, init_args, req_inputs, unary

from repo_builder.runtime import synthetic
from repo_builder.runtime.engine_core import EngineLoadError, TritonEngineModel
from repo_builder.runtime.synthetic import SyntheticBackend, read_spec, synthetic_token_ids

SPEC = {"vocab_size": 32000, "max_batch_size": 4, "max_input_len": 32, "max_seq_len": 64}


@pytest.fixture
def synth_dir(tmp_path):
    d = tmp_path / "synthetic"
    d.mkdir()
    (d / "synthetic_engine.json").write_text(json.dumps(SPEC))
    return d


def make_model(engine_dir, *, decoupled=True, profile="trtllm-1.2", **params):
    cfg = engine_model_config(
        profile,
        decoupled=decoupled,
        params={"engine_dir": str(engine_dir), "max_beam_width": "1", "exclude_input_in_output": "true", **params},
    )
    return TritonEngineModel(fake_pb_utils(), init_args(cfg), SyntheticBackend.from_params)


def test_tokens_are_deterministic_per_prompt_and_inside_the_vocabulary():
    a = synthetic_token_ids([1, 5, 9], 200, 50)
    assert a == synthetic_token_ids([1, 5, 9], 200, 50)
    assert a != synthetic_token_ids([1, 5, 10], 200, 50)
    assert a != synthetic_token_ids([1, 5, 9], 200, 50, seed=3)
    assert min(a) >= 3 and max(a) < 50
    assert len(set(a)) > 20  # not a constant stream


def test_end_id_is_never_generated():
    plain = synthetic_token_ids([7], 300, 10)
    end_id = plain[0]
    avoided = synthetic_token_ids([7], 300, 10, end_id=end_id)
    assert end_id in plain and end_id not in avoided


def test_streaming_through_the_adapter_yields_the_predicted_tokens(synth_dir):
    model = make_model(synth_dir)
    req = FakeRequest(req_inputs([1, 2, 3], 6, streaming=[True], end_id=[2]))
    model.execute([req])
    assert req.sender.done.wait(10)
    model.finalize()
    got = [r.tensors["output_ids"][0, 0].tolist() for r in req.sender.data()]
    assert got == [[t] for t in synthetic_token_ids([1, 2, 3], 6, SPEC["vocab_size"], end_id=2)]
    assert req.sender.sent[-1][1] == 1


def test_stop_words_cut_the_synthetic_stream(synth_dir):
    expected = synthetic_token_ids([4, 4], 10, SPEC["vocab_size"])
    stop = np.array([[expected[3:5], [2, -1]]], np.int32)
    model = make_model(synth_dir, decoupled=False)
    (resp,) = unary(model, [FakeRequest(req_inputs([4, 4], 10, stop_words_list=stop))])
    model.finalize()
    assert resp.tensors["output_ids"][0, 0].tolist() == expected[:5]


def test_limits_come_from_synthetic_engine_json(synth_dir):
    model = make_model(synth_dir, decoupled=False)
    too_long, fits = FakeRequest(req_inputs([5] * 33, 4)), FakeRequest(req_inputs([5] * 32, 100))
    r_long, r_fit = unary(model, [too_long, fits])
    model.finalize()
    assert "'input_ids'" in r_long.error.message() and "max_input_len 32" in r_long.error.message()
    assert r_fit.tensors["sequence_length"][0, 0] == SPEC["max_seq_len"] - 32  # clamped to max_seq_len


def test_profile_0_5_sends_only_output_ids(synth_dir):
    model = make_model(synth_dir, decoupled=False, profile="trtllm-0.5")
    (resp,) = unary(model, [FakeRequest(req_inputs([1], 3, uint=True, random_seed=np.array([9], np.uint64)))])
    model.finalize()
    assert set(resp.tensors) == {"output_ids"}
    assert resp.tensors["output_ids"][0, 0].tolist() == synthetic_token_ids([1], 3, SPEC["vocab_size"], seed=9)


def test_token_delay_paces_each_iteration(synth_dir, monkeypatch):
    clock = {"now": 100.0}
    sleeps = []
    monkeypatch.setattr(synthetic.time, "monotonic", lambda: clock["now"])

    def fake_sleep(s):
        sleeps.append(round(s, 6))
        clock["now"] += s

    monkeypatch.setattr(synthetic.time, "sleep", fake_sleep)
    backend = SyntheticBackend(synth_dir, token_delay_ms=25)

    class S:  # minimal sequence
        def __init__(self):
            self.state = None
            self.tokens = []
            self.req = type("R", (), {"prompt": [1], "end_id": None, "sampling": type("P", (), {"seed": None})()})()

    seqs = [S(), S()]
    for _ in range(3):
        backend.step(seqs)
    assert sleeps == [0.025, 0.025]  # the first iteration starts at once, then one per 25 ms
    clock["now"] += 1.0  # idle for a while: no catch-up burst, no sleep
    backend.step(seqs)
    assert sleeps == [0.025, 0.025]


@pytest.mark.parametrize(
    "content,match",
    [
        (None, "has no synthetic_engine.json"),
        ("{not json", "not valid JSON"),
        (json.dumps({**SPEC, "vocab": 3}), "unknown key"),
        # a missing key takes its default (max_seq_len 2048), which must still exceed max_input_len
        (json.dumps({**{k: v for k, v in SPEC.items() if k != "max_seq_len"}, "max_input_len": 4096}), "must be below"),
        (json.dumps({**SPEC, "vocab_size": "32000"}), "'vocab_size' must be a positive integer"),
        (json.dumps({**SPEC, "max_input_len": 64}), "must be below"),
    ],
)
def test_bad_engine_dir_is_a_load_error_naming_the_file(tmp_path, content, match):
    if content is not None:
        (tmp_path / "synthetic_engine.json").write_text(content)
    with pytest.raises(EngineLoadError, match=match) as info:
        read_spec(tmp_path)
    assert str(tmp_path) in str(info.value)


def test_missing_spec_keys_take_the_defaults_render_uses_too(tmp_path):
    """One definition of synthetic_engine.json: the runtime and repo_builder.engine agree on defaults."""
    from repo_builder.engine import inspect_engine
    from repo_builder.runtime.synthetic import SPEC_DEFAULTS, read_spec

    (tmp_path / "synthetic_engine.json").write_text(json.dumps({"vocab_size": 1000}))
    spec = read_spec(tmp_path)
    assert spec == {**SPEC_DEFAULTS, "vocab_size": 1000}
    info = inspect_engine(tmp_path)
    assert (info.vocab_size, info.max_batch_size, info.max_input_len, info.max_seq_len) == (
        1000,
        SPEC_DEFAULTS["max_batch_size"],
        SPEC_DEFAULTS["max_input_len"],
        SPEC_DEFAULTS["max_seq_len"],
    )
