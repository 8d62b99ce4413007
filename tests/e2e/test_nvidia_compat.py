"""NVIDIA's clients work unchanged (issue 12): requests shaped exactly as tensorrtllm_backend's clients send
them (v0.19.0 ``inflight_batcher_llm_client.py``, ``end_to_end_grpc_client.py``, ``tools/inflight_batcher_llm/
end_to_end_test.py``, ``benchmark_core_model.py``; v0.5.0 ``end_to_end_test.py``, ``identity_test.py``), sent with
tritonclient to a real tritonserver serving a rendered repository, and the responses checked the way those
clients read them (``output[0].decode()``, ``[0][0]`` indexing, per-response ``num_output_tokens``...).

Renders: the default (decoupled: every streaming flow) and ``--no-streaming`` (every unary flow), for both
profiles. The engine is the CPU reference engine on a random-weight tiny LLaMA with the packaged Mistral v1
SentencePiece tokenizer (no ../shared assets). docs/compatibility.md lists the flows and which render fits.
"""

from __future__ import annotations

import queue
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException, np_to_triton_dtype

pytestmark = pytest.mark.server

PROMPT = "The capital of France is"


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory) -> Path:
    from repo_builder.testing import make_tiny_llama, packaged_tokenizer

    base = tmp_path_factory.mktemp("nvidia_compat")
    return make_tiny_llama(base / "ckpt", packaged_tokenizer("mistral-v1", base / "tok"), seed=0)


@pytest.fixture(scope="module")
def tok(ckpt):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(ckpt))


def _served(render_repo_module, serve_module, ckpt, profile, streaming, name):
    repo = render_repo_module(ckpt, ckpt, profile=profile, streaming=streaming, name=name)
    return serve_module(repo)


@pytest.fixture(scope="module")
def default_12(ckpt, render_repo_module, serve_module):
    with _served(render_repo_module, serve_module, ckpt, "trtllm-1.2", True, "d12") as srv:
        yield srv


@pytest.fixture(scope="module")
def unary_12(ckpt, render_repo_module, serve_module):
    with _served(render_repo_module, serve_module, ckpt, "trtllm-1.2", False, "u12") as srv:
        yield srv


@pytest.fixture(scope="module")
def default_05(ckpt, render_repo_module, serve_module):
    with _served(render_repo_module, serve_module, ckpt, "trtllm-0.5", True, "d05") as srv:
        yield srv


@pytest.fixture(scope="module")
def unary_05(ckpt, render_repo_module, serve_module):
    with _served(render_repo_module, serve_module, ckpt, "trtllm-0.5", False, "u05") as srv:
        yield srv


# ------------------------------------------------------------------------------------------------ helpers
def tensor(mod, name: str, arr: np.ndarray):
    """What NVIDIA's ``prepare_tensor`` does: shape and dtype straight from the numpy array."""
    t = mod.InferInput(name, list(arr.shape), np_to_triton_dtype(arr.dtype))
    t.set_data_from_numpy(arr)
    return t


def e2e_grpc_inputs(prompt: str, output_len: int, *, streaming: bool, int_dtype=np.int32, **extra) -> list[Any]:
    """end_to_end_grpc_client.py's prepare_inputs (v0.19.0): [[...]] arrays, exclude_input_in_output=False."""
    arrays = {
        "text_input": np.array([[prompt]]).astype(object),
        "max_tokens": np.ones((1, 1), int_dtype) * output_len,
        "stream": np.array([[streaming]], dtype=bool),
        "beam_width": np.array([[1]], dtype=int_dtype),
        "temperature": np.array([[1.0]], dtype=np.float32),
    }
    arrays.update(extra)
    return [tensor(grpcclient, k, v) for k, v in arrays.items()]


