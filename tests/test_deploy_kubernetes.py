"""`repo-builder deploy kubernetes`: manifests generated from the lock file, validated offline.

Core kinds (Deployment, Service, ServiceAccount, Role, RoleBinding) are validated with kubernetes-validate
(the Kubernetes OpenAPI schemas, strict: unknown fields are errors). The LeaderWorkerSet is validated with
jsonschema against the openAPIV3Schema of LWS's own CRD (tests/assets/lws, see SOURCE.md there), made strict
the way the API server's ``fieldValidation=Strict`` is: an object schema with ``properties`` and no
``additionalProperties``/``x-kubernetes-preserve-unknown-fields`` rejects unknown fields.
"""

from __future__ import annotations

import copy
import gzip
import json
import shlex
import subprocess
from pathlib import Path

import pytest
import yaml
from cli_support import assert_refused, run_cli
from deploy_support import rendered_repo

from repo_builder.deploy.facts import DeployError, read_facts
from repo_builder.deploy.kubernetes import KubernetesOptions, dump, manifests
from repo_builder.server.command import shm_prefix

kubernetes_validate = pytest.importorskip("kubernetes_validate")
jsonschema = pytest.importorskip("jsonschema")

K8S_VERSION = "1.30.0"
LWS_SCHEMA = Path(__file__).parent / "assets" / "lws" / "leaderworkerset-v1.openapi.json.gz"
IMAGE = "nvcr.io/nvidia/tritonserver:25.12-trtllm-python-py3"


@pytest.fixture(scope="module")
def repo1(tmp_path_factory) -> Path:
    return rendered_repo(tmp_path_factory.mktemp("ws1"), 1, 1)


@pytest.fixture(scope="module")
def repo4(tmp_path_factory) -> Path:
    """tp 2 x pp 2: world size 4."""
    return rendered_repo(tmp_path_factory.mktemp("ws4"), 2, 2)


def _strict(schema: object) -> object:
    if isinstance(schema, dict):
        out = {k: _strict(v) for k, v in schema.items()}
        if (
            "properties" in out
            and "additionalProperties" not in out
            and not out.get("x-kubernetes-preserve-unknown-fields")
        ):
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [_strict(v) for v in schema]
    return schema


@pytest.fixture(scope="module")
def lws_validator():
    schema = _strict(json.loads(gzip.decompress(LWS_SCHEMA.read_bytes())))
    return jsonschema.Draft7Validator(schema)


def validate_all(docs: list[dict], lws_validator) -> None:
    for doc in docs:
        if doc["kind"] == "LeaderWorkerSet":
            errors = sorted(lws_validator.iter_errors(doc), key=lambda e: list(e.path))
            assert not errors, [f"{list(e.path)}: {e.message}" for e in errors]
        else:
            kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


def by_kind(docs: list[dict]) -> dict[str, dict]:
    return {d["kind"]: d for d in docs}


def cli(*args: str) -> subprocess.CompletedProcess:
    return run_cli("deploy", *args)


