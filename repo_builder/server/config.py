"""Launch options (:class:`LaunchConfig`) and what the launcher reads from a model repository.

Each field of :class:`LaunchConfig` is one ``repo-builder launch`` option; the CLI takes its help text from
the field descriptions. Flag names follow NVIDIA's ``scripts/launch_triton_server.py`` (``--world_size``,
``--model_repo``, ...; triton-inference-server/tensorrtllm_backend v0.5.0 to commit c2e65b8, then
NVIDIA/TensorRT-LLM ``triton_backend/scripts/launch_triton_server.py``) so existing command lines keep working.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ..errors import LaunchError
from ..repository.lockfile import LOCK_NAME, read_lock_view
from ..repository.pbtxt import ModelFolder, python_instances, read_model_folders
from .options import HELP, LAUNCH_OPTIONS
from .orchestrator import OrchestratorRanks

DEFAULT_TRTLLM_MODEL = "tensorrt_llm"


def _field(name: str) -> Any:
    """The pydantic field of launch option ``name`` (:data:`~repo_builder.server.options.LAUNCH_OPTIONS`)."""
    return LAUNCH_OPTIONS[name].pydantic()


class LaunchConfig(BaseModel):
    """Everything needed to start tritonserver on a repository (one field per ``repo-builder launch`` option)."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    model_repo: Path = Field(description=HELP["model_repo"])
    world_size: int | None = _field("world_size")
    tritonserver: str | None = _field("tritonserver")
    http_port: int = _field("http_port")
    grpc_port: int = _field("grpc_port")
    metrics_port: int = _field("metrics_port")
    http_address: str = _field("http_address")
    log: bool = _field("log")
    log_file: Path | None = _field("log_file")
    force: bool = _field("force")
    multi_model: bool = _field("multi_model")
    no_mpi: bool = _field("no_mpi")
    oversubscribe: bool = _field("oversubscribe")
    trtllm_llmapi_launch: bool = _field("trtllm_llmapi_launch")
    tensorrt_llm_model_name: list[str] | None = _field("tensorrt_llm_model_name")
    detach: bool = _field("detach")
    pid_file: Path | None = _field("pid_file")
    timeout: float = _field("timeout")
    stop_timeout: float = _field("stop_timeout")
    exit_timeout: int = _field("exit_timeout")
    server_args: list[str] = _field("server_args")
    hostfile: Path | None = _field("hostfile")
    openai_port: int | None = _field("openai_port")
    unload_timeout: float = _field("unload_timeout")
    histogram_latencies: bool = _field("histogram_latencies")

    @field_validator("tensorrt_llm_model_name", mode="before")
    @classmethod
    def _split_names(cls, value: object) -> object:
        if isinstance(value, str):
            value = [value]
        if isinstance(value, list):
            names = [n.strip() for item in value for n in str(item).split(",") if n.strip()]
            return names or None
        return value


@dataclass(frozen=True)
class ModelEntry:
    """One model of a repository.

    Attributes:
        name: the model folder name (Triton's model name).
        config_path: its ``config.pbtxt``.
        backend: ``backend`` (or ``platform`` when backend is empty) from the config.
        python_instances: number of Python-backend stub processes it starts (0 for other backends);
            from ``instance_group`` ``count`` (default 1) times the number of listed GPUs, at least 1 group.
    """

    name: str
    config_path: Path
    backend: str
    python_instances: int


@dataclass(frozen=True)
class RepositoryInfo:
    """What the launcher needs to know about a repository: its models and its lock file's launch block."""

    path: Path
    models: list[ModelEntry]
    lock_world_size: int | None = None
    lock_model_names: list[str] | None = None
    lock_orchestrator_world_size: int | None = None
    lock_path: Path | None = None
    engine_world_sizes: dict[str, tuple[int, Path]] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    #: {tensorrtllm-backend model: (participant_ids, gpu_device_ids) as written in its config} (orchestrator mode)
    engine_ids: dict[str, tuple[str, str]] = field(default_factory=dict)

    @property
    def trtllm_backend_models(self) -> list[str]:
        """Models served by the C++ TensorRT-LLM backend (``backend: "tensorrtllm"``)."""
        return [m.name for m in self.models if m.backend == "tensorrtllm"]

    @property
    def model_names(self) -> list[str]:
        """Names of every model (folder with a ``config.pbtxt``), sorted."""
        return [m.name for m in self.models]


