"""An OpenAI request as a :class:`Job`: the ensemble/BLS inputs to send, its id and its limits.

How OpenAI fields become ensemble inputs (names of the ensemble/BLS contract,
``model_templates/<profile>/contract.yaml``):

* ``prompt`` / the chat -> ``text_input``. Chat messages are rendered once with the tokenizer's chat
  template (``apply_chat_template(..., tokenize=False, add_generation_prompt=True)``, tokenizer from the
  lock file); preprocessing encodes a text that starts with the BOS token's text without adding special
  tokens (``repo_builder.runtime.text.encode_prompt``), so the engine gets exactly the ids of Hugging
  Face's ``apply_chat_template(..., tokenize=True)``: one BOS. A repository rendered with
  ``apply_chat_template=true`` (preprocessing applies the template itself) takes a single user message,
  sent as is.
* Triton is always asked to stream when the model is decoupled (a non-streamed answer is the deltas
  joined): that is what lets a disconnect cancel a non-streamed request in the BLS too.
* ``max_tokens`` / ``max_completion_tokens`` -> ``max_tokens`` (default: 16 for completions as OpenAI;
  for chat what is left of the engine's ``max_seq_len`` after the prompt); above ``max_seq_len - 1`` is
  refused here, a prompt + max_tokens above ``max_seq_len`` by preprocessing (400 naming the field).
* ``temperature`` (0 = greedy: sent as ``top_k`` 1; > 0 without ``top_p``/``top_k`` also sends ``top_p``
  1.0, because TensorRT-LLM samples only when top_k or top_p is set), ``top_p``, ``top_k``, ``seed``,
  ``presence_penalty``, ``frequency_penalty``, ``repetition_penalty``, ``min_tokens``: the ensemble input
  of the same name; unset fields are not sent (the engine's defaults apply: greedy).
* ``stop`` -> ``stop_words`` (the engine stops on the token sequence) and a text-level
  :class:`~repo_builder.runtime.stopstrings.StopStringMatcher` here, which cuts the stop string and what
  follows from the text (OpenAI leaves the stop sequence out) and ends the Triton request when the text
  matches although the tokens did not. ``ignore_eos`` -> ``end_id`` -1 (no end-of-sequence stop).
* ``num_draft_tokens`` (an extension, NVIDIA's BLS input of the same name) -> ``num_draft_tokens`` of
  ``tensorrt_llm_bls``, which then runs its draft loop (``runtime/bls_draft.py``). Refused (400 naming the
  field) where the repository has no draft model (rendered without ``--draft-engine-dir``) or the requests go
  to a model without that input (the ensemble: serve with ``--triton-model tensorrt_llm_bls``). 0 = no draft.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .protocol import APIError, ChatCompletionRequest, SamplingFields

if TYPE_CHECKING:
    from .backend import TritonBackend
    from .served import ServedModel

#: OpenAI's default ``max_tokens`` of ``/v1/completions``.
COMPLETIONS_DEFAULT_MAX_TOKENS = 16


@dataclass
class Job:
    """One request on its way through Triton."""

    rid: str
    req: SamplingFields
    fields: dict[str, Any]
    max_tokens: int
    max_tokens_param: str
    prompt_text: str
    stops: list[str]


#: ensemble field -> OpenAI field, for error messages (text_input is the prompt or the messages).
_PARAM = {"stop_words": "stop", "end_id": "ignore_eos", "min_length": "min_tokens", "random_seed": "seed"}


def param_name(field_name: str | None, req: SamplingFields, max_tokens_param: str) -> str | None:
    """The OpenAI field (``param`` of an error) behind the ensemble input ``field_name``."""
    if field_name is None:
        return None
    if field_name in ("text_input", "input_ids"):
        return "messages" if isinstance(req, ChatCompletionRequest) else "prompt"
    if field_name in ("max_tokens", "request_output_len"):
        return max_tokens_param
    return _PARAM.get(field_name, field_name)


def sampling_fields(req: SamplingFields, accepts: Callable[[str], bool]) -> dict[str, Any]:
    """Ensemble inputs for the sampling fields of ``req`` (see the module docstring); unset ones left out."""
    fields: dict[str, Any] = {}
    top_k = req.top_k if req.top_k is not None and req.top_k > 0 else None
    top_p = req.top_p
    if req.temperature is not None:
        if req.temperature == 0.0:
            top_k, top_p = 1, None
        else:
            fields["temperature"] = float(req.temperature)
            if top_k is None and top_p is None:
                top_p = 1.0
    fields["top_k"] = top_k
    fields["top_p"] = None if top_p is None else float(top_p)
    for name in ("presence_penalty", "frequency_penalty", "repetition_penalty"):
        value = getattr(req, name)
        fields[name] = None if value is None else float(value)
    fields["min_tokens"] = req.min_tokens
    fields["seed"] = req.seed
    stops = req.stop_list()
    fields["stop_words"] = stops or None
    if req.ignore_eos:
        fields["end_id"] = -1
    for flag in ("return_num_input_tokens", "return_num_output_tokens", "exclude_input_in_output"):
        if accepts(flag):
            fields[flag] = True
    return fields


def request_id(request: Any) -> str | None:
    """The client's ``X-Request-Id`` header (printable ASCII, at most 128 characters), else None.

    Raises:
        APIError: 400 naming ``X-Request-Id`` when it is not printable ASCII or too long.
    """
    value = request.headers.get("x-request-id")
    if value is None:
        return None
    if not value or len(value) > 128 or not value.isascii() or not value.isprintable():
        raise APIError(
            400, "X-Request-Id must be 1 to 128 printable ASCII characters", param="X-Request-Id", code="invalid_value"
        )
    return value


def draft_fields(req: SamplingFields, draft_model: str | None, triton: TritonBackend) -> dict[str, Any]:
    """``{"num_draft_tokens": n}`` for a request that asks for draft tokens, else ``{}``.

    Raises:
        APIError: 400 naming ``num_draft_tokens``: the repository has no draft model, or the Triton model the
            requests go to has no such input.
    """
    n = req.num_draft_tokens
    if not n:
        return {}
    if draft_model is None:
        raise APIError(
            400,
            "num_draft_tokens asks for speculative decoding, but this repository has no draft model "
            "(render it with --draft-engine-dir DRAFT)",
            param="num_draft_tokens",
            code="invalid_value",
        )
    if not triton.accepts("num_draft_tokens"):
        raise APIError(
            400,
            f"num_draft_tokens is an input of tensorrt_llm_bls; requests go to {triton.model}, which has none "
            "(serve with --triton-model tensorrt_llm_bls)",
            param="num_draft_tokens",
            code="invalid_value",
        )
    return {"num_draft_tokens": n}


def make_job(
    prefix: str,
    req: SamplingFields,
    text: str,
    max_tokens: int,
    param: str,
    triton: TritonBackend,
    rid: str | None = None,
    *,
    draft_model: str | None = None,
) -> Job:
    """The request as ensemble fields; its id (the response ``id`` and the Triton request id) is
    ``<prefix>-<X-Request-Id>`` when the client sent that header, else ``<prefix>-<random hex>``.

    Raises:
        APIError: ``num_draft_tokens`` without a draft model (:func:`draft_fields`).
    """
    # Always stream from a decoupled model, also for a non-streamed answer: the BLS polls its client's
    # cancellation between engine responses, so only a streamed engine request can be cancelled mid-way there;
    # the deltas add up to the non-streamed text (postprocessing's incremental detokenizer).
    fields = {"text_input": text, "max_tokens": max_tokens, "stream": triton.streams}
    fields.update(sampling_fields(req, triton.accepts))
    fields.update(draft_fields(req, draft_model, triton))
    return Job(
        rid=f"{prefix}-{rid or uuid.uuid4().hex}",
        req=req,
        fields=fields,
        max_tokens=max_tokens,
        max_tokens_param=param,
        prompt_text=text,
        stops=req.stop_list(),
    )


def chat_prompt(served: ServedModel, req: ChatCompletionRequest) -> str:
    """The text sent as ``text_input`` for a chat (see the module docstring).

    Raises:
        APIError: 400 naming ``messages``: the chat template fails on the conversation (e.g. roles that do
            not alternate), or the repository's preprocessing applies the template itself and the chat is
            not one user message.
    """
    if served.preprocessing_applies_template:
        if len(req.messages) != 1 or req.messages[0].role != "user":
            raise APIError(
                400,
                "this repository's preprocessing applies the chat template to one user message "
                "(apply_chat_template=true): send exactly one user message, or render the "
                "repository with --set apply_chat_template=false",
                param="messages",
                code="invalid_value",
            )
        return req.messages[0].text()
    conversation = [{"role": "system" if m.role == "developer" else m.role, "content": m.text()} for m in req.messages]
    try:
        text = served.tokenizer.apply_chat_template(conversation, tokenize=False, add_generation_prompt=True)
    except Exception as exc:  # noqa: BLE001 - jinja2 errors, raise_exception() in templates
        raise APIError(
            400, f"the chat template refused the conversation: {exc}", param="messages", code="invalid_value"
        ) from None
    if not text:
        raise APIError(
            400, "the chat template rendered the conversation as empty text", param="messages", code="invalid_value"
        )
    return str(text)


def default_chat_max_tokens(served: ServedModel, text: str) -> int:
    """What is left of ``max_seq_len`` after the prompt (the prompt counted with preprocessing's rule)."""
    if served.max_seq_len is None:
        return COMPLETIONS_DEFAULT_MAX_TOKENS
    from ..runtime.text import encode_prompt

    n = len(encode_prompt(served.tokenizer, text, add_special_tokens=served.add_special_tokens))
    if served.max_input_len is not None and n > served.max_input_len:
        raise APIError(
            400,
            f"the prompt is {n} tokens, more than the engine's max_input_len of {served.max_input_len} tokens",
            param="messages",
            code="context_length_exceeded",
        )
    left = served.max_seq_len - n
    if left < 1:
        raise APIError(
            400,
            f"the prompt is {n} tokens, which leaves no room in the engine's max_seq_len of "
            f"{served.max_seq_len} tokens",
            param="messages",
            code="context_length_exceeded",
        )
    return left


def limit_max_tokens(served: ServedModel, value: int, param: str) -> None:
    """Refuse ``max_tokens`` (or ``max_completion_tokens``, ``param``) above the engine's ``max_seq_len - 1``.

    Raises:
        APIError: 400 naming ``param``.
    """
    if served.max_seq_len is not None and value > served.max_seq_len - 1:
        raise APIError(
            400,
            f"{param}={value} is more than the engine allows: its max_seq_len is "
            f"{served.max_seq_len} tokens (prompt included), so at most "
            f"{served.max_seq_len - 1}",
            param=param,
            code="invalid_value",
        )
