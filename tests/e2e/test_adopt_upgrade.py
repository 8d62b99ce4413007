"""End to end: a seed-era repository (NVIDIA's v0.5.0 inflight_batcher_llm templates filled by their own
fill_template.py, tests/assets/nvidia_filled/v0.5.0) upgraded by ``repo-builder upgrade --profile trtllm-1.2``
serves in a real tritonserver, and answers as a fresh trtllm-1.2 render of the same engine and tokenizer does.

The synthetic engine sits where the fill's ``gpt_model_path`` points, so the answer of a fresh render is known
offline (``synthetic_token_ids`` decoded by the tokenizer): one server serves the upgraded repository, and
the test checks the fresh render's configs are semantically the upgraded ones (``repo-builder diff`` empty)
and that the served answers equal that offline answer, over the ensemble and the BLS, non-streaming and
streamed, with the request a v0.5.0 client sends (text_input, max_tokens, bad_words, stop_words). The decoupled
flows of NVIDIA's clients that tests/e2e/test_nvidia_compat.py runs on a fresh render (v0.19.0
``end_to_end_grpc_client.py`` unary-over-stream and streamed, per-response ``num_output_tokens``, ``--batch-inputs``)
run here on the same server, against the upgraded repository.
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import test_nvidia_compat as nvidia  # its client flows take the server as their first argument
from conftest import ASSETS, asset
from e2e_support import Stream, grpc_input, http_generate

pytestmark = pytest.mark.server

N_TOKENS = 48


@pytest.fixture(scope="module")
def upgraded(tmp_path_factory, serve_module):
    import transformers

    from repo_builder.render import render_repository
    from repo_builder.runtime.synthetic import synthetic_token_ids
    from repo_builder.semdiff import semantic_diff
    from repo_builder.upgrade import upgrade_repository

    base = tmp_path_factory.mktemp("upgrade")
    tok_dir = asset("mistral_v1_tokenizer")
    tok = transformers.AutoTokenizer.from_pretrained(str(tok_dir))
    engine = base / "engine"
    engine.mkdir()
    (engine / "synthetic_engine.json").write_text(
        json.dumps({"vocab_size": len(tok), "max_batch_size": 8, "max_input_len": 64, "max_seq_len": 256})
    )
    seed = base / "seed-era"
    shutil.copytree(ASSETS / "nvidia_filled/v0.5.0", seed)
    for cfg in seed.glob("*/config.pbtxt"):  # the user's paths, as they filled them
        text = cfg.read_text().replace("/models/engines/llama-7b/1-gpu", str(engine))
        cfg.write_text(text.replace("/models/tokenizers/llama-7b", str(tok_dir)))
    result = upgrade_repository(seed, profile="trtllm-1.2", output=base / "upgraded")
    fresh = base / "fresh"
    render_repository(engine, tok_dir, fresh, profile="trtllm-1.2", engine_mode="reference", user_values=result.values)
    assert semantic_diff(result.written, fresh) == []

    def answer(prompt: str) -> str:
        ids = tok(prompt)["input_ids"]
        return tok.decode(
            synthetic_token_ids(ids, N_TOKENS, len(tok), end_id=tok.eos_token_id), skip_special_tokens=True
        )

    with serve_module(result.written) as server:
        yield server, answer


def v05_request(prompt: str) -> dict:
    """What NVIDIA's v0.5.0 clients send the ensemble (bad_words and stop_words were required then)."""
    return {
        "text_input": prompt,
        "max_tokens": N_TOKENS,
        "bad_words": "",
        "stop_words": "",
        "exclude_input_in_output": True,
    }


@pytest.mark.parametrize("model", ["ensemble", "tensorrt_llm_bls"])
def test_upgraded_answers_like_a_fresh_render(upgraded, model):
    server, answer = upgraded
    for prompt in ("The sea was calm that morning.", "Tell me about lighthouses."):
        status, body = http_generate(server, model, v05_request(prompt))
        assert status == 200, body
        assert body["text_output"] == answer(prompt)


