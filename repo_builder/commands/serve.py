"""``repo-builder launch`` and ``repo-builder stop``: argument parsing only (logic in repo_builder.server.run).

Flag names follow NVIDIA's ``launch_triton_server.py`` (``--world_size``, ``--model_repo``, ``--http_port``, ...);
the dashed spellings are accepted too. Help texts come from :class:`repo_builder.server.config.LaunchConfig`.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import typer

from ..cli import app, report_errors


def _help(field: str) -> str:
    from ..server.options import HELP

    return HELP[field]


def _launch_fields() -> frozenset[str]:
    """The launch options with a default (``DEFAULTS``' keys): LaunchConfig fields and ``launch`` parameters both."""
    from ..server.options import DEFAULTS

    return frozenset(DEFAULTS)


def _default(field: str) -> object:
    from ..server.options import DEFAULTS

    defaults: Mapping[str, object] = DEFAULTS
    return defaults[field]


def launch(
    repo: Path | None = typer.Argument(None, help="Model repository (same as --model_repo).", show_default=False),
    model_repo: Path | None = typer.Option(None, "--model_repo", "--model-repo", help=_help("model_repo")),
    world_size: int | None = typer.Option(
        _default("world_size"), "--world_size", "--world-size", help=_help("world_size")
    ),
    tritonserver: str | None = typer.Option(_default("tritonserver"), "--tritonserver", help=_help("tritonserver")),
    http_port: int = typer.Option(_default("http_port"), "--http_port", "--http-port", help=_help("http_port")),
    grpc_port: int = typer.Option(_default("grpc_port"), "--grpc_port", "--grpc-port", help=_help("grpc_port")),
    metrics_port: int = typer.Option(
        _default("metrics_port"), "--metrics_port", "--metrics-port", help=_help("metrics_port")
    ),
    http_address: str = typer.Option(
        _default("http_address"), "--http-address", "--http_address", help=_help("http_address")
    ),
    log: bool = typer.Option(_default("log"), "--log", help=_help("log")),
    log_file: Path | None = typer.Option(_default("log_file"), "--log-file", "--log_file", help=_help("log_file")),
    force: bool = typer.Option(_default("force"), "--force", "-f", help=_help("force")),
    multi_model: bool = typer.Option(
        _default("multi_model"), "--multi-model", "--multi_model", help=_help("multi_model")
    ),
    no_mpi: bool = typer.Option(_default("no_mpi"), "--no-mpi", "--no_mpi", help=_help("no_mpi")),
    oversubscribe: bool = typer.Option(_default("oversubscribe"), "--oversubscribe", help=_help("oversubscribe")),
    trtllm_llmapi_launch: bool = typer.Option(
        _default("trtllm_llmapi_launch"),
        "--trtllm_llmapi_launch",
        "--trtllm-llmapi-launch",
        help=_help("trtllm_llmapi_launch"),
    ),
    tensorrt_llm_model_name: str | None = typer.Option(
        _default("tensorrt_llm_model_name"),
        "--tensorrt_llm_model_name",
        "--tensorrt-llm-model-name",
        help=_help("tensorrt_llm_model_name"),
    ),
    detach: bool = typer.Option(_default("detach"), "--detach", "-d", help=_help("detach")),
    pid_file: Path | None = typer.Option(_default("pid_file"), "--pid-file", "--pid_file", help=_help("pid_file")),
    timeout: float = typer.Option(_default("timeout"), "--timeout", help=_help("timeout")),
    stop_timeout: float = typer.Option(_default("stop_timeout"), "--stop-timeout", help=_help("stop_timeout")),
    exit_timeout: int = typer.Option(
        _default("exit_timeout"), "--exit_timeout", "--exit-timeout", help=_help("exit_timeout")
    ),
    server_arg: list[str] | None = typer.Option(
        None, "--server-arg", help=_help("server_args") + " Repeat for several, e.g. --server-arg=--log-info=false."
    ),
    hostfile: Path | None = typer.Option(_default("hostfile"), "--hostfile", help=_help("hostfile")),
    openai_port: int | None = typer.Option(
        _default("openai_port"), "--openai_port", "--openai-port", help=_help("openai_port")
    ),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Foreground: do not copy the server log to stdout."),
    dry_run: bool = typer.Option(
        False, "--dry-run", help="Run the preflight checks and print the command; start nothing."
    ),
) -> None:
    """Start tritonserver on a model repository (mpirun ranks for world size > 1) and wait until every model is READY.

    Stays in the foreground unless --detach is given: SIGINT/SIGTERM stop the server (in-flight requests get
    --exit-timeout seconds) and the exit code is 128 + the signal (130, 143); a model process that dies stops
    the server with exit code 1; otherwise the exit code is the server's.
    """
    options = dict(locals())
    from pydantic import ValidationError as PydanticValidationError

    from ..errors import LaunchError, field_problems
    from ..server.config import LaunchConfig
    from ..server.run import launch as run_launch

    if repo is not None and model_repo is not None and repo != model_repo:
        raise LaunchError(
            f"two repositories given: {repo} and --model_repo {model_repo}", key="--model_repo", hint="give one"
        )
    chosen = model_repo or repo
    if chosen is None:
        raise LaunchError("no model repository given", key="--model_repo", hint="repo-builder launch REPO")
    try:
        # every LaunchConfig field is a parameter of this function under its own name (DEFAULTS lists them);
        # tensorrt_llm_model_name stays a comma list: LaunchConfig's before-validator splits it
        config = LaunchConfig(
            **{name: value for name, value in options.items() if name in _launch_fields()},
            model_repo=chosen,
            server_args=list(server_arg or []),
        )
    except PydanticValidationError as exc:
        first = field_problems(exc)[0]
        field = first.loc[0] if first.loc else "option"
        raise LaunchError(f"{first.message} (got {first.input!r})", key=f"--{field}") from None
    code = run_launch(config, echo=typer.echo, follow_log=not quiet, dry_run=dry_run)
    raise typer.Exit(code)


def stop(
    repo: Path | None = typer.Argument(
        None, help="Repository a detached launch serves (its default pid file).", show_default=False
    ),
    pid_file: Path | None = typer.Option(
        None, "--pid-file", "--pid_file", help="Pid file written by `repo-builder launch --detach`."
    ),
    timeout: float = typer.Option(_default("stop_timeout"), "--timeout", help=_help("stop_timeout")),
) -> None:
    """Stop a server started with `repo-builder launch --detach`: SIGTERM to every rank, SIGKILL after --timeout,
    then remove its /dev/shm regions and the pid file."""
    from ..server.run import stop as run_stop

    raise typer.Exit(run_stop(pid_file=pid_file, model_repo=repo, timeout=timeout, echo=typer.echo))


app.command("launch")(report_errors(launch))
app.command("stop")(report_errors(stop))
