"""Kubernetes manifests for a rendered repository, as plain dicts (``yaml.safe_dump_all`` writes them).

Layout (facts from :mod:`.facts`, i.e. the lock file):

* one node (``--nodes 1``): a ``Deployment`` whose pod runs every rank (``tritonserver`` for world size 1,
  the launcher's ``mpirun`` line for more), plus a ``Service``;
* several nodes: a ``LeaderWorkerSet`` (``leaderworkerset.x-k8s.io/v1``, kubernetes-sigs/lws) with one pod
  per node and group size = nodes. The leader pod holds ranks ``0 .. G-1`` and runs ``mpirun`` over a
  hostfile of the group's pods; Open MPI starts its daemon in each worker pod through ``kubectl exec``
  (``--mca plm_rsh_agent``), so the workers only sleep and need a ServiceAccount-free pod, while the leader's
  ServiceAccount may ``get/list/watch`` pods and create ``pods/exec`` (Role + RoleBinding). Rank 0 serves the
  whole repository with its endpoints; ranks > 0 load only the TensorRT-LLM model(s)
  (:func:`repo_builder.server.command.rank_argv`). The Service selects the leader pods (worker-index 0).
  An llmapi repository (``--profile llmapi-1.2``) runs one plain ``tritonserver`` on one node (the LLM API
  spawns its tp x pp workers on the pod's GPUs itself, TensorRT-LLM's backend docs) and, on several nodes,
  ``trtllm-llmapi-launch <rank 0's command>`` on every rank under the leader's ``mpirun``
  (:data:`repo_builder.server.command.LLMAPI_LAUNCH`, launch_triton_server.py's ``--trtllm_llmapi_launch``).
  LWS facts (label keys, pod names ``<name>-<group>`` / ``<name>-<group>-<worker>``, ``restartPolicy``
  ``RecreateGroupOnPodRestart``): kubernetes-sigs/lws ``api/leaderworkerset/v1/leaderworkerset_types.go``.

Every serving container gets startup/readiness probes on ``/v2/health/ready`` and a liveness probe on
``/v2/health/live`` (Triton's KServe v2 health endpoints), ``/dev/shm`` as an ``emptyDir`` with
``medium: Memory`` and a ``sizeLimit`` from the launcher's shared-memory formula for the ranks of that pod,
``nvidia.com/gpu`` limits (the NVIDIA device plugin's resource), the repository from a PersistentVolumeClaim
(read-only, mounted at the serve path) or baked into the image at that path, and ``prometheus.io/*``
annotations for the metrics port. ``--openai-port`` adds a sidecar container beside rank 0 running
repo-builder's OpenAI-compatible front end (``repo-builder openai --grpc-url 127.0.0.1:<grpc> --port P --repo
<serve path>``, issue 14) against the pod's own Triton gRPC endpoint; its image (``--openai-image``, default
the server image) must have repo-builder installed.
"""

from __future__ import annotations

import math
from typing import Any

from ..server.binary import OPT_TRITONSERVER
from ..server.command import launch_argv, llmapi_launch_argvs, rank_argv
from ..server.options import PORT_MAX, PORT_MIN, server_exit_timeout
from .facts import DeployError, DeploymentFacts, check_name, check_stop_timeouts
from .options import KubernetesOptions  # noqa: F401  (re-exported: moved from this module)

#: LeaderWorkerSet label keys (kubernetes-sigs/lws api/leaderworkerset/v1/leaderworkerset_types.go).
LWS_NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"
LWS_GROUP_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/group-index"
LWS_WORKER_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"
LWS_GROUP_KEY_LABEL = "leaderworkerset.sigs.k8s.io/group-key"
#: The rsh agent the leader writes: Open MPI calls it as ``AGENT HOST COMMAND...`` (a shell command line).
RSH_AGENT = "/tmp/repo-builder-kubexec.sh"
HOSTFILE = "/tmp/repo-builder-hostfile"
MIB = 1 << 20


#: seconds a pod's ``terminationGracePeriodSeconds`` adds to tritonserver's ``--exit-timeout-secs`` (the
#: process exits after its timer; Kubernetes sends SIGKILL at the grace period's end), and the least it is
MIN_GRACE_S = 60
STOP_GRACE_S = 15