def stream_collect(
    server, model: str, inputs: list[Any], request_id: str = "1", timeout: float = 120, outputs: list[str] | None = None
) -> list[Any]:
    """start_stream / async_stream_infer / stop_stream, as the v0.19.0 clients do; the results in order.
    ``outputs``: the output names to request (``InferRequestedOutput``), else all."""
    results: queue.Queue[Any] = queue.Queue()
    client = grpcclient.InferenceServerClient(server.grpc_url)
    client.start_stream(callback=lambda result, error: results.put(error or result))
    requested = [grpcclient.InferRequestedOutput(n) for n in outputs] if outputs else None
    client.async_stream_infer(model, inputs, request_id=request_id, outputs=requested)
    client.stop_stream()  # waits for the stream to end
    client.close()
    out = []
    while not results.empty():
        r = results.get()
        if isinstance(r, InferenceServerException):
            raise r
        out.append(r)
    return out


def decode_like_nvidia(result) -> str:
    """end_to_end_grpc_client.py: ``output = result.as_numpy('text_output'); output[0].decode('utf-8')``."""
    output = result.as_numpy("text_output")
    return output[0].decode("utf-8")


# ------------------------------------------------------------------------- item 1: which render serves what
def test_default_render_refuses_unary_calls_with_tritons_message(default_12):
    """Triton 2.51 refuses unary calls to decoupled models and to ensembles with a decoupled step: the reason
    the unary flows need the --no-streaming render (docs/compatibility.md)."""
    for model in ("ensemble", "tensorrt_llm_bls"):
        c = httpclient.InferenceServerClient(default_12.http_hostport)
        with pytest.raises(InferenceServerException, match="decoupled"):
            c.infer(
                model,
                [
                    tensor(httpclient, "text_input", np.array([[PROMPT]], dtype=object)),
                    tensor(httpclient, "max_tokens", np.array([[4]], np.int32)),
                ],
            )


# ------------------------------------------------------------------------- item 2: 1-D text, [0][0] scalars
@pytest.mark.parametrize("model", ["ensemble", "tensorrt_llm_bls"])
@pytest.mark.parametrize("streaming", [False, True])
def test_text_output_is_1d_per_response_v019(default_12, model, streaming):
    results = stream_collect(default_12, model, e2e_grpc_inputs(PROMPT, 8, streaming=streaming))
    with_text = [r for r in results if r.as_numpy("text_output") is not None]
    assert with_text
    for r in with_text:
        assert r.as_numpy("text_output").shape == (1,)
        assert isinstance(decode_like_nvidia(r), str)
        # one row, one sequence: NVIDIA's backend sends neither (v0.19.0 model_instance_state.cc: batch_index
        # only for batch > 1, sequence_index only for num_return_sequences > 1); the client reads None as 0
        assert r.as_numpy("batch_index") is None and r.as_numpy("sequence_index") is None
    text = "".join(decode_like_nvidia(r) for r in with_text)
    if not streaming:  # exclude_input_in_output=False (the client always sends it): the prompt is echoed
        assert text.startswith(PROMPT) and len(text) > len(PROMPT)


def test_text_output_is_1d_per_response_v05(default_05):
    """v0.5.0 end_to_end_streaming_client.py-shaped request (UINT32 max_tokens, required bad/stop words)."""
    inputs = [
        tensor(grpcclient, "text_input", np.array([[PROMPT]], dtype=object)),
        tensor(grpcclient, "max_tokens", np.array([[8]], np.uint32)),
        tensor(grpcclient, "bad_words", np.array([[""]], dtype=object)),
        tensor(grpcclient, "stop_words", np.array([[""]], dtype=object)),
        tensor(grpcclient, "stream", np.array([[True]], dtype=bool)),
    ]
    results = stream_collect(default_05, "ensemble", inputs)
    chunks = [r for r in results if r.as_numpy("text_output") is not None]
    assert chunks and all(r.as_numpy("text_output").shape == (1,) for r in chunks)


