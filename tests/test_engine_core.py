"""engine_core: the tensorrt_llm contract for Python engines, tested in-process with a scripted backend
and a stand-in for triton_python_backend_utils (the real one exists only inside Triton's stub)."""

from __future__ import annotations

import numpy as np
import pytest
from engine_fakes import FakeRequest, ScriptedBackend, engine_model_config, fake_pb_utils, init_args, req_inputs

from repo_builder.runtime.engine_core import (
    CollectingSink,
    EngineLimits,
    ModelIO,
    RequestError,
    RequestGroup,
    SamplingParams,
    Scheduler,
    TritonEngineModel,
    parse_request,
    parse_word_list,
)

IO12 = ModelIO.from_config(engine_model_config("trtllm-1.2"))
IO05 = ModelIO.from_config(engine_model_config("trtllm-0.5"))
LIMITS = EngineLimits(vocab_size=100, max_input_len=16, max_seq_len=24, exclude_input_in_output=True)


def run(backend, *requests, io=IO12, limits=LIMITS):
    """Parse and schedule requests in-process; returns one CollectingSink per request."""
    sched = Scheduler(backend)
    sinks = []
    for inputs in requests:
        sink = CollectingSink()
        sched.submit(RequestGroup(parse_request(inputs, io, limits), sink, io))
        sinks.append(sink)
    sched.run_until_idle()
    return sinks


def final_ids(sink):
    outputs, final, error = sink.responses[-1]
    assert final and error is None
    n = int(outputs["sequence_length"][0, 0])
    return outputs["output_ids"][0, 0, :n].tolist()


# ---------------------------------------------------------------------------------------------- word lists
def test_word_list_uses_cumulative_offsets_and_minus_one_padding():
    arr = np.array([[[5, 6, 7, 9, 0, 0], [2, 3, 4, -1, -1, -1]]], np.int32)
    assert parse_word_list(arr, "stop_words_list") == [[5, 6], [7], [9]]
    # what upstream preprocessing sends when there are no words
    assert parse_word_list(np.array([[[0], [-1]]], np.int32), "stop_words_list") == []


def test_malformed_word_list_names_the_input():
    with pytest.raises(RequestError, match="stop_words_list"):
        parse_word_list(np.array([[1, 2, 3]], np.int32), "stop_words_list")
    with pytest.raises(RequestError, match="bad_words_list"):
        parse_word_list(np.array([[1, 2], [5, -1]], np.int32), "bad_words_list")


# ---------------------------------------------------------------------------------------------- stop rules
def test_end_id_stops_generation_and_is_not_in_the_output():
    backend = ScriptedBackend({1: [10, 11, 2, 12, 13]})
    (sink,) = run(backend, req_inputs([1, 4], 8, end_id=[2], return_num_output_tokens=[True]))
    assert final_ids(sink) == [10, 11]
    assert sink.responses[-1][0]["num_output_tokens"][0, 0] == 2


def test_without_end_id_generation_runs_to_request_output_len():
    backend = ScriptedBackend({1: [10, 11, 2, 12, 13]})
    (sink,) = run(backend, req_inputs([1, 4], 4))
    assert final_ids(sink) == [10, 11, 2, 12]


def test_stop_word_sequence_stops_and_is_included():
    backend = ScriptedBackend({1: [10, 11, 12, 13, 14, 15]})
    stop = np.array([[[12, 13, 40], [2, 3, -1]]], np.int32)  # words [12, 13] and [40]
    (sink,) = run(backend, req_inputs([1], 10, stop_words_list=stop))
    assert final_ids(sink) == [10, 11, 12, 13]


def test_stop_word_list_of_another_row_does_not_apply():
    backend = ScriptedBackend({1: [10, 11, 12]})
    stop = np.array([[[99], [1]]], np.int32)
    (sink,) = run(backend, req_inputs([1], 5, stop_words_list=stop))
    assert final_ids(sink) == [10, 11, 12, 10, 11]


# ---------------------------------------------------------------------------------------------- outputs
def test_exclude_input_in_output_false_prepends_prompt_and_counts_it():
    backend = ScriptedBackend({1: [10, 11, 12]})
    a, b = run(backend, req_inputs([1, 5, 6], 3, exclude_input_in_output=[False]), req_inputs([1, 5, 6], 3))
    assert final_ids(a) == [1, 5, 6, 10, 11, 12]
    assert a.responses[-1][0]["sequence_length"][0, 0] == 6
    assert final_ids(b) == [10, 11, 12]  # the parameter default (true) applies when the input is absent


