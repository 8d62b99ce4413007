"""The OpenAI-compatible HTTP front end: :func:`create_app`, a small factory mounting :data:`.router.router`.

The rooms it is built from:

* :mod:`.protocol`: request models and the OpenAI error shape (no serving code);
* :mod:`.router`: the routes (``/v1/models``, ``/v1/completions``, ``/v1/chat/completions``, ``/health``);
* :mod:`.served`: the models served (lock file, tokenizer, engine limits) and the model id -> Triton model table;
* :mod:`.jobs`: how OpenAI fields become ensemble inputs (:class:`~.jobs.Job`);
* :mod:`.generation`: the text deltas of a request with stop strings applied, usage, finish reason,
  cancellation on disconnect;
* :mod:`.responses`: answer bodies and SSE chunks of both endpoints (one renderer), the SSE response;
* :mod:`.backend`: Triton over gRPC (:class:`~.backend.TritonBackend`, one stream per request).

Errors never carry a traceback: every failure becomes OpenAI's error shape (:func:`add_error_handlers`).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from ..errors import field_problems
from .backend import TritonBackend
from .metrics import FrontEndMetrics, MetricsMiddleware
from .protocol import APIError
from .responses import error_response
from .router import FrontEnd, frontend, router
from .served import FrontEndConfig, ServedModel, load_served_models, routing_table

log = logging.getLogger("repo_builder.openai")


def add_error_handlers(app: FastAPI) -> None:
    """Give every failure OpenAI's error shape: :class:`APIError` as raised, FastAPI's 404/405 and body
    validation errors as 404/400, anything unexpected as 500 (logged, no traceback in the body). A 4xx is
    counted in ``repo_builder_openai_requests_refused_total`` by its error code."""

    def refused(request: Request, err: APIError) -> Any:
        if err.status < 500:
            frontend(request).metrics.refused(getattr(request.state, "model", ""), err.code)
        return error_response(err)

    @app.exception_handler(APIError)
    async def _api_error(request: Request, exc: APIError) -> Any:
        return refused(request, exc)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> Any:
        kind = "not_found" if exc.status_code == 404 else "invalid_request_error"
        return refused(request, APIError(exc.status_code, str(exc.detail), type=kind))

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> Any:
        return refused(request, APIError(400, f"invalid request: {field_problems(exc.errors())[0].message}"))

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> Any:
        log.exception("unexpected error")
        # answered by the outermost middleware, so MetricsMiddleware does not see this status: counted here
        frontend(request).metrics.status(getattr(request.state, "model", ""), 500)
        return error_response(APIError(500, f"internal error: {type(exc).__name__}: {exc}", type="server_error"))


def create_app(
    config: FrontEndConfig, *, model: ServedModel | None = None, backend: TritonBackend | None = None
) -> Any:
    """The FastAPI application for ``config`` (uvicorn serves it; tests may pass ``model``/``backend``).

    A repository of layout whisper gets :func:`.audio.create_audio_app` instead. The lifespan opens each
    route's gRPC connection (reading the Triton model's configuration) and closes it on shutdown.

    Raises:
        RepoBuilderError: see :func:`load_served_models`.
    """
    from ..repository.lockfile import repository_layout

    layout = repository_layout(config.repo) if model is None else None
    if layout == "whisper":  # audio transcriptions
        from .audio import create_audio_app

        return create_audio_app(config)
    if layout == "multimodal":  # image_url chats
        from .vision import create_vision_app

        return create_vision_app(config)
    models = [model] if model is not None else load_served_models(config)
    routes = routing_table(config, models, [backend] if backend is not None else None)

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
    metrics = FrontEndMetrics(routes)
    app.state.frontend = FrontEnd(routes, config.api_key, metrics)
    app.state.routes = routes  # what serve() checks and prints (the audio app has the same attribute)
    add_error_handlers(app)
    app.include_router(router)
    app.add_middleware(MetricsMiddleware, metrics=metrics)
    return app
