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
  their ``ModelConfig`` fields (the schema's ``config_field``, :data:`FIELD_READERS`); every value is typed by
  the schema, so a value the profile refuses is reported with the schema's reason;
- NVIDIA's ``model.py`` files, by sha256 against the pristine ones of each tag (:data:`PRISTINE_MODEL_PY`).

What it cannot place is a :class:`Finding` naming the file and key: an unknown key, a ``${...}`` placeholder
left unfilled, a value the profile refuses, models that disagree on a value, a hand-edited ``model.py``, an
extra model, a contradiction with the engine (``--engine-dir``: ``check_against_engine``, the rule table render
uses). Bad input (no model repository, a config that does not parse, two versions mixed, an engine that
contradicts the filled batch size, beam width or world size) raises :class:`AdoptError`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .adopt_values import (  # noqa: F401  (re-exported: moved from this module)
    DECOUPLED_ROLES,
    FIELD_READERS,
    _missing,
    _names,
    _read_values,
)
from .adoption import (  # noqa: F401  (re-exported: moved from this module)
    PATH_PARAMETERS,
    PRISTINE_MODEL_PY,
    ROLE_ORDER,
    AdoptedModel,
    AdoptError,
    Adoption,
    Finding,
)
from .repository.pbtxt import dtype_name, find_placeholders, read_model_folders

# ----------------------------------------------------------------------------------------------- roles


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