def termination_grace_s(opts: KubernetesOptions) -> int:
    """``terminationGracePeriodSeconds`` of the serving pods: tritonserver's stop timer plus a margin."""
    return max(MIN_GRACE_S, server_exit_timeout(opts.exit_timeout, opts.unload_timeout) + STOP_GRACE_S)


def _quantity_mib(nbytes: int) -> str:
    return f"{max(1, math.ceil(nbytes / MIB))}Mi"


def _metadata(name: str, opts: KubernetesOptions, labels: dict[str, str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if opts.namespace:
        meta["namespace"] = opts.namespace
    meta["labels"] = dict(labels or _labels(opts))
    return meta


def _labels(opts: KubernetesOptions) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": "triton-inference-server",
        "app.kubernetes.io/instance": opts.name,
        "app.kubernetes.io/component": "server",
        "app.kubernetes.io/managed-by": "repo-builder",
    }


def _selector(opts: KubernetesOptions) -> dict[str, str]:
    return {"app.kubernetes.io/name": "triton-inference-server", "app.kubernetes.io/instance": opts.name}


def _ports(facts: DeploymentFacts, opts: KubernetesOptions) -> list[dict[str, Any]]:
    ports = [
        {"name": "http", "containerPort": facts.http_port, "protocol": "TCP"},
        {"name": "grpc", "containerPort": facts.grpc_port, "protocol": "TCP"},
        {"name": "metrics", "containerPort": facts.metrics_port, "protocol": "TCP"},
    ]
    return ports


def _probes(opts: KubernetesOptions) -> dict[str, Any]:
    period = 10
    return {
        "startupProbe": {
            "httpGet": {"path": "/v2/health/ready", "port": "http"},
            "periodSeconds": period,
            "failureThreshold": max(1, math.ceil(opts.startup_seconds / period)),
        },
        "readinessProbe": {
            "httpGet": {"path": "/v2/health/ready", "port": "http"},
            "periodSeconds": 5,
            "failureThreshold": 3,
        },
        "livenessProbe": {
            "httpGet": {"path": "/v2/health/live", "port": "http"},
            "periodSeconds": 10,
            "failureThreshold": 3,
        },
    }


def _pod_annotations(facts: DeploymentFacts, opts: KubernetesOptions) -> dict[str, str]:
    out = {
        "prometheus.io/scrape": "true",
        "prometheus.io/port": str(facts.metrics_port),
        "prometheus.io/path": "/metrics",
    }
    if facts.orchestrator is not None:  # which rank runs which engine rank on which GPU, for a reader of the pod
        out["repo-builder/ranks"] = "\n".join(facts.orchestrator.lines())
    return out


def _volumes(facts: DeploymentFacts, opts: KubernetesOptions, ranks: range) -> tuple[list[dict], list[dict]]:
    size = opts.shm_size or _quantity_mib(facts.shm_bytes(ranks))
    volumes: list[dict[str, Any]] = [{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": size}}]
    mounts: list[dict[str, Any]] = [{"name": "dshm", "mountPath": "/dev/shm"}]
    if opts.pvc:
        volumes.append({"name": "model-repository", "persistentVolumeClaim": {"claimName": opts.pvc, "readOnly": True}})
        mounts.append({"name": "model-repository", "mountPath": facts.serve_path, "readOnly": True})
    return volumes, mounts


def _rank_argvs(facts: DeploymentFacts, launch_id: str, opts: KubernetesOptions) -> list[list[str]]:
    """Every rank's argv; an llmapi repository's are ``trtllm-llmapi-launch`` + rank 0's (several nodes)."""
    argvs = [
        rank_argv(
            binary=OPT_TRITONSERVER,
            backend_args=[],
            model_repo=facts.serve_path,
            rank=r,
            launch_id=launch_id,
            http_address="0.0.0.0",
            http_port=facts.http_port,
            grpc_port=facts.grpc_port,
            metrics_port=facts.metrics_port,
            trtllm_models=list(facts.tensorrt_llm_models),
            exit_timeout=server_exit_timeout(opts.exit_timeout, opts.unload_timeout),
            histogram_latencies=opts.histogram_latencies,
        )
        for r in range(facts.world_size)
    ]
    if facts.llmapi:
        return llmapi_launch_argvs(argvs[0], facts.world_size)
    return argvs


def _orchestrator_env(facts: DeploymentFacts) -> dict[str, str]:
    """The environment of orchestrator mode (layout disaggregated), else ``{}``."""
    from ..server.orchestrator import ORCHESTRATOR_ENV

    return dict(ORCHESTRATOR_ENV) if facts.orchestrator is not None else {}


def _openai_sidecar(facts: DeploymentFacts, opts: KubernetesOptions) -> list[dict[str, Any]]:
    """``[container]`` of the OpenAI front end beside rank 0, or ``[]`` without ``--openai-port``."""
    if opts.openai_port is None:
        return []
    return [
        {
            "name": "openai",
            "image": opts.openai_image or opts.image,
            "command": [
                "repo-builder",
                "openai",
                "--grpc-url",
                f"127.0.0.1:{facts.grpc_port}",
                "--port",
                str(opts.openai_port),
                "--repo",
                facts.serve_path,
            ],
            "ports": [{"name": "openai", "containerPort": opts.openai_port, "protocol": "TCP"}],
            "readinessProbe": {
                "httpGet": {"path": "/health", "port": "openai"},
                "periodSeconds": 5,
                "failureThreshold": 3,
            },
            "volumeMounts": [m for m in _volumes(facts, opts, range(0))[1] if m["name"] != "dshm"],
        }
    ]


def _service(facts: DeploymentFacts, opts: KubernetesOptions, selector: dict[str, str]) -> dict[str, Any]:
    ports = [
        {"name": p["name"], "port": p["containerPort"], "targetPort": p["name"], "protocol": "TCP"}
        for c in [{"ports": _ports(facts, opts)}, *_openai_sidecar(facts, opts)]
        for p in c["ports"]
    ]
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(opts.name, opts),
        "spec": {"type": "ClusterIP", "selector": selector, "ports": ports},
    }


def _check(facts: DeploymentFacts, opts: KubernetesOptions) -> int:
    check_name(opts.name)
    if not opts.image:
        raise DeployError(
            "no container image given",
            key="--image",
            hint="e.g. --image nvcr.io/nvidia/tritonserver:25.12-trtllm-python-py3",
        )
    if bool(opts.pvc) == bool(opts.baked):
        raise DeployError(
            "say where the pod finds the repository: --pvc NAME (a PersistentVolumeClaim holding it) "
            "or --baked (it is inside the image)"
            if not opts.pvc
            else "--pvc and --baked exclude each other",
            key="--pvc",
        )
    if opts.pvc:
        check_name(opts.pvc, key="--pvc", max_len=253)
    if opts.replicas < 1:
        raise DeployError(f"--replicas must be at least 1, got {opts.replicas}", key="--replicas")
    check_stop_timeouts(opts.exit_timeout, opts.unload_timeout)
    gpus = facts.rank_layout(opts.nodes, opts.gpus_per_node)
    if opts.openai_port is not None:
        taken = {facts.http_port, facts.grpc_port, facts.metrics_port}
        if opts.openai_port in taken or not PORT_MIN <= opts.openai_port <= PORT_MAX:
            raise DeployError(
                f"--openai-port {opts.openai_port} is not a free port number (Triton uses "
                f"{', '.join(map(str, sorted(taken)))})",
                key="--openai-port",
            )
    return gpus


def manifests(facts: DeploymentFacts, opts: KubernetesOptions) -> list[dict[str, Any]]:
    """The manifests, in apply order: [Deployment, Service] for one node; [ServiceAccount, Role, RoleBinding,
    LeaderWorkerSet, Service] for several; then the ServiceMonitor when ``opts.service_monitor`` is set.

    Raises:
        DeployError: options contradict the lock file (nodes x GPUs != world size), a port is taken, options
            contradict each other (both or neither of --pvc/--baked), or a name is not a DNS label.
    """
    docs = _manifests(facts, opts)
    if opts.service_monitor:
        from .monitoring import service_monitor

        docs.append(
            service_monitor(
                opts.name,
                _selector(opts),
                namespace=opts.namespace,
                interval=opts.service_monitor,
                openai=opts.openai_port is not None,
            )
        )
    return docs


def _manifests(facts: DeploymentFacts, opts: KubernetesOptions) -> list[dict[str, Any]]:
    gpus = _check(facts, opts)
    launch_id = "rb"
    ranks = _rank_argvs(facts, launch_id, opts)
    gpu_limits = {"limits": {"nvidia.com/gpu": str(gpus)}}
    if opts.nodes == 1:
        if facts.llmapi:  # one tritonserver; the LLM API spawns its tp x pp workers on the pod's GPUs itself
            command = ranks[0][1:]
        else:
            command = launch_argv(ranks, use_mpi=facts.world_size > 1, export_env=sorted(_orchestrator_env(facts)))
        volumes, mounts = _volumes(facts, opts, range(facts.world_size))
        container = {
            "name": "triton",
            "image": opts.image,
            "command": command,
            **(
                {"env": [{"name": k, "value": v} for k, v in sorted(_orchestrator_env(facts).items())]}
                if facts.orchestrator
                else {}
            ),
            "ports": _ports(facts, opts),
            "resources": gpu_limits,
            "volumeMounts": mounts,
            **_probes(opts),
        }
        pod = {
            "metadata": {"labels": _labels(opts), "annotations": _pod_annotations(facts, opts)},
            "spec": {
                "containers": [container, *_openai_sidecar(facts, opts)],
                "volumes": volumes,
                "terminationGracePeriodSeconds": termination_grace_s(opts),
            },
        }
        deployment = {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": _metadata(opts.name, opts),
            "spec": {"replicas": opts.replicas, "selector": {"matchLabels": _selector(opts)}, "template": pod},
        }
        return [deployment, _service(facts, opts, _selector(opts))]
    return _leader_worker_set(facts, opts, gpus, ranks, gpu_limits)


def _leader_script(facts: DeploymentFacts, opts: KubernetesOptions, gpus: int, ranks: list[list[str]]) -> str:
    """The leader container's ``sh -c`` script: rsh agent, hostfile, wait for the workers, ``exec mpirun``."""
    import shlex

    mpirun = launch_argv(ranks, use_mpi=True, hostfile=HOSTFILE, map_by="slot", mca={"plm_rsh_agent": RSH_AGENT})
    workers = " ".join(str(i) for i in range(1, opts.nodes))
    selector = f"{LWS_GROUP_KEY_LABEL}=$GROUP_KEY,{LWS_WORKER_INDEX_LABEL}!=0"
    return (
        "\n".join(
            [
                "set -eu",
                f"cat > {RSH_AGENT} <<'EOF'",
                "#!/bin/sh",
                "# Open MPI rsh agent: AGENT POD COMMAND... runs COMMAND (a shell command line) in worker pod POD",
                'pod="$1"; shift',
                'exec kubectl exec -i -n "$POD_NAMESPACE" -c worker "$pod" -- /bin/sh -c "$*"',
                "EOF",
                f"chmod +x {RSH_AGENT}",
                f'echo "$(hostname) slots={gpus}" > {HOSTFILE}',
                f'for i in {workers}; do echo "{opts.name}-$GROUP_INDEX-$i slots={gpus}" >> {HOSTFILE}; done',
                f'until [ "$(kubectl get pod -n "$POD_NAMESPACE" -l "{selector}" -o name | wc -l)" -eq '
                f"{opts.nodes - 1} ]; do sleep 2; done",
                f'kubectl wait --for=condition=Ready pod -n "$POD_NAMESPACE" -l "{selector}" '
                f"--timeout={opts.startup_seconds}s",
                "exec " + " ".join(shlex.quote(a) for a in mpirun),
            ]
        )
        + "\n"
    )


def _leader_env() -> list[dict[str, Any]]:
    """The leader container's ``env``: ``POD_NAMESPACE``, ``GROUP_INDEX`` and ``GROUP_KEY`` from the pod's own
    metadata (downward API), which :func:`_leader_script` reads."""
    return [
        {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
        {
            "name": "GROUP_INDEX",
            "valueFrom": {"fieldRef": {"fieldPath": f"metadata.labels['{LWS_GROUP_INDEX_LABEL}']"}},
        },
        {"name": "GROUP_KEY", "valueFrom": {"fieldRef": {"fieldPath": f"metadata.labels['{LWS_GROUP_KEY_LABEL}']"}}},
    ]


def _mpi_rbac(sa: str, opts: KubernetesOptions) -> list[dict[str, Any]]:
    """The leader's ServiceAccount ``sa``, a Role that may ``get/list/watch`` pods and create ``pods/exec`` (what
    the rsh agent's ``kubectl exec`` needs), and the RoleBinding between them: three manifests, in apply order."""
    account = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _metadata(sa, opts)}
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": _metadata(sa, opts),
        "rules": [
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]},
            {"apiGroups": [""], "resources": ["pods/exec"], "verbs": ["create"]},
        ],
    }
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": _metadata(sa, opts),
        "subjects": [
            {"kind": "ServiceAccount", "name": sa, **({"namespace": opts.namespace} if opts.namespace else {})}
        ],
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": sa},
    }
    return [account, role, binding]


