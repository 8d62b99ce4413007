"""The semantic diff of two Triton LLM repositories: what Triton and the models would do differently, not how
the files are written (comments, order, spacing and ``${...}``-versus-empty are the same thing to them).

Models are paired by role (:func:`repo_builder.adopt.model_role`, from their tensors), so a renamed model is
still compared with its counterpart. Compared per model: ``backend``/``platform``, ``max_batch_size``,
``model_transaction_policy.decoupled``, ``dynamic_batching`` (delay, queue size), ``instance_group`` counts,
every input and output (``data_type``, ``dims``, ``optional``, ``reshape``; present or not), every
``parameters`` key (a value that is empty or a ``${...}`` placeholder counts as absent, as NVIDIA's backend
and repo-builder's models read it), the ensemble's steps (``input_map``/``output_map`` per step), and every
key of ``<version>/model.yaml`` (the llmapi profiles; item ``model.yaml KEY``, nested keys as
``kv_cache_config.free_gpu_memory_fraction``).

Each :class:`Change` is matched against :data:`FIXES`, the documented list of what repo-builder renders on
purpose differently from NVIDIA's templates (docs/migration.md explains each); a change no fix names is
``unexplained``. :func:`group_changes` sorts changes into the groups ``repo-builder upgrade`` prints.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .repository.pbtxt import dtype_name
from .semdiff_change import Change, _normalized, _param, _schema_by_key  # Change re-exported: moved from here


@dataclass(frozen=True)
class _Model:
    """A model to compare: its parsed config and its model.yaml facts (empty for the engine layouts)."""

    config: Any
    yaml_facts: dict[str, Any]


def _tensor(t: Any) -> dict[str, Any]:
    return {
        "data_type": dtype_name(t.data_type),
        "dims": [int(d) for d in t.dims],
        "optional": bool(getattr(t, "optional", False)),
        "reshape": [int(d) for d in t.reshape.shape] if t.HasField("reshape") else None,
    }


def _facts(config: Any) -> dict[str, Any]:
    """{item: value} of one model config (see the module docstring)."""
    out: dict[str, Any] = {
        "backend": config.backend or None,
        "platform": config.platform or None,
        "max_batch_size": int(config.max_batch_size),
        "decoupled": bool(config.model_transaction_policy.decoupled),
        "instance count": sum(g.count or 1 for g in config.instance_group) if config.instance_group else None,
    }
    if config.HasField("dynamic_batching"):
        db = config.dynamic_batching
        out["dynamic_batching max_queue_delay_microseconds"] = int(db.max_queue_delay_microseconds)
        out["dynamic_batching max_queue_size"] = (
            int(db.default_queue_policy.max_queue_size) if db.HasField("default_queue_policy") else None
        )
    for kind in ("input", "output"):
        for t in getattr(config, kind):
            out[f"{kind} {t.name}"] = _tensor(t)
    by_key = _schema_by_key()
    for key, value in config.parameters.items():
        text = _param(value.string_value)
        if text is not None:
            out[f"parameter {key}"] = _normalized(by_key.get(key), text)
    for step in config.ensemble_scheduling.step:
        for name, m in (("input_map", step.input_map), ("output_map", step.output_map)):
            for k, v in m.items():
                out[f"step {step.model_name} {name}[{k}]"] = v
    return out


def _tensor_changes(model: str, item: str, before: dict, after: dict) -> list[Change]:
    return [
        Change(model, f"{item} {field}", before[field], after[field])
        for field in ("data_type", "dims", "optional", "reshape")
        if before[field] != after[field]
    ]


def _yaml_facts(repo: Path, model: str) -> dict[str, Any]:
    """{``model.yaml KEY``: value} of the model's ``<version>/model.yaml`` (the llmapi profiles), keys flattened
    as the schema names them (``kv_cache_config.free_gpu_memory_fraction``), each value typed by the schema
    when it takes it (``2`` and ``"2"`` are one int); empty without the file or when it is not a YAML mapping
    (``repo-builder validate`` reports that)."""
    import yaml

    from .profile.schema import load_schema
    from .repository.validate_llmapi import flatten, model_yaml_path

    path = model_yaml_path(repo / model)
    if path is None:
        return {}
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return {}
    if not isinstance(data, dict):
        return {}
    params = load_schema().parameters
    out: dict[str, Any] = {}
    for key, value in flatten(data).items():
        param = params.get(key)
        if param is not None and param.type is not None and value is not None:
            try:
                value = param.coerce(value)
            except ValueError:
                pass
        out[f"model.yaml {key}"] = value
    return out


def _load(repo: Path) -> dict[str, Any]:
    """{role or folder name: config} of ``repo``; models are paired by role, except in an llmapi repository (a
    model with model.yaml) or one where two models play one role (the llmapi layout: tensorrt_llm and the text
    front doors all take text_input): then by folder name.
    The config's ``model.yaml`` facts (:func:`_yaml_facts`) ride along as ``config.yaml_facts``."""
    from collections import Counter

    from .adopt import _by_role, _load

    loaded = _load(repo, require_engine=False)
    facts = {m.name: _yaml_facts(repo, m.name) for m in loaded}
    if any(facts.values()) or any(n > 1 for r, n in Counter(m.role for m in loaded).items() if r is not None):
        for m in loaded:
            m.role = None
    roles, extra = _by_role(loaded)
    out: dict[str, Any] = {role: _Model(m.config, facts[m.name]) for role, m in roles.items()}
    out.update({m.name: _Model(m.config, facts[m.name]) for m in extra})
    names = {m.name: role for role, m in roles.items()}
    # ensemble steps name models by folder: compare them by role
    ens = out.get("ensemble")
    if ens is not None:
        for step in ens.config.ensemble_scheduling.step:
            step.model_name = names.get(step.model_name, step.model_name)
    return out


