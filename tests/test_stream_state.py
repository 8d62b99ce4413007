"""Streaming postprocessing with several instances: detokenizer states shared in token_offset order.

Two :class:`Postprocessor` objects over one :class:`StreamStates` file stand for two postprocessing
instances (processes; the served test is tests/e2e/test_postprocessing_instances.py). They get a stream's
responses alternately, as Triton's scheduler may hand them out, and must give exactly the deltas one
instance gives; a response that comes before the one ahead of it in its stream waits for it.
"""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from _text_support import tokenizer as load
from test_postprocessing_model import B25_LONG, post, text

from repo_builder.runtime import stream_state
from repo_builder.runtime.stream_ledger import StreamLedger
from repo_builder.runtime.stream_state import WINDOW, StreamStates


def response(ids, offset=None, arrival=None):
    inputs = {"TOKENS_BATCH": np.array([[list(ids)]], np.int32), "SEQUENCE_LENGTH": np.array([[len(ids)]], np.int32)}
    if offset is not None:
        inputs["TOKEN_OFFSET"] = np.array([[offset]], np.int32)
    if arrival is not None:
        inputs["ARRIVAL_TIME_NS"] = np.array([[arrival]], np.int64)
    return inputs


def instances(tmp_path, n=2, ledger=None):
    path = tmp_path / "states"
    out = []
    for _ in range(n):
        p = post()
        if ledger is not None:
            p.ledger = ledger
        p.use_shared_states(StreamStates(path, slots=64))
        out.append(p)
    return out


def streams():
    tok = load("mistral_v1_tokenizer")
    a = tok.encode("Deep learning is a subset of machine learning, isn't it?", add_special_tokens=False)
    return tok, {"req-a": a, "req-b": list(B25_LONG)}  # B25: characters split over several byte tokens


def test_alternating_instances_give_the_one_instance_deltas(tmp_path):
    tok, ids = streams()
    one = post()
    shared = instances(tmp_path)
    expected: dict[str, list[str]] = {r: [] for r in ids}
    got: dict[str, list[str]] = {r: [] for r in ids}
    turn = 0
    for i in range(max(len(v) for v in ids.values())):
        for rid, seq in ids.items():
            if i >= len(seq):
                continue
            expected[rid] += text(one.process(response([seq[i]], arrival=7), request_id=rid))
            p = shared[turn % 2]
            turn += 1
            got[rid] += text(p.process(response([seq[i]], offset=i, arrival=7), request_id=rid))
            p.commit()
    assert got == expected
    assert "".join(got["req-b"]) == tok.decode(ids["req-b"]) and all("\ufffd" not in d for d in got["req-b"])
    # without the shared state (each instance its own), the text breaks: what the design fixes
    split = [post(), post()]
    broken = []
    for i, t in enumerate(ids["req-a"]):
        broken += text(split[i % 2].process(response([t], arrival=7), request_id="req-a"))
    assert "".join(broken) != "".join(expected["req-a"])


def test_a_response_waits_until_the_one_before_it_was_sent(tmp_path):
    first, second = instances(tmp_path)
    tok, ids = streams()
    seq = ids["req-a"]
    first.process(response(seq[:1], offset=0, arrival=1), request_id="r")  # served, not yet sent
    events = []

    def later():
        out = text(second.process(response(seq[1:2], offset=1, arrival=1), request_id="r"))
        events.append(("second decoded", out))
        second.commit()

    worker = threading.Thread(target=later)
    worker.start()
    time.sleep(0.2)
    assert events == []  # still waiting for the first response's turn to end
    events.append(("first sent", None))
    first.commit()
    worker.join(10)
    assert [e[0] for e in events] == ["first sent", "second decoded"]
    assert events[1][1] == [tok.decode(seq[:2])[len(tok.decode(seq[:1])) :]]


