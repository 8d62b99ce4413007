"""Answer bodies and Server-Sent Events of ``/v1/completions`` and ``/v1/chat/completions``.

One :class:`Renderer` builds both endpoints' answers; what differs between them is data, an
:class:`ObjectKind` (:data:`COMPLETION`, :data:`CHAT`): the ``object`` names, where the text goes in a
choice (``text`` / ``message``, ``delta``) and the chunk that opens a chat stream (the assistant role).
A stream is ``data: {chunk}`` events, one per text delta, then a chunk with the ``finish_reason``, then
(``stream_options.include_usage``) a chunk with ``usage`` and no choices, then ``data: [DONE]`` (OpenAI's
API reference, "The chat completion chunk object"). Delta chunks are assembled from pre-encoded bytes
around ``json.dumps(text)``: one JSON encode per token.

:class:`SSEResponse` sends them and cancels the Triton request when the client goes away.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from starlette.responses import JSONResponse
from starlette.responses import Response as _Response

from .backend import BackendError
from .protocol import APIError

if TYPE_CHECKING:
    from .backend import GenerationStream
    from .generation import Generation, Outcome
    from .jobs import Job
    from .metrics import FrontEndMetrics

DONE = b"data: [DONE]\n\n"


def error_response(err: APIError) -> JSONResponse:
    """The JSON response of ``err`` (its status; ``WWW-Authenticate: Bearer`` with a 401)."""
    headers = {"WWW-Authenticate": "Bearer"} if err.status == 401 else None
    return JSONResponse(err.body(), status_code=err.status, headers=headers)


def sse(payload: dict[str, Any]) -> bytes:
    """One ``data:`` event holding ``payload`` as compact JSON."""
    return b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n"


@dataclass(frozen=True)
class ObjectKind:
    """What differs between the answers of one endpoint and another's.

    Attributes:
        object: ``object`` of a whole answer.
        chunk_object: ``object`` of a stream chunk.
        choice: the choice's fields that carry ``text`` in a whole answer.
        delta_open, delta_close: stream: the bytes before and after a delta's JSON string in a choice.
        final_delta: stream: what the last choice (the one with the ``finish_reason``) holds instead of text.
        opening: stream: a choice's content sent before any text (chat: the assistant role), or None.
    """

    object: str
    chunk_object: str
    choice: Callable[[str], dict[str, Any]]
    delta_open: bytes
    delta_close: bytes
    final_delta: bytes
    opening: bytes | None = None


#: ``/v1/completions``: ``text_completion`` objects, the text in ``choices[0].text``.
COMPLETION = ObjectKind(
    object="text_completion",
    chunk_object="text_completion",
    choice=lambda text: {"text": text},
    delta_open=b'"text":',
    delta_close=b"",
    final_delta=b'"text":""',
)
#: ``/v1/chat/completions``: ``chat.completion`` / ``chat.completion.chunk``, the text in ``message`` / ``delta``.
CHAT = ObjectKind(
    object="chat.completion",
    chunk_object="chat.completion.chunk",
    choice=lambda text: {"message": {"role": "assistant", "content": text, "refusal": None}},
    delta_open=b'"delta":{"content":',
    delta_close=b"}",
    final_delta=b'"delta":{}',
    opening=b'"delta":{"role":"assistant","content":""}',
)


class Renderer:
    """The answer to one request of ``kind``: the whole body (call it) or its stream (:meth:`stream`).

    ``echo``: text that goes before the generated text (``/v1/completions`` with ``echo``: the prompt).
    ``metrics``: where the answer's completion tokens and (streams) TTFT and inter-token gaps are counted,
    TTFT from ``arrival`` (``time.perf_counter()`` when the request arrived); None: not counted.
    """

    def __init__(
        self,
        kind: ObjectKind,
        model: str,
        job: Job,
        echo: str = "",
        *,
        metrics: FrontEndMetrics | None = None,
        arrival: float | None = None,
    ) -> None:
        self.kind, self.model, self.job, self.echo = kind, model, job, echo
        self.metrics, self.arrival = metrics, arrival
        self.created = int(time.time())

    def _count_tokens(self, outcome: Outcome) -> None:
        if self.metrics is not None:
            self.metrics.inc("repo_builder_openai_output_tokens_total", self.model, n=outcome.completion_tokens)

    def __call__(self, text: str, outcome: Outcome) -> dict[str, Any]:
        self._count_tokens(outcome)
        return {
            "id": self.job.rid,
            "object": self.kind.object,
            "created": self.created,
            "model": self.model,
            "choices": [
                {
                    "index": 0,
                    **self.kind.choice(self.echo + text),
                    "logprobs": None,
                    "finish_reason": outcome.finish_reason,
                }
            ],
            "usage": outcome.usage(),
        }

    async def stream(self, gen: Generation, job: Job) -> AsyncIterator[bytes]:
        kind = self.kind
        usage = job.req.wants_usage_chunk()
        head = json.dumps(
            {"id": job.rid, "object": kind.chunk_object, "created": self.created, "model": self.model},
            separators=(",", ":"),
        )[:-1].encode()
        usage_null = b',"usage":null' if usage else b""
        start = b"data: " + head + b',"choices":[{"index":0,'
        tail = b',"logprobs":null,"finish_reason":null}]' + usage_null + b"}\n\n"
        prefix, suffix = start + kind.delta_open, kind.delta_close + tail
        if kind.opening is not None:
            yield start + kind.opening + tail
        if self.echo:
            yield prefix + json.dumps(self.echo).encode() + suffix
        if self.metrics is None:
            async for text in gen.deltas():
                yield prefix + json.dumps(text).encode() + suffix
        else:
            from .metrics import StreamTimer

            delta = StreamTimer(self.metrics, self.model, self.arrival).delta
            async for text in gen.deltas():
                delta()
                yield prefix + json.dumps(text).encode() + suffix
        outcome = gen.outcome()
        self._count_tokens(outcome)
        finish = b',"logprobs":null,"finish_reason":"' + outcome.finish_reason.encode() + b'"}]'
        yield start + kind.final_delta + finish + usage_null + b"}\n\n"
        if usage:
            yield b"data: " + head + b',"choices":[],"usage":' + json.dumps(outcome.usage()).encode() + b"}\n\n"
        yield DONE


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
                await send({"type": "http.response.body", "body": sse(err.body()) + DONE, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        except OSError:  # the client went away while we wrote
            self.stream.cancel()
        finally:
            self.watcher.cancel()
            await chunks.aclose()  # type: ignore[attr-defined]
