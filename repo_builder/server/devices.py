"""Which GPUs every rank of a launch sees and runs on: the device lines of ``repo-builder launch --dry-run``.

Facts (tensorrtllm_backend v0.19.0 docs/model_config.md; TensorRT-LLM ``WorldConfig``): the C++ backend places
an instance's ranks itself; rank r of the first instance runs on the r-th id of ``gpu_device_ids``' first group,
counted among the GPUs the rank's process can see (``CUDA_VISIBLE_DEVICES``), and without ``gpu_device_ids`` on
the GPU whose index is its local rank on its host. mpirun hands ranks on this machine its own environment;
ranks on other hosts get that host's, plus the variables exported with ``-x``.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

#: Environment variables that decide which GPUs a process sees (CUDA runtime, NVIDIA container toolkit).
DEVICE_ENV = ("CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER")


def _engine_placement(config_path: Path) -> tuple[str | None, list[int] | None, str]:
    """(backend, first gpu_device_ids group or None, instance_group text) of a tensorrt_llm model's config;
    (None, None, "") when it cannot be read (validate reports why)."""
    from ..errors import RepoBuilderError
    from ..repository.pbtxt import load_model_config, string_parameters

    try:
        cfg = load_model_config(config_path)
    except (OSError, RepoBuilderError):
        return None, None, ""
    text = string_parameters(cfg).get("gpu_device_ids", "").strip()
    ids: list[int] | None = None
    if text and not text.startswith("${"):
        try:
            ids = [int(x) for x in text.split(";")[0].split(",") if x.strip()]
        except ValueError:
            ids = None
    group = ""
    if cfg.instance_group:
        g = cfg.instance_group[0]
        kind = {1: "KIND_GPU", 2: "KIND_CPU"}.get(g.kind, "KIND_AUTO" if g.kind == 0 else str(g.kind))
        group = kind + (f" gpus [{', '.join(map(str, g.gpus))}]" if g.gpus else "")
    return cfg.backend or None, ids, group


def rank_device_lines(
    model_repo: Path,
    trtllm_model: str,
    world_size: int,
    env: Mapping[str, str],
    *,
    rank_hosts: list[str] | None = None,
    exported: tuple[str, ...] = (),
) -> list[str]:
    """One line per rank: the device environment it starts with and the GPU the engine's backend runs it on.

    Args:
        model_repo: the repository; ``trtllm_model`` is the engine's model folder in it.
        env: the environment mpirun (or the single tritonserver) starts with.
        rank_hosts: the host of each rank (``--hostfile``), None when all run here.
        exported: variables passed to remote ranks with ``mpirun -x``.
    """
    from .hostfile import is_local

    backend, ids, group = _engine_placement(Path(model_repo) / trtllm_model / "config.pbtxt")
    shown_ids = ",".join(map(str, ids)) if ids else ""
    lines = []
    per_host: dict[str, int] = {}
    for rank in range(world_size):
        host = rank_hosts[rank] if rank_hosts else "localhost"
        local = per_host.get(host, 0)
        per_host[host] = local + 1
        if rank_hosts and not is_local(host):
            given = [f"{k}={env[k]}" for k in DEVICE_ENV if k in env and k in exported]
            seen = (" ".join(given) + " (exported); otherwise " if given else "") + f"{host}'s own environment"
        else:
            given = [f"{k}={env[k]}" for k in DEVICE_ENV if k in env]
            seen = " ".join(given) if given else "CUDA_VISIBLE_DEVICES unset (every GPU of the host is visible)"
        if backend is not None and backend != "tensorrtllm":
            where = (
                f"the {backend} backend's instance ({group}): repo-builder's engine runs on that GPU, or on the CPU "
                "for KIND_CPU"
            )
        elif ids:
            where = (
                f"visible GPU {ids[rank]} (gpu_device_ids {shown_ids})"
                if rank < len(ids)
                else f"no GPU of its own (gpu_device_ids {shown_ids} lists {len(ids)})"
            )
        else:
            where = f"visible GPU {local} (its local rank on {host}; gpu_device_ids unset)"
        lines.append(f"rank {rank} devices: {seen}; {trtllm_model} runs on {where}")
    return lines
