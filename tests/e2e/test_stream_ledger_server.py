"""End to end: the stream ledger with two preprocessing instances, through a real tritonserver.

Two preprocessing instances are two stub processes that do not share memory but for the ledger file in
/dev/shm (repo_builder/runtime/stream_ledger.py). Without it every ensemble request of such a repository
asked the engine for perf metrics (the instances could not know which ids the other had keyed alone).
Checked here with the synthetic engine and a SentencePiece tokenizer (Mistral v1):

* one request id sent again and again, each stream running to max_tokens: every response is text_output
  alone (no perf metrics) and the text is right, whichever instance takes the request;
* concurrent streams with one request id still get their own text (all but one are keyed by the engine's
  arrival time);
* no request leaves its id registered for later ones (issue 28): after a direct preprocessing call, and
  after a non-streaming request that a stop word ends short of max_tokens, a request with the same id
  still gets text_output alone (before, the id stayed registered and every later request with it got the
  engine's perf metrics, which nobody asked for);
* after the server stops, no ledger file of it is left in /dev/shm.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from conftest import asset
from e2e_support import Stream, grpc_input, texts

from repo_builder.runtime.stream_ledger import FILE_PREFIX, SHM_DIR
from repo_builder.runtime.wordlists import WordEncoder

pytestmark = pytest.mark.server

N_TOKENS = 48


def inputs(prompt: str, stream: bool = True, stop_word: str | None = None) -> list:
    sent = [
        grpc_input("text_input", np.array([[prompt.encode()]], dtype=object)),
        grpc_input("max_tokens", np.array([[N_TOKENS]], np.int32)),
        grpc_input("stream", np.array([[stream]], bool)),
    ]
    if stop_word is not None:
        sent.append(grpc_input("stop_words", np.array([[stop_word.encode()]], dtype=object)))
    return sent


def answer(server, model: str, sent: list, request_id: str) -> list:
    """The responses (with outputs) of one request on a fresh stream; fails on an error."""
    s = Stream(server)
    try:
        s.send(model, sent, request_id)
        got, errors = s.collect({request_id})
    finally:
        s.close()
    assert not errors
    return got[request_id]


def output_names(results: list) -> set[str]:
    return {o.name for r in results for o in r.get_response().outputs}


def test_two_preprocessing_instances_key_reused_ids_without_perf_metrics(tmp_path, render_repo, serve):
    import transformers

    from repo_builder.runtime.synthetic import synthetic_token_ids

    tok_dir = asset("mistral_v1_tokenizer")
    tok = transformers.AutoTokenizer.from_pretrained(str(tok_dir))
    engine = tmp_path / "synthetic"
    engine.mkdir()
    spec = {"vocab_size": len(tok), "max_batch_size": 8, "max_input_len": 64, "max_seq_len": 256}
    (engine / "synthetic_engine.json").write_text(json.dumps(spec))
    values = {"synthetic_token_delay_ms": 1, "exclude_input_in_output": True, "preprocessing_instance_count": 2}
    repo = render_repo(engine, tok_dir, streaming=True, values=values)

    def expected(prompt: str) -> list[int]:
        return synthetic_token_ids(tok(prompt)["input_ids"], N_TOKENS, len(tok), end_id=tok.eos_token_id)

    prompts = [p for p in (f"Story {i} about the sea." for i in range(40)) if len(expected(p)) == N_TOKENS]
    prompts = [p for p in prompts if not tok.decode(expected(p), skip_special_tokens=True).endswith("\ufffd")][:3]
    assert len(prompts) == 3, "no prompt whose synthetic ids run to max_tokens"
    with serve(repo) as server:
        pids = [pid for pid, _start in server.rank_pids().values()]
        for _round in range(4):
            s = Stream(server)
            try:
                s.send("ensemble", inputs(prompts[0]), "again")
                got, errors = s.collect({"again"})
            finally:
                s.close()
            assert not errors
            assert {o.name for r in got["again"] for o in r.get_response().outputs} == {"text_output"}
            assert "".join(texts(got["again"])) == tok.decode(expected(prompts[0]), skip_special_tokens=True)
        streams = [Stream(server) for _ in prompts]
        try:
            for s, prompt in zip(streams, prompts):
                s.send("ensemble", inputs(prompt), "shared")
            got_all = [s.collect({"shared"}) for s in streams]
        finally:
            for s in streams:
                s.close()
        for (got, errors), prompt in zip(got_all, prompts):
            assert not errors
            assert "".join(texts(got["shared"])) == tok.decode(expected(prompt), skip_special_tokens=True)

        # a direct preprocessing call (every output asked for) is no ensemble step: its id stays free
        query = [
            grpc_input("QUERY", np.array([[prompts[1].encode()]], dtype=object)),
            grpc_input("REQUEST_OUTPUT_LEN", np.array([[N_TOKENS]], np.int32)),
        ]
        client = grpcclient.InferenceServerClient(server.grpc_url)
        try:
            direct = client.infer("preprocessing", query, request_id="direct")
        finally:
            client.close()
        assert not direct.as_numpy("OUT_RETURN_PERF_METRICS").any()
        full = tok.decode(expected(prompts[1]), skip_special_tokens=True)
        for _round in range(2):
            got = answer(server, "ensemble", inputs(prompts[1]), "direct")
            assert output_names(got) == {"text_output"} and "".join(texts(got)) == full

        # a non-streaming request ended short of max_tokens by a stop word: its one response ends its id
        ids = expected(prompts[1])
        words = WordEncoder(tok)
        stop = next(
            (k, w)
            for k in range(4, N_TOKENS - 8)
            for w in [tok.decode(ids[k : k + 1]).strip()]
            if w.isalpha() and any(v == ids[k : k + 1] for v in words.sequences(w, "stop_words"))
        )
        for _round in range(3):
            got = answer(server, "ensemble", inputs(prompts[1], stream=False, stop_word=stop[1]), "short")
            assert output_names(got) == {"text_output"}, f"round {_round}: perf metrics nobody asked for"
            text = "".join(texts(got))
            assert full.startswith(text) and len(text) < len(full)
    assert pids
    assert not [p for pid in pids for p in SHM_DIR.glob(f"{FILE_PREFIX}{pid}-*")]
