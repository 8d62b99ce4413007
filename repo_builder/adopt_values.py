"""How ``repo-builder adopt`` reads values back from a hand-filled repository: structural fields of each
model's ``ModelConfig`` (the schema's ``config_field``, :data:`FIELD_READERS`), the dtype parameters from the
contract's tensors, string parameters through the schema, and findings for keys no parameter places and for
parameters left unset. Used by :func:`repo_builder.adopt.adopt_repository`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from .adoption import ROLE_ORDER, AdoptedModel, Finding
from .repository.pbtxt import PLACEHOLDER_RE, dtype_name

if TYPE_CHECKING:  # pragma: no cover
    from .profile.schema import Parameter


def _names(tensors: Any) -> set[str]:
    return {t.name for t in tensors}


# ---------------------------------------------------------------------------------------------- values
def _instances(config: Any) -> int | None:
    return sum(g.count or 1 for g in config.instance_group) if config.instance_group else None


def _batch(config: Any) -> int | None:
    return int(config.max_batch_size) if config.max_batch_size > 0 else None


def _queue_delay(config: Any) -> int | None:
    if not config.HasField("dynamic_batching"):
        return None
    return int(config.dynamic_batching.max_queue_delay_microseconds)


def _queue_size(config: Any) -> int | None:
    db = config.dynamic_batching
    if not config.HasField("dynamic_batching") or not db.HasField("default_queue_policy"):
        return None
    return int(db.default_queue_policy.max_queue_size)


#: How a structural parameter's value is read back from a model's ``ModelConfig`` (the inverse of the templates'
#: macros in model_templates/_macros.j2): {config field: reader}. Which parameter sits in which field is the
#: schema's ``config_field`` (model_templates/parameters.yaml). The dtype parameters (``input.data_type``,
#: ``output.data_type``) are read from the contract's ``data_type_param`` tensors instead (:func:`_dtype_values`).
FIELD_READERS: dict[str, Callable[[Any], Any]] = {
    "max_batch_size": _batch,
    "model_transaction_policy.decoupled": lambda c: bool(c.model_transaction_policy.decoupled),
    "dynamic_batching.max_queue_delay_microseconds": _queue_delay,
    "dynamic_batching.default_queue_policy.max_queue_size": _queue_size,
    "instance_group.count": _instances,
    "backend": lambda c: c.backend or None,
}


#: The models whose ``model_transaction_policy.decoupled`` is decoupled_mode (the templates' ``m.decoupled``).
DECOUPLED_ROLES = ("tensorrt_llm", "tensorrt_llm_bls")


def _unset(text: str) -> bool:
    return text.strip() == "" or PLACEHOLDER_RE.search(text) is not None


def _dtype_values(profile: str, roles: Mapping[str, AdoptedModel]) -> list[tuple[str, str, AdoptedModel, str]]:
    """[(dtype parameter, dtype, model, tensor)] for every tensor the contract types by a parameter, in
    :data:`ROLE_ORDER`: the first one of a parameter is its value, a later one with another dtype a "disagree"
    finding (e.g. a BLS whose ``prompt_embedding_table`` is TYPE_FP16 while the engine's was filled TYPE_BF16)."""
    from .profile.contract import load_contract

    out: list[tuple[str, str, AdoptedModel, str]] = []
    contract = load_contract(profile)
    for role in ROLE_ORDER:
        m, cm = roles.get(role), contract.models.get(role)
        if m is None or cm is None:
            continue
        specs = {s.name: s for s in [*cm.inputs, *cm.outputs] if s.data_type_param}
        for t in [*m.config.input, *m.config.output]:
            spec = specs.get(t.name)
            if spec is not None and spec.data_type_param:
                out.append((spec.data_type_param, dtype_name(t.data_type), m, t.name))
    return out


def _read_values(
    profile: str, roles: Mapping[str, AdoptedModel], findings: list[Finding]
) -> tuple[dict[str, Any], dict[str, str]]:
    from .profile.schema import load_schema

    schema = load_schema()
    params = schema.for_profile(profile)
    values: dict[str, Any] = {}
    where: dict[str, str] = {}
    placed_keys: dict[str, set[str]] = {role: set() for role in roles}

    def place(name: str, param: Parameter, raw: Any, m: AdoptedModel, key: str) -> None:
        try:
            value = param.coerce(raw)
        except ValueError as exc:
            findings.append(Finding(m.rel, key, f"{raw!r} is refused by profile {profile}: {exc}", "refused"))
            return
        if name in values:
            if values[name] != value:
                findings.append(
                    Finding(
                        m.rel,
                        key,
                        f"{value!r} differs from {values[name]!r} in {where[name]}; kept the latter "
                        f"(repo-builder writes one {name} into every model)",
                        "disagree",
                    )
                )
            return
        values[name] = value
        where[name] = f"{m.rel}: {key}"

    for role in ROLE_ORDER:
        m = roles.get(role)
        if m is None:
            continue
        params_in = m.config.parameters
        for name, param in params.items():
            if role not in param.models:
                continue
            fieldname = param.config_field
            if param.kind == "structural" and fieldname in FIELD_READERS:
                reader = FIELD_READERS[fieldname]
                if name == "decoupled_mode" and role not in DECOUPLED_ROLES:
                    continue  # postprocessing gets decoupled_mode as a parameter; its own policy stays unary
                raw = reader(m.config)
                if raw is not None:
                    place(name, param, raw, m, fieldname)
                continue
            if param.kind not in ("runtime", "derived") or param.key not in params_in:
                continue
            placed_keys[role].add(param.key)
            text = params_in[param.key].string_value
            if PLACEHOLDER_RE.search(text):
                findings.append(
                    Finding(
                        m.rel,
                        param.key,
                        f"placeholder {text} left unfilled: NVIDIA's backend reads it as unset; adopted as unset "
                        f"(repo-builder's value: {_default_text(param, profile)})",
                        "placeholder",
                    )
                )
                continue
            if text.strip() == "":
                continue
            if param.kind == "derived":
                continue  # a build-time limit render takes from the engine (checked against it with --engine-dir)
            place(name, param, text, m, param.key)
        for key, pv in sorted(params_in.items()):
            if key in placed_keys[role]:
                continue
            findings.append(_unplaced_key(schema, profile, m, key, pv.string_value))
    for name, dtype, m, tensor in _dtype_values(profile, roles):
        if name in params:
            place(name, params[name], dtype, m, f"{tensor} data_type")
    return values, where


def _default_text(param: Parameter, profile: str) -> str:
    default = param.default_for(profile)
    if param.engine_source:
        return f"the engine's {param.engine_source}"
    if param.tokenizer_source:
        return f"the tokenizer's {param.tokenizer_source}"
    return "unset" if default is None else f"default {default!r}"


def _unplaced_key(schema: Any, profile: str, m: AdoptedModel, key: str, text: str) -> Finding:
    """A ``parameters`` key of ``m`` that no parameter of ``profile`` renders into its role."""
    if key in schema.removed:
        return Finding(m.rel, key, str(schema.removed[key]), "dropped")
    by_key = {p.key: p for p in schema.parameters.values()}
    param = by_key.get(key)
    shown = "unset" if _unset(text) else repr(text)
    if param is not None and profile not in param.profiles:
        return Finding(
            m.rel,
            key,
            f"{shown}: not a parameter of profile {profile} (it exists in {', '.join(param.profiles)})",
            "unknown_key",
        )
    if param is not None:
        return Finding(
            m.rel,
            key,
            f"{shown}: repo-builder renders {param.name} into {', '.join(param.models)}, not here",
            "dropped",
        )
    return Finding(
        m.rel, key, f"{shown}: unknown key, not carried over (no parameter of {profile} has it)", "unknown_key"
    )


def _missing(profile: str, roles: Mapping[str, AdoptedModel], values: Mapping[str, Any]) -> list[Finding]:
    """Required inputs of the contract and required parameters of the schema that a model lacks (a key removed
    by hand): render restores them; the finding names the file and the key."""
    from .profile.contract import load_contract
    from .profile.schema import load_schema

    out: list[Finding] = []
    contract = load_contract(profile)
    for role, m in roles.items():
        cm = contract.models.get(role)
        if cm is None:
            continue
        have = _names(m.config.input)
        for spec in cm.inputs:
            if not spec.optional and not spec.ours and spec.name not in have:
                out.append(
                    Finding(
                        m.rel,
                        spec.name,
                        f"missing: profile {profile} declares the required input {spec.name} "
                        f"({spec.data_type or spec.data_type_param} {list(spec.dims)}); the rendered repository has it",
                        "missing",
                    )
                )
    for name, param in load_schema().for_profile(profile).items():
        if not param.required or name in values:
            continue
        for role in param.models:
            holder = roles.get(role)
            if holder is not None and param.key not in holder.config.parameters:
                out.append(
                    Finding(
                        holder.rel,
                        param.key,
                        f"missing: {name} is required; adopted as {_default_text(param, profile)}",
                        "missing",
                    )
                )
    return out
