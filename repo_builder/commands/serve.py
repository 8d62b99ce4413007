"""``repo-builder launch`` and ``repo-builder stop``: argument parsing only (logic in repo_builder.server.run).

Flag names follow NVIDIA's ``launch_triton_server.py`` (``--world_size``, ``--model_repo``, ``--http_port``, ...);
the dashed spellings are accepted too. Help texts come from :class:`repo_builder.server.config.LaunchConfig`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import typer

from ..cli import app, report_errors
from ..cli_options import Opt, command, option


def _help(field: str) -> str:
    from ..server.options import HELP

    return HELP[field]


def _opt(field: str, **overrides: object) -> Any:
    """The ``typer.Option`` of launch option ``field`` (:data:`repo_builder.server.options.LAUNCH_OPTIONS`)."""
    from ..server.options import launch_option

    return launch_option(field, **overrides)


def _launch_fields() -> frozenset[str]:
    """The launch options with a default (``DEFAULTS``' keys): LaunchConfig fields and ``launch`` parameters both."""
    from ..server.options import DEFAULTS

    return frozenset(DEFAULTS)


def _default(field: str) -> object:
    from ..server.options import DEFAULTS

    defaults: Mapping[str, object] = DEFAULTS
    return defaults[field]


#: The ``launch`` options that are not :data:`repo_builder.server.options.LAUNCH_OPTIONS` (not LaunchConfig fields).
_LAUNCH_ONLY = {
    "repo": Opt(None, help="Model repository (same as --model_repo).", argument=True, show_default=False),
    "quiet": Opt(False, ("--quiet", "-q"), help="Foreground: do not copy the server log to stdout."),
    "dry_run": Opt(False, ("--dry-run",), help="Run the preflight checks and print the command; start nothing."),
}


def launch(
    repo: Path | None = _LAUNCH_ONLY["repo"].typer(),
    model_repo: Path | None = _opt("model_repo", default=None),
    world_size: int | None = _opt("world_size"),
    tritonserver: str | None = _opt("tritonserver"),
    http_port: int = _opt("http_port"),
    grpc_port: int = _opt("grpc_port"),
    metrics_port: int = _opt("metrics_port"),
    http_address: str = _opt("http_address"),
    log: bool = _opt("log"),
    log_file: Path | None = _opt("log_file"),
    force: bool = _opt("force"),
    multi_model: bool = _opt("multi_model"),
    no_mpi: bool = _opt("no_mpi"),
    oversubscribe: bool = _opt("oversubscribe"),
    trtllm_llmapi_launch: bool = _opt("trtllm_llmapi_launch"),
    tensorrt_llm_model_name: str | None = _opt("tensorrt_llm_model_name"),
    detach: bool = _opt("detach"),
    pid_file: Path | None = _opt("pid_file"),
    timeout: float = _opt("timeout"),
    stop_timeout: float = _opt("stop_timeout"),
    exit_timeout: int = _opt("exit_timeout"),
    server_arg: list[str] | None = _opt(
        "server_args",
        default=None,
        help=_help("server_args") + " Repeat for several, e.g. --server-arg=--log-info=false.",
    ),
    hostfile: Path | None = _opt("hostfile"),
    openai_port: int | None = _opt("openai_port"),
    unload_timeout: float = _opt("unload_timeout"),
    histogram_latencies: bool = _opt("histogram_latencies"),
    quiet: bool = _LAUNCH_ONLY["quiet"].typer(),
    dry_run: bool = _LAUNCH_ONLY["dry_run"].typer(),
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


@dataclass(frozen=True, kw_only=True)
class StopArgs:
    """``repo-builder stop`` options (``timeout`` is launch's ``--stop-timeout``)."""

    repo: Path | None = option(
        None,
        help="Repository a detached launch serves (its default pid file).",
        argument=True,
        show_default=False,
    )
    pid_file: Path | None = option(
        None, "--pid-file", "--pid_file", help="Pid file written by `repo-builder launch --detach`."
    )
    timeout: float = option(_default("stop_timeout"), "--timeout", help=_help("stop_timeout"))


@command(StopArgs)
def stop(args: StopArgs) -> None:
    """Stop a server started with `repo-builder launch --detach`: SIGTERM to every rank, SIGKILL after --timeout,
    then remove its /dev/shm regions and the pid file."""
    from ..server.run import stop as run_stop

    raise typer.Exit(run_stop(pid_file=args.pid_file, model_repo=args.repo, timeout=args.timeout, echo=typer.echo))


app.command("launch")(report_errors(launch))
app.command("stop")(report_errors(stop))
