"""The parameter schema: every parameter of every profile, its type, default, range and kind.

The facts live in ``model_templates/parameters.yaml`` (see its header for the fields); this module loads
them into pydantic models (unknown fields refused) and checks user values against them.

Kinds:

* ``structural``: rendered outside quotes in config.pbtxt (``max_batch_size``, ``decoupled``,
  ``count``, ``data_type``); always has a value, Triton cannot parse an empty one.
* ``runtime``: a ``parameters { key: ... value { string_value: ... } }`` entry the user may set.
* ``derived``: a ``string_value`` entry whose value always comes from the engine (``max_input_len``,
  ``max_seq_len`` for preprocessing and the Python engines); a user value is refused with the
  ``trtllm-build`` flag.
* ``build_time``: never rendered; a user value is refused with the ``trtllm-build`` flag (B08).

Public API: :func:`load_schema`, :class:`Schema` (``parameters``, ``for_profile``, ``table``,
``model_parameters``), :class:`Parameter` (``coerce``, ``format_value``, ``describe``) and
:func:`validate_user_values`. This module knows nothing of files of users, Jinja2 or Triton.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, model_validator

from ..errors import ParameterError, RepoBuilderError
from ..runtime.params import parse_bool
from .contract import LAYOUT_MODEL_NAMES, MODEL_NAMES
from .conversions import (  # noqa: F401  (re-exported: moved from this module)
    FLOAT32_MAX,
    INT32_MAX,
    TYPE_TEXT,
    check_text_value,
    number_text,
    to_float,
    to_groups,
    to_int,
    to_int_list,
    to_tuples,
)
from .dtypes import DTYPE_ALIASES
from .paths import templates_dir
from .problems import problems_error  # re-exported: moved from this module
from .yamlio import safe_load

ParamType = Literal["int", "float", "bool", "str", "path", "enum", "dtype", "int_list", "int_list_groups", "int_tuples"]
Kind = Literal["structural", "runtime", "derived", "build_time"]
ENGINE_KINDS = ("trtllm", "hf", "synthetic")


class Parameter(BaseModel):
    """One parameter of ``model_templates/parameters.yaml`` (field meanings in that file's header)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    kind: Kind
    profiles: tuple[str, ...]
    description: str
    config_key: str | None = None
    config_field: str | None = None
    models: tuple[str, ...] = ()
    engine_kinds: dict[str, tuple[str, ...]] = Field(default_factory=dict)
    type: ParamType | None = None
    default: Any = None
    default_by_profile: dict[str, Any] = Field(default_factory=dict)
    choices: tuple[str, ...] | None = None
    min: float | None = None
    max: float | None = None
    legacy_values: dict[str, str] = Field(default_factory=dict)
    required: bool = False
    user_settable: bool = True
    engine_source: str | None = None
    tokenizer_source: str | None = None
    checkpoint_source: str | None = None
    build_flag: str | None = None
    upstream: str | None = None
    renamed_from: tuple[str, ...] = ()
    overrides: dict[str, dict[str, Any]] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _check(self) -> Parameter:
        for other, fields in self.overrides.items():
            if other not in self.profiles:
                raise ValueError(f"{self.name}: overrides for profile {other}, which it is not in")
            bad = sorted(set(fields) & {"name", "profiles", "overrides", "default_by_profile"})
            if bad:
                raise ValueError(f"{self.name}: overrides for {other} may not change {bad}")
            self.in_profile(other)  # the overridden entry must itself be a valid parameter
        if (self.kind == "structural") != (self.config_field is not None):
            raise ValueError(f"{self.name}: config_field is set for, and only for, a structural parameter")
        if self.kind == "build_time":
            if not self.build_flag:
                raise ValueError(f"{self.name}: a build_time parameter needs build_flag")
            return self
        if self.type is None or not self.models:
            raise ValueError(f"{self.name}: type and models are required")
        unknown = [m for m in self.models if m not in MODEL_NAMES and m not in LAYOUT_MODEL_NAMES]
        if unknown:
            raise ValueError(f"{self.name}: unknown models {unknown}")
        for model, kinds in self.engine_kinds.items():
            if model not in self.models or any(k not in ENGINE_KINDS for k in kinds):
                raise ValueError(f"{self.name}: bad engine_kinds entry {model}: {kinds}")
        if self.type in ("enum", "dtype") and not self.choices:
            raise ValueError(f"{self.name}: {self.type} needs choices")
        if self.kind == "derived" and not self.build_flag:
            raise ValueError(f"{self.name}: a derived parameter needs build_flag")
        for profile, value in [(None, self.default), *self.default_by_profile.items()]:
            if value is not None:
                try:
                    self.coerce(value)
                except ValueError as exc:
                    raise ValueError(f"{self.name}: default {value!r} ({profile or 'all profiles'}) {exc}") from exc
        return self

    def in_profile(self, profile: str) -> Parameter:
        """This parameter as ``profile`` has it: the fields of ``overrides[profile]`` replaced (one name may
        mean a build-time engine limit in one profile and a user's runtime limit in another: ``max_seq_len``
        is derived from the engine in trtllm-* and an LLM-API argument in llmapi-1.2).

        Raises:
            ValueError: the overridden fields do not make a valid parameter.
        """
        fields = self.overrides.get(profile)
        if not fields:
            return self
        data = self.model_dump()
        data.update(fields)
        data["overrides"] = {}
        return Parameter.model_validate(data)

    # ------------------------------------------------------------------ facts
    @property
    def key(self) -> str:
        """The key in config.pbtxt ``parameters`` (``gpt_model_type`` for ``batching_strategy``)."""
        return self.config_key or self.name

    def default_for(self, profile: str) -> Any:
        """The typed default of this parameter in ``profile`` (None = unset)."""
        value = self.default_by_profile.get(profile, self.default)
        return None if value is None else self.coerce(value)

    def rendered_in(self, model: str, engine_kind: str) -> bool:
        """True when this parameter is written into ``model``'s config for an engine of ``engine_kind``."""
        if self.kind == "build_time" or model not in self.models:
            return False
        kinds = self.engine_kinds.get(model)
        return kinds is None or engine_kind in kinds

    def type_text(self) -> str:
        """The expected type in words, with choices / range."""
        text = TYPE_TEXT.get(self.type or "", "?")
        if self.choices:
            text = f"one of {', '.join(self.choices)}"
        rng = []
        if self.min is not None:
            rng.append(f">= {self._bound(self.min)}")
        if self.max is not None:
            rng.append(f"<= {self._bound(self.max)}")
        if rng and self.type not in ("enum", "dtype"):
            text += f" ({' and '.join(rng)})"
        return text

    def _bound(self, value: float) -> str:
        return str(int(value)) if self.type != "float" and float(value).is_integer() else number_text(float(value))

    def describe(self) -> str:
        """One line for ``repo-builder params``: name, type, default, kind, description."""
        default = self.format_value(self.default) if self.default is not None else "unset"
        return f"{self.name} ({self.type_text()}; default {default}; {self.kind}): {self.description}"

    # ------------------------------------------------------------------ values
    def coerce(self, value: Any) -> Any:
        """Convert ``value`` (a string from ``--set`` or a typed YAML value) to this parameter's type.

        Returns int / float / bool / str / list[int] / list[list[int]] as the type says.
        Raises:
            ValueError: with a message naming the expected type, allowed values or range.
        """
        t = self.type
        if t == "int":
            out: Any = to_int(value)
        elif t == "float":
            out = to_float(value)
        elif t == "bool":
            if isinstance(value, bool):
                out = value
            elif isinstance(value, str):
                try:
                    out = parse_bool(value)
                except ValueError:
                    raise ValueError(f"expected {self.type_text()}, got {value!r}") from None
            else:
                raise ValueError(f"expected {self.type_text()}, got {value!r}")
        elif t in ("str", "path"):
            if not isinstance(value, str):
                raise ValueError(f"expected {self.type_text()}, got {value!r}")
            out = check_text_value(value)
        elif t == "enum":
            out = self._enum(str(value) if not isinstance(value, bool) else repr(value))
        elif t == "dtype":
            out = self._dtype(value)
        elif t == "int_list":
            out = to_int_list(value)
        elif t == "int_list_groups":
            out = to_groups(value)
        elif t == "int_tuples":
            out = to_tuples(value)
        else:  # pragma: no cover - build_time parameters have no type
            raise ValueError("this parameter takes no value")
        self._check_range(out)
        return out

    def _enum(self, text: str) -> str:
        assert self.choices is not None
        stripped = text.strip()
        for choice in self.choices:
            if stripped.lower() == choice.lower():
                return choice
        legacy = {k.lower(): v for k, v in self.legacy_values.items()}
        if stripped.lower() in legacy:
            raise ValueError(
                f"'{stripped}' is an old spelling, renamed upstream to '{legacy[stripped.lower()]}' "
                f"(allowed: {', '.join(self.choices)})"
            )
        close = difflib.get_close_matches(stripped, self.choices, n=1, cutoff=0.5)
        hint = f"; did you mean '{close[0]}'?" if close else ""
        raise ValueError(f"'{stripped}' is not one of {', '.join(self.choices)}{hint}")

    def _dtype(self, value: Any) -> str:
        assert self.choices is not None
        text = str(value).strip()
        upper = text.upper()
        name = upper if upper.startswith("TYPE_") else DTYPE_ALIASES.get(text.lower(), "TYPE_" + upper)
        if name in self.choices:
            return name
        close = difflib.get_close_matches(upper, self.choices, n=1, cutoff=0.5)
        hint = f"; did you mean '{close[0]}'?" if close else ""
        raise ValueError(f"'{text}' is not one of {', '.join(self.choices)}{hint}")

    def _check_range(self, value: Any) -> None:
        if self.type not in ("int", "float", "int_list", "int_list_groups", "int_tuples"):
            return
        flat: list[float] = []
        if isinstance(value, list):
            for item in value:
                flat.extend(item if isinstance(item, list) else [item])
        else:
            flat.append(value)
        for number in flat:
            if (self.min is not None and number < self.min) or (self.max is not None and number > self.max):
                raise ValueError(f"{number_text(number)} is out of range: expected {self.type_text()}")
            if self.type == "float" and abs(number) > FLOAT32_MAX:
                raise ValueError(
                    f"{number_text(number)} is out of range: the backend reads it as a 32-bit float (|value| <= 3.4e38)"
                )
            if self.type != "float" and self.max is None and number > INT32_MAX:
                raise ValueError(
                    f"{number_text(number)} is out of range: the backend reads it as a 32-bit integer (<= {INT32_MAX})"
                )

    def format_value(self, value: Any) -> str:
        """The text written into config.pbtxt for ``value`` (already coerced).

        bool -> ``true``/``false``; int_list -> ``1,2``; int_list_groups -> ``0,1;2,3``;
        int_tuples -> ``{0, 0, 0}, {0, 1}``; None -> ``""`` (unset).
        """
        if value is None:
            return ""
        if self.type == "bool" or isinstance(value, bool):
            return "true" if value else "false"
        if self.type == "int_list":
            return ",".join(str(v) for v in value)
        if self.type == "int_list_groups":
            return ";".join(",".join(str(v) for v in group) for group in value)
        if self.type == "int_tuples":
            return ", ".join("{" + ", ".join(str(v) for v in group) + "}" for group in value)
        if self.type == "float":
            return number_text(value)
        return str(value)


class Schema(BaseModel):
    """All parameters of all profiles (``model_templates/parameters.yaml``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    profiles: tuple[str, ...]
    parameters: dict[str, Parameter]
    removed: dict[str, str] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _list_to_dict(cls, data: Any) -> Any:
        if isinstance(data, dict) and isinstance(data.get("parameters"), list):
            params: dict[str, Any] = {}
            for entry in data["parameters"]:
                name = entry.get("name") if isinstance(entry, dict) else None
                if name in params:
                    raise ValueError(f"parameter {name} declared twice")
                params[str(name)] = entry
            data = {**data, "parameters": params}
        return data

    @model_validator(mode="after")
    def _check_profiles(self) -> Schema:
        for param in self.parameters.values():
            bad = [p for p in (*param.profiles, *param.default_by_profile) if p not in self.profiles]
            if bad:
                raise ValueError(f"{param.name}: unknown profiles {bad}")
        return self

    def _profile(self, profile: str) -> str:
        if profile not in self.profiles:
            raise ParameterError(
                f"unknown profile '{profile}'", key="profile", hint=f"choose one of {', '.join(self.profiles)}"
            )
        return profile

    def for_profile(self, profile: str, *, include_build_time: bool = False) -> dict[str, Parameter]:
        """The parameters that exist in ``profile`` (build-time keys only when asked)."""
        self._profile(profile)
        return _profile_view(self, profile, include_build_time)

    def model_parameters(self, profile: str, model: str, engine_kind: str) -> list[Parameter]:
        """The ``string_value`` parameters (kinds runtime and derived) written into ``model``'s config
        for an engine of ``engine_kind``, in schema order."""
        return [
            p
            for p in self.for_profile(profile).values()
            if p.kind in ("runtime", "derived") and p.rendered_in(model, engine_kind)
        ]

    def table(self, profile: str) -> list[dict[str, Any]]:
        """Rows for ``repo-builder params`` and the README: one dict per parameter of ``profile``.

        Keys: name, config_key, models, type, default (text, "" = unset), allowed, kind, source, description,
        build_flag, upstream, other_profiles.
        """
        rows = []
        for p in self.for_profile(profile, include_build_time=True).values():
            default = p.default_for(profile) if p.kind != "build_time" else None
            source = (
                f"engine: {p.engine_source}"
                if p.engine_source
                else f"tokenizer: {p.tokenizer_source}"
                if p.tokenizer_source
                else f"checkpoint: {p.checkpoint_source}"
                if p.checkpoint_source
                else ""
            )
            rows.append(
                {
                    "name": p.name,
                    "config_key": p.key,
                    "models": list(p.models),
                    "type": p.type or "",
                    "default": p.format_value(default) if default is not None else "",
                    "allowed": p.type_text() if p.type else "",
                    "kind": p.kind,
                    "source": source,
                    "description": p.description,
                    "build_flag": p.build_flag or "",
                    "upstream": p.upstream or "",
                    "other_profiles": [x for x in self.profiles if x != profile and x in p.profiles],
                }
            )
        return rows


def _profile_view(schema: Schema, profile: str, include_build_time: bool) -> dict[str, Parameter]:
    """{name: parameter as ``profile`` has it (overrides applied)} in schema order."""
    view: dict[str, Parameter] = {}
    for n, p in schema.parameters.items():
        if profile not in p.profiles:
            continue
        p = p.in_profile(profile)
        if include_build_time or p.kind != "build_time":
            view[n] = p
    return view


@cache
def _load(path: str) -> Schema:
    try:
        data = safe_load(Path(path).read_text())
        return Schema.model_validate(data)
    except (OSError, yaml.YAMLError, ValueError) as exc:
        raise RepoBuilderError(f"malformed parameter schema: {exc}", path=path) from exc


def load_schema() -> Schema:
    """Load ``model_templates/parameters.yaml`` (cached per path).

    Raises:
        RepoBuilderError: the file is missing or malformed (names the file).
    """
    return _load(str(templates_dir() / "parameters.yaml"))


def _unknown_key_message(schema: Schema, profile: str, key: str) -> str:
    """Why ``key`` is not a parameter of ``profile``, with the best hint we have."""
    if key in schema.removed:
        return f"{key}: not a parameter: {schema.removed[key]}"
    for p in schema.parameters.values():
        if key in p.renamed_from:
            return f"{key}: renamed to {p.name}; use {p.name}"
        if p.config_key == key:
            return f"{key}: this is the config.pbtxt key of parameter {p.name}; use {p.name}"
    param = schema.parameters.get(key)
    if param is not None:  # exists, but in other profiles
        others = ", ".join(param.profiles)
        only = " only" if len(param.profiles) == 1 else ""
        return f"{key}: not a parameter of profile {profile}; it exists in profile {others}{only} (--profile)"
    names = list(schema.for_profile(profile))
    close = difflib.get_close_matches(key, names, n=3, cutoff=0.6)
    if close:
        return f"{key}: unknown parameter; did you mean {' or '.join(repr(c) for c in close)}?"
    return f"{key}: unknown parameter of profile {profile} (list them with `repo-builder params --profile {profile}`)"


def unknown_key_message(profile: str, key: str) -> str:
    """Why ``key`` is not a parameter of ``profile`` (``KEY: ...``, with a did-you-mean, the profile it exists in,
    or what happened to it upstream); for readers of files other than ``--set`` (validate of model.yaml)."""
    return _unknown_key_message(load_schema(), profile, key)


_NOT_SETTABLE_HINT = {
    "engine_dir": "pass the engine with --engine-dir (and --engine-mode)",
    "tokenizer_dir": "pass the tokenizer with --tokenizer-dir",
}


def validate_user_values(profile: str, values: Mapping[str, Any], *, source: str) -> dict[str, Any]:
    """Check and type the values a user gave for ``profile``.

    Args:
        profile: e.g. ``"trtllm-1.2"``.
        values: ``{key: value}``; from ``--set KEY=VALUE`` values are strings, from a YAML values file
            they are typed. ``""`` (or None) means "unset": the parameter is omitted from the config.
        source: where the values came from (``"--set"`` or the YAML path); named in every message.

    Returns:
        ``{key: typed value or None}`` for every given key.

    Raises:
        ParameterError: every problem at once, one per line, each naming the key: unknown key (with a
            did-you-mean, the profile it exists in, or what happened to it upstream), build-time key (with
            the ``trtllm-build`` flag), wrong type, out of range, enum typo (allowed values + closest), a
            structural or required parameter set to "".
    """
    schema = load_schema()
    params = schema.for_profile(profile, include_build_time=True)
    out: dict[str, Any] = {}
    problems: list[str] = []
    for key, raw in values.items():
        key = str(key).strip()
        param = params.get(key)
        if param is None:
            problems.append(_unknown_key_message(schema, profile, key))
            continue
        if param.kind in ("build_time", "derived"):
            problems.append(
                f"{key}: a build-time setting of the engine, not a Triton parameter; rebuild the engine with "
                f"`trtllm-build {param.build_flag}` ({param.description})"
            )
            continue
        if not param.user_settable:
            problems.append(
                f"{key}: set by repo-builder, not by {source}; {_NOT_SETTABLE_HINT.get(key, 'drop the key')}"
            )
            continue
        if raw is None or (isinstance(raw, str) and raw.strip() == ""):
            if param.kind == "structural" or param.required:
                why = (
                    "Triton cannot parse an empty value there"
                    if param.kind == "structural"
                    else "the backend fails to load without it"
                )
                problems.append(f"{key}: cannot be unset ({why}); expected {param.type_text()}")
                continue
            out[key] = None
            continue
        try:
            out[key] = param.coerce(raw)
        except ValueError as exc:
            problems.append(f"{key}: {exc}")
    if problems:
        raise problems_error(problems, source=source)
    return out
