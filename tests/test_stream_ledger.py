"""The stream ledger: a reused request id goes without perf metrics once its earlier stream has ended.

Preprocessing and postprocessing are separate processes in Triton; they share the ledger through a file in
/dev/shm (repo_builder/runtime/stream_ledger.py). These tests drive the two cores with one ledger file each
side maps on its own (a second process where it matters), with a real SentencePiece tokenizer whose first
token of a stream decodes without its leading space: a stream that continued an earlier stream's state
would show it.
"""

from __future__ import annotations

import subprocess
import sys
import time

import numpy as np
import pytest
from _text_support import tokenizer as load
from test_postprocessing_model import post, text
from test_preprocessing_model import pre, q, words

from repo_builder.profile.contract import load_contract
from repo_builder.runtime import stream_ledger
from repo_builder.runtime.preprocessing import EnsembleStreamKeys
from repo_builder.runtime.stream_ledger import StreamLedger, id_hash, ledger_path
from repo_builder.runtime.triton_io import RequestError

SENTENCE = "Deep learning is a subset of machine learning"


@pytest.fixture
def shm(tmp_path, monkeypatch):
    """Ledger files under a test folder instead of /dev/shm."""
    monkeypatch.setattr(stream_ledger, "SHM_DIR", tmp_path)
    return tmp_path


@pytest.fixture
def pair(shm):
    """(preprocessing core, postprocessing core), each with its own mapping of one ledger file."""
    path = ledger_path("preprocessing", str(shm / "repo" / "preprocessing"), server_pid=4242)
    assert path == ledger_path("postprocessing", str(shm / "repo" / "postprocessing"), server_pid=4242)
    p, o = pre(), post()
    p.use_response_parameters(False, StreamLedger(path))
    o.use_ledger(StreamLedger(path))
    assert o.ledger is not None
    return p, o


#: what the ensemble asks preprocessing for: its step's output_map (Triton asks a step for exactly those)
ENSEMBLE_OUTPUTS = [
    step for step in load_contract("trtllm-1.2").models["ensemble"].steps if step.model == "preprocessing"
][0].output_map.keys()


def ask(p, request_id, max_tokens, requested=ENSEMBLE_OUTPUTS, stream=True, stop_words=None):
    inputs = {
        "QUERY": q(SENTENCE),
        "REQUEST_OUTPUT_LEN": np.array([[max_tokens]], np.int32),
        "STREAM": np.array([[stream]], bool),
    }
    if stop_words is not None:
        inputs["STOP_WORDS_DICT"] = words(stop_words)
    return bool(p.process(inputs, request_id, requested)["OUT_RETURN_PERF_METRICS"].reshape(-1)[0])


def stream(o, request_id, ids, arrival=0):
    """Feed ``ids`` one response per token; returns the deltas."""
    deltas = []
    for t in ids:
        inputs = {"TOKENS_BATCH": np.array([[[t]]], np.int32), "SEQUENCE_LENGTH": np.array([[1]], np.int32)}
        if arrival:
            inputs["ARRIVAL_TIME_NS"] = np.array([[arrival]], np.int64)
        deltas += text(o.process(inputs, request_id=request_id))
    return deltas


def test_a_reused_id_needs_no_perf_metrics_once_its_stream_ran_to_max_tokens(pair):
    p, o = pair
    llama = load("mistral_v1_tokenizer")
    ids = llama.encode(SENTENCE, add_special_tokens=False)
    for _round in range(3):
        assert ask(p, "b0-1", len(ids)) is False  # first use, then: the earlier stream ended
        deltas = stream(o, "b0-1", ids)
        assert "".join(deltas) == llama.decode(ids) == SENTENCE
        assert deltas[0] == "Deep"  # a fresh state: no space carried over from the previous round
    assert len(o.streams) == 0  # every ended stream dropped its state


def test_an_id_whose_stream_is_in_flight_or_stopped_short_still_asks_for_perf_metrics(pair):
    p, o = pair
    llama = load("mistral_v1_tokenizer")
    ids = llama.encode(SENTENCE, add_special_tokens=False)
    assert ask(p, "X", len(ids)) is False
    first = stream(o, "X", ids[:3])  # in flight
    assert ask(p, "X", len(ids)) is True  # concurrent reuse: keyed by the engine's arrival time
    second = stream(o, "X", ids, arrival=777)
    first += stream(o, "X", ids[3:5])  # ... and then stops short of its budget (end id, stop word)
    assert "".join(second) == SENTENCE and "".join(first) == llama.decode(ids[:5])
    assert ask(p, "X", len(ids)) is True  # never counted to its end: still ambiguous


