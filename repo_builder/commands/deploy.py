"""``repo-builder deploy kubernetes|slurm|monitoring``: argument parsing only (logic in repo_builder.deploy).

Everything a deployment states about the model (world size, tp/pp, ranks > 0 models, /dev/shm size, engine
and tokenizer paths) comes from the repository's lock file, so it cannot disagree with what was rendered.
"""

from __future__ import annotations

from pathlib import Path

import typer

from ..cli import app, report_errors
from ..server.options import DEFAULTS

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


def kubernetes(
    repo: Path = typer.Argument(..., help="Rendered repository (holds repo-builder.lock.json)."),
    image: str = typer.Option(
        ...,
        "--image",
        help="Container image with tritonserver, e.g. nvcr.io/nvidia/tritonserver:25.12-trtllm-python-py3.",
    ),
    nodes: int = typer.Option(1, "--nodes", help="Nodes (pods) one replica spans; > 1 gives a LeaderWorkerSet."),
    gpus_per_node: int | None = typer.Option(
        None,
        "--gpus-per-node",
        help="GPUs (ranks) per node. Default: world size / nodes. nodes x GPUs must equal the world size.",
    ),
    namespace: str | None = typer.Option(None, "--namespace", "-n", help="metadata.namespace of every object."),
    name: str | None = typer.Option(
        None, "--name", help="Base name of the objects. Default: the repository folder's name."
    ),
    pvc: str | None = typer.Option(
        None, "--pvc", help="PersistentVolumeClaim holding the repository (mounted read-only at the serve path)."
    ),
    baked: bool = typer.Option(False, "--baked", help="The repository is baked into the image at the serve path."),
    openai_port: int | None = typer.Option(
        None,
        "--openai-port",
        help="Add the OpenAI-compatible front end (`repo-builder openai`) as a sidecar on this port.",
    ),
    openai_image: str | None = typer.Option(
        None, "--openai-image", help="Image of the OpenAI sidecar (needs repo-builder). Default: --image."
    ),
    replicas: int = typer.Option(1, "--replicas", help="Model replicas (Deployment replicas / LWS groups)."),
    shm_size: str | None = typer.Option(
        None,
        "--shm-size",
        help="Override the /dev/shm size limit (e.g. 4Gi). Default: what the pod's ranks' Python models need.",
    ),
    startup_seconds: int = typer.Option(
        1800,
        "--startup-seconds",
        help="Time the startup probe allows for loading (and, multi-node, for the workers to start).",
    ),
    output: Path | None = typer.Option(
        None,
        "--output",
        "-o",
        help="Write one YAML file per object into this folder instead of a multi-document stream on stdout.",
    ),
    service_monitor: bool = typer.Option(
        False,
        "--service-monitor",
        help="Add a prometheus-operator ServiceMonitor scraping the Service's metrics port (docs/metrics.md).",
    ),
    scrape_interval: str = typer.Option("15s", "--scrape-interval", help="The ServiceMonitor's scrape interval."),
) -> None:
    """Kubernetes manifests: Deployment + Service (one node) or LeaderWorkerSet + RBAC + Service (several)."""
    from ..deploy.facts import default_name, read_facts
    from ..deploy.kubernetes import KubernetesOptions, dump, file_names, manifests

    facts = read_facts(repo)
    opts = KubernetesOptions(
        image=image,
        name=name or default_name(repo),
        nodes=nodes,
        gpus_per_node=gpus_per_node,
        namespace=namespace,
        pvc=pvc,
        baked=baked,
        openai_port=openai_port,
        openai_image=openai_image,
        replicas=replicas,
        shm_size=shm_size,
        startup_seconds=startup_seconds,
        service_monitor=scrape_interval if service_monitor else None,
    )
    docs = manifests(facts, opts)
    _warn(facts)
    for what, path in facts.outside_repository():
        typer.echo(
            f"note: {what} {path} is outside the repository ({facts.serve_path}); the pods must see it at "
            "that path too (mount it or bake it into the image)",
            err=True,
        )
    if output is None:
        typer.echo(dump(docs), nl=False)
        return
    _write_files(output, {fname: dump([doc]) for fname, doc in zip(file_names(docs), docs)})


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