# -------------------------------------------------- items 3, 4, 6, 12: end_to_end_test.py's manual ensemble
def test_end_to_end_test_manual_pipeline_equals_ensemble_and_bls_v019(unary_12):
    """v0.19.0 end_to_end_test.py test_functionality_ifb, call for call: preprocessing (DECODER_INPUT_ID),
    tensorrt_llm (with decoder_input_ids), postprocessing, then ensemble and BLS must give the same text."""
    c = httpclient.InferenceServerClient(unary_12.http_hostport)
    q = np.array([[PROMPT]]).astype(object)
    pre = c.infer(
        "preprocessing",
        [
            tensor(httpclient, "QUERY", q),
            tensor(httpclient, "BAD_WORDS_DICT", np.array([[""]], dtype=object)),
            tensor(httpclient, "STOP_WORDS_DICT", np.array([[""]], dtype=object)),
            tensor(httpclient, "REQUEST_OUTPUT_LEN", np.ones_like(q).astype(np.int32) * 12),
        ],
        request_id="0",
    )
    dec = pre.as_numpy("DECODER_INPUT_ID")
    assert dec is not None and dec.shape == (1, 1) and pre.as_numpy("REQUEST_DECODER_INPUT_LEN").tolist() == [[1]]
    assert dec[0][0] == pre.as_numpy("OUT_PAD_ID")[0][0]
    llm = c.infer(
        "tensorrt_llm",
        [
            tensor(httpclient, "input_ids", pre.as_numpy("INPUT_ID")),
            tensor(httpclient, "decoder_input_ids", dec),
            tensor(httpclient, "input_lengths", pre.as_numpy("REQUEST_INPUT_LEN")),
            tensor(httpclient, "request_output_len", pre.as_numpy("REQUEST_OUTPUT_LEN")),
            tensor(httpclient, "end_id", pre.as_numpy("OUT_END_ID")),
            tensor(httpclient, "pad_id", pre.as_numpy("OUT_PAD_ID")),
        ],
        request_id="0",
    )
    ids, seq_len = llm.as_numpy("output_ids"), llm.as_numpy("sequence_length")
    prompt_ids = pre.as_numpy("INPUT_ID")[0].tolist()
    assert ids[0][0][: len(prompt_ids)].tolist() == prompt_ids  # exclude_input_in_output defaults to false
    post = c.infer(
        "postprocessing",
        [tensor(httpclient, "TOKENS_BATCH", ids.astype(np.int32)), tensor(httpclient, "SEQUENCE_LENGTH", seq_len)],
        request_id="0",
    )
    manual = post.as_numpy("OUTPUT")
    text_inputs = [
        tensor(httpclient, "text_input", q),
        tensor(httpclient, "max_tokens", np.ones_like(q).astype(np.int32) * 12),
        tensor(httpclient, "bad_words", np.array([[""]], dtype=object)),
        tensor(httpclient, "stop_words", np.array([[""]], dtype=object)),
    ]
    for model in ("ensemble", "tensorrt_llm_bls"):  # the same request id again, as the script does
        out = c.infer(model, text_inputs, request_id="0").as_numpy("text_output")
        assert out.shape == manual.shape == (1,)
        assert manual == out, model
    assert manual[0].decode().startswith(PROMPT)


def test_same_stop_word_same_text_on_ensemble_and_bls(unary_12, tok):
    """One stop rule on both paths: the text ends with the stop word (kept, as the engine keeps the stop
    tokens and NVIDIA's BLS keeps text[:index + len(stop)])."""
    c = grpcclient.InferenceServerClient(unary_12.grpc_url)
    base = c.infer(
        "ensemble", e2e_grpc_inputs(PROMPT, 24, streaming=False, exclude_input_in_output=np.array([[True]], bool))
    )
    generated = base.as_numpy("text_output")[0].decode()
    words = generated.split()
    assert len(words) >= 3
    stop = words[2]
    texts = {}
    for model in ("ensemble", "tensorrt_llm_bls"):
        r = c.infer(
            model,
            e2e_grpc_inputs(
                PROMPT,
                24,
                streaming=False,
                stop_words=np.array([[stop]], dtype=object),
                exclude_input_in_output=np.array([[True]], bool),
            ),
        )
        texts[model] = r.as_numpy("text_output")[0].decode()
    assert texts["ensemble"] == texts["tensorrt_llm_bls"]
    assert texts["ensemble"].endswith(stop) and len(texts["ensemble"]) < len(generated)


