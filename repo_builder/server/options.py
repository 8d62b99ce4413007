"""Every launch option declared once (:data:`LAUNCH_OPTIONS`: default, flags, help and bounds), read by
:class:`~repo_builder.server.config.LaunchConfig` (its pydantic fields), by the CLI's ``repo-builder launch`` /
``stop`` parameters (built from the same entries, so ``--help`` shows them) and by ``deploy``'s help texts.

Kept free of heavy imports (only :mod:`repo_builder.cli_options`, ``typing`` and ``pathlib``) so
``repo-builder --help`` does not pay for pydantic.
"""

import math
from typing import Any

from ..cli_options import REQUIRED, Opt

#: The range of a TCP port number: every port option and every port a deploy command checks.
PORT_MIN, PORT_MAX = 1, 65535

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
    "unload_timeout": "Seconds a stop waits for the models to unload once no request is in flight any more, "
    "counted apart from --exit-timeout (tritonserver gets --exit-timeout-secs = their sum, since it counts both "
    "against one timer). Models still unloading then are killed; the stop says how long it waited for each.",
    "server_args": "Extra arguments appended to every rank's tritonserver command.",
    "hostfile": "Open MPI hostfile ('HOST slots=N' per line) spreading the ranks over hosts with --map-by slot: "
    "ranks fill the first host's slots, then the next host's. Rank 0 (the endpoints) runs on the first "
    "host, which must be this machine. --dry-run prints the rank -> host mapping. Reach remote hosts "
    "with Open MPI's own means (ssh by default; OMPI_MCA_plm_rsh_agent for another agent).",
    "openai_port": "Also serve an OpenAI-compatible API on this port (`repo-builder openai`, started once the "
    "server is ready, stopped with it; needs the openai extra). Default: off.",
    "histogram_latencies": "Export Triton's latency distributions on rank 0's metrics endpoint: "
    "--metrics-config=histogram_latencies=true (tritonserver 2.52+: nv_inference_first_response_histogram_ms, "
    "the time to a decoupled model's first response) and summary_latencies=true (2.51+: "
    "nv_inference_request_summary_us and the queue/compute summaries, with quantiles; 2.51 has no "
    "histograms). Default: off, as in tritonserver.",
}

#: One entry per :class:`~repo_builder.server.config.LaunchConfig` field. Flag names follow NVIDIA's
#: ``launch_triton_server.py`` (``--world_size``, ``--model_repo``, ...); the dashed spellings are accepted too.
LAUNCH_OPTIONS: dict[str, Opt] = {
    "model_repo": Opt(default=REQUIRED, flags=("--model_repo", "--model-repo"), help=HELP["model_repo"]),
    "world_size": Opt(default=None, flags=("--world_size", "--world-size"), help=HELP["world_size"], ge=1),
    "tritonserver": Opt(default=None, flags=("--tritonserver",), help=HELP["tritonserver"]),
    "http_port": Opt(
        default=8000, flags=("--http_port", "--http-port"), help=HELP["http_port"], ge=PORT_MIN, le=PORT_MAX
    ),
    "grpc_port": Opt(
        default=8001, flags=("--grpc_port", "--grpc-port"), help=HELP["grpc_port"], ge=PORT_MIN, le=PORT_MAX
    ),
    "metrics_port": Opt(
        default=8002, flags=("--metrics_port", "--metrics-port"), help=HELP["metrics_port"], ge=PORT_MIN, le=PORT_MAX
    ),
    "http_address": Opt(default="127.0.0.1", flags=("--http-address", "--http_address"), help=HELP["http_address"]),
    "log": Opt(default=False, flags=("--log",), help=HELP["log"]),
    "log_file": Opt(default=None, flags=("--log-file", "--log_file"), help=HELP["log_file"]),
    "force": Opt(default=False, flags=("--force", "-f"), help=HELP["force"]),
    "multi_model": Opt(default=False, flags=("--multi-model", "--multi_model"), help=HELP["multi_model"]),
    "no_mpi": Opt(default=False, flags=("--no-mpi", "--no_mpi"), help=HELP["no_mpi"]),
    "oversubscribe": Opt(default=False, flags=("--oversubscribe",), help=HELP["oversubscribe"]),
    "trtllm_llmapi_launch": Opt(
        default=False,
        flags=("--trtllm_llmapi_launch", "--trtllm-llmapi-launch"),
        help=HELP["trtllm_llmapi_launch"],
    ),
    "tensorrt_llm_model_name": Opt(
        default=None,
        flags=("--tensorrt_llm_model_name", "--tensorrt-llm-model-name"),
        help=HELP["tensorrt_llm_model_name"],
    ),
    "detach": Opt(default=False, flags=("--detach", "-d"), help=HELP["detach"]),
    "pid_file": Opt(default=None, flags=("--pid-file", "--pid_file"), help=HELP["pid_file"]),
    "timeout": Opt(default=600.0, flags=("--timeout",), help=HELP["timeout"], gt=0),
    "stop_timeout": Opt(default=30.0, flags=("--stop-timeout",), help=HELP["stop_timeout"], gt=0),
    "exit_timeout": Opt(default=5, flags=("--exit_timeout", "--exit-timeout"), help=HELP["exit_timeout"], ge=0),
    "server_args": Opt(default_factory=list, flags=("--server-arg",), help=HELP["server_args"]),
    "hostfile": Opt(default=None, flags=("--hostfile",), help=HELP["hostfile"]),
    "openai_port": Opt(
        default=None, flags=("--openai_port", "--openai-port"), help=HELP["openai_port"], ge=PORT_MIN, le=PORT_MAX
    ),
    "unload_timeout": Opt(
        default=20.0, flags=("--unload-timeout", "--unload_timeout"), help=HELP["unload_timeout"], gt=0
    ),
    "histogram_latencies": Opt(
        default=False, flags=("--histogram-latencies", "--histogram_latencies"), help=HELP["histogram_latencies"]
    ),
}


def launch_option(field: str, **overrides: Any) -> Any:
    """The ``typer.Option`` of launch option ``field`` (:data:`LAUNCH_OPTIONS`), for ``launch`` and for the
    deploy generators that pass the same setting on (``overrides``: :meth:`Opt.typer`'s)."""
    return LAUNCH_OPTIONS[field].typer(**overrides)


def server_exit_timeout(exit_timeout: float, unload_timeout: float) -> int:
    """tritonserver's ``--exit-timeout-secs`` for ``--exit-timeout`` and ``--unload-timeout`` (seconds):
    their sum, rounded up, since tritonserver 2.51 counts in-flight requests and model unloads against one
    timer (core r24.10 ``server.cc`` ``InferenceServer::Stop``)."""
    return int(math.ceil(exit_timeout) + math.ceil(unload_timeout))


#: The default of every launch option but ``model_repo`` (required) and ``server_args`` (empty list).
DEFAULTS: dict[str, Any] = {
    name: spec.default for name, spec in LAUNCH_OPTIONS.items() if name not in ("model_repo", "server_args")
}
