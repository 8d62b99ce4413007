"""The rule table: what an engine allows, and which parameter values contradict it or each other.

One table, two callers (``architecture.md``: "one rule table both call"):

* :func:`repo_builder.resolve.resolve` at render time, with the typed values it resolved;
* :func:`repo_builder.validate.check_against_engine` for ``repo-builder validate --engine-dir``, with the values
  read back from a repository's ``config.pbtxt`` files (rendered by repo-builder or by hand).

Each rule gets a :class:`RuleContext` (the :class:`~repo_builder.engine.EngineInfo` and ``{parameter name:
typed value or None}``) and yields :class:`Finding` objects naming the parameter at fault. The callers turn
them into their own form: resolve into ``"name: message"`` problems and warnings, validate into
``Problem(file, "config key: message", line)``. Facts behind the rules are cited per rule (TensorRT-LLM backend
``inflight_batcher_llm/src/model_instance_state.cc`` load errors, cases B06-B11 of the project's upstream
notes, TensorRT-LLM ``KVCacheManager`` block sizing).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from ..engine import EngineInfo, check_rank_files
from ..errors import EngineError
from ..profile.dtypes import triton_dtype

Severity = Literal["error", "warning"]
Blame = Literal["parameter", "engine", "tokenizer"]

#: Bytes of the largest GPU memory shipping today (NVIDIA B200/B300 class, 192 GB). The free-memory warning
#: only fires when not even a GPU this large would hold a full batch, so it is never wrong about a real GPU.
LARGEST_GPU_BYTES = 192 * 10**9

INFLIGHT = ("inflight_fused_batching", "inflight_batching")
BUILD = "trtllm-build"


@dataclass(frozen=True)
class Finding:
    """One contradiction: ``key`` is the parameter name at fault, ``message`` says why (without the key),
    ``blame`` which input has to change (the class of error resolve raises)."""

    key: str
    message: str
    severity: Severity = "error"
    blame: Blame = "parameter"


@dataclass
class RuleContext:
    """What a rule sees. ``local_path`` maps a path parameter's value to the path to look at on this machine
    (validate maps paths under the serve path into the repository)."""

    engine: EngineInfo
    values: Mapping[str, Any]
    local_path: Callable[[str], Path] = field(default=Path)

    def v(self, name: str) -> Any:
        return self.values.get(name)

    @property
    def beam(self) -> int:
        beam = self.v("max_beam_width")
        return beam if isinstance(beam, int) and beam > 0 else self.engine.max_beam_width

    @property
    def is_trt(self) -> bool:
        return self.engine.kind == "trtllm"


Rule = Callable[[RuleContext], Iterator[Finding]]
RULES: list[Rule] = []


def rule(func: Rule) -> Rule:
    """Register ``func`` in :data:`RULES` (the order is the order of the messages)."""
    RULES.append(func)
    return func


def check(
    engine: EngineInfo, values: Mapping[str, Any], *, local_path: Callable[[str], Path] | None = None
) -> list[Finding]:
    """Run every rule of :data:`RULES`; returns the findings (errors and warnings) in table order."""
    ctx = RuleContext(engine, values, local_path or Path)
    out: list[Finding] = []
    for func in RULES:
        out.extend(func(ctx))
    return out


def _blocks_tokens(ctx: RuleContext) -> tuple[int, int, int]:
    """(tokens per block, blocks one beam of a full sequence takes, tokens one full request takes)."""
    tpb = ctx.engine.tokens_per_block or 1
    blocks = math.ceil(ctx.engine.max_seq_len / tpb)
    return tpb, blocks, blocks * tpb * ctx.beam


def _batch(ctx: RuleContext) -> int:
    tmbs = ctx.v("triton_max_batch_size")
    return min(tmbs, ctx.engine.max_batch_size) if isinstance(tmbs, int) and tmbs > 0 else ctx.engine.max_batch_size


# ------------------------------------------------------------------------------------------- engine shape
@rule
def rank_files(ctx: RuleContext) -> Iterator[Finding]:
    """B11: rank0.engine .. rank{tp x pp - 1}.engine must all be there."""
    try:
        check_rank_files(ctx.engine)
    except EngineError as exc:
        yield Finding("engine_dir", exc.message, blame="engine")


@dataclass(frozen=True)
class EngineLimit:
    """A row of :data:`ENGINE_LIMITS`: parameter ``key`` may not exceed the engine's ``field``.

    ``message`` is formatted with ``value`` (the parameter's), ``limit`` (the engine's) and ``build``
    (``trtllm-build``); ``severity`` and ``blame`` go to the :class:`Finding`.
    """

    key: str
    field: str
    message: str
    severity: Severity = "error"
    blame: Blame = "parameter"


#: Parameters bounded by an engine build setting (B08: a larger Triton batch still runs at most the engine's
#: batch at once, a warning; B07: the backend refuses to load with a beam width above the engine's).
ENGINE_LIMITS = (
    EngineLimit(
        "triton_max_batch_size",
        "max_batch_size",
        "{value} is above the engine's max_batch_size {limit}: the engine runs at most {limit} requests at once; "
        "a larger batch needs `{build} --max_batch_size` (B08)",
        severity="warning",
    ),
    EngineLimit(
        "max_beam_width",
        "max_beam_width",
        "{value} is above the engine's max_beam_width {limit} (rebuild with `{build} --max_beam_width {value}`) (B07)",
        blame="engine",
    ),
)


@rule
def engine_limits(ctx: RuleContext) -> Iterator[Finding]:
    """B07, B08: every row of :data:`ENGINE_LIMITS`."""
    for row in ENGINE_LIMITS:
        value, limit = ctx.v(row.key), getattr(ctx.engine, row.field)
        if isinstance(value, int) and value > limit:
            text = row.message.format(value=value, limit=limit, build=BUILD)
            yield Finding(row.key, text, severity=row.severity, blame=row.blame)


@rule
def instance_count(ctx: RuleContext) -> Iterator[Finding]:
    """B10: one tensorrt_llm instance drives every GPU of the engine."""
    count = ctx.v("tensorrt_llm_instance_count")
    if isinstance(count, int) and count != 1:
        yield Finding(
            "tensorrt_llm_instance_count",
            f"{count} instances of tensorrt_llm are not supported (one "
            'instance drives all GPUs of the engine); for replicas set gpu_device_ids (e.g. "0,1;2,3") '
            "and participant_ids, or render one repository per replica (B10)",
        )


@rule
def logits_dtype(ctx: RuleContext) -> Iterator[Finding]:
    """B09: logits outputs must have the engine's logits dtype or they are misread."""
    want = triton_dtype(ctx.engine.logits_dtype)
    have = ctx.v("logits_datatype")
    if want is not None and have is not None and have != want:
        yield Finding(
            "logits_datatype",
            f"{have} contradicts the engine's logits dtype {ctx.engine.logits_dtype} "
            f"({want}); logits would be misread (B09) - drop the key to take it from the engine",
            blame="engine",
        )