def test_old_input_names_min_length_and_random_seed_are_accepted(unary_12):
    c = grpcclient.InferenceServerClient(unary_12.grpc_url)
    extra = {
        "min_length": np.array([[10]], np.int32),
        "random_seed": np.array([[7]], np.uint64),
        "exclude_input_in_output": np.array([[True]], bool),
        "return_num_output_tokens": np.array([[True]], bool),
    }
    for model in ("ensemble", "tensorrt_llm_bls"):
        r = c.infer(model, e2e_grpc_inputs(PROMPT, 10, streaming=False, **extra))
        assert r.as_numpy("num_output_tokens")[0][0] == 10


# ------------------------------------------------------------------------------- item 4: v0.5.0 semantics
def test_05_engine_returns_the_prompt_and_ensemble_text_matches_postprocessing(unary_05):
    """v0.5.0 end_to_end_test.py: output_ids hold the prompt (v0.5's backend always returns it) and the
    ensemble's text equals postprocessing's decode of the full output_ids."""
    c = httpclient.InferenceServerClient(unary_05.http_hostport)
    q = np.array([[PROMPT]]).astype(object)
    pre = c.infer(
        "preprocessing",
        [
            tensor(httpclient, "QUERY", q),
            tensor(httpclient, "BAD_WORDS_DICT", np.array([[""]], dtype=object)),
            tensor(httpclient, "STOP_WORDS_DICT", np.array([[""]], dtype=object)),
            tensor(httpclient, "REQUEST_OUTPUT_LEN", np.ones_like(q).astype(np.uint32) * 8),
        ],
    )
    llm = c.infer(
        "tensorrt_llm",
        [
            tensor(httpclient, "input_ids", pre.as_numpy("INPUT_ID")),
            tensor(httpclient, "input_lengths", pre.as_numpy("REQUEST_INPUT_LEN")),
            tensor(httpclient, "request_output_len", pre.as_numpy("REQUEST_OUTPUT_LEN")),
        ],
    )
    ids = llm.as_numpy("output_ids")
    prompt_ids = pre.as_numpy("INPUT_ID")[0].tolist()
    assert ids[0][0][: len(prompt_ids)].tolist() == prompt_ids and ids.shape[2] == len(prompt_ids) + 8
    manual = c.infer("postprocessing", [tensor(httpclient, "TOKENS_BATCH", ids)]).as_numpy("OUTPUT")
    for rid in ("0", "0"):  # a repeated request id must not continue an earlier request's text
        out = c.infer(
            "ensemble",
            [
                tensor(httpclient, "text_input", q),
                tensor(httpclient, "max_tokens", np.ones_like(q).astype(np.uint32) * 8),
                tensor(httpclient, "bad_words", np.array([[""]], dtype=object)),
                tensor(httpclient, "stop_words", np.array([[""]], dtype=object)),
            ],
            request_id=rid,
        ).as_numpy("text_output")
        assert out.shape == (1,) and manual == out
    assert manual[0].decode().startswith(PROMPT)


def test_05_identity_test_token_ids_over_http(unary_05):
    """identity_test.py (v0.5.0): UINT32 request_output_len straight to tensorrt_llm over HTTP."""
    c = httpclient.InferenceServerClient(unary_05.http_hostport)
    r = c.infer(
        "tensorrt_llm",
        [
            tensor(httpclient, "input_ids", np.array([[1, 415, 5565]], np.int32)),
            tensor(httpclient, "input_lengths", np.array([[3]], np.int32)),
            tensor(httpclient, "request_output_len", np.array([[6]], np.uint32)),
        ],
    )
    assert r.as_numpy("output_ids").shape == (1, 1, 9)


