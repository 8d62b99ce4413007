"""``repo-builder adopt``: read a repository someone filled by hand from NVIDIA's ``inflight_batcher_llm``
templates and recover the values ``render --values`` takes.

What it reads (never writes into the repository):

- every ``<model>/config.pbtxt`` below ``REPO``, parsed with Triton's ``ModelConfig`` (:mod:`repo_builder.pbtxt`);
- each model's role, from its own tensors, not its folder name (users rename models): the ensemble
  (``platform: "ensemble"``), the engine (``input_ids`` in, ``output_ids`` out), preprocessing (``QUERY`` in,
  ``INPUT_ID`` out), postprocessing (``TOKENS_BATCH`` in, ``OUTPUT`` out), the BLS (``text_input`` in,
  ``text_output`` out, Python backend). Any other model is an extra one, left alone and reported;
- the profile, from the tensors compared with every profile's tensor contract
  (``model_templates/<profile>/contract.yaml``): each model votes for the contract its tensors (name and dtype)
  match best. The v0.5.0 templates declare the integer request inputs ``TYPE_UINT32`` (trtllm-0.5); from v0.6 on
  they are ``TYPE_INT32`` (the 0.19 and 1.x templates: trtllm-1.2). Models voting for different profiles are
  "two versions mixed", an error naming both files;
- the values: each parameter of the profile (``model_templates/parameters.yaml``) is read from the key the
  templates write it under (its ``config_key``) in the models it is rendered into, the structural ones from
  their ``ModelConfig`` fields (:data:`STRUCTURAL_FIELDS`); every value is typed by the schema, so a value the
  profile refuses is reported with the schema's reason;
- NVIDIA's ``model.py`` files, by sha256 against the pristine ones of each tag (:data:`PRISTINE_MODEL_PY`).

What it cannot place is a :class:`Finding` naming the file and key: an unknown key, a ``${...}`` placeholder
left unfilled, a value the profile refuses, models that disagree on a value, a hand-edited ``model.py``, an
extra model, a contradiction with the engine (``--engine-dir``: ``check_against_engine``, the rule table render
uses). Bad input (no model repository, a config that does not parse, two versions mixed, an engine that
contradicts the filled batch size, beam width or world size) raises :class:`AdoptError`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .errors import RepoBuilderError
from .repository.pbtxt import PLACEHOLDER_RE, dtype_name, find_placeholders, read_model_folders

if TYPE_CHECKING:  # pragma: no cover
    from .profile.schema import Parameter

#: sha256 of NVIDIA's pristine ``model.py`` files, per tensorrtllm_backend tag and model (facts: the files
#: ``all_models/inflight_batcher_llm/<model>/1/model.py`` at tags v0.5.0 and v0.19.0 of
#: triton-inference-server/tensorrtllm_backend). A ``model.py`` of a known model with none of these hashes is a
#: hand edit (or a tag adopt does not know); repo-builder's own models replace them either way.
PRISTINE_MODEL_PY: dict[str, dict[str, str]] = {
    "v0.5.0": {
        "preprocessing": "548a4a6ed8c736b8c41a44b68b60832cc571f19735b0f2152ee15e7a7ff09bac",
        "postprocessing": "a5330c982bf0f69d069a3df8be14aa5d1deb19d75cc4e22ba00eedb5b1d4b8a7",
    },
    "v0.19.0": {
        "preprocessing": "aa202f9945133a6e1d80f3ef9f9aafd10009a8eb9c3df149b8ba52bd01ce815d",
        "postprocessing": "1f3c399baca771ff52a4305ae148c2345023c95bed1349ac6dcd10ffc1321298",
        "tensorrt_llm": "9240af83e0c15d66b0abc543bf92c128cc575d56c005be3fc12713b75d9be66e",
        "tensorrt_llm_bls": "347063f164b57e69034456713822212e63c1c2401d6bea55033062d948196d81",
    },
}

#: The order in which models are asked for a value that several of them carry (tokenizer_dir in pre- and
#: postprocessing, max_beam_width in the engine and the BLS, triton_max_batch_size in all): the engine first.
ROLE_ORDER = ("tensorrt_llm", "preprocessing", "postprocessing", "tensorrt_llm_bls", "ensemble")

#: Parameters whose value is the engine's or the tokenizer's path: they come from ``render --engine-dir`` /
#: ``--tokenizer-dir``, so they go into the values file's ``adopted_from`` block, not among the values.
PATH_PARAMETERS = ("engine_dir", "tokenizer_dir")


class AdoptError(RepoBuilderError):
    """A repository cannot be adopted: not a model repository, a config that does not parse, two versions
    mixed, or an engine that contradicts the filled values."""


@dataclass(frozen=True)
class Finding:
    """Something adopt could not place: ``file`` relative to the repository, ``key`` the config key or field."""

    file: str
    key: str
    message: str
    kind: str  # unknown_key | placeholder | refused | disagree | hand_edit | extra_model | engine | dropped

    def __str__(self) -> str:
        return f"{self.file}: {self.key}: {self.message}"


@dataclass
class AdoptedModel:
    """One model of the repository: its folder name, role (``None`` = an extra model) and parsed config."""

    name: str
    role: str | None
    rel: str
    config: Any
    text: str


@dataclass
class Adoption:
    """What :func:`adopt_repository` found.

    Attributes:
        repo: the repository (absolute).
        profile: the recognised profile (``trtllm-0.5`` or ``trtllm-1.2``).
        tag: the NVIDIA tag whose pristine ``model.py`` files the repository holds, or None.
        values: {parameter: typed value} for ``render --values`` (paths excluded, see ``paths``).
        paths: facts of the repository that are not values: ``engine_dir``/``tokenizer_dir`` (as written there,
            or as given), ``backend`` (the engine model's; render decides it from the engine's kind).
        where: {parameter: "file: key"} where each value was read.
        findings: what could not be placed.
        models: {role or extra name: AdoptedModel}.
    """

    repo: Path
    profile: str
    tag: str | None
    values: dict[str, Any]
    paths: dict[str, str]
    where: dict[str, str]
    findings: list[Finding] = field(default_factory=list)
    models: dict[str, AdoptedModel] = field(default_factory=dict)

    def values_document(self) -> dict[str, Any]:
        """The values file's content: ``adopted_from`` (provenance, read by render into the lock file) and every
        recovered value, sorted by name."""
        doc: dict[str, Any] = {
            "adopted_from": {
                "repository": str(self.repo),
                "profile": self.profile,
                "nvidia_tag": self.tag,
                **{k: v for k, v in sorted(self.paths.items())},
                "findings": len(self.findings),
            }
        }
        doc.update(sorted(self.values.items()))
        return doc


# ----------------------------------------------------------------------------------------------- roles
def _names(tensors: Any) -> set[str]:
    return {t.name for t in tensors}


def model_role(config: Any) -> str | None:
    """The role of a model from its tensors (see the module docstring); None for any other model."""
    if config.platform == "ensemble":
        return "ensemble"
    ins, outs = _names(config.input), _names(config.output)
    if "input_ids" in ins and "output_ids" in outs:
        return "tensorrt_llm"
    if "QUERY" in ins and "INPUT_ID" in outs:
        return "preprocessing"
    if "TOKENS_BATCH" in ins and "OUTPUT" in outs:
        return "postprocessing"
    if "text_input" in ins and "text_output" in outs:
        return "tensorrt_llm_bls"
    return None


def _load(repo: Path, *, require_engine: bool = True) -> list[AdoptedModel]:
    """Every model of ``repo`` with its role; ``require_engine``: refuse a repository without a model of role
    ``tensorrt_llm`` (adopt needs one; diff compares any two, llmapi ones included)."""
    if not repo.is_dir():
        raise AdoptError("not a directory", path=repo)
    models: list[AdoptedModel] = []
    for folder in read_model_folders(repo):
        if folder.unreadable == "missing":
            continue
        rel = folder.rel
        if folder.text is None:
            raise AdoptError(f"cannot read: {folder.unreadable}", path=folder.path)
        if folder.error is not None:
            exc = folder.error
            line = exc.line or 0
            holes = [p for p in find_placeholders(folder.text) if p.line == line]
            if holes:
                raise AdoptError(
                    f"line {line}: the placeholder ${{{holes[0].name}}} was left unfilled in a field Triton parses "
                    "itself, so the file is not a model config",
                    key=holes[0].name,
                    path=rel,
                    hint=f"fill it (fill_template.py {holes[0].name}:VALUE) and adopt again",
                ) from exc
            raise AdoptError(exc.message, path=rel) from exc
        assert folder.config is not None  # read and parsed
        models.append(AdoptedModel(folder.name, model_role(folder.config), rel, folder.config, folder.text))
    if not models:
        raise AdoptError(
            "not a Triton model repository: no <model>/config.pbtxt in it",
            path=repo,
            hint="pass the folder that holds preprocessing/, tensorrt_llm/, ... (NVIDIA's inflight_batcher_llm layout)",
        )
    if require_engine and not any(m.role == "tensorrt_llm" for m in models):
        raise AdoptError(
            "no TensorRT-LLM model in it (a model with input input_ids and output output_ids)",
            path=repo,
            hint="adopt reads repositories filled from NVIDIA's all_models/inflight_batcher_llm templates",
        )
    return models


def _by_role(models: list[AdoptedModel]) -> tuple[dict[str, AdoptedModel], list[AdoptedModel]]:
    roles: dict[str, AdoptedModel] = {}
    extra: list[AdoptedModel] = []
    for m in models:
        if m.role is None:
            extra.append(m)
        elif m.role in roles:
            raise AdoptError(
                f"two models play the role {m.role}: {roles[m.role].rel} and {m.rel} (one LLM per adopt)",
                path=m.rel,
                hint="adopt a repository of one LLM; move the other models out first",
            )
        else:
            roles[m.role] = m
    return roles, extra


# --------------------------------------------------------------------------------------------- profile
def _contract_score(config: Any, contract: Any) -> int:
    """+1 per tensor whose name and dtype match the contract, -1 per name whose dtype differs."""
    score = 0
    for kind, specs in (("input", contract.inputs), ("output", contract.outputs)):
        by_name = {s.name: s for s in specs}
        for t in getattr(config, kind):
            spec = by_name.get(t.name)
            if spec is None:
                continue
            if spec.data_type_param:  # a dtype the user chooses: any dtype matches
                score += 1
            elif spec.data_type == dtype_name(t.data_type):
                score += 1
            else:
                score -= 1
    return score


def recognise_profile(roles: Mapping[str, AdoptedModel]) -> str:
    """The profile whose contract the models' tensors match; every model with a preference must agree.

    Raises:
        AdoptError: models prefer different profiles (two versions mixed); names both files and a tensor.
    """
    from .profile.contract import list_profiles, load_contract

    contracts = {p: load_contract(p) for p in list_profiles("ensemble")}
    votes: dict[str, AdoptedModel] = {}
    for role in ROLE_ORDER:
        m = roles.get(role)
        if m is None:
            continue
        contract_models = {p: c.models.get(role) for p, c in contracts.items()}
        if role == "tensorrt_llm_bls":
            contract_models = {p: c.models.get("ensemble") for p, c in contracts.items()}
        scores = {p: _contract_score(m.config, cm) for p, cm in contract_models.items() if cm is not None}
        best = max(scores.values())
        winners = [p for p, s in scores.items() if s == best]
        if len(winners) == 1:
            votes.setdefault(winners[0], m)
    if len(votes) > 1:
        (p1, m1), (p2, m2) = list(votes.items())[:2]
        name, detail = _distinguishing_tensor(m2, contracts[p1])
        raise AdoptError(
            f"two versions mixed: {m1.rel} has the tensors of profile {p1} but {m2.rel} those of {p2}{detail}",
            path=m2.rel,
            key=name,
            hint="fill every model from the templates of one tag",
        )
    if not votes:  # no model prefers one: render's default profile
        return "trtllm-1.2"
    return next(iter(votes))


def _distinguishing_tensor(m: AdoptedModel, other: Any) -> tuple[str | None, str]:
    """A tensor of ``m`` whose dtype the ``other`` profile's contract declares differently: (name, text)."""
    role = m.role or ""
    cm = other.models.get("ensemble" if role == "tensorrt_llm_bls" else role)
    if cm is None:
        return None, ""
    specs = {s.name: s for s in [*cm.inputs, *cm.outputs]}
    for t in [*m.config.input, *m.config.output]:
        spec = specs.get(t.name)
        if spec is not None and spec.data_type and spec.data_type != dtype_name(t.data_type):
            return t.name, f" (tensor {t.name} is {dtype_name(t.data_type)}, {other.profile} declares {spec.data_type})"
    return None, ""


