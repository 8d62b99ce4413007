"""OpenAI's ``POST /v1/chat/completions`` with ``image_url`` parts for a repository of layout multimodal.

:func:`create_vision_app` is what :func:`repo_builder.openai.app.create_app` returns for a repository whose root
holds a lock file with ``"layout": "multimodal"`` (``render --layout multimodal``). Routes: ``GET /health``,
``GET /v1/models`` (one model, id ``--served-model-name`` or
:func:`~repo_builder.repository.lock_schema.multimodal_served_id`: ``llava``, ``qwen2-vl``),
``POST /v1/chat/completions``.

A chat's content parts become the prompt and ``image_url_input`` (:func:`repo_builder.openai.images.image_chat`);
the prompt is the tokenizer's chat template over the conversation, or, for a tokenizer without one, the text of
a single user message. One greedy completion goes to the ``ensemble`` over gRPC (``text_input``,
``max_tokens``, ``image_url_input``): one ``infer`` call, or, for a repository rendered with ``--streaming``
(``"streaming": true`` in its facts), a gRPC stream whose responses each hold the text so far; ``stream: true``
then returns OpenAI's ``chat.completion.chunk`` events with the deltas (:func:`sse_response`). Refused with 400
naming the field: ``stream`` on a repository without ``--streaming``, ``n`` > 1, sampling fields other than
``temperature``, ``top_p`` and ``seed`` (those go to the ensemble's inputs of the same names; the engine samples
as transformers' ``generate(do_sample=True)`` does, greedy at temperature 0), and what :func:`image_chat`
refuses; the ensemble's 400s (an undecodable image) come back naming ``messages``. ``usage.completion_tokens`` and
``finish_reason`` are counted by re-encoding the text with the repository's tokenizer (``length`` when it
reaches ``max_tokens``), an approximation; ``prompt_tokens`` counts each
image as one token.
"""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np
from fastapi import Request

from ..repository.lock_schema import multimodal_served_id as served_id
from .images import IMAGE_MARKER, image_chat
from .protocol import APIError, ChatCompletionRequest, parse_request
from .single_model import single_model_app

#: Request fields this route honours; any other field that is set (not None / its neutral value) is refused.
_HONOURED = {"model", "messages", "max_tokens", "max_completion_tokens", "user", "temperature", "top_p", "seed"}
_NEUTRAL = {"stream": (False,), "n": (1,), "temperature": (0, 0.0), "stream_options": ()}
DEFAULT_MAX_TOKENS = 64
#: Sampling fields passed through: (request field, ensemble input, numpy dtype, wire type).
_SAMPLING = (
    ("temperature", "temperature", np.float32, "FP32"),
    ("top_p", "top_p", np.float32, "FP32"),
    ("seed", "seed", np.uint64, "UINT64"),
)
#: Where an image goes in a Qwen2-VL prompt (its chat template's image block; preprocessing expands the pad).
QWEN2_VL_MARKER = "<|vision_start|><|image_pad|><|vision_end|>"


async def stream_texts(client: Any, inputs: list[Any], failure: Any) -> Any:
    """The ``text_output`` of each streamed ensemble response (the text so far: the decoupled engine sends every
    token so far), until the one flagged final.

    Raises:
        APIError: ``failure(exc)`` of a Triton error.
    """
    from tritonclient.utils import InferenceServerException

    async def requests() -> Any:
        yield {"model_name": "ensemble", "inputs": inputs, "request_id": uuid.uuid4().hex}

    responses = client.stream_infer(requests())
    try:
        async for result, error in responses:
            if error is not None:
                raise failure(
                    error if isinstance(error, InferenceServerException) else InferenceServerException(str(error))
                )
            raw = result.as_numpy("text_output").reshape(-1)[0]
            yield raw.decode("utf-8") if isinstance(raw, bytes) else str(raw)
            final = result.get_response().parameters.get("triton_final_response")
            if final is not None and final.bool_param:
                return
    finally:
        responses.cancel()


def text_delta(sent: str, text: str) -> str:
    """What ``text`` (the text so far) adds to ``sent`` (what was streamed), holding back a trailing U+FFFD run
    (a character whose remaining bytes come with the next token)."""
    end = len(text.rstrip("\ufffd"))
    return text[len(sent) : end] if text.startswith(sent) and end > len(sent) else ""


