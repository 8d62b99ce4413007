"""OpenAI's ``POST /v1/chat/completions`` with ``image_url`` parts for a repository of layout multimodal.

:func:`create_vision_app` is what :func:`repo_builder.openai.app.create_app` returns for a repository whose root
holds a lock file with ``"layout": "multimodal"`` (``render --layout multimodal``). Routes: ``GET /health``,
``GET /v1/models`` (one model, id ``--served-model-name`` or :func:`served_id`: ``llava``, ``qwen2-vl``),
``POST /v1/chat/completions``.

A chat's content parts become the prompt and ``image_url_input`` (:func:`repo_builder.openai.images.image_chat`);
the prompt is the tokenizer's chat template over the conversation, or, for a tokenizer without one, the text of
a single user message. One non-streamed greedy completion goes to the ``ensemble`` over gRPC (``text_input``,
``max_tokens``, ``image_url_input``). Refused with 400 naming the field: ``stream``, ``n`` > 1, a ``temperature``
above 0 or any other sampling field (the engine decodes greedily), and what :func:`image_chat` refuses; the
ensemble's 400s (an undecodable image) come back naming ``messages``. ``usage.completion_tokens`` and
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

from .images import IMAGE_MARKER, image_chat
from .protocol import APIError, ChatCompletionRequest, parse_request
from .single_model import single_model_app

#: Request fields this route honours; any other field that is set (not None / its neutral value) is refused.
_HONOURED = {"model", "messages", "max_tokens", "max_completion_tokens", "user"}
_NEUTRAL = {"stream": (False,), "n": (1,), "temperature": (0, 0.0)}
DEFAULT_MAX_TOKENS = 64
#: Where an image goes in a Qwen2-VL prompt (its chat template's image block; preprocessing expands the pad).
QWEN2_VL_MARKER = "<|vision_start|><|image_pad|><|vision_end|>"


def served_id(facts: dict[str, Any]) -> str:
    """The default model id: the checkpoint's ``model_type`` with ``-`` for ``_`` (``llava``, ``qwen2-vl``)."""
    return str(facts.get("model_type") or "llava").replace("_", "-")


def create_vision_app(config: Any) -> Any:
    """The FastAPI application serving ``config.repo`` (layout multimodal) through Triton at ``config.grpc_url``.

    Raises:
        RepoBuilderError: the repository's facts or tokenizer cannot be read.
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
    name = config.served_model_name or served_id(facts)
    max_images = int(facts["max_num_images"])
    marker = QWEN2_VL_MARKER if facts.get("model_type") == "qwen2_vl" else IMAGE_MARKER
    app, check_key, grpc = single_model_app(
        config, title="repo-builder OpenAI-compatible API (vision)", served_name=name, triton_model="ensemble"
    )

    def prompt_of(conversation: list[dict[str, str]]) -> str:
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

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> Any:
        import tritonclient.grpc as grpcclient
        from tritonclient.utils import InferenceServerException

        check_key(request)
        try:
            body = json.loads(await request.body())
        except ValueError:
            raise APIError(400, "the body is not JSON", code="invalid_json") from None
        req = parse_request(ChatCompletionRequest, body)
        if req.model != name:
            raise APIError(404, f"The model '{req.model}' does not exist", param="model", code="model_not_found")
        for field, value in req.model_dump(exclude_none=True).items():
            if field not in _HONOURED and value not in _NEUTRAL.get(field, ()):
                raise APIError(
                    400,
                    f"{field} is not supported for this model (one greedy, non-streamed completion)",
                    param=field,
                    code="unsupported_parameter",
                )
        chat_in = image_chat(req.messages, max_images=max_images, marker=marker)
        prompt = prompt_of(chat_in.conversation)
        max_tokens = req.requested_max_tokens()[0] or DEFAULT_MAX_TOKENS
        arrays: list[tuple[str, Any, str]] = [
            ("text_input", np.array([[prompt.encode()]], dtype=object), "BYTES"),
            ("max_tokens", np.array([[max_tokens]], np.int32), "INT32"),
        ]
        if chat_in.urls:
            arrays.append(("image_url_input", np.array([[u.encode() for u in chat_in.urls]], dtype=object), "BYTES"))
        inputs = []
        for tname, arr, wire in arrays:
            t = grpcclient.InferInput(tname, list(arr.shape), wire)
            t.set_data_from_numpy(arr)
            inputs.append(t)
        try:
            result = await (await grpc()).infer("ensemble", inputs)
        except InferenceServerException as exc:
            text = exc.message() or str(exc)
            if "INVALID_ARG" in str(exc.status()):
                field = "max_tokens" if "max_tokens" in text else "messages"
                raise APIError(400, text, param=field, code="invalid_value") from None
            raise APIError(503 if "UNAVAILABLE" in str(exc.status()) else 500, text, type="server_error") from None
        raw = result.as_numpy("text_output").reshape(-1)[0]
        text = raw.decode("utf-8") if isinstance(raw, bytes) else str(raw)
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

    return app
