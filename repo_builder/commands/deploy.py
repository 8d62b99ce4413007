"""``repo-builder deploy kubernetes|slurm|monitoring``: argument parsing only (logic in repo_builder.deploy).

Everything a deployment states about the model (world size, tp/pp, ranks > 0 models, /dev/shm size, engine
and tokenizer paths) comes from the repository's lock file, so it cannot disagree with what was rendered.
"""

from __future__ import annotations

from dataclasses import MISSING, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import typer

from ..cli import app, report_errors
from ..cli_options import REQUIRED, command, forward, option
from ..deploy.options import KubernetesOptions, SlurmOptions
from ..server.options import DEFAULTS, LAUNCH_OPTIONS

_STOP_HELP = " Passed on as launch passes it: tritonserver gets --exit-timeout-secs = --exit-timeout + --unload-timeout"


def _defaults(options: type) -> dict[str, Any]:
    """{field: default} of the dataclass ``options`` (a generator's options class of repo_builder/deploy/options.py,
    the one home of each default), for the fields that have one: the command's option takes its default from it."""
    return {f.name: f.default for f in fields(options) if f.default is not MISSING}


_K8S = _defaults(KubernetesOptions)
_SLURM = _defaults(SlurmOptions)


def _launch(name: str, help: str | None = None) -> Any:
    """A field declaring launch's option ``name`` (:data:`repo_builder.server.options.LAUNCH_OPTIONS`: its
    flags, default and bounds) for a generator that passes it on; ``help`` rewords it for the generator."""
    spec = LAUNCH_OPTIONS[name] if help is None else replace(LAUNCH_OPTIONS[name], help=help)
    return field(default=spec.default, metadata={"option": spec})


def _exit_timeout() -> Any:
    return _launch("exit_timeout", "Seconds a stop gives in-flight requests (launch's option)." + _STOP_HELP)


def _unload_timeout(where: str) -> Any:
    return _launch(
        "unload_timeout",
        "Seconds a stop gives the models to unload once nothing is in flight (launch's option)."
        + _STOP_HELP
        + f"; {where}.",
    )


deploy_app = typer.Typer(
    help="Generate deployments (Kubernetes manifests, a Slurm batch script, Prometheus/Grafana monitoring) "
    "from a rendered repository's lock file.",
    no_args_is_help=True,
)
app.add_typer(deploy_app, name="deploy")


def _warn(facts: object) -> None:
    for note in facts.notes:  # type: ignore[attr-defined]
        typer.echo(f"note: {note}", err=True)
    orchestrator = getattr(facts, "orchestrator", None)
    for line in orchestrator.lines() if orchestrator is not None else []:  # layout disaggregated's ranks
        typer.echo(f"note: {line}", err=True)


def _repo() -> Path:
    """The REPO argument of every deploy command."""
    return option(REQUIRED, help="Rendered repository (holds repo-builder.lock.json).", argument=True)


@dataclass(frozen=True, kw_only=True)
class KubernetesArgs:
    """``repo-builder deploy kubernetes`` options (those of :class:`repo_builder.deploy.kubernetes.KubernetesOptions`
    under its field names)."""

    repo: Path = _repo()
    image: str = option(
        REQUIRED,
        "--image",
        help="Container image with tritonserver, e.g. nvcr.io/nvidia/tritonserver:25.12-trtllm-python-py3.",
    )
    nodes: int = option(_K8S["nodes"], "--nodes", help="Nodes (pods) one replica spans; > 1 gives a LeaderWorkerSet.")
    gpus_per_node: int | None = option(
        _K8S["gpus_per_node"],
        "--gpus-per-node",
        help="GPUs (ranks) per node. Default: world size / nodes. nodes x GPUs must equal the world size.",
    )
    namespace: str | None = option(_K8S["namespace"], "--namespace", "-n", help="metadata.namespace of every object.")
    name: str | None = option(None, "--name", help="Base name of the objects. Default: the repository folder's name.")
    pvc: str | None = option(
        _K8S["pvc"], "--pvc", help="PersistentVolumeClaim holding the repository (mounted read-only at the serve path)."
    )
    baked: bool = option(_K8S["baked"], "--baked", help="The repository is baked into the image at the serve path.")
    openai_port: int | None = option(
        _K8S["openai_port"],
        "--openai-port",
        help="Add the OpenAI-compatible front end (`repo-builder openai`) as a sidecar on this port.",
    )
    openai_image: str | None = option(
        _K8S["openai_image"],
        "--openai-image",
        help="Image of the OpenAI sidecar (needs repo-builder). Default: --image.",
    )
    replicas: int = option(_K8S["replicas"], "--replicas", help="Model replicas (Deployment replicas / LWS groups).")
    shm_size: str | None = option(
        _K8S["shm_size"],
        "--shm-size",
        help="Override the /dev/shm size limit (e.g. 4Gi). Default: what the pod's ranks' Python models need.",
    )
    startup_seconds: int = option(
        _K8S["startup_seconds"],
        "--startup-seconds",
        help="Time the startup probe allows for loading (and, multi-node, for the workers to start).",
    )
    output: Path | None = option(
        None,
        "--output",
        "-o",
        help="Write one YAML file per object into this folder instead of a multi-document stream on stdout.",
    )
    service_monitor: bool = option(
        False,
        "--service-monitor",
        help="Add a prometheus-operator ServiceMonitor scraping the Service's metrics port (docs/metrics.md).",
    )
    scrape_interval: str = option("15s", "--scrape-interval", help="The ServiceMonitor's scrape interval.")
    exit_timeout: int = _exit_timeout()
    unload_timeout: float = _unload_timeout("the pods' terminationGracePeriodSeconds is their sum + 15 (at least 60)")
    histogram_latencies: bool = _launch("histogram_latencies")