def _leader_worker_set(
    facts: DeploymentFacts, opts: KubernetesOptions, gpus: int, ranks: list[list[str]], gpu_limits: dict[str, Any]
) -> list[dict[str, Any]]:
    """The manifests of a deployment over ``opts.nodes`` > 1 nodes of ``gpus`` GPUs each (``ranks``: every rank's
    argv; ``gpu_limits``: a pod's ``resources``), in apply order: the leader's ServiceAccount, Role and
    RoleBinding (:func:`_mpi_rbac`), the ``LeaderWorkerSet`` and the Service of the leader pods."""
    sa = f"{opts.name}-mpi"
    env = _leader_env()
    leader_volumes, leader_mounts = _volumes(facts, opts, range(gpus))
    worker_volumes, worker_mounts = _volumes(facts, opts, range(gpus, 2 * gpus))
    leader = {
        "name": "leader",
        "image": opts.image,
        "command": ["/bin/sh", "-c", _leader_script(facts, opts, gpus, ranks)],
        "env": env,
        "ports": _ports(facts, opts),
        "resources": gpu_limits,
        "volumeMounts": leader_mounts,
        **_probes(opts),
    }
    worker = {
        "name": "worker",
        "image": opts.image,
        "command": ["sleep", "infinity"],
        "resources": gpu_limits,
        "volumeMounts": worker_mounts,
    }
    labels = _labels(opts)
    lws = {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": _metadata(opts.name, opts),
        "spec": {
            "replicas": opts.replicas,
            "startupPolicy": "LeaderCreated",
            "leaderWorkerTemplate": {
                "size": opts.nodes,
                "restartPolicy": "RecreateGroupOnPodRestart",
                "leaderTemplate": {
                    "metadata": {
                        "labels": {**labels, "app.kubernetes.io/component": "leader"},
                        "annotations": _pod_annotations(facts, opts),
                    },
                    "spec": {
                        "serviceAccountName": sa,
                        "containers": [leader, *_openai_sidecar(facts, opts)],
                        "volumes": leader_volumes,
                        "terminationGracePeriodSeconds": termination_grace_s(opts),
                    },
                },
                "workerTemplate": {
                    "metadata": {"labels": {**labels, "app.kubernetes.io/component": "worker"}},
                    "spec": {
                        "automountServiceAccountToken": False,
                        "containers": [worker],
                        "volumes": worker_volumes,
                        "terminationGracePeriodSeconds": termination_grace_s(opts),
                    },
                },
            },
        },
    }
    selector = {LWS_NAME_LABEL: opts.name, LWS_WORKER_INDEX_LABEL: "0"}
    return [*_mpi_rbac(sa, opts), lws, _service(facts, opts, selector)]


def dump(docs: list[dict[str, Any]]) -> str:
    """Multi-document YAML through a ``yaml.SafeDumper`` (keys in build order, no anchors/aliases, multi-line
    strings such as the leader's script as ``|`` blocks)."""
    import yaml

    class _Dumper(yaml.SafeDumper):
        def ignore_aliases(self, data: Any) -> bool:
            return True

    def _str(dumper: yaml.SafeDumper, value: str) -> Any:
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|" if "\n" in value else None)

    _Dumper.add_representer(str, _str)
    return yaml.dump_all(docs, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=120)


def file_names(docs: list[dict[str, Any]]) -> list[str]:
    """One file name per manifest for ``--output DIR``: ``NN-<kind>-<name>.yaml`` (NN = apply order)."""
    return [f"{i:02d}-{d['kind'].lower()}-{d['metadata']['name']}.yaml" for i, d in enumerate(docs, 1)]
