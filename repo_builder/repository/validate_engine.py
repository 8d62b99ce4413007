"""``validate --engine-dir``: the values a repository gives its engine model, read back from its
``config.pbtxt`` files and typed as resolve types them (:func:`repository_values`), checked by the rule
table render uses (:mod:`repo_builder.values.rules`): :func:`check_against_engine`; without an engine, the
GPU-placement rule against the lock file's world size (:func:`check_placement_with_lock`).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..runtime.tokenizer_files import has_tokenizer_files
from .lockfile import LOCK_NAME, LockFile
from .pbtxt import dtype_name, python_instances
from .validate_models import Problem, RepoModel, is_set, load_models, map_path, trtllm_models

if TYPE_CHECKING:
    from ..tokenizer import TokenizerInfo


def _structural_fields() -> dict[str, str]:
    """{structural parameter: the config.pbtxt field it is written to} (the schema's ``config_field``, over every
    profile), plus the instance kind the GPU-placement rule reads (not a parameter: the templates write it)."""
    from ..profile.schema import load_schema

    out = {p.name: p.config_field for p in load_schema().parameters.values() if p.config_field}
    out["tensorrt_llm_instance_kind"] = "instance_group.kind"
    return out


def _field_text(config_field: str) -> str:
    """How validate names a config field in its findings, as config.pbtxt shows it: the field itself
    (``decoupled`` of ``model_transaction_policy.decoupled``), after its repeated message's name when it is the
    field of a list entry (``instance_group count``)."""
    from .pbtxt import model_config_pb2

    parts = config_field.split(".")
    top = model_config_pb2().ModelConfig.DESCRIPTOR.fields_by_name.get(parts[0])
    repeated = top is not None and top.is_repeated and len(parts) > 1
    return f"{parts[0]} {parts[-1]}" if repeated else parts[-1]


def _field_line(m: RepoModel, config_field: str) -> int | None:
    """The line of ``m``'s config.pbtxt where ``config_field``'s last part (``count`` of ``instance_group.count``)
    is written first."""
    return m.line_of(rf"^\s*{re.escape(config_field.rsplit('.', 1)[-1])}\s*:")


def _schema_by_key() -> dict[str, Any]:
    """{config.pbtxt parameter key: schema Parameter} over every profile (the keys agree across profiles)."""
    from ..profile.schema import load_schema

    out: dict[str, Any] = {}
    for p in load_schema().parameters.values():
        if p.kind in ("runtime", "derived"):
            out.setdefault(p.key, p)
    return out


def _typed(param: Any, text: str | None) -> Any:
    if not is_set(text):
        return None
    try:
        return param.coerce(text)
    except ValueError:
        return None


#: Triton's ModelInstanceGroup.Kind numbers (model_config.proto).
_KIND_NAMES = {0: "KIND_AUTO", 1: "KIND_GPU", 2: "KIND_CPU", 3: "KIND_MODEL"}


def repository_values(
    models: dict[str, RepoModel], target: RepoModel
) -> tuple[dict[str, Any], dict[str, tuple[RepoModel, int | None]]]:
    """The parameter values a repository gives the engine model ``target``, typed as resolve() types them, and
    where each was read ({name: (model, line)}): ``target``'s own parameters and structural fields, then the
    parameters of the other models (BLS, postprocessing) that are not the engine's."""
    by_key = _schema_by_key()
    fields = _structural_fields()
    values: dict[str, Any] = {}
    where: dict[str, tuple[RepoModel, int | None]] = {}
    c = target.cfg
    for key, text in target.params.items():
        param = by_key.get(key)
        if param is not None and (value := _typed(param, text)) is not None:
            values[param.name] = value
            where[param.name] = (target, target.param_line(key))
    if c.max_batch_size > 0:
        values["triton_max_batch_size"] = int(c.max_batch_size)
        where["triton_max_batch_size"] = (target, _field_line(target, fields["triton_max_batch_size"]))
    values["decoupled_mode"] = bool(c.model_transaction_policy.decoupled)
    where["decoupled_mode"] = (target, _field_line(target, fields["decoupled_mode"]))
    if c.backend:
        values["triton_backend"] = c.backend
        where["triton_backend"] = (target, _field_line(target, fields["triton_backend"]))
    values["tensorrt_llm_instance_count"] = python_instances(c)  # Triton's count: count x listed GPUs
    where["tensorrt_llm_instance_count"] = (target, _field_line(target, fields["tensorrt_llm_instance_count"]))
    if c.instance_group:
        group = c.instance_group[0]
        values["tensorrt_llm_instance_kind"] = _KIND_NAMES.get(group.kind, str(group.kind))
        values["tensorrt_llm_instance_gpus"] = list(group.gpus)
        where["tensorrt_llm_instance_kind"] = (target, _field_line(target, fields["tensorrt_llm_instance_kind"]))
    for out in c.output:
        if out.name in ("generation_logits", "context_logits"):
            values["logits_datatype"] = dtype_name(out.data_type)
            where["logits_datatype"] = (target, target.tensor_line(out.name))
            break
    for inp in c.input:
        if inp.name == "lora_weights":
            values["lora_weights_data_type"] = dtype_name(inp.data_type)
            where["lora_weights_data_type"] = (target, target.tensor_line(inp.name))
    for m in models.values():
        if m is target or m.config is None:
            continue
        for key, text in m.params.items():
            param = by_key.get(key)
            if param is None or param.name in values or "tensorrt_llm" in param.models:
                continue
            if (value := _typed(param, text)) is not None:
                values[param.name] = value
                where[param.name] = (m, m.param_line(key))
    post = models.get("postprocessing")
    if post is not None and post.config is not None and post.config.instance_group:
        values["postprocessing_instance_count"] = sum(g.count or 1 for g in post.config.instance_group)
        where["postprocessing_instance_count"] = (post, _field_line(post, fields["postprocessing_instance_count"]))
    return values, where


