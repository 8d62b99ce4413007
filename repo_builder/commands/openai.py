"""``repo-builder openai``: argument parsing only (logic in repo_builder.openai).

fastapi, uvicorn and transformers are imported inside the command, so ``repo-builder --help`` stays fast.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import typer

from ..cli import app, report_errors
from ..cli_options import REQUIRED, command, forward, option
from ..openai import API_KEY_ENV
from ..server.options import DEFAULTS, PORT_MAX, PORT_MIN


@dataclass(frozen=True, kw_only=True)
class OpenAIArgs:
    """``repo-builder openai`` options (those of :class:`repo_builder.openai.served.FrontEndConfig` under its
    field names, and where to listen)."""

    repo: Path = option(
        REQUIRED,
        "--repo",
        help="The rendered repository Triton serves (its lock file names the "
        "model, the tokenizer and the engine limits).",
    )
    grpc_url: str = option(
        f"localhost:{DEFAULTS['grpc_port']}", "--grpc-url", help="Triton's gRPC endpoint, HOST:PORT."
    )
    port: int = option(
        9000, "--port", ge=PORT_MIN, le=PORT_MAX, show_range=True, help="Port of the OpenAI-compatible HTTP API."
    )
    host: str = option("127.0.0.1", "--host", help="Address to bind (0.0.0.0 = every interface).")
    served_model_name: str | None = option(
        None,
        "--served-model-name",
        help="Model id clients send. Default: the engine directory's name from the "
        "lock file. Single-LLM repositories only (several LLMs are served "
        "under their render --model names).",
    )
    api_key: str | None = option(
        None,
        "--api-key",
        help=f"Require 'Authorization: Bearer KEY' on /v1 requests (401 otherwise). Default: "
        f"${API_KEY_ENV}; unset = no key.",
    )
    triton_model: str = option(
        "ensemble", "--triton-model", help="Triton model to send requests to: ensemble or tensorrt_llm_bls."
    )
    tokenizer_dir: Path | None = option(
        None, "--tokenizer-dir", help="Tokenizer directory for chat templates. Default: the lock file's."
    )
    log_level: str = option("warning", "--log-level", help="uvicorn log level (debug, info, warning, error).")
    watch_pid: str | None = option(
        None, "--watch-pid", hidden=True, help="PID[:START]: shut down when that process exits (used by launch)."
    )
    launch_id: str | None = option(
        None, "--launch-id", hidden=True, help="The launch this front end belongs to (marks its command line)."
    )


@command(OpenAIArgs)
def openai(args: OpenAIArgs) -> None:
    """Serve an OpenAI-compatible API (/v1/models, /v1/completions, /v1/chat/completions, /health) in front of
    a running Triton that serves REPO."""
    from ..errors import RepoBuilderError

    try:
        import fastapi  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as exc:
        raise RepoBuilderError(
            f"the OpenAI front end needs {exc.name}, which is not installed", hint="pip install 'repo-builder[openai]'"
        ) from None
    from ..openai.serve import serve
    from ..openai.served import FrontEndConfig

    watch = None
    if args.watch_pid:
        pid, _, start = args.watch_pid.partition(":")
        watch = (int(pid), int(start) if start else None)
    key = args.api_key if args.api_key is not None else (os.environ.get(API_KEY_ENV) or None)
    config = forward(FrontEndConfig, args, api_key=key)
    code = serve(config, host=args.host, port=args.port, log_level=args.log_level, watch_pid=watch, echo=typer.echo)
    raise typer.Exit(code)


app.command("openai")(report_errors(openai))
