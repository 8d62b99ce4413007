"""A local launch's rank command lines and environment, from its options, plan and tritonserver binary
(:meth:`repo_builder.server.process.TritonServer.prepare`; the pure command builders are in :mod:`.command`)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from ..errors import LaunchError
from .binary import TritonBinary
from .command import rank_argv
from .config import LaunchConfig, LaunchPlan
from .options import server_exit_timeout


def rank_argvs(cfg: LaunchConfig, binary: TritonBinary, plan: LaunchPlan, launch_id: str) -> list[list[str]]:
    """Every rank's argv (``plan.world_size`` of them), each behind ``trtllm-llmapi-launch`` with
    ``--trtllm_llmapi_launch``.

    Raises:
        LaunchError: ``--trtllm_llmapi_launch`` and ``trtllm-llmapi-launch`` is not on the binary's PATH.
    """
    repo_path = Path(os.path.abspath(cfg.model_repo))
    ranks = [
        rank_argv(
            binary=binary.path,
            backend_args=binary.server_args(),
            model_repo=repo_path,
            rank=r,
            launch_id=launch_id,
            http_address=cfg.http_address,
            http_port=cfg.http_port,
            grpc_port=cfg.grpc_port,
            metrics_port=cfg.metrics_port,
            trtllm_models=plan.trtllm_models,
            verbose=cfg.log,
            extra_args=cfg.server_args,
            # tritonserver counts in-flight requests and unloads against one timer; the stop bounds each
            exit_timeout=server_exit_timeout(cfg.exit_timeout, cfg.unload_timeout),
            histogram_latencies=cfg.histogram_latencies,
        )
        for r in range(plan.world_size)
    ]
    if cfg.trtllm_llmapi_launch:
        from .command import LLMAPI_LAUNCH

        if shutil.which(LLMAPI_LAUNCH, path=binary.environ().get("PATH")) is None:
            raise LaunchError(
                f"{LLMAPI_LAUNCH} is not on PATH",
                key="--trtllm_llmapi_launch",
                hint="it ships with TensorRT-LLM (the -trtllm-python-py3 containers); drop the flag elsewhere",
            )
        ranks = [[LLMAPI_LAUNCH, *argv] for argv in ranks]
    return ranks


def launch_env(cfg: LaunchConfig, binary: TritonBinary, plan: LaunchPlan) -> dict[str, str]:
    """The variables the launch sets for every rank (exported through mpirun): the binary's own, plus
    ``TRTLLM_ORCHESTRATOR=1`` for ``--multi-model`` and the orchestrator's for a disaggregated plan."""
    env = dict(binary.env)
    if cfg.multi_model:
        env["TRTLLM_ORCHESTRATOR"] = "1"
    if plan.orchestrator is not None:  # --multi-model --disable-spawn-processes (server/orchestrator.py)
        from .orchestrator import ORCHESTRATOR_ENV

        env.update(ORCHESTRATOR_ENV)
    return env