@rule
def device_groups(ctx: RuleContext) -> Iterator[Finding]:
    """The world size in gpu_device_ids / participant_ids: each ``;``-separated group lists the devices (or MPI
    ranks) of one tensorrt_llm instance, one per rank of the engine (tensorrtllm_backend v0.19.0 docs, data
    parallelism: ``gpu_device_ids "0,1;2,3"`` with ``participant_ids "1,2;3,4"`` for a tp-2 engine). A group with
    fewer ids than the engine's tp x pp ranks leaves ranks without a device of their own (a warning: extra ids
    are unused, fewer are a fill made for another engine)."""
    if not ctx.is_trt:
        return
    world = ctx.engine.world_size
    for key in ("gpu_device_ids", "participant_ids"):
        groups = ctx.v(key)
        if not isinstance(groups, list):
            continue
        short = [g for g in groups if isinstance(g, list) and len(g) < world]
        if short:
            shown = ";".join(",".join(str(i) for i in g) for g in groups)
            yield Finding(
                key,
                f"{shown!r} lists {len(short[0])} id(s) for an instance, but the engine's world size is {world} "
                f"(tp {ctx.engine.tp_size} x pp {ctx.engine.pp_size}): each `;`-separated group needs one id per "
                "rank; was the repository filled for another engine?",
                severity="warning",
                blame="engine",
            )


# ------------------------------------------------------------------------------------------- batching
@rule
def inflight_batching(ctx: RuleContext) -> Iterator[Finding]:
    """In-flight batching needs a paged KV cache, packed inputs and the GPT attention plugin."""
    strategy = ctx.v("batching_strategy")
    if not ctx.is_trt or strategy not in INFLIGHT:
        return
    e = ctx.engine
    missing = [
        what
        for what, ok in (
            (f"a paged KV cache (`{BUILD} --kv_cache_type paged`)", e.paged_kv_cache),
            (f"packed inputs (`{BUILD} --remove_input_padding enable`)", e.remove_input_padding),
            (f"the GPT attention plugin (`{BUILD} --gpt_attention_plugin auto`)", e.gpt_attention_plugin is not None),
        )
        if not ok
    ]
    if missing:
        yield Finding(
            "batching_strategy",
            f"in-flight batching ({strategy}) needs {', '.join(missing)}; rebuild the "
            "engine or set batching_strategy=V1",
            blame="engine",
        )


