"""BLSCore request flow with in-process step models (the real-server version is tests/e2e/test_bls_text.py).

The step models here are small character-level stand-ins that speak the trtllm-1.2 tensor contract:
preprocessing maps characters to code points, the engine emits the prompt's characters cyclically,
postprocessing turns code points back into text. They check that they receive only inputs their
contract declares.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from repo_builder.profile.contract import load_contract
from repo_builder.runtime.bls import (
    BLSCore,
    BLSRequestError,
    BLSSettings,
    BLSStepError,
    Wiring,
    can_merge,
    merge_responses,
    parse_request,
    parse_word_list,
    stack_rows,
)

CONTRACT = load_contract("trtllm-1.2")
DECLARED = {m: {t.name for t in CONTRACT.models[m].inputs} for m in ("preprocessing", "tensorrt_llm", "postprocessing")}


class FakeStream:
    def __init__(self, responses, owner):
        self._responses = responses
        self.owner = owner
        self.cancelled = False
        self.consumed = 0

    def __iter__(self):
        for r in self._responses:
            self.consumed += 1
            if self.cancelled and self.owner.honour_cancel:
                return
            yield r

    def cancel(self):
        self.cancelled = True


class FakeModels:
    """StepCaller implementing preprocessing / engine / postprocessing at character level."""

    def __init__(self, engine_name="tensorrt_llm", fail=None):
        self.engine_name = engine_name
        self.fail = fail
        self.calls = []
        self.request_ids = []
        self.engine_outputs = None
        self.streams = []
        self.honour_cancel = True

    def _check(self, model, inputs):
        kind = "tensorrt_llm" if model == self.engine_name else model
        unknown = set(inputs) - DECLARED[kind]
        assert not unknown, f"{model} got undeclared inputs {unknown}"
        self.calls.append((model, dict(inputs)))
        if self.fail == model:
            from repo_builder.runtime.bls import BLSStepError

            raise BLSStepError(model, "boom")
        return kind

    def call(self, model, inputs, outputs, request_id):
        kind = self._check(model, inputs)
        if kind == "preprocessing":
            text = inputs["QUERY"].reshape(-1)[0].decode()
            ids = np.array([[ord(c) for c in text]], dtype=np.int32)
            res = {
                "INPUT_ID": ids,
                "REQUEST_INPUT_LEN": np.array([[ids.shape[1]]], np.int32),
                "REQUEST_OUTPUT_LEN": inputs["REQUEST_OUTPUT_LEN"],
                "DETOKENIZER_KEY": np.array([[7]], np.uint64),
                "OUT_END_ID": np.array([[0]], np.int32),
                "OUT_PAD_ID": np.array([[0]], np.int32),
                "OUT_RETURN_PERF_METRICS": np.array([[True]]),  # what the ensemble's stream key needs
            }
            return {k: v for k, v in res.items() if k in outputs}
        if kind == "postprocessing":
            toks = inputs["TOKENS_BATCH"]
            lens = inputs["SEQUENCE_LENGTH"]
            texts = ["".join(chr(t) for t in toks[0, b, : lens[0, b]]) for b in range(toks.shape[1])]
            out = np.array([[t.encode() for t in texts]], dtype=object)
            return {"OUTPUT": out}
        # non-streaming engine
        return self._engine_responses(inputs, outputs, streaming=False)[0]

    def _engine_responses(self, inputs, outputs, streaming):
        prompt = inputs["input_ids"][0]
        n = int(inputs["request_output_len"].reshape(-1)[0])
        gen = [int(prompt[i % len(prompt)]) for i in range(n)]
        if "exclude_input_in_output" in inputs and not bool(inputs["exclude_input_in_output"].reshape(-1)[0]):
            gen = [int(t) for t in prompt] + gen  # echo the prompt
        beams = int(inputs["beam_width"].reshape(-1)[0]) if "beam_width" in inputs else 1
        nseq = int(inputs["num_return_sequences"].reshape(-1)[0]) if "num_return_sequences" in inputs else 1

        def resp(tokens, seq):
            r = {
                "output_ids": np.array([[tokens] * beams], dtype=np.int32),
                "sequence_length": np.array([[len(tokens)] * beams], dtype=np.int32),
                "sequence_index": np.array([[seq]], dtype=np.int32),
                "arrival_time_ns": np.array([[123]], dtype=np.int64),
                "cum_log_probs": np.zeros((1, beams), np.float32),
            }
            return {k: v for k, v in r.items() if k in outputs}

        if streaming:
            return [resp([t], s) for s in range(nseq) for t in gen]
        return [resp(gen, s) for s in range(nseq)]

    def stream(self, model, inputs, outputs, request_id):
        self._check(model, inputs)
        self.engine_outputs = list(outputs)
        self.request_ids.append(request_id)
        streaming = bool(inputs["streaming"].reshape(-1)[0]) if "streaming" in inputs else False
        s = FakeStream(self._engine_responses(inputs, outputs, streaming), self)
        self.streams.append(s)
        return s


def make_core(models=None, **settings):
    c = CONTRACT
    bls = c.models["tensorrt_llm_bls"]
    w = Wiring.from_data(c.wiring(), inputs=[t.name for t in bls.inputs], outputs=[t.name for t in bls.outputs])
    # FakeModels' engine echoes the prompt only when asked: a repository rendered with exclude_input_in_output=true
    settings.setdefault("exclude_input_default", True)
    return BLSCore(w, BLSSettings(**settings), models or FakeModels(settings.get("engine_model", "tensorrt_llm")))


def request(text="abc", max_tokens=6, **extra):
    r = {
        "text_input": np.array([[text.encode()]], dtype=object),
        "max_tokens": np.array([[max_tokens]], dtype=np.int32),
    }
    for k, v in extra.items():
        if isinstance(v, bool):
            r[k] = np.array([[v]], dtype=np.bool_)
        elif isinstance(v, int):
            r[k] = np.array([[v]], dtype=np.int32)
        elif isinstance(v, float):
            r[k] = np.array([[v]], dtype=np.float32)
        elif isinstance(v, list):
            r[k] = np.array([[s.encode() for s in v]], dtype=object)
        else:
            r[k] = v
    return r


def run(core, req, requested=None):
    sent = []
    core.run(
        req,
        lambda outputs, final: sent.append((None if outputs is None else dict(outputs), final)),
        requested_outputs=requested,
    )
    return sent


def texts(sent):
    return [o["text_output"].reshape(-1)[0].decode() for o, _ in sent if o and "text_output" in o]


# ------------------------------------------------------------------------------------------ routing


def test_request_fields_reach_engine_under_engine_names():
    models = FakeModels()
    core = make_core(models)
    run(core, request(top_k=5, top_p=0.5, length_penalty=1.5, stream=False, temperature=0.7))
    engine_inputs = next(i for m, i in models.calls if m == "tensorrt_llm")
    assert int(engine_inputs["runtime_top_k"][0, 0]) == 5
    assert float(engine_inputs["runtime_top_p"][0, 0]) == 0.5
    assert float(engine_inputs["len_penalty"][0, 0]) == 1.5
    assert bool(engine_inputs["streaming"][0, 0]) is False
    assert "temperature" in engine_inputs and "seed" not in engine_inputs
    post = [i for m, i in models.calls if m == "postprocessing"]
    post_step = next(s for s in CONTRACT.models["ensemble"].steps if s.model == "postprocessing")
    # every wired input the engine filled; token_offset is not asked for: the post step runs in the BLS
    assert post and set(post[0]) | {"BATCH_INDEX", "TOKEN_OFFSET"} == set(post_step.input_map)


def test_engine_model_name_parameter():
    models = FakeModels(engine_name="my_engine")
    run(make_core(models, engine_model="my_engine"), request())
    assert [m for m, _ in models.calls] == ["preprocessing", "my_engine", "postprocessing"]


def test_engine_perf_metrics_only_when_the_client_asks():
    # preprocessing answers OUT_RETURN_PERF_METRICS=true (the ensemble keys streams on arrival_time_ns); the
    # BLS keys its own streams and passes the client's return_perf_metrics, like NVIDIA's BLS
    for extra, expected in (({}, None), ({"return_perf_metrics": True}, True), ({"return_perf_metrics": False}, False)):
        models = FakeModels()
        run(make_core(models), request(stream=True, **extra))
        engine_inputs = next(i for m, i in models.calls if m == "tensorrt_llm")
        got = engine_inputs.get("return_perf_metrics")
        assert (None if got is None else bool(got.reshape(-1)[0])) is expected, extra


def test_engine_asked_only_for_outputs_someone_reads():
    models = FakeModels()
    sent = run(make_core(models), request("abc", 3, stream=True), requested=["text_output"])
    assert models.engine_outputs == ["output_ids", "sequence_length"]  # no stream-key hints, no perf metrics
    assert texts(sent) == ["a", "b", "c"]
    run(make_core(models), request("abc", 3, stream=True, num_return_sequences=2), requested=["text_output"])
    assert "sequence_index" in models.engine_outputs  # postprocessing keeps one state per sequence
    run(make_core(models), request("abc", 3), requested=["text_output", "arrival_time_ns", "batch_index"])
    assert {"arrival_time_ns", "batch_index"} <= set(models.engine_outputs)  # the client asked for them


def test_request_ids_are_unique_per_process_and_request():
    models = FakeModels()
    core = make_core(models)
    core.run(request(stream=True), lambda o, f: None, request_id="same")
    core.run(request(stream=True), lambda o, f: None, request_id="same")
    a, b = models.request_ids
    assert a != b and a.startswith("same:") and b.startswith("same:")
    # the process tag keeps two BLS instances (processes) from producing the same id for one client id
    assert a.split(":")[1].split("-")[0] == b.split(":")[1].split("-")[0] != ""


# --------------------------------------------------------------------------------------- responses


def test_non_streaming_single_final_response():
    sent = run(make_core(), request("abc", 5))
    assert len(sent) == 1 and sent[0][1] is True
    assert texts(sent) == ["abcab"]


def test_streaming_deltas_then_empty_final():
    sent = run(make_core(), request("xyz", 4, stream=True))
    assert texts(sent) == ["x", "y", "z", "x"]
    assert [f for _, f in sent] == [False] * 4 + [True]
    assert sent[-1][0] is None


def test_streaming_concatenation_equals_non_streaming():
    core = make_core()
    streamed = "".join(texts(run(core, request("hello", 9, stream=True))))
    whole = texts(run(core, request("hello", 9)))[0]
    assert streamed == whole == "hellohell"


def test_requested_outputs_limit_response_and_engine_outputs():
    models = FakeModels()
    sent = run(make_core(models), request(), requested=["text_output"])
    assert set(sent[0][0]) == {"text_output"}
    sent = run(make_core(models), request(), requested=["text_output", "cum_log_probs"])
    assert set(sent[0][0]) == {"text_output", "cum_log_probs"}


def test_accumulate_tokens_sends_full_text():
    sent = run(make_core(accumulate_tokens=True), request("ab", 4, stream=True))
    assert texts(sent) == ["a", "ab", "aba", "abab"]


def test_num_return_sequences_non_streaming_hold_one_back():
    sent = run(make_core(), request("ab", 2, num_return_sequences=2))
    assert [f for _, f in sent] == [False, True]
    assert texts(sent) == ["ab", "ab"]


def test_batch_rows_non_streaming_stack():
    core = make_core(decoupled=False)
    req = {"text_input": np.array([[b"ab"], [b"xyz"]], dtype=object), "max_tokens": np.array([[3], [2]], np.int32)}
    sent = run(core, req)
    assert len(sent) == 2
    stacked = stack_rows([o for o, _ in sent])
    assert stacked["text_output"].reshape(-1).tolist() == [b"aba", b"xy"]


# ------------------------------------------------------------------------------------------ stops


def test_non_streaming_stop_string_truncates():
    sent = run(make_core(), request("abcd", 8, stop_words=["cd"]))
    assert texts(sent) == ["abcd"]  # the stop string is kept, as the engine's token-level stop does


def test_streaming_stop_string_cuts_and_cancels_engine():
    models = FakeModels()
    sent = run(make_core(models), request("hello world", 40, stream=True, stop_words=["o w"]))
    assert "".join(texts(sent)) == "hello w"
    assert sent[-1] == (None, True)
    assert models.streams[0].cancelled
    assert models.streams[0].consumed < 40


def test_streaming_stop_string_drains_when_engine_ignores_cancel():
    models = FakeModels()
    models.honour_cancel = False
    sent = run(make_core(models), request("hello world", 40, stream=True, stop_words=["o w"]))
    assert "".join(texts(sent)) == "hello w"
    assert models.streams[0].consumed == 40  # drained after the final response
    assert sum(1 for _, f in sent if f) == 1


def test_streaming_held_text_flushed_at_end():
    sent = run(make_core(), request("ab<", 3, stream=True, stop_words=["<x"]))
    assert "".join(texts(sent)) == "ab<"
    assert sent[-1][1] is True and texts([sent[-1]]) == ["<"]


def test_stop_inside_echoed_prompt_is_ignored_when_input_not_excluded():
    # With exclude_input_in_output=false the engine echoes the prompt ("ab|") before the generated
    # text ("ab|ab|ab|"); a stop string that matches inside the echo must not cut it.
    sent = run(make_core(), request("ab|", 9, stop_words=["|a"], exclude_input_in_output=False))
    assert texts(sent) == ["ab|ab|a"]  # echo kept, generated "ab|ab|ab|" cut after its first "|a"
    sent = run(make_core(), request("ab|", 9, stop_words=["|a"]))
    assert texts(sent) == ["ab|a"]
    # the engine's default (NVIDIA's: echo) applies when the request does not say
    sent = run(
        make_core(exclude_input_default=False), request("ab|", 9, stop_words=["|a"], exclude_input_in_output=False)
    )
    assert texts(sent) == ["ab|ab|a"]


# ------------------------------------------------------------------------------------- validation


@pytest.mark.parametrize(
    "req,settings,field",
    [
        (request(""), {}, "text_input"),
        ({"max_tokens": np.array([[3]], np.int32)}, {}, "text_input"),
        ({"text_input": np.array([[b"x"]], dtype=object)}, {}, "max_tokens"),
        (request(max_tokens=0), {}, "max_tokens"),
        (request(stop_words=np.array([[1, 2]], np.int32)), {}, "stop_words"),
        (request(beam_width=4), {"max_beam_width": 2}, "beam_width"),
        (request(beam_width=2, stream=True), {"max_beam_width": 2}, "beam_width"),
        (request(beam_width=2), {"max_beam_width": 2, "accumulate_tokens": True}, "beam_width"),
        (request(stream=True), {"decoupled": False}, "stream"),
        (request(num_draft_tokens=3), {}, "num_draft_tokens"),
    ],
)
def test_validation_names_the_field(req, settings, field):
    with pytest.raises(BLSRequestError) as info:
        parse_request(req, BLSSettings(**settings))
    assert info.value.field == field
    assert str(info.value).startswith(field + ":")


def test_streaming_with_beam_message_mentions_b30_rule():
    with pytest.raises(BLSRequestError, match="streaming is only supported with beam_width 1"):
        parse_request(request(beam_width=2, stream=True), BLSSettings(max_beam_width=4))


def test_word_list_parsing():
    # one stop string per element (never split on commas); token-id lists are for the engine only
    assert parse_word_list(np.array([[b"a,b", b"[13]", b"", b"[x]"]], dtype=object)) == ["a,b", "[x]"]
    with pytest.raises(BLSRequestError, match="stop_words"):
        parse_word_list(np.array([b"\xff"], dtype=object))
    with pytest.raises(BLSRequestError, match="stop_words"):
        parse_word_list(5)


def test_step_error_carries_step_name():
    core = make_core(FakeModels(fail="postprocessing"))
    with pytest.raises(BLSStepError, match="^postprocessing: boom"):
        run(core, request())


# ------------------------------------------------------------------------------------- coalescing


class BatchingStream(FakeStream):
    """A stream whose responses arrive in given groups (what the reader thread hands over)."""

    def __init__(self, responses, owner, sizes):
        super().__init__(responses, owner)
        self.sizes = sizes

    def batches(self):
        it = iter(self)
        for n in itertools.cycle(self.sizes):
            batch = list(itertools.islice(it, n))
            if not batch:
                return
            yield batch


class BatchingModels(FakeModels):
    def __init__(self, sizes):
        super().__init__()
        self.sizes = sizes

    def stream(self, model, inputs, outputs, request_id):
        self._check(model, inputs)
        self.engine_outputs = list(outputs)
        self.request_ids.append(request_id)
        streaming = bool(inputs["streaming"].reshape(-1)[0])
        s = BatchingStream(self._engine_responses(inputs, outputs, streaming), self, self.sizes)
        self.streams.append(s)
        return s


def test_merge_responses_joins_tokens_and_keeps_first_and_last():
    a = {
        "output_ids": np.array([[[5, 0]]], np.int32),
        "sequence_length": np.array([[1]], np.int32),
        "arrival_time_ns": np.array([[10]], np.int64),
        "last_token_time_ns": np.array([[11]], np.int64),
    }
    b = {
        "output_ids": np.array([[[6, 7]]], np.int32),
        "sequence_length": np.array([[2]], np.int32),
        "arrival_time_ns": np.array([[10]], np.int64),
        "last_token_time_ns": np.array([[13]], np.int64),
    }
    m = merge_responses([a, b])
    assert m["output_ids"].tolist() == [[[5, 6, 7]]]
    assert m["sequence_length"].tolist() == [[3]] and m["sequence_length"].dtype == np.int32
    assert int(m["arrival_time_ns"][0, 0]) == 10 and int(m["last_token_time_ns"][0, 0]) == 13
    assert can_merge(["output_ids", "sequence_length"]) and not can_merge(["some_new_output"])


def test_coalescing_merges_waiting_responses_into_fewer_chunks():
    models = BatchingModels([1, 3, 2])
    sent = run(make_core(models, coalesce=True), request("abcdefg", 12, stream=True))
    chunks = texts(sent)
    assert "".join(chunks) == "abcdefgabcde"
    assert len(chunks) == 6  # 12 engine responses arrived in groups 1,3,2,1,3,2
    post_calls = [i for m, i in models.calls if m == "postprocessing"]
    assert len(post_calls) == 6


def test_coalescing_off_by_default_one_response_per_token():
    models = BatchingModels([4])
    sent = run(make_core(models), request("abcd", 8, stream=True))
    assert len(texts(sent)) == 8


def test_coalescing_with_stop_string_and_sequences():
    models = BatchingModels([5])
    sent = run(make_core(models, coalesce=True), request("hello world", 40, stream=True, stop_words=["o w"]))
    assert "".join(texts(sent)) == "hello w"
    assert models.streams[0].cancelled
    models = BatchingModels([3])
    sent = run(
        make_core(models, coalesce=True),
        request("ab", 4, stream=True, num_return_sequences=2),
        requested=["text_output", "sequence_index"],
    )
    per_seq = {}
    for o, _ in sent:
        if o:
            per_seq.setdefault(int(o["sequence_index"][0, 0]), []).append(o["text_output"][0, 0].decode())
    assert {k: "".join(v) for k, v in per_seq.items()} == {0: "abab", 1: "abab"}


def test_client_cancellation_polled_by_count_and_time(monkeypatch):
    from repo_builder.runtime import bls

    polls = []

    def cancelled():
        polls.append(1)
        return True

    monkeypatch.setattr(bls, "CANCEL_POLL_SECONDS", 0.0)
    models = FakeModels()
    sent = []
    make_core(models).run(request("abc", 40, stream=True), lambda o, f: sent.append((o, f)), cancelled=cancelled)
    assert len(polls) == 1 and models.streams[0].cancelled
    assert len(texts(sent)) == bls.CANCEL_POLL_EVERY - 1 and sent[-1] == (None, True)
    # polls are an IPC round trip each: never more often than CANCEL_POLL_SECONDS
    monkeypatch.setattr(bls, "CANCEL_POLL_SECONDS", 1e9)
    polls.clear()
    make_core(FakeModels()).run(request("abc", 40, stream=True), lambda o, f: None, cancelled=cancelled)
    assert polls == []


def test_non_streaming_request_of_a_client_gone_stops_the_engine():
    """The engine answers a non-streaming request once, at its end, so nothing polled the client before:
    the engine generated for nobody. The watcher polls every watched request's client and cancels the
    engine request of one that is gone; a request that is done leaves the watch."""
    from repo_builder.runtime.bls import CancelWatch
    from repo_builder.runtime.metrics import ModelMetrics

    watch = CancelWatch(period_s=1e9)  # polled by hand here
    metrics = ModelMetrics(None, "tensorrt_llm_bls", "1", "tensorrt_llm_bls")
    gone, here = FakeStream([], FakeModels()), FakeStream([], FakeModels())
    a = watch.add(lambda: True, gone, metrics)
    watch.add(lambda: False, here, metrics)
    assert watch.poll() == 1 and gone.cancelled and not here.cancelled
    assert metrics.value("repo_builder_streams_cancelled_total") == 1
    assert watch.poll() == 0  # cancelled once, then no longer watched
    watch.remove(a)


def test_non_streaming_requests_are_watched_only_while_the_engine_works(monkeypatch):
    from repo_builder.runtime import bls

    seen = []

    class Watch(bls.CancelWatch):
        def add(self, cancelled, stream, metrics):
            seen.append(stream)
            return super().add(cancelled, stream, metrics)

    w = Watch(period_s=1e9)
    monkeypatch.setattr(bls, "_CANCEL_WATCH", w)
    models = FakeModels()
    sent = []
    make_core(models).run(request("abc", 6, stream=False), lambda o, f: sent.append((o, f)), cancelled=lambda: False)
    assert [t.stream for t in seen] == models.streams and w._entries == {}
    assert "".join(texts(sent)) == "abcabc"
    # python_backend's exec(decoupled=True) returns only with the engine's first response, which for a
    # non-streaming request is its last: a client gone before then gets the engine a stop request by id
    stops = []

    class Stopping(FakeModels):
        def stop_request(self, model, inputs, request_id):
            stops.append((model, request_id))

    target = bls._PendingCancel(Stopping(), "tensorrt_llm", {}, "rid-1")
    target.cancel()
    assert stops == [("tensorrt_llm", "rid-1")]


def test_every_engine_request_of_the_bls_ends_its_postprocessing_state():
    """However a row's engine request ends (its last response, a stop string, an error), the caller's
    end_request is called with its id: the BLS's in-process postprocessing then drops that stream's state
    (before, every engine request left one until the LRU bound evicted it)."""

    class Ending(FakeModels):
        def __init__(self, **kw):
            super().__init__(**kw)
            self.ended = []

        def end_request(self, request_id):
            self.ended.append(request_id)

    ok = Ending()
    make_core(ok).run(request("abc", 4, stream=True), lambda o, f: None)
    assert ok.ended == ok.request_ids and len(ok.ended) == 1
    failing = Ending(fail="postprocessing")
    with pytest.raises(BLSStepError):
        make_core(failing).run(request("abc", 4, stream=True), lambda o, f: None)
    assert failing.ended == failing.request_ids and len(failing.ended) == 1
