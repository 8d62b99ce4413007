"""The OpenAI front end without a server: request validation (OpenAI error shape naming the field), refusals of
what the engine cannot do, the mapping of sampling fields onto ensemble inputs, Triton error parsing, and the
chat prompt (the template applied once: the ids preprocessing makes equal apply_chat_template(tokenize=True))."""

from __future__ import annotations

import pytest

pytest.importorskip("fastapi")

from repo_builder.openai.backend import Chunk, _parse, error_field  # noqa: E402
from repo_builder.openai.protocol import APIError, ChatCompletionRequest, CompletionRequest, parse_request, unsupported  # noqa: E402

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
COMPLETION = {"model": "m", "prompt": "hi"}


def err(cls, body) -> APIError:
    with pytest.raises(APIError) as exc:
        req = parse_request(cls, body)
        unsupported(req)
    return exc.value


@pytest.mark.parametrize(
    "extra,param,code",
    [
        ({"max_tokens": "8"}, "max_tokens", "invalid_type"),
        ({"max_tokens": True}, "max_tokens", "invalid_type"),
        ({"max_tokens": 0}, "max_tokens", "invalid_value"),
        ({"max_tokens": 1.5}, "max_tokens", "invalid_type"),
        ({"temperature": float("nan")}, "temperature", "invalid_value"),
        ({"temperature": float("inf")}, "temperature", "invalid_value"),
        ({"temperature": 2.5}, "temperature", "invalid_value"),
        ({"top_p": -0.1}, "top_p", "invalid_value"),
        ({"presence_penalty": 3}, "presence_penalty", "invalid_value"),
        ({"frequency_penalty": "1"}, "frequency_penalty", "invalid_type"),
        ({"seed": -3}, "seed", "invalid_value"),
        ({"stop": 7}, "stop", "invalid_type"),
        ({"stop": ["ok", None]}, "stop[1]", "invalid_type"),
        ({"stream": "yes"}, "stream", "invalid_type"),
        ({"stream": True, "stream_options": {"include_usage": 1}}, "stream_options.include_usage", "invalid_type"),
        ({"stream_options": {"include_usage": True}}, "stream_options", "invalid_value"),
        ({"repetition_penalty": 0}, "repetition_penalty", "invalid_value"),
        ({"min_tokens": -1}, "min_tokens", "invalid_value"),
        ({"whatever": 1}, "whatever", "unrecognized_argument"),
        ({"n": 2}, "n", "unsupported_parameter"),
        ({"logit_bias": {"50256": -100}}, "logit_bias", "unsupported_parameter"),
    ],
)
def test_sampling_fields_are_validated_like_openai(extra, param, code):
    for cls, base in ((CompletionRequest, COMPLETION), (ChatCompletionRequest, CHAT)):
        e = err(cls, {**base, **extra})
        assert (e.status, e.param, e.code) == (400, param, code), e.body()
        assert set(e.body()["error"]) == {"message", "type", "param", "code"}
        assert e.body()["error"]["type"] == "invalid_request_error"


@pytest.mark.parametrize(
    "body,param",
    [
        ({"model": "m"}, "messages"),
        ({"model": "m", "messages": []}, "messages"),
        ({"model": "m", "messages": {"role": "user"}}, "messages"),
        ({"model": "m", "messages": [{"role": "robot", "content": "x"}]}, "messages[0].role"),
        ({"model": "m", "messages": [{"content": "x"}]}, "messages[0].role"),
        (
            {
                "model": "m",
                "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "u"}}]}],
            },
            "messages[0].content[0]",
        ),
        ({"model": "m", "messages": [{"role": "tool", "content": "x", "tool_call_id": "1"}]}, "messages[0]"),
        ({**CHAT, "logprobs": True}, "logprobs"),
        ({**CHAT, "top_logprobs": 2}, "top_logprobs"),
        ({**CHAT, "tools": [{"type": "function", "function": {"name": "f"}}]}, "tools"),
        ({**CHAT, "response_format": {"type": "json_object"}}, "response_format"),
        ({**CHAT, "max_completion_tokens": 0}, "max_completion_tokens"),
        ({"messages": CHAT["messages"]}, "model"),
    ],
)
def test_chat_requests_are_refused_naming_the_field(body, param):
    e = err(ChatCompletionRequest, body)
    assert e.status == 400 and e.param == param, e.body()


