"""The OpenAI-compatible HTTP front end: a FastAPI app in front of a Triton ensemble or BLS.

Endpoints: ``GET /v1/models`` (and ``/v1/models/{id}``), ``POST /v1/completions``,
``POST /v1/chat/completions``, ``GET /health`` (200 when Triton and the model are ready, else 503; never
needs the API key). Request and response shapes are in :mod:`.protocol`; Triton is reached through
:class:`.backend.TritonBackend` (one gRPC stream per request).

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
* ``usage``: ``prompt_tokens`` = the engine's ``num_input_tokens`` (the ids it received),
  ``completion_tokens`` = the sum of its ``num_output_tokens`` (ids generated, counted per response in a stream),
  both requested with ``return_num_input_tokens``/``return_num_output_tokens``. ``finish_reason`` is
  ``stop`` when a stop string matched or the engine ended before ``max_tokens`` (end id, stop word),
  ``length`` when it generated ``max_tokens``.

A client that disconnects (mid-stream or while waiting for a non-streamed answer) cancels the Triton
request (:meth:`.backend.GenerationStream.cancel`).

Several LLMs (a repository rendered with ``render --model NAME=ENGINE_DIR,TOKENIZER_DIR`` repeated): ``GET
/v1/models`` lists every ``NAME``; a request's ``model`` picks the LLM, whose own Triton model
(``NAME_ensemble``, or ``NAME_tensorrt_llm_bls`` with ``--triton-model tensorrt_llm_bls``), tokenizer (chat
template) and engine limits (``max_seq_len``, ``max_input_len``) from the lock file's ``llms[]`` serve it
(:func:`routing_table`). ``--served-model-name`` and ``--tokenizer-dir`` name one model, so they are refused
there (a :class:`~repo_builder.errors.RepoBuilderError` naming the option).

Errors never carry a traceback: bad requests are 400 (404 for an unknown model), a missing or wrong API key
401, Triton unreachable 503.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response as _Response

from .backend import BackendError, Chunk, GenerationStream, TritonBackend
from .protocol import APIError, ChatCompletionRequest, CompletionRequest, SamplingFields, parse_request, unsupported

log = logging.getLogger("repo_builder.openai")

#: OpenAI's default ``max_tokens`` of ``/v1/completions``.
COMPLETIONS_DEFAULT_MAX_TOKENS = 16


@dataclass
class FrontEndConfig:
    """Settings of one front end (one ``repo-builder openai`` option each).

    Attributes:
        grpc_url: Triton's gRPC ``host:port``.
        repo: the rendered repository (its lock file names the model, the tokenizer and the engine limits).
        triton_model: the Triton model requests go to (``ensemble`` or ``tensorrt_llm_bls``).
        served_model_name: the model id clients use; default: from the lock file. Single-LLM repositories
            only (refused for several LLMs, whose ids are their ``render --model`` names).
        api_key: when set, every ``/v1`` request needs ``Authorization: Bearer <api_key>``.
        tokenizer_dir: overrides the lock file's tokenizer directory (e.g. the repository was rendered on
            another machine). Single-LLM repositories only, like ``served_model_name``.
    """

    grpc_url: str
    repo: Path
    triton_model: str = "ensemble"
    served_model_name: str | None = None
    api_key: str | None = None
    tokenizer_dir: Path | None = None


@dataclass
class ServedModel:
    """What the front end knows about the model it serves (from the lock file and the tokenizer)."""

    name: str
    tokenizer: Any
    max_seq_len: int | None
    max_input_len: int | None
    add_special_tokens: bool
    preprocessing_applies_template: bool
    engine_model: str
    created: int = field(default_factory=lambda: int(time.time()))
    #: the Triton model this LLM's requests go to (``ensemble``, ``NAME_ensemble``, ``NAME_tensorrt_llm_bls``).
    triton_model: str = "ensemble"

    @property
    def has_chat_template(self) -> bool:
        return bool(getattr(self.tokenizer, "chat_template", None)) or self.preprocessing_applies_template


def load_served_models(config: FrontEndConfig) -> list[ServedModel]:
    """Read the lock file and load each LLM's tokenizer: one :class:`ServedModel` per LLM, in the lock's order.

    Raises:
        RepoBuilderError: no or malformed lock file; the tokenizer directory is missing or unloadable (the
            message names it and the ``--tokenizer-dir`` option); ``--served-model-name`` or
            ``--tokenizer-dir`` given for a repository with several LLMs.
    """
    from ..errors import RepoBuilderError
    from ..lockfile import read_serving_info
    from ..runtime.text import TokenizerLoadError, load_tokenizer

    infos = read_serving_info(config.repo)
    if len(infos) > 1:
        names = ", ".join(i.model_name for i in infos)
        for option, given in (
            ("--served-model-name", config.served_model_name),
            ("--tokenizer-dir", config.tokenizer_dir),
        ):
            if given is not None:
                raise RepoBuilderError(
                    f"the repository serves several LLMs ({names}); {option} applies to a single-LLM repository only",
                    path=infos[0].path,
                    key=option,
                    hint="drop it: each LLM is served under its render --model NAME with the "
                    "tokenizer the lock file records for it",
                )
    served = []
    for info in infos:
        tok_dir = config.tokenizer_dir or info.tokenizer_dir
        if tok_dir is None:
            raise RepoBuilderError(
                "the lock file records no tokenizer directory" + (f" for LLM '{info.llm}'" if info.llm else ""),
                path=info.path,
                key="--tokenizer-dir",
                hint="pass --tokenizer-dir",
            )
        try:
            tokenizer = load_tokenizer(
                tok_dir, trust_remote_code=bool(info.value("trust_remote_code", False)), key="--tokenizer-dir"
            )
        except TokenizerLoadError as exc:
            raise RepoBuilderError(str(exc), key="--tokenizer-dir") from None

        def as_int(name: str, info: Any = info) -> int | None:
            value = info.value(name)
            return int(value) if isinstance(value, int) and not isinstance(value, bool) else None

        served.append(
            ServedModel(
                name=config.served_model_name or info.model_name,
                tokenizer=tokenizer,
                max_seq_len=as_int("max_seq_len"),
                max_input_len=as_int("max_input_len"),
                add_special_tokens=bool(info.value("add_special_tokens", True)),
                preprocessing_applies_template=bool(info.value("apply_chat_template", False)),
                # several LLMs: the lock's llms[].models (each LLM's values keep the single-LLM name)
                engine_model=(
                    info.triton_model("tensorrt_llm")
                    if info.llm
                    else str(info.value("tensorrt_llm_model_name") or "tensorrt_llm")
                ),
                triton_model=info.triton_model(config.triton_model),
            )
        )
    return served


@dataclass
class Route:
    """Where requests for one model id go: the LLM and the Triton model (a :class:`TritonBackend`) serving it."""

    served: ServedModel
    backend: TritonBackend


def routing_table(
    config: FrontEndConfig, models: list[ServedModel], backends: list[TritonBackend] | None = None
) -> dict[str, Route]:
    """Model id -> :class:`Route`, in the lock's order (``GET /v1/models`` lists them so).

    Each LLM gets its own :class:`TritonBackend` on ``config.grpc_url`` for ``ServedModel.triton_model`` (its
    ensemble or BLS) unless ``backends`` (one per model, tests) is given. Nothing is connected here.
    """
    if backends is None:
        backends = [TritonBackend(config.grpc_url, m.triton_model, engine_model=m.engine_model) for m in models]
    return {m.name: Route(m, b) for m, b in zip(models, backends)}


# ---------------------------------------------------------------------------------------------- requests

#: ensemble field -> OpenAI field, for error messages (text_input is the prompt or the messages).
_PARAM = {"stop_words": "stop", "end_id": "ignore_eos", "min_length": "min_tokens", "random_seed": "seed"}


def _param(field_name: str | None, req: SamplingFields, max_tokens_param: str) -> str | None:
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


@dataclass
class Outcome:
    """The end of a generation: token counts and why it stopped."""

    prompt_tokens: int
    completion_tokens: int
    finish_reason: str

    def usage(self) -> dict[str, int]:
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.prompt_tokens + self.completion_tokens,
        }


class Generation:
    """Text deltas of one request with stop strings applied, then its :class:`Outcome`."""

    def __init__(self, job: Job, stream: GenerationStream, first: Chunk | None, model: ServedModel) -> None:
        from ..runtime.stopstrings import StopStringMatcher

        self.job = job
        self.stream = stream
        self.first = first
        self.model = model
        self.matcher = StopStringMatcher(job.stops) if job.stops else None
        self.n_in: int | None = None
        self.n_out = 0
        self.responses = 0
        self.stopped_by_string = False

    def _count(self, chunk: Chunk) -> None:
        if chunk.num_input_tokens is not None and self.n_in is None:
            self.n_in = chunk.num_input_tokens
        if chunk.num_output_tokens is not None:  # per response, as NVIDIA's backend counts in a stream
            self.n_out += chunk.num_output_tokens
        if chunk.text:
            self.responses += 1

    async def deltas(self) -> AsyncIterator[str]:
        """Text to send, in order (stop strings cut; the Triton request ended when one matched)."""
        matcher = self.matcher
        chunk = self.first
        if chunk is None:
            return
        while True:
            if chunk is None:
                chunk = await self.stream.next()
                if chunk is None:
                    break
            self._count(chunk)
            text = chunk.text
            if matcher is not None and text:
                result = matcher.feed(text)
                text = result.text
                if result.stopped:
                    self.stopped_by_string = True
                    if text:
                        yield text
                    if not chunk.final:
                        self.stream.cancel()
                    return
            if text:
                yield text
            if chunk.final:
                break
            chunk = None
        if matcher is not None:
            rest = matcher.flush()
            self.stopped_by_string = matcher.stopped
            if rest:
                yield rest

    def outcome(self, text: str | None = None) -> Outcome:
        """Token counts (the engine's) and the finish reason, once :meth:`deltas` is exhausted."""
        n_in = self.n_in
        if n_in is None:  # a model without num_input_tokens (trtllm-0.5): the preprocessing rule, same ids
            from ..runtime.text import encode_prompt

            n_in = len(
                encode_prompt(
                    self.model.tokenizer, self.job.prompt_text, add_special_tokens=self.model.add_special_tokens
                )
            )
        n_out = self.n_out or self.responses
        if self.stopped_by_string:
            reason = "stop"
        else:
            reason = "length" if n_out >= self.job.max_tokens else "stop"
        return Outcome(n_in, n_out, reason)


# ---------------------------------------------------------------------------------------------- the app


async def _wait_disconnect(receive: Callable[[], Any]) -> None:
    while True:
        message = await receive()
        if message.get("type") == "http.disconnect":
            return


def _on_disconnect(watcher: asyncio.Future[None], stream: GenerationStream) -> None:
    def callback(fut: asyncio.Future[None]) -> None:
        if not fut.cancelled() and fut.exception() is None:
            stream.cancel()

    watcher.add_done_callback(callback)


def _error_response(err: APIError) -> Any:
    headers = {"WWW-Authenticate": "Bearer"} if err.status == 401 else None
    return JSONResponse(err.body(), status_code=err.status, headers=headers)


def _sse(payload: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n"


DONE = b"data: [DONE]\n\n"


def create_app(
    config: FrontEndConfig, *, model: ServedModel | None = None, backend: TritonBackend | None = None
) -> Any:
    """The FastAPI application for ``config`` (uvicorn serves it; tests may pass ``model``/``backend``).

    Raises:
        RepoBuilderError: see :func:`load_served_models`.
    """
    from contextlib import asynccontextmanager

    models = [model] if model is not None else load_served_models(config)
    routes = routing_table(config, models, [backend] if backend is not None else None)
    api_key = config.api_key

    @asynccontextmanager
    async def lifespan(_app: Any) -> AsyncIterator[None]:
        try:
            for route in routes.values():
                if route.backend.info is None:
                    await route.backend.open()
            yield
        finally:
            for route in routes.values():
                await route.backend.close()

    app = FastAPI(title="repo-builder OpenAI-compatible API", lifespan=lifespan, docs_url=None, redoc_url=None)
    app.state.routes = routes

    @app.exception_handler(APIError)
    async def _api_error(_request: Request, exc: APIError) -> Any:
        return _error_response(exc)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(_request: Request, exc: StarletteHTTPException) -> Any:
        kind = "not_found" if exc.status_code == 404 else "invalid_request_error"
        return _error_response(APIError(exc.status_code, str(exc.detail), type=kind))

    @app.exception_handler(RequestValidationError)
    async def _validation(_request: Request, exc: RequestValidationError) -> Any:
        return _error_response(APIError(400, f"invalid request: {exc.errors()[0].get('msg')}"))

    @app.exception_handler(Exception)
    async def _unexpected(_request: Request, exc: Exception) -> Any:
        log.exception("unexpected error")
        return _error_response(APIError(500, f"internal error: {type(exc).__name__}: {exc}", type="server_error"))

    def check_key(request: Request) -> None:
        if api_key is None:
            return
        header = request.headers.get("authorization", "")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip().encode(), api_key.encode()):
            raise APIError(
                401,
                "Incorrect API key provided: send 'Authorization: Bearer <key>' with the key the "
                "server was started with."
                if header
                else "You didn't provide an API key: send 'Authorization: Bearer <key>'.",
                type="invalid_request_error",
                code="invalid_api_key",
            )

    async def body_of(request: Request, cls: type) -> Any:
        check_key(request)
        raw = await request.body()
        try:
            data = json.loads(raw)
        except (ValueError, UnicodeDecodeError) as exc:
            raise APIError(400, f"The request body is not valid JSON: {exc}", code="invalid_json") from None
        req = parse_request(cls, data)
        route = routes.get(req.model)
        if route is None:
            raise APIError(
                404,
                f"The model '{req.model}' does not exist; this server serves {', '.join(repr(n) for n in routes)}.",
                param="model",
                code="model_not_found",
            )
        unsupported(req, has_chat_template=route.served.has_chat_template)
        return req, route

    def limit_max_tokens(served: ServedModel, value: int, param: str) -> None:
        if served.max_seq_len is not None and value > served.max_seq_len - 1:
            raise APIError(
                400,
                f"{param}={value} is more than the engine allows: its max_seq_len is "
                f"{served.max_seq_len} tokens (prompt included), so at most "
                f"{served.max_seq_len - 1}",
                param=param,
                code="invalid_value",
            )

    def backend_error(exc: BackendError | Exception, job: Job) -> APIError:
        from ..errors import ClientError

        if isinstance(exc, ClientError):  # the model has no input for a field / a value does not fit
            return APIError(
                400, exc.message, param=_param(exc.key, job.req, job.max_tokens_param), code="unsupported_parameter"
            )
        assert isinstance(exc, BackendError)
        if exc.unavailable:
            return APIError(
                503, f"Triton is not reachable: {exc.message}", type="server_error", code="service_unavailable"
            )
        if exc.field is not None:
            return APIError(
                400, exc.message, param=_param(exc.field, job.req, job.max_tokens_param), code="invalid_value"
            )
        return APIError(500, f"Triton failed the request: {exc.message}", type="server_error")

    async def run(request: Request, route: Route, job: Job, stream_out: bool, render: Any) -> Any:
        """Send the request, wait for its first response (so an error can still be a 400), then answer.

        A watcher on the ASGI receive channel cancels the Triton request as soon as the client disconnects,
        from the moment the request is sent (a non-streamed answer arrives only at the end).
        """
        from ..errors import ClientError

        served, triton = route.served, route.backend
        try:
            stream = triton.generate(job.fields, job.rid)
        except ClientError as exc:
            raise backend_error(exc, job) from None
        watcher = asyncio.ensure_future(_wait_disconnect(request.receive))
        _on_disconnect(watcher, stream)
        try:
            first = await stream.next()
        except BackendError as exc:
            watcher.cancel()
            raise backend_error(exc, job) from None
        except BaseException:
            watcher.cancel()
            raise
        gen = Generation(job, stream, first, served)
        if not stream_out:
            try:
                parts = [t async for t in gen.deltas()]
            except BackendError as exc:
                raise backend_error(exc, job) from None
            finally:
                watcher.cancel()
            text = "".join(parts)
            return JSONResponse(render(text, gen.outcome(text)))
        return SSEResponse(render.stream(gen, job), watcher, stream)

    # -------------------------------------------------------------------------------------- routes
    @app.get("/health")
    async def health() -> Any:
        for route in routes.values():
            if not await route.backend.ready():
                return _error_response(
                    APIError(
                        503,
                        f"Triton model '{route.backend.model}' is not ready",
                        type="server_error",
                        code="service_unavailable",
                    )
                )
        return Response(status_code=200)

    @app.get("/v1/models")
    async def list_models(request: Request) -> Any:
        check_key(request)
        return {"object": "list", "data": [card(route.served) for route in routes.values()]}

    @app.get("/v1/models/{model_id:path}")
    async def get_model(model_id: str, request: Request) -> Any:
        check_key(request)
        if model_id not in routes:
            raise APIError(404, f"The model '{model_id}' does not exist", param="model", code="model_not_found")
        return card(routes[model_id].served)

    def card(served: ServedModel) -> dict[str, Any]:
        return {"id": served.name, "object": "model", "created": served.created, "owned_by": "repo-builder"}

    @app.post("/v1/completions")
    async def completions(request: Request) -> Any:
        req, route = await body_of(request, CompletionRequest)
        served, triton = route.served, route.backend
        # body_of -> parse_request already refused token-id prompts and lists of more than one prompt
        prompt = req.prompt if isinstance(req.prompt, str) else cast(str, req.prompt[0])
        if not prompt:
            raise APIError(400, "prompt must not be empty", param="prompt", code="invalid_value")
        max_tokens = req.max_tokens if req.max_tokens is not None else COMPLETIONS_DEFAULT_MAX_TOKENS
        limit_max_tokens(served, max_tokens, "max_tokens")
        job = _job("cmpl", req, prompt, max_tokens, "max_tokens", triton, request_id(request))
        return await run(
            request, route, job, bool(req.stream), CompletionRenderer(served.name, job, bool(req.echo), prompt)
        )

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Any:
        req, route = await body_of(request, ChatCompletionRequest)
        served, triton = route.served, route.backend
        text = chat_prompt(served, req)
        max_tokens, param = req.requested_max_tokens()
        if max_tokens is None:
            max_tokens = default_chat_max_tokens(served, text)
        limit_max_tokens(served, max_tokens, param)
        job = _job("chatcmpl", req, text, max_tokens, param, triton, request_id(request))
        return await run(request, route, job, bool(req.stream), ChatRenderer(served.name, job))

    return app


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


def _job(
    prefix: str,
    req: SamplingFields,
    text: str,
    max_tokens: int,
    param: str,
    triton: TritonBackend,
    rid: str | None = None,
) -> Job:
    """The request as ensemble fields; its id (the response ``id`` and the Triton request id) is
    ``<prefix>-<X-Request-Id>`` when the client sent that header, else ``<prefix>-<random hex>``."""
    # Always stream from a decoupled model, also for a non-streamed answer: the BLS polls its client's
    # cancellation between engine responses, so only a streamed engine request can be cancelled mid-way there;
    # the deltas add up to the non-streamed text (postprocessing's incremental detokenizer).
    fields = {"text_input": text, "max_tokens": max_tokens, "stream": triton.streams}
    fields.update(sampling_fields(req, triton.accepts))
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


# ---------------------------------------------------------------------------------------------- responses


class CompletionRenderer:
    """``/v1/completions`` bodies and stream chunks."""

    def __init__(self, model: str, job: Job, echo: bool, prompt: str) -> None:
        self.model, self.job, self.echo, self.prompt = model, job, echo, prompt
        self.created = int(time.time())

    def __call__(self, text: str, outcome: Outcome) -> dict[str, Any]:
        return {
            "id": self.job.rid,
            "object": "text_completion",
            "created": self.created,
            "model": self.model,
            "choices": [
                {
                    "index": 0,
                    "text": (self.prompt + text) if self.echo else text,
                    "logprobs": None,
                    "finish_reason": outcome.finish_reason,
                }
            ],
            "usage": outcome.usage(),
        }

    async def stream(self, gen: Generation, job: Job) -> AsyncIterator[bytes]:
        usage = job.req.wants_usage_chunk()
        head = json.dumps(
            {"id": job.rid, "object": "text_completion", "created": self.created, "model": self.model},
            separators=(",", ":"),
        )[:-1]
        prefix = b"data: " + head.encode() + b',"choices":[{"index":0,"text":'
        suffix = b',"logprobs":null,"finish_reason":null}]' + (b',"usage":null' if usage else b"") + b"}\n\n"
        if self.echo:
            yield prefix + json.dumps(self.prompt).encode() + suffix
        async for text in gen.deltas():
            yield prefix + json.dumps(text).encode() + suffix
        outcome = gen.outcome()
        yield (
            prefix
            + b'""'
            + b',"logprobs":null,"finish_reason":"'
            + outcome.finish_reason.encode()
            + b'"}]'
            + (b',"usage":null' if usage else b"")
            + b"}\n\n"
        )
        if usage:
            yield (
                b"data: " + head.encode() + b',"choices":[],"usage":' + json.dumps(outcome.usage()).encode() + b"}\n\n"
            )
        yield DONE


class ChatRenderer:
    """``/v1/chat/completions`` bodies and stream chunks."""

    def __init__(self, model: str, job: Job) -> None:
        self.model, self.job = model, job
        self.created = int(time.time())

    def __call__(self, text: str, outcome: Outcome) -> dict[str, Any]:
        return {
            "id": self.job.rid,
            "object": "chat.completion",
            "created": self.created,
            "model": self.model,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": text, "refusal": None},
                    "logprobs": None,
                    "finish_reason": outcome.finish_reason,
                }
            ],
            "usage": outcome.usage(),
        }

    async def stream(self, gen: Generation, job: Job) -> AsyncIterator[bytes]:
        usage = job.req.wants_usage_chunk()
        head = json.dumps(
            {"id": job.rid, "object": "chat.completion.chunk", "created": self.created, "model": self.model},
            separators=(",", ":"),
        )[:-1]
        tail = b',"logprobs":null,"finish_reason":null}]' + (b',"usage":null' if usage else b"") + b"}\n\n"
        start = b"data: " + head.encode() + b',"choices":[{"index":0,"delta":'
        yield start + b'{"role":"assistant","content":""}' + tail
        prefix = start + b'{"content":'
        suffix = b"}" + tail
        async for text in gen.deltas():
            yield prefix + json.dumps(text).encode() + suffix
        outcome = gen.outcome()
        yield (
            start
            + b'{},"logprobs":null,"finish_reason":"'
            + outcome.finish_reason.encode()
            + b'"}]'
            + (b',"usage":null' if usage else b"")
            + b"}\n\n"
        )
        if usage:
            yield (
                b"data: " + head.encode() + b',"choices":[],"usage":' + json.dumps(outcome.usage()).encode() + b"}\n\n"
            )
        yield DONE


