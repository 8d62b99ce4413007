"""resolve(): every parameter's value and origin, and the cross-checks against engine and tokenizer.

Order for each parameter of the profile (first wins):

1. the user's value (``--set`` / ``--values``; ``--streaming`` sets ``decoupled_mode``) -> origin ``user``;
2. a fact of the engine (``engine_source`` in parameters.yaml: ``triton_max_batch_size`` <- ``max_batch_size``,
   ``max_beam_width`` <- ``max_beam_width``, ``logits_datatype`` <- ``logits_dtype`` as ``TYPE_*``;
   ``engine_dir`` and ``triton_backend`` from the engine kind) -> origin ``engine``;
3. a fact of the tokenizer (``tokenizer_dir``, ``end_id``, ``pad_id``, ``stop_token_ids``) -> ``tokenizer``;
4. the profile default -> ``default`` (None = unset: the parameter is omitted / rendered empty).

Then the rule table (:mod:`repo_builder.values.rules`: every cross-check against engine, tokenizer, the user's
values and ``--streaming``) runs and all problems are raised together, before anything is written. Some
defaults adapt to the engine with a warning, a finding with a ``fix`` (``enable_kv_cache_reuse`` is true in
TRT-LLM >= 0.19 but an engine built without paged context FMHA or with beam search cannot reuse blocks: the
backend would fail to load, so it is rendered false).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from ..engine import EngineInfo
from ..errors import EngineError, ParameterError, RepoBuilderError, TokenizerError
from ..profile.dtypes import triton_dtype
from ..profile.schema import Parameter, check_text_value, load_schema, validate_user_values
from ..tokenizer import TokenizerInfo
from .rules import check as check_rules
from .rules import rank_files

Origin = Literal["default", "engine", "tokenizer", "user"]


@dataclass(frozen=True)
class ResolvedValue:
    """A parameter's typed value (None = unset) and where it came from."""

    value: Any
    origin: Origin


@dataclass
class Resolution:
    """The outcome of :func:`resolve` for one profile.

    ``values`` holds every parameter of the profile (build-time keys excluded), ``warnings`` what the user
    should know but need not fix, ``world_size`` the MPI world size of the engine (tp x pp; 1 for Python
    engines) for the lock file and the launcher.
    """

    profile: str
    values: dict[str, ResolvedValue]
    warnings: list[str] = field(default_factory=list)
    world_size: int = 1
    engine_kind: str = "trtllm"

    def as_template_vars(self) -> dict[str, Any]:
        """{parameter name: typed value or None} for every parameter of the profile."""
        return {name: rv.value for name, rv in self.values.items()}

    def as_strings(self) -> dict[str, str]:
        """{parameter name: the text for config.pbtxt} (``""`` when unset); see ``Parameter.format_value``."""
        params = load_schema().parameters
        return {name: params[name].format_value(rv.value) for name, rv in self.values.items()}

    def origin(self, name: str) -> Origin:
        """Where ``name``'s value came from."""
        return self.values[name].origin

    def __getitem__(self, name: str) -> Any:
        return self.values[name].value


class _Problems:
    def __init__(self) -> None:
        self.items: list[tuple[type[RepoBuilderError], str]] = []

    def add(self, cls: type[RepoBuilderError], text: str) -> None:
        self.items.append((cls, text))

    def raise_if_any(self, profile: str, engine: EngineInfo) -> None:
        if not self.items:
            return
        classes = {cls for cls, _ in self.items}
        cls = classes.pop() if len(classes) == 1 else ParameterError
        lines = [text for _, text in self.items]
        exc = cls(f"{len(lines)} problem(s) with profile {profile} and engine {engine.dir}:\n" + "\n".join(lines))
        exc.problems = lines  # type: ignore[attr-defined]
        raise exc


def _engine_value(param: Parameter, engine: EngineInfo) -> Any:
    src = param.engine_source
    if src is None:
        return None
    raw = getattr(engine, src)
    if param.type == "dtype":
        value = triton_dtype(raw)
        return value if value is not None and param.choices and value in param.choices else None
    return raw