# ------------------------------------------------------------- item 5: num_output_tokens per response
def test_streamed_num_output_tokens_are_per_response(default_12):
    inputs = e2e_grpc_inputs(
        PROMPT,
        12,
        streaming=True,
        return_num_output_tokens=np.array([[True]], bool),
        exclude_input_in_output=np.array([[True]], bool),
    )
    counts = [
        int(r.as_numpy("num_output_tokens")[0][0])
        for r in stream_collect(default_12, "ensemble", inputs)
        if r.as_numpy("num_output_tokens") is not None
    ]
    assert len(counts) == 12 and set(counts) == {1} and sum(counts) == 12


# ----------------------------------------------------------------- item 7: stop without decoupled mode
def test_stop_request_stops_a_unary_request(unary_12):
    """inflight_batcher_llm_client.py --stop-after-ms without --streaming: async_infer, then a stop request
    with the same id; the first request ends early, the stop request gets an empty response."""
    c = grpcclient.InferenceServerClient(unary_12.grpc_url)
    done: queue.Queue[Any] = queue.Queue()
    inputs = [
        tensor(grpcclient, "input_ids", np.array([[1, 415, 5565, 302]], np.int32)),
        tensor(grpcclient, "input_lengths", np.array([[4]], np.int32)),
        tensor(grpcclient, "request_output_len", np.array([[480]], np.int32)),
        tensor(grpcclient, "streaming", np.array([[False]], bool)),
    ]
    c.async_infer(
        "tensorrt_llm", inputs, callback=lambda result, error: done.put(error or result), request_id="stop-me"
    )
    time.sleep(0.3)
    stop = [
        tensor(grpcclient, "input_ids", np.array([[0]], np.int32)),
        tensor(grpcclient, "input_lengths", np.array([[0]], np.int32)),
        tensor(grpcclient, "request_output_len", np.array([[0]], np.int32)),
        tensor(grpcclient, "stop", np.array([[True]], bool)),
    ]
    c.async_infer("tensorrt_llm", stop, callback=lambda result, error: done.put(error or result), request_id="stop-me")
    got = [done.get(timeout=120), done.get(timeout=120)]
    assert not any(isinstance(g, InferenceServerException) for g in got), got
    lengths = [int(g.as_numpy("sequence_length")[0][0]) for g in got if g.as_numpy("output_ids") is not None]
    assert len(lengths) == 1 and lengths[0] < 4 + 480  # stopped before request_output_len


# ------------------------------------------------------------ item 8: batched rows keep their own text
def test_batched_streaming_rows_keep_their_own_text(default_12):
    """end_to_end_grpc_client.py --batch-inputs -S: two prompts in one request; each row's streamed text
    equals that prompt's text alone."""
    prompts = [PROMPT, "Machine learning is"]
    alone = {}
    for p in prompts:
        rs = stream_collect(default_12, "ensemble", e2e_grpc_inputs(p, 10, streaming=True))
        alone[p] = "".join(decode_like_nvidia(r) for r in rs if r.as_numpy("text_output") is not None)
    rows = [
        {
            "text_input": np.array([[p]]).astype(object),
            "max_tokens": np.array([[10]], np.int32),
            "stream": np.array([[True]]),
            "beam_width": np.array([[1]], np.int32),
            "temperature": np.array([[1.0]], np.float32),
        }
        for p in prompts
    ]
    inputs = [tensor(grpcclient, k, np.concatenate([r[k] for r in rows], axis=0)) for k in rows[0]]
    texts = ["", ""]
    for r in stream_collect(default_12, "ensemble", inputs, request_id="batch"):
        if r.as_numpy("text_output") is None:
            continue
        texts[int(r.as_numpy("batch_index")[0][0])] += decode_like_nvidia(r)
    assert texts == [alone[p] for p in prompts]


