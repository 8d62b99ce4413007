"""The options of the deploy generators, one dataclass per target: :class:`SlurmOptions` (:mod:`.slurm`) and
:class:`KubernetesOptions` (:mod:`.kubernetes`), each field's default the one home of that default (the
``repo-builder deploy`` commands' option classes in repo_builder/commands/deploy.py read it from here).

Kept import-light (the standard library and :mod:`repo_builder.server.options`) so the CLI builds ``--help``
from these defaults without importing the generators.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..server.options import DEFAULTS

if TYPE_CHECKING:  # pragma: no cover
    from ..server.binary import TritonBinary


@dataclass(frozen=True)
class SlurmOptions:
    """``repo-builder deploy slurm`` options.

    Attributes:
        name: job name.
        nodes, gpus_per_node: allocation shape; nodes x gpus_per_node must equal the world size.
        gres: request the GPUs with ``#SBATCH --gpus-per-node`` (off for clusters without GPU GRES).
        mpi: ``srun --mpi`` plugin (``pmix``; ``none`` for a world size of 1 without MPI).
        partition, time, account: ``#SBATCH`` lines when given.
        container_image: run the ranks in this image through pyxis (``srun --container-image``, repository
            mounted at its serve path).
        binary: tritonserver to run (default NVIDIA's container path, as is) with the environment it needs.
        http_port, grpc_port, metrics_port: rank 0's endpoints (None: the lock file defaults).
        ready_timeout: seconds the script waits for readiness before giving up (and cancelling).
        exit_timeout, unload_timeout: seconds a stop gives in-flight requests, then the models' unloads
            (``launch``'s options of those names): tritonserver gets ``--exit-timeout-secs`` = their sum, and the
            stop signal comes that long plus :data:`.slurm.STOP_GRACE_S` (at least
            :data:`.slurm.MIN_SIGNAL_LEAD_S`) before the time limit.
        histogram_latencies: rank 0 exports Triton's latency distributions (``launch --histogram-latencies``).
    """

    name: str
    nodes: int
    gpus_per_node: int | None = None
    gres: bool = True
    mpi: str = "pmix"
    partition: str | None = None
    time: str | None = None
    account: str | None = None
    container_image: str | None = None
    binary: TritonBinary | None = None
    http_port: int | None = None
    grpc_port: int | None = None
    metrics_port: int | None = None
    ready_timeout: int = 1800
    exit_timeout: int = DEFAULTS["exit_timeout"]
    unload_timeout: float = DEFAULTS["unload_timeout"]
    histogram_latencies: bool = DEFAULTS["histogram_latencies"]


@dataclass(frozen=True)
class KubernetesOptions:
    """``repo-builder deploy kubernetes`` options.

    Attributes:
        image: container image holding tritonserver (and the repository when ``baked``).
        nodes: pods (= nodes) one model replica spans; > 1 gives a LeaderWorkerSet.
        gpus_per_node: GPUs (= ranks) per pod; default world size / nodes.
        namespace: ``metadata.namespace`` of every object (None: the kubectl context's).
        name: base name of every object (DNS-1123, at most 40 characters).
        pvc: PersistentVolumeClaim holding the repository (mounted read-only at the serve path).
        baked: the repository is inside the image at the serve path.
        openai_port: also serve repo-builder's OpenAI-compatible front end on this port (sidecar of rank 0).
        openai_image: the sidecar's image (default ``image``).
        replicas: model replicas (Deployment replicas or LeaderWorkerSet groups).
        shm_size: ``/dev/shm`` size limit override (a Kubernetes quantity, e.g. ``4Gi``).
        startup_seconds: how long the startup probe allows for loading the engine (and for the workers).
        service_monitor: also a prometheus-operator ``ServiceMonitor`` scraping the Service's metrics port every
            this interval (e.g. ``15s``; :func:`.monitoring.service_monitor`), or None.
        exit_timeout, unload_timeout: seconds a stop gives in-flight requests, then the models' unloads
            (``launch``'s options of those names): tritonserver gets ``--exit-timeout-secs`` = their sum and the
            pods a ``terminationGracePeriodSeconds`` of at least that plus :data:`.kubernetes.STOP_GRACE_S`.
        histogram_latencies: rank 0 exports Triton's latency distributions (``launch --histogram-latencies``).
    """

    image: str
    name: str
    nodes: int = 1
    gpus_per_node: int | None = None
    namespace: str | None = None
    pvc: str | None = None
    baked: bool = False
    openai_port: int | None = None
    openai_image: str | None = None
    replicas: int = 1
    shm_size: str | None = None
    startup_seconds: int = 1800
    service_monitor: str | None = None
    exit_timeout: int = DEFAULTS["exit_timeout"]
    unload_timeout: float = DEFAULTS["unload_timeout"]
    histogram_latencies: bool = DEFAULTS["histogram_latencies"]