def test_parameter_default_false_is_overridden_by_request():
    backend = ScriptedBackend({1: [10]})
    limits = EngineLimits(vocab_size=100, max_input_len=16, max_seq_len=24, exclude_input_in_output=False)
    a, b = run(backend, req_inputs([1, 3], 1), req_inputs([1, 3], 1, exclude_input_in_output=[True]), limits=limits)
    assert final_ids(a) == [1, 3, 10]
    assert final_ids(b) == [10]


@pytest.mark.parametrize("profile", ["trtllm-1.2", "trtllm-0.5"])
def test_every_output_nvidia_sends_when_asked_is_sent_with_its_dtype(profile):
    cfg = engine_model_config(profile)
    io = ModelIO.from_config(cfg)
    backend = ScriptedBackend({1: [10, 11]})
    asked = (
        {}
        if profile == "trtllm-0.5"
        else {
            k: [True]
            for k in ("return_log_probs", "return_perf_metrics", "return_num_input_tokens", "return_num_output_tokens")
        }
    )
    (sink,) = run(backend, req_inputs([1], 2, uint=profile == "trtllm-0.5", **asked), io=io)
    outputs = sink.responses[-1][0]
    # never sent by the CPU engine: logits (asking is an error), sequence_index (n > 1 is refused),
    # batch_index (one row), context_phase_params (no context-only requests)
    # token_offset (ours) goes with streamed responses only
    never = {"context_logits", "generation_logits", "sequence_index", "batch_index", "context_phase_params"}
    never.add("token_offset")
    assert set(outputs) == {o["name"] for o in cfg["output"]} - never
    for o in cfg["output"]:
        if o["name"] in never:
            continue
        arr = outputs[o["name"]]
        assert arr.dtype == io.outputs[o["name"]].numpy_dtype, o["name"]
        assert arr.ndim == 1 + len(o["dims"]), o["name"]
        assert arr.shape[0] == 1
    assert outputs["output_ids"].shape == (1, 1, 2)


def test_log_probs_are_returned_only_when_asked():
    backend = ScriptedBackend({1: [10, 11, 12]})
    a, b = run(backend, req_inputs([1], 3, return_log_probs=[True]), req_inputs([1], 3))
    assert a.responses[-1][0]["cum_log_probs"][0, 0] == pytest.approx(-1.5)
    assert a.responses[-1][0]["output_log_probs"][0, 0].tolist() == [-0.5, -0.5, -0.5]
    assert "cum_log_probs" not in b.responses[-1][0] and "output_log_probs" not in b.responses[-1][0]


def test_optional_outputs_only_when_the_request_asks_like_nvidias_backend():
    """tensorrtllm_backend v0.19.0 model_instance_state.cc: perf metrics with return_perf_metrics, token
    counts with return_num_*_tokens, batch_index only for a request of several rows, never logits."""
    backend = ScriptedBackend({1: [10, 11], 3: [30, 31]})
    plain, perf = run(backend, req_inputs([1], 2), req_inputs([1], 2, return_perf_metrics=[True]))
    assert set(plain.responses[-1][0]) == {"output_ids", "sequence_length"}
    got = perf.responses[-1][0]
    assert {"arrival_time_ns", "first_token_time_ns", "kv_cache_reused_blocks", "acceptance_rate"} <= set(got)
    assert "num_output_tokens" not in got and "context_logits" not in got
    two_rows = {
        "input_ids": np.array([[1], [3]], np.int32),
        "input_lengths": np.array([1, 1], np.int32),
        "request_output_len": np.array([2, 2], np.int32),
    }
    (rows,) = run(backend, two_rows)
    assert rows.responses[-1][0]["batch_index"].tolist() == [[0], [1]]


def test_two_rows_in_one_request_are_padded_into_one_response():
    backend = ScriptedBackend({1: [10, 2], 3: [30, 31, 32]})
    inputs = {
        "input_ids": np.array([[1, 7], [3, 0]], np.int32),
        "input_lengths": np.array([2, 1], np.int32),
        "request_output_len": np.array([3, 3], np.int32),
        "end_id": np.array([2, 2], np.int32),
        "pad_id": np.array([0, 0], np.int32),
    }
    (sink,) = run(backend, inputs)
    outputs, final, _ = sink.responses[-1]
    assert len(sink.responses) == 1 and final
    assert outputs["output_ids"].tolist() == [[[10, 0, 0]], [[30, 31, 32]]]
    assert outputs["sequence_length"].tolist() == [[1], [3]]
    assert outputs["batch_index"].tolist() == [[0], [1]]


