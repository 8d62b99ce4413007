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
* ``gpt_model_path``/``engine_dir``/``encoder_model_path`` and ``tokenizer_dir`` parameters name existing
  directories (a tokenizer dir must hold tokenizer files, case B22); paths under the lock file's
  ``serve_path`` (or ``served_at``) are looked up inside the repository;
* with a lock file: the sha256 of every rendered file matches (each changed or missing file is reported);
* with ``engine_dir`` (also for repositories repo-builder did not render): contradictions between the
  TRT-LLM model's config and the engine's ``config.json`` (batch size, beam width, streaming with beam
  search, logits dtype, KV-cache reuse and chunked context preconditions, in-flight batching without
  paged KV cache / packed input / GPT attention plugin, rank files).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .lockfile import LOCK_NAME, changed_files, read_lock
from .runtime.params import parse_bool
from .runtime.tokenizer_files import describe_tokenizer_files, has_tokenizer_files
from .pbtxt import PbtxtParseError, dtype_name, find_placeholders, parse_model_config, string_parameters

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


def _is_set(value: str | None) -> bool:
    return value is not None and value.strip() != "" and "${" not in value


def _load_models(root: Path, problems: list[Problem]) -> dict[str, _Model]:
    models: dict[str, _Model] = {}
    for folder in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")):
        rel = f"{folder.name}/config.pbtxt"
        cfg_path = folder / "config.pbtxt"
        if not cfg_path.is_file():
            problems.append(Problem(folder.name, "model folder without config.pbtxt (Triton cannot load it)"))
            continue
        try:
            text = cfg_path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            problems.append(Problem(rel, f"unreadable: {exc}"))
            continue
        for ph in find_placeholders(text):
            problems.append(Problem(rel, f"unfilled placeholder ${{{ph.name}}}", ph.line))
        try:
            config = parse_model_config(text, path=rel)
        except PbtxtParseError as exc:
            detail = exc.message.split(": ", 1)[1] if exc.message.startswith("line ") else exc.message
            problems.append(Problem(rel, detail, exc.line))
            config = None
        models[folder.name] = _Model(folder.name, rel, text, config)
    return models


def _check_model(m: _Model, problems: list[Problem]) -> None:
    c = m.config
    if c.name and c.name != m.name:
        problems.append(Problem(m.rel, f"name '{c.name}' differs from the folder name '{m.name}'",
                                m.line_of(r"^\s*name\s*:")))
    for section, items in (("input", c.input), ("output", c.output)):
        seen: set[str] = set()
        for t in items:
            if t.name in seen:
                problems.append(Problem(m.rel, f"{section} '{t.name}' declared twice", m.tensor_line(t.name)))
            seen.add(t.name)