@command(KubernetesArgs)
def kubernetes(args: KubernetesArgs) -> None:
    """Kubernetes manifests: Deployment + Service (one node) or LeaderWorkerSet + RBAC + Service (several)."""
    from ..deploy.facts import default_name, read_facts
    from ..deploy.kubernetes import dump, file_names, manifests

    facts = read_facts(args.repo)
    opts = forward(
        KubernetesOptions,
        args,
        name=args.name or default_name(args.repo),
        service_monitor=args.scrape_interval if args.service_monitor else None,
    )
    docs = manifests(facts, opts)
    _warn(facts)
    for what, path in facts.outside_repository():
        typer.echo(
            f"note: {what} {path} is outside the repository ({facts.serve_path}); the pods must see it at "
            "that path too (mount it or bake it into the image)",
            err=True,
        )
    if args.output is None:
        typer.echo(dump(docs), nl=False)
        return
    _write_files(args.output, {fname: dump([doc]) for fname, doc in zip(file_names(docs), docs)})


def _write_files(folder: Path, files: dict[str, str]) -> None:
    from ..errors import RepoBuilderError

    try:
        folder.mkdir(parents=True, exist_ok=True)
        for fname, text in files.items():
            (folder / fname).write_text(text, encoding="utf-8")
    except OSError as exc:
        raise RepoBuilderError(f"cannot write: {exc}", path=folder, key="--output") from None
    for fname in files:
        typer.echo(str(folder / fname), err=True)


@dataclass(frozen=True, kw_only=True)
class SlurmArgs:
    """``repo-builder deploy slurm`` options (those of :class:`repo_builder.deploy.slurm.SlurmOptions` under its
    field names)."""

    repo: Path = _repo()
    nodes: int = option(REQUIRED, "--nodes", help="Nodes of the allocation.")
    gpus_per_node: int | None = option(
        _SLURM["gpus_per_node"],
        "--gpus-per-node",
        help="GPUs (= tasks = ranks) per node. Default: world size / nodes. nodes x GPUs must equal the world size.",
    )
    name: str | None = option(None, "--name", help="Job name. Default: the repository folder's name.")
    gres: bool = option(_SLURM["gres"], "--gres/--no-gres", help="Request the GPUs (#SBATCH --gpus-per-node).")
    mpi: str = option(_SLURM["mpi"], "--mpi", help="srun --mpi plugin (pmix; none for world size 1 without MPI).")
    partition: str | None = option(_SLURM["partition"], "--partition", help="#SBATCH --partition.")
    time: str | None = option(_SLURM["time"], "--time", help="#SBATCH --time (e.g. 04:00:00).")
    account: str | None = option(_SLURM["account"], "--account", help="#SBATCH --account.")
    container_image: str | None = option(
        _SLURM["container_image"],
        "--container-image",
        help="Run the ranks in this image (pyxis: srun --container-image; the repository is mounted).",
    )
    tritonserver: str | None = option(
        None,
        "--tritonserver",
        help="tritonserver on the nodes (checked "
        "here; a nvidia-pytriton binary brings its environment). Default: "
        "/opt/tritonserver/bin/tritonserver, unchecked.",
    )
    http_port: int | None = option(
        _SLURM["http_port"], "--http-port", help=f"Rank 0's HTTP port (default {DEFAULTS['http_port']})."
    )
    grpc_port: int | None = option(
        _SLURM["grpc_port"], "--grpc-port", help=f"Rank 0's gRPC port (default {DEFAULTS['grpc_port']})."
    )
    metrics_port: int | None = option(
        _SLURM["metrics_port"], "--metrics-port", help=f"Rank 0's metrics port (default {DEFAULTS['metrics_port']})."
    )
    ready_timeout: int = option(_SLURM["ready_timeout"], "--ready-timeout", help="Seconds the job waits for readiness.")
    output: Path | None = option(
        None, "--output", "-o", help="Write the script to this file (mode 755) instead of stdout."
    )
    exit_timeout: int = _exit_timeout()
    unload_timeout: float = _unload_timeout(
        "Slurm signals the job their sum + 30 s before its time limit (--signal=B:TERM@, at least 120)"
    )
    histogram_latencies: bool = _launch("histogram_latencies")