def test_a_stream_ended_by_a_response_without_tokens_frees_its_id(pair):
    """The end id (and a cancellation) ends a stream with a response of zero new tokens, which only a
    stream's last response can be: the id is free again, with no state left behind."""
    p, o = pair
    llama = load("mistral_v1_tokenizer")
    ids = llama.encode(SENTENCE, add_special_tokens=False)
    for _round in range(2):
        assert ask(p, "Y", 100) is False  # the earlier round ended short of its budget, yet freed the id
        deltas = stream(o, "Y", ids[:4])
        empty = {"TOKENS_BATCH": np.zeros((1, 1, 0), np.int32), "SEQUENCE_LENGTH": np.array([[0]], np.int32)}
        deltas += text(o.process(empty, request_id="Y"))
        assert "".join(deltas) == llama.decode(ids[:4]) and deltas[0] == "Deep"
    assert len(o.streams) == 0


def test_a_stream_the_engine_ended_on_a_stop_word_frees_its_id(pair):
    """Preprocessing records the request's stop sequences with its registration; the response whose
    generated ids end with one of them is the stream's last (the engine stops there), so it ends the stream
    although max_tokens is not used up. Before, the id stayed registered and every later request with it
    asked the engine for perf metrics. A prefix of a two-token stop word ends nothing."""
    p, o = pair
    llama = load("mistral_v1_tokenizer")
    ids = llama.encode(SENTENCE, add_special_tokens=False)
    word = llama.decode(ids[4:6])  # two tokens, matched across two responses
    assert llama.encode(word, add_special_tokens=False) == ids[4:6]
    for _round in range(3):
        assert ask(p, "W", 100, stop_words=[word]) is False  # the earlier round's stop freed the id
        deltas = stream(o, "W", ids[:5])
        assert ask(p, "W", 100) is True and o.ledger.registered() == 1  # ids[4] alone is no stop: in flight
        deltas += stream(o, "W", ids[5:6])  # the engine's last response: the stop word's last token
        assert "".join(deltas) == llama.decode(ids[:6]) and deltas[0] == "Deep"
        assert o.ledger.registered() == 0 and len(o.streams) == 0


def test_stop_words_that_do_not_fit_the_record_leave_the_stream_to_its_budget(pair):
    """Only what fits a slot's record (stream_ledger.STOP_INTS) is recorded; a stream whose stop words were
    not recorded is never ended by a guess (it stays registered: later requests with its id only cost perf
    metrics)."""
    p, o = pair
    llama = load("mistral_v1_tokenizer")
    ids = llama.encode(SENTENCE, add_special_tokens=False)
    many = [llama.decode(ids[4:5])] + [f"zebra{i} quagga{i}" for i in range(12)]
    assert ask(p, "V", 100, stop_words=many) is False
    stream(o, "V", ids[:5])
    assert ask(p, "V", 100) is True


def test_a_refused_response_ends_its_counted_stream(pair):
    """Postprocessing refusing a response (a negative token id) fails the ensemble request, which then runs
    no further step: the stream's state and slot are freed with it."""
    p, o = pair
    llama = load("mistral_v1_tokenizer")
    ids = llama.encode(SENTENCE, add_special_tokens=False)
    assert ask(p, "E", 100) is False
    stream(o, "E", ids[:3])
    bad = {"TOKENS_BATCH": np.array([[[-5]]], np.int32), "SEQUENCE_LENGTH": np.array([[1]], np.int32)}
    with pytest.raises(RequestError, match="TOKENS_BATCH"):
        o.process(bad, request_id="E")
    assert o.ledger.registered() == 0 and len(o.streams) == 0
    assert ask(p, "E", 100) is False


def test_postprocessing_gauges_count_states_and_registered_streams(pair):
    p, o = pair
    llama = load("mistral_v1_tokenizer")
    ids = llama.encode(SENTENCE, add_special_tokens=False)
    assert ask(p, "G", len(ids)) is False
    stream(o, "G", ids[:2])
    assert o.gauges() == {
        ("repo_builder_detokenizer_streams", None): 1,
        ("repo_builder_stream_ledger_streams", None): 1,
    }
    stream(o, "G", ids[2:])
    assert set(o.gauges().values()) == {0}


def test_a_non_streaming_request_is_ended_by_its_only_response(pair):
    """A non-streaming one-row request gets one engine response, however few tokens it holds (an end id
    before max_tokens): preprocessing registers it so (STREAM false or absent), and that response ends it."""
    p, o = pair
    llama = load("mistral_v1_tokenizer")
    ids = llama.encode(SENTENCE, add_special_tokens=False)
    whole = {"TOKENS_BATCH": np.array([[ids[:3]]], np.int32), "SEQUENCE_LENGTH": np.array([[3]], np.int32)}
    for _round in range(3):
        assert ask(p, "Z", 100, stream=False) is False
        assert text(o.process(whole, request_id="Z")) == [llama.decode(ids[:3])]
    absent = {"QUERY": q(SENTENCE), "REQUEST_OUTPUT_LEN": np.array([[100]], np.int32)}  # client sent no stream
    assert not p.process(absent, "Z", ENSEMBLE_OUTPUTS)["OUT_RETURN_PERF_METRICS"].reshape(-1)[0]
    assert text(o.process(whole, request_id="Z")) == [llama.decode(ids[:3])]
    assert ask(p, "Z", 100) is False


