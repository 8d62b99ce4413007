"""OpenAI API request models (pydantic) and the OpenAI error shape; no serving code here (the answer bodies
are built by :mod:`repo_builder.openai.responses`).

Requests follow OpenAI's API reference for ``POST /v1/completions`` and ``POST /v1/chat/completions``
(field names, types, ranges: ``temperature`` 0..2, ``top_p`` 0..1, penalties -2..2). Like OpenAI, an
unknown request field is refused (400 naming it), values are not coerced (``"max_tokens": "8"`` is a type
error, ``true`` is not an integer) and NaN/infinity are refused. Fields the engine behind Triton cannot
honour are accepted by the model and refused by :func:`unsupported` with a message naming the field
(``n`` > 1, ``logprobs``, ``logit_bias``, ``tools``, ...), so a client is never silently given less than
it asked for. ``user`` is accepted and ignored. Extensions (as vLLM and trtllm-serve offer them):
``top_k``, ``min_tokens``, ``repetition_penalty``, ``ignore_eos``.

Errors have OpenAI's shape (``{"error": {"message", "type", "param", "code"}}``): :class:`APIError`
carries the HTTP status; :func:`validation_error` turns a pydantic error into one naming the field.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, StrictStr, ValidationError

from ..errors import field_problems
from ..runtime.numeric_ranges import UINT64_MAX

# ---------------------------------------------------------------------------------------------- errors


class APIError(Exception):
    """A request that gets an OpenAI-shaped error response.

    Args:
        status: HTTP status (400 bad request, 401 no/wrong key, 404 unknown model or route, 503 Triton
            unreachable, 500 a failure that is not the request's fault).
        message: what is wrong, naming the field.
        type: OpenAI error type (``invalid_request_error``, ``authentication_error``, ``server_error``...).
        param: the request field at fault, if any.
        code: a machine-readable code (``model_not_found``, ``invalid_api_key``, ``unsupported_parameter``...).
    """

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: str = "invalid_request_error",  # noqa: A002
        param: str | None = None,
        code: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type
        self.param = param
        self.code = code

    def body(self) -> dict[str, Any]:
        """The response body: ``{"error": {"message", "type", "param", "code"}}``."""
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


#: Model names pydantic puts in an error's ``loc`` as union member tags (dropped from the field path).
_MODEL_TAGS = frozenset({"TextPart", "OtherPart", "StreamOptions", "ChatMessage"})


def validation_error(exc: ValidationError) -> APIError:
    """A 400 :class:`APIError` for the first error of a pydantic ``ValidationError``, naming the field."""
    # the deepest one: for a union such as stop (str | list[str]) the element at fault, 'stop[1]'
    err = max(field_problems(exc), key=lambda p: len(p.path(_MODEL_TAGS)))
    param = err.path(_MODEL_TAGS) or None
    kind = err.kind
    if kind == "extra_forbidden":
        return APIError(
            400, f"Unrecognized request argument supplied: {param}", param=param, code="unrecognized_argument"
        )
    if kind == "missing":
        return APIError(400, f"Missing required parameter: '{param}'.", param=param, code="missing_required_parameter")
    value = err.input
    shown = repr(value) if not isinstance(value, (dict, list)) or len(repr(value)) < 80 else type(value).__name__
    message = f"Invalid value for '{param}': {err.message} (got {shown})."
    code = "invalid_type" if kind.endswith("_type") or kind in ("union_tag_invalid", "model_type") else "invalid_value"
    return APIError(400, message, param=param, code=code)


# ---------------------------------------------------------------------------------------------- requests

Float = StrictInt | float  # JSON 1 and 1.0 alike; strings and booleans are refused


def _float(lo: float | None = None, hi: float | None = None, *, gt: float | None = None) -> Any:
    return Field(None, ge=lo, le=hi, gt=gt, allow_inf_nan=False)


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)


class StreamOptions(_Request):
    """``stream_options``: ``include_usage`` adds a last chunk with ``usage`` and empty ``choices``."""

    include_usage: StrictBool = False
    include_obfuscation: StrictBool | None = None  # accepted, ignored (no obfuscation padding)


class SamplingFields(_Request):
    """Fields shared by completions and chat completions."""

    model: StrictStr
    max_tokens: StrictInt | None = Field(None, ge=1)
    temperature: float | None = _float(0.0, 2.0)
    top_p: float | None = _float(0.0, 1.0)
    n: StrictInt | None = Field(None, ge=1)
    stream: StrictBool | None = False
    stream_options: StreamOptions | None = None
    stop: StrictStr | list[StrictStr] | None = None
    presence_penalty: float | None = _float(-2.0, 2.0)
    frequency_penalty: float | None = _float(-2.0, 2.0)
    seed: StrictInt | None = Field(None, ge=0, le=UINT64_MAX)
    logit_bias: dict[StrictStr, float] | None = None
    user: StrictStr | None = None
    # extensions (vLLM / trtllm-serve names)
    top_k: StrictInt | None = Field(None, ge=-1)
    min_tokens: StrictInt | None = Field(None, ge=0)
    repetition_penalty: float | None = _float(gt=0.0)
    ignore_eos: StrictBool | None = None
    # extension: draft-target speculative decoding (NVIDIA's BLS input of the same name; docs/layouts.md)
    num_draft_tokens: StrictInt | None = Field(None, ge=0)

    def stop_list(self) -> list[str]:
        """``stop`` as a list without empty strings."""
        if self.stop is None:
            return []
        stops = [self.stop] if isinstance(self.stop, str) else list(self.stop)
        return [s for s in stops if s]

    def wants_usage_chunk(self) -> bool:
        return bool(self.stream and self.stream_options is not None and self.stream_options.include_usage)


class CompletionRequest(SamplingFields):
    """``POST /v1/completions``. ``prompt`` is one string (or a list holding one string)."""

    prompt: StrictStr | list[StrictStr] | list[StrictInt] | list[list[StrictInt]]
    echo: StrictBool | None = False
    logprobs: StrictInt | None = Field(None, ge=0, le=5)
    best_of: StrictInt | None = Field(None, ge=1)
    suffix: StrictStr | None = None


class TextPart(_Request):
    type: Literal["text"]
    text: StrictStr


class OtherPart(BaseModel):
    """Any non-text content part (``image_url``, ``input_audio``, ``file``...): refused by :func:`unsupported`."""

    model_config = ConfigDict(extra="allow")
    type: StrictStr


class ChatMessage(BaseModel):
    """One message. Extra keys that OpenAI defines for some roles (``tool_calls``, ``refusal``...) are
    accepted; a tool call in the history is refused by :func:`unsupported`."""

    model_config = ConfigDict(extra="forbid", strict=True)
    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: StrictStr | list[TextPart | OtherPart] | None = None
    name: StrictStr | None = None
    tool_calls: list[Any] | None = None
    tool_call_id: StrictStr | None = None
    refusal: StrictStr | None = None

    def text(self) -> str:
        """The message content as one string (text parts joined)."""
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "".join(p.text for p in self.content if isinstance(p, TextPart))


class ChatCompletionRequest(SamplingFields):
    """``POST /v1/chat/completions``."""

    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: StrictInt | None = Field(None, ge=1)
    logprobs: StrictBool | None = None
    top_logprobs: StrictInt | None = Field(None, ge=0, le=20)
    response_format: dict[str, Any] | None = None
    tools: list[Any] | None = None
    tool_choice: StrictStr | dict[str, Any] | None = None
    parallel_tool_calls: StrictBool | None = None
    functions: list[Any] | None = None
    function_call: StrictStr | dict[str, Any] | None = None
    store: StrictBool | None = None
    metadata: dict[str, StrictStr] | None = None
    service_tier: StrictStr | None = None
    modalities: list[StrictStr] | None = None
    reasoning_effort: StrictStr | None = None

    def requested_max_tokens(self) -> tuple[int | None, str]:
        """(``max_completion_tokens`` or else ``max_tokens``, the field it came from)."""
        if self.max_completion_tokens is not None:
            return self.max_completion_tokens, "max_completion_tokens"
        return self.max_tokens, "max_tokens"


def parse_request(cls: type[_Request], data: Any) -> Any:
    """Validate a decoded JSON body as ``cls``.

    Raises:
        APIError: 400 naming the field (wrong type, out of range, unknown field, missing field), or the
            body is not a JSON object.
    """
    if not isinstance(data, dict):
        raise APIError(
            400, f"The request body must be a JSON object, got {type(data).__name__}.", param=None, code="invalid_json"
        )
    try:
        return cls.model_validate(data)
    except ValidationError as exc:
        raise validation_error(exc) from None


def _refuse(param: str, message: str) -> APIError:
    return APIError(400, message, param=param, code="unsupported_parameter")


def unsupported(req: SamplingFields, *, has_chat_template: bool = True) -> None:
    """Refuse what the front end cannot honour, naming the field.

    Raises:
        APIError: 400, ``code`` ``unsupported_parameter`` (or ``invalid_value``): ``n`` > 1 (one sequence
            per request: the engine's ``num_return_sequences`` is not used), ``logprobs``/``top_logprobs``
            (the ensemble returns no token ids, so per-token log probabilities cannot be attributed to
            tokens), ``logit_bias`` (token-id biases: the ensemble takes word biases only), ``best_of`` > 1,
            ``suffix``, token-id prompts and more than one prompt, ``tools``/``functions``, a
            ``response_format`` other than text, non-text message content and tool messages;
            ``stream_options`` without ``stream``.
    """
    if req.n is not None and req.n > 1:
        raise _refuse(
            "n",
            f"n={req.n} is not supported: this server returns one choice per request (send n=1 or several requests)",
        )
    if req.logit_bias:
        raise _refuse("logit_bias", "logit_bias is not supported: the Triton ensemble takes no token-id biases")
    if req.stream_options is not None and not req.stream:
        raise APIError(
            400, "stream_options is only allowed when stream is true", param="stream_options", code="invalid_value"
        )
    if isinstance(req, CompletionRequest):
        if req.logprobs is not None:
            raise _refuse(
                "logprobs",
                "logprobs is not supported: the Triton ensemble returns text, not the token "
                "ids the log probabilities would belong to",
            )
        if req.best_of is not None and req.best_of > 1:
            raise _refuse("best_of", f"best_of={req.best_of} is not supported (one sequence per request)")
        if req.suffix:
            raise _refuse("suffix", "suffix (insertion) is not supported")
        prompt = req.prompt
        if isinstance(prompt, list):
            if prompt and not isinstance(prompt[0], str):
                raise _refuse("prompt", "token-id prompts are not supported: the Triton ensemble takes text")
            if len(prompt) != 1:
                raise _refuse("prompt", f"send one prompt per request (got a list of {len(prompt)})")
    if isinstance(req, ChatCompletionRequest):
        if req.logprobs or req.top_logprobs:
            param = "logprobs" if req.logprobs else "top_logprobs"
            raise _refuse(
                param,
                f"{param} is not supported: the Triton ensemble returns text, not the token ids "
                "the log probabilities would belong to",
            )
        if req.tools or req.functions:
            raise _refuse("tools" if req.tools else "functions", "tool calling is not supported")
        if req.tool_choice not in (None, "none") or req.function_call not in (None, "none"):
            raise _refuse(
                "tool_choice" if req.tool_choice not in (None, "none") else "function_call",
                "tool calling is not supported",
            )
        if req.response_format is not None and req.response_format.get("type") != "text":
            raise _refuse(
                "response_format", f"response_format {req.response_format.get('type')!r} is not supported (only 'text')"
            )
        if req.modalities and any(m != "text" for m in req.modalities):
            raise _refuse("modalities", "only the 'text' modality is supported")
        for i, msg in enumerate(req.messages):
            if msg.role in ("tool", "function") or msg.tool_calls:
                raise _refuse(f"messages[{i}]", "tool calls and tool messages are not supported")
            if isinstance(msg.content, list):
                for j, part in enumerate(msg.content):
                    if not isinstance(part, TextPart):
                        raise _refuse(
                            f"messages[{i}].content[{j}]",
                            f"content part type {part.type!r} is not supported (text only)",
                        )
        if not has_chat_template:
            raise APIError(
                400,
                "this model's tokenizer has no chat template, so chat completions cannot be "
                "formatted; use /v1/completions",
                param="messages",
                code="no_chat_template",
            )