@pytest.mark.parametrize(
    "body,param",
    [
        ({**COMPLETION, "logprobs": 1}, "logprobs"),
        ({**COMPLETION, "best_of": 2}, "best_of"),
        ({**COMPLETION, "suffix": "x"}, "suffix"),
        ({"model": "m", "prompt": [1, 2]}, "prompt"),
        ({"model": "m", "prompt": ["a", "b"]}, "prompt"),
        ({"model": "m", "prompt": 5}, "prompt"),
    ],
)
def test_completion_requests_are_refused_naming_the_field(body, param):
    e = err(CompletionRequest, body)
    assert e.status == 400 and e.param == param, e.body()


def test_accepted_requests_keep_their_values():
    req = parse_request(
        ChatCompletionRequest,
        {
            **CHAT,
            "max_completion_tokens": 5,
            "max_tokens": 9,
            "stop": "x",
            "user": "u",
            "temperature": 1,
            "top_k": 3,
            "seed": 2**63,
            "messages": [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}],
        },
    )
    unsupported(req)
    assert req.requested_max_tokens() == (5, "max_completion_tokens")
    assert req.stop_list() == ["x"] and req.temperature == 1.0 and req.messages[0].text() == "ab"
    assert parse_request(CompletionRequest, {**COMPLETION, "prompt": ["only"], "stop": ["", "y"]}).stop_list() == ["y"]


def test_no_chat_template_is_a_clear_400():
    req = parse_request(ChatCompletionRequest, CHAT)
    with pytest.raises(APIError) as exc:
        unsupported(req, has_chat_template=False)
    assert exc.value.param == "messages" and exc.value.code == "no_chat_template"


def test_sampling_fields_map_onto_ensemble_inputs():
    from repo_builder.openai.jobs import sampling_fields

    def fields(**kw):
        return sampling_fields(parse_request(CompletionRequest, {**COMPLETION, **kw}), lambda name: True)

    greedy = fields(temperature=0)
    assert greedy["top_k"] == 1 and "temperature" not in greedy and greedy["top_p"] is None
    sampled = fields(temperature=0.7)
    assert sampled["temperature"] == 0.7 and sampled["top_p"] == 1.0  # TRT-LLM samples only with top_k/top_p set
    assert fields(temperature=0.7, top_k=40)["top_p"] is None
    assert fields(top_k=-1)["top_k"] is None
    got = fields(
        stop=["a", "b"],
        seed=7,
        presence_penalty=0.5,
        frequency_penalty=-1,
        repetition_penalty=1.1,
        min_tokens=3,
        ignore_eos=True,
    )
    assert got["stop_words"] == ["a", "b"] and got["seed"] == 7 and got["end_id"] == -1
    assert (got["presence_penalty"], got["frequency_penalty"], got["repetition_penalty"], got["min_tokens"]) == (
        0.5,
        -1.0,
        1.1,
        3,
    )
    assert got["return_num_input_tokens"] and got["return_num_output_tokens"] and got["exclude_input_in_output"]
    unset = fields()
    assert all(unset[k] is None for k in ("top_k", "top_p", "seed", "stop_words", "presence_penalty"))
    assert "end_id" not in unset and "temperature" not in unset


@pytest.mark.parametrize(
    "message,field",
    [
        ("in ensemble 'ensemble', text_input: the prompt is 600 tokens, more than ...", "text_input"),
        ("preprocessing: max_tokens: prompt 2 tokens + max_tokens 5000 = 5002 exceeds ...", "max_tokens"),
        ("stop_words: malformed", "stop_words"),
        ("in ensemble 'ensemble', failed to load: something", None),
    ],
)
def test_triton_error_names_the_field(message, field):
    assert error_field(message, {"text_input", "max_tokens", "stop_words", "top_k"}) == field


def test_raw_response_parsing():
    from tritonclient.grpc import service_pb2

    resp = service_pb2.ModelInferResponse()
    for name, dtype in (("text_output", "BYTES"), ("num_input_tokens", "INT32"), ("num_output_tokens", "INT32")):
        out = resp.outputs.add()
        out.name, out.datatype = name, dtype
    text = "héllo ✓".encode()
    resp.raw_output_contents.extend(
        [len(text).to_bytes(4, "little") + text, (7).to_bytes(4, "little"), (3).to_bytes(4, "little")]
    )
    resp.parameters["triton_final_response"].bool_param = True
    assert _parse(resp) == Chunk("héllo ✓", 7, 3, True)
    assert _parse(service_pb2.ModelInferResponse()) == Chunk("", None, None, False)


