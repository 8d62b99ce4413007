"""The skeleton shared by the front end's one-model apps (layouts whisper and multimodal): error handler, API
key check, a lazily opened gRPC client, ``GET /health`` and ``GET /v1/models``.

:func:`single_model_app` builds it; :mod:`repo_builder.openai.audio` and :mod:`repo_builder.openai.vision` add
their one route. The text layouts use :mod:`repo_builder.openai.router` instead.
"""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

from .protocol import APIError


class _Backend:
    """What :func:`repo_builder.openai.serve.serve` checks of a route: the Triton model's name."""

    def __init__(self, model: str) -> None:
        self.model = model


class _Route:
    def __init__(self, model: str) -> None:
        self.backend = _Backend(model)


def error_response(err: APIError) -> Any:
    """``err`` as OpenAI's JSON error body with its HTTP status."""
    return JSONResponse(err.body(), status_code=err.status)


def single_model_app(
    config: Any, *, title: str, served_name: str, triton_model: str
) -> tuple[FastAPI, Callable[[Request], None], Callable[[], Awaitable[Any]]]:
    """A FastAPI app serving one model, ``served_name``, through the Triton model ``triton_model``.

    Returns ``(app, check_key, grpc)``: ``check_key(request)`` raises APIError 401 (``invalid_api_key``) when
    ``config.api_key`` is set and the ``Authorization`` header is not ``Bearer <key>``; ``await grpc()`` is the
    one ``tritonclient.grpc.aio`` client of ``config.grpc_url``, opened on first use. ``GET /health`` is 200 when
    ``triton_model`` is ready, else 503; ``GET /v1/models`` lists ``served_name`` (API key checked).
    """
    app = FastAPI(title=title, docs_url=None, redoc_url=None)
    app.state.routes = {served_name: _Route(triton_model)}
    client: dict[str, Any] = {}

    @app.exception_handler(APIError)
    async def _api_error(_request: Request, exc: APIError) -> Any:
        return error_response(exc)

    def check_key(request: Request) -> None:
        if config.api_key:
            given = request.headers.get("authorization", "")
            if not hmac.compare_digest(given, f"Bearer {config.api_key}"):
                raise APIError(401, "invalid API key", type="authentication_error", code="invalid_api_key")

    async def grpc() -> Any:
        if "c" not in client:
            import tritonclient.grpc.aio as grpcaio

            client["c"] = grpcaio.InferenceServerClient(config.grpc_url)
        return client["c"]

    @app.get("/health")
    async def health() -> Any:
        try:
            ready = await (await grpc()).is_model_ready(triton_model)
        except Exception:  # noqa: BLE001 - unreachable is "not ready"
            ready = False
        if not ready:
            return error_response(APIError(503, f"Triton model '{triton_model}' is not ready", type="server_error"))
        return Response(status_code=200)

    @app.get("/v1/models")
    async def models(request: Request) -> Any:
        check_key(request)
        return {
            "object": "list",
            "data": [{"id": served_name, "object": "model", "created": 0, "owned_by": "repo-builder"}],
        }

    return app, check_key, grpc
