"""The tritonserver command line of every rank and the mpirun command around them.

Layout (upstream-reference.md §4, feasibility.md §8): rank 0 loads the whole repository and serves HTTP,
gRPC and metrics; ranks > 0 load only the TensorRT-LLM model(s) (``--model-control-mode=explicit
--load-model=NAME``) and open no endpoint. Every rank gets ``--disable-auto-complete-config`` and its own
``--backend-config=python,shm-region-prefix-name=<prefix>`` so the Python backend's ``/dev/shm`` regions
never collide and the launcher can remove exactly its own. Unlike upstream, port flags appear once and the
mpirun command has no trailing ``:``.
"""

from __future__ import annotations

from pathlib import Path

MPIRUN = "mpirun"
#: tritonserver's ``--metrics-config`` settings of ``launch --histogram-latencies`` (both off by default):
#: latency histograms (core r24.11+, i.e. tritonserver 2.52+: ``nv_inference_first_response_histogram_ms``; core
#: ``src/metrics.cc``) and latency summaries with quantiles (2.51 has these, ``nv_inference_*_summary_us``; core
#: r24.10 ``metric_model_reporter.cc``). tritonserver 2.51 takes the unknown histogram setting and ignores it,
#: so the summaries are the latency distributions it can export.
LATENCY_DISTRIBUTIONS = ("histogram_latencies=true", "summary_latencies=true")
#: TensorRT-LLM's wrapper for LLM-API servers in an MPI or Slurm world (NVIDIA/TensorRT-LLM v1.2.1
#: ``tensorrt_llm/llmapi/trtllm-llmapi-launch``, on PATH in the TRT-LLM containers): on rank 0 it runs the command
#: with the MPI/PMI/Slurm environment removed and ``TLLM_SPAWN_PROXY_PROCESS=1``, so the LLM reaches the other
#: ranks through a proxy; every other rank becomes a worker of that LLM and does not run the command. Plain
#: ``tritonserver`` under srun fails with ``MPI_ERR_SPAWN`` (triton-inference-server/tutorials Qwen2.5-VL guide).
LLMAPI_LAUNCH = "trtllm-llmapi-launch"


def llmapi_launch_argvs(rank0: list[str], world_size: int) -> list[list[str]]:
    """Every rank's argv of an llmapi repository in an MPI/Slurm world: ``trtllm-llmapi-launch`` followed by
    rank 0's tritonserver argv, the same on every rank (the wrapper picks leader and workers; TensorRT-LLM's
    backend docs ``docs/llmapi.md``: ``srun ... trtllm-llmapi-launch tritonserver --model-repository ...``)."""
    return [[LLMAPI_LAUNCH, *rank0] for _ in range(world_size)]


def shm_prefix(launch_id: str, rank: int) -> str:
    """The ``shm-region-prefix-name`` of ``rank``: ``<launch_id>_r<rank>_`` (``r1_`` is no prefix of ``r10_``)."""
    return f"{launch_id}_r{rank}_"


