"""The rule table: what an engine allows, and which parameter values contradict it or each other.

One table, two callers, so that ``repo-builder validate --engine-dir`` reports what render refuses:

* :func:`repo_builder.values.resolve.resolve` at render time, with the typed values it resolved, the user's
  values, ``--streaming``, the tokenizer and the profile's parameters;
* :func:`repo_builder.repository.validate.check_against_engine` for ``repo-builder validate --engine-dir``, with
  the values read back from a repository's ``config.pbtxt`` files (rendered by repo-builder or by hand) and the
  tokenizer its ``tokenizer_dir`` names (when it is on this machine).

Each rule gets a :class:`RuleContext` (the :class:`~repo_builder.engine.EngineInfo`, ``{parameter name: typed
value or None}`` and what else the caller knows) and yields :class:`Finding` objects naming the parameter at
fault. The callers turn them into their own form: resolve into ``"name: message"`` problems and warnings (and
applies a finding's ``fix`` to a default the user did not set), validate into
``Problem(file, "config key: message", line)``. Facts behind the rules are cited per rule (TensorRT-LLM backend
``inflight_batcher_llm/src/model_instance_state.cc`` load errors, cases B06-B11 of the project's upstream
notes, TensorRT-LLM ``KVCacheManager`` block sizing).

The table :data:`RULES` is here, in message order; the rules live by topic beside it: the engine's shape and
the user's flags (:mod:`.rules_engine`), batching and the KV cache (:mod:`.rules_kv`), streaming and decoding
features (:mod:`.rules_decoding`), LoRA (:mod:`.rules_lora`); the tokenizer, backend, unset-value and BLS rules
and the disaggregated layout's checks are below. :mod:`.findings` holds :class:`Finding` and
:class:`RuleContext`. Every public name of those modules is importable from here.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Iterator, Mapping
from pathlib import Path
from typing import Any

from ..engine import EngineInfo
from ..profile.schema import Parameter
from ..tokenizer import TokenizerInfo
from .findings import BUILD, INFLIGHT, LARGEST_GPU_BYTES, NO_FIX, Blame, Finding, Rule, RuleContext, Severity
from .rules_decoding import (
    BEAM_ONE_ONLY,
    LOOKAHEAD_KEYS,
    SPECULATIVE_DECODING_MODES,
    TREE_KEYS,
    XGRAMMAR_KEYS,
    guided_decoding,
    lookahead,
    lookahead_draft_tokens,
    postprocessing_state,
    speculative_engine,
    streaming_beam,
    tree_orphans,
    tree_problems,
)
from .rules_engine import (
    ENGINE_LIMITS,
    EngineLimit,
    device_groups,
    end_id,
    engine_limits,
    gpu_placement,
    instance_count,
    logits_dtype,
    placement_findings,
    rank_files,
    streaming_flag,
)
from .rules_kv import (
    KV_KEYS,
    PAGED_KV_KEYS,
    attention_window,
    attention_window_layers,
    chunked_context,
    inflight_batching,
    kv_cache_kind,
    kv_cache_memory,
    kv_cache_reuse,
    kv_cache_tokens,
)
from .rules_lora import (
    LORA_CONFIG_FILE,
    LORA_KEYS,
    LORA_MODULE_IDS,
    LORA_WEIGHTS_FILE,
    lora,
    lora_adapter_bytes,
    lora_adapter_problems,
    lora_adapters,
    lora_weights_dtype,
)

#: Companion models repo-builder's BLS does not drive: (parameter, message formatted with ``value``).
BLS_COMPANIONS = (
    (
        "tensorrt_llm_draft_model_name",
        "'{value}': the draft model is rendered by `render --draft-engine-dir DIR`, which sets this name itself "
        "(docs/layouts.md); without a draft engine there is no model to call",
    ),
    (
        "multimodal_encoders_name",
        "'{value}': repo-builder renders text-only repositories (no multimodal_encoders model, and multimodal "
        "serving is end of life in TRT-LLM 1.2)",
    ),
)


def bls_companions(ctx: RuleContext) -> Iterator[Finding]:
    """Draft-model speculative decoding and multimodal encoders through the BLS are not implemented."""
    for key, message in BLS_COMPANIONS:
        value = ctx.v(key)
        if value:
            yield Finding(key, message.format(value=value))


# ------------------------------------------------------------------------------------------- tokenizer and backend
def vocabulary(ctx: RuleContext) -> Iterator[Finding]:
    """A tokenizer that emits ids the engine's embedding table does not have (wrong tokenizer for the engine)."""
    tok, vocab = ctx.tokenizer, ctx.engine.vocab_size
    if tok is not None and vocab is not None and tok.vocab_size > vocab:
        yield Finding(
            "tokenizer_dir",
            f"the tokenizer has {tok.vocab_size} tokens but the engine's "
            f"vocabulary is {vocab}: ids above {vocab - 1} would "
            f"be out of range (wrong tokenizer for {ctx.engine.dir}?)",
            blame="tokenizer",
        )