def _nvidia_tag(roles: Mapping[str, AdoptedModel], repo: Path, findings: list[Finding]) -> str | None:
    """The tag whose pristine model.py files the repository holds; a known model's model.py that matches no tag
    is a hand edit (a finding)."""
    hashes: dict[str, str] = {}
    for role, m in roles.items():
        path = repo / m.name / "1" / "model.py"
        if path.is_file():
            hashes[role] = hashlib.sha256(path.read_bytes()).hexdigest()
    known = {h: (tag, role) for tag, files in PRISTINE_MODEL_PY.items() for role, h in files.items()}
    tags = {known[h][0] for h in hashes.values() if h in known}
    for role, h in sorted(hashes.items()):
        if h not in known and role in {r for files in PRISTINE_MODEL_PY.values() for r in files}:
            findings.append(
                Finding(
                    f"{roles[role].name}/1/model.py",
                    "model.py",
                    f"hand-edited: sha256 {h[:12]}... is none of NVIDIA's pristine {role} model.py "
                    f"({', '.join(PRISTINE_MODEL_PY)}); repo-builder's own {role} model replaces it, so "
                    "port the edit (a parameter, or an issue) before serving the rendered repository",
                    "hand_edit",
                )
            )
    return sorted(tags)[-1] if len(tags) == 1 else None


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