def test_chat_prompt_gets_one_bos_through_preprocessing(tmp_path):
    """The text the front end sends, encoded as preprocessing encodes it, is apply_chat_template(tokenize=True)."""
    from transformers import AutoTokenizer

    from repo_builder.openai.jobs import chat_prompt
    from repo_builder.openai.served import ServedModel
    from repo_builder.runtime.text import encode_prompt
    from repo_builder.testing import packaged_tokenizer

    tok = AutoTokenizer.from_pretrained(str(packaged_tokenizer("mistral-v1-instruct", tmp_path / "tok")))
    served = ServedModel(
        name="m",
        tokenizer=tok,
        max_seq_len=512,
        max_input_len=511,
        add_special_tokens=True,
        preprocessing_applies_template=False,
        engine_model="tensorrt_llm",
    )
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello!"},
        {"role": "user", "content": "2+2?"},
    ]
    text = chat_prompt(served, parse_request(ChatCompletionRequest, {"model": "m", "messages": messages}))
    assert text.startswith("<s>[INST] Be brief.\n\nHi [/INST]")
    reference = tok.apply_chat_template(messages, tokenize=True, add_generation_prompt=True)
    reference = list(reference["input_ids"] if hasattr(reference, "keys") else reference)
    ids = encode_prompt(tok, text, add_special_tokens=True)
    assert ids == reference and ids.count(tok.bos_token_id) == 1
    assert tok.encode(text, add_special_tokens=True).count(tok.bos_token_id) == 2  # what a naive encode would do