def test_batched_unary_rows_each_get_their_own_answer(default_12):
    """end_to_end_grpc_client.py --batch-inputs without -S (v0.19.0): two prompts in one stream request with
    stream=false, outputs text_output + batch_index; the client files each response under
    ``batch_index[0][0]`` and reads ``output[0]``. NVIDIA's backend answers every row on its own (one
    response per row, tagged with its batch_index, the last flagged final), so each row's text must equal
    that prompt's text alone, on the ensemble and the BLS."""
    prompts = [PROMPT, "Machine learning is"]
    for model in ("ensemble", "tensorrt_llm_bls"):
        alone = {}
        for p in prompts:
            (r,) = stream_collect(default_12, model, e2e_grpc_inputs(p, 10, streaming=False))
            alone[p] = decode_like_nvidia(r)
        rows = [
            {
                "text_input": np.array([[p]]).astype(object),
                "max_tokens": np.array([[10]], np.int32),
                "stream": np.array([[False]]),
                "beam_width": np.array([[1]], np.int32),
                "temperature": np.array([[1.0]], np.float32),
            }
            for p in prompts
        ]
        inputs = [tensor(grpcclient, k, np.concatenate([r[k] for r in rows], axis=0)) for k in rows[0]]
        results = stream_collect(default_12, model, inputs, request_id="batch", outputs=["text_output", "batch_index"])
        texts = ["", ""]
        for r in results:
            assert r.as_numpy("text_output").shape == (1,), model  # one row per response
            texts[int(r.as_numpy("batch_index")[0][0])] = decode_like_nvidia(r)
        assert len(results) == 2 and texts == [alone[p] for p in prompts], model
        assert results[-1].get_response().parameters["triton_final_response"].bool_param, model


# ------------------------------------------------------------------ issue 28: streams say they ended
def _stream_events(server, model: str, inputs: list[Any], *, empty_final: bool, rid: str, stop_after: float = 0):
    """[(text or None, final flag) or ("ERROR", message)] of one gRPC stream request, in order; with
    ``stop_after`` a stop request (same id, ``stop`` true) follows after that many seconds."""
    events: queue.Queue[Any] = queue.Queue()
    client = grpcclient.InferenceServerClient(server.grpc_url)
    client.start_stream(callback=lambda result, error: events.put(error or result))
    client.async_stream_infer(model, inputs, request_id=rid, enable_empty_final_response=empty_final)
    if stop_after:
        time.sleep(stop_after)
        stop = [tensor(grpcclient, "input_ids", np.array([[0]], np.int32)), *_stop_fields()]
        client.async_stream_infer("tensorrt_llm", stop, request_id=rid)
    client.stop_stream()
    client.close()
    out = []
    while not events.empty():
        r = events.get()
        if isinstance(r, InferenceServerException):
            out.append(("ERROR", r.message()))
            continue
        resp = r.get_response()
        final = resp.parameters["triton_final_response"].bool_param
        if stop_after and not resp.outputs:
            assert final  # the stop request's own answer: one empty response, final
            continue
        text = r.as_numpy("text_output")
        out.append((None if text is None else text[0].decode(), final))
    return out


def _stop_fields() -> list[Any]:
    return [
        tensor(grpcclient, "input_lengths", np.array([[1]], np.int32)),
        tensor(grpcclient, "request_output_len", np.array([[1]], np.int32)),
        tensor(grpcclient, "stop", np.array([[True]], bool)),
    ]


