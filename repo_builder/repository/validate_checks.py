"""The checks of ``validate`` that need no engine: each model's config (name, placeholders, tensors),
ensemble wiring and dtypes, path parameters, the repository's structure (B10, the BLS's model name), the
disaggregated layout, the lock file's hashes and the dtypes NVIDIA's C++ backend reads. Each appends
:class:`~.validate_models.Problem` objects; :func:`repo_builder.repository.validate.validate_repository` runs them.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from ..runtime.tokenizer_files import describe_tokenizer_files, has_tokenizer_files
from .lockfile import LOCK_NAME, LockFile, changed_files, read_lock
from .pbtxt import dtype_name, python_instances
from .validate_models import ENGINE_PATH_KEYS, Problem, RepoModel, is_set, map_path, trtllm_models


def check_model(m: RepoModel, problems: list[Problem]) -> None:
    c = m.cfg
    if c.name and c.name != m.name:
        problems.append(
            Problem(m.rel, f"name '{c.name}' differs from the folder name '{m.name}'", m.line_of(r"^\s*name\s*:"))
        )
    for section, items in (("input", c.input), ("output", c.output)):
        seen: set[str] = set()
        for t in items:
            if t.name in seen:
                problems.append(Problem(m.rel, f"{section} '{t.name}' declared twice", m.tensor_line(t.name)))
            seen.add(t.name)


def io_maps(c: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    return {t.name: t for t in c.input}, {t.name: t for t in c.output}


def check_ensemble(ens: RepoModel, models: dict[str, RepoModel], problems: list[Problem]) -> None:
    """The ensemble's wiring: each step's output_map names outputs of its model (dtypes agreeing with the
    ensemble's outputs), each input_map entry is fed by an ensemble input or a step with the dtype the step
    model expects, every required input is fed, every ensemble output comes from exactly one step."""
    c = ens.cfg
    ens_in, ens_out = io_maps(c)
    steps = list(c.ensemble_scheduling.step)
    if not steps:
        problems.append(Problem(ens.rel, "ensemble without ensemble_scheduling steps", ens.line_of(r"platform")))
        return
    # dtype of every ensemble tensor: declared inputs first, then producers
    tensor_dtype: dict[str, int] = {n: t.data_type for n, t in ens_in.items()}
    producers: dict[str, list[str]] = {}
    for step in steps:
        _check_step_outputs(ens, step, models.get(step.model_name), ens_out, tensor_dtype, producers, problems)
    for step in steps:
        target = models.get(step.model_name)
        if target is not None and target.config is not None:
            _check_step_inputs(ens, step, target, tensor_dtype, problems)
    _check_producers(ens, ens_out, producers, problems)


def _step_line(ens: RepoModel, step: Any) -> int | None:
    return ens.line_of(r'model_name\s*:\s*"' + re.escape(step.model_name) + r'"')


def _check_step_outputs(
    ens: RepoModel,
    step: Any,
    target: RepoModel | None,
    ens_out: dict[str, Any],
    tensor_dtype: dict[str, int],
    producers: dict[str, list[str]],
    problems: list[Problem],
) -> None:
    """One step's output_map against its model's outputs; records the dtype and producer of each tensor."""
    rel, line = ens.rel, _step_line(ens, step)
    for tensor in step.output_map.values():
        producers.setdefault(tensor, []).append(step.model_name)
    if target is None:
        problems.append(Problem(rel, f"step model '{step.model_name}' is not in the repository", line))
        return
    if target.config is None:
        return
    _, t_out = io_maps(target.config)
    for out_name, tensor in step.output_map.items():
        spec = t_out.get(out_name)
        if spec is None:
            problems.append(
                Problem(
                    rel,
                    f"output_map: '{step.model_name}' has no output '{out_name}'",
                    ens.line_of(r'key\s*:\s*"' + re.escape(out_name) + r'"') or line,
                )
            )
            continue
        tensor_dtype.setdefault(tensor, spec.data_type)
        if tensor in ens_out and ens_out[tensor].data_type != spec.data_type:
            problems.append(
                Problem(
                    rel,
                    f"ensemble output '{tensor}' is {dtype_name(ens_out[tensor].data_type)} "
                    f"but '{step.model_name}' output '{out_name}' is "
                    f"{dtype_name(spec.data_type)}",
                    ens.tensor_line(tensor),
                )
            )


def _check_step_inputs(
    ens: RepoModel, step: Any, target: RepoModel, tensor_dtype: dict[str, int], problems: list[Problem]
) -> None:
    """One step's input_map: each entry names an input of the step model and a tensor of the ensemble with the
    dtype that input expects; every required input of the step model is fed."""
    rel, line = ens.rel, _step_line(ens, step)
    t_in, _ = io_maps(target.config)
    for in_name, tensor in step.input_map.items():
        spec = t_in.get(in_name)

        def kline(in_name: str = in_name, tensor: str = tensor, line: int | None = line) -> int | None:
            # searched only for a problem: a clean ensemble costs no regex per mapping
            return (
                ens.line_of(r'key\s*:\s*"' + re.escape(in_name) + r'"\s*value\s*:\s*"' + re.escape(tensor) + '"')
                or ens.line_of(r'"' + re.escape(in_name) + r'"')
                or line
            )

        if spec is None:
            problems.append(Problem(rel, f"input_map: '{step.model_name}' has no input '{in_name}'", kline()))
            continue
        if tensor not in tensor_dtype:
            problems.append(
                Problem(
                    rel,
                    f"input_map: '{tensor}' (for {step.model_name}.{in_name}) is neither an "
                    "ensemble input nor produced by a step",
                    kline(),
                )
            )
            continue
        if tensor_dtype[tensor] != spec.data_type:
            problems.append(
                Problem(
                    rel,
                    f"dtype mismatch: '{tensor}' is {dtype_name(tensor_dtype[tensor])} but "
                    f"{step.model_name}.{in_name} expects {dtype_name(spec.data_type)}",
                    kline(),
                )
            )
    fed = set(step.input_map)
    for name, spec in t_in.items():
        if not spec.optional and name not in fed:
            problems.append(
                Problem(rel, f"step '{step.model_name}': required input '{name}' is not fed by input_map", line)
            )


def _check_producers(
    ens: RepoModel, ens_out: dict[str, Any], producers: dict[str, list[str]], problems: list[Problem]
) -> None:
    """Every ensemble output comes from exactly one step; no other tensor from more than one."""
    rel = ens.rel
    for name in ens_out:
        count = len(producers.get(name, []))
        if count != 1:
            what = "no step produces it" if count == 0 else f"produced by {count} steps ({', '.join(producers[name])})"
            problems.append(Problem(rel, f"ensemble output '{name}': {what}", ens.tensor_line(name)))
    for tensor, who in producers.items():
        if len(who) > 1 and tensor not in ens_out:
            problems.append(
                Problem(
                    rel,
                    f"tensor '{tensor}' produced by {len(who)} steps ({', '.join(who)})",
                    ens.line_of(r'"' + re.escape(tensor) + r'"'),
                )
            )


def check_paths(m: RepoModel, root: Path, served_at: Path | None, problems: list[Problem]) -> None:
    params = m.params
    for key in ENGINE_PATH_KEYS:
        value = params.get(key)
        if not is_set(value):
            continue
        path = map_path(value, served_at, root)
        if not path.is_dir():
            problems.append(Problem(m.rel, f"{key} '{value}' is not an existing directory", m.param_line(key)))
        elif (
            key in ("gpt_model_path", "engine_dir")
            and not (path / "config.json").is_file()
            and not (path / "synthetic_engine.json").is_file()
        ):
            problems.append(
                Problem(m.rel, f"{key} '{value}' holds no config.json (not an engine directory)", m.param_line(key))
            )
    value = params.get("tokenizer_dir")
    if is_set(value):
        path = map_path(value, served_at, root)
        if not path.is_dir():
            problems.append(
                Problem(
                    m.rel,
                    f"tokenizer_dir '{value}' is not an existing directory (a hub id or a "
                    "path outside the server's filesystem?)",
                    m.param_line("tokenizer_dir"),
                )
            )
        elif not has_tokenizer_files(path):
            problems.append(
                Problem(
                    m.rel,
                    f"tokenizer_dir '{value}' holds no tokenizer files ({describe_tokenizer_files()})",
                    m.param_line("tokenizer_dir"),
                )
            )


def check_structure(models: dict[str, RepoModel], problems: list[Problem]) -> None:
    for m in trtllm_models(models):
        total = python_instances(m.cfg)  # Triton creates count instances per GPU a KIND_GPU group lists
        if total > 1 and m.config is not None and m.config.backend != "python":  # Python engines: any count
            problems.append(
                Problem(
                    m.rel,
                    f"{total} instances of the TensorRT-LLM model; only one is supported "
                    "(use gpu_device_ids / participant_ids for replicas, case B10)",
                    m.line_of(r"^\s*count\s*:"),
                )
            )
    for m in models.values():
        if m.config is None:
            continue
        for key in ("tensorrt_llm_model_name", "tensorrt_llm_draft_model_name"):
            name = m.params.get(key)
            if not is_set(name):
                continue
            for target in (x.strip() for x in name.split(",")):
                if target and target not in models:
                    problems.append(
                        Problem(m.rel, f"{key} '{target}' is not a model of the repository", m.param_line(key))
                    )


def id_groups(text: str | None) -> list[list[int]] | None:
    """``"1,2;3,4"`` -> ``[[1, 2], [3, 4]]``; None when unset or not integers."""
    if not is_set(text):
        return None
    try:
        return [[int(x) for x in group.split(",") if x.strip()] for group in text.split(";") if group.strip()]
    except ValueError:
        return None


def check_disaggregated(models: dict[str, RepoModel], problems: list[Problem]) -> None:
    """Layout disaggregated (a model with ``context_model_name``, NVIDIA's ``disaggregated_serving_bls``): both
    phase models exist, declare ``context_phase_params`` in and out, their ``participant_ids``/``gpu_device_ids``
    agree (:func:`repo_builder.values.rules.disaggregated_findings`), and no ensemble step names a phase model
    directly (its requests would skip the other phase)."""
    from ..values.rules import disaggregated_findings

    for bls in models.values():
        params = bls.params
        if bls.config is None or "context_model_name" not in params:
            continue
        names = {key: params.get(key) for key in ("context_model_name", "generation_model_name")}
        values: dict[str, Any] = dict(names)
        phase_models = []
        for key, name in names.items():
            target = models.get(name or "")
            if target is None:
                problems.append(
                    Problem(bls.rel, f"{key} '{name}' is not a model of the repository", bls.param_line(key))
                )
                continue
            if target.config is None:
                continue
            phase_models.append(target)
            phase = key.split("_", 1)[0]
            for kind in ("participant_ids", "gpu_device_ids"):
                values[f"{phase}_{kind}"] = id_groups(target.params.get(kind))
            ins, outs = io_maps(target.config)
            if "context_phase_params" not in ins or "context_phase_params" not in outs:
                problems.append(
                    Problem(
                        target.rel,
                        f"{key} of {bls.name}: the model must declare context_phase_params as an input and an "
                        "output (the phases hand it over)",
                    )
                )
        groups = values.get("context_participant_ids") or values.get("context_gpu_device_ids") or [[0]]
        gen_groups = values.get("generation_participant_ids") or values.get("generation_gpu_device_ids") or groups
        for finding in disaggregated_findings(len(groups[0]), values, generation_world=len(gen_groups[0])):
            phase, _, kind = finding.key.partition("_")
            target = (
                models.get(str(names.get(f"{phase}_model_name")))
                if kind in ("participant_ids", "gpu_device_ids")
                else None
            )
            where = target if target is not None else bls
            key = kind if target is not None else finding.key
            problems.append(Problem(where.rel, f"{key}: {finding.message}", where.param_line(key), finding.severity))
        for ens in models.values():
            if ens.config is None or ens.config.platform != "ensemble":
                continue
            for step in ens.config.ensemble_scheduling.step:
                if step.model_name in {m.name for m in phase_models}:
                    problems.append(
                        Problem(
                            ens.rel,
                            f"step model '{step.model_name}' is a phase of {bls.name}; name {bls.name} instead "
                            "(a request sent to one phase alone skips the other)",
                            ens.line_of(r'model_name\s*:\s*"' + re.escape(step.model_name) + r'"'),
                        )
                    )


def check_lock(root: Path, problems: list[Problem], *, hashes: bool = True) -> LockFile | None:
    from ..errors import RepoBuilderError

    try:
        lock = read_lock(root)
    except RepoBuilderError as exc:
        problems.append(Problem(LOCK_NAME, exc.message))
        return None
    if lock is None:
        return None
    for rel, what in changed_files(root, lock, hashes=hashes):
        if what == "missing":
            problems.append(Problem(rel, "listed in the lock file but missing"))
        else:
            problems.append(
                Problem(
                    rel,
                    "changed since it was rendered (sha256 differs from the lock file; "
                    "re-render with `repo-builder render --force` or keep your edit knowingly)",
                )
            )
    return lock


def backend_reads(lock: LockFile | None) -> Any:
    """The ``backend_reads`` table of the lock file's profile (None when it has none), else of the newest profile
    that has one (the C++ backend's reads are the same from tensorrtllm_backend v0.19.0 to TensorRT-LLM 1.x)."""
    from ..profile.contract import list_profiles, load_contract

    names = list_profiles()
    profile = lock.profile if lock is not None else None
    if profile in names:
        return load_contract(profile).backend_reads  # the lock file's profile decides (trtllm-0.5 has none)
    for name in sorted(names, reverse=True):
        reads = load_contract(name).backend_reads
        if reads is not None:
            return reads
    return None


def check_backend_reads(models: dict[str, RepoModel], lock: LockFile | None, problems: list[Problem]) -> None:
    """Inputs of a ``backend: "tensorrtllm"`` model declared with another dtype than the C++ backend reads them
    as (it casts the buffer without a check: the value is misread); inputs it reads under another name
    (``read_as``) are listed by :func:`text_unreachable_inputs`. Warnings: the inputs are optional, so the
    repository loads and serves requests that do not send them (NVIDIA's own v0.19.0 templates declare
    early_stopping TYPE_BOOL)."""
    reads = backend_reads(lock)
    if reads is None:
        return
    for m in trtllm_models(models):
        if m.cfg.backend != "tensorrtllm":
            continue
        if lock is None or not lock.profile:
            # without a lock file: only a repository for the v0.6+ backend, which declares request_output_len
            # TYPE_INT32 (v0.5.0's backend read its integer inputs as uint32, and its templates said so)
            out_len = next((t for t in m.cfg.input if t.name == "request_output_len"), None)
            if out_len is None or dtype_name(out_len.data_type) != reads.dtypes.get("request_output_len"):
                continue
        for t in m.cfg.input:
            have, want = dtype_name(t.data_type), reads.dtypes.get(t.name)
            if want is not None and have != want:
                problems.append(
                    Problem(
                        m.rel,
                        f"input '{t.name}' is declared {have}, but NVIDIA's C++ backend reads its bytes as {want} "
                        f"without checking ({reads.source}): a request sending it gets a misread value; declare "
                        f"{want}",
                        m.tensor_line(t.name),
                        severity="warning",
                    )
                )