def sse_response(name: str, max_tokens: int, tokenizer: Any, first: str, texts: Any) -> Any:
    """OpenAI's ``chat.completion.chunk`` server-sent events: a role chunk, one content chunk per text delta, a
    last chunk with ``finish_reason``, then ``[DONE]``; the deltas add up to the final text."""
    from fastapi.responses import StreamingResponse

    chunk_id, created = f"chatcmpl-{uuid.uuid4().hex}", int(time.time())

    def event(delta: dict[str, Any], finish: str | None = None) -> str:
        chunk = {
            "id": chunk_id,
            "object": "chat.completion.chunk",
            "created": created,
            "model": name,
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
        }
        return f"data: {json.dumps(chunk)}\n\n"

    async def events() -> Any:
        yield event({"role": "assistant", "content": ""})
        sent, text = "", first
        while True:
            delta = text_delta(sent, text)
            if delta:
                sent += delta
                yield event({"content": delta})
            nxt = await anext(texts, None)
            if nxt is None:
                break
            text = nxt
        if text != sent:  # the end: whatever was held back, or a text that did not extend the streamed one
            rest = text[len(sent) :] if text.startswith(sent) else text
            yield event({"content": rest})
        completion = len(tokenizer(text, add_special_tokens=False)["input_ids"])
        yield event({}, "length" if completion >= max_tokens else "stop")
        yield "data: [DONE]\n\n"

    return StreamingResponse(events(), media_type="text/event-stream")


def _read_facts(config: Any) -> tuple[dict[str, Any], Any]:
    """The repository's multimodal facts (``preprocessing/1/multimodal/multimodal.json``) and the tokenizer
    saved beside them.

    Raises:
        RepoBuilderError: the facts or the tokenizer cannot be read.
    """
    from ..errors import RepoBuilderError

    repo = Path(config.repo)
    folder = repo / "preprocessing" / "1" / "multimodal"
    try:
        facts = json.loads((folder / "multimodal.json").read_text(encoding="utf-8"))
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(str(folder))
    except Exception as exc:  # noqa: BLE001 - OSError, ValueError, the tokenizer's own errors
        raise RepoBuilderError(f"cannot read the multimodal facts / tokenizer: {exc}", path=folder) from exc
    return facts, tokenizer


def _prompt_of(tokenizer: Any, conversation: list[dict[str, str]]) -> str:
    """The prompt of ``conversation``: the tokenizer's chat template over it (with the generation prompt), or,
    for a tokenizer without one, the text of its single user message.

    Raises:
        APIError: 400 naming ``messages``: the template refused the conversation, or (no template) it is not
            exactly one user message.
    """
    if getattr(tokenizer, "chat_template", None):
        try:
            return str(tokenizer.apply_chat_template(conversation, tokenize=False, add_generation_prompt=True))
        except Exception as exc:  # noqa: BLE001 - jinja2 errors, raise_exception() in templates
            raise APIError(400, f"the chat template refused the conversation: {exc}", param="messages") from None
    if len(conversation) != 1 or conversation[0]["role"] != "user":
        raise APIError(
            400,
            "this model's tokenizer has no chat template: send exactly one user message",
            param="messages",
            code="invalid_value",
        )
    return conversation[0]["content"]


def _check_fields(req: ChatCompletionRequest, streaming: bool) -> None:
    """Refuse the request's set fields this route does not honour (``stream`` too, unless ``streaming``).

    Raises:
        APIError: 400 ``unsupported_parameter`` naming the first such field.
    """
    honoured = _HONOURED | ({"stream"} if streaming else set())
    for field, value in req.model_dump(exclude_none=True).items():
        if field == "stream" and value and not streaming:
            raise APIError(
                400,
                "stream is not supported by this repository (render it with --streaming)",
                param="stream",
                code="unsupported_parameter",
            )
        if field not in honoured and value not in _NEUTRAL.get(field, ()):
            raise APIError(
                400,
                f"{field} is not supported for this model (one greedy, non-streamed completion)",
                param=field,
                code="unsupported_parameter",
            )