def _stream_error(err: APIError) -> bytes:
    return _sse(err.body()) + DONE


class SSEResponse(_Response):
    """A ``text/event-stream`` ASGI response that cancels the Triton request when the client goes away.

    It watches the ASGI ``receive`` channel for ``http.disconnect`` while sending (the watcher started
    before the first response), so a client that disconnects between two tokens is noticed at once, not
    at the next write.
    """

    def __init__(self, chunks: AsyncIterator[bytes], watcher: asyncio.Future[None], stream: GenerationStream) -> None:
        self.chunks = chunks
        self.watcher = watcher
        self.stream = stream
        self.background = None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [
                    (b"content-type", b"text/event-stream; charset=utf-8"),
                    (b"cache-control", b"no-cache"),
                    (b"x-accel-buffering", b"no"),
                ],
            }
        )
        chunks = self.chunks
        try:
            try:
                async for chunk in chunks:
                    if self.watcher.done():
                        break
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
            except BackendError as exc:  # failed after the stream started: an error event, then [DONE]
                err = APIError(
                    400 if exc.field else 500,
                    exc.message,
                    type="invalid_request_error" if exc.field else "server_error",
                )
                await send({"type": "http.response.body", "body": _stream_error(err), "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        except OSError:  # the client went away while we wrote
            self.stream.cancel()
        finally:
            self.watcher.cancel()
            await chunks.aclose()  # type: ignore[attr-defined]