#: ``parameters`` keys of a tensorrtllm-backend model that name its engine directory (``gpt_model_path`` before
#: TRT-LLM 0.9 templates, ``engine_dir`` in the python-backend and newer templates).
ENGINE_DIR_KEYS = ("engine_dir", "gpt_model_path")


def _engine_world_size(cfg: object, config_path: Path, warnings: list[str]) -> tuple[int, Path] | None:
    """World size (tp x pp) of the engine a tensorrtllm-backend config points at, if it can be read here."""
    params = cfg.parameters  # type: ignore[attr-defined]
    for key in ENGINE_DIR_KEYS:
        if key not in params:
            continue
        value = params[key].string_value
        if not value or "${" in value:
            continue
        engine_dir = Path(value)
        if not engine_dir.is_absolute():
            engine_dir = config_path.parent / engine_dir
        if not engine_dir.is_dir():
            warnings.append(
                f"{config_path}: {key} {value} is not a directory here; world size not checked against the engine"
            )
            return None
        from ..engine import inspect_engine
        from ..errors import RepoBuilderError

        try:
            info = inspect_engine(engine_dir)
        except RepoBuilderError as exc:
            warnings.append(f"cannot read the engine's world size: {exc}")
            return None
        return info.world_size, info.config_file
    return None


def _refuse_stray_folders(repo: Path, folders: list[ModelFolder], any_model: bool) -> None:
    """Refuse a repository that has model folders (``any_model``) beside folders holding no config.pbtxt
    (``folders``: :func:`repo_builder.repository.pbtxt.read_model_folders` entries, ``unreadable == "missing"``).

    Raises:
        LaunchError: names the stray folder(s) and the first one's path.
    """
    stray = [f.name for f in folders if f.unreadable == "missing"]
    if stray and any_model:
        # tritonserver polls every folder of the repository and refuses to start over one without a config
        # (2.51 with --disable-auto-complete-config: "Poll failed for model directory 'X': failed to open text
        # file for read .../config.pbtxt", then "failed to load all models"); checked here, before anything starts
        raise LaunchError(
            f"model folder(s) {', '.join(stray)} hold no config.pbtxt: tritonserver treats every folder of the "
            "repository as a model and would refuse to start (Poll failed for model directory "
            f"'{stray[0]}')",
            path=repo / stray[0],
            key="--model_repo",
            hint="move the folder out of the repository, or give it a config.pbtxt (`repo-builder validate` lists "
            "such problems)",
        )