def test_decoupled_model_answers_each_row_of_a_unary_batch_on_its_own():
    """Issue 28: a decoupled engine model answers a batched non-streaming request the way NVIDIA's backend
    does, one ``[1, ...]`` response per row as it finishes, tagged with its batch_index, the last final."""
    backend = ScriptedBackend({1: [10, 2], 3: [30, 31, 32]})
    inputs = {
        "input_ids": np.array([[1, 7], [3, 0]], np.int32),
        "input_lengths": np.array([2, 1], np.int32),
        "request_output_len": np.array([3, 3], np.int32),
        "end_id": np.array([2, 2], np.int32),
    }
    sched, sink = Scheduler(backend), CollectingSink()
    sched.submit(RequestGroup(parse_request(inputs, IO12, LIMITS), sink, IO12, split_rows=True))
    sched.run_until_idle()
    got = [(o["batch_index"].tolist(), o["output_ids"].tolist(), final) for o, final, _ in sink.responses]
    assert got == [([[0]], [[[10]]], False), ([[1]], [[[30, 31, 32]]], True)]


# ---------------------------------------------------------------------------------------------- streaming
def test_streaming_sends_only_new_tokens_then_final():
    backend = ScriptedBackend({1: [10, 11, 12, 2]})
    (sink,) = run(backend, req_inputs([1, 9], 8, end_id=[2], streaming=[True], exclude_input_in_output=[False]))
    data = [(o["output_ids"][0, 0].tolist(), final) for o, final, _ in sink.responses if o is not None]
    # end_id produced no token: the last response holds zero new tokens and is flagged final (a bare final
    # flag is dropped by Triton's gRPC front end unless the client set enable_empty_final_response)
    assert data == [([10], False), ([11], False), ([12], False), ([], True)]
    assert sink.responses[-1][0]["sequence_length"].tolist() == [[0]]


def test_streamed_responses_carry_their_token_offset_and_whole_ones_do_not():
    """token_offset = the generated tokens earlier responses of the sequence carried (stream_state.py orders
    a stream's responses across postprocessing instances by it); the empty final one follows the last token."""
    backend = ScriptedBackend({1: [10, 11, 12, 2]})
    (sink,) = run(backend, req_inputs([1, 9], 8, end_id=[2], streaming=[True]))
    assert [o["token_offset"].tolist() for o, _f, _ in sink.responses] == [[[0]], [[1]], [[2]], [[3]]]
    assert sink.responses[0][0]["token_offset"].dtype == np.int32
    (whole,) = run(ScriptedBackend({1: [10, 11]}), req_inputs([1], 2))
    assert "token_offset" not in whole.responses[-1][0]


def test_streaming_last_token_carries_the_final_flag():
    backend = ScriptedBackend({1: [10, 11]})
    (sink,) = run(backend, req_inputs([1], 2, streaming=[True]))
    assert [(o["output_ids"][0, 0].tolist(), f) for o, f, _ in sink.responses] == [([10], False), ([11], True)]


# ---------------------------------------------------------------------------------------------- scheduling
def test_long_request_does_not_block_a_short_one():
    backend = ScriptedBackend({1: [10], 2: [20]})
    sched = Scheduler(backend)
    long_sink, short_sink = CollectingSink(), CollectingSink()
    sched.submit(RequestGroup(parse_request(req_inputs([1], 20, streaming=[True]), IO12, LIMITS), long_sink, IO12))
    sched.run_step()
    sched.run_step()
    sched.submit(RequestGroup(parse_request(req_inputs([2], 3), IO12, LIMITS), short_sink, IO12))
    sched.run_until_idle()
    finals = [i for i, s in enumerate(backend.batches) if 2 in s]
    assert finals == [2, 3, 4]  # the short request joined the running batch at once
    assert len(backend.batches) == 20
    assert short_sink.event.is_set() and final_ids(short_sink) == [20, 20, 20]
    long_lengths = [len(o["output_ids"][0, 0]) for o, _, _ in long_sink.responses]
    assert long_lengths == [1] * 20