def test_direct_calls_never_register_their_id(pair):
    """A direct preprocessing call (every output, or DETOKENIZER_KEY among those asked for) is no ensemble
    step: postprocessing's ensemble step will never count its stream, so registering its id would make every
    later ensemble request with that id ask for perf metrics (and carry them to its client)."""
    p, _ = pair
    assert "DETOKENIZER_KEY" not in ENSEMBLE_OUTPUTS and "OUT_RETURN_PERF_METRICS" in ENSEMBLE_OUTPUTS
    for requested in (None, list(p.out_dtypes), ["INPUT_ID", "DETOKENIZER_KEY", "OUT_RETURN_PERF_METRICS"]):
        assert ask(p, "direct", 8, requested=requested) is False  # and its own answer has no perf metrics
    assert ask(p, "direct", 8) is False  # the first ensemble request of the id is keyed alone


def test_the_empty_id_is_keyed_alone_only_while_the_ledger_holds_it(pair):
    """Clients that send no request id one after another (a benchmark at concurrency 1): each stream is
    registered, keyed ("", 0) and ended; a concurrent one asks for perf metrics; without a registration a
    response of the empty id is decoded whole (a direct postprocessing call)."""
    p, o = pair
    llama = load("mistral_v1_tokenizer")
    ids = llama.encode(SENTENCE, add_special_tokens=False)
    assert [b for b in stream(o, "", ids[:2])] == [llama.decode(ids[:1]), llama.decode(ids[1:2])]
    for _round in range(2):
        assert ask(p, "", len(ids)) is False
        first = stream(o, "", ids[:4])
        assert ask(p, "", len(ids)) is True  # in flight: the second one is keyed by its arrival time
        second = stream(o, "", ids, arrival=99 + _round)  # the engine's arrival time: new per request
        first += stream(o, "", ids[4:])
        assert "".join(first) == "".join(second) == SENTENCE and first[0] == "Deep"


def test_non_streaming_and_several_row_requests(pair):
    """A one-response stream ends at once when it holds the budget; a request of several rows is never
    registered (postprocessing cannot count rows keyed by batch_index)."""
    p, o = pair
    llama = load("mistral_v1_tokenizer")
    ids = llama.encode(SENTENCE, add_special_tokens=False)
    assert ask(p, "whole", len(ids)) is False
    whole = {"TOKENS_BATCH": np.array([[ids]], np.int32), "SEQUENCE_LENGTH": np.array([[len(ids)]], np.int32)}
    assert text(o.process(whole, request_id="whole")) == [SENTENCE]
    assert ask(p, "whole", len(ids)) is False
    two = {"QUERY": q("a", "b"), "REQUEST_OUTPUT_LEN": np.array([[4], [4]], np.int32)}
    assert p.process(two, "rows", ENSEMBLE_OUTPUTS)["OUT_RETURN_PERF_METRICS"].tolist() == [[False], [False]]
    assert p.process(two, "rows", ENSEMBLE_OUTPUTS)["OUT_RETURN_PERF_METRICS"].tolist() == [[True], [True]]


def test_bls_requests_leave_the_ensemble_keys_alone(pair):
    """The BLS does not ask preprocessing for OUT_RETURN_PERF_METRICS: its ids are neither claimed nor
    registered, so an ensemble request with the same id later is still a first use."""
    p, _ = pair
    bls_outputs = [n for n in p.out_dtypes if n != "OUT_RETURN_PERF_METRICS"]
    ask(p, "shared", 8, requested=bls_outputs)
    ask(p, "shared", 8, requested=bls_outputs)
    assert ask(p, "shared", 8) is False


def test_ledger_slots_probe_reuse_and_fill(shm):
    slots = 64
    ledger = StreamLedger(shm / "t", slots=slots)
    assert ledger.begin("a", 5) and ledger.lookup("a")[2] == 5
    assert not ledger.begin("a", 5)  # in flight
    slot, key, _ = ledger.lookup("a")
    ledger.end(slot, key)
    assert ledger.lookup("a") is None and ledger.begin("a", 9)  # ended: may start again
    # ids whose probe windows are full of registered streams get no slot, so they are not keyed alone
    base = id_hash("a") & (slots - 1)
    crowd = [f"c{i}" for i in range(20_000) if id_hash(f"c{i}") & (slots - 1) == base]
    assert len(crowd) > stream_ledger.PROBES
    placed = [c for c in crowd if ledger.begin(c, 1)]
    assert len(placed) >= stream_ledger.PROBES - 1 and all(ledger.lookup(c) for c in placed)
    late = next(c for c in crowd if c not in placed)
    assert ledger.lookup(late) is None and not ledger.begin(late, 1)
    # a slot whose stream ended is given to another id
    slot, key, _ = ledger.lookup(placed[0])
    ledger.end(slot, key)
    assert ledger.begin(late, 1) and ledger.lookup(late)[0] == slot
    assert ledger.lookup(placed[0]) is None and ledger.begin(placed[0], 1) is False  # window full again
    ledger.close(unlink=True)
    assert not (shm / "t").exists()