def scan_repository(repo: Path) -> RepositoryInfo:
    """Parse every ``<repo>/<model>/config.pbtxt``, the lock file, and the world size of tensorrtllm engines.

    Configs are read by :func:`repo_builder.repository.pbtxt.read_model_folders` (parsed into
    ``tritonclient.grpc.model_config_pb2.ModelConfig``, the message tritonserver itself reads them into), the lock
    file by :func:`repo_builder.repository.lockfile.read_lock_view` (leniently: a hand-made ``launch`` block is
    enough).

    Raises:
        LaunchError: the repository does not exist, holds no ``config.pbtxt``, a config is unreadable or does
            not parse, or the lock file is not valid JSON / has a malformed ``launch`` block (names
            ``launch.<key>``).
    """
    repo = Path(repo)
    if not repo.is_dir():
        raise LaunchError(
            "model repository does not exist or is not a directory",
            path=repo,
            key="--model_repo",
            hint="render one with `repo-builder render` or pass the right path",
        )
    models: list[ModelEntry] = []
    warnings: list[str] = []
    engine_ws: dict[str, tuple[int, Path]] = {}
    engine_ids: dict[str, tuple[str, str]] = {}
    folders = read_model_folders(repo)
    for folder in folders:
        if folder.unreadable == "missing":
            continue
        cfg = folder.config
        if cfg is None:
            why = folder.error.message if folder.error is not None else folder.unreadable
            raise LaunchError(
                f"config does not parse: {why}", path=folder.path, hint="run `repo-builder validate` on the repository"
            )
        backend = cfg.backend or cfg.platform
        if cfg.backend == "tensorrtllm":
            found = _engine_world_size(cfg, folder.path, warnings)
            if found is not None:
                engine_ws[folder.name] = found
            params = cfg.parameters
            engine_ids[folder.name] = tuple(  # type: ignore[assignment]
                params[k].string_value if k in params else "" for k in ("participant_ids", "gpu_device_ids")
            )
        models.append(
            ModelEntry(
                name=folder.name,
                config_path=folder.path,
                backend=backend,
                python_instances=python_instances(cfg) if cfg.backend == "python" else 0,
            )
        )
    _refuse_stray_folders(repo, folders, bool(models))
    if not models:
        raise LaunchError(
            "model repository holds no <model>/config.pbtxt",
            path=repo,
            key="--model_repo",
            hint="pass the folder that contains the model folders",
        )
    lock = read_lock_view(repo, error=LaunchError)
    launch = lock.launch if lock is not None else None
    return RepositoryInfo(
        path=repo,
        models=models,
        lock_world_size=launch.world_size if launch else None,
        lock_model_names=(launch.tensorrt_llm_model_names or None) if launch else None,
        lock_orchestrator_world_size=launch.orchestrator_world_size if launch else None,
        lock_path=lock.path if launch and lock else None,
        engine_world_sizes=engine_ws,
        warnings=warnings,
        engine_ids=engine_ids,
    )


@dataclass(frozen=True)
class LaunchPlan:
    """The resolved launch: world size, TensorRT-LLM model names, whether mpirun is used and why."""

    world_size: int
    world_size_origin: str
    trtllm_models: list[str]
    use_mpi: bool
    oversubscribe: bool
    notes: list[str] = field(default_factory=list)
    #: host of every rank when launched with ``--hostfile`` (rank 0 first), else None (all on this machine).
    rank_hosts: list[str] | None = None
    #: the ranks of orchestrator mode (layout disaggregated on TensorRT-LLM engines), else None.
    orchestrator: OrchestratorRanks | None = None