def test_requests_beyond_max_active_wait_their_turn():
    backend = ScriptedBackend({1: [10], 2: [20], 3: [30]})
    sched = Scheduler(backend, max_active=2)
    sinks = []
    for first in (1, 2, 3):
        sink = CollectingSink()
        sched.submit(RequestGroup(parse_request(req_inputs([first], 2), IO12, LIMITS), sink, IO12))
        sinks.append(sink)
    sched.run_until_idle()
    assert backend.batches == [[1, 2], [1, 2], [3], [3]]
    assert all(s.event.is_set() for s in sinks)


def test_cancelled_stream_ends_with_an_empty_final_response():
    backend = ScriptedBackend({1: [10], 2: [20]})
    sched = Scheduler(backend, cancel_check_period_s=0.0)
    a, b = CollectingSink(), CollectingSink()
    sched.submit(RequestGroup(parse_request(req_inputs([1], 10, streaming=[True]), IO12, LIMITS), a, IO12))
    sched.submit(RequestGroup(parse_request(req_inputs([2], 5), IO12, LIMITS), b, IO12))
    sched.run_step()
    sched.run_step()
    a.cancelled = True
    sched.run_until_idle()
    # zero new tokens, flagged final: a client without enable_empty_final_response still sees the end
    outputs, final, error = a.responses[-1]
    assert final and error is None and outputs["sequence_length"].tolist() == [[0]]
    assert len(a.responses) == 3
    assert final_ids(b) == [20] * 5
    assert backend.batches[-1] == [2]
    assert backend.released == 2


def test_greedy_unless_top_k_or_top_p_asks_for_sampling():
    assert SamplingParams().greedy
    assert SamplingParams(temperature=0.7).greedy
    assert SamplingParams(top_k=0, top_p=0.0).greedy
    assert SamplingParams(top_k=1, top_p=0.9).greedy
    assert SamplingParams(top_k=5, temperature=0.0).greedy
    assert not SamplingParams(top_k=5).greedy
    assert not SamplingParams(top_p=0.9).greedy


# ---------------------------------------------------------------------------------------------- validation
@pytest.mark.parametrize(
    "extra,field",
    [
        ({"beam_width": [2]}, "beam_width"),
        ({"beam_width": [2], "streaming": [True]}, "beam_width"),
        ({"lora_weights": np.ones((1, 2, 2), np.float16)}, "lora_weights"),
        ({"lora_task_id": np.array([3], np.uint64)}, "lora_task_id"),
        ({"return_generation_logits": [True]}, "return_generation_logits"),
        ({"num_return_sequences": [2]}, "num_return_sequences"),
        ({"runtime_top_p": [1.5]}, "runtime_top_p"),
        ({"embedding_bias": np.ones((1, 7), np.float32)}, "embedding_bias"),
    ],
)
def test_bad_request_error_names_the_input(extra, field):
    with pytest.raises(RequestError, match=f"'{field}'"):
        parse_request(req_inputs([1, 2], 4, **extra), IO12, LIMITS)


def test_length_limits():
    with pytest.raises(RequestError, match=r"'request_output_len'.*within \[1, 2147483647\], got 0"):
        parse_request(req_inputs([1, 2], 0), IO12, LIMITS)
    with pytest.raises(RequestError, match="'input_ids'.*max_input_len 16"):
        parse_request(req_inputs(list(range(1, 18)), 4), IO12, LIMITS)
    with pytest.raises(RequestError, match="'input_ids'.*vocabulary"):
        parse_request(req_inputs([1, 100], 4), IO12, LIMITS)
    with pytest.raises(RequestError, match="'input_lengths'"):
        parse_request({**req_inputs([1, 2], 4), "input_lengths": np.array([3], np.int32)}, IO12, LIMITS)
    # prompt + output beyond max_seq_len: the output length is clamped (TRT-LLM 1.x)
    parsed = parse_request(req_inputs(list(range(1, 11)), 100), IO12, LIMITS)
    assert parsed.rows[0].max_new_tokens == LIMITS.max_seq_len - 10


