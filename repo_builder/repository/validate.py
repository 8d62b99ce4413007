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
* with ``engine_dir`` (also for repositories repo-builder did not render): contradictions between the
  TRT-LLM model's config and the engine's ``config.json`` (batch size, beam width, streaming with beam
  search, logits dtype, KV-cache reuse and chunked context preconditions, in-flight batching without
  paged KV cache / packed input / GPT attention plugin, rank files, the python backend without decoupled mode
  (B29), and, with the tokenizer ``tokenizer_dir`` names, a vocabulary larger than the engine's): the rule
  table of :mod:`repo_builder.values.rules`, as render checks them.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeGuard

from ..runtime.tokenizer_files import describe_tokenizer_files, has_tokenizer_files
from .lockfile import LOCK_NAME, LockFile, changed_files, read_lock
from .pbtxt import dtype_name, find_placeholders, python_instances, read_model_folders, string_parameters

if TYPE_CHECKING:
    from ..tokenizer import TokenizerInfo

ENGINE_PATH_KEYS = ("gpt_model_path", "engine_dir", "encoder_model_path")


@dataclass(frozen=True)
class Problem:
    """One finding: ``file`` is relative to the repository (``model/config.pbtxt``); ``line`` is 1-based.

    ``severity`` is ``"error"`` (the repository will not load or will misbehave) or ``"warning"`` (valid, but
    some requests will be refused, e.g. streaming with beam search, case B30).
    """

    file: str
    message: str
    line: int | None = None
    severity: str = "error"

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line else self.file
        prefix = "warning: " if self.severity == "warning" else ""
        return f"{where}: {prefix}{self.message}"


@dataclass
class _Model:
    name: str
    rel: str
    text: str
    config: Any | None  # ModelConfig, None when the file did not parse

    @property
    def cfg(self) -> Any:
        """The parsed ModelConfig; only for models whose config.pbtxt parsed (callers skip ``config is None``)."""
        if self.config is None:
            raise RuntimeError(f"{self.rel}: config.pbtxt did not parse")
        return self.config

    def line_of(self, pattern: str) -> int | None:
        """1-based line of the first line matching regex ``pattern``."""
        rx = re.compile(pattern)
        for i, line in enumerate(self.text.splitlines(), start=1):
            if rx.search(line):
                return i
        return None

    def param_line(self, key: str) -> int | None:
        """Line of ``key: "<key>"`` of a parameters entry."""
        return self.line_of(r'key\s*:\s*"' + re.escape(key) + r'"')

    def tensor_line(self, name: str) -> int | None:
        return self.line_of(r'name\s*:\s*"' + re.escape(name) + r'"')

    @property
    def params(self) -> dict[str, str]:
        return string_parameters(self.config) if self.config is not None else {}


def _is_set(value: str | None) -> TypeGuard[str]:
    return value is not None and value.strip() != "" and "${" not in value


def _load_models(root: Path, problems: list[Problem]) -> dict[str, _Model]:
    models: dict[str, _Model] = {}
    for folder in read_model_folders(root):
        if folder.unreadable == "missing":
            problems.append(Problem(folder.name, "model folder without config.pbtxt (Triton cannot load it)"))
            continue
        if folder.text is None:
            problems.append(Problem(folder.rel, f"unreadable: {folder.unreadable}"))
            continue
        for ph in find_placeholders(folder.text):
            problems.append(Problem(folder.rel, f"unfilled placeholder ${{{ph.name}}}", ph.line))
        if folder.error is not None:
            exc = folder.error
            detail = exc.message.split(": ", 1)[1] if exc.message.startswith("line ") else exc.message
            problems.append(Problem(folder.rel, detail, exc.line))
        models[folder.name] = _Model(folder.name, folder.rel, folder.text, folder.config)
    return models


def _check_model(m: _Model, problems: list[Problem]) -> None:
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


def _io_maps(c: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    return {t.name: t for t in c.input}, {t.name: t for t in c.output}


def _check_ensemble(ens: _Model, models: dict[str, _Model], problems: list[Problem]) -> None:
    c = ens.cfg
    ens_in, ens_out = _io_maps(c)
    rel = ens.rel
    # dtype of every ensemble tensor: declared inputs first, then producers
    tensor_dtype: dict[str, int] = {n: t.data_type for n, t in ens_in.items()}
    producers: dict[str, list[str]] = {}
    steps = list(c.ensemble_scheduling.step)
    if not steps:
        problems.append(Problem(rel, "ensemble without ensemble_scheduling steps", ens.line_of(r"platform")))
        return
    for step in steps:
        target = models.get(step.model_name)
        line = ens.line_of(r'model_name\s*:\s*"' + re.escape(step.model_name) + r'"')
        for tensor in step.output_map.values():
            producers.setdefault(tensor, []).append(step.model_name)
        if target is None:
            problems.append(Problem(rel, f"step model '{step.model_name}' is not in the repository", line))
            continue
        if target.config is None:
            continue
        t_in, t_out = _io_maps(target.config)
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
    for step in steps:
        target = models.get(step.model_name)
        if target is None or target.config is None:
            continue
        line = ens.line_of(r'model_name\s*:\s*"' + re.escape(step.model_name) + r'"')
        t_in, _ = _io_maps(target.config)
        for in_name, tensor in step.input_map.items():
            spec = t_in.get(in_name)
            kline = (
                ens.line_of(r'key\s*:\s*"' + re.escape(in_name) + r'"\s*value\s*:\s*"' + re.escape(tensor) + '"')
                or ens.line_of(r'"' + re.escape(in_name) + r'"')
                or line
            )
            if spec is None:
                problems.append(Problem(rel, f"input_map: '{step.model_name}' has no input '{in_name}'", kline))
                continue
            if tensor not in tensor_dtype:
                problems.append(
                    Problem(
                        rel,
                        f"input_map: '{tensor}' (for {step.model_name}.{in_name}) is neither an "
                        "ensemble input nor produced by a step",
                        kline,
                    )
                )
                continue
            if tensor_dtype[tensor] != spec.data_type:
                problems.append(
                    Problem(
                        rel,
                        f"dtype mismatch: '{tensor}' is {dtype_name(tensor_dtype[tensor])} but "
                        f"{step.model_name}.{in_name} expects {dtype_name(spec.data_type)}",
                        kline,
                    )
                )
        fed = set(step.input_map)
        for name, spec in t_in.items():
            if not spec.optional and name not in fed:
                problems.append(
                    Problem(rel, f"step '{step.model_name}': required input '{name}' is not fed by input_map", line)
                )
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


def _map_path(value: str, served_at: Path | None, root: Path) -> Path:
    p = Path(value)
    if served_at is not None:
        try:
            return root / p.relative_to(served_at)
        except ValueError:
            pass
    return p


def _check_paths(m: _Model, root: Path, served_at: Path | None, problems: list[Problem]) -> None:
    params = m.params
    for key in ENGINE_PATH_KEYS:
        value = params.get(key)
        if not _is_set(value):
            continue
        path = _map_path(value, served_at, root)
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
    if _is_set(value):
        path = _map_path(value, served_at, root)
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


def _trtllm_models(models: dict[str, _Model]) -> list[_Model]:
    """Models that serve an engine: backend ``tensorrtllm``, or the model called ``tensorrt_llm`` (repo-builder's
    Python engines use backend python)."""
    return [
        m
        for m in models.values()
        if m.config is not None and (m.config.backend == "tensorrtllm" or m.name == "tensorrt_llm")
    ]


def _check_structure(models: dict[str, _Model], problems: list[Problem]) -> None:
    for m in _trtllm_models(models):
        total = python_instances(m.cfg)  # Triton creates count instances per GPU a KIND_GPU group lists
        if total > 1:
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
            if not _is_set(name):
                continue
            for target in (x.strip() for x in name.split(",")):
                if target and target not in models:
                    problems.append(
                        Problem(m.rel, f"{key} '{target}' is not a model of the repository", m.param_line(key))
                    )


def _id_groups(text: str | None) -> list[list[int]] | None:
    """``"1,2;3,4"`` -> ``[[1, 2], [3, 4]]``; None when unset or not integers."""
    if not _is_set(text):
        return None
    try:
        return [[int(x) for x in group.split(",") if x.strip()] for group in text.split(";") if group.strip()]
    except ValueError:
        return None


def _check_disaggregated(models: dict[str, _Model], problems: list[Problem]) -> None:
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
                values[f"{phase}_{kind}"] = _id_groups(target.params.get(kind))
            ins, outs = _io_maps(target.config)
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


def _check_lock(root: Path, problems: list[Problem]) -> LockFile | None:
    from ..errors import RepoBuilderError

    try:
        lock = read_lock(root)
    except RepoBuilderError as exc:
        problems.append(Problem(LOCK_NAME, exc.message))
        return None
    if lock is None:
        return None
    for rel, what in changed_files(root, lock):
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


def validate_repository(
    repo: str | Path,
    *,
    engine_dir: str | Path | None = None,
    served_at: str | Path | None = None,
    warnings: bool = False,
) -> list[Problem]:
    """Lint the Triton model repository ``repo``; returns the problems found (empty = valid).

    Args:
        warnings: also return findings of severity ``"warning"`` (the CLI prints them; they do not make the
            repository invalid).
        repo: the repository directory.
        engine_dir: an engine directory to cross-check the TRT-LLM model's config against.
        served_at: the path the server will see the repository at, when it differs from ``repo`` (the
            lock file's ``serve_path`` is used by default); parameters pointing below it are checked inside ``repo``.
    Raises:
        RepoBuilderError: ``repo`` is not a directory; EngineError from inspecting ``engine_dir``.
    """
    from ..errors import RepoBuilderError

    root = Path(repo)
    if not root.is_dir():
        raise RepoBuilderError("not a directory", path=root, hint="pass the model repository folder")
    problems: list[Problem] = []
    lock = _check_lock(root, problems)
    if served_at is None and lock is not None and lock.serve_path:
        served_at = lock.serve_path
    served = Path(served_at) if served_at is not None else root.absolute()
    models = _load_models(root, problems)
    if not models:
        problems.append(Problem(".", "no model folders with config.pbtxt"))
    for m in models.values():
        if m.config is None:
            continue
        _check_model(m, problems)
        _check_paths(m, root, served, problems)
        if m.config.platform == "ensemble":
            _check_ensemble(m, models, problems)
    _check_structure(models, problems)
    _check_disaggregated(models, problems)
    _check_backend_reads(models, lock, problems)
    if engine_dir is not None:
        problems.extend(check_against_engine(models, engine_dir, root=root, served_at=served))
    elif lock is not None:
        problems.extend(check_placement_with_lock(models, lock))
    if not warnings:
        problems = [p for p in problems if p.severity == "error"]
    return problems


# ------------------------------------------------------------------------------------------------------
# engine cross-checks


#: How a structural parameter shows in config.pbtxt (for messages of validate).
_STRUCTURAL_KEYS = {
    "triton_max_batch_size": "max_batch_size",
    "decoupled_mode": "decoupled",
    "triton_backend": "backend",
    "tensorrt_llm_instance_count": "instance_group count",
    "tensorrt_llm_instance_kind": "instance_group kind",
}


def _schema_by_key() -> dict[str, Any]:
    """{config.pbtxt parameter key: schema Parameter} over every profile (the keys agree across profiles)."""
    from ..profile.schema import load_schema

    out: dict[str, Any] = {}
    for p in load_schema().parameters.values():
        if p.kind in ("runtime", "derived"):
            out.setdefault(p.key, p)
    return out


def _typed(param: Any, text: str | None) -> Any:
    if not _is_set(text):
        return None
    try:
        return param.coerce(text)
    except ValueError:
        return None


#: Triton's ModelInstanceGroup.Kind numbers (model_config.proto).
_KIND_NAMES = {0: "KIND_AUTO", 1: "KIND_GPU", 2: "KIND_CPU", 3: "KIND_MODEL"}


def repository_values(
    models: dict[str, _Model], target: _Model
) -> tuple[dict[str, Any], dict[str, tuple[_Model, int | None]]]:
    """The parameter values a repository gives the engine model ``target``, typed as resolve() types them, and
    where each was read ({name: (model, line)}): ``target``'s own parameters and structural fields, then the
    parameters of the other models (BLS, postprocessing) that are not the engine's."""
    by_key = _schema_by_key()
    values: dict[str, Any] = {}
    where: dict[str, tuple[_Model, int | None]] = {}
    c = target.cfg
    for key, text in target.params.items():
        param = by_key.get(key)
        if param is not None and (value := _typed(param, text)) is not None:
            values[param.name] = value
            where[param.name] = (target, target.param_line(key))
    if c.max_batch_size > 0:
        values["triton_max_batch_size"] = int(c.max_batch_size)
        where["triton_max_batch_size"] = (target, target.line_of(r"^\s*max_batch_size\s*:"))
    values["decoupled_mode"] = bool(c.model_transaction_policy.decoupled)
    where["decoupled_mode"] = (target, target.line_of(r"^\s*decoupled\s*:"))
    if c.backend:
        values["triton_backend"] = c.backend
        where["triton_backend"] = (target, target.line_of(r"^\s*backend\s*:"))
    values["tensorrt_llm_instance_count"] = python_instances(c)  # Triton's count: count x listed GPUs
    where["tensorrt_llm_instance_count"] = (target, target.line_of(r"^\s*count\s*:"))
    if c.instance_group:
        group = c.instance_group[0]
        values["tensorrt_llm_instance_kind"] = _KIND_NAMES.get(group.kind, str(group.kind))
        values["tensorrt_llm_instance_gpus"] = list(group.gpus)
        where["tensorrt_llm_instance_kind"] = (target, target.line_of(r"^\s*kind\s*:"))
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
        where["postprocessing_instance_count"] = (post, post.line_of(r"^\s*count\s*:"))
    return values, where


def _repository_tokenizer(tokenizer_dir: Any, local_path: Callable[[str], Path]) -> TokenizerInfo | None:
    """The tokenizer a repository's ``tokenizer_dir`` names, for the rules that need one (vocabulary, end id);
    None when it is unset, not on this machine or not readable (:func:`_check_paths` reports those paths). Remote
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
    models: dict[str, _Model] | str | Path,
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
        models = _load_models(Path(models), [])
    engine = inspect_engine(engine_dir)
    targets = _trtllm_models(models)
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
    out: list[Problem] = []
    seen: set[tuple[str, str, int | None]] = set()
    local = lambda v: _map_path(v, served, base)  # noqa: E731
    for m in targets:
        values, where = repository_values(models, m)
        tokenizer = _repository_tokenizer(values.get("tokenizer_dir"), local)
        for f in check(engine, values, local_path=local, tokenizer=tokenizer):
            if f.key == "engine_dir":
                problem = Problem(str(engine_dir), f.message, severity=f.severity)
            else:
                model, line = where.get(f.key, (m, None))
                param = by_name.get(f.key)
                shown = _STRUCTURAL_KEYS.get(f.key) or (param.key if param is not None else f.key)
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


def check_placement_with_lock(models: dict[str, _Model], lock: LockFile) -> list[Problem]:
    """The GPU-placement rule (:func:`repo_builder.values.rules.placement_findings`) without ``--engine-dir``:
    the world size is the lock file's ``launch.world_size`` (the engine's tp x pp when it was rendered)."""
    from ..values.rules import placement_findings

    world = lock.launch.world_size  # LockLaunch: an int >= 1
    by_name = {p.name: p for p in _schema_by_key().values()}
    out: list[Problem] = []
    for m in _trtllm_models(models):
        values, where = repository_values(models, m)
        for f in placement_findings(values, world, world_source=f"{LOCK_NAME} launch.world_size"):
            model, line = where.get(f.key, (m, None))
            param = by_name.get(f.key)
            shown = _STRUCTURAL_KEYS.get(f.key) or (param.key if param is not None else f.key)
            out.append(Problem(model.rel, f"{shown}: {f.message}", line, severity=f.severity))
    return out


def _backend_reads(lock: LockFile | None) -> Any:
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


def _check_backend_reads(models: dict[str, _Model], lock: LockFile | None, problems: list[Problem]) -> None:
    """Inputs of a ``backend: "tensorrtllm"`` model declared with another dtype than the C++ backend reads them
    as (it casts the buffer without a check: the value is misread); inputs it reads under another name
    (``read_as``) are listed by :func:`text_unreachable_inputs`. Warnings: the inputs are optional, so the
    repository loads and serves requests that do not send them (NVIDIA's own v0.19.0 templates declare
    early_stopping TYPE_BOOL)."""
    reads = _backend_reads(lock)
    if reads is None:
        return
    for m in _trtllm_models(models):
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


def text_unreachable_inputs(repo: str | Path) -> list[tuple[str, str]]:
    """The engine model's inputs a text client cannot reach: those of the TensorRT-LLM model that no step of the
    ensemble feeds (the BLS follows the same wiring), as (input, why) in declaration order; the reasons come from
    the contract's ``backend_reads.text_unreachable``. Empty without an ensemble or an engine model."""
    root = Path(repo)
    models = _load_models(root, [])
    targets = _trtllm_models(models)
    ens = next((m for m in models.values() if m.config is not None and m.config.platform == "ensemble"), None)
    if not targets or ens is None:
        return []
    reads = _backend_reads(_lock_or_none(root))
    why = reads.text_unreachable if reads is not None else {}
    out: list[tuple[str, str]] = []
    for m in targets:
        fed = {k for step in ens.cfg.ensemble_scheduling.step if step.model_name == m.name for k in step.input_map}
        for t in m.cfg.input:
            if t.name not in fed:
                out.append((t.name, why.get(t.name, "the ensemble does not wire it")))
    return out


def _lock_or_none(root: Path) -> LockFile | None:
    from ..errors import RepoBuilderError

    try:
        return read_lock(root)
    except RepoBuilderError:
        return None
