"""Help text and defaults of every launch option, shared by :class:`~repo_builder.server.config.LaunchConfig`
and the CLI.

Kept free of heavy imports (only ``typing`` and ``pathlib``) so ``repo-builder --help`` does not pay for pydantic.
"""

from pathlib import Path
from typing import TypedDict


class LaunchDefaults(TypedDict):
    """Types of :data:`DEFAULTS` (as :class:`~repo_builder.server.config.LaunchConfig` declares them)."""

    world_size: int | None
    tritonserver: str | None
    http_port: int
    grpc_port: int
    metrics_port: int
    http_address: str
    log: bool
    log_file: Path | None
    force: bool
    multi_model: bool
    no_mpi: bool
    oversubscribe: bool
    trtllm_llmapi_launch: bool
    tensorrt_llm_model_name: list[str] | None
    detach: bool
    pid_file: Path | None
    timeout: float
    stop_timeout: float
    exit_timeout: int
    hostfile: Path | None
    openai_port: int | None


#: The default of every launch option but ``model_repo`` (required) and ``server_args`` (empty list): the one
#: home read by :class:`~repo_builder.server.config.LaunchConfig`, by the CLI's ``typer.Option`` declarations of
#: ``repo-builder launch`` / ``stop`` (so ``--help`` shows them) and by ``deploy``'s help texts.
DEFAULTS: LaunchDefaults = {
    "world_size": None,
    "tritonserver": None,
    "http_port": 8000,
    "grpc_port": 8001,
    "metrics_port": 8002,
    "http_address": "127.0.0.1",
    "log": False,
    "log_file": None,
    "force": False,
    "multi_model": False,
    "no_mpi": False,
    "oversubscribe": False,
    "trtllm_llmapi_launch": False,
    "tensorrt_llm_model_name": None,
    "detach": False,
    "pid_file": None,
    "timeout": 600.0,
    "stop_timeout": 30.0,
    "exit_timeout": 5,
    "hostfile": None,
    "openai_port": None,
}

HELP: dict[str, str] = {
    "model_repo": "Model repository to serve (the folder holding <model>/config.pbtxt).",
    "world_size": "Number of tritonserver MPI ranks (tensor x pipeline parallel size). Default: the repository's "
    "lock file (launch.world_size), then 1. A value that contradicts the lock file is refused.",
    "tritonserver": "tritonserver binary. Default: $TRITONSERVER, /opt/tritonserver/bin/tritonserver, then the one "
    "nvidia-pytriton installs.",
    "http_port": "HTTP port of rank 0.",
    "grpc_port": "gRPC port of rank 0.",
    "metrics_port": "Metrics port of rank 0.",
    "http_address": "Address rank 0 binds its HTTP, gRPC and metrics endpoints to (0.0.0.0 = every interface).",
    "log": "Verbose server log (--log-verbose=3 on rank 0).",
    "log_file": "File that receives the output of every rank. Default: a new file under <tmp>/repo-builder/logs "
    "(its path is printed).",
    "force": "Start even if another tritonserver already serves this repository.",
    "multi_model": "TensorRT-LLM orchestrator mode (sets TRTLLM_ORCHESTRATOR=1); needs world size 1.",
    "no_mpi": "Run one tritonserver process without mpirun (world size must be 1).",
    "oversubscribe": "Pass --oversubscribe to mpirun (added automatically when there are more ranks than CPU cores).",
    "trtllm_llmapi_launch": "Prefix every rank's command with TensorRT-LLM's trtllm-llmapi-launch (llmapi repositories "
    "in an MPI world; launch_triton_server.py's flag of the same name). It must be on PATH.",
    "tensorrt_llm_model_name": "Comma-separated TensorRT-LLM model name(s) that ranks > 0 load. Default: the lock "
    "file's launch.tensorrt_llm_model_names, then tensorrt_llm.",
    "detach": "Return once the server is ready and leave it running; write a pid file that `repo-builder stop` uses.",
    "pid_file": "Pid file written by --detach (a copy always goes to <tmp>/repo-builder/run, keyed by the "
    "repository path, so `repo-builder stop REPO` finds it).",
    "timeout": "Seconds to wait for the server and every model to be ready.",
    "stop_timeout": "Seconds to wait for a graceful stop before SIGKILL.",
    "exit_timeout": "Seconds tritonserver lets in-flight requests finish after a stop was asked for "
    "(--exit-timeout-secs; tritonserver's own default is 30). Streams still running then get an "
    "error and the server exits.",
    "server_args": "Extra arguments appended to every rank's tritonserver command.",
    "hostfile": "Open MPI hostfile ('HOST slots=N' per line) spreading the ranks over hosts with --map-by slot: "
    "ranks fill the first host's slots, then the next host's. Rank 0 (the endpoints) runs on the first "
    "host, which must be this machine. --dry-run prints the rank -> host mapping. Reach remote hosts "
    "with Open MPI's own means (ssh by default; OMPI_MCA_plm_rsh_agent for another agent).",
    "openai_port": "Also serve an OpenAI-compatible API on this port (`repo-builder openai`, started once the "
    "server is ready, stopped with it; needs the openai extra). Default: off.",
}