def _tokenizer_value(param: Parameter, tokenizer: TokenizerInfo | None) -> Any:
    if tokenizer is None or param.tokenizer_source is None:
        return None
    raw = getattr(tokenizer, param.tokenizer_source)
    if param.tokenizer_source == "dir":
        return str(raw)
    if isinstance(raw, tuple):
        return list(raw) or None
    return raw


def _first_values(
    profile: str,
    params: Mapping[str, Parameter],
    engine: EngineInfo,
    tokenizer: TokenizerInfo | None,
    user: Mapping[str, Any],
    problems: _Problems,
) -> dict[str, ResolvedValue]:
    """{parameter: value and origin} of every parameter of ``params``, the first of: the ``user`` value, the
    engine's fact, the tokenizer's fact, the profile default (the module docstring's order). A fact the parameter
    cannot take is kept as it is and added to ``problems`` (EngineError / TokenizerError)."""
    values: dict[str, ResolvedValue] = {}
    sources = {
        "engine": f"the engine ({engine.config_file})",
        "tokenizer": f"the tokenizer ({tokenizer.dir if tokenizer is not None else '-'})",
    }

    def coerce_fact(name: str, param: Parameter, value: Any, origin: Origin) -> None:
        try:
            values[name] = ResolvedValue(param.coerce(value), origin)
        except ValueError as exc:  # a fact of the engine or tokenizer that the parameter cannot take
            values[name] = ResolvedValue(value, origin)  # kept so that no "unset" problem follows
            problems.add(
                EngineError if origin == "engine" else TokenizerError,
                f"{name}: the value {value!r} from {sources[origin]} cannot be used: {exc}",
            )

    for name, param in params.items():
        if name in user:
            values[name] = ResolvedValue(user[name], "user")
            continue
        # A profile's own default is a fixed fact of that upstream version and beats the engine's value
        # (v0.5.0's templates hard-code max_batch_size 128 whatever the engine says).
        value = None if profile in param.default_by_profile else _engine_value(param, engine)
        if value is not None:
            coerce_fact(name, param, value, "engine")
            continue
        value = _tokenizer_value(param, tokenizer)
        if value is not None:
            coerce_fact(name, param, value, "tokenizer")
            continue
        values[name] = ResolvedValue(param.default_for(profile), "default")
    return values


def _fixed_values(
    values: dict[str, ResolvedValue],
    engine: EngineInfo,
    tokenizer: TokenizerInfo | None,
    user: Mapping[str, Any],
    problems: _Problems,
    *,
    streaming: bool | None,
    engine_dir_in_repo: str | None,
) -> None:
    """Set in ``values`` (where the profile has them) what repo-builder fixes itself: ``engine_dir`` (a path
    that cannot be written goes to ``problems``), ``triton_backend`` from the engine kind, ``decoupled_mode``
    from ``--streaming``, and ``pad_id`` following ``end_id``."""

    def val(name: str) -> Any:
        rv = values.get(name)
        return rv.value if rv is not None else None

    def set_(name: str, value: Any, origin: Origin) -> None:
        if name in values:
            values[name] = ResolvedValue(value, origin)

    if "engine_dir" in values:
        where = engine_dir_in_repo if engine_dir_in_repo is not None else str(engine.dir)
        try:
            set_("engine_dir", check_text_value(where), "engine")
        except ValueError as exc:
            set_("engine_dir", where, "engine")
            problems.add(
                EngineError,
                f"engine_dir: the engine's path in the repository cannot be written: {exc} "
                "(it comes from --engine-dir, --output or --serve-path)",
            )
    backend_default = "tensorrtllm" if engine.kind == "trtllm" else "python"
    if "triton_backend" in values and "triton_backend" not in user:
        set_("triton_backend", backend_default, "engine")
    if streaming is not None and "decoupled_mode" in values:
        set_("decoupled_mode", bool(streaming), "user")  # a contradicting user value: rules.streaming_flag
    if (
        "end_id" in user
        and tokenizer is not None
        and "pad_id" not in user
        and tokenizer.special_id_sources.get("pad_id") == "end_id"
    ):
        set_("pad_id", user["end_id"], "user")  # the pad id follows the end id it was derived from
    if val("end_id") is not None and val("pad_id") is None and "pad_id" in values and "pad_id" not in user:
        set_("pad_id", val("end_id"), values["end_id"].origin)