def backend(ctx: RuleContext) -> Iterator[Finding]:
    """B29: the Python backend model of a TensorRT-LLM engine only runs decoupled; repo-builder's Python engines
    (CPU reference, synthetic) run on the python backend only."""
    name = ctx.v("triton_backend")
    if name is None:
        return
    if ctx.is_trt and name == "python" and not ctx.v("decoupled_mode"):
        yield Finding(
            "triton_backend",
            "python with a TensorRT-LLM engine needs decoupled mode "
            "(the Python backend model only runs decoupled); set --streaming or "
            "triton_backend=tensorrtllm (B29)",
        )
    if not ctx.is_trt and name != "python":
        yield Finding(
            "triton_backend",
            f"{name} cannot serve a {ctx.engine.kind} engine; the "
            "CPU reference / synthetic engines run on the python backend",
        )


def unset(ctx: RuleContext) -> Iterator[Finding]:
    """Structural parameters (Triton cannot parse a config without them) and required ones need a value."""
    for name, param in (ctx.params or {}).items():
        if param.kind == "structural" and ctx.v(name) is None:
            yield Finding(
                name,
                f"has no value (structural: Triton cannot parse the config without it); expected {param.type_text()}",
            )
        elif param.required and ctx.v(name) is None:
            hint = "pass --tokenizer-dir" if name == "tokenizer_dir" else f"set {name}"
            yield Finding(name, f"required but unset; {hint}")


# ------------------------------------------------------------------------------------------- layout disaggregated
# Not in RULES: only the disaggregated layout has these keys (render/disaggregated.py and validate call it).
# Facts: triton-inference-server/tensorrtllm_backend v0.19.0 all_models/disaggregated_serving/README.md
# (participant_ids "1" and "2", world size = tp*pp of both models + 1 for the orchestrator).
_MODEL_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


def disaggregated_findings(
    world: int, values: Mapping[str, Any], *, generation_world: int | None = None
) -> list[Finding]:
    """A finding for every contradiction between the disaggregated layout's names and ids and an engine of
    ``world`` (tp x pp) ranks: model names that are empty, not a folder name, equal, or taken by another model
    of the layout; participant
    ids that are not one per engine rank in each ``;`` group, repeat within or across the phases, or use
    rank 0 (the orchestrator); GPU ids that are not one per rank. ``generation_world``: the generation engine's
    ranks when it is another engine (``--generation-engine-dir``). Used by render and by ``validate``.
    """
    out: list[Finding] = []
    ctx, gen = values.get("context_model_name"), values.get("generation_model_name")
    taken = {"preprocessing", "postprocessing", "ensemble", "disaggregated_serving_bls"}
    for key, name in (("context_model_name", ctx), ("generation_model_name", gen)):
        if not name:
            out.append(Finding(key, "must name the model (it is the folder name too)"))
        elif not _MODEL_NAME.match(str(name)):
            out.append(Finding(key, f"'{name}' is not a model folder name (letters, digits, '_', '.', '-')"))
        elif name in taken:
            out.append(Finding(key, f"'{name}' is the name of another model of the layout"))
    if ctx and ctx == gen:
        out.append(Finding("generation_model_name", f"'{gen}' is also context_model_name; the phases need two models"))
    seen: dict[int, str] = {}
    for phase in ("context", "generation"):
        for kind in ("participant_ids", "gpu_device_ids"):
            key = f"{phase}_{kind}"
            groups = values.get(key)
            if groups is None:
                continue
            ranks = generation_world if phase == "generation" and generation_world is not None else world
            for group in groups:
                if len(group) != ranks:
                    shown = ";".join(",".join(str(i) for i in g) for g in groups)
                    out.append(
                        Finding(
                            key, f"'{shown}' lists {len(group)} id(s) for an instance; the engine has {ranks} rank(s)"
                        )
                    )
                    break
                if len(set(group)) != len(group):
                    out.append(Finding(key, f"repeats an id in {group}"))
                    break
            if kind != "participant_ids":
                continue
            for rank in (r for g in groups for r in g):
                if rank == 0:
                    out.append(Finding(key, "rank 0 is the orchestrator (tritonserver); participants start at 1"))
                elif rank in seen and seen[rank] != key:
                    out.append(
                        Finding(key, f"rank {rank} is also in {seen[rank]}; every engine rank is one MPI process")
                    )
                seen.setdefault(rank, key)
    return out