def _ensemble_inputs(req: ChatCompletionRequest, prompt: str, max_tokens: int, urls: list[str]) -> list[Any]:
    """The ensemble's gRPC ``InferInput`` list, each of shape [1, n]: ``text_input`` (BYTES), ``max_tokens``
    (INT32), the sampling fields the request sets (``temperature``/``top_p`` FP32, ``seed`` UINT64) and, with
    images, ``image_url_input`` (BYTES, one per URL)."""
    import tritonclient.grpc as grpcclient

    arrays: list[tuple[str, Any, str]] = [
        ("text_input", np.array([[prompt.encode()]], dtype=object), "BYTES"),
        ("max_tokens", np.array([[max_tokens]], np.int32), "INT32"),
    ]
    for field, tname, dtype, wire in _SAMPLING:
        value = getattr(req, field, None)
        if value is not None:
            arrays.append((tname, np.array([[value]], dtype), wire))
    if urls:
        arrays.append(("image_url_input", np.array([[u.encode() for u in urls]], dtype=object), "BYTES"))
    inputs = []
    for tname, arr, wire in arrays:
        t = grpcclient.InferInput(tname, list(arr.shape), wire)
        t.set_data_from_numpy(arr)
        inputs.append(t)
    return inputs


def _failure(exc: Any) -> APIError:
    """The APIError of a Triton ``InferenceServerException``: a model's refusal (INVALID_ARG, or no status, as
    over a stream) is 400 naming the field its message names (default ``messages``); UNAVAILABLE is 503;
    anything else 500."""
    text = exc.message() or str(exc)
    # a model's refusal: INVALID_ARG, or over a stream (the aio client gives streamed errors no status)
    if "INVALID_ARG" in str(exc.status()) or exc.status() is None:
        named = [f for f in ("max_tokens", "temperature", "top_p", "seed") if f"{f}:" in text]
        field = named[0] if named else "messages"
        return APIError(400, text, param=field, code="invalid_value")
    return APIError(503 if "UNAVAILABLE" in str(exc.status()) else 500, text, type="server_error")


def _completion_body(name: str, text: str, tokenizer: Any, prompt: str, max_tokens: int) -> dict[str, Any]:
    """OpenAI's ``chat.completion`` object for ``text``; its usage counts re-encode ``text`` and ``prompt`` with
    ``tokenizer`` (``finish_reason`` ``length`` once the completion reaches ``max_tokens``)."""
    completion = len(tokenizer(text, add_special_tokens=False)["input_ids"])
    prompt_tokens = len(tokenizer(prompt)["input_ids"])
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": name,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text, "refusal": None},
                "logprobs": None,
                "finish_reason": "length" if completion >= max_tokens else "stop",
            }
        ],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion,
            "total_tokens": prompt_tokens + completion,
        },
    }


def create_vision_app(config: Any) -> Any:
    """The FastAPI application serving ``config.repo`` (layout multimodal) through Triton at ``config.grpc_url``.

    Raises:
        RepoBuilderError: the repository's facts or tokenizer cannot be read.
    """
    facts, tokenizer = _read_facts(config)
    name = config.served_model_name or served_id(facts)
    max_images = int(facts["max_num_images"])
    marker = QWEN2_VL_MARKER if facts.get("model_type") == "qwen2_vl" else IMAGE_MARKER
    streaming = bool(facts.get("streaming"))  # render --streaming: a decoupled engine, read over a gRPC stream
    app, check_key, grpc = single_model_app(
        config, title="repo-builder OpenAI-compatible API (vision)", served_name=name, triton_model="ensemble"
    )

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> Any:
        from tritonclient.utils import InferenceServerException

        check_key(request)
        try:
            body = json.loads(await request.body())
        except ValueError:
            raise APIError(400, "the body is not JSON", code="invalid_json") from None
        req = parse_request(ChatCompletionRequest, body)
        if req.model != name:
            raise APIError(404, f"The model '{req.model}' does not exist", param="model", code="model_not_found")
        _check_fields(req, streaming)
        chat_in = image_chat(req.messages, max_images=max_images, marker=marker)
        prompt = _prompt_of(tokenizer, chat_in.conversation)
        max_tokens = req.requested_max_tokens()[0] or DEFAULT_MAX_TOKENS
        inputs = _ensemble_inputs(req, prompt, max_tokens, chat_in.urls)
        if streaming:
            texts = stream_texts(await grpc(), inputs, _failure)
            if req.stream:
                first = await anext(texts)  # a bad request fails with its 400 before the stream starts
                return sse_response(name, max_tokens, tokenizer, first, texts)
            text = ""
            async for chunk in texts:
                text = chunk
        else:
            try:
                result = await (await grpc()).infer("ensemble", inputs)
            except InferenceServerException as exc:
                raise _failure(exc) from None
            raw = result.as_numpy("text_output").reshape(-1)[0]
            text = raw.decode("utf-8") if isinstance(raw, bytes) else str(raw)
        return _completion_body(name, text, tokenizer, prompt, max_tokens)

    return app
