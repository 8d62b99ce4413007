"""Run the OpenAI front end with uvicorn (``repo-builder openai``), optionally until a process exits.

``watch_pid`` (used by ``repo-builder launch --openai_port``): the front end shuts down gracefully when
that process (tritonserver rank 0) is gone, so a detached launch's front end never outlives its server.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import Any

from ..errors import RepoBuilderError
from .served import FrontEndConfig

#: Seconds uvicorn waits for open streams on shutdown before closing them.
GRACEFUL_S = 5


def _pid_alive(pid: int, start_time: int | None) -> bool:
    from ..server import procs

    info = procs.proc_info(pid)
    if info is None or info.state in ("Z", "X"):
        return False
    return start_time is None or info.start_time == start_time


def check_triton(config: FrontEndConfig, timeout_s: float = 10.0, models: list[str] | None = None) -> None:
    """Check, before serving, that Triton answers on ``config.grpc_url`` and serves every model of ``models``
    (default ``config.triton_model``; several LLMs: each one's ``NAME_ensemble`` / ``NAME_tensorrt_llm_bls``).

    Raises:
        RepoBuilderError: unreachable (names ``--grpc-url``) or the model is not ready (names ``--triton-model``).
    """
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import InferenceServerException

    deadline = time.monotonic() + timeout_s
    last = ""
    while True:
        try:
            with grpcclient.InferenceServerClient(config.grpc_url) as client:
                if not client.is_server_live():
                    raise InferenceServerException("server not live")
                for model in models or [config.triton_model]:
                    if not client.is_model_ready(model):
                        raise RepoBuilderError(
                            f"Triton at {config.grpc_url} has no ready model '{model}'",
                            key="--triton-model",
                            hint="serve the ensemble or tensorrt_llm_bls",
                        )
                return
        except InferenceServerException as exc:
            last = exc.message() or str(exc)
        if time.monotonic() >= deadline:
            raise RepoBuilderError(
                f"Triton is not reachable at {config.grpc_url}: {last}",
                key="--grpc-url",
                hint="start it with `repo-builder launch REPO` or pass the right gRPC host:port",
            )
        time.sleep(0.5)


def serve(
    config: FrontEndConfig,
    *,
    host: str,
    port: int,
    log_level: str = "info",
    watch_pid: tuple[int, int | None] | None = None,
    echo: Any = print,
) -> int:
    """Serve until SIGINT/SIGTERM (or until ``watch_pid`` exits); returns the exit code (0 clean, 1 failed start).

    Raises:
        RepoBuilderError: the lock file, tokenizer or Triton check failed (nothing was served).
    """
    import uvicorn

    from .app import create_app

    app = create_app(config)
    routes = app.state.routes
    check_triton(config, models=[r.backend.model for r in routes.values()])
    server = uvicorn.Server(
        uvicorn.Config(
            app,
            host=host,
            port=port,
            log_level=log_level,
            access_log=False,
            lifespan="on",
            timeout_graceful_shutdown=GRACEFUL_S,
        )
    )
    if watch_pid is not None:
        pid, start = watch_pid

        def watch() -> None:
            while not server.should_exit:
                if not _pid_alive(pid, start):
                    echo(f"openai: process {pid} (tritonserver) exited; shutting down")
                    server.should_exit = True
                    return
                time.sleep(0.5)

        threading.Thread(target=watch, daemon=True, name="watch-pid").start()
    served = ", ".join(f"'{name}' ({r.backend.model})" for name, r in routes.items())
    echo(
        f"openai: serving model {served} from Triton {config.grpc_url} on "
        f"http://{host}:{port}/v1" + (" (API key required)" if config.api_key else "")
    )
    sys.stdout.flush()
    server.run()
    return 0 if server.started else 1


__all__ = ["check_triton", "serve", "os"]