def test_a_lost_response_fails_the_one_after_it_alone_and_the_stream_goes_on(tmp_path, monkeypatch):
    monkeypatch.setattr(stream_state, "WAIT_S", 0.2)
    (p,) = instances(tmp_path, 1)
    tok = load("mistral_v1_tokenizer")
    seq = tok.encode("one two three four five", add_special_tokens=False)
    p.process(response(seq[:1], offset=0, arrival=3), request_id="r")
    p.commit()
    with pytest.raises(Exception, match="TOKEN_OFFSET.*offset 2 waited"):
        p.process(response(seq[2:3], offset=2, arrival=3), request_id="r")  # offset 1 never comes
    p.commit()
    started = time.monotonic()
    out = text(p.process(response(seq[3:4], offset=3, arrival=3), request_id="r"))
    p.commit()
    assert time.monotonic() - started < 0.2 and out and out[0].strip()


def test_the_ledger_budget_ends_a_stream_and_frees_its_id(tmp_path):
    ledger = StreamLedger(tmp_path / "ledger", slots=64)
    tok, ids = streams()
    seq = ids["req-b"]
    one = post()
    one_ledger = StreamLedger(tmp_path / "ledger1", slots=64)
    one.use_ledger(one_ledger)
    shared = instances(tmp_path, ledger=ledger)
    assert ledger.begin("req", len(seq)) and one_ledger.begin("req", len(seq))
    assert ledger.lookup("req")[1] >= 1 << 63, "pick an id whose ledger hash needs the 64th bit"
    expected, got = [], []
    for i, t in enumerate(seq):
        expected += text(one.process(response([t]), request_id="req"))
        got += text(shared[i % 2].process(response([t], offset=i), request_id="req"))
        shared[i % 2].commit()
    assert got == expected
    assert ledger.lookup("req") is None  # ended: the id may start a new stream keyed alone
    # the same id again: offset 0 starts over from an empty state
    assert ledger.begin("req", 3)
    again = []
    for i, t in enumerate(seq[:3]):
        again += text(shared[i % 2].process(response([t], offset=i), request_id="req"))
        shared[i % 2].commit()
    assert "".join(again) == tok.decode(seq[:3]).rstrip("\ufffd")


def test_without_token_offset_the_instance_state_is_used_and_logged_once(tmp_path):
    (p,) = instances(tmp_path, 1)
    logged = []
    p.log = logged.append
    tok = load("mistral_v1_tokenizer")
    seq = tok.encode("Hello there world", add_special_tokens=False)
    out = [text(p.process(response([t], arrival=5), request_id="r"))[0] for t in seq]
    assert "".join(out) == tok.decode(seq)
    assert len(logged) == 1 and "token_offset" in logged[0]


def test_the_window_fits_its_slot(tmp_path):
    """A long run without a safe cut (edge 3) is cut at WINDOW ids, so a slot always holds the window."""
    (p,) = instances(tmp_path, 1)
    bad = [3] * (3 * WINDOW)  # byte tokens that never form a character
    for i, t in enumerate(bad):
        p.process(response([t], offset=i, arrival=9), request_id="w")
        p.commit()
        assert len(p._shared_factory()._ids) == 0  # fresh each time: the state is in the slot
    slot = p.shared._find(stream_state.stream_hash(("ens", "w", 0, 9, 0, 0, 0)))
    assert 0 < p.shared._words[slot, 3] <= WINDOW


def test_wants_shared_states_needs_streaming_several_instances_and_the_input():
    from _text_support import model_config

    from repo_builder.runtime.postprocessing import Postprocessor

    def make(count, decoupled=True, offset_input=True):
        cfg = model_config("trtllm-1.2", "postprocessing", {"decoupled_mode": decoupled})
        cfg["instance_group"] = [{"count": count, "kind": "KIND_CPU"}]
        if not offset_input:
            cfg["input"] = [i for i in cfg["input"] if i["name"] != "TOKEN_OFFSET"]
        return Postprocessor(cfg, tokenizer=load("mistral_v1_tokenizer"))

    assert make(2).wants_shared_states
    assert not make(1).wants_shared_states
    assert not make(2, decoupled=False).wants_shared_states
    assert not make(2, offset_input=False).wants_shared_states