def _io_maps(c: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    return {t.name: t for t in c.input}, {t.name: t for t in c.output}


def _check_ensemble(ens: _Model, models: dict[str, _Model], problems: list[Problem]) -> None:
    c = ens.config
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
                problems.append(Problem(rel, f"output_map: '{step.model_name}' has no output '{out_name}'",
                                        ens.line_of(r'key\s*:\s*"' + re.escape(out_name) + r'"') or line))
                continue
            tensor_dtype.setdefault(tensor, spec.data_type)
            if tensor in ens_out and ens_out[tensor].data_type != spec.data_type:
                problems.append(Problem(rel, f"ensemble output '{tensor}' is {dtype_name(ens_out[tensor].data_type)} "
                                             f"but '{step.model_name}' output '{out_name}' is {dtype_name(spec.data_type)}",
                                        ens.tensor_line(tensor)))
    for step in steps:
        target = models.get(step.model_name)
        if target is None or target.config is None:
            continue
        line = ens.line_of(r'model_name\s*:\s*"' + re.escape(step.model_name) + r'"')
        t_in, _ = _io_maps(target.config)
        for in_name, tensor in step.input_map.items():
            spec = t_in.get(in_name)
            kline = ens.line_of(r'key\s*:\s*"' + re.escape(in_name) + r'"\s*value\s*:\s*"' + re.escape(tensor) + '"') \
                or ens.line_of(r'"' + re.escape(in_name) + r'"') or line
            if spec is None:
                problems.append(Problem(rel, f"input_map: '{step.model_name}' has no input '{in_name}'", kline))
                continue
            if tensor not in tensor_dtype:
                problems.append(Problem(rel, f"input_map: '{tensor}' (for {step.model_name}.{in_name}) is neither an "
                                             "ensemble input nor produced by a step", kline))
                continue
            if tensor_dtype[tensor] != spec.data_type:
                problems.append(Problem(rel, f"dtype mismatch: '{tensor}' is {dtype_name(tensor_dtype[tensor])} but "
                                             f"{step.model_name}.{in_name} expects {dtype_name(spec.data_type)}", kline))
        fed = set(step.input_map)
        for name, spec in t_in.items():
            if not spec.optional and name not in fed:
                problems.append(Problem(rel, f"step '{step.model_name}': required input '{name}' is not fed by input_map",
                                        line))
    for name in ens_out:
        count = len(producers.get(name, []))
        if count != 1:
            what = "no step produces it" if count == 0 else f"produced by {count} steps ({', '.join(producers[name])})"
            problems.append(Problem(rel, f"ensemble output '{name}': {what}", ens.tensor_line(name)))
    for tensor, who in producers.items():
        if len(who) > 1 and tensor not in ens_out:
            problems.append(Problem(rel, f"tensor '{tensor}' produced by {len(who)} steps ({', '.join(who)})",
                                    ens.line_of(r'"' + re.escape(tensor) + r'"')))


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
        elif key in ("gpt_model_path", "engine_dir") and not (path / "config.json").is_file() \
                and not (path / "synthetic_engine.json").is_file():
            problems.append(Problem(m.rel, f"{key} '{value}' holds no config.json (not an engine directory)",
                                    m.param_line(key)))
    value = params.get("tokenizer_dir")
    if _is_set(value):
        path = _map_path(value, served_at, root)
        if not path.is_dir():
            problems.append(Problem(m.rel, f"tokenizer_dir '{value}' is not an existing directory (a hub id or a "
                                           "path outside the server's filesystem?)", m.param_line("tokenizer_dir")))
        elif not has_tokenizer_files(path):
            problems.append(Problem(m.rel, f"tokenizer_dir '{value}' holds no tokenizer files "
                                           f"({describe_tokenizer_files()})", m.param_line("tokenizer_dir")))


def _trtllm_models(models: dict[str, _Model]) -> list[_Model]:
    """Models that serve an engine: backend ``tensorrtllm``, or the model called ``tensorrt_llm`` (repo-builder's
    Python engines use backend python)."""
    return [m for m in models.values()
            if m.config is not None and (m.config.backend == "tensorrtllm" or m.name == "tensorrt_llm")]


def _check_structure(models: dict[str, _Model], problems: list[Problem]) -> None:
    for m in _trtllm_models(models):
        total = sum(g.count or 1 for g in m.config.instance_group) if m.config.instance_group else 1
        if total > 1:
            problems.append(Problem(m.rel, f"{total} instances of the TensorRT-LLM model; only one is supported "
                                           "(use gpu_device_ids / participant_ids for replicas, case B10)",
                                    m.line_of(r"^\s*count\s*:")))
    for m in models.values():
        if m.config is None:
            continue
        name = m.params.get("tensorrt_llm_model_name")
        if _is_set(name):
            for target in (x.strip() for x in name.split(",")):
                if target and target not in models:
                    problems.append(Problem(m.rel, f"tensorrt_llm_model_name '{target}' is not a model of the repository",
                                            m.param_line("tensorrt_llm_model_name")))


def _check_lock(root: Path, problems: list[Problem]) -> dict[str, Any] | None:
    from .errors import RepoBuilderError

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
            problems.append(Problem(rel, "changed since it was rendered (sha256 differs from the lock file; "
                                         "re-render with `repo-builder render --force` or keep your edit knowingly)"))
    return lock


def validate_repository(repo: str | Path, *, engine_dir: str | Path | None = None,
                        served_at: str | Path | None = None, warnings: bool = False) -> list[Problem]:
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
    from .errors import RepoBuilderError

    root = Path(repo)
    if not root.is_dir():
        raise RepoBuilderError("not a directory", path=root, hint="pass the model repository folder")
    problems: list[Problem] = []
    lock = _check_lock(root, problems)
    if served_at is None and lock is not None and lock.get("serve_path"):
        served_at = lock["serve_path"]
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
    if engine_dir is not None:
        problems.extend(check_against_engine(models, engine_dir))
    if not warnings:
        problems = [p for p in problems if p.severity == "error"]
    return problems


# ------------------------------------------------------------------------------------------------------
# engine cross-checks


def _engine_value(engine: Any, *names: str) -> Any:
    for name in names:
        value = getattr(engine, name, None)
        if value is not None:
            return value
    return None


def _truthy(text: str | None) -> bool | None:
    if not _is_set(text):
        return None
    try:
        return parse_bool(text)
    except ValueError:
        return None


def _as_int(text: str | None) -> int | None:
    if not _is_set(text):
        return None
    try:
        return int(text.strip())
    except ValueError:
        return None


def check_against_engine(models: dict[str, _Model] | str | Path, engine_dir: str | Path) -> list[Problem]:
    """Contradictions between the repository's TRT-LLM model config(s) and the engine at ``engine_dir``.

    ``models`` is a repository path or the parsed models of :func:`validate_repository`. One problem per
    contradiction; see the module docstring for the list. Facts: TRT-LLM backend (``model_instance_state.cc``)
    load errors quoted in cases B06-B11.
    """
    from .engine import check_rank_files, inspect_engine
    from .errors import RepoBuilderError

    if not isinstance(models, dict):
        models = _load_models(Path(models), [])
    engine = inspect_engine(engine_dir)
    out: list[Problem] = []
    targets = _trtllm_models(models)
    if not targets:
        return [Problem(".", "no TensorRT-LLM model (backend tensorrtllm or a gpt_model_path parameter) to "
                             f"check against the engine {engine_dir}")]
    try:
        check_rank_files(engine)
    except RepoBuilderError as exc:
        out.append(Problem(str(engine_dir), exc.message))
    except TypeError:  # older signature: a directory
        try:
            check_rank_files(engine_dir)  # type: ignore[arg-type]
        except RepoBuilderError as exc:
            out.append(Problem(str(engine_dir), exc.message))

    e_batch = _engine_value(engine, "max_batch_size")
    e_beam = _engine_value(engine, "max_beam_width") or 1
    e_logits = _engine_value(engine, "logits_datatype", "logits_dtype")
    paged_kv = _engine_value(engine, "paged_kv_cache")
    packed = _engine_value(engine, "remove_input_padding")
    # gpt_attention_plugin is a string ("float16", "auto") or None when the plugin is off
    attention = engine.gpt_attention_plugin is not None if engine.kind == "trtllm" else None
    paged_ctx = _engine_value(engine, "use_paged_context_fmha")
    for m in targets:
        c = m.config
        params = m.params
        if e_batch is not None and c.max_batch_size > int(e_batch):
            out.append(Problem(m.rel, f"max_batch_size {c.max_batch_size} is above the engine's max_batch_size "
                                      f"{e_batch} (the engine decides: at most {e_batch} requests run at once, B08)",
                               m.line_of(r"^\s*max_batch_size\s*:"), severity="warning"))
        beam = _as_int(params.get("max_beam_width"))
        if beam is not None and beam > int(e_beam):
            out.append(Problem(m.rel, f"max_beam_width {beam} is above the engine's max_beam_width {e_beam} (B07)",
                               m.param_line("max_beam_width")))
        decoupled = bool(c.model_transaction_policy.decoupled)
        eff_beam = beam if beam is not None else int(e_beam)
        if decoupled and eff_beam > 1:
            out.append(Problem(m.rel, f"decoupled (streaming) with max_beam_width {eff_beam}: TRT-LLM streams only with "
                                      "beam width 1 (B30); streaming requests must use beam_width 1",
                               m.line_of(r"^\s*decoupled\s*:"), severity="warning"))
        if e_logits is not None:
            want = _dtype_of_engine_logits(e_logits)
            outs = {t.name: t for t in c.output}
            for name in ("context_logits", "generation_logits"):
                if name in outs and want is not None and dtype_name(outs[name].data_type) != want:
                    out.append(Problem(m.rel, f"output {name} is {dtype_name(outs[name].data_type)} but the engine's "
                                              f"logits dtype is {e_logits} ({want}); set logits_datatype={want} (B09)",
                                       m.tensor_line(name)))
        reuse = _truthy(params.get("enable_kv_cache_reuse"))
        if reuse:
            if paged_ctx is False:
                out.append(Problem(m.rel, "enable_kv_cache_reuse needs an engine built with paged context FMHA "
                                          "(trtllm-build --use_paged_context_fmha enable) (B06)",
                                   m.param_line("enable_kv_cache_reuse")))
            if eff_beam > 1:
                out.append(Problem(m.rel, f"enable_kv_cache_reuse with max_beam_width {eff_beam}: block reuse is not "
                                          "supported with beam width > 1 (B06)", m.param_line("enable_kv_cache_reuse")))
        if _truthy(params.get("enable_chunked_context")) and paged_ctx is False:
            out.append(Problem(m.rel, "enable_chunked_context needs an engine built with --use_paged_context_fmha enable",
                               m.param_line("enable_chunked_context")))
        model_type = params.get("gpt_model_type")
        if _is_set(model_type) and model_type.strip().lower().startswith("inflight"):
            missing = [what for what, ok in (("paged KV cache", paged_kv), ("packed input (remove_input_padding)", packed),
                                             ("the GPT attention plugin", attention)) if ok is False]
            if missing:
                out.append(Problem(m.rel, f"gpt_model_type {model_type} (in-flight batching) needs an engine with "
                                          f"{', '.join(missing)}; rebuild the engine or use V1",
                                   m.param_line("gpt_model_type")))
    return out


def _dtype_of_engine_logits(value: Any) -> str | None:
    text = str(value)
    if text.startswith("TYPE_"):
        return text
    return {"float32": "TYPE_FP32", "float16": "TYPE_FP16", "bfloat16": "TYPE_BF16", "fp32": "TYPE_FP32",
            "fp16": "TYPE_FP16", "bf16": "TYPE_BF16"}.get(text.lower())
