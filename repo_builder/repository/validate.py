"""``repo-builder validate``: lint a Triton model repository (rendered by repo-builder or by hand).

Checks (one :class:`Problem` per finding, each with the file and, where known, the line):

* every model folder has a ``config.pbtxt`` that protobuf's text format parses into
  ``tritonclient.grpc.model_config_pb2.ModelConfig`` (the parse error's line is reported);
* no ``${...}`` anywhere (one problem per unfilled placeholder with its line, even when the file does
  not parse: NVIDIA's ``fill_template.py`` leaves unknown placeholders in place);
* ``name`` matches the folder; no input or output declared twice;
* ensembles: every ``input_map``/``output_map`` entry exists on its step model with the same dtype (dtypes
  of ensemble tensors come from the ensemble's declared inputs/outputs and the producing step's outputs),
  every non-optional input of each step model is fed, every ensemble output is produced by exactly one
  step, every step model exists;
* the TRT-LLM model has one instance (case B10); the BLS's ``tensorrt_llm_model_name`` is a model of the repository;
* layout disaggregated (``disaggregated_serving_bls``): the context and generation models exist and pass
  ``context_phase_params``, their ids agree, no ensemble step skips the BLS;
* ``gpt_model_path``/``engine_dir``/``encoder_model_path`` and ``tokenizer_dir`` parameters name existing
  directories (a tokenizer dir must hold tokenizer files, case B22); paths under the lock file's
  ``serve_path`` (or ``served_at``) are looked up inside the repository;
* with a lock file: the sha256 of every rendered file matches (each changed or missing file is reported);
* a model with ``1/model.yaml`` (the llmapi profiles): every key typed by the schema, ``triton_config`` against
  config.pbtxt, the runtime limits against the checkpoint (:mod:`.validate_llmapi`);
* with ``engine_dir`` (also for repositories repo-builder did not render): contradictions between the
  TRT-LLM model's config and the engine's ``config.json`` (batch size, beam width, streaming with beam
  search, logits dtype, KV-cache reuse and chunked context preconditions, in-flight batching without
  paged KV cache / packed input / GPT attention plugin, rank files, the python backend without decoupled mode
  (B29), and, with the tokenizer ``tokenizer_dir`` names, a vocabulary larger than the engine's): the rule
  table of :mod:`repo_builder.values.rules`, as render checks them.

The pieces: :mod:`.validate_models` (the models as read), :mod:`.validate_checks` (the checks above that need
no engine), :mod:`.validate_engine` (the engine cross-check); this module runs them.
"""

from __future__ import annotations

from pathlib import Path

from .validate_checks import (
    backend_reads,
    check_backend_reads,
    check_disaggregated,
    check_ensemble,
    check_lock,
    check_model,
    check_paths,
    check_structure,
)
from .validate_engine import check_against_engine, check_placement_with_lock, repository_values
from .validate_llmapi import check_llmapi_models
from .validate_models import ENGINE_PATH_KEYS, Problem, RepoModel, load_models, lock_or_none, trtllm_models


def validate_repository(
    repo: str | Path,
    *,
    engine_dir: str | Path | None = None,
    served_at: str | Path | None = None,
    warnings: bool = False,
    file_hashes: bool = True,
) -> list[Problem]:
    """Lint the Triton model repository ``repo``; returns the problems found (empty = valid).

    Args:
        warnings: also return findings of severity ``"warning"`` (the CLI prints them; they do not make the
            repository invalid).
        repo: the repository directory.
        engine_dir: an engine directory to cross-check the TRT-LLM model's config against.
        served_at: the path the server will see the repository at, when it differs from ``repo`` (the
            lock file's ``serve_path`` is used by default); parameters pointing below it are checked inside ``repo``.
        file_hashes: compare every file listed in the lock file with its sha256 (False: only that it exists;
            render, which has just written the files from the bytes it hashed, skips reading them back).
    Raises:
        RepoBuilderError: ``repo`` is not a directory; EngineError from inspecting ``engine_dir``.
    """
    from ..errors import RepoBuilderError

    root = Path(repo)
    if not root.is_dir():
        raise RepoBuilderError("not a directory", path=root, hint="pass the model repository folder")
    problems: list[Problem] = []
    lock = check_lock(root, problems, hashes=file_hashes)
    if served_at is None and lock is not None and lock.serve_path:
        served_at = lock.serve_path
    served = Path(served_at) if served_at is not None else root.absolute()
    models = load_models(root, problems)
    if not models:
        problems.append(Problem(".", "no model folders with config.pbtxt"))
    for m in models.values():
        if m.config is None:
            continue
        check_model(m, problems)
        check_paths(m, root, served, problems)
        if m.config.platform == "ensemble":
            check_ensemble(m, models, problems)
    check_structure(models, problems)
    check_disaggregated(models, problems)
    check_backend_reads(models, lock, problems)
    llmapi = check_llmapi_models(root, models, lock, served, engine_dir)  # the llmapi profiles: model.yaml
    if llmapi is not None:
        problems.extend(llmapi)
    elif engine_dir is not None:
        problems.extend(check_against_engine(models, engine_dir, root=root, served_at=served))
    elif lock is not None:
        problems.extend(check_placement_with_lock(models, lock))
    if not warnings:
        problems = [p for p in problems if p.severity == "error"]
    return problems


def text_unreachable_inputs(repo: str | Path) -> list[tuple[str, str]]:
    """The engine model's inputs a text client cannot reach: those of the TensorRT-LLM model that no step of the
    ensemble feeds (the BLS follows the same wiring), as (input, why) in declaration order; the reasons come from
    the contract's ``backend_reads.text_unreachable``. Empty without an ensemble or an engine model."""
    root = Path(repo)
    models = load_models(root, [])
    targets = trtllm_models(models)
    ens = next((m for m in models.values() if m.config is not None and m.config.platform == "ensemble"), None)
    if not targets or ens is None:
        return []
    reads = backend_reads(lock_or_none(root))
    why = reads.text_unreachable if reads is not None else {}
    out: list[tuple[str, str]] = []
    for m in targets:
        fed = {k for step in ens.cfg.ensemble_scheduling.step if step.model_name == m.name for k in step.input_map}
        for t in m.cfg.input:
            if t.name not in fed:
                out.append((t.name, why.get(t.name, "the ensemble does not wire it")))
    return out


__all__ = [
    "ENGINE_PATH_KEYS",
    "Problem",
    "RepoModel",
    "check_against_engine",
    "check_placement_with_lock",
    "load_models",
    "repository_values",
    "text_unreachable_inputs",
    "validate_repository",
]