def test_upgraded_streams(upgraded):
    """decoupled_mode True of the v0.5.0 fill is carried: the upgraded ensemble streams."""
    server, answer = upgraded
    prompt = "A story about a small boat."
    stream = Stream(server)
    try:
        inputs = [
            grpc_input("text_input", np.array([[prompt.encode()]], dtype=object)),
            grpc_input("max_tokens", np.array([[N_TOKENS]], np.int32)),
            grpc_input("stream", np.array([[True]], bool)),
            grpc_input("exclude_input_in_output", np.array([[True]], bool)),
        ]
        stream.send("ensemble", inputs, "s1")
        deltas, errors = stream.collect_text({"s1"})
    finally:
        stream.close()
    assert not errors
    assert len(deltas["s1"]) > 1
    assert "".join(deltas["s1"]) == answer(prompt)


def _tensor(name: str, arr: np.ndarray):
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import np_to_triton_dtype

    t = grpcclient.InferInput(name, list(arr.shape), np_to_triton_dtype(arr.dtype))
    t.set_data_from_numpy(arr)
    return t


def test_v019_client_shapes_pass_on_the_upgraded_repository(upgraded):
    """end_to_end_grpc_client.py of v0.19.0 (text_input/max_tokens as [[...]], INT32, streamed) gets the same text."""
    server, answer = upgraded
    prompt = "The harbour at dawn."
    inputs = [
        _tensor("text_input", np.array([[prompt]]).astype(object)),
        _tensor("max_tokens", np.ones((1, 1), np.int32) * N_TOKENS),
        _tensor("stream", np.array([[True]], dtype=bool)),
        _tensor("beam_width", np.array([[1]], dtype=np.int32)),
        _tensor("exclude_input_in_output", np.array([[True]], dtype=bool)),
    ]
    stream = Stream(server)
    try:
        stream.send("ensemble", inputs, "v019")
        deltas, errors = stream.collect_text({"v019"})
    finally:
        stream.close()
    assert not errors
    assert "".join(deltas["v019"]) == answer(prompt)


def test_v05_uint32_max_tokens_is_refused_by_name(upgraded):
    """The one client-visible break of the upgrade (fix int32-request-inputs, docs/migration.md): a v0.5.0 client's
    UINT32 max_tokens is refused by Triton naming the input and both dtypes, while the same request in INT32 on
    the same stream is answered."""
    server, answer = upgraded
    prompt = "hello"

    def inputs(dtype):
        return [
            _tensor("text_input", np.array([[prompt]]).astype(object)),
            _tensor("max_tokens", np.array([[N_TOKENS]], dtype)),
            _tensor("exclude_input_in_output", np.array([[True]], dtype=bool)),
        ]

    stream = Stream(server)
    try:
        stream.send("ensemble", inputs(np.uint32), "a-uint32")  # an error names no id: ids sort so
        stream.send("ensemble", inputs(np.int32), "b-int32")  # the failed one is first
        deltas, errors = stream.collect_text({"a-uint32", "b-int32"})
    finally:
        stream.close()
    assert len(errors) == 1
    assert "max_tokens" in errors[0] and "UINT32" in errors[0] and "INT32" in errors[0]
    assert "".join(deltas["b-int32"]) == answer(prompt)


# ------------------------------------------------- NVIDIA's clients (test_nvidia_compat.py) on the upgrade
@pytest.mark.parametrize("model", ["ensemble", "tensorrt_llm_bls"])
@pytest.mark.parametrize("streaming", [False, True])
def test_nvidia_end_to_end_grpc_client_on_the_upgrade(upgraded, model, streaming):
    """end_to_end_grpc_client.py (v0.19.0) with and without --streaming: 1-d text per response, the prompt echoed
    when the client sends exclude_input_in_output False."""
    nvidia.test_text_output_is_1d_per_response_v019(upgraded[0], model, streaming)


def test_nvidia_streamed_num_output_tokens_on_the_upgrade(upgraded):
    nvidia.test_streamed_num_output_tokens_are_per_response(upgraded[0])


def test_nvidia_batched_streaming_rows_on_the_upgrade(upgraded):
    nvidia.test_batched_streaming_rows_keep_their_own_text(upgraded[0])
