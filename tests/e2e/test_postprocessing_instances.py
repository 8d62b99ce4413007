"""End to end: a streaming ensemble with four postprocessing instances gives exactly one instance's text.

The instances are four stub processes. They share each stream's detokenizer state in /dev/shm and take
turns in the order of the engine's ``token_offset`` (repo_builder/runtime/stream_state.py); each response
is sent before the stream's next one is decoded, so the client sees the deltas in order. Checked with the
synthetic engine (0 ms per token: responses arrive as fast as Triton passes them) and a SentencePiece
tokenizer whose byte tokens split characters, several streams at once on separate gRPC streams and
interleaved on one:

* every stream's deltas join to ``decode`` of its ids and each delta equals the one a one-instance
  repository sends for the same request (served in the same module), in three rounds;
* more than one postprocessing process did work (CPU time of each stub), and the shared state file exists
  while serving and is gone after.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

import numpy as np
import pytest
from conftest import asset
from e2e_support import Stream, grpc_input, texts

from repo_builder.runtime.stream_ledger import FILE_PREFIX, SHM_DIR

pytestmark = pytest.mark.server

N_TOKENS = 40
STREAMS = 12


def inputs(prompt: str) -> list:
    return [
        grpc_input("text_input", np.array([[prompt.encode()]], dtype=object)),
        grpc_input("max_tokens", np.array([[N_TOKENS]], np.int32)),
        grpc_input("stream", np.array([[True]], bool)),
    ]


@pytest.fixture(scope="module")
def setup(tmp_path_factory, render_repo_module):
    import transformers

    tok_dir = asset("mistral_v1_tokenizer")
    tok = transformers.AutoTokenizer.from_pretrained(str(tok_dir))
    engine = tmp_path_factory.mktemp("synthetic")
    spec = {"vocab_size": len(tok), "max_batch_size": 32, "max_input_len": 64, "max_seq_len": 256}
    (engine / "synthetic_engine.json").write_text(json.dumps(spec))
    base = {"synthetic_token_delay_ms": 0, "exclude_input_in_output": True}
    four = render_repo_module(engine, tok_dir, values={**base, "postprocessing_instance_count": 4}, name="four")
    one = render_repo_module(engine, tok_dir, values=base, name="one")
    return tok, four, one


def deltas_of(server, prompts: list[str], tag: str) -> dict[str, list[str]]:
    """Each prompt on its own gRPC stream, all at once: {request id: deltas}."""
    out: dict[str, list[str]] = {}
    errors: list[str] = []

    def one(i: int, prompt: str) -> None:
        s = Stream(server)
        try:
            rid = f"{tag}-{i}"
            s.send("ensemble", inputs(prompt), rid)
            got, errs = s.collect({rid})
            out[rid] = texts(got[rid])
            errors.extend(errs)
        finally:
            s.close()

    threads = [threading.Thread(target=one, args=(i, p)) for i, p in enumerate(prompts)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(180)
    assert not errors
    return out


def stub_cpu(server_pid: int, model: str) -> list[float]:
    """CPU seconds of each Python-backend stub of ``model`` under the server."""
    ticks = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmd = (proc / "cmdline").read_bytes().split(b"\0")
            stat = (proc / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(stat[1]) == server_pid and any(c.endswith(f"/{model}/1/model.py".encode()) for c in cmd):
            ticks.append((int(stat[11]) + int(stat[12])) / 100)
    return ticks


def test_four_postprocessing_instances_stream_the_one_instance_text(setup, serve_module):
    from repo_builder.runtime.synthetic import synthetic_token_ids

    tok, four, one = setup
    prompts = [f"Tell story {i} about the sea, with ünïcödé." for i in range(STREAMS)]

    def expected(prompt: str) -> str:
        ids = synthetic_token_ids(tok(prompt)["input_ids"], N_TOKENS, len(tok), end_id=tok.eos_token_id)
        return tok.decode(ids, skip_special_tokens=True).rstrip("\ufffd")

    with serve_module(one) as server:
        reference = deltas_of(server, prompts, "p")
    with serve_module(four) as server:
        pid = next(iter(server.rank_pids().values()))[0]
        assert list(SHM_DIR.glob(f"{FILE_PREFIX}{pid}-*-state")), "no shared stream state file"
        got = {}
        for _round in range(3):
            got = deltas_of(server, prompts, "p")
            assert got == reference
        busy = [t for t in stub_cpu(pid, "postprocessing") if t > 0.05]
        assert len(busy) >= 2, f"one postprocessing process did all the work: {stub_cpu(pid, 'postprocessing')}"
    for i, prompt in enumerate(prompts):
        assert "".join(got[f"p-{i}"]) == expected(prompt)
    assert any(len(d) > 1 for d in got.values())
    assert not list(SHM_DIR.glob(f"{FILE_PREFIX}{pid}-*"))