@rule
def kv_cache_reuse(ctx: RuleContext) -> Iterator[Finding]:
    """B06: block reuse needs paged context FMHA and beam width 1 (the backend fails to load otherwise)."""
    if not ctx.is_trt or not ctx.v("enable_kv_cache_reuse"):
        return
    why = []
    if not ctx.engine.use_paged_context_fmha:
        why.append(
            f"the engine was built without paged context FMHA (rebuild with `{BUILD} --use_paged_context_fmha enable`)"
        )
    if ctx.beam > 1:
        why.append(f"block reuse is not supported with beam width > 1 (max_beam_width is {ctx.beam})")
    if why:
        yield Finding("enable_kv_cache_reuse", "cannot be true: " + "; ".join(why) + " (B06)", blame="engine")


@rule
def chunked_context(ctx: RuleContext) -> Iterator[Finding]:
    """Chunked context needs paged context FMHA; without it, prompts above max_num_tokens fail."""
    if not ctx.is_trt:
        return
    e = ctx.engine
    if ctx.v("enable_chunked_context") and not e.use_paged_context_fmha:
        yield Finding(
            "enable_chunked_context",
            f"needs an engine built with `{BUILD} --use_paged_context_fmha enable`",
            blame="engine",
        )
    elif not ctx.v("enable_chunked_context") and e.max_num_tokens is not None and e.max_num_tokens < e.max_input_len:
        yield Finding(
            "enable_chunked_context",
            f"off, but the engine's max_num_tokens {e.max_num_tokens} is below its "
            f"max_input_len {e.max_input_len}: prompts longer than {e.max_num_tokens} tokens will fail; "
            "set enable_chunked_context=true (needs paged context FMHA) or rebuild with a larger "
            "--max_num_tokens",
            severity="warning",
        )


# ------------------------------------------------------------------------------------------- KV cache and lengths
@rule
def kv_cache_tokens(ctx: RuleContext) -> Iterator[Finding]:
    """The paged KV cache is allocated in blocks of tokens_per_block tokens, per beam (TensorRT-LLM
    KVCacheManager): one request needs ceil(max_seq_len / tokens_per_block) blocks x beam width."""
    cap = ctx.v("max_tokens_in_paged_kv_cache")
    if not isinstance(cap, int):
        return
    tpb, blocks, need = _blocks_tokens(ctx)
    how = (
        (
            f"max_seq_len {ctx.engine.max_seq_len} in blocks of {tpb} tokens = {blocks} blocks = {blocks * tpb} "
            f"tokens, x max_beam_width {ctx.beam}"
        )
        if tpb > 1
        else f"max_seq_len {ctx.engine.max_seq_len} x max_beam_width {ctx.beam}"
    )
    if cap < need:
        yield Finding(
            "max_tokens_in_paged_kv_cache",
            f"{cap} tokens cannot hold one full sequence ({how} = {need} tokens); the minimum that works is {need}",
        )
        return
    batch = _batch(ctx)
    if cap < need * batch:
        yield Finding(
            "max_tokens_in_paged_kv_cache",
            f"{cap} tokens hold {cap // need} full sequence(s) ({how} = "
            f"{need} tokens each), fewer than the batch size {batch}: requests will wait for KV-cache "
            f"blocks; {need * batch} tokens hold a full batch",
            severity="warning",
        )