def _apply_rules(
    values: dict[str, ResolvedValue],
    engine: EngineInfo,
    tokenizer: TokenizerInfo | None,
    user: Mapping[str, Any],
    problems: _Problems,
    *,
    streaming: bool | None,
    params: Mapping[str, Parameter],
    prechecked: bool,
) -> list[str]:
    """Run the rule table (:mod:`repo_builder.values.rules`; the rank-file rule skipped when ``prechecked``)
    over ``values``: a finding with a fix changes its value (origin ``engine``) with a warning, a warning is
    kept, an error goes to ``problems`` (the class of whom it blames). Returns the warnings, fixes first."""
    warnings: list[str] = []
    blame = {"parameter": ParameterError, "engine": EngineError, "tokenizer": TokenizerError}
    findings = check_rules(
        engine,
        {name: rv.value for name, rv in values.items()},
        tokenizer=tokenizer,
        user=user,
        streaming=streaming,
        params=params,
        skip=(rank_files,) if prechecked else (),
    )
    for finding in findings:  # a default adapted to the engine first: what the user did not set changed
        if finding.has_fix:
            if finding.key in values:
                values[finding.key] = ResolvedValue(finding.fix, "engine")
            warnings.append(f"{finding.key} {finding.message}")
    for finding in findings:
        if finding.has_fix:
            continue
        if finding.severity == "warning":
            warnings.append(f"{finding.key}: {finding.message}")
        else:
            problems.add(blame[finding.blame], f"{finding.key}: {finding.message}")
    return warnings


def resolve(
    profile: str,
    engine: EngineInfo,
    tokenizer: TokenizerInfo | None,
    user_values: Mapping[str, Any],
    *,
    streaming: bool | None = None,
    engine_dir_in_repo: str | None = None,
    prechecked: bool = False,
) -> Resolution:
    """Resolve every parameter of ``profile`` and cross-check it against the engine and tokenizer.

    Args:
        profile: e.g. ``"trtllm-1.2"``.
        engine: from :func:`repo_builder.engine.inspect_engine`.
        tokenizer: from :func:`repo_builder.tokenizer.inspect_tokenizer` (None: tokenizer values unset).
        user_values: values from ``--set`` / ``--values`` (checked again with ``validate_user_values``).
        streaming: when given, sets ``decoupled_mode`` of tensorrt_llm and tensorrt_llm_bls (B29).
        engine_dir_in_repo: ``engine_dir`` as the server will see it (default: the engine's own path).
        prechecked: ``user_values`` are already typed by ``validate_user_values`` and the engine's rank files
            checked (render's ``prepare_render`` does both before the engine copy starts): neither runs again.
    Returns:
        :class:`Resolution`.
    Raises:
        ParameterError / EngineError / TokenizerError: every problem found, one per line (the class is the
            common class of the problems, ParameterError when they are mixed).
    """
    schema = load_schema()
    params = schema.for_profile(profile)
    if prechecked:
        user = dict(user_values)
    else:
        user = validate_user_values(profile, user_values, source="the given values") if user_values else {}
    problems = _Problems()
    values = _first_values(profile, params, engine, tokenizer, user, problems)
    _fixed_values(values, engine, tokenizer, user, problems, streaming=streaming, engine_dir_in_repo=engine_dir_in_repo)
    warnings = _apply_rules(
        values, engine, tokenizer, user, problems, streaming=streaming, params=params, prechecked=prechecked
    )
    problems.raise_if_any(profile, engine)
    return Resolution(
        profile=profile,
        values=values,
        warnings=warnings,
        world_size=engine.world_size if engine.kind == "trtllm" else 1,
        engine_kind=engine.kind,
    )