@command(SlurmArgs)
def slurm(args: SlurmArgs) -> None:
    """An sbatch script: one srun task per GPU (--multi-prog ranks, MPI via PMIx), readiness wait, clean stop."""
    from ..deploy.facts import default_name, read_facts
    from ..deploy.slurm import script

    binary = None
    if args.tritonserver:
        from ..server.binary import find_tritonserver

        binary = find_tritonserver(args.tritonserver)
    facts = read_facts(args.repo)
    opts = forward(SlurmOptions, args, name=args.name or default_name(args.repo), binary=binary)
    text = script(facts, opts)
    _warn(facts)
    output = args.output
    if output is None:
        typer.echo(text, nl=False)
        return
    from ..errors import RepoBuilderError

    try:
        output.write_text(text, encoding="utf-8")
        output.chmod(0o755)
    except OSError as exc:
        raise RepoBuilderError(f"cannot write: {exc}", path=output, key="--output") from None
    typer.echo(str(output), err=True)


@dataclass(frozen=True, kw_only=True)
class MonitoringArgs:
    """``repo-builder deploy monitoring`` options."""

    repo: Path = _repo()
    output: Path = option(REQUIRED, "--output", "-o", help="Folder for prometheus.yml and grafana-dashboard.json.")
    job: str | None = option(
        None,
        "--job",
        help="Prometheus job name the dashboard's queries select (Kubernetes ServiceMonitor: the Service name, "
        "i.e. deploy kubernetes --name). Default: the repository folder's name.",
    )
    target: list[str] = option(
        [],
        "--target",
        help="host:port of Triton's metrics endpoint to scrape (repeatable). Default: localhost:<metrics port>.",
    )
    openai_target: list[str] = option(
        [],
        "--openai-target",
        help="host:port of an OpenAI front end (`launch --openai_port`, `repo-builder openai`) whose /metrics to "
        "scrape in the same job (repeatable). Default: none.",
    )
    scrape_interval: str = option("5s", "--scrape-interval", help="Prometheus scrape interval.")


@command(MonitoringArgs)
def monitoring(args: MonitoringArgs) -> None:
    """A Prometheus scrape config and a Grafana dashboard (throughput, TTFT/ITL, queue and KV cache, text cost)."""
    from ..deploy.facts import default_name, read_facts
    from ..deploy.monitoring import monitoring_files

    facts = read_facts(args.repo)
    files = monitoring_files(
        facts,
        job=args.job or default_name(args.repo),
        targets=list(args.target) or [f"localhost:{facts.metrics_port}"],
        openai_targets=list(args.openai_target),
        scrape_interval=args.scrape_interval,
    )
    _warn(facts)
    _warn_metrics_off(args.repo)
    _write_files(args.output, files)


def _warn_metrics_off(repo: Path) -> None:
    """A note for each LLM whose lock file says ``repo_builder_metrics`` false (the default): the dashboard's
    nv_trt_llm_* and repo_builder_* panels would stay empty."""
    from ..errors import RepoBuilderError
    from ..repository.lockfile import read_serving_info

    try:
        infos = read_serving_info(repo)
    except RepoBuilderError:  # read_facts has read this lock file already; a layout without values: no note
        return
    for info in infos:
        if info.value("repo_builder_metrics", True) is False:
            who = f"LLM {info.llm}: " if info.llm else ""
            typer.echo(
                f"note: {who}repo_builder_metrics is false in this repository (the default), so only Triton's "
                "nv_inference_* panels will show values; render with --set repo_builder_metrics=true for the "
                "engine (nv_trt_llm_*) and text-side (repo_builder_*) panels",
                err=True,
            )


deploy_app.command("kubernetes")(report_errors(kubernetes))
deploy_app.command("monitoring")(report_errors(monitoring))
deploy_app.command("slurm")(report_errors(slurm))
