"""Deployment facts: everything a Kubernetes manifest or a Slurm script needs, read from the lock file only.

A deployment must not disagree with what was rendered, so nothing here is read from the engine or the
configs: world size, tp/pp, the models ranks > 0 load, the Python-backend stub counts (which size
``/dev/shm``), the engine path written into the configs, the tokenizer path and the path the server sees the
repository at all come from ``repo-builder.lock.json`` (:mod:`repo_builder.lockfile`). Endpoint ports are
Triton's defaults as :class:`repo_builder.server.config.LaunchConfig` declares them; the rank layout
(rank 0 serves everything, ranks > 0 only the TensorRT-LLM model) is :mod:`repo_builder.server.command`'s.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import RepoBuilderError
from ..repository.lockfile import LOCK_NAME, read_launch, require_lock
from ..server.orchestrator import OrchestratorRanks

#: DNS-1123 label (Kubernetes object names used as pod hostnames, Slurm job names stay readable too).
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


class DeployError(RepoBuilderError):
    """A deployment cannot be generated: options contradict the lock file or each other."""


@dataclass(frozen=True)
class DeploymentFacts:
    """What the lock file of a rendered repository says about serving it.

    Attributes:
        repo: the repository folder that was read (local path).
        lock_path: its lock file.
        serve_path: absolute path the server sees the repository at (``--serve-path`` at render, else where it
            was written).
        profile: render profile (``trtllm-1.2``...).
        world_size: MPI ranks = tp x pp.
        tp_size, pp_size: tensor / pipeline parallel sizes (None in lock files that predate them).
        tensorrt_llm_models: models ranks > 0 load.
        models: every model of the repository (folders with a rendered ``config.pbtxt``), sorted.
        python_instances: {model: Python-backend stub processes}.
        llms: names of the LLMs when the repository serves several (``render --model``), else ``()``.
        engine_dirs: the engine path written into each TensorRT-LLM model's config (as the server sees it).
        engine_kind: ``trtllm``, ``hf`` (CPU reference engine) or ``synthetic`` (of the first LLM).
        tokenizer_dirs: tokenizer folders the Python models load (visible at these paths to the server).
        http_port, grpc_port, metrics_port: Triton's endpoint ports (LaunchConfig defaults).
        notes: remarks for the user (old lock file fields that were assumed).
    """

    repo: Path
    lock_path: Path
    serve_path: str
    profile: str
    world_size: int
    tp_size: int | None
    pp_size: int | None
    tensorrt_llm_models: tuple[str, ...]
    models: tuple[str, ...]
    python_instances: dict[str, int]
    llms: tuple[str, ...]
    engine_dirs: tuple[str, ...]
    engine_kind: str
    tokenizer_dirs: tuple[str, ...]
    http_port: int
    grpc_port: int
    metrics_port: int
    notes: list[str] = field(default_factory=list)
    #: the ranks of orchestrator mode (layout disaggregated on TensorRT-LLM engines; :attr:`world_size` is then
    #: every participant + 1), else None.
    orchestrator: OrchestratorRanks | None = None

    @property
    def llmapi(self) -> bool:
        """The repository is of an llmapi profile (one ``tensorrt_llm`` model over ``tensorrt_llm.LLM``): its
        ranks are started through ``trtllm-llmapi-launch`` (:data:`repo_builder.server.command.LLMAPI_LAUNCH`)."""
        from ..profile.contract import profile_layout

        try:
            return profile_layout(self.profile) == "llmapi"
        except RepoBuilderError:  # a profile this version does not know: an engine layout
            return False

    def shm_bytes(self, ranks: Iterable[int]) -> int:
        """``/dev/shm`` bytes the given ranks need together (one pod or node), by the launcher's own formula
        (:func:`repo_builder.server.preflight.shm_requirement`)."""
        from ..server.config import ModelEntry, RepositoryInfo
        from ..server.preflight import shm_requirement

        entries = [
            ModelEntry(
                name=m,
                config_path=self.repo / m / "config.pbtxt",
                backend="python" if m in self.python_instances else "",
                python_instances=self.python_instances.get(m, 0),
            )
            for m in self.models
        ]
        info = RepositoryInfo(path=self.repo, models=entries)
        return shm_requirement(info, list(self.tensorrt_llm_models), self.world_size, ranks=list(ranks))[1]

    def outside_repository(self) -> list[tuple[str, str]]:
        """``[(what, path)]`` for paths the server needs that are not under :attr:`serve_path` (they must be
        mounted or baked in separately, at the same path)."""
        out = []
        root = self.serve_path.rstrip("/") + "/"
        pairs = [("engine_dir", p) for p in self.engine_dirs] + [("tokenizer_dir", p) for p in self.tokenizer_dirs]
        for what, path in pairs:
            if path and not posixpath.normpath(path).startswith(root) and posixpath.normpath(path) != root[:-1]:
                out.append((what, path))
        return out

    def rank_layout(self, nodes: int, gpus_per_node: int | None, *, key: str = "--gpus-per-node") -> int:
        """Check ``nodes`` x ``gpus_per_node`` against the world size; returns ranks (GPUs) per node.

        ``gpus_per_node`` None means world size / nodes.

        In orchestrator mode (:attr:`orchestrator`) every rank runs on one node and the GPUs are the
        participants' (rank 0 needs none): that count is returned.

        Raises:
            DeployError: nodes < 1, the world size does not split evenly, or nodes x GPUs != world size; in
                orchestrator mode more than one node, or GPUs other than the participants.
        """
        if self.orchestrator is not None:
            gpus = self.orchestrator.gpu_count
            if nodes != 1:
                raise DeployError(
                    f"orchestrator mode (layout disaggregated) is generated for one node here, not {nodes}",
                    key="--nodes",
                    path=self.lock_path,
                    hint=f"--nodes 1: {self.world_size} ranks (the orchestrator + {gpus} engine ranks) on {gpus} GPUs",
                )
            if gpus_per_node is not None and gpus_per_node != gpus:
                raise DeployError(
                    f"{gpus_per_node} GPU(s), but the engine models have {gpus} participant(s), one GPU each",
                    key=key,
                    path=self.lock_path,
                    hint=f"drop {key} or pass {gpus}",
                )
            return gpus
        if nodes < 1:
            raise DeployError(f"--nodes must be at least 1, got {nodes}", key="--nodes")
        if gpus_per_node is None:
            if self.world_size % nodes:
                raise DeployError(
                    f"world size {self.world_size} ({LOCK_NAME} launch.world_size) does not split over {nodes} nodes",
                    key="--nodes",
                    path=self.lock_path,
                    hint="pass --nodes and --gpus-per-node with nodes x GPUs = world size",
                )
            return self.world_size // nodes
        if gpus_per_node < 1:
            raise DeployError(f"{key} must be at least 1, got {gpus_per_node}", key=key)
        if nodes * gpus_per_node != self.world_size:
            tp = f" (tp {self.tp_size} x pp {self.pp_size})" if self.tp_size and self.pp_size else ""
            raise DeployError(
                f"{nodes} node(s) x {gpus_per_node} GPU(s) = {nodes * gpus_per_node} ranks, but the "
                f"engine needs world size {self.world_size}{tp}: one rank per GPU",
                key=key,
                path=self.lock_path,
                hint="choose --nodes x --gpus-per-node = the world size",
            )
        return gpus_per_node


def read_facts(repo: str | Path) -> DeploymentFacts:
    """Read :class:`DeploymentFacts` from ``repo``'s lock file.

    Raises:
        RenderError: no repository, no lock file, or a malformed one.
        DeployError: the lock file lacks a field a deployment needs (names it).
    """
    from ..server.config import LaunchConfig

    root = Path(repo)
    lock = require_lock(root)
    path = root / LOCK_NAME
    launch = read_launch(lock, path=path)
    notes: list[str] = []
    files = lock.files
    models = lock.models
    if not models:
        raise DeployError(
            "the lock file lists no <model>/config.pbtxt", path=path, key="files", hint="re-render the repository"
        )
    missing = [m for m in launch.tensorrt_llm_model_names if m not in models]
    if missing:
        raise DeployError(
            f"ranks > 0 would load {', '.join(missing)}, which the repository does not hold",
            path=path,
            key="launch.tensorrt_llm_model_names",
            hint="re-render the repository",
        )
    if launch.python_instances is not None:
        instances = dict(launch.python_instances)
    else:
        instances = {m: 1 for m in models if f"{m}/1/model.py" in files}
        notes.append(
            f"{LOCK_NAME} predates launch.python_instances: assuming 1 instance per Python model "
            f"({', '.join(sorted(instances))}); re-render for exact /dev/shm sizes"
        )
    llms = lock.llms
    engine_dirs, tokenizer_dirs = [], []
    for llm in llms:
        engine = llm.engine
        engine_dir = engine.get("engine_dir") or engine.get("dir")
        if not isinstance(engine_dir, str) or not engine_dir:
            raise DeployError(
                "the lock file names no engine directory",
                path=path,
                key="engine.engine_dir",
                hint="re-render the repository",
            )
        engine_dirs.append(engine_dir)
        tokenizer = llm.tokenizer
        if isinstance(tokenizer.get("dir"), str) and tokenizer["dir"]:
            tokenizer_dirs.append(tokenizer["dir"])
    first_engine = llms[0].engine
    orchestrator = _orchestrator(lock, launch, path) if launch.orchestrator_world_size else None
    serve_path = lock.serve_path or str(root.absolute())
    defaults = LaunchConfig.model_fields
    return DeploymentFacts(
        repo=root,
        lock_path=path,
        serve_path=str(serve_path),
        profile=str(lock.profile),
        world_size=orchestrator.world_size if orchestrator else launch.world_size,
        tp_size=launch.tp_size,
        pp_size=launch.pp_size,
        tensorrt_llm_models=tuple(launch.tensorrt_llm_model_names),
        models=models,
        python_instances=instances,
        llms=tuple(llm.name for llm in llms if llm.name),
        engine_dirs=tuple(engine_dirs),
        engine_kind=str(first_engine.get("kind", "trtllm")),
        tokenizer_dirs=tuple(tokenizer_dirs),
        http_port=defaults["http_port"].default,
        grpc_port=defaults["grpc_port"].default,
        metrics_port=defaults["metrics_port"].default,
        notes=notes,
        orchestrator=orchestrator,
    )


def _orchestrator(lock: Any, launch: Any, path: Path) -> OrchestratorRanks:
    """The orchestrator-mode ranks from the lock file: the ``layout`` block's models and the values
    ``context_``/``generation_`` ``participant_ids`` and ``gpu_device_ids`` (:mod:`repo_builder.server.orchestrator`).

    Raises:
        DeployError: the lock file lacks the ``layout`` block or the ids do not add up (names the key).
    """
    from ..server.orchestrator import orchestrator_ranks

    layout = lock.data.get("layout") or {}
    models = layout.get("models") or {}
    if not all(isinstance(models.get(p), str) for p in ("context", "generation")):
        raise DeployError(
            "the lock file's layout block names no context and generation models",
            key="layout.models",
            path=path,
            hint="re-render the repository",
        )
    values = lock.data.get("values") or {}

    def groups(key: str) -> list[list[int]] | None:
        entry = values.get(key)
        value = entry.get("value") if isinstance(entry, dict) else None
        return [[int(i) for i in g] for g in value] if isinstance(value, list) else None

    names = {phase: models[phase] for phase in ("context", "generation")}
    return orchestrator_ranks(
        {name: groups(f"{phase}_participant_ids") for phase, name in names.items()},
        {name: groups(f"{phase}_gpu_device_ids") for phase, name in names.items()},
        engine_ranks={},  # render checked each group against its engine; the lock file has no per-phase tp x pp
        world_size=launch.orchestrator_world_size,
        error=DeployError,
        where={name: path for name in names.values()},
    )


def check_name(name: str, *, key: str = "--name", max_len: int = 40) -> str:
    """``name`` when it is a DNS-1123 label of at most ``max_len`` characters.

    LeaderWorkerSet pod names are ``<name>-<group>-<worker>`` and must stay within 63 characters, hence 40.

    Raises:
        DeployError: not a lowercase DNS label or too long.
    """
    if len(name) > max_len or not _DNS_LABEL.match(name):
        raise DeployError(
            f"'{name}' is not a valid name: lowercase letters, digits and '-', starting and ending "
            f"with a letter or digit, at most {max_len} characters",
            key=key,
        )
    return name


def default_name(repo: Path) -> str:
    """A DNS-1123 name from the repository's folder name (``My_Repo`` -> ``my-repo``), ``triton`` if none."""
    base = re.sub(r"[^a-z0-9-]+", "-", Path(repo).absolute().name.lower()).strip("-")[:40].strip("-")
    return base or "triton"


def check_stop_timeouts(exit_timeout: float, unload_timeout: float) -> None:
    """``--exit-timeout`` / ``--unload-timeout`` within the bounds ``launch`` declares for them
    (:data:`repo_builder.server.options.LAUNCH_OPTIONS`).

    Raises:
        DeployError: a value out of bounds, naming its option.
    """
    from ..server.options import LAUNCH_OPTIONS

    for name, value in (("exit_timeout", exit_timeout), ("unload_timeout", unload_timeout)):
        spec = LAUNCH_OPTIONS[name]
        low = spec.ge if spec.ge is not None else spec.gt
        if (spec.ge is not None and value < spec.ge) or (spec.gt is not None and value <= spec.gt):
            relation = "at least" if spec.ge is not None else "more than"
            raise DeployError(f"{spec.flag} must be {relation} {low:g} seconds, got {value:g}", key=spec.flag)