def test_every_stream_end_is_flagged_final_without_empty_final_response(default_12):
    """A gRPC streaming client that does not set enable_empty_final_response (NVIDIA's clients, most SDKs)
    sees the stream's last response flagged ``triton_final_response``, however it ends: end id, length, stop
    word, a stop request; an error is the stream's only event. A client that sets it gets exactly one final
    response, the last. Both the ensemble and the BLS."""
    # the engine's third generated token, as end_id: the stream ends on the end token (not sent)
    (first,) = stream_collect(default_12, "ensemble", e2e_grpc_inputs(PROMPT, 6, streaming=False))
    words = decode_like_nvidia(first)[len(PROMPT) :].split()
    ids = stream_collect(
        default_12,
        "tensorrt_llm",
        [
            tensor(grpcclient, "input_ids", np.array([[1, 415, 5565, 302]], np.int32)),
            tensor(grpcclient, "input_lengths", np.array([[4]], np.int32)),
            tensor(grpcclient, "request_output_len", np.array([[6]], np.int32)),
        ],
    )[0].as_numpy("output_ids")[0][0]
    ends = {
        "length": {},
        "stop_word": {"stop_words": np.array([[words[1]]], dtype=object)},
        "end_id": {},
    }
    for model in ("ensemble", "tensorrt_llm_bls"):
        for how, extra in ends.items():
            inputs = e2e_grpc_inputs(PROMPT, 6, streaming=True, **extra)
            if how == "end_id":  # token ids straight from the engine, through the ensemble's end_id input
                inputs = e2e_grpc_inputs("Hello", 6, streaming=True, end_id=np.array([[int(ids[5])]], np.int32))
            for empty in (False, True):
                got = _stream_events(default_12, model, inputs, empty_final=empty, rid=f"{model}-{how}-{empty}")
                finals = [g for g in got if g[1] is True]
                assert got and got[-1][1] is True and len(finals) == 1, (model, how, empty, got)
        # an error is the only event of its stream
        bad = e2e_grpc_inputs(PROMPT, 6, streaming=True, beam_width=np.array([[2]], np.int32))
        got = _stream_events(default_12, model, bad, empty_final=False, rid=f"{model}-error")
        assert len(got) == 1 and got[0][0] == "ERROR", (model, got)
    # a stop request (inflight_batcher_llm_client.py --stop-after-ms --streaming) ends the engine's stream
    long = [
        tensor(grpcclient, "input_ids", np.array([[1, 415, 5565, 302]], np.int32)),
        tensor(grpcclient, "input_lengths", np.array([[4]], np.int32)),
        tensor(grpcclient, "request_output_len", np.array([[480]], np.int32)),
        tensor(grpcclient, "streaming", np.array([[True]], bool)),
    ]
    for empty in (False, True):
        got = _stream_events(default_12, "tensorrt_llm", long, empty_final=empty, rid=f"stop-{empty}", stop_after=0.3)
        finals = [g for g in got if g[1] is True]
        assert got and got[-1][1] is True and len(finals) == 1 and len(got) < 480, (empty, got[-3:])


def test_every_stream_end_is_flagged_final_without_empty_final_response_v05(default_05):
    """The same promise on the trtllm-0.5 render (v0.5.0 request shapes: UINT32 max_tokens and beam_width,
    bad/stop words always sent): length and stop word end with a response flagged final, once, with or
    without enable_empty_final_response; an error is the stream's only event. Ensemble and BLS."""

    def v05(max_tokens: int, stop: str = "", beam: int = 1) -> list[Any]:
        return [
            tensor(grpcclient, "text_input", np.array([[PROMPT]], dtype=object)),
            tensor(grpcclient, "max_tokens", np.array([[max_tokens]], np.uint32)),
            tensor(grpcclient, "bad_words", np.array([[""]], dtype=object)),
            tensor(grpcclient, "stop_words", np.array([[stop]], dtype=object)),
            tensor(grpcclient, "beam_width", np.array([[beam]], np.uint32)),
            tensor(grpcclient, "stream", np.array([[True]], dtype=bool)),
        ]

    (whole,) = stream_collect(default_05, "ensemble", v05(6)[:-1] + [tensor(grpcclient, "stream", np.array([[False]]))])
    words = decode_like_nvidia(whole)[len(PROMPT) :].split()
    for model in ("ensemble", "tensorrt_llm_bls"):
        for how, inputs in {"length": v05(6), "stop_word": v05(6, stop=words[1])}.items():
            for empty in (False, True):
                got = _stream_events(default_05, model, inputs, empty_final=empty, rid=f"05-{model}-{how}-{empty}")
                finals = [g for g in got if g[1] is True]
                assert got and got[-1][1] is True and len(finals) == 1, (model, how, empty, got)
        got = _stream_events(default_05, model, v05(6, beam=2), empty_final=False, rid=f"05-{model}-error")
        assert len(got) == 1 and got[0][0] == "ERROR", (model, got)


