"""The OpenAI-compatible routes: one FastAPI ``APIRouter`` (:data:`router`) that :func:`.app.create_app` mounts.

Endpoints: ``GET /v1/models`` (and ``/v1/models/{id}``), ``POST /v1/completions``,
``POST /v1/chat/completions``, ``GET /health`` (200 when Triton and every served model are ready, else 503;
never needs the API key). What a handler needs of the server (the model id -> :class:`~.served.Route` table,
the API key) is :class:`FrontEnd`, kept on ``app.state.frontend``; the handlers hold no state of their own.

Errors are raised as :class:`~.protocol.APIError` (the app's exception handlers give them OpenAI's shape):
bad requests 400 (404 for an unknown model), a missing or wrong API key 401, Triton unreachable 503.
"""

from __future__ import annotations

import hmac
import json
from dataclasses import dataclass
from typing import Any, cast

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response

from .backend import BackendError
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
from .metrics import ARRIVAL, FrontEndMetrics
from .protocol import APIError, ChatCompletionRequest, CompletionRequest, parse_request, unsupported
from .responses import CHAT, COMPLETION, Renderer, SSEResponse, error_response
from .served import Route, ServedModel

router = APIRouter()


@dataclass
class FrontEnd:
    """What the routes read of the server: ``app.state.frontend``.

    Attributes:
        routes: model id -> :class:`~.served.Route` (the LLM and its Triton model), in the lock file's order.
        api_key: when set, every ``/v1`` request needs ``Authorization: Bearer <api_key>``.
        metrics: the front end's Prometheus metrics (``GET /metrics``).
    """

    routes: dict[str, Route]
    api_key: str | None
    metrics: FrontEndMetrics


def frontend(request: Request) -> FrontEnd:
    return cast(FrontEnd, request.app.state.frontend)


def check_key(request: Request) -> FrontEnd:
    """The request's :class:`FrontEnd`, once its API key is checked.

    Raises:
        APIError: 401 (``invalid_api_key``) when a key is required and the ``Authorization`` header lacks it.
    """
    front = frontend(request)
    api_key = front.api_key
    if api_key is None:
        return front
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip().encode(), api_key.encode()):
        raise APIError(
            401,
            "Incorrect API key provided: send 'Authorization: Bearer <key>' with the key the server was started with."
            if header
            else "You didn't provide an API key: send 'Authorization: Bearer <key>'.",
            type="invalid_request_error",
            code="invalid_api_key",
        )
    return front


async def body_of(request: Request, cls: type) -> tuple[Any, Route]:
    """The request body validated as ``cls`` and the :class:`~.served.Route` of its ``model``.

    Raises:
        APIError: 401 (key), 400 (not JSON, a field at fault, a field the model cannot honour), 404 (model).
    """
    routes = check_key(request).routes
    raw = await request.body()
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise APIError(400, f"The request body is not valid JSON: {exc}", code="invalid_json") from None
    req = parse_request(cls, data)
    route = routes.get(req.model)
    if route is not None:
        request.state.model = req.model  # the label its status and refusal are counted under
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
    """The :class:`~.protocol.APIError` for a request Triton (or the input mapping) refused or failed."""
    from ..errors import ClientError

    if isinstance(exc, ClientError):  # the model has no input for a field / a value does not fit
        return APIError(
            400, exc.message, param=param_name(exc.key, job.req, job.max_tokens_param), code="unsupported_parameter"
        )
    assert isinstance(exc, BackendError)
    if exc.unavailable:
        return APIError(503, f"Triton is not reachable: {exc.message}", type="server_error", code="service_unavailable")
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
    metrics = frontend(request).metrics

    def cancelled() -> None:
        metrics.inc("repo_builder_openai_streams_cancelled_total", served.name)

    watcher = watch_disconnect(request.receive, stream, cancelled)
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


def card(served: ServedModel) -> dict[str, Any]:
    """The ``model`` object of ``GET /v1/models``."""
    return {"id": served.name, "object": "model", "created": served.created, "owned_by": "repo-builder"}


@router.get("/health")
async def health(request: Request) -> Any:
    for route in frontend(request).routes.values():
        if not await route.backend.ready():
            return error_response(
                APIError(
                    503,
                    f"Triton model '{route.backend.model}' is not ready",
                    type="server_error",
                    code="service_unavailable",
                )
            )
    return Response(status_code=200)


@router.get("/metrics")
async def metrics(request: Request) -> Any:
    """The front end's own metrics, Prometheus text format (no API key, like ``/health``)."""
    return PlainTextResponse(frontend(request).metrics.exposition(), media_type="text/plain; version=0.0.4")


def _renderer(request: Request, *args: Any, **kw: Any) -> Renderer:
    return Renderer(*args, metrics=frontend(request).metrics, arrival=request.scope.get(ARRIVAL), **kw)


@router.get("/v1/models")
async def list_models(request: Request) -> Any:
    routes = check_key(request).routes
    return {"object": "list", "data": [card(route.served) for route in routes.values()]}


@router.get("/v1/models/{model_id:path}")
async def get_model(model_id: str, request: Request) -> Any:
    routes = check_key(request).routes
    if model_id not in routes:
        raise APIError(404, f"The model '{model_id}' does not exist", param="model", code="model_not_found")
    return card(routes[model_id].served)


@router.post("/v1/completions")
async def completions(request: Request) -> Any:
    req, route = await body_of(request, CompletionRequest)
    served, triton = route.served, route.backend
    # body_of -> parse_request already refused token-id prompts and lists of more than one prompt
    prompt = req.prompt if isinstance(req.prompt, str) else cast(str, req.prompt[0])
    if not prompt:
        raise APIError(400, "prompt must not be empty", param="prompt", code="invalid_value")
    max_tokens = req.max_tokens if req.max_tokens is not None else COMPLETIONS_DEFAULT_MAX_TOKENS
    limit_max_tokens(served, max_tokens, "max_tokens")
    job = make_job(
        "cmpl", req, prompt, max_tokens, "max_tokens", triton, request_id(request), draft_model=served.draft_model
    )
    renderer = _renderer(request, COMPLETION, served.name, job, echo=prompt if req.echo else "")
    return await run(request, route, job, bool(req.stream), renderer)


@router.post("/v1/chat/completions")
async def chat_completions(request: Request) -> Any:
    req, route = await body_of(request, ChatCompletionRequest)
    served, triton = route.served, route.backend
    text = chat_prompt(served, req)
    max_tokens, param = req.requested_max_tokens()
    if max_tokens is None:
        max_tokens = default_chat_max_tokens(served, text)
    limit_max_tokens(served, max_tokens, param)
    job = make_job(
        "chatcmpl", req, text, max_tokens, param, triton, request_id(request), draft_model=served.draft_model
    )
    return await run(request, route, job, bool(req.stream), _renderer(request, CHAT, served.name, job))
