"""Rendering a Triton model repository: templates, vendoring, engine placement, atomic write, dry run.

Pipeline of :func:`render_repository` (``docs/design.md``)::

    inspect_engine -> inspect_tokenizer -> validate_user_values (--values file, then --set) -> resolve
    -> render every template to text -> parse each with protobuf text_format, scan for "${"
    -> write into a temp dir beside the output (same filesystem) -> place engine files
    -> vendor the runtime -> lock file -> validate the temp dir -> atomic rename

Nothing is written before every template rendered and parsed, so a template bug or a bad value fails
before the filesystem is touched. A failure after that removes the temp dir; an existing repository
is never modified unless ``force`` is set, and then it is moved aside and deleted only after the new one
has been renamed into place. ``dry_run`` goes through the same steps up to the write and returns the
plan plus a unified diff against the existing repository.

Templates (``model_templates/<profile>/<model>/config.pbtxt.j2``) see every parameter of the profile by
name (``None`` = unset, omitted from the file) plus the reserved names in :data:`RESERVED_TEMPLATE_VARS`.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, get_args

from .contract import MODEL_NAMES, ProfileContract, TritonDType, load_contract
from .errors import Interrupted, ParameterError, RenderError, RepoBuilderError, TemplateError
from .lockfile import LOCK_NAME, build_lock, dumps
from .paths import runtime_dir, templates_dir
from .pbtxt import backend_json, find_placeholders, parse_model_config, quote
from .placement import PLACEMENT_MODES, PlacementPlan, place, plan_placement

#: Names every template may use besides the profile's parameters (documented; tested).
RESERVED_TEMPLATE_VARS = {
    "contract": "the model's entry of the tensor contract (repo_builder.contract.ModelContract)",
    "model_name": "the model's name in the repository (its folder name)",
    "engine_kind": "EngineInfo.kind: trtllm, hf or synthetic",
}

#: Python model source kind per repository model (model_templates/python_models/<kind>/model.py).
PYTHON_MODEL_KINDS = {
    "preprocessing": "preprocessing",
    "postprocessing": "postprocessing",
    "tensorrt_llm_bls": "tensorrt_llm_bls",
}
ENGINE_MODEL_KINDS = {"hf": "reference_engine", "synthetic": "synthetic_engine"}
RUNTIME_FOLDER = "repo_builder_runtime"
#: Triton data type names (``TYPE_*``): the contract's own type, so a template value and a tensor agree.
TRITON_DTYPES: tuple[str, ...] = get_args(TritonDType)


# ----------------------------------------------------------------------------------------------------
# value formatting (Jinja2 filters)


def param_text(value: Any, key: str | None = None, ptype: str | None = None) -> str:
    """The ``string_value`` text of a parameter value.

    bool -> ``true``/``false``; int/float -> decimal; str/path -> as is; a list of numbers -> ``"0,1"``; a
    list of lists -> ``"0,1;2,3"`` (``int_list_groups``: gpu_device_ids, participant_ids) or, for
    ``int_tuples`` parameters (medusa_choices, eagle_choices), ``"{0, 0, 0}, {0, 1}"``.

    Raises:
        TemplateError: a value of another type (names ``key``).
    """
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value) if isinstance(value, float) else str(value)
    if isinstance(value, (str, os.PathLike)):
        return str(value)
    if isinstance(value, (list, tuple)):
        if all(isinstance(v, (list, tuple)) for v in value) and value:
            if ptype == "int_tuples":
                return ", ".join("{" + ", ".join(param_text(x, key) for x in v) + "}" for v in value)
            return ";".join(",".join(param_text(x, key) for x in v) for v in value)
        if any(isinstance(v, (list, tuple, dict)) for v in value):
            raise TemplateError(f"cannot write a mixed nested list {value!r} as a parameter", key=key)
        return ",".join(param_text(v, key) for v in value)
    raise TemplateError(f"cannot write a value of type {type(value).__name__} ({value!r}) as a parameter", key=key)


def _pbint(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, str) and value.strip().lstrip("-").isdigit():
            return str(int(value))
        raise TemplateError(f"expected an integer for a structural field, got {value!r}")
    return str(value)


def _dtype(value: Any, name: str | None = None) -> str:
    if value not in TRITON_DTYPES:
        raise TemplateError(f"'{value}' is not a Triton data type (TYPE_FP32, TYPE_FP16, ...)", key=name)
    return str(value)


def make_environment(params: Mapping[str, Any] | None = None):
    """The Jinja2 environment for ``model_templates/``: StrictUndefined, no autoescape, trailing newline kept.

    Filters: ``pbstr`` (protobuf string literal), ``param_text(key)`` (parameter value text; list formats
    follow the schema's ``Parameter.format_value`` for the config keys in ``params``), ``pbint`` (checked
    integer), ``dtype(name)``
    (checked ``TYPE_*`` name).
    """
    import jinja2

    known = dict(params or {})

    def strict(func: Any) -> Any:
        # StrictUndefined only fails when printed or iterated; a filter receiving one makes it fail with the
        # variable's name instead of a confusing type error.
        def wrapper(value: Any, *args: Any) -> Any:
            if isinstance(value, jinja2.Undefined):
                value._fail_with_undefined_error()
            return func(value, *args)

        return wrapper

    def _param_text(value: Any, key: str | None = None) -> str:
        param = known.get(key or "")
        if param is not None and value is not None:
            return str(param.format_value(value))
        return param_text(value, key)

    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(templates_dir())),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,
    )
    env.filters["pbstr"] = strict(lambda v, key=None: quote(v, key=key))
    env.filters["param_text"] = strict(_param_text)
    env.filters["pbint"] = strict(_pbint)
    env.filters["dtype"] = strict(_dtype)
    return env


def template_path(profile: str, model: str) -> Path:
    """``model_templates/<profile>/<model>/config.pbtxt.j2``."""
    return templates_dir() / profile / model / "config.pbtxt.j2"


def _tidy(text: str) -> str:
    """Strip trailing blanks and collapse runs of empty lines (left where unset parameters were)."""
    lines = [line.rstrip() for line in text.splitlines()]
    out: list[str] = []
    for line in lines:
        if line == "" and (not out or out[-1] == ""):
            continue
        out.append(line)
    while out and out[-1] == "":
        out.pop()
    return "\n".join(out).replace("}\n\nparameters: {", "}\nparameters: {") + "\n"


# ----------------------------------------------------------------------------------------------------
# schema access


def _schema_params(profile: str) -> list[Any]:
    """The schema's rendered parameters of ``profile`` (build-time keys left out), in schema order."""
    from .schema import load_schema

    return list(load_schema().for_profile(profile).values())


