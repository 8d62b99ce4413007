"""What both transports share: the server address, the timeout and the errors for an unreachable server
or a request that did not finish in time."""

from __future__ import annotations

import threading
from typing import Any

from ..errors import ClientError
from .models import ModelInfo, Protocol


def _host_port(url: str) -> str:
    if url.startswith("https://"):
        raise ClientError(
            "TLS endpoints are not supported by this client",
            key="--url",
            hint="give host:port of a plain HTTP or gRPC endpoint",
        )
    for prefix in ("http://", "grpc://"):
        if url.startswith(prefix):
            url = url[len(prefix) :]
    return url.rstrip("/")


class _Connection:
    """State of one client connection, set by :class:`~repo_builder.client.llm.LLMClient`'s constructor."""

    protocol: Protocol
    url: str
    model: str
    timeout_s: float
    _infos: dict[str, ModelInfo]
    _session: Any
    _grpc: Any
    _router: Any
    _lock: threading.Lock

    def _timed_out(self, model: str, rid: str) -> ClientError:
        return ClientError(
            f"model '{model}': no complete response within {self.timeout_s:g} s (request id {rid})",
            key="--timeout",
            hint="raise the timeout, or ask for fewer tokens",
        )

    def _unreachable(self, exc: Exception) -> ClientError:
        return ClientError(
            f"cannot reach tritonserver at {self.url} over {self.protocol}: {exc}",
            key="--url",
            hint="start the server (repo-builder launch REPO) or fix --url/--protocol "
            "(HTTP is port 8000 by default, gRPC 8001)",
        )
