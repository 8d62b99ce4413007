"""The OpenAI-compatible HTTP front end: a FastAPI app in front of a Triton ensemble or BLS.

Endpoints: ``GET /v1/models`` (and ``/v1/models/{id}``), ``POST /v1/completions``,
``POST /v1/chat/completions``, ``GET /health`` (200 when Triton and the model are ready, else 503; never
needs the API key). The rooms it is built from:

* :mod:`.protocol`: request and response shapes, the OpenAI error shape;
* :mod:`.served`: the models served (lock file, tokenizer, engine limits) and the model id -> Triton model table;
* :mod:`.jobs`: how OpenAI fields become ensemble inputs (:class:`~.jobs.Job`);
* :mod:`.generation`: the text deltas of a request with stop strings applied, usage, finish reason,
  cancellation on disconnect;
* :mod:`.responses`: answer bodies and SSE chunks of both endpoints (one renderer), the SSE response;
* :mod:`.backend`: Triton over gRPC (:class:`~.backend.TritonBackend`, one stream per request).

Errors never carry a traceback: bad requests are 400 (404 for an unknown model), a missing or wrong API key
401, Triton unreachable 503.
"""

from __future__ import annotations

import hmac
import json
import logging
from collections.abc import AsyncIterator
from typing import Any, cast

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from .backend import BackendError, TritonBackend
from .generation import Generation, watch_disconnect
from .jobs import (
    COMPLETIONS_DEFAULT_MAX_TOKENS,
    Job,
    chat_prompt,
    default_chat_max_tokens,
    limit_max_tokens,
    make_job,
    param_name,
    request_id,
)
from .protocol import APIError, ChatCompletionRequest, CompletionRequest, parse_request, unsupported
from .responses import CHAT, COMPLETION, Renderer, SSEResponse
from .served import FrontEndConfig, Route, ServedModel, load_served_models, routing_table

log = logging.getLogger("repo_builder.openai")


def _error_response(err: APIError) -> Any:
    headers = {"WWW-Authenticate": "Bearer"} if err.status == 401 else None
    return JSONResponse(err.body(), status_code=err.status, headers=headers)


def create_app(
    config: FrontEndConfig, *, model: ServedModel | None = None, backend: TritonBackend | None = None
) -> Any:
    """The FastAPI application for ``config`` (uvicorn serves it; tests may pass ``model``/``backend``).

    Raises:
        RepoBuilderError: see :func:`load_served_models`.
    """
    from contextlib import asynccontextmanager
    from pathlib import Path

    from .audio import WHISPER_MARKER, create_audio_app

    if model is None and (Path(config.repo) / WHISPER_MARKER).is_file():  # layout whisper: audio transcriptions
        return create_audio_app(config)
    from .vision import MULTIMODAL_MARKER, create_vision_app

    if model is None and (Path(config.repo) / MULTIMODAL_MARKER).is_file():  # layout multimodal: image_url chats
        return create_vision_app(config)
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

    def backend_error(exc: BackendError | Exception, job: Job) -> APIError:
        from ..errors import ClientError

        if isinstance(exc, ClientError):  # the model has no input for a field / a value does not fit
            return APIError(
                400, exc.message, param=param_name(exc.key, job.req, job.max_tokens_param), code="unsupported_parameter"
            )
        assert isinstance(exc, BackendError)
        if exc.unavailable:
            return APIError(
                503, f"Triton is not reachable: {exc.message}", type="server_error", code="service_unavailable"
            )
        if exc.field is not None:
            return APIError(
                400, exc.message, param=param_name(exc.field, job.req, job.max_tokens_param), code="invalid_value"
            )
        return APIError(500, f"Triton failed the request: {exc.message}", type="server_error")

    async def run(request: Request, route: Route, job: Job, stream_out: bool, render: Renderer) -> Any:
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
        watcher = watch_disconnect(request.receive, stream)
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
        job = make_job("cmpl", req, prompt, max_tokens, "max_tokens", triton, request_id(request))
        renderer = Renderer(COMPLETION, served.name, job, echo=prompt if req.echo else "")
        return await run(request, route, job, bool(req.stream), renderer)

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Any:
        req, route = await body_of(request, ChatCompletionRequest)
        served, triton = route.served, route.backend
        text = chat_prompt(served, req)
        max_tokens, param = req.requested_max_tokens()
        if max_tokens is None:
            max_tokens = default_chat_max_tokens(served, text)
        limit_max_tokens(served, max_tokens, param)
        job = make_job("chatcmpl", req, text, max_tokens, param, triton, request_id(request))
        return await run(request, route, job, bool(req.stream), Renderer(CHAT, served.name, job))

    return app