def template_parameter_names(profile: str) -> set[str]:
    """Names of the parameters the templates of ``profile`` must use: every schema parameter of the profile
    that is rendered (kind other than build_time)."""
    return {p.name for p in _schema_params(profile)}


def model_template_vars(profile: str, model: str, values: Mapping[str, Any], engine_kind: str) -> dict[str, Any]:
    """The variables the template of ``model`` gets: every rendered parameter of the profile (``None`` when
    unset, or when ``parameters.yaml`` ``engine_kinds`` excludes ``engine_kind`` for this model)."""
    out: dict[str, Any] = {}
    for p in _schema_params(profile):
        value = values.get(p.name)
        kinds = p.engine_kinds.get(model)
        if kinds is not None and engine_kind not in kinds:
            value = None
        out[p.name] = value
    return out


def _param_formatters(profile: str) -> dict[str, Any]:
    """{config key: schema Parameter} for the ``param_text`` filter."""
    return {p.key: p for p in _schema_params(profile)}


def render_configs(
    profile: str,
    values: Mapping[str, Any],
    *,
    engine_kind: str,
    contract: ProfileContract | None = None,
    names: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """Render, tidy and parse the ``config.pbtxt`` of every model of ``profile``.

    Args:
        values: {parameter name: resolved value or None} (``Resolution.as_template_vars()``).
        engine_kind: ``trtllm``, ``hf`` or ``synthetic`` (reserved template variable ``engine_kind``).
        names: {model role: model name in the repository} when they differ (several LLMs in one repository);
            the template variable ``model_name`` and the ensemble's step models follow it.
    Returns:
        {model role (preprocessing, tensorrt_llm, ...): config.pbtxt text}.
    Raises:
        TemplateError: a missing template, an undefined variable (names it and the template), a value
            that cannot be written, a leftover ``${`` (with its line), or a result that protobuf's text
            format refuses (with its line).
    """
    import jinja2

    contract = contract or load_contract(profile)
    env = make_environment(_param_formatters(profile))
    out: dict[str, str] = {}
    for model in MODEL_NAMES:
        path = template_path(profile, model)
        if not path.is_file():
            raise TemplateError(
                "template missing",
                path=path,
                hint=f"every profile needs a config.pbtxt.j2 for each of {', '.join(MODEL_NAMES)}",
            )
        variables = model_template_vars(profile, model, values, engine_kind)
        variables.update(
            contract=contract.models[model], model_name=(names or {}).get(model, model), engine_kind=engine_kind
        )
        try:
            text = env.get_template(f"{profile}/{model}/config.pbtxt.j2").render(**variables)
        except jinja2.UndefinedError as exc:
            raise TemplateError(
                f"template uses an undefined variable: {exc.message}",
                path=path,
                hint="add the parameter to model_templates/parameters.yaml or fix the template",
            ) from exc
        except jinja2.TemplateSyntaxError as exc:
            raise TemplateError(f"line {exc.lineno}: template syntax error: {exc.message}", path=path) from exc
        except TemplateError as exc:
            raise TemplateError(exc.message, key=exc.key, path=path, hint=exc.hint) from exc
        text = _tidy(text)
        rel = f"{(names or {}).get(model, model)}/config.pbtxt"
        for ph in find_placeholders(text):
            raise TemplateError(f"line {ph.line}: unfilled placeholder ${{{ph.name}}} in {rel}", path=path)
        parse_model_config(text, path=f"{rel} (rendered from {path})")
        out[model] = text
    return out


# ----------------------------------------------------------------------------------------------------
# plan


@dataclass
class RenderPlan:
    """Everything :func:`render_repository` will write.

    Attributes:
        output: where the repository goes (absolute).
        serve_root: the path the server will see the repository at (``output`` unless ``serve_path``).
        files: {repository-relative POSIX path: bytes} of every file except engine files (lock included).
        empty_dirs: folders created empty (``ensemble/1``).
        placement: the engine placement.
    """

    output: Path
    serve_root: Path
    profile: str
    engine: Any
    tokenizer: Any
    resolution: Any
    placement: PlacementPlan
    files: dict[str, bytes]
    empty_dirs: list[str]
    lock: dict[str, Any]
    warnings: list[str] = field(default_factory=list)


@dataclass
class RenderResult:
    """What :func:`render_repository` did: ``written`` is False for a dry run; ``diff`` is the unified diff
    against the repository that was at ``output`` before ('' when there was none or nothing changed)."""

    output: Path
    plan: RenderPlan
    written: bool
    diff: str
    existed: bool

    @property
    def warnings(self) -> list[str]:
        """Warnings from resolve (shown in yellow by the CLI)."""
        return self.plan.warnings


def _python_model_source(kind: str) -> bytes:
    path = templates_dir() / "python_models" / kind / "model.py"
    if not path.is_file():
        raise TemplateError(
            "Python model source missing",
            path=path,
            hint=f"model_templates/python_models/{kind}/model.py must exist to render this model",
        )
    return path.read_bytes()


def runtime_files() -> dict[str, bytes]:
    """{path relative to the runtime package: bytes} of ``repo_builder/runtime`` (no ``__pycache__``/``.pyc``)."""
    root = runtime_dir()
    out = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        if any(part == "__pycache__" or part.startswith(".") for part in rel.parts) or path.suffix == ".pyc":
            continue
        if path.is_file():
            out[rel.as_posix()] = path.read_bytes()
    return out


def wiring_data(contract: ProfileContract, values: Mapping[str, Any]) -> dict[str, Any]:
    """``tensorrt_llm_bls/1/wiring.json``: the ensemble steps plus the BLS's inputs and outputs.

    ``{"profile": P, "steps": [{"model", "input_map", "output_map"}], "inputs": [tensor], "outputs": [tensor]}``
    where a tensor is ``{"name", "data_type", "dims", "optional"}`` with ``data_type_param`` resolved.
    """
    bls = contract.models["tensorrt_llm_bls"]

    def tensor(spec: Any) -> dict[str, Any]:
        dtype = spec.data_type if spec.data_type is not None else values.get(spec.data_type_param)
        return {"name": spec.name, "data_type": dtype, "dims": list(spec.dims), "optional": spec.optional}

    return {
        "profile": contract.profile,
        "steps": contract.wiring(),
        "inputs": [tensor(s) for s in bls.inputs],
        "outputs": [tensor(s) for s in bls.outputs],
    }


def _load_values_file(values_file: str | Path) -> dict[str, Any]:
    import yaml

    path = Path(values_file)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ParameterError(f"cannot read the values file: {exc.strerror or exc}", path=path) from exc
    except yaml.YAMLError as exc:
        raise ParameterError(f"not valid YAML: {exc}", path=path) from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ParameterError("the values file must be a YAML mapping of parameter: value", path=path)
    return {str(k): v for k, v in data.items()}


def _check_output(
    output: Path,
    engine_dir: Path,
    tokenizer_dir: Path,
    *,
    force: bool,
    dry_run: bool,
    placement: str,
    delete_unlisted: bool = False,
) -> bool:
    """Refuse outputs that would clobber something; returns whether ``output`` exists."""
    exists = output.exists() or output.is_symlink()
    if exists and not output.is_dir():
        raise RenderError("output exists and is not a directory", path=output, key="--output")
    for src, what in ((engine_dir, "engine"), (tokenizer_dir, "tokenizer")):
        if src == output or output in src.parents:
            raise RenderError(
                f"the {what} directory lies inside the output repository; rendering there would replace it",
                path=output,
                key="--output",
                hint="choose another --output",
            )
    if placement != "reference" and engine_dir in output.parents:
        raise RenderError(
            "the output repository lies inside the engine directory",
            path=output,
            key="--output",
            hint="choose an --output outside the engine directory",
        )
    if exists and not dry_run:
        if not force:
            raise RenderError(
                "output already exists",
                path=output,
                key="--output",
                hint="pass --force to replace it, or --dry-run to see the difference",
            )
        if any(output.iterdir()):
            _check_replaceable(output, delete_unlisted=delete_unlisted)
    return exists


def _check_replaceable(output: Path, *, delete_unlisted: bool) -> None:
    """``render --force`` replaces ``output`` only when its lock file proves repo-builder rendered it (it
    parses and passes :class:`repo_builder.lockfile.LockFile`), and deletes files the lock file does not list
    only with ``delete_unlisted`` (``--delete-unlisted``); otherwise it refuses and lists them.

    Raises:
        RenderError: no lock file, a malformed one (naming the key), or unlisted files (listing them).
    """
    from .lockfile import read_lock, unlisted_files

    if not ((output / LOCK_NAME).is_file() or (output / LOCK_NAME).is_symlink()):
        raise RenderError(
            f"refusing to replace a directory that repo-builder did not render (no {LOCK_NAME})",
            path=output,
            key="--output",
            hint="remove it yourself or choose another --output",
        )
    try:
        lock = read_lock(output)
    except RenderError as exc:
        raise RenderError(
            f"refusing to replace the directory: its lock file does not prove repo-builder "
            f"rendered it ({LOCK_NAME}: {exc.message})",
            path=output,
            key="--output",
            hint="remove the directory yourself or choose another --output",
        ) from None
    assert lock is not None
    extra = unlisted_files(output, lock)
    if extra and not delete_unlisted:
        shown = ", ".join(extra[:10]) + (f" and {len(extra) - 10} more" if len(extra) > 10 else "")
        raise RenderError(
            f"refusing to replace the repository: {len(extra)} file(s) in it were not rendered by "
            f"repo-builder (the lock file does not list them) and would be deleted: {shown}",
            path=output,
            key="--output",
            hint="move them out first, or pass --delete-unlisted to delete them with the old repository",
        )


def plan_render(
    engine_dir: str | Path,
    tokenizer_dir: str | Path,
    output: str | Path,
    *,
    profile: str = "trtllm-1.2",
    user_values: Mapping[str, Any] | None = None,
    values_file: str | Path | None = None,
    engine_mode: str = "copy",
    streaming: bool | None = None,
    serve_path: str | Path | None = None,
    force: bool = False,
    dry_run: bool = False,
    delete_unlisted: bool = False,
    model_prefix: str = "",
) -> RenderPlan:
    """Inspect, resolve and render everything in memory (writes nothing). See :func:`render_repository`.

    ``model_prefix`` (one LLM of several in a repository, :func:`render_multi_repository`) prefixes every model
    folder and name (``<prefix>preprocessing``, ...), the ensemble's steps, the engine's folder and the BLS's
    ``tensorrt_llm_model_name``.
    """
    from . import __version__
    from .engine import check_rank_files, engine_fingerprint, inspect_engine
    from .resolve import resolve
    from .schema import validate_user_values
    from .tokenizer import check_tokenizer_dir, inspect_tokenizer

    if engine_mode not in PLACEMENT_MODES:
        raise RenderError(
            f"unknown engine placement mode '{engine_mode}'",
            key="--engine-mode",
            hint=f"choose one of {', '.join(PLACEMENT_MODES)}",
        )
    contract = load_contract(profile)
    output = Path(output).expanduser().absolute()
    engine_path = Path(engine_dir).expanduser().resolve()
    tokenizer_path = check_tokenizer_dir(str(tokenizer_dir))  # the raw text, so a hub id is named as one (B22)
    _check_output(
        output,
        engine_path,
        tokenizer_path,
        force=force,
        dry_run=dry_run,
        placement=engine_mode,
        delete_unlisted=delete_unlisted,
    )
    serve_root = Path(serve_path) if serve_path is not None else output
    if not serve_root.is_absolute():
        raise RenderError(
            "the serve path must be absolute (the repository's path inside the server)",
            key="--serve-path",
            path=serve_root,
        )

    checked: dict[str, Any] = {}
    if values_file is not None:
        checked.update(validate_user_values(profile, _load_values_file(values_file), source=str(values_file)))
    if user_values:
        checked.update(validate_user_values(profile, dict(user_values), source="--set"))

    engine = inspect_engine(engine_path)
    check_rank_files(engine)
    tokenizer = inspect_tokenizer(tokenizer_path, trust_remote_code=bool(checked.get("trust_remote_code")))
    kind = engine.kind

    names = {m: f"{model_prefix}{m}" for m in MODEL_NAMES}
    placement = plan_placement(kind, engine_path, engine_mode)
    if model_prefix:
        placement = _prefixed_placement(placement, model_prefix)
    engine_dir_value = placement.engine_dir_in(serve_root)
    resolution = resolve(
        profile, engine, tokenizer, checked, streaming=streaming, engine_dir_in_repo=str(engine_dir_value)
    )
    values = resolution.as_template_vars()
    render_contract = contract
    if model_prefix:
        values["tensorrt_llm_model_name"] = names["tensorrt_llm"]
        render_contract = _prefixed_contract(contract, names)

    configs = render_configs(profile, values, engine_kind=kind, contract=render_contract, names=names)

    files: dict[str, bytes] = {f"{names[m]}/config.pbtxt": text.encode("utf-8") for m, text in configs.items()}
    python_models = dict(PYTHON_MODEL_KINDS)
    if kind in ENGINE_MODEL_KINDS:
        python_models["tensorrt_llm"] = ENGINE_MODEL_KINDS[kind]
    runtime = runtime_files()
    for model, src_kind in python_models.items():
        files[f"{names[model]}/1/model.py"] = _python_model_source(src_kind)
        for rel, data in runtime.items():
            files[f"{names[model]}/1/{RUNTIME_FOLDER}/{rel}"] = data
    wiring = wiring_data(render_contract, values)
    for step in wiring["steps"]:  # the BLS finds the engine step by its role and calls tensorrt_llm_model_name
        if step["model"] == names["tensorrt_llm"]:
            step["model"] = "tensorrt_llm"
    files[f"{names['tensorrt_llm_bls']}/1/wiring.json"] = (json.dumps(wiring, indent=2) + "\n").encode()
    # The BLS runs postprocessing's code in-process (bls_local_postprocessing) with postprocessing's own config.
    post_config = backend_json(parse_model_config(configs["postprocessing"], path="postprocessing/config.pbtxt"))
    files[f"{names['tensorrt_llm_bls']}/1/postprocessing_config.json"] = (
        json.dumps(post_config, indent=2, sort_keys=True) + "\n"
    ).encode()
    for rel in files:
        if placement.files and any(rel == f.target for f in placement.files):
            raise RenderError(f"engine file would overwrite a rendered file: {rel}", path=engine_path)
    empty_dirs = [
        f"{names[m]}/1"
        for m in MODEL_NAMES
        if not any(r.startswith(f"{names[m]}/1/") for r in files)
        and not any(f.target.startswith(f"{names[m]}/1/") for f in placement.files)
    ]

    lock = build_lock(
        version=__version__,
        profile=profile,
        engine={
            "dir": str(engine_path),
            "kind": kind,
            "placement": engine_mode,
            "fingerprint": engine_fingerprint(engine),
            "engine_dir": str(engine_dir_value),
        },
        tokenizer_dir=str(tokenizer_path),
        values={name: (rv.value, rv.origin) for name, rv in resolution.values.items()},
        world_size=int(getattr(resolution, "world_size", 1) or 1),
        tensorrt_llm_model_names=[names["tensorrt_llm"]],
        files=files,
        serve_path=serve_path,
        engine_files=[f.target for f in placement.files],
        tp_size=engine.tp_size if kind == "trtllm" else 1,
        pp_size=engine.pp_size if kind == "trtllm" else 1,
        python_instances={names[m]: n for m, n in _python_instances(configs).items()},
    )
    files[LOCK_NAME] = dumps(lock)
    return RenderPlan(
        output=output,
        serve_root=serve_root,
        profile=profile,
        engine=engine,
        tokenizer=tokenizer,
        resolution=resolution,
        placement=placement,
        files=files,
        empty_dirs=empty_dirs,
        lock=lock,
        warnings=list(getattr(resolution, "warnings", []) or []),
    )


def _prefixed_placement(placement: PlacementPlan, prefix: str) -> PlacementPlan:
    """``placement`` with the engine folder (``tensorrt_llm/1...``) moved to ``<prefix>tensorrt_llm/1...``."""
    if placement.engine_subdir is None:
        return placement
    return PlacementPlan(
        placement.mode,
        placement.source_dir,
        prefix + placement.engine_subdir,
        [type(f)(f.source, prefix + f.target, f.size) for f in placement.files],
    )


def _prefixed_contract(contract: ProfileContract, names: Mapping[str, str]) -> ProfileContract:
    """``contract`` with the ensemble's step models renamed by ``names`` (role -> model name)."""
    ensemble = contract.models["ensemble"]
    steps = [step.model_copy(update={"model": names.get(step.model, step.model)}) for step in ensemble.steps]
    models = dict(contract.models)
    models["ensemble"] = ensemble.model_copy(update={"steps": steps})
    return contract.model_copy(update={"models": models})


def _python_instances(configs: Mapping[str, str]) -> dict[str, int]:
    """{model: Python-backend stub processes} of the rendered ``backend: "python"`` configs (for the lock file)."""
    from .pbtxt import parse_model_config, python_instances

    out = {}
    for model, text in configs.items():
        cfg = parse_model_config(text, path=f"{model}/config.pbtxt")
        if cfg.backend == "python":
            out[model] = python_instances(cfg)
    return out


# ----------------------------------------------------------------------------------------------------
# diff and write


def diff_against(plan: RenderPlan, existing: Path) -> str:
    """Unified diff from the repository at ``existing`` to the planned files (engine files left out)."""
    chunks: list[str] = []
    old_files: set[str] = set()
    if existing.is_dir():
        engine_targets = {f.target for f in plan.placement.files}
        for path in sorted(existing.rglob("*")):
            rel = path.relative_to(existing).as_posix()
            if (
                path.is_file()
                and "__pycache__" not in rel
                and rel not in engine_targets
                and not rel.startswith("tensorrt_llm/1/engine/")
                and not path.name.endswith(".engine")
            ):
                old_files.add(rel)
    for rel in sorted(old_files | set(plan.files)):
        new = plan.files.get(rel)
        old = (existing / rel).read_bytes() if rel in old_files else None
        if old == new:
            continue
        try:
            old_lines = old.decode("utf-8").splitlines(keepends=True) if old is not None else []
            new_lines = new.decode("utf-8").splitlines(keepends=True) if new is not None else []
        except UnicodeDecodeError:
            chunks.append(f"Binary files a/{rel} and b/{rel} differ\n")
            continue
        chunks.extend(
            difflib.unified_diff(
                old_lines,
                new_lines,
                fromfile=f"a/{rel}" if old is not None else "/dev/null",
                tofile=f"b/{rel}" if new is not None else "/dev/null",
            )
        )
        if chunks and not chunks[-1].endswith("\n"):
            chunks[-1] += "\n"
    return "".join(chunks)


def _write_tree(plan: RenderPlan, root: Path, *, progress: bool) -> None:
    for rel in plan.empty_dirs:
        (root / rel).mkdir(parents=True, exist_ok=True)
    for rel, data in plan.files.items():
        target = root / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    place(plan.placement, root, progress=progress)


class _WriteSignals:
    """SIGTERM, SIGINT and SIGHUP during the write phase of :func:`render_repository`.

    While active (main thread only; elsewhere it does nothing), the first of these signals raises
    :class:`~repo_builder.errors.Interrupted` at the point the program is at, so the ``except`` of the
    write phase removes the temporary folder (and the parent folders it created) before the CLI exits
    with 128 + the signal number (143 SIGTERM, 130 SIGINT, 129 SIGHUP). Later signals are ignored so that
    cleanup finishes. Inside :meth:`deferred` a signal is only recorded and raised when the block ends:
    used for the two renames that swap the new repository in, which must not be split.
    """

    SIGNALS = ("SIGTERM", "SIGINT", "SIGHUP")

    def __init__(self) -> None:
        self.received: int | None = None
        self._raised = False
        self._defer = 0
        self._old: dict[int, Any] = {}

    def __enter__(self) -> _WriteSignals:
        import signal
        import threading

        if threading.current_thread() is threading.main_thread():
            for name in self.SIGNALS:
                num = getattr(signal, name, None)
                if num is not None:
                    self._old[num] = signal.signal(num, self._handle)
        return self

    def __exit__(self, *exc: Any) -> None:
        import signal

        for num, handler in self._old.items():
            signal.signal(num, handler)
        self._old.clear()

    def _interrupted(self) -> Interrupted:
        self._raised = True
        return Interrupted(self.received or 15, "the partial repository was removed; nothing was written")

    def _handle(self, signum: int, frame: Any) -> None:
        if self.received is not None:
            return
        self.received = signum
        if not self._defer:
            raise self._interrupted()

    @contextmanager
    def deferred(self, *, reraise: bool = True) -> Iterator[None]:
        """Record signals during the block; raise the recorded one when it ends (unless ``reraise`` is
        False or one was raised already)."""
        self._defer += 1
        try:
            yield
        finally:
            self._defer -= 1
        if reraise and self.received is not None and not self._raised and not self._defer:
            raise self._interrupted()


def render_repository(
    engine_dir: str | Path,
    tokenizer_dir: str | Path,
    output: str | Path,
    *,
    profile: str = "trtllm-1.2",
    user_values: Mapping[str, Any] | None = None,
    values_file: str | Path | None = None,
    engine_mode: str = "copy",
    streaming: bool | None = None,
    force: bool = False,
    dry_run: bool = False,
    serve_path: str | Path | None = None,
    progress: bool = False,
    delete_unlisted: bool = False,
) -> RenderResult:
    """Render a Triton model repository for an engine and a tokenizer.

    Args:
        engine_dir: a TRT-LLM engine dir (``config.json`` + ``rank<N>.engine``), an HF checkpoint (served
            by the CPU reference engine) or a synthetic engine dir (``synthetic_engine.json``).
        tokenizer_dir: a local Hugging Face tokenizer directory.
        output: the repository directory to create.
        user_values: {parameter: value} (``--set``; wins over ``values_file``).
        values_file: a YAML mapping of parameter: value (``--values``).
        engine_mode: ``copy`` | ``hardlink`` | ``symlink`` | ``reference`` (see :mod:`repo_builder.placement`).
        streaming: drives ``decoupled_mode`` (None = the schema default).
        force: replace an existing repository: an empty directory, or one whose lock file proves repo-builder
            rendered it (valid :class:`repo_builder.lockfile.LockFile`) and that holds no file the lock file
            does not list.
        delete_unlisted: with ``force``, also delete files of the old repository that its lock file does not
            list (``--delete-unlisted``); without it such files make the render refuse, listing them.
        dry_run: write nothing; return the plan and a diff against ``output``.
        serve_path: the absolute path the server will see the repository at (container mounts, case B22);
            ``engine_dir`` inside the repository is written under it. Default: ``output``.
        progress: show a rich progress bar while copying engine files over 64 MiB.
    Returns:
        RenderResult.
    Raises:
        RepoBuilderError subclasses naming the key or file: EngineError, TokenizerError, ParameterError,
        TemplateError, RenderError (output exists, placement failed, the rendered repository failed validation).
    """
    plan = plan_render(
        engine_dir,
        tokenizer_dir,
        output,
        profile=profile,
        user_values=user_values,
        values_file=values_file,
        engine_mode=engine_mode,
        streaming=streaming,
        serve_path=serve_path,
        force=force,
        dry_run=dry_run,
        delete_unlisted=delete_unlisted,
    )
    return write_plan(plan, dry_run=dry_run, progress=progress)


def write_plan(plan: RenderPlan, *, dry_run: bool = False, progress: bool = False) -> RenderResult:
    """Write a :class:`RenderPlan` atomically (temp dir beside the output, validate, rename), or only diff it
    when ``dry_run``. See :func:`render_repository`.

    Raises:
        RenderError: writing failed or the written repository failed validation (nothing is left behind).
    """
    out = plan.output
    existed = out.exists()
    diff = diff_against(plan, out) if existed else ""
    if dry_run:
        return RenderResult(out, plan, written=False, diff=diff, existed=existed)

    created_parents: list[Path] = []
    parent = out.parent
    while not parent.exists():
        created_parents.append(parent)
        parent = parent.parent
    tmp: Path | None = None
    old: Path | None = None
    with _WriteSignals() as signals:
        try:
            for p in reversed(created_parents):
                p.mkdir()
            tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.repo-builder-tmp-", dir=out.parent))
            os.chmod(tmp, 0o755)
            _write_tree(plan, tmp, progress=progress)
            from .validate import validate_repository

            problems = validate_repository(tmp, served_at=plan.serve_root)
            if problems:
                raise RenderError(
                    "the rendered repository failed validation (a repo-builder bug):\n"
                    + "\n".join(str(p) for p in problems),
                    path=out,
                )
            with signals.deferred(reraise=False):  # the swap is two renames: a signal waits until both are done
                if existed:
                    old = Path(tempfile.mkdtemp(prefix=f".{out.name}.repo-builder-old-", dir=out.parent))
                    os.rmdir(old)
                    os.rename(out, old)
                try:
                    os.rename(tmp, out)
                except OSError:
                    if old is not None:
                        os.rename(old, out)
                        old = None
                    raise
                tmp = None
                if old is not None:
                    shutil.rmtree(old, ignore_errors=True)
                    old = None
            if signals.received is not None:
                raise Interrupted(
                    signals.received,
                    f"the signal came while the finished repository was being "
                    f"moved into place; it is complete at {out}",
                )
        except BaseException as exc:
            with signals.deferred(reraise=False):  # cleanup is not cut short by a second signal
                if tmp is not None:
                    shutil.rmtree(tmp, ignore_errors=True)
                for p in created_parents:
                    try:
                        p.rmdir()
                    except OSError:
                        pass
            if isinstance(exc, OSError):
                raise RenderError(f"writing the repository failed: {exc.strerror or exc}", path=out) from exc
            raise
    return RenderResult(out, plan, written=True, diff=diff, existed=existed)


#: Name of one LLM in a repository holding several (``render --model NAME=ENGINE_DIR,TOKENIZER_DIR``).
_LLM_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


def render_multi_repository(
    llms: list[tuple[str, str | Path, str | Path]],
    output: str | Path,
    *,
    profile: str = "trtllm-1.2",
    user_values: Mapping[str, Any] | None = None,
    values_file: str | Path | None = None,
    engine_mode: str = "copy",
    streaming: bool | None = None,
    force: bool = False,
    dry_run: bool = False,
    serve_path: str | Path | None = None,
    progress: bool = False,
    delete_unlisted: bool = False,
) -> RenderResult:
    """Render one repository serving several LLMs: ``[(name, engine_dir, tokenizer_dir), ...]``.

    Each LLM gets its own five models named ``<name>_preprocessing``, ``<name>_tensorrt_llm``,
    ``<name>_postprocessing``, ``<name>_ensemble`` and ``<name>_tensorrt_llm_bls`` (rendered exactly as
    :func:`render_repository` renders one, with its own engine and tokenizer; ``--set``/``--values`` apply to
    all), and the repository one lock file listing them (:func:`repo_builder.lockfile.build_multi_lock`).
    The engines must need the same world size: one launch serves them all, ranks > 0 load every
    ``<name>_tensorrt_llm``.

    Raises:
        RenderError: fewer than two LLMs, a name that is not ``[A-Za-z0-9][A-Za-z0-9_.-]*`` or is repeated,
            engines with different world sizes; and whatever :func:`render_repository` raises, prefixed by
            the LLM's name.
    """
    from . import __version__
    from .lockfile import build_multi_lock

    if len(llms) < 2:
        raise RenderError(
            "several LLMs need at least two --model NAME=ENGINE_DIR,TOKENIZER_DIR",
            key="--model",
            hint="render one LLM with --engine-dir and --tokenizer-dir",
        )
    seen: set[str] = set()
    for name, _, _ in llms:
        if not _LLM_NAME.match(name):
            raise RenderError(
                f"'{name}' is not a model name: letters, digits, '_', '.', '-', starting with a "
                "letter or digit, at most 64 characters",
                key="--model",
            )
        if name in seen:
            raise RenderError(f"the name '{name}' is given twice", key="--model")
        seen.add(name)
    plans: list[tuple[str, RenderPlan]] = []
    for name, engine_dir, tokenizer_dir in llms:
        try:
            plan = plan_render(
                engine_dir,
                tokenizer_dir,
                output,
                profile=profile,
                user_values=user_values,
                values_file=values_file,
                engine_mode=engine_mode,
                streaming=streaming,
                serve_path=serve_path,
                force=force,
                dry_run=dry_run,
                delete_unlisted=delete_unlisted,
                model_prefix=f"{name}_",
            )
        except RepoBuilderError as exc:
            exc.message = f"--model {name}: {exc.message}"
            raise
        plans.append((name, plan))
    sizes = {name: plan.lock["launch"]["world_size"] for name, plan in plans}
    if len(set(sizes.values())) > 1:
        raise RenderError(
            "the engines need different world sizes (one launch serves them all): "
            + ", ".join(f"{n} {ws}" for n, ws in sizes.items()),
            key="--model",
            hint="serve engines built with the same tp x pp together",
        )
    files: dict[str, bytes] = {}
    for _, plan in plans:
        files.update({rel: data for rel, data in plan.files.items() if rel != LOCK_NAME})
    first = plans[0][1]
    lock = build_multi_lock(
        version=__version__, profile=profile, llms=[(n, p.lock) for n, p in plans], files=files, serve_path=serve_path
    )
    files[LOCK_NAME] = dumps(lock)
    placement = PlacementPlan(
        first.placement.mode,
        first.placement.source_dir,
        first.placement.engine_subdir,
        [f for _, p in plans for f in p.placement.files],
    )
    combined = RenderPlan(
        output=first.output,
        serve_root=first.serve_root,
        profile=profile,
        engine=first.engine,
        tokenizer=first.tokenizer,
        resolution=first.resolution,
        placement=placement,
        files=files,
        empty_dirs=[d for _, p in plans for d in p.empty_dirs],
        lock=lock,
        warnings=[f"{n}: {w}" for n, p in plans for w in p.warnings],
    )
    return write_plan(combined, dry_run=dry_run, progress=progress)


__all__ = [
    "RenderPlan",
    "RenderResult",
    "RepoBuilderError",
    "diff_against",
    "make_environment",
    "param_text",
    "plan_render",
    "render_configs",
    "render_multi_repository",
    "render_repository",
    "template_parameter_names",
    "wiring_data",
    "write_plan",
]