def slurm(
    repo: Path = typer.Argument(..., help="Rendered repository (holds repo-builder.lock.json)."),
    nodes: int = typer.Option(..., "--nodes", help="Nodes of the allocation."),
    gpus_per_node: int | None = typer.Option(
        None,
        "--gpus-per-node",
        help="GPUs (= tasks = ranks) per node. Default: world size / nodes. nodes x GPUs must equal the world size.",
    ),
    name: str | None = typer.Option(None, "--name", help="Job name. Default: the repository folder's name."),
    gres: bool = typer.Option(True, "--gres/--no-gres", help="Request the GPUs (#SBATCH --gpus-per-node)."),
    mpi: str = typer.Option("pmix", "--mpi", help="srun --mpi plugin (pmix; none for world size 1 without MPI)."),
    partition: str | None = typer.Option(None, "--partition", help="#SBATCH --partition."),
    time: str | None = typer.Option(None, "--time", help="#SBATCH --time (e.g. 04:00:00)."),
    account: str | None = typer.Option(None, "--account", help="#SBATCH --account."),
    container_image: str | None = typer.Option(
        None,
        "--container-image",
        help="Run the ranks in this image (pyxis: srun --container-image; the repository is mounted).",
    ),
    tritonserver: str | None = typer.Option(
        None,
        "--tritonserver",
        help="tritonserver on the nodes (checked "
        "here; a nvidia-pytriton binary brings its environment). Default: "
        "/opt/tritonserver/bin/tritonserver, unchecked.",
    ),
    http_port: int | None = typer.Option(
        None, "--http-port", help=f"Rank 0's HTTP port (default {DEFAULTS['http_port']})."
    ),
    grpc_port: int | None = typer.Option(
        None, "--grpc-port", help=f"Rank 0's gRPC port (default {DEFAULTS['grpc_port']})."
    ),
    metrics_port: int | None = typer.Option(
        None, "--metrics-port", help=f"Rank 0's metrics port (default {DEFAULTS['metrics_port']})."
    ),
    ready_timeout: int = typer.Option(1800, "--ready-timeout", help="Seconds the job waits for readiness."),
    output: Path | None = typer.Option(
        None, "--output", "-o", help="Write the script to this file (mode 755) instead of stdout."
    ),
) -> None:
    """An sbatch script: one srun task per GPU (--multi-prog ranks, MPI via PMIx), readiness wait, clean stop."""
    from ..deploy.facts import default_name, read_facts
    from ..deploy.slurm import SlurmOptions, script

    binary = None
    if tritonserver:
        from ..server.binary import find_tritonserver

        binary = find_tritonserver(tritonserver)
    facts = read_facts(repo)
    opts = SlurmOptions(
        name=name or default_name(repo),
        nodes=nodes,
        gpus_per_node=gpus_per_node,
        gres=gres,
        mpi=mpi,
        partition=partition,
        time=time,
        account=account,
        container_image=container_image,
        binary=binary,
        http_port=http_port,
        grpc_port=grpc_port,
        metrics_port=metrics_port,
        ready_timeout=ready_timeout,
    )
    text = script(facts, opts)
    _warn(facts)
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


def monitoring(
    repo: Path = typer.Argument(..., help="Rendered repository (holds repo-builder.lock.json)."),
    output: Path = typer.Option(..., "--output", "-o", help="Folder for prometheus.yml and grafana-dashboard.json."),
    job: str | None = typer.Option(
        None,
        "--job",
        help="Prometheus job name the dashboard's queries select (Kubernetes ServiceMonitor: the Service name, "
        "i.e. deploy kubernetes --name). Default: the repository folder's name.",
    ),
    target: list[str] = typer.Option(
        [],
        "--target",
        help="host:port of Triton's metrics endpoint to scrape (repeatable). Default: localhost:<metrics port>.",
    ),
    scrape_interval: str = typer.Option("5s", "--scrape-interval", help="Prometheus scrape interval."),
) -> None:
    """A Prometheus scrape config and a Grafana dashboard (throughput, TTFT/ITL, queue and KV cache, text cost)."""
    from ..deploy.facts import default_name, read_facts
    from ..deploy.monitoring import monitoring_files

    facts = read_facts(repo)
    files = monitoring_files(
        facts,
        job=job or default_name(repo),
        targets=list(target) or [f"localhost:{facts.metrics_port}"],
        scrape_interval=scrape_interval,
    )
    _warn(facts)
    _write_files(output, files)


deploy_app.command("kubernetes")(report_errors(kubernetes))
deploy_app.command("monitoring")(report_errors(monitoring))
deploy_app.command("slurm")(report_errors(slurm))