# Over 80 lines on purpose: one chain of launch decisions (world size, model names, hosts, mpirun), each refusing
# with its own case; the parts share the repository scan and the config.
def resolve_plan(config: LaunchConfig, repo: RepositoryInfo, *, cpu_count: int, have_mpirun: bool) -> LaunchPlan:
    """Decide world size, rank > 0 models and mpirun use from the options and the repository.

    World size: ``--world_size`` if given, else the lock file's ``launch.world_size``, else the tp x pp of the
    engine a ``backend: "tensorrtllm"`` model points at (``engine_dir``), else 1. A world size that differs
    from the lock file or from the engine is refused (case B12: a world size that does not match the engine's
    tp x pp makes every rank abort with ``mpiSize == tp * pp``). Ranks > 0 load ``--tensorrt_llm_model_name``,
    else the lock file's names, else every tensorrtllm-backend model, else ``tensorrt_llm``.

    Raises:
        LaunchError: world size contradicts the lock file or the engine; ``--no-mpi`` or ``--multi-model``
            with world size > 1; a bad ``--hostfile`` (see :mod:`.hostfile`), too few slots, or its first host
            is not this machine; a ``--tensorrt_llm_model_name`` is not in the repository; mpirun is needed but
            not installed.
    """
    notes: list[str] = list(repo.warnings)
    orchestrator = _orchestrator(config, repo) if repo.lock_orchestrator_world_size else None
    engine_sizes = {ws for ws, _ in repo.engine_world_sizes.values()}
    if len(engine_sizes) > 1 and orchestrator is None:  # orchestrator mode: each engine has its own participants
        detail = ", ".join(f"{m}: {ws} ({path})" for m, (ws, path) in sorted(repo.engine_world_sizes.items()))
        raise LaunchError(
            f"the TensorRT-LLM engines need different world sizes: {detail}",
            path=repo.path,
            hint="serve engines built with the same tp x pp in one repository",
        )
    engine = next(iter(repo.engine_world_sizes.values()), None)
    if orchestrator is not None:  # the engines' ranks were checked against their participants
        engine = None
        world_size, origin = orchestrator.world_size, f"{LOCK_NAME} launch.orchestrator_world_size"
    elif config.world_size is not None:
        world_size, origin = config.world_size, "--world_size"
        if repo.lock_world_size is not None and repo.lock_world_size != config.world_size:
            raise LaunchError(
                f"--world_size {config.world_size} contradicts the repository's lock file, which says the engine "
                f"needs world size {repo.lock_world_size} (tensor x pipeline parallel)",
                path=repo.lock_path,
                key="launch.world_size",
                hint=f"drop --world_size or pass --world_size {repo.lock_world_size}; re-render if the engine changed",
            )
    elif repo.lock_world_size is not None:
        world_size, origin = repo.lock_world_size, f"{LOCK_NAME} launch.world_size"
    elif engine is not None:
        world_size, origin = engine[0], f"engine {engine[1]}"
    else:
        world_size, origin = 1, "default"
    if engine is not None and engine[0] != world_size:
        raise LaunchError(
            f"the engine was built for world size {engine[0]} (tp x pp), but the launch would start "
            f"{world_size} rank(s) ({origin}); every rank would abort with 'mpiSize == tp * pp'",
            path=engine[1],
            key="--world_size",
            hint=f"launch with --world_size {engine[0]} (re-render if the lock file is stale)",
        )
    if config.no_mpi and world_size != 1:
        raise LaunchError(
            f"--no-mpi runs a single tritonserver, but the world size is {world_size} ({origin})",
            key="--no-mpi",
            hint="drop --no-mpi (mpirun starts one rank per engine shard)",
        )
    if config.multi_model and world_size != 1 and orchestrator is None:
        raise LaunchError(
            f"--multi-model (orchestrator mode) needs world size 1, got {world_size} ({origin})",
            key="--multi-model",
            hint="orchestrator mode spawns the engine ranks itself",
        )
    if config.tensorrt_llm_model_name:
        names, names_key = list(config.tensorrt_llm_model_name), "--tensorrt_llm_model_name"
    elif repo.lock_model_names:
        names, names_key = list(repo.lock_model_names), f"{LOCK_NAME} launch.tensorrt_llm_model_names"
    elif repo.trtllm_backend_models:
        names, names_key = repo.trtllm_backend_models, "backend tensorrtllm models"
    else:
        names, names_key = [DEFAULT_TRTLLM_MODEL], "--tensorrt_llm_model_name"
    if world_size > 1:
        missing = [n for n in names if n not in repo.model_names]
        if missing:
            raise LaunchError(
                f"ranks > 0 must load {', '.join(missing)}, which the repository does not hold "
                f"(models: {', '.join(repo.model_names)})",
                key=names_key,
                path=repo.path,
                hint="pass --tensorrt_llm_model_name with the TensorRT-LLM model folder name(s)",
            )
    hosts = None
    if config.hostfile is not None:
        from .hostfile import is_local, rank_hosts, read_hostfile

        if config.no_mpi:
            raise LaunchError(
                "--hostfile spreads ranks with mpirun, but --no-mpi was given", key="--no-mpi", hint="drop --no-mpi"
            )
        hosts = rank_hosts(read_hostfile(config.hostfile), world_size, path=config.hostfile)
        if not is_local(hosts[0]):
            raise LaunchError(
                f"rank 0 (the endpoints) would run on {hosts[0]}, the first host of the hostfile, "
                "which is not this machine; the launcher waits for readiness here",
                key="--hostfile",
                path=config.hostfile,
                hint="list this machine first, or launch from that host",
            )
    use_mpi = not config.no_mpi
    if hosts is not None and not have_mpirun:
        raise LaunchError(
            "--hostfile needs mpirun, which is not on PATH", key="--hostfile", hint="apt-get install openmpi-bin"
        )
    if use_mpi and not have_mpirun:
        if world_size == 1:
            use_mpi = False
            notes.append("mpirun not found: starting the single rank without MPI (as --no-mpi)")
        else:
            raise LaunchError(
                f"world size {world_size} needs mpirun, which is not on PATH",
                key="--world_size",
                hint="apt-get install openmpi-bin",
            )
    oversubscribe = config.oversubscribe
    if use_mpi and not oversubscribe and hosts is None and world_size > cpu_count:
        oversubscribe = True
        notes.append(f"{world_size} ranks > {cpu_count} CPU cores: adding --oversubscribe to mpirun")
    return LaunchPlan(
        world_size=world_size,
        world_size_origin=origin,
        trtllm_models=names,
        use_mpi=use_mpi,
        oversubscribe=oversubscribe,
        notes=notes,
        rank_hosts=hosts,
        orchestrator=orchestrator,
    )


