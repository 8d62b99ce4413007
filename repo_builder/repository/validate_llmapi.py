"""``repo-builder validate`` for the llmapi profiles: each Python-backend model with a ``<version>/model.yaml``
(NVIDIA/TensorRT-LLM v1.2.1 ``triton_backend/all_models/llmapi/tensorrt_llm/``), rendered by repo-builder or
filled by hand, read through the one parameter schema (``model_templates/parameters.yaml``, profile
``llmapi-1.2``) and the llmapi rule table (:data:`repo_builder.values.llmapi.LLMAPI_RULES`), as render checks
them.

Findings (each a :class:`repo_builder.repository.validate.Problem` naming ``<model>/1/model.yaml``, the key
path and its line, with the fix):

* the file is unreadable, not YAML, or not a mapping;
* a key the schema does not type for model.yaml (an unknown key with a did-you-mean, a key of another profile,
  a render choice such as ``text_front_doors``), a wrong type, a bad value (range, choices);
* a missing required key: ``model``, ``triton_config.max_batch_size``, ``triton_config.decoupled`` (NVIDIA's
  model.py reads the two ``triton_config`` keys with ``[...]``: a KeyError at load);
* ``triton_config.decoupled`` written as a string: NVIDIA's model.py takes ``bool(...)`` of it, so ``"false"``
  means decoupled;
* ``triton_config.decoupled`` / ``triton_config.max_batch_size`` differing from config.pbtxt's
  ``model_transaction_policy.decoupled`` / ``max_batch_size`` (``launch_triton_server.py`` disables
  auto-complete, so only config.pbtxt reaches Triton while the model reads the yaml copy);
* with the checkpoint on this machine (``model`` mapped through the serve path, or ``validate --engine-dir``):
  the runtime limits against its ``config.json`` (``max_seq_len`` vs ``max_position_embeddings``, the parallel
  sizes vs heads, KV heads, layers and experts, ``trust_remote_code`` vs ``auto_map``, ...), and its tokenizer;
* with a lock file: ``tensor_parallel_size`` x ``pipeline_parallel_size`` against ``launch.world_size`` (what
  ``repo-builder launch`` and the deployment generators start).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MODEL_YAML = "model.yaml"
#: Keys NVIDIA's 1.2.1 model.py needs (``[...]`` reads: a missing one fails the load), and render always writes.
REQUIRED_KEYS = ("model", "triton_config.max_batch_size", "triton_config.decoupled")


@dataclass
class ModelYaml:
    """One model's ``model.yaml``: ``rel`` (relative to the repository), the flattened keys and the line of each.

    Attributes:
        raw: {key path: value as YAML typed it}; nested mappings are flattened one level
            (``kv_cache_config.free_gpu_memory_fraction``), as the schema names them.
        values: {parameter name: value typed by the schema} of the keys the schema accepted.
    """

    rel: str
    raw: dict[str, Any] = field(default_factory=dict)
    lines: dict[str, int] = field(default_factory=dict)
    values: dict[str, Any] = field(default_factory=dict)


def model_yaml_path(model_dir: Path) -> Path | None:
    """``<model_dir>/<version>/model.yaml`` of the highest numeric version folder that has one (None: none)."""
    versions = sorted(
        (p for p in model_dir.iterdir() if p.is_dir() and p.name.isdigit() and (p / MODEL_YAML).is_file()),
        key=lambda p: int(p.name),
    )
    return versions[-1] / MODEL_YAML if versions else None


def flatten(data: Mapping[str, Any]) -> dict[str, Any]:
    """{key path: value}: top-level keys, and the keys of a mapping value as ``head.key`` (the schema's names)."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(value, Mapping) and value:
            for sub, inner in value.items():
                out[f"{key}.{sub}"] = inner
        else:
            out[str(key)] = value
    return out


def _key_lines(text: str) -> dict[str, int]:
    """{key path: 1-based line} of the keys of a YAML mapping (two levels), from the node marks."""
    import yaml

    out: dict[str, int] = {}
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        return out
    if not isinstance(root, yaml.MappingNode):
        return out
    for knode, vnode in root.value:
        head = str(knode.value)
        out[head] = knode.start_mark.line + 1
        if isinstance(vnode, yaml.MappingNode):
            for k2, _ in vnode.value:
                out[f"{head}.{k2.value}"] = k2.start_mark.line + 1
    return out


def read_model_yaml_file(path: Path, rel: str) -> tuple[ModelYaml | None, list[tuple[str, int | None]]]:
    """Parse ``path``; returns (the file, []) or (None, [(message, line)]) when it is unreadable, not YAML or
    not a mapping."""
    import yaml

    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        return None, [(f"unreadable: {exc}", None)]
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        return None, [
            (
                f"not valid YAML ({getattr(exc, 'problem', None) or exc}); NVIDIA's model.py fails to load",
                mark.line + 1 if mark is not None else None,
            )
        ]
    if not isinstance(data, Mapping):
        return None, [("must be a mapping of LLM() arguments plus triton_config (NVIDIA's llmapi model.yaml)", 1)]
    return ModelYaml(rel=rel, raw=flatten(data), lines=_key_lines(text)), []


def check_model_yaml(profile: str, doc: ModelYaml) -> list[tuple[str, str, str]]:
    """Type every key of ``doc`` with the schema of ``profile`` (fills ``doc.values``).

    Returns:
        [(key path, message, severity)]: unknown keys, build-time keys, wrong types, bad values, missing
        required keys, a string ``triton_config.decoupled``.
    """
    from ..profile.schema import load_schema, unknown_key_message
    from ..values.llmapi import LLMAPI_MODEL

    params = load_schema().for_profile(profile, include_build_time=True)
    out: list[tuple[str, str, str]] = []
    for key, raw in doc.raw.items():
        param = params.get(key)
        if param is None:
            why = unknown_key_message(profile, key).split(": ", 1)[1]
            fix = " Otherwise remove it." if why.endswith("?") else "; remove it, or name a key of the profile"
            out.append((key, f"not a model.yaml key: {why}{fix}", "error"))
            continue
        if param.kind == "build_time":
            out.append((key, f"not a model.yaml key of {profile}: {param.description}", "error"))
            continue
        if LLMAPI_MODEL not in param.models:
            out.append(
                (
                    key,
                    f"a render choice of repo-builder, not an LLM() argument; remove it from model.yaml "
                    f"(`repo-builder render --set {key}=...`)",
                    "error",
                )
            )
            continue
        if raw is None:
            if param.kind == "structural" or param.required:
                out.append((key, f"has no value; expected {param.type_text()}", "error"))
            continue
        if key == "triton_config.decoupled" and isinstance(raw, str):
            out.append(
                (
                    key,
                    f"{raw!r} is a string: NVIDIA's model.py takes bool() of it, so any non-empty string "
                    '("false" too) means decoupled; write true or false without quotes',
                    "error",
                )
            )
            continue
        try:
            doc.values[key] = param.coerce(raw)
        except ValueError as exc:
            out.append((key, f"{exc}", "error"))
    for key in REQUIRED_KEYS:
        if key not in doc.raw:
            param = params[key]
            why = (
                "NVIDIA's model.py reads it with [...]: the load fails with a KeyError"
                if key.startswith("triton_config.")
                else "the first LLM() argument: the checkpoint folder as the server sees it"
            )
            out.append((key, f"missing ({why}); add it ({param.type_text()})", "error"))
    return out


@dataclass(frozen=True)
class Finding:
    """A finding of :func:`llmapi_findings`: ``file`` relative to the repository, ``line`` 1-based or None."""

    file: str
    message: str
    line: int | None = None
    severity: str = "error"


def llmapi_findings(
    root: Path,
    models: Mapping[str, Any],
    *,
    profile: str,
    local_path: Callable[[str], Path],
    checkpoint_dir: str | Path | None = None,
    world_size: int | None = None,
    world_source: str = "",
) -> list[Finding] | None:
    """Every finding of the llmapi models of the repository at ``root``; None when it has none (a Python-backend
    model with ``<version>/model.yaml``).

    Args:
        models: {folder name: parsed model} of :func:`repo_builder.repository.validate._load_models` (``name``,
            ``rel``, ``config``, ``line_of``).
        profile: the llmapi profile whose schema types the keys (the lock file's, else the llmapi profile).
        local_path: maps a path as the server sees it to this machine (the serve path into the repository).
        checkpoint_dir: the checkpoint to check against (``validate --engine-dir``); default the path ``model``
            names, when it is a folder here.
        world_size: the lock file's ``launch.world_size`` (None: no lock file).
    """
    out: list[Finding] = []
    found = False
    for m in models.values():
        if m.config is None or m.config.backend != "python":
            continue
        path = model_yaml_path(root / m.name)
        if path is None:
            continue
        found = True
        rel = path.relative_to(root).as_posix()
        doc, errors = read_model_yaml_file(path, rel)
        if doc is None:
            out.extend(Finding(rel, msg, line) for msg, line in errors)
            continue
        for key, msg, severity in check_model_yaml(profile, doc):
            out.append(Finding(rel, f"{key}: {msg}", doc.lines.get(key), severity))
        out.extend(_against_config(m, doc))
        out.extend(_against_checkpoint(doc, local_path, checkpoint_dir))
        if world_size is not None:
            tp = int(doc.values.get("tensor_parallel_size") or 1)
            pp = int(doc.values.get("pipeline_parallel_size") or 1)
            if tp * pp != world_size:
                key = "tensor_parallel_size" if "tensor_parallel_size" in doc.raw else "pipeline_parallel_size"
                out.append(
                    Finding(
                        rel,
                        f"{key}: tensor_parallel_size x pipeline_parallel_size = {tp * pp}, but {world_source} is "
                        f"{world_size} (the ranks launch and deploy start); re-render with `repo-builder render "
                        "--force --set ...` so both agree",
                        doc.lines.get(key),
                    )
                )
    return out if found else None


def _against_config(m: Any, doc: ModelYaml) -> list[Finding]:
    """``triton_config.decoupled`` / ``max_batch_size`` against the model's config.pbtxt."""
    c = m.config
    out = []
    pairs = (
        (
            "triton_config.decoupled",
            bool(c.model_transaction_policy.decoupled),
            "model_transaction_policy.decoupled",
            r"^\s*decoupled\s*:",
        ),
        ("triton_config.max_batch_size", int(c.max_batch_size), "max_batch_size", r"^\s*max_batch_size\s*:"),
    )
    for key, theirs, pbtxt_key, pattern in pairs:
        if key not in doc.values:
            continue
        mine = doc.values[key]
        if mine != theirs:
            line = m.line_of(pattern)
            out.append(
                Finding(
                    doc.rel,
                    f"{key}: {_text(mine)}, but {m.rel} has {pbtxt_key} {_text(theirs)}"
                    f"{f' (line {line})' if line else ''}; write the same value in both (launch_triton_server.py "
                    "disables auto-complete, so only config.pbtxt reaches Triton while the model reads this "
                    "copy; with auto-complete on, Triton refuses the load)",
                    doc.lines.get(key),
                )
            )
    return out


def _text(value: Any) -> str:
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


def _against_checkpoint(
    doc: ModelYaml, local_path: Callable[[str], Path], checkpoint_dir: str | Path | None
) -> list[Finding]:
    """The llmapi rule table (:func:`repo_builder.values.llmapi.check_llmapi`) over the typed values and the
    checkpoint (``checkpoint_dir``, else ``model`` when it is a folder on this machine)."""
    from ..engine.checkpoint import read_checkpoint_facts
    from ..errors import RepoBuilderError
    from ..values.llmapi import check_llmapi

    model = doc.values.get("model")
    if checkpoint_dir is not None:
        where = Path(checkpoint_dir)
    elif isinstance(model, str):
        where = local_path(model)
        if not where.is_dir():
            if Path(model).is_absolute():
                return [
                    Finding(
                        doc.rel,
                        f"model: '{model}' is not an existing directory (the checkpoint folder as the server sees "
                        "it; pass --served-at when the repository is served at another path)",
                        doc.lines.get("model"),
                    )
                ]
            return [
                Finding(
                    doc.rel,
                    f"model: '{model}' is no folder here (a Hugging Face hub id the server downloads?); the "
                    "runtime limits were not checked against a checkpoint",
                    doc.lines.get("model"),
                    "warning",
                )
            ]
    else:
        return []
    try:
        facts = read_checkpoint_facts(where)
    except RepoBuilderError as exc:
        return [Finding(doc.rel, f"model: {exc.message}", doc.lines.get("model"))]
    tokenizer = _tokenizer(where)
    return [
        Finding(doc.rel, f"{f.key}: {f.message}", doc.lines.get(f.key), f.severity)
        for f in check_llmapi(facts, tokenizer, doc.values)
    ]


def _tokenizer(directory: Path) -> Any:
    """The checkpoint's tokenizer (the LLM API loads it from the model folder); None when it has none or it
    cannot be read here. Remote code is never run."""
    from ..errors import RepoBuilderError
    from ..runtime.tokenizer_files import has_tokenizer_files
    from ..tokenizer import inspect_tokenizer

    if not has_tokenizer_files(directory):
        return None
    try:
        return inspect_tokenizer(directory)
    except RepoBuilderError:
        return None


def check_llmapi_models(
    root: Path, models: Mapping[str, Any], lock: Any, served: Path | None, engine_dir: str | Path | None
) -> list[Any] | None:
    """The model.yaml checks as :class:`~repo_builder.repository.validate_models.Problem` entries (None: no
    llmapi model in the repository); the checkpoint is ``engine_dir`` when given, and the lock file (a
    :class:`~repo_builder.repository.lock_schema.LockFile` or None) gives the profile and the world size."""
    from ..profile.contract import list_profiles
    from .lock_schema import LOCK_NAME
    from .validate_models import Problem, map_path

    profiles = list_profiles("llmapi")
    locked = lock is not None and lock.profile in profiles
    findings = llmapi_findings(
        root,
        models,
        profile=lock.profile if locked else profiles[-1],
        local_path=lambda v: map_path(v, served, root),
        checkpoint_dir=engine_dir,
        world_size=lock.launch.world_size if locked else None,
        world_source=f"{LOCK_NAME} launch.world_size",
    )
    if findings is None:
        return None
    return [Problem(f.file, f.message, f.line, f.severity) for f in findings]