def test_optional_inputs_the_ensemble_always_sends_are_accepted():
    inputs = req_inputs(
        [1, 2],
        4,
        prompt_table_extra_ids=np.zeros((1, 2), np.uint64),
        embedding_bias=np.zeros((1, 0), np.float32),
        return_context_logits=[False],
        return_generation_logits=[False],
        bad_words_list=np.array([[[0], [-1]]], np.int32),
        stop_words_list=np.array([[[0], [-1]]], np.int32),
        end_id=[2],
        pad_id=[2],
    )
    parsed = parse_request(inputs, IO12, LIMITS)
    assert parsed.rows[0].stop_words == [] and parsed.rows[0].embedding_bias is None


def test_profile_0_5_names_and_uint32_inputs():
    inputs = req_inputs(
        [1, 2],
        4,
        uint=True,
        end_id=np.array([2], np.uint32),
        min_length=np.array([3], np.uint32),
        random_seed=np.array([7], np.uint64),
        runtime_top_k=np.array([4], np.uint32),
    )
    row = parse_request(inputs, IO05, LIMITS).rows[0]
    assert (row.max_new_tokens, row.end_id, row.sampling.min_tokens, row.sampling.seed, row.sampling.top_k) == (
        4,
        2,
        3,
        7,
        4,
    )
    assert parse_request(req_inputs([1], 4, min_tokens=[5]), IO12, LIMITS).rows[0].sampling.min_tokens == 5


# ---------------------------------------------------------------------------------------------- Triton adapter
def make_model(decoupled=True, profile="trtllm-1.2", scripts=None, pause_after=None, **params):
    backend = ScriptedBackend(scripts or {1: [10, 11, 12, 13], 2: [20, 21]}, pause_after=pause_after)
    cfg = engine_model_config(
        profile,
        decoupled=decoupled,
        params={
            "max_input_len": "16",
            "max_seq_len": "24",
            "max_beam_width": "1",
            "exclude_input_in_output": "true",
            **params,
        },
    )
    return TritonEngineModel(fake_pb_utils(), init_args(cfg), lambda p, io: backend), backend


def test_decoupled_execute_fails_bad_requests_alone():
    model, _ = make_model()
    good = FakeRequest(req_inputs([1], 3, streaming=[True]))
    bad = [
        FakeRequest(req_inputs([1], 3, beam_width=[2])),
        FakeRequest(req_inputs([1], 0)),
        FakeRequest(req_inputs(list(range(1, 20)), 3)),
        FakeRequest(req_inputs([1], 3, lora_weights=np.ones((1, 2, 2), np.float16))),
    ]
    assert model.execute([bad[0], good, *bad[1:]]) is None
    assert good.sender.done.wait(10)
    model.finalize()
    assert [r.tensors["output_ids"][0, 0].tolist() for r in good.sender.data()] == [[10], [11], [12]]
    assert good.sender.sent[-1][1] == 1
    for req, field in zip(bad, ["beam_width", "request_output_len", "input_ids", "lora_weights"]):
        ((resp, flags),) = req.sender.sent
        assert flags == 1 and f"'{field}'" in resp.error.message()


def test_non_decoupled_execute_sends_one_final_response_per_request():
    model, backend = make_model(decoupled=False)
    reqs = [
        FakeRequest(req_inputs([2], 2)),
        FakeRequest(req_inputs([1], 3, streaming=[True])),
        FakeRequest(req_inputs([1], 4)),
    ]
    assert model.execute(reqs) is None  # responses go through the sender: the next requests need not wait
    assert all(r.sender.done.wait(10) for r in reqs)
    model.finalize()
    assert [len(r.sender.sent) for r in reqs] == [1, 1, 1] and all(f == 1 for r in reqs for _, f in r.sender.sent)
    assert reqs[0].sender.data()[0].tensors["output_ids"].tolist() == [[[20, 21]]]
    err = reqs[1].sender.data()[0].error.message()
    assert "'streaming'" in err and "decoupled" in err
    assert reqs[2].sender.data()[0].tensors["output_ids"].tolist() == [[[10, 11, 12, 13]]]
    assert [2, 1] in backend.batches  # both requests were stepped together