# --------------------------------------------------------------------------- item 10: one BOS only
def test_prompt_already_starting_with_bos_gets_no_second_bos(unary_12, tok):
    c = httpclient.InferenceServerClient(unary_12.http_hostport)
    pre = c.infer(
        "preprocessing",
        [
            tensor(httpclient, "QUERY", np.array([[tok.bos_token + PROMPT]], dtype=object)),
            tensor(httpclient, "REQUEST_OUTPUT_LEN", np.array([[4]], np.int32)),
        ],
    )
    ids = pre.as_numpy("INPUT_ID")[0].tolist()
    assert ids[0] == tok.bos_token_id and ids[1] != tok.bos_token_id


# --------------------------------------------------------------- item 13: prompt_embedding_table dtype
def _ptuning_inputs(dtype, *, int_dtype=np.int32, hidden: int = 64) -> list[Any]:
    """inflight_batcher_llm_client.py (v0.19.0) with --prompt-embedding-table-path: the task's table as
    ``[1, task_vocab, hidden]`` in ``--dtype``, ``prompt_vocab_size`` ``[[task_vocab]]``, to tensorrt_llm."""
    arrays = {
        "input_ids": np.array([[1, 415, 5565]], np.int32),
        "input_lengths": np.array([[3]], np.int32),
        "request_output_len": np.array([[4]], int_dtype),
        "prompt_embedding_table": np.zeros((1, 4, hidden), dtype),
        "prompt_vocab_size": np.array([[4]], int_dtype),
    }
    return [tensor(grpcclient, k, v) for k, v in arrays.items()]


def test_prompt_embedding_table_dtype_is_the_rendered_one_and_named_when_wrong(unary_12):
    """The table's dtype is the rendered ``prompt_embedding_table_data_type`` (the tiny checkpoint is float32,
    so TYPE_FP32) on tensorrt_llm, ensemble and BLS alike; another dtype is refused by Triton naming the
    input and the dtype expected; the right one reaches the CPU engine, which refuses p-tuning naming it."""
    c = grpcclient.InferenceServerClient(unary_12.grpc_url)
    for model in ("tensorrt_llm", "ensemble", "tensorrt_llm_bls"):
        spec = {t["name"]: t for t in c.get_model_metadata(model, as_json=True)["inputs"]}
        assert spec["prompt_embedding_table"]["datatype"] == "FP32", model
    with pytest.raises(InferenceServerException) as err:
        c.infer("tensorrt_llm", _ptuning_inputs(np.float16))  # the client's default --dtype float16
    assert "'prompt_embedding_table'" in str(err.value) and "expects 'FP32'" in str(err.value)
    with pytest.raises(InferenceServerException) as err:
        c.infer("tensorrt_llm", _ptuning_inputs(np.float32))
    assert "prompt_embedding_table" in str(err.value) and "not supported" in str(err.value)


def test_05_has_no_prompt_embedding_table(unary_05):
    """v0.5.0 declares no p-tuning inputs; a client that sends one is told the input's name."""
    c = grpcclient.InferenceServerClient(unary_05.grpc_url)
    names = {t["name"] for t in c.get_model_metadata("tensorrt_llm", as_json=True)["inputs"]}
    assert "prompt_embedding_table" not in names and "prompt_vocab_size" not in names
    with pytest.raises(InferenceServerException) as err:
        c.infer("tensorrt_llm", _ptuning_inputs(np.float16, int_dtype=np.uint32))
    assert "prompt_embedding_table" in str(err.value) or "prompt_vocab_size" in str(err.value)