def semantic_diff(before: str | Path, after: str | Path) -> list[Change]:
    """Every semantic difference from repository ``before`` to ``after``, each matched against :data:`FIXES`.

    Raises:
        AdoptError: either is not a readable model repository (names the file).
    """
    old, new = _load(Path(before)), _load(Path(after))
    changes: list[Change] = []
    for model in sorted(set(old) | set(new)):
        if model not in old or model not in new:
            changes.append(
                Change(model, "model", "present" if model in old else None, "present" if model in new else None)
            )
            continue
        fo = {**_facts(old[model].config), **old[model].yaml_facts}
        fn = {**_facts(new[model].config), **new[model].yaml_facts}
        for item in sorted(set(fo) | set(fn)):
            a, b = fo.get(item), fn.get(item)
            if a == b:
                continue
            if isinstance(a, dict) and isinstance(b, dict):
                changes.extend(_tensor_changes(model, item, a, b))
            else:
                changes.append(Change(model, item, a, b))
    return [explain(c) for c in changes]


# ------------------------------------------------------------------------------------------------ fixes
@dataclass(frozen=True)
class Fix:
    """A documented, deliberate difference: ``name`` (docs/migration.md has a section per name), ``reason``,
    ``group`` (how upgrade prints it) and ``matches`` (does it explain this change?)."""

    name: str
    group: str
    reason: str
    matches: Callable[[Change], bool]


def _item(*prefixes: str, models: Iterable[str] | None = None) -> Callable[[Change], bool]:
    allowed = set(models) if models is not None else None
    return lambda c: (allowed is None or c.model in allowed) and c.item.startswith(prefixes)


def _ours_tensor(c: Change) -> bool:
    """A tensor the contract marks ``ours: true`` (repo-builder's own, optional), added."""
    from .profile.contract import list_profiles, load_contract

    if c.before is not None or not c.item.startswith(("input ", "output ")):
        return False
    kind, _, name = c.item.partition(" ")
    for profile in list_profiles("ensemble"):
        cm = load_contract(profile).models.get(c.model)
        if cm is None:
            continue
        for spec in getattr(cm, f"{kind}s"):
            if spec.name == name.split(" ")[0] and spec.ours:
                return True
    return False


def _repo_builder_parameter(c: Change) -> bool:
    """A ``parameters`` key repo-builder's own Python models read (the schema lists it), added."""
    from .profile.schema import load_schema

    if c.before is not None or not c.item.startswith("parameter "):
        return False
    key = c.item.removeprefix("parameter ")
    return any(p.key == key and c.model in p.models for p in load_schema().parameters.values())