def _orchestrator(config: LaunchConfig, repo: RepositoryInfo) -> OrchestratorRanks:
    """The ranks of an orchestrator-mode repository (lock file ``launch.orchestrator_world_size``), from the
    engine models' ``participant_ids``/``gpu_device_ids`` (:mod:`.orchestrator`).

    Raises:
        LaunchError: ``--world_size`` or ``--no-mpi`` contradicts the lock file; the ids do not add up (names the
            model's key, see :func:`.orchestrator.orchestrator_ranks`).
    """
    from .orchestrator import orchestrator_ranks, parse_groups

    world = repo.lock_orchestrator_world_size
    if config.world_size is not None and config.world_size != world:
        raise LaunchError(
            f"--world_size {config.world_size} contradicts the repository's lock file: orchestrator mode needs "
            f"world size {world} (every engine rank of both phases + the orchestrator)",
            path=repo.lock_path,
            key="launch.orchestrator_world_size",
            hint=f"drop --world_size or pass --world_size {world}",
        )
    if config.no_mpi:
        raise LaunchError(
            f"--no-mpi runs a single tritonserver, but orchestrator mode needs {world} MPI ranks",
            key="--no-mpi",
            hint="drop --no-mpi",
        )
    names = list(config.tensorrt_llm_model_name or repo.lock_model_names or repo.trtllm_backend_models)
    missing = [n for n in names if n not in repo.engine_ids]
    if missing:
        raise LaunchError(
            f"{missing[0]} is not a TensorRT-LLM (backend tensorrtllm) model of the repository",
            key="launch.tensorrt_llm_model_names",
            path=repo.lock_path,
        )
    where = {n: next(m.config_path for m in repo.models if m.name == n) for n in names}
    try:
        groups = {n: parse_groups(repo.engine_ids[n][0]) for n in names}
        gpus = {n: parse_groups(repo.engine_ids[n][1]) for n in names}
    except ValueError as exc:
        raise LaunchError(f"an id is not an integer: {exc}", key="participant_ids", path=repo.path) from exc
    return orchestrator_ranks(
        groups,
        gpus,
        engine_ranks={n: ws for n, (ws, _) in repo.engine_world_sizes.items()},
        world_size=world,
        error=LaunchError,
        where=where,
    )