def test_preprocessing_template_mode_takes_one_user_message(tmp_path):
    from transformers import AutoTokenizer

    from repo_builder.openai.jobs import chat_prompt
    from repo_builder.openai.served import ServedModel
    from repo_builder.testing import packaged_tokenizer

    tok = AutoTokenizer.from_pretrained(str(packaged_tokenizer("mistral-v1-instruct", tmp_path / "tok")))
    served = ServedModel(
        name="m",
        tokenizer=tok,
        max_seq_len=512,
        max_input_len=511,
        add_special_tokens=True,
        preprocessing_applies_template=True,
        engine_model="tensorrt_llm",
    )
    assert chat_prompt(served, parse_request(ChatCompletionRequest, CHAT)) == "hi"
    two = {"model": "m", "messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]}
    with pytest.raises(APIError) as exc:
        chat_prompt(served, parse_request(ChatCompletionRequest, two))
    assert exc.value.param == "messages"


def test_serving_info_from_the_lock_file(tmp_path):
    from repo_builder.errors import RenderError
    from repo_builder.repository.lockfile import LOCK_NAME, build_lock, dumps, read_serving_info

    with pytest.raises(RenderError, match="no lock file"):
        read_serving_info(tmp_path)
    lock = build_lock(
        version="0.1.0",
        profile="trtllm-1.2",
        engine={
            "dir": "/engines/llama-3-8b/",
            "kind": "trtllm",
            "placement": "copy",
            "fingerprint": "sha256:" + "0" * 64,
        },
        tokenizer_dir="/hf/tok",
        values={"max_seq_len": (4096, "engine")},
        world_size=1,
        tensorrt_llm_model_names=["tensorrt_llm"],
        files={},
    )
    (tmp_path / LOCK_NAME).write_bytes(dumps(lock))
    (info,) = read_serving_info(tmp_path)  # one entry for a single-LLM repository
    assert (info.model_name, str(info.tokenizer_dir), info.value("max_seq_len"), info.value("x", 3)) == (
        "llama-3-8b",
        "/hf/tok",
        4096,
        3,
    )
    assert (info.llm, info.triton_model("ensemble")) == (None, "ensemble")


class _Deltas:
    """What the renderer needs of a Generation: its text deltas, then the outcome."""

    def __init__(self, parts: list[str]) -> None:
        self.parts = parts

    async def deltas(self):
        for part in self.parts:
            yield part

    def outcome(self, text: str | None = None):
        from repo_builder.openai.generation import Outcome

        return Outcome(prompt_tokens=5, completion_tokens=len(self.parts), finish_reason="length")


@pytest.mark.parametrize("endpoint", ["completions", "chat"])
@pytest.mark.parametrize("include_usage", [False, True])
def test_one_renderer_builds_both_endpoints_answers_and_streams(endpoint, include_usage):
    # every SSE event is JSON of OpenAI's chunk shape: text deltas in order, then finish_reason, then usage, [DONE]
    import asyncio
    import json

    from repo_builder.openai.jobs import Job
    from repo_builder.openai.responses import CHAT as CHAT_KIND
    from repo_builder.openai.responses import COMPLETION as COMPLETION_KIND
    from repo_builder.openai.responses import Renderer

    chat = endpoint == "chat"
    options = {"stream": True, **({"stream_options": {"include_usage": True}} if include_usage else {})}
    req = parse_request(
        ChatCompletionRequest if chat else CompletionRequest, {**(CHAT if chat else COMPLETION), **options}
    )
    job = Job("id-1", req, {}, 2, "max_tokens", "hi", [])
    parts = ['a "quoted"\n', "é😀"]
    renderer = Renderer(CHAT_KIND, "m", job) if chat else Renderer(COMPLETION_KIND, "m", job, echo="hi")

    async def collect():
        return [chunk async for chunk in renderer.stream(_Deltas(parts), job)]

    events = asyncio.run(collect())
    assert events[-1] == b"data: [DONE]\n\n" and all(e.startswith(b"data: ") and e.endswith(b"\n\n") for e in events)
    chunks = [json.loads(e[len(b"data: ") :]) for e in events[:-1]]
    assert {c["object"] for c in chunks} == {"chat.completion.chunk" if chat else "text_completion"}
    assert {c["id"] for c in chunks} == {"id-1"} and all(("usage" in c) == include_usage for c in chunks)
    if include_usage:
        assert chunks[-1]["choices"] == [] and chunks[-1]["usage"] == {
            "prompt_tokens": 5,
            "completion_tokens": 2,
            "total_tokens": 7,
        }
        chunks = chunks[:-1]
    *deltas, last = [c["choices"][0] for c in chunks]
    assert last["finish_reason"] == "length" and all(d["finish_reason"] is None for d in deltas)
    if chat:
        assert deltas[0]["delta"] == {"role": "assistant", "content": ""} and last["delta"] == {}
        assert [d["delta"]["content"] for d in deltas[1:]] == parts
    else:
        assert last["text"] == "" and [d["text"] for d in deltas] == ["hi", *parts]  # echo: the prompt first
    body = renderer("".join(parts), _Deltas(parts).outcome())
    assert body["object"] == ("chat.completion" if chat else "text_completion") and body["usage"]["total_tokens"] == 7
    choice = body["choices"][0]
    text = choice["message"]["content"] if chat else choice["text"]
    assert text == ("" if chat else "hi") + "".join(parts) and choice["finish_reason"] == "length"


def test_num_draft_tokens_is_refused_naming_the_field_without_a_draft_model(tiny_llama, tmp_path):
    """The extension field num_draft_tokens: a repository rendered without --draft-engine-dir has no draft model
    (its lock file says so), and the request is refused naming the field; one with a draft model records it."""
    from repo_builder.openai.jobs import draft_fields
    from repo_builder.openai.served import FrontEndConfig, load_served_models
    from repo_builder.render import render_repository

    plain, spec = tmp_path / "plain", tmp_path / "spec"
    render_repository(tiny_llama, tiny_llama, plain)
    render_repository(tiny_llama, tiny_llama, spec, draft_engine_dir=tiny_llama)
    (served,) = load_served_models(FrontEndConfig(grpc_url="127.0.0.1:1", repo=plain))
    assert served.draft_model is None
    req = parse_request(CompletionRequest, {"model": "m", "prompt": "hi", "num_draft_tokens": 4})
    with pytest.raises(APIError) as exc:
        draft_fields(req, served.draft_model, None)  # type: ignore[arg-type]  # refused before Triton is asked
    assert exc.value.param == "num_draft_tokens" and "--draft-engine-dir" in str(exc.value.message)
    (served,) = load_served_models(FrontEndConfig(grpc_url="127.0.0.1:1", repo=spec))
    assert served.draft_model == "tensorrt_llm_draft"
    no_draft = parse_request(CompletionRequest, {"model": "m", "prompt": "hi", "num_draft_tokens": 0})
    assert draft_fields(no_draft, None, None) == {}  # type: ignore[arg-type]
    with pytest.raises(APIError) as exc:
        parse_request(CompletionRequest, {"model": "m", "prompt": "hi", "num_draft_tokens": -1})
    assert exc.value.param == "num_draft_tokens"
