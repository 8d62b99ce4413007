"""A :class:`Job` streaming through Triton: text deltas with stop strings applied (:class:`Generation`), its
end (:class:`Outcome`: token counts, finish reason) and the client-disconnect watch that cancels it.

``usage``: ``prompt_tokens`` = the engine's ``num_input_tokens`` (the ids it received),
``completion_tokens`` = the sum of its ``num_output_tokens`` (ids generated, counted per response in a stream),
both requested with ``return_num_input_tokens``/``return_num_output_tokens``. ``finish_reason`` is
``stop`` when a stop string matched or the engine ended before ``max_tokens`` (end id, stop word),
``length`` when it generated ``max_tokens``.

A client that disconnects (mid-stream or while waiting for a non-streamed answer) cancels the Triton
request (:func:`watch_disconnect`, :meth:`.backend.GenerationStream.cancel`).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .backend import Chunk, GenerationStream
    from .jobs import Job
    from .served import ServedModel


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


async def _wait_disconnect(receive: Callable[[], Any]) -> None:
    while True:
        message = await receive()
        if message.get("type") == "http.disconnect":
            return


def watch_disconnect(
    receive: Callable[[], Any], stream: GenerationStream, on_disconnect: Callable[[], None] | None = None
) -> asyncio.Future[None]:
    """Watch the ASGI ``receive`` channel; ``stream`` is cancelled (and ``on_disconnect`` called) when the
    client sends ``http.disconnect``.

    Returns the watcher (done once the client went away); cancel it when the answer is complete.
    """
    watcher = asyncio.ensure_future(_wait_disconnect(receive))

    def callback(fut: asyncio.Future[None]) -> None:
        if not fut.cancelled() and fut.exception() is None:
            stream.cancel()
            if on_disconnect is not None:
                on_disconnect()

    watcher.add_done_callback(callback)
    return watcher