@rule
def kv_cache_memory(ctx: RuleContext) -> Iterator[Finding]:
    """A free-memory fraction so small that not even the largest GPU would hold a full batch."""
    fraction = ctx.v("kv_cache_free_gpu_mem_fraction")
    per_token = ctx.engine.kv_bytes_per_token()
    if not ctx.is_trt or not isinstance(fraction, (int, float)) or per_token is None:
        return
    _, _, need = _blocks_tokens(ctx)
    batch = _batch(ctx)
    full = need * batch * per_token
    room = fraction * LARGEST_GPU_BYTES
    if room < full:
        fits = int(room // (need * per_token))
        minimum = full / LARGEST_GPU_BYTES
        yield Finding(
            "kv_cache_free_gpu_mem_fraction",
            f"{fraction} of the free GPU memory leaves room for at most "
            f"{fits} full sequence(s) even on a {LARGEST_GPU_BYTES // 10**9} GB GPU ({need} tokens x "
            f"{per_token} bytes per token per GPU each), fewer than the batch size {batch}; a full batch "
            f"needs {full / 2**30:.2f} GiB, a fraction of at least {minimum:.4g} on such a GPU",
            severity="warning",
        )


@rule
def attention_window(ctx: RuleContext) -> Iterator[Finding]:
    """Sliding window vs sink tokens vs max_seq_len."""
    window = ctx.v("max_attention_window_size")
    sink = ctx.v("sink_token_length")
    windows = [w for w in (window or []) if isinstance(w, int)]
    if windows and max(windows) > ctx.engine.max_seq_len:
        yield Finding(
            "max_attention_window_size",
            f"{max(windows)} is above the engine's max_seq_len {ctx.engine.max_seq_len}; the backend caps it there",
            severity="warning",
        )
    if isinstance(sink, int) and sink > 0:
        limit = min(windows) if windows else ctx.engine.max_seq_len
        if sink >= limit:
            what = "max_attention_window_size" if windows else "the engine's max_seq_len"
            yield Finding(
                "sink_token_length",
                f"{sink} sink tokens leave no room in the attention window ({what} {limit}); use fewer than {limit}",
            )


# ------------------------------------------------------------------------------------------- streaming
#: Settings that work with beam width 1 only (B30: TRT-LLM streams only with beam width 1; accumulation too):
#: (parameter, message formatted with ``beam``); warnings, since a request may still ask for beam width 1.
BEAM_ONE_ONLY = (
    (
        "decoupled_mode",
        "streaming with max_beam_width {beam}: streaming requests must use beam_width 1 (beam search is only "
        "returned whole) (B30)",
    ),
    ("accumulate_tokens", "with max_beam_width {beam}: accumulation works with beam_width 1 only (B30)"),
)


@rule
def streaming_beam(ctx: RuleContext) -> Iterator[Finding]:
    """B30: every row of :data:`BEAM_ONE_ONLY` that is on while max_beam_width > 1."""
    for key, message in BEAM_ONE_ONLY:
        if ctx.v(key) and ctx.beam > 1:
            yield Finding(key, message.format(beam=ctx.beam), severity="warning")


@rule
def postprocessing_state(ctx: RuleContext) -> Iterator[Finding]:
    """The per-request incremental detokenizer lives in one postprocessing process."""
    post = ctx.v("postprocessing_instance_count")
    if ctx.v("decoupled_mode") and isinstance(post, int) and post > 1:
        yield Finding(
            "postprocessing_instance_count",
            f"{post} with streaming: the per-request incremental detokenizer state lives in one process; use 1",
        )


# ------------------------------------------------------------------------------------------- decoding features
@rule
def lookahead(ctx: RuleContext) -> Iterator[Finding]:
    """The backend fails to load lookahead decoding without its three sizes."""
    if ctx.v("decoding_mode") == "lookahead":
        missing = [
            k
            for k in ("lookahead_window_size", "lookahead_ngram_size", "lookahead_verification_set_size")
            if ctx.v(k) is None
        ]
        if missing:
            yield Finding(
                "decoding_mode", f"lookahead needs {', '.join(missing)} (the backend fails to load without them)"
            )


#: Keys of the xgrammar tokenizer-info JSON the C++ backend reads (tensorrtllm_backend docs/guided_decoding.md,
#: v0.19.0: written by its tools/generate_xgrammar_tokenizer_info.py).
XGRAMMAR_KEYS = ("encoded_vocab", "tokenizer_str", "stop_token_ids")


@rule
def guided_decoding(ctx: RuleContext) -> Iterator[Finding]:
    """guided_decoding_backend=xgrammar needs xgrammar_tokenizer_info_path, a JSON file with the vocabulary."""
    if ctx.v("guided_decoding_backend") != "xgrammar" or not ctx.is_trt:
        return
    path = ctx.v("xgrammar_tokenizer_info_path")
    if not path:
        yield Finding(
            "xgrammar_tokenizer_info_path",
            "unset, but guided_decoding_backend is xgrammar: the backend "
            f"needs the tokenizer-info JSON ({', '.join(XGRAMMAR_KEYS)}); generate it with "
            "tensorrtllm_backend's tools/generate_xgrammar_tokenizer_info.py and set this path",
        )
        return
    local = ctx.local_path(str(path))
    if not local.is_file():
        yield Finding(
            "xgrammar_tokenizer_info_path",
            f"'{path}' is not a file (guided decoding with xgrammar reads the tokenizer info from it)",
        )
        return
    try:
        data = json.loads(local.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        yield Finding("xgrammar_tokenizer_info_path", f"'{path}' is not readable JSON: {exc}")
        return
    missing = [k for k in XGRAMMAR_KEYS if not isinstance(data, dict) or k not in data]
    if missing:
        yield Finding(
            "xgrammar_tokenizer_info_path",
            f"'{path}' lacks {', '.join(missing)} (expected the output of generate_xgrammar_tokenizer_info.py)",
        )


LORA_KEYS = (
    "lora_cache_optimal_adapter_size",
    "lora_cache_max_adapter_size",
    "lora_cache_gpu_memory_fraction",
    "lora_cache_host_memory_bytes",
    "lora_prefetch_dir",
)


def lora_adapter_bytes(engine: EngineInfo) -> int | None:
    """Bytes of one LoRA adapter at the engine's max_lora_rank: per layer and target module, A (rank x hidden)
    and B (hidden x rank) in the model dtype; None when a fact is missing."""
    rank, hidden, layers = engine.max_lora_rank, engine.hidden_size, engine.num_layers
    size = engine.kv_cache_bytes_per_value
    if not rank or not hidden or not layers or not size:
        return None
    modules = max(1, len(engine.lora_target_modules))
    return 2 * rank * hidden * modules * layers * size


@rule
def lora(ctx: RuleContext) -> Iterator[Finding]:
    """LoRA cache settings against the engine's LoRA build (plugin, max rank)."""
    if not ctx.is_trt:
        return
    given = [k for k in LORA_KEYS if ctx.v(k) is not None]
    if not given:
        return
    if ctx.engine.lora_plugin is None:
        yield Finding(
            given[0],
            f"the engine was built without the LoRA plugin, so {', '.join(given)} have no effect "
            f"(rebuild with `{BUILD} --lora_plugin auto --lora_dir ...`, or drop them)",
            severity="warning",
        )
    opt, mx = ctx.v("lora_cache_optimal_adapter_size"), ctx.v("lora_cache_max_adapter_size")
    if isinstance(opt, int) and isinstance(mx, int) and opt > mx:
        yield Finding("lora_cache_optimal_adapter_size", f"{opt} is above lora_cache_max_adapter_size {mx}")
    host = ctx.v("lora_cache_host_memory_bytes")
    one = lora_adapter_bytes(ctx.engine)
    if isinstance(host, int) and host > 0:
        if one is not None and host < one:
            yield Finding(
                "lora_cache_host_memory_bytes",
                f"{host} bytes cannot hold one adapter at the engine's "
                f"max_lora_rank {ctx.engine.max_lora_rank} ({one} bytes); the minimum that works is {one}",
            )
        elif one is None and host < 1 << 20:
            yield Finding(
                "lora_cache_host_memory_bytes",
                f"{host} bytes is too small for any LoRA adapter (use at least 1 MiB; the upstream docs suggest 1 GB)",
            )
    prefetch = ctx.v("lora_prefetch_dir")
    if prefetch:
        local = ctx.local_path(str(prefetch))
        if not local.is_dir():
            yield Finding(
                "lora_prefetch_dir",
                f"'{prefetch}' is not an existing directory (the executor silently "
                "skips a missing one, so no adapter would be preloaded)",
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


@rule
def bls_companions(ctx: RuleContext) -> Iterator[Finding]:
    """Draft-model speculative decoding and multimodal encoders through the BLS are not implemented."""
    for key, message in BLS_COMPANIONS:
        value = ctx.v(key)
        if value:
            yield Finding(key, message.format(value=value))


# ------------------------------------------------------------------------------------------- layout disaggregated
# Not in RULES: only the disaggregated layout has these keys (render/disaggregated.py and validate call it).
# Facts: triton-inference-server/tensorrtllm_backend v0.19.0 all_models/disaggregated_serving/README.md
# (participant_ids "1" and "2", world size = tp*pp of both models + 1 for the orchestrator).
_MODEL_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


def disaggregated_findings(world: int, values: Mapping[str, Any]) -> list[Finding]:
    """A finding for every contradiction between the disaggregated layout's names and ids and an engine of
    ``world`` (tp x pp) ranks: model names that are empty, not a folder name, equal, or taken by another model
    of the layout; participant
    ids that are not one per engine rank in each ``;`` group, repeat within or across the phases, or use
    rank 0 (the orchestrator); GPU ids that are not one per rank. Used by render and by ``validate``.
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
            for group in groups:
                if len(group) != world:
                    shown = ";".join(",".join(str(i) for i in g) for g in groups)
                    out.append(
                        Finding(
                            key, f"'{shown}' lists {len(group)} id(s) for an instance; the engine has {world} rank(s)"
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