# ---------------------------------------------------------------------------------------------- world size 1
def test_single_gpu_deployment_and_service_validate(repo1, lws_validator) -> None:
    facts = read_facts(repo1)
    docs = manifests(facts, KubernetesOptions(image=IMAGE, name="llama", pvc="models", namespace="llm"))
    assert [d["kind"] for d in docs] == ["Deployment", "Service"]
    validate_all(docs, lws_validator)
    dep, svc = docs
    pod = dep["spec"]["template"]
    (container,) = pod["spec"]["containers"]
    # the command is rank 0's tritonserver line for the serve path, no mpirun for one rank
    assert container["command"][0] == "/opt/tritonserver/bin/tritonserver"
    assert "--model-repository=/models/llama" in container["command"]
    assert f"--backend-config=python,shm-region-prefix-name={shm_prefix('rb', 0)}" in container["command"]
    assert "--http-address=0.0.0.0" in container["command"]
    assert container["resources"]["limits"] == {"nvidia.com/gpu": "1"}
    assert container["startupProbe"]["httpGet"]["path"] == "/v2/health/ready"
    assert container["readinessProbe"]["httpGet"]["path"] == "/v2/health/ready"
    assert container["livenessProbe"]["httpGet"]["path"] == "/v2/health/live"
    assert {p["name"]: p["containerPort"] for p in container["ports"]} == {"http": 8000, "grpc": 8001, "metrics": 8002}
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    # 4 Python stubs (2 preprocessing instances, postprocessing, BLS; the engine is C++) x 2 MiB + 16 MiB
    assert volumes["dshm"]["emptyDir"] == {"medium": "Memory", "sizeLimit": f"{facts.shm_bytes(range(1)) >> 20}Mi"}
    assert facts.shm_bytes(range(1)) == (4 * 2 + 16) << 20
    assert volumes["model-repository"]["persistentVolumeClaim"] == {"claimName": "models", "readOnly": True}
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    assert mounts["dshm"]["mountPath"] == "/dev/shm" and mounts["model-repository"]["mountPath"] == "/models/llama"
    assert pod["metadata"]["annotations"] == {
        "prometheus.io/scrape": "true",
        "prometheus.io/port": "8002",
        "prometheus.io/path": "/metrics",
    }
    # the Service selects the Deployment's pods and exposes every endpoint by name
    assert dep["spec"]["selector"]["matchLabels"] == svc["spec"]["selector"]
    assert all(pod["metadata"]["labels"][k] == v for k, v in svc["spec"]["selector"].items())
    assert [p["targetPort"] for p in svc["spec"]["ports"]] == ["http", "grpc", "metrics"]
    assert dep["metadata"]["namespace"] == svc["metadata"]["namespace"] == "llm"


def test_baked_repository_has_no_volume_and_openai_sidecar(repo1, lws_validator) -> None:
    docs = manifests(read_facts(repo1), KubernetesOptions(image=IMAGE, name="llama", baked=True, openai_port=9000))
    validate_all(docs, lws_validator)
    dep, svc = docs
    spec = dep["spec"]["template"]["spec"]
    assert [v["name"] for v in spec["volumes"]] == ["dshm"]
    triton, openai = spec["containers"]
    assert openai["command"] == [
        "repo-builder",
        "openai",
        "--grpc-url",
        "127.0.0.1:8001",
        "--port",
        "9000",
        "--repo",
        "/models/llama",
    ]
    assert "nvidia.com/gpu" not in json.dumps(openai)
    assert [p["name"] for p in svc["spec"]["ports"]] == ["http", "grpc", "metrics", "openai"]


def test_world_size_four_on_one_node_runs_mpirun_in_one_pod(repo4, lws_validator) -> None:
    facts = read_facts(repo4)
    assert (facts.world_size, facts.tp_size, facts.pp_size) == (4, 2, 2)
    docs = manifests(facts, KubernetesOptions(image=IMAGE, name="llama", pvc="models"))
    validate_all(docs, lws_validator)
    (container,) = docs[0]["spec"]["template"]["spec"]["containers"]
    cmd = container["command"]
    assert cmd[0] == "mpirun" and cmd.count("/opt/tritonserver/bin/tritonserver") == 4
    assert cmd.count("--load-model=tensorrt_llm") == 3 and cmd.count("--http-port=8000") == 1
    assert container["resources"]["limits"] == {"nvidia.com/gpu": "4"}