def rank_argv(
    *,
    binary: Path | str,
    backend_args: list[str],
    model_repo: Path | str,
    rank: int,
    launch_id: str,
    http_address: str,
    http_port: int,
    grpc_port: int,
    metrics_port: int,
    trtllm_models: list[str],
    verbose: bool = False,
    extra_args: list[str] | None = None,
    exit_timeout: int | None = None,
    histogram_latencies: bool = False,
) -> list[str]:
    """argv of one tritonserver rank.

    Args:
        binary: the tritonserver executable.
        backend_args: arguments the binary needs (``--backend-directory=...``, from ``TritonBinary.server_args``).
        rank: 0 serves every model and the endpoints; > 0 loads only ``trtllm_models`` with endpoints off.
        launch_id: unique per launch; the rank's shm prefix is derived from it (:func:`shm_prefix`).
        verbose: ``--log-verbose=3`` (rank 0 only, as upstream's ``--log``).
        exit_timeout: ``--exit-timeout-secs`` (seconds in-flight requests get after SIGTERM; tritonserver 2.51
            defaults to 30), unless ``extra_args`` already sets it.
        histogram_latencies: rank 0 exports Triton's latency distributions (:data:`LATENCY_DISTRIBUTIONS`).
    """
    argv = [
        str(binary),
        f"--model-repository={model_repo}",
        *backend_args,
        "--disable-auto-complete-config",
        f"--backend-config=python,shm-region-prefix-name={shm_prefix(launch_id, rank)}",
    ]
    if rank == 0:
        argv += [
            f"--http-address={http_address}",
            f"--http-port={http_port}",
            f"--grpc-address={http_address}",
            f"--grpc-port={grpc_port}",
            f"--metrics-address={http_address}",
            f"--metrics-port={metrics_port}",
        ]
        if verbose:
            argv.append("--log-verbose=3")
        if histogram_latencies:
            argv += [f"--metrics-config={setting}" for setting in LATENCY_DISTRIBUTIONS]
    else:
        argv += [
            "--model-control-mode=explicit",
            *[f"--load-model={name}" for name in trtllm_models],
            "--allow-http=false",
            "--allow-grpc=false",
            "--allow-metrics=false",
        ]
    extra = list(extra_args or [])
    if exit_timeout is not None and not any(a.startswith("--exit-timeout-secs") for a in extra):
        argv.append(f"--exit-timeout-secs={int(exit_timeout)}")
    argv += extra
    return argv


def launch_argv(
    rank_argvs: list[list[str]],
    *,
    use_mpi: bool,
    oversubscribe: bool = False,
    export_env: list[str] | None = None,
    mpirun: str = MPIRUN,
    hostfile: str | Path | None = None,
    mca: dict[str, str] | None = None,
    map_by: str | None = None,
) -> list[str]:
    """The full command: the single rank's argv, or ``mpirun ... -n 1 <rank0> : -n 1 <rank1> ...``.

    ``export_env`` names environment variables passed on to the ranks with ``-x``. ``mpirun`` stays a bare name
    looked up on PATH: Open MPI treats an absolute ``/usr/bin/mpirun`` like ``--prefix /usr`` and puts
    ``/usr/bin`` first on the ranks' PATH, which hides the venv's ``python3`` from the Python backend stub.
    ``--bind-to none``: Open MPI 4 binds each rank to one core when there are at most 2 ranks, and every
    Python-backend stub a rank starts inherits that mask, so tritonserver plus all of its pre/postprocessing
    and BLS stubs would share one core (measured by scripts/bench_launch.py on 2 cores: start-to-ready of a
    synthetic-engine repository 5.6 s bound vs 2.8 s unbound; docs/performance.md).
    ``hostfile`` spreads the ranks over hosts (``--hostfile``; Open MPI fills each host's slots in order, so rank
    r runs on the host holding slot r with ``map_by="slot"``, i.e. ``--map-by slot``); ``mca`` adds
    ``--mca KEY VALUE`` pairs (e.g. ``plm_rsh_agent``).

    Raises:
        ValueError: ``use_mpi`` is False with more than one rank, or no rank is given.
    """
    if not rank_argvs:
        raise ValueError("no rank to launch")
    if not use_mpi:
        if len(rank_argvs) != 1:
            raise ValueError("more than one rank needs mpirun")
        return list(rank_argvs[0])
    argv = [mpirun, "--allow-run-as-root", "--bind-to", "none"]
    if oversubscribe:
        argv.append("--oversubscribe")
    if hostfile is not None:
        argv += ["--hostfile", str(hostfile)]
    if map_by is not None:
        argv += ["--map-by", map_by]
    for key, value in (mca or {}).items():
        argv += ["--mca", key, value]
    argv.append("--tag-output")
    for name in export_env or []:
        argv += ["-x", name]
    for i, rank in enumerate(rank_argvs):
        if i:
            argv.append(":")
        argv += ["-n", "1", *rank]
    return argv