# ------------------------------------------------------------------------------------------- the table
#: Every rule, in the order of the messages (run by :func:`check`). A new rule: a function in the module of
#: its topic and a line here.
RULES: list[Rule] = [
    streaming_flag,
    end_id,
    rank_files,
    engine_limits,
    instance_count,
    logits_dtype,
    device_groups,
    gpu_placement,
    inflight_batching,
    kv_cache_reuse,
    chunked_context,
    kv_cache_tokens,
    kv_cache_memory,
    attention_window,
    attention_window_layers,
    kv_cache_kind,
    streaming_beam,
    postprocessing_state,
    lookahead,
    speculative_engine,
    guided_decoding,
    lora,
    lora_adapters,
    lora_weights_dtype,
    bls_companions,
    vocabulary,
    backend,
    unset,
]


def rule(func: Rule) -> Rule:
    """Register ``func`` in :data:`RULES` (the order is the order of the messages)."""
    RULES.append(func)
    return func


def check(
    engine: EngineInfo,
    values: Mapping[str, Any],
    *,
    local_path: Callable[[str], Path] | None = None,
    tokenizer: TokenizerInfo | None = None,
    user: Mapping[str, Any] | None = None,
    streaming: bool | None = None,
    params: Mapping[str, Parameter] | None = None,
    skip: Collection[Rule] = (),
) -> list[Finding]:
    """Run every rule of :data:`RULES` but those in ``skip`` (render has run :func:`rank_files` before the engine
    copy starts); returns the findings (errors and warnings) in table order. The keywords are those of
    :class:`RuleContext`."""
    ctx = RuleContext(engine, values, local_path or Path, tokenizer, user, streaming, params)
    out: list[Finding] = []
    for func in RULES:
        if func not in skip:
            out.extend(func(ctx))
    return out


__all__ = [
    "BEAM_ONE_ONLY",
    "BLS_COMPANIONS",
    "BUILD",
    "Blame",
    "ENGINE_LIMITS",
    "EngineLimit",
    "Finding",
    "INFLIGHT",
    "KV_KEYS",
    "LARGEST_GPU_BYTES",
    "LOOKAHEAD_KEYS",
    "LORA_CONFIG_FILE",
    "LORA_KEYS",
    "LORA_MODULE_IDS",
    "LORA_WEIGHTS_FILE",
    "NO_FIX",
    "PAGED_KV_KEYS",
    "RULES",
    "Rule",
    "RuleContext",
    "SPECULATIVE_DECODING_MODES",
    "Severity",
    "TREE_KEYS",
    "XGRAMMAR_KEYS",
    "attention_window",
    "attention_window_layers",
    "backend",
    "bls_companions",
    "check",
    "chunked_context",
    "device_groups",
    "disaggregated_findings",
    "end_id",
    "engine_limits",
    "gpu_placement",
    "guided_decoding",
    "inflight_batching",
    "instance_count",
    "kv_cache_kind",
    "kv_cache_memory",
    "kv_cache_reuse",
    "kv_cache_tokens",
    "logits_dtype",
    "lookahead",
    "lookahead_draft_tokens",
    "lora",
    "lora_adapter_bytes",
    "lora_adapter_problems",
    "lora_adapters",
    "lora_weights_dtype",
    "placement_findings",
    "postprocessing_state",
    "rank_files",
    "rule",
    "speculative_engine",
    "streaming_beam",
    "streaming_flag",
    "tree_orphans",
    "tree_problems",
    "unset",
    "vocabulary",
]