# ---------------------------------------------------------------------------------------------- several nodes
def test_two_nodes_give_a_leader_worker_set_valid_against_its_crd(repo4, lws_validator) -> None:
    facts = read_facts(repo4)
    docs = manifests(facts, KubernetesOptions(image=IMAGE, name="llama", nodes=2, pvc="models", replicas=3))
    assert [d["kind"] for d in docs] == ["ServiceAccount", "Role", "RoleBinding", "LeaderWorkerSet", "Service"]
    validate_all(docs, lws_validator)
    kinds = by_kind(docs)
    lws = kinds["LeaderWorkerSet"]
    assert lws["apiVersion"] == "leaderworkerset.x-k8s.io/v1"
    tmpl = lws["spec"]["leaderWorkerTemplate"]
    assert lws["spec"]["replicas"] == 3 and tmpl["size"] == 2
    leader = tmpl["leaderTemplate"]["spec"]["containers"][0]
    worker = tmpl["workerTemplate"]["spec"]["containers"][0]
    assert leader["resources"]["limits"] == worker["resources"]["limits"] == {"nvidia.com/gpu": "2"}
    assert "startupProbe" in leader and "readinessProbe" not in worker
    script = leader["command"][2]
    subprocess.run(["sh", "-n", "-c", script], check=True)  # the leader script parses
    # hostfile: the leader pod and worker pod <name>-<group>-1, two slots each
    assert 'echo "$(hostname) slots=2"' in script and 'echo "llama-$GROUP_INDEX-$i slots=2"' in script
    mpirun = shlex.split(script.splitlines()[-1])[1:]
    assert mpirun[0] == "mpirun" and "--hostfile" in mpirun
    assert mpirun[mpirun.index("--mca") + 1 : mpirun.index("--mca") + 3] == [
        "plm_rsh_agent",
        "/tmp/repo-builder-kubexec.sh",
    ]
    assert mpirun.count("--load-model=tensorrt_llm") == 3
    # /dev/shm: the leader holds rank 0 (4 Python stubs) and rank 1 (C++ engine only), a worker none
    sizes = {
        t: {v["name"]: v for v in tmpl[t]["spec"]["volumes"]}["dshm"]["emptyDir"]["sizeLimit"]
        for t in ("leaderTemplate", "workerTemplate")
    }
    assert sizes == {"leaderTemplate": "24Mi", "workerTemplate": "16Mi"}
    # RBAC: the leader's account may exec into pods of its namespace, nothing more
    assert tmpl["leaderTemplate"]["spec"]["serviceAccountName"] == kinds["ServiceAccount"]["metadata"]["name"]
    assert kinds["Role"]["rules"] == [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]},
        {"apiGroups": [""], "resources": ["pods/exec"], "verbs": ["create"]},
    ]
    assert kinds["RoleBinding"]["roleRef"]["name"] == kinds["Role"]["metadata"]["name"]
    assert kinds["Service"]["spec"]["selector"] == {
        "leaderworkerset.sigs.k8s.io/name": "llama",
        "leaderworkerset.sigs.k8s.io/worker-index": "0",
    }


def test_validators_reject_what_the_api_server_would(repo4, lws_validator) -> None:
    """The validators used above can fail: an unknown LWS field, a bad enum, a wrong core type."""
    docs = manifests(read_facts(repo4), KubernetesOptions(image=IMAGE, name="llama", nodes=2, pvc="models"))
    lws = copy.deepcopy(by_kind(docs)["LeaderWorkerSet"])
    lws["spec"]["leaderWorkerTemplate"]["sise"] = 2
    assert any("sise" in e.message for e in lws_validator.iter_errors(lws))
    lws = copy.deepcopy(by_kind(docs)["LeaderWorkerSet"])
    lws["spec"]["leaderWorkerTemplate"]["restartPolicy"] = "Always"
    assert list(lws_validator.iter_errors(lws))
    svc = copy.deepcopy(by_kind(docs)["Service"])
    svc["spec"]["ports"][0]["port"] = "eight thousand"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(svc, K8S_VERSION, strict=True)


# ---------------------------------------------------------------------------------------------- CLI and errors
def test_cli_stdout_is_the_multi_document_stream_and_output_writes_files(repo4, tmp_path) -> None:
    out = cli(
        "kubernetes",
        str(repo4),
        "--image",
        IMAGE,
        "--nodes",
        "2",
        "--gpus-per-node",
        "2",
        "--pvc",
        "models",
        "--name",
        "llama",
    )
    assert out.returncode == 0, out.stderr
    docs = list(yaml.safe_load_all(out.stdout))
    assert docs == manifests(read_facts(repo4), KubernetesOptions(image=IMAGE, name="llama", nodes=2, pvc="models"))
    assert "tokenizer_dir" in out.stderr  # the tokenizer lives outside the repository: the user is told
    assert dump(docs).count("\n---\n") == len(docs) - 1
    out = cli(
        "kubernetes",
        str(repo4),
        "--image",
        IMAGE,
        "--nodes",
        "2",
        "--pvc",
        "models",
        "--name",
        "llama",
        "--output",
        str(tmp_path / "k8s"),
    )
    assert out.returncode == 0, out.stderr
    files = sorted(p.name for p in (tmp_path / "k8s").iterdir())
    assert files == [
        "01-serviceaccount-llama-mpi.yaml",
        "02-role-llama-mpi.yaml",
        "03-rolebinding-llama-mpi.yaml",
        "04-leaderworkerset-llama.yaml",
        "05-service-llama.yaml",
    ]
    assert [yaml.safe_load((tmp_path / "k8s" / f).read_text()) for f in files] == docs


