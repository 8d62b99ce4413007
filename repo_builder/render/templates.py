"""Rendering the ``config.pbtxt`` templates: the Jinja2 environment, its filters and the template variables.

Templates (``model_templates/<profile>/<model>/config.pbtxt.j2``) see every parameter of the profile by
name (``None`` = unset, omitted from the file) plus the reserved names in :data:`RESERVED_TEMPLATE_VARS`.
Every rendered text is tidied, scanned for a leftover ``${`` and parsed with protobuf's text format before
anything is written (:func:`render_configs`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..errors import TemplateError
from ..profile.contract import MODEL_NAMES, ProfileContract, load_contract
from ..profile.dtypes import TRITON_DTYPES as TRITON_DTYPES
from ..profile.paths import templates_dir
from ..repository.pbtxt import find_placeholders, parse_model_config, quote

#: Names every template may use besides the profile's parameters (documented; tested).
RESERVED_TEMPLATE_VARS = {
    "contract": "the model's entry of the tensor contract (repo_builder.contract.ModelContract)",
    "model_name": "the model's name in the repository (its folder name)",
    "engine_kind": "EngineInfo.kind: trtllm, hf or synthetic",
}

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


def _bytecode_cache(jinja2: Any) -> Any:
    """Jinja2's compiled templates kept in ``$XDG_CACHE_HOME/repo-builder/jinja2`` (default ``~/.cache``), or
    None when that folder cannot be created (a read-only home: templates are then compiled every time).

    Compiling the six templates costs ~0.1 s of every render (cProfile of a reference-mode render); a cached
    entry is keyed by the template's name and its source's checksum (so an edited template is recompiled) and
    carries Jinja2's bytecode magic (so another Python version recompiles). Jinja2 writes entries to a
    temporary file and renames it, so concurrent renders never read half an entry.
    """
    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "repo-builder" / "jinja2"
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    if not os.access(root, os.W_OK | os.X_OK):
        return None
    return jinja2.FileSystemBytecodeCache(str(root))


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
        bytecode_cache=_bytecode_cache(jinja2),
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
    from ..profile.schema import load_schema

    return list(load_schema().for_profile(profile).values())


def template_parameter_names(profile: str) -> set[str]:
    """Names of the parameters the templates of ``profile`` must use: every schema parameter of the profile
    that is rendered (kind other than build_time) into one of :data:`MODEL_NAMES` (the models of every layout).
    """
    return {p.name for p in _schema_params(profile) if any(m in MODEL_NAMES for m in p.models)}


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