def _repository_tokenizer(tokenizer_dir: Any, local_path: Callable[[str], Path]) -> TokenizerInfo | None:
    """The tokenizer a repository's ``tokenizer_dir`` names, for the rules that need one (vocabulary, end id);
    None when it is unset, not on this machine or not readable (:func:`check_paths` reports those paths). Remote
    code is never run here."""
    from ..errors import RepoBuilderError
    from ..tokenizer import inspect_tokenizer

    if not isinstance(tokenizer_dir, str) or not tokenizer_dir:
        return None
    path = local_path(tokenizer_dir)
    if not path.is_dir() or not has_tokenizer_files(path):
        return None
    try:
        return inspect_tokenizer(path)
    except RepoBuilderError:
        return None


def check_against_engine(
    models: dict[str, RepoModel] | str | Path,
    engine_dir: str | Path,
    *,
    root: str | Path | None = None,
    served_at: str | Path | None = None,
) -> list[Problem]:
    """Contradictions between the repository's TRT-LLM model config(s) and the engine at ``engine_dir``.

    ``models`` is a repository path or the parsed models of :func:`validate_repository`. The values are read
    back from the configs (:func:`repository_values`) and checked by the rule table that render uses
    (:mod:`repo_builder.values.rules`), with the tokenizer ``tokenizer_dir`` names when it is on this machine, so
    both report the same contradictions (B29 backend vs decoupled, vocabulary, end id included); each finding
    becomes a Problem at the line of the key, named as it is written in config.pbtxt (``gpt_model_type``,
    ``max_batch_size``). ``root``/``served_at`` map path values (lora_prefetch_dir, xgrammar_tokenizer_info_path,
    tokenizer_dir) under the serve path into the repository.
    """
    from ..engine import inspect_engine
    from ..values.rules import check

    if not isinstance(models, dict):
        root = Path(models) if root is None else root
        models = load_models(Path(models), [])
    engine = inspect_engine(engine_dir)
    targets = trtllm_models(models)
    if not targets:
        return [
            Problem(
                ".",
                "no TensorRT-LLM model (backend tensorrtllm or a gpt_model_path parameter) to "
                f"check against the engine {engine_dir}",
            )
        ]
    base = Path(root) if root is not None else Path(".")
    served = Path(served_at) if served_at is not None else (base.absolute() if root is not None else None)
    by_name = {p.name: p for p in _schema_by_key().values()}
    fields = _structural_fields()
    out: list[Problem] = []
    seen: set[tuple[str, str, int | None]] = set()
    local = lambda v: map_path(v, served, base)  # noqa: E731
    for m in targets:
        values, where = repository_values(models, m)
        tokenizer = _repository_tokenizer(values.get("tokenizer_dir"), local)
        for f in check(engine, values, local_path=local, tokenizer=tokenizer):
            if f.key == "engine_dir":
                problem = Problem(str(engine_dir), f.message, severity=f.severity)
            else:
                model, line = where.get(f.key, (m, None))
                param = by_name.get(f.key)
                shown = _field_text(fields[f.key]) if f.key in fields else (param.key if param is not None else f.key)
                if f.key == "logits_datatype":
                    shown = "output logits data_type"
                elif f.key == "lora_weights_data_type":
                    shown = "input lora_weights data_type"
                problem = Problem(model.rel, f"{shown}: {f.message}", line, severity=f.severity)
            ident = (problem.file, problem.message, problem.line)
            if ident not in seen:
                seen.add(ident)
                out.append(problem)
    return out


def check_placement_with_lock(models: dict[str, RepoModel], lock: LockFile) -> list[Problem]:
    """The GPU-placement rule (:func:`repo_builder.values.rules.placement_findings`) without ``--engine-dir``:
    the world size is the lock file's ``launch.world_size`` (the engine's tp x pp when it was rendered)."""
    from ..values.rules import placement_findings

    world = lock.launch.world_size  # LockLaunch: an int >= 1
    by_name = {p.name: p for p in _schema_by_key().values()}
    fields = _structural_fields()
    out: list[Problem] = []
    for m in trtllm_models(models):
        values, where = repository_values(models, m)
        for f in placement_findings(values, world, world_source=f"{LOCK_NAME} launch.world_size"):
            model, line = where.get(f.key, (m, None))
            param = by_name.get(f.key)
            shown = _field_text(fields[f.key]) if f.key in fields else (param.key if param is not None else f.key)
            out.append(Problem(model.rel, f"{shown}: {f.message}", line, severity=f.severity))
    return out