_MULTIMODAL = re.compile(
    r"^(input|output) (IMAGE_|IMAGES$|VIDEO_|PIXEL_VALUES|ASPECT_RATIO|CROSS_ATTENTION_MASK|ATTENTION_MASK|"
    r"IS_VIDEO|VISION_|image_|video_|decoder_|DECODER_|REQUEST_DECODER)"
    r"|^step \S+ (input|output)_map\[(DECODER_QUERY|DECODER_INPUT_ID|REQUEST_DECODER_INPUT_LEN|decoder_input_\w+)\]"
)


def _in_contract(c: Change) -> bool:
    """A tensor (or its ensemble wiring) that only ``after`` has, declared by the contract of a profile."""
    from .profile.contract import list_profiles, load_contract

    if c.before is not None:
        return False
    m = re.match(r"^(input|output) (\S+)$", c.item) or re.match(r"^step \S+ (input|output)_map\[(\S+)\]$", c.item)
    if m is None:
        return False
    name = m.group(2)
    for profile in list_profiles("ensemble"):
        for model in load_contract(profile).models.values():
            if any(s.name == name for s in [*model.inputs, *model.outputs]):
                return True
    return False


def _profile_default(c: Change) -> bool:
    """A parameter whose value differs as two profiles' defaults differ."""
    from .profile.schema import load_schema

    if not c.item.startswith("parameter ") or c.before is None or c.after is None:
        return False
    key = c.item.removeprefix("parameter ")
    for p in load_schema().parameters.values():
        if p.key == key and p.default_by_profile and p.type is not None:
            defaults = {_normalized(p, str(v)) for v in [p.default, *p.default_by_profile.values()] if v is not None}
            return {c.before, c.after} <= defaults
    return False


def _backend_read_dtype(c: Change) -> bool:
    """An engine-model input retyped to the dtype NVIDIA's C++ backend reads it as (contract ``backend_reads``)."""
    from .profile.contract import list_profiles, load_contract

    if c.model != "tensorrt_llm" or not c.item.startswith("input ") or not c.item.endswith(" data_type"):
        return False
    name = c.item.split(" ")[1]
    for profile in list_profiles():
        reads = load_contract(profile).backend_reads
        if reads is not None and reads.dtypes.get(name) == c.after:
            return True
    return False


