"""Orchestrator mode without spawned processes: the ranks of a disaggregated repository (``render --layout
disaggregated`` on a TensorRT-LLM engine), for ``repo-builder launch`` and the deploy generators.

Facts (triton-inference-server/tensorrtllm_backend v0.19.0 ``all_models/disaggregated_serving/README.md`` and
``scripts/launch_triton_server.py``): the launch is ``--world_size W --tensorrt_llm_model_name context,generation
--multi-model --disable-spawn-processes``; the script then sets ``TRTLLM_ORCHESTRATOR=1`` and
``TRTLLM_ORCHESTRATOR_SPAWN_PROCESSES=0`` and starts W tritonserver ranks under mpirun, rank 0 with the whole
repository, every other rank loading the engine models only. "World size should be equal to tp*pp of context
model + tp*pp of generation model + 1": rank 0 is the orchestrator, and every engine rank of every instance is
one MPI rank named in its model's ``participant_ids`` (``"1,2;3,4"``: ``;`` between instances), running on the
GPU at the same place of ``gpu_device_ids``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from ..errors import RepoBuilderError

#: The environment NVIDIA's launch script sets for ``--multi-model --disable-spawn-processes``.
ORCHESTRATOR_ENV = {"TRTLLM_ORCHESTRATOR": "1", "TRTLLM_ORCHESTRATOR_SPAWN_PROCESSES": "0"}


@dataclass(frozen=True)
class ParticipantRank:
    """One MPI rank that runs an engine rank.

    Attributes:
        rank: the MPI rank (>= 1).
        model: the engine model (``context``, ``generation``).
        instance: which ``;`` group of ``participant_ids``.
        engine_rank: the rank inside the engine (0 .. tp x pp - 1).
        gpu: the ``gpu_device_ids`` entry at the same place, None when unset.
    """

    rank: int
    model: str
    instance: int
    engine_rank: int
    gpu: int | None


@dataclass(frozen=True)
class OrchestratorRanks:
    """Every rank of an orchestrator-mode launch: rank 0 plus :attr:`participants` (sorted by rank)."""

    world_size: int
    participants: tuple[ParticipantRank, ...]

    @property
    def gpu_count(self) -> int:
        """GPUs the engine ranks need (one each; the orchestrator runs none)."""
        return len(self.participants)

    def lines(self) -> list[str]:
        """One line per rank, as ``launch --dry-run`` and the deploy generators show them."""
        out = [f"rank 0: orchestrator (every model, HTTP/gRPC/metrics; no engine rank), world size {self.world_size}"]
        for p in self.participants:
            gpu = f"GPU {p.gpu}" if p.gpu is not None else "GPU: gpu_device_ids unset"
            out.append(
                f"rank {p.rank}: {p.model} participant (instance {p.instance}, engine rank {p.engine_rank}), {gpu}"
            )
        return out


def parse_groups(text: str | None) -> list[list[int]] | None:
    """``"1,2;3,4"`` -> ``[[1, 2], [3, 4]]``; None for unset (empty or a ``${...}`` placeholder).

    Raises:
        ValueError: an entry is not an integer.
    """
    if text is None or not text.strip() or text.strip().startswith("${"):
        return None
    return [[int(x) for x in g.split(",") if x.strip()] for g in text.split(";") if g.strip()]


def _model_participants(
    model: str,
    groups: list[list[int]] | None,
    gpus: list[list[int]] | None,
    ranks: int | None,
    seen: dict[int, str],
    *,
    error: Callable[..., RepoBuilderError],
    path: str | Path | None,
) -> list[ParticipantRank]:
    """The ranks of one engine model: ``groups`` its participant ids (one group per instance), ``gpus`` its
    gpu_device_ids (None: unset), ``ranks`` its engine's tp x pp (None: unknown). ``seen`` ({rank: model} of
    the models before) gets this model's ranks added.

    Raises:
        ``error`` (naming ``<model> participant_ids`` or ``<model> gpu_device_ids`` and ``path``): no groups, a
        group that is not one id per engine rank, GPU ids of another shape, rank 0 or a rank used twice.
    """
    if not groups:
        raise error(
            f"{model} has no participant_ids: in orchestrator mode without spawned processes every engine rank "
            "is an MPI rank named there",
            key=f"{model} participant_ids",
            path=path,
            hint="re-render with --layout disaggregated (it computes them) or set them",
        )
    for group in groups:
        if ranks is not None and len(group) != ranks:
            raise error(
                f"{model}'s participant_ids group {group} lists {len(group)} rank(s); its engine has {ranks} (tp x pp)",
                key=f"{model} participant_ids",
                path=path,
            )
    if gpus is not None and [len(g) for g in gpus] != [len(g) for g in groups]:
        raise error(
            f"{model}'s gpu_device_ids {gpus} do not list one GPU per participant of {groups}",
            key=f"{model} gpu_device_ids",
            path=path,
        )
    out: list[ParticipantRank] = []
    for instance, group in enumerate(groups):
        for engine_rank, rank in enumerate(group):
            if rank < 1 or rank in seen:
                why = "rank 0 is the orchestrator" if rank < 1 else f"rank {rank} is also a participant of {seen[rank]}"
                raise error(f"{model}'s participant_ids: {why}", key=f"{model} participant_ids", path=path)
            seen[rank] = model
            gpu = gpus[instance][engine_rank] if gpus is not None else None
            out.append(ParticipantRank(rank, model, instance, engine_rank, gpu))
    return out


def orchestrator_ranks(
    participant_ids: Mapping[str, list[list[int]] | None],
    gpu_device_ids: Mapping[str, list[list[int]] | None],
    *,
    engine_ranks: Mapping[str, int],
    world_size: int | None,
    error: Callable[..., RepoBuilderError],
    where: Mapping[str, str | Path] | None = None,
    world_key: str = "launch.orchestrator_world_size",
) -> OrchestratorRanks:
    """Check the engine models' ids and lay out the ranks.

    Args:
        participant_ids, gpu_device_ids: {engine model: id groups (one per instance) or None when unset}.
        engine_ranks: {engine model: tp x pp of its engine}, where known.
        world_size: the world size recorded (the lock file's ``launch.orchestrator_world_size``), or None.
        error: the error class to raise (LaunchError, DeployError).
        where: {engine model: the file its ids come from} for the messages.

    Raises:
        ``error``: a model without participant ids (names ``<model> participant_ids``), a group that is not one id
        per engine rank, rank 0 or a rank used twice, ids that leave a gap below the world size, GPU ids of
        another shape, or a world size other than participants + 1 (names ``world_key``).
    """
    where = where or {}
    seen: dict[int, str] = {}
    out: list[ParticipantRank] = []
    for model, groups in participant_ids.items():
        out += _model_participants(
            model, groups, gpu_device_ids.get(model), engine_ranks.get(model), seen, error=error, path=where.get(model)
        )
    world = len(out) + 1
    gap = sorted(set(range(1, world)) - set(seen))
    if gap:
        raise error(
            f"the participant ids {sorted(seen)} leave rank(s) {gap} without an engine rank; MPI ranks are 0 .. "
            f"world size - 1 = {world - 1}",
            key=f"{next(iter(participant_ids))} participant_ids",
            path=where.get(next(iter(participant_ids))),
            hint="number the participants 1 .. N without gaps",
        )
    if world_size is not None and world_size != world:
        raise error(
            f"world size {world_size} is not the {len(out)} participant(s) + 1 (the orchestrator) = {world}",
            key=world_key,
            hint="re-render the repository",
        )
    return OrchestratorRanks(world, tuple(sorted(out, key=lambda p: p.rank)))