def test_the_ledger_is_shared_across_processes(shm):
    """A second Python process (as Triton's stubs are) sees the registration and ends it."""
    path = shm / "cross"
    ledger = StreamLedger(path)
    assert ledger.begin("req-1", 7)
    code = (
        "import sys; from repo_builder.runtime.stream_ledger import StreamLedger\n"
        "l = StreamLedger(sys.argv[1]); s, k, b = l.lookup('req-1'); assert b == 7; l.end(s, k); l.close()\n"
    )
    subprocess.run([sys.executable, "-c", code, str(path)], check=True)
    assert ledger.lookup("req-1") is None
    assert ledger.begin("req-1", 7)
    ledger.close()


def test_preprocessing_processes_registering_at_once_give_each_id_one_slot(shm):
    """Several preprocessing instances are processes: four register the same ids at the same time and
    each id is granted to exactly one of them (the file lock), never to two."""
    path = shm / "race"
    StreamLedger(path).close()
    code = (
        "import sys, time; from repo_builder.runtime.stream_ledger import StreamLedger\n"
        "l = StreamLedger(sys.argv[1]); start = float(sys.argv[2])\n"
        "while time.time() < start: pass\n"
        "print(' '.join(str(i) for i in range(3000) if l.begin(f'id-{i}', 4)))\n"
    )
    start = str(time.time() + 1.5)
    runs = [
        subprocess.Popen([sys.executable, "-c", code, str(path), start], stdout=subprocess.PIPE, text=True)
        for _ in range(4)
    ]
    won = [int(i) for r in runs for i in r.communicate()[0].split()]
    assert all(r.returncode == 0 for r in runs)
    assert sorted(won) == list(range(3000))


def test_two_preprocessing_instances_share_the_ledger(shm):
    """With two instances no id is keyed alone by both: the second sees the first one's stream in flight."""
    path = ledger_path("preprocessing", str(shm / "repo" / "preprocessing"), server_pid=7)
    a, b, o = pre(), pre(), post()
    for core in (a, b):  # as two instances of one model: each its own mapping of the ledger
        core.stream_keys = EnsembleStreamKeys(instances=2, ledger=StreamLedger(path))
    o.use_ledger(StreamLedger(path))
    llama = load("mistral_v1_tokenizer")
    ids = llama.encode(SENTENCE, add_special_tokens=False)
    assert ask(a, "r", len(ids)) is False and ask(b, "r", len(ids)) is True
    assert "".join(stream(o, "r", ids)) == SENTENCE
    assert ask(b, "r", len(ids)) is False  # ended: either instance may key it alone again


def test_ledger_file_names_pair_models_by_name_and_repository(tmp_path):
    a = ledger_path("llama_preprocessing", str(tmp_path / "r" / "llama_preprocessing"), server_pid=1)
    assert a == ledger_path("llama_postprocessing", str(tmp_path / "r" / "llama_postprocessing"), server_pid=1)
    assert a != ledger_path("preprocessing", str(tmp_path / "r" / "preprocessing"), server_pid=1)
    assert a != ledger_path("llama_preprocessing", str(tmp_path / "other" / "llama_preprocessing"), server_pid=1)
    assert a != ledger_path("llama_preprocessing", str(tmp_path / "r" / "llama_preprocessing"), server_pid=2)
    assert ledger_path("my_tokenizer", str(tmp_path / "r" / "my_tokenizer")) is None
    assert a is not None and a.name.startswith("repo-builder-streams-1-")


def test_end_request_drops_the_states_of_one_request_id():
    """What the BLS calls when one of its engine requests ended: only that id's states go."""
    o = post()
    llama = load("mistral_v1_tokenizer")
    ids = llama.encode(SENTENCE, add_special_tokens=False)
    stream(o, "r1", ids[:2])
    stream(o, "r2", ids[:2])
    assert len(o.streams) == 2
    assert o.end_request("r1") == 1 and len(o.streams) == 1
    assert "".join(stream(o, "r2", ids[2:])) == llama.decode(ids)[len(llama.decode(ids[:2])) :]