FIXES: tuple[Fix, ...] = (
    Fix(
        "backend-read-dtypes",
        "renamed_inputs",
        "tensorrt_llm inputs declared with the dtype NVIDIA's C++ backend reads them as (early_stopping TYPE_INT32, "
        "not TYPE_BOOL; mrope_position_deltas TYPE_INT32, not TYPE_INT64): the backend casts the buffer without "
        "checking the declared dtype, so a value sent as declared upstream is misread",
        _backend_read_dtype,
    ),
    Fix(
        "repo-builder-tensors",
        "new_inputs",
        "repo-builder's optional tensors (contract.yaml `ours: true`): streaming detokenizer keys, perf-metric "
        "requests, END_ID/PAD_ID on preprocessing; clients that do not send them are unaffected",
        _ours_tensor,
    ),
    Fix(
        "stream-keys",
        "new_inputs",
        "the ensemble routes the engine's arrival_time_ns/batch_index/sequence_index to postprocessing and the "
        "perf-metrics request through preprocessing, so streamed text is keyed per request (docs/design.md, "
        "Streaming text in an ensemble)",
        lambda c: (
            c.model == "ensemble"
            and bool(
                re.search(
                    r"\[(ARRIVAL_TIME_NS|BATCH_INDEX|SEQUENCE_INDEX|RETURN_PERF_METRICS|OUT_RETURN_PERF_METRICS|return_perf_metrics)\]",
                    c.item,
                )
            )
        ),
    ),
    Fix(
        "end-pad-from-tokenizer",
        "renamed_inputs",
        "preprocessing resolves end_id/pad_id (the client's, else the tokenizer's) and hands them to the engine; "
        "v0.5.0's ensemble passed the client's straight through, so a request without them had no end id",
        lambda c: (
            c.model == "ensemble"
            and bool(re.search(r"\[(END_ID|PAD_ID|OUT_END_ID|OUT_PAD_ID|end_id|pad_id)\]", c.item))
        ),
    ),
    Fix(
        "optional-word-lists",
        "changed_defaults",
        "the bad/stop word lists are optional (v0.6+ templates too): a client may omit them",
        lambda c: (
            c.item
            in (
                "input BAD_WORDS_DICT optional",
                "input STOP_WORDS_DICT optional",
                "input bad_words optional",
                "input stop_words optional",
            )
        ),
    ),
    Fix(
        "int32-request-inputs",
        "renamed_inputs",
        "tensorrtllm_backend v0.6.0 retyped the integer request inputs (max_tokens, end_id, pad_id, top_k, "
        "beam_width, min_length, request_output_len) from TYPE_UINT32 to TYPE_INT32: clients send INT32",
        lambda c: c.item.endswith(" data_type") and c.before == "TYPE_UINT32" and c.after == "TYPE_INT32",
    ),
    Fix(
        "one-prompt-per-row",
        "renamed_inputs",
        "the 1.x templates declare one prompt and one max_tokens per batch row (dims [1]) and one text per beam "
        "(text_output/OUTPUT dims [-1]); v0.5.0 declared [-1] and [-1, -1]",
        lambda c: (
            c.item.endswith(" dims")
            and c.model in ("ensemble", "preprocessing", "postprocessing", "tensorrt_llm_bls")
            and c.item.split(" ")[1]
            in ("text_input", "max_tokens", "QUERY", "REQUEST_OUTPUT_LEN", "text_output", "OUTPUT")
        ),
    ),
    Fix(
        "optional-input-ids",
        "changed_defaults",
        "TensorRT-LLM 1.x makes input_ids optional (a request may carry encoder features instead); text "
        "requests send it as before",
        lambda c: c.model == "tensorrt_llm" and c.item == "input input_ids optional",
    ),
    Fix(
        "executor-worker-path",
        "new_parameters",
        "the 1.x backend starts its executor worker from executor_worker_path; repo-builder writes the path of "
        "the profile's container (parameters.yaml removed: executor_worker_path)",
        lambda c: c.model == "tensorrt_llm" and c.item == "parameter executor_worker_path",
    ),
    Fix(
        "profile-default",
        "changed_defaults",
        "the value restated the old profile's default, and the new profile's default differs "
        "(parameters.yaml default_by_profile); set it with --set to keep the old one",
        lambda c: _profile_default(c),
    ),
    Fix(
        "scalar-reshape",
        "changed_defaults",
        "the engine's scalar inputs carry reshape: [] as in the v0.6+ templates; clients send the same [1] "
        "tensors, and the Python BLS takes them without one",
        lambda c: c.item.endswith(" reshape") and c.model in ("tensorrt_llm", "tensorrt_llm_bls"),
    ),
    Fix(
        "dynamic-batching",
        "changed_defaults",
        "repo-builder writes dynamic_batching (max_queue_delay_microseconds, max_queue_size; 0 = Triton's "
        "defaults) on preprocessing, postprocessing and tensorrt_llm, as the v0.6+ templates do",
        _item("dynamic_batching"),
    ),
    Fix(
        "newer-contract-tensors",
        "new_inputs",
        "tensors of the profile's contract (TensorRT-LLM 1.2 request inputs such as min_tokens, seed, "
        "return_num_input_tokens and their outputs) that the filled template predates, the v0.5-v0.19 names "
        "min_length/random_seed the contract keeps for old clients, and engine inputs the ensemble and BLS now "
        "wire (lookahead_*, retention_*); optional for clients",
        _in_contract,
    ),
    Fix(
        "multimodal-dropped",
        "dropped_keys",
        "multimodal and encoder-decoder tensors and keys are not supported by repo-builder (parameters.yaml "
        "removed: multimodal_model_path); text requests never used them",
        lambda c: (
            c.after is None
            and (
                bool(_MULTIMODAL.search(c.item))
                or (
                    c.model == "preprocessing"
                    and c.item
                    in (
                        "parameter multimodal_model_path",
                        "parameter max_num_images",
                        "parameter hf_model_path",
                        "parameter gpt_model_path",
                    )
                )
            )
        ),
    ),
    Fix(
        "bls-added",
        "new_models",
        "repo-builder always renders tensorrt_llm_bls (v0.5.0 had none): the BLS trims stop strings and serves "
        "/generate with the same inputs as the ensemble",
        lambda c: c.model == "tensorrt_llm_bls" and c.item == "model" and c.before is None,
    ),
    Fix(
        "ensemble-added",
        "new_models",
        "repo-builder always renders the ensemble (preprocessing -> tensorrt_llm -> postprocessing); a repository "
        "filled without one served token ids only, and still does through tensorrt_llm",
        lambda c: c.model == "ensemble" and c.item == "model" and c.before is None,
    ),
    Fix(
        "tokenizer-type-dropped",
        "dropped_keys",
        "tokenizer_type was removed upstream in v0.9: the tokenizer is loaded with AutoTokenizer",
        lambda c: c.item == "parameter tokenizer_type" and c.after is None,
    ),
    Fix(
        "force-cpu-only-input-tensors",
        "dropped_keys",
        "FORCE_CPU_ONLY_INPUT_TENSORS is a Python-backend switch NVIDIA's templates set on the C++ model, "
        "where nothing reads it",
        lambda c: c.item == "parameter FORCE_CPU_ONLY_INPUT_TENSORS" and c.after is None,
    ),
    Fix(
        "repo-builder-models",
        "new_parameters",
        "repo-builder's own Python models (preprocessing, postprocessing, BLS) read these parameters; NVIDIA's "
        "model.py had them hard-coded or not at all (docs/design.md, parameters of the Python models)",
        lambda c: c.model != "tensorrt_llm" and _repo_builder_parameter(c),
    ),
    Fix(
        "explicit-defaults",
        "new_parameters",
        "where the filled file left a key of the engine model unset, repo-builder writes the value it resolves "
        "(the schema's default, which follows the backend's default for an unset key, or the tokenizer's path)",
        lambda c: c.model == "tensorrt_llm" and _repo_builder_parameter(c),
    ),
)