#: How a structural parameter is read back from a model's ``ModelConfig`` (the inverse of the templates'
#: macros in model_templates/_macros.j2): {parameter: (config field named in findings, reader)}. The dtype
#: parameters are read from the contract's ``data_type_param`` tensors instead (:func:`_dtype_values`).
STRUCTURAL_FIELDS: dict[str, tuple[str, Callable[[Any], Any]]] = {
    "triton_max_batch_size": ("max_batch_size", _batch),
    "decoupled_mode": ("model_transaction_policy.decoupled", lambda c: bool(c.model_transaction_policy.decoupled)),
    "max_queue_delay_microseconds": ("dynamic_batching.max_queue_delay_microseconds", _queue_delay),
    "max_queue_size": ("dynamic_batching.default_queue_policy.max_queue_size", _queue_size),
    "preprocessing_instance_count": ("instance_group.count", _instances),
    "postprocessing_instance_count": ("instance_group.count", _instances),
    "bls_instance_count": ("instance_group.count", _instances),
    "tensorrt_llm_instance_count": ("instance_group.count", _instances),
    "triton_backend": ("backend", lambda c: c.backend or None),
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
            if param.kind == "structural" and name in STRUCTURAL_FIELDS:
                fieldname, reader = STRUCTURAL_FIELDS[name]
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


# ---------------------------------------------------------------------------------------------- engine
def _check_engine(repo: Path, engine_dir: Path, profile: str) -> list[Finding]:
    """Contradictions between the filled configs and the engine's config.json (batch size, beam width, world
    size...), by the rule table render uses (:func:`repo_builder.validate.check_against_engine`).

    Raises:
        AdoptError: every error-severity contradiction, each naming the file and key.
    """
    from .errors import EngineError
    from .repository.validate import check_against_engine

    try:
        problems = check_against_engine(repo, engine_dir, root=repo)
    except EngineError as exc:
        raise AdoptError(f"the engine cannot be read: {exc.message}", path=exc.path or engine_dir) from exc
    errors = [p for p in problems if p.severity == "error" and "does not exist" not in p.message]
    if errors:
        raise AdoptError(
            f"the engine {engine_dir} (config.json) disagrees with the filled values:\n"
            + "\n".join(f"  {p}" for p in errors),
            path=repo,
            hint="adopt with the engine the repository was filled for, or fix the value named",
        )
    out = []
    for p in problems:
        if p.severity != "error":
            key, _, message = p.message.partition(": ")
            out.append(Finding(p.file, key, message, "engine"))
    return out


# ------------------------------------------------------------------------------------------------ main
def adopt_repository(
    repo: str | Path, *, engine_dir: str | Path | None = None, tokenizer_dir: str | Path | None = None
) -> Adoption:
    """Read a hand-filled repository (see the module docstring); writes nothing.

    Args:
        repo: the repository folder.
        engine_dir: the engine it serves (cross-checked; also recorded as the engine path for render).
        tokenizer_dir: the tokenizer (recorded as the tokenizer path for render).

    Raises:
        AdoptError: bad input (names the file and key).
    """
    root = Path(repo).expanduser().absolute()
    models = _load(root)
    roles, extra = _by_role(models)
    profile = recognise_profile(roles)
    findings: list[Finding] = [
        Finding(
            m.rel,
            "name",
            f"model {m.name!r} is not one of NVIDIA's LLM models: left alone, and not rendered (copy it into the "
            "new repository yourself)",
            "extra_model",
        )
        for m in extra
    ]
    tag = _nvidia_tag(roles, root, findings)
    values, where = _read_values(profile, roles, findings)
    findings.extend(_missing(profile, roles, values))
    paths = {name: str(values.pop(name)) for name in PATH_PARAMETERS if name in values}
    # the backend follows the engine's kind at render (tensorrtllm for an engine, python for repo-builder's
    # CPU engines): recorded as a fact of the repository, not a value to impose
    backend = values.pop("triton_backend", None)
    if backend is not None:
        paths["backend"] = str(backend)
    if engine_dir is not None:
        findings.extend(_check_engine(root, Path(engine_dir), profile))
        paths["engine_dir"] = str(Path(engine_dir).expanduser().absolute())
    if tokenizer_dir is not None:
        paths["tokenizer_dir"] = str(Path(tokenizer_dir).expanduser().absolute())
    return Adoption(
        repo=root,
        profile=profile,
        tag=tag,
        values=values,
        paths=paths,
        where=where,
        findings=findings,
        models={m.role or m.name: m for m in models},
    )


def write_values_file(adoption: Adoption, path: str | Path) -> Path:
    """Write the values file (YAML) atomically: a comment header, ``adopted_from`` and the values.

    Raises:
        AdoptError: ``path`` is inside the adopted repository (adopt never writes there), or cannot be written.
    """
    import os
    import tempfile

    import yaml

    out = Path(path).expanduser().absolute()
    if out.parent.resolve() == adoption.repo.resolve() or adoption.repo.resolve() in out.resolve().parents:
        raise AdoptError("the values file would be written into the adopted repository", key="--values-out", path=out)
    header = (
        f"# Values adopted by `repo-builder adopt` from {adoption.repo} (profile {adoption.profile}).\n"
        f"# Render: repo-builder render --profile {adoption.profile} --values {out.name} "
        "--engine-dir ENGINE --tokenizer-dir TOKENIZER -o NEW\n"
    )
    text = header + yaml.safe_dump(adoption.values_document(), sort_keys=False, allow_unicode=True)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", dir=out.parent)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, out)
    except OSError as exc:
        raise AdoptError(f"cannot write the values file: {exc.strerror or exc}", key="--values-out", path=out) from exc
    return out
