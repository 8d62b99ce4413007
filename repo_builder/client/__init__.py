"""Clients for text-in/text-out LLM models served by Triton (ensemble, tensorrt_llm_bls) and token-id requests.

Two protocols, one result type:

* HTTP: ``POST /v2/models/{model}/generate`` (exactly one response) and ``/generate_stream`` (Server-Sent
  Events, one ``data: {...}`` line per response). Triton's generate extension maps each JSON field onto the
  model input of the same name; scalars become ``[1]`` (``[1, 1]`` with ``max_batch_size > 0``).
* gRPC: ``tritonclient.grpc`` ``start_stream(callback=...)`` + ``async_stream_infer(...,
  enable_empty_final_response=True)`` for decoupled models (the end of a request is the response parameter
  ``triton_final_response``), unary ``infer`` for the others.

Input data types and shapes are read from the served model's configuration (``GET /v2/models/{m}/config`` or
gRPC ``get_model_config``), so one client serves the trtllm-1.2 profile (``max_tokens`` INT32, ``text_input``
dims ``[1]``) and trtllm-0.5 (UINT32, dims ``[-1]``, required ``bad_words``/``stop_words``). With
``max_batch_size > 0`` every tensor gets a leading batch dimension of 1.

Client-side checks (each raises :class:`~repo_builder.errors.ClientError` naming the request field):

* ``beam_width > 1`` together with ``stream`` (TensorRT-LLM: "Streaming mode is only supported with beam
  width of 1"; case B30).
* ``stream`` on a model that is not decoupled (the backend answers "Streaming is only supported if model is
  deployed using decoupled mode"; case B29a).
* ``/generate`` with ``stream: true`` on a decoupled model (Triton answers "generate expects model to produce
  exactly 1 response, use generate stream ..."; case B29b): use ``/generate_stream``.
* token-id requests never go to ``/generate`` (Triton's JSON mapping rejects ``[N]`` ids on some versions:
  "Shape does not match true shape of 'data' field"; case B33): :meth:`LLMClient.infer_token_ids` sends an
  explicit ``[1, N]`` INT32 tensor through ``/v2/models/tensorrt_llm/infer`` (or the gRPC stream when the
  model is decoupled, because HTTP ``/infer`` refuses decoupled models).

Timestamps are ``time.perf_counter_ns()`` taken when each response arrives in the client.

Layout (one room each): :mod:`.models` (ModelInfo, GenerateRequest, StreamEvent, GenerateResult),
:mod:`.inputs` (request fields -> typed model inputs, client-side checks), :mod:`.tokens` (tokenizer loading,
token counting), :mod:`.http_transport` and :mod:`.grpc_transport` (the wire), :mod:`.llm` (:class:`LLMClient`).
"""

from __future__ import annotations

from .inputs import check_request, prepare_inputs
from .llm import LLMClient
from .models import (
    DEFAULT_URLS,
    FIELD_ALIASES,
    GenerateRequest,
    GenerateResult,
    ModelInfo,
    Protocol,
    StreamEvent,
    new_request_id,
)
from .tokens import load_tokenizer, token_counter

__all__ = [
    "DEFAULT_URLS",
    "FIELD_ALIASES",
    "GenerateRequest",
    "GenerateResult",
    "LLMClient",
    "ModelInfo",
    "Protocol",
    "StreamEvent",
    "check_request",
    "load_tokenizer",
    "new_request_id",
    "prepare_inputs",
    "token_counter",
]