@pytest.mark.parametrize(
    "args, key, text",
    [
        (["--nodes", "2", "--gpus-per-node", "4", "--pvc", "m"], "--gpus-per-node", "world size 4"),
        (["--nodes", "3", "--pvc", "m"], "--nodes", "does not split"),
        ([], "--pvc", "--baked"),
        (["--pvc", "m", "--baked"], "--pvc", "exclude"),
        (["--pvc", "m", "--name", "Bad_Name"], "--name", "not a valid name"),
        (["--pvc", "m", "--openai-port", "8001"], "--openai-port", "8001"),
        (["--pvc", "m", "--unload-timeout", "0"], "--unload-timeout", "more than 0"),
        (["--pvc", "m", "--exit-timeout", "-1"], "--exit_timeout", "at least 0"),
    ],
)
def test_bad_options_are_named(repo4, args, key, text) -> None:
    out = cli("kubernetes", str(repo4), "--image", IMAGE, *args)
    assert_refused(out, key, text)
    assert out.stdout == ""


def test_stop_timeouts_and_histogram_latencies_pass_through_like_launch(repo1, repo4, lws_validator) -> None:
    """``--exit-timeout``/``--unload-timeout``/``--histogram-latencies`` are launch's options (one declaration,
    server/options.py): every rank gets tritonserver's ``--exit-timeout-secs`` = their sum, as ``launch`` gives
    it, the pods a grace period that outlasts it, rank 0 the latency-distribution metrics settings."""
    from repo_builder.server.command import LATENCY_DISTRIBUTIONS
    from repo_builder.server.options import LAUNCH_OPTIONS

    # defaults: launch's (5 + 20 s), no latency distributions, the 60 s grace period that already covers them
    (dep, _svc) = manifests(read_facts(repo1), KubernetesOptions(image=IMAGE, name="llama", pvc="m"))
    command = dep["spec"]["template"]["spec"]["containers"][0]["command"]
    assert "--exit-timeout-secs=25" in command and not any(a.startswith("--metrics-config") for a in command)
    assert dep["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] == 60
    # given on the command line: world size 4 on two nodes (mpirun in the leader's script), every rank
    out = cli(
        "kubernetes",
        str(repo4),
        "--image",
        IMAGE,
        "--pvc",
        "m",
        "--nodes",
        "2",
        "--exit-timeout",
        "10",
        "--unload-timeout",
        "99.5",
        "--histogram-latencies",
    )
    assert out.returncode == 0, out.stderr
    docs = list(yaml.safe_load_all(out.stdout))
    validate_all(docs, lws_validator)
    lws = by_kind(docs)["LeaderWorkerSet"]["spec"]["leaderWorkerTemplate"]
    script = lws["leaderTemplate"]["spec"]["containers"][0]["command"][2]
    mpirun = shlex.split(script.splitlines()[-1].removeprefix("exec "))
    ranks = " ".join(mpirun).split(" : ")
    assert len(ranks) == 4 and all("--exit-timeout-secs=110" in r for r in ranks)
    assert all(f"--metrics-config={s}" in ranks[0] for s in LATENCY_DISTRIBUTIONS)
    assert not any("--metrics-config" in r for r in ranks[1:])  # ranks > 0 have no metrics endpoint
    for template in ("leaderTemplate", "workerTemplate"):
        assert lws[template]["spec"]["terminationGracePeriodSeconds"] == 110 + 15
    # the help is launch's declaration: the same flags
    helptext = cli("kubernetes", "--help").stdout + cli("slurm", "--help").stdout
    for name in ("exit_timeout", "unload_timeout", "histogram_latencies"):
        assert all(helptext.count(flag) >= 2 for flag in LAUNCH_OPTIONS[name].flags), name


def test_repository_without_lock_file_is_refused(tmp_path) -> None:
    (tmp_path / "hand" / "ensemble").mkdir(parents=True)
    (tmp_path / "hand" / "ensemble" / "config.pbtxt").write_text('name: "ensemble"\n')
    out = cli("kubernetes", str(tmp_path / "hand"), "--image", IMAGE, "--baked")
    assert_refused(out, "repo-builder.lock.json")
    with pytest.raises(DeployError):
        read_facts(rendered_repo(tmp_path / "r", 1, 1)).rank_layout(1, 2)