def explain(change: Change) -> Change:
    """``change`` with the first matching fix's name and reason (unchanged when none matches)."""
    for fix in FIXES:
        if fix.matches(change):
            return Change(change.model, change.item, change.before, change.after, fix.name, fix.reason)
    return change


def unexplained(changes: Iterable[Change]) -> list[Change]:
    """The changes no documented fix explains."""
    return [c for c in changes if c.fix is None]


#: The groups of the per-value changes of ``repo-builder upgrade`` (:func:`repo_builder.upgrade.carry_values`).
VALUE_CHANGE_GROUPS = {"not-in-profile": "dropped_keys"}

GROUPS = ("renamed_inputs", "new_inputs", "new_parameters", "dropped_keys", "changed_defaults", "new_models", "other")


def group_changes(changes: Iterable[Change]) -> dict[str, list[Change]]:
    """{group: changes} in :data:`GROUPS` order: a fix's group, else by shape (an input gone and one new in one
    model pair up as renamed; a parameter only in ``after`` is new, only in ``before`` dropped, in both changed)."""
    by_fix = {f.name: f.group for f in FIXES} | VALUE_CHANGE_GROUPS
    out: dict[str, list[Change]] = {g: [] for g in GROUPS}
    for c in changes:
        if c.fix:
            out[by_fix[c.fix]].append(c)
        elif c.item.startswith(("input ", "output ")) and (c.before is None or c.after is None):
            out["renamed_inputs" if c.before is None or c.after is None else "other"].append(c)
        elif c.item.startswith("parameter ") and c.before is None:
            out["new_parameters"].append(c)
        elif c.item.startswith("parameter ") and c.after is None:
            out["dropped_keys"].append(c)
        elif c.item == "model":
            out["new_models"].append(c)
        else:
            out["changed_defaults"].append(c)
    return {g: cs for g, cs in out.items() if cs}