def test_stop_works_without_decoupled_mode():
    """inflight_batcher_llm_client.py --stop-after-ms without --streaming: the stop request arrives while
    the request it stops is running, and both get exactly one response."""
    model, backend = make_model(decoupled=False, scripts={1: [10]}, pause_after=2)
    running = FakeRequest(req_inputs([1], 20), request_id="req-7")
    model.execute([running])
    assert backend.paused.wait(10)
    stopper = FakeRequest({**req_inputs([1], 1), "stop": np.array([True])}, request_id="req-7")
    model.execute([stopper])
    backend.gate.set()
    assert running.sender.done.wait(10) and stopper.sender.done.wait(10)
    model.finalize()
    ((resp, flags),) = running.sender.sent
    assert flags == 1 and resp.tensors["output_ids"].tolist() == [[[10, 10, 10]]]  # stopped after 3 of 20
    ((resp, flags),) = stopper.sender.sent
    assert flags == 1 and resp.error is None and resp.tensors == {}


def test_stop_input_finishes_the_request_with_the_same_id():
    model, backend = make_model(scripts={1: [10]}, pause_after=2)
    running = FakeRequest(req_inputs([1], 20, streaming=[True]), request_id="req-7")
    other = FakeRequest(req_inputs([1], 5), request_id="req-8")
    model.execute([running, other])
    assert backend.paused.wait(10)  # the engine is inside its third step
    stopper = FakeRequest({**req_inputs([1], 1), "stop": np.array([True])}, request_id="req-7")
    model.execute([stopper])
    backend.gate.set()
    assert running.sender.done.wait(10) and other.sender.done.wait(10)
    model.finalize()
    ((resp, flags),) = stopper.sender.sent  # the stop request's own answer: an empty response, final
    assert flags == 1 and resp.error is None and resp.tensors == {}
    streamed = [r.tensors["output_ids"][0, 0].tolist() for r in running.sender.data()]
    assert streamed == [[10], [10], [10], []]  # the stopped stream ends on zero new tokens, flagged final
    assert running.sender.sent[-1][1] == 1
    assert other.sender.data()[0].tensors["output_ids"].tolist() == [[[10] * 5]]  # a different id keeps going


def test_cancellation_through_the_response_sender():
    model, backend = make_model(scripts={1: [10]})
    req = FakeRequest(req_inputs([1], 20, streaming=[True]))
    req.sender.cancelled = True
    model.execute([req])
    assert req.sender.done.wait(10)
    model.finalize()
    resp, flags = req.sender.sent[-1]
    assert flags == 1 and resp.tensors["sequence_length"].tolist() == [[0]]
    assert len(req.sender.data()) < 20


def test_missing_engine_dir_parameter_is_a_load_error():
    from repo_builder.runtime.engine_core import EngineLoadError
    from repo_builder.runtime.synthetic import SyntheticBackend

    cfg = engine_model_config(params={"engine_dir": "${engine_dir}"})
    with pytest.raises(EngineLoadError, match="engine_dir"):
        TritonEngineModel(fake_pb_utils(), init_args(cfg), SyntheticBackend.from_params)


def test_arrival_time_is_the_same_for_every_response_of_a_request_and_unique_per_request():
    """Postprocessing keys streaming state on (request id, arrival_time_ns): it must identify a request."""
    backend = ScriptedBackend({1: [10]})
    sinks = run(backend, *[req_inputs([1], 3, streaming=[True], return_perf_metrics=[True]) for _ in range(50)])
    per_request = [{int(o["arrival_time_ns"][0, 0]) for o, _, _ in s.responses if o is not None} for s in sinks]
    assert all(len(v) == 1 for v in per_request)
    assert len({next(iter(v)) for v in per_request}) == 50


@pytest.mark.parametrize("decoupled", [True, False])
def test_responses_hold_only_the_outputs_the_caller_asked_for(decoupled):
    """A BLS call that names a subset of the outputs (tensorrt_llm_bls asks for output_ids alone) gets only
    those: python_backend r24.10 drops the others without the GIL held, which crashes the Python 3.12 stub
    (triton_io.only_requested)."""
    model, _ = make_model(decoupled=decoupled)
    subset = FakeRequest(req_inputs([1], 3, streaming=[decoupled]), requested=["output_ids"])
    every = FakeRequest(req_inputs([1], 3, streaming=[decoupled]))
    assert model.execute([subset, every]) is None
    assert subset.sender.done.wait(10) and every.sender.done.wait(10)
    model.finalize()
    assert subset.sender.data() and all(set(r.tensors) == {"output_ids"} for r in subset.sender.data())
    assert all({"output_ids", "sequence_length"} <= set(r.tensors) for r in every.sender.data())
