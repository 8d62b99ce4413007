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
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from ..engine import EngineInfo, check_rank_files
from ..errors import EngineError
from ..profile.dtypes import triton_dtype
from ..profile.schema import Parameter
from ..tokenizer import TokenizerInfo

Severity = Literal["error", "warning"]
Blame = Literal["parameter", "engine", "tokenizer"]

#: Bytes of the largest GPU memory shipping today (NVIDIA B200/B300 class, 192 GB). The free-memory warning
#: only fires when not even a GPU this large would hold a full batch, so it is never wrong about a real GPU.
LARGEST_GPU_BYTES = 192 * 10**9

INFLIGHT = ("inflight_fused_batching", "inflight_batching")
BUILD = "trtllm-build"


#: Marks a :class:`Finding` without a fix.
NO_FIX: Any = object()


@dataclass(frozen=True)
class Finding:
    """One contradiction: ``key`` is the parameter name at fault, ``message`` says why (without the key),
    ``blame`` which input has to change (the class of error resolve raises).

    ``fix`` (a warning only): the value resolve gives ``key`` instead of a default that contradicts the engine
    (the user did not set it); its warning reads ``"<key> <message>"``.
    """

    key: str
    message: str
    severity: Severity = "error"
    blame: Blame = "parameter"
    fix: Any = NO_FIX

    @property
    def has_fix(self) -> bool:
        return self.fix is not NO_FIX


@dataclass
class RuleContext:
    """What a rule sees.

    Attributes:
        engine: the engine the values are for.
        values: {parameter name: typed value or None}.
        local_path: maps a path parameter's value to the path to look at on this machine (validate maps paths
            under the serve path into the repository).
        tokenizer: the tokenizer (None: unknown, its rules are skipped).
        user: {parameter name: typed value} the user set (``--set`` / ``--values``); None: every value is
            someone's choice (validate reads a filled repository).
        streaming: ``--streaming`` / ``--no-streaming`` (None: not given).
        params: the profile's parameters (None: the unset-value rule is skipped; validate finds unset values as
            unfilled placeholders and parse errors).
    """

    engine: EngineInfo
    values: Mapping[str, Any]
    local_path: Callable[[str], Path] = field(default=Path)
    tokenizer: TokenizerInfo | None = None
    user: Mapping[str, Any] | None = None
    streaming: bool | None = None
    params: Mapping[str, Parameter] | None = None

    def v(self, name: str) -> Any:
        return self.values.get(name)

    def by_user(self, name: str) -> bool:
        """Whether ``name``'s value is the user's choice (always, when the context has no user values)."""
        return self.user is None or name in self.user

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


def _windows(ctx: RuleContext) -> list[int]:
    """The attention windows given (max_attention_window_size, tokens; one value or one per layer)."""
    window = ctx.v("max_attention_window_size")
    return [w for w in (window if isinstance(window, list) else []) if isinstance(w, int) and w > 0]


def _kv_span(ctx: RuleContext) -> tuple[int, int, int]:
    """(window the cache is sized for, sink bubble, extra tokens), in tokens of one beam.

    TensorRT-LLM's BlockManager (``cpp/tensorrt_llm/batch_manager/kvCacheManager.cpp``) keeps per layer at most
    its attention window (capped at max_seq_len, the default), plus the sink bubble (sink_token_length rounded
    up to a whole block) plus one more block when beam search runs with a window below max_seq_len (the cyclic
    cache's spare block). The widest window sizes a sequence's blocks.
    """
    seq = ctx.engine.max_seq_len
    tpb = ctx.engine.tokens_per_block or 1
    windows = _windows(ctx)
    window = min(max(windows), seq) if windows else seq
    sink = ctx.v("sink_token_length")
    bubble = (-sink) % tpb if isinstance(sink, int) and sink > 0 else 0
    extra = tpb if window < seq and ctx.beam > 1 else 0
    return window, bubble, extra


def _blocks_tokens(ctx: RuleContext) -> tuple[int, int, int]:
    """(tokens per block, blocks one beam of a full sequence takes, tokens one full request takes); a sequence
    needs its widest attention window (:func:`_kv_span`), not max_seq_len, when the window is smaller."""
    tpb = ctx.engine.tokens_per_block or 1
    blocks = math.ceil(sum(_kv_span(ctx)) / tpb)
    return tpb, blocks, blocks * tpb * ctx.beam


def _span_text(ctx: RuleContext) -> str:
    """How a full sequence's tokens are counted, for messages: ``max_seq_len 2048`` or
    ``max_attention_window_size 512 (below max_seq_len 2048)`` plus sink bubble and spare block."""
    window, bubble, extra = _kv_span(ctx)
    seq = ctx.engine.max_seq_len
    text = f"max_attention_window_size {window} (below max_seq_len {seq})" if window < seq else f"max_seq_len {seq}"
    if bubble:
        text += f" + {bubble} tokens of sink bubble"
    if extra:
        text += f" + {extra} tokens of the spare block beam search keeps with a window"
    return text


def _batch_text(ctx: RuleContext) -> str:
    """``the batch size 8``, or with pipeline parallelism ``the 16 sequences the engine runs at once (batch
    size 8 x pp 2)``."""
    pp = max(ctx.engine.pp_size, 1)
    if pp == 1:
        return f"the batch size {_batch(ctx)}"
    return f"the {_sequences(ctx)} sequences the engine runs at once (batch size {_batch(ctx)} x pp {pp})"


def _sequences(ctx: RuleContext) -> int:
    """Sequences the engine runs at once: the batch (Triton's, capped at the engine's) x pp, since TensorRT-LLM
    keeps pp micro-batches in flight (``TrtGptModelInflightBatching``: maxNumSequences = maxBatchSize x pp)."""
    return _batch(ctx) * max(ctx.engine.pp_size, 1)


def _batch(ctx: RuleContext) -> int:
    tmbs = ctx.v("triton_max_batch_size")
    return min(tmbs, ctx.engine.max_batch_size) if isinstance(tmbs, int) and tmbs > 0 else ctx.engine.max_batch_size


# ------------------------------------------------------------------------------------------- user and tokenizer
@rule
def streaming_flag(ctx: RuleContext) -> Iterator[Finding]:
    """``--streaming`` / ``--no-streaming`` and a user's decoupled_mode that says the opposite (B29)."""
    if ctx.streaming is None or ctx.user is None or "decoupled_mode" not in ctx.values:
        return
    given = ctx.user.get("decoupled_mode")
    if "decoupled_mode" in ctx.user and given is not bool(ctx.streaming):
        yield Finding(
            "decoupled_mode",
            f"{given} contradicts --{'streaming' if ctx.streaming else 'no-streaming'}; give only one of them",
        )


@rule
def end_id(ctx: RuleContext) -> Iterator[Finding]:
    """B20: a tokenizer whose files name no end id, and no end_id set: generation would never stop."""
    tok = ctx.tokenizer
    if tok is not None and tok.end_id is None and ctx.v("end_id") is None and "end_id" in ctx.values:
        yield Finding("end_id", f"{tok.special_ids_error or 'no end id found'} (B20)", blame="tokenizer")


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
    (``trtllm-build``); ``severity`` and ``blame`` go to the :class:`Finding`. ``only_by_user``: the row
    checks a user's choice only (:meth:`RuleContext.by_user`; trtllm-0.5's 128 is v0.5.0's own fixed value).
    """

    key: str
    field: str
    message: str
    severity: Severity = "error"
    blame: Blame = "parameter"
    only_by_user: bool = False


#: Parameters bounded by an engine build setting (B08: a larger Triton batch still runs at most the engine's
#: batch at once, a warning; B07: the backend refuses to load with a beam width above the engine's).
ENGINE_LIMITS = (
    EngineLimit(
        "triton_max_batch_size",
        "max_batch_size",
        "{value} is above the engine's max_batch_size {limit}: the engine runs at most {limit} requests at once; "
        "a larger batch needs `{build} --max_batch_size` (B08)",
        severity="warning",
        only_by_user=True,
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
        if row.only_by_user and not ctx.by_user(row.key):
            continue
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


def _groups_text(groups: list[list[int]]) -> str:
    return ";".join(",".join(str(i) for i in g) for g in groups)


def placement_findings(values: Mapping[str, Any], world_size: int, *, world_source: str) -> list[Finding]:
    """gpu_device_ids, participant_ids and the tensorrt_llm instance_group against each other and against the
    engine's world size (``world_source`` says where it came from: the engine's tp x pp, or the lock file).

    Facts (tensorrtllm_backend v0.19.0 docs/model_config.md, TensorRT-LLM ``WorldConfig``): each ``;``-separated
    group of gpu_device_ids is one tensorrt_llm instance, one id per rank (rank r of the instance runs on the
    group's r-th id); participant_ids lists the MPI ranks of each instance the same way; Triton creates one
    instance per GPU listed in a KIND_GPU ``instance_group`` (times its count), while the C++ backend places its
    ranks itself (NVIDIA's templates use KIND_CPU). Short groups are the ``device_groups`` rule's.
    """
    out: list[Finding] = []
    gpus = values.get("gpu_device_ids")
    parts = values.get("participant_ids")
    gpus = [g for g in gpus if isinstance(g, list)] if isinstance(gpus, list) else None
    parts = [g for g in parts if isinstance(g, list)] if isinstance(parts, list) else None
    for key, groups in (("gpu_device_ids", gpus), ("participant_ids", parts)):
        if not groups:
            continue
        shown = _groups_text(groups)
        what = "GPU" if key == "gpu_device_ids" else "MPI rank"
        for n, group in enumerate(groups):
            dup = sorted({i for i in group if group.count(i) > 1})
            if dup:
                out.append(
                    Finding(
                        key,
                        f"{shown!r}: instance {n} lists {what} {', '.join(map(str, dup))} twice: each rank of an "
                        f"instance needs its own {what}",
                    )
                )
            if len(group) > world_size:
                out.append(
                    Finding(
                        key,
                        f"{shown!r}: instance {n} lists {len(group)} ids, but the engine's world size is {world_size} "
                        f"({world_source}): ids {','.join(map(str, group[world_size:]))} are never used",
                        severity="warning",
                        blame="engine",
                    )
                )
        seen: dict[int, int] = {}
        for n, group in enumerate(groups):
            for i in group:
                if seen.setdefault(i, n) != n:
                    out.append(
                        Finding(
                            key,
                            f"{shown!r}: {what} {i} is in instance {seen[i]} and instance {n}; instances must not "
                            f"share a {what}",
                            severity="warning" if key == "gpu_device_ids" else "error",
                        )
                    )
                    break
            else:
                continue
            break
    if gpus and parts:
        if len(gpus) != len(parts):
            out.append(
                Finding(
                    "participant_ids",
                    f"{_groups_text(parts)!r} has {len(parts)} instance group(s), gpu_device_ids "
                    f"{_groups_text(gpus)!r} has {len(gpus)}: one participant group per device group",
                )
            )
        else:
            for n, (g, q) in enumerate(zip(gpus, parts, strict=True)):
                if len(g) != len(q):
                    out.append(
                        Finding(
                            "participant_ids",
                            f"instance {n}: {len(q)} MPI rank(s) ({','.join(map(str, q))}) for {len(g)} GPU(s) "
                            f"({','.join(map(str, g))}) in gpu_device_ids: one rank per GPU",
                        )
                    )
    kind = values.get("tensorrt_llm_instance_kind")
    listed = values.get("tensorrt_llm_instance_gpus")
    if kind == "KIND_GPU":
        listed_text = f"gpus [{', '.join(map(str, listed))}]" if listed else "no gpus (one instance per visible GPU)"
        if gpus and listed and list(listed) != gpus[0][: len(listed)]:
            out.append(
                Finding(
                    "tensorrt_llm_instance_kind",
                    f"KIND_GPU with {listed_text} disagrees with gpu_device_ids {_groups_text(gpus)!r}, which "
                    "places the ranks; use KIND_CPU and let gpu_device_ids say where they run",
                )
            )
        else:
            out.append(
                Finding(
                    "tensorrt_llm_instance_kind",
                    f"KIND_GPU with {listed_text}: Triton creates one tensorrt_llm instance per listed GPU, while "
                    f"the C++ backend places its {world_size} rank(s) itself (gpu_device_ids, default the visible "
                    "GPUs in order); NVIDIA's templates and repo-builder use KIND_CPU",
                    severity="warning",
                )
            )
    return out


@rule
def gpu_placement(ctx: RuleContext) -> Iterator[Finding]:
    """:func:`placement_findings` with the engine's world size (tp x pp)."""
    if not ctx.is_trt:
        return
    e = ctx.engine
    yield from placement_findings(ctx.values, e.world_size, world_source=f"tp {e.tp_size} x pp {e.pp_size}")


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
    """B06: block reuse needs paged context FMHA and beam width 1 (the backend fails to load otherwise). A user's
    true is refused; the default true (TRT-LLM >= 0.19) is fixed to false with a warning."""
    if not ctx.is_trt or not ctx.v("enable_kv_cache_reuse"):
        return
    why = []
    if not ctx.engine.use_paged_context_fmha:
        why.append(
            f"the engine was built without paged context FMHA (rebuild with `{BUILD} --use_paged_context_fmha enable`)"
        )
    if ctx.beam > 1:
        why.append(f"block reuse is not supported with beam width > 1 (max_beam_width is {ctx.beam})")
    if not why:
        return
    if ctx.by_user("enable_kv_cache_reuse"):
        yield Finding("enable_kv_cache_reuse", "cannot be true: " + "; ".join(why) + " (B06)", blame="engine")
    else:
        yield Finding(
            "enable_kv_cache_reuse",
            "set to false (the TRT-LLM >= 0.19 default is true): " + "; ".join(why),
            severity="warning",
            blame="engine",
            fix=False,
        )


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
    if not isinstance(cap, int) or ctx.engine.kv_cache_type not in (None, "paged"):
        return  # no paged cache: kv_cache_kind says what the setting does
    tpb, blocks, need = _blocks_tokens(ctx)
    span = _span_text(ctx)
    how = (
        f"{span} in blocks of {tpb} tokens = {blocks} blocks = {blocks * tpb} tokens, x max_beam_width {ctx.beam}"
        if tpb > 1
        else f"{span} x max_beam_width {ctx.beam}"
    )
    if cap < need:
        yield Finding(
            "max_tokens_in_paged_kv_cache",
            f"{cap} tokens cannot hold one full sequence ({how} = {need} tokens); the minimum that works is {need}",
        )
        return
    batch = _sequences(ctx)
    if cap < need * batch:
        yield Finding(
            "max_tokens_in_paged_kv_cache",
            f"{cap} tokens hold {cap // need} full sequence(s) ({how} = "
            f"{need} tokens each), fewer than {_batch_text(ctx)}: at most {cap // need} request(s) run at once "
            f"and the others wait for KV-cache blocks; {need * batch} tokens hold a full batch",
            severity="warning",
        )


@rule
def kv_cache_memory(ctx: RuleContext) -> Iterator[Finding]:
    """A free-memory fraction so small that not even the largest GPU would hold a full batch."""
    fraction = ctx.v("kv_cache_free_gpu_mem_fraction")
    per_token = ctx.engine.kv_bytes_per_token()
    if not ctx.is_trt or not isinstance(fraction, (int, float)) or per_token is None:
        return
    if ctx.engine.kv_cache_type not in (None, "paged"):
        return  # no paged cache: kv_cache_kind says what the setting does
    _, _, need = _blocks_tokens(ctx)
    batch = _sequences(ctx)
    full = need * batch * per_token
    room = fraction * LARGEST_GPU_BYTES
    if room < full:
        fits = int(room // (need * per_token))
        minimum = full / LARGEST_GPU_BYTES
        yield Finding(
            "kv_cache_free_gpu_mem_fraction",
            f"{fraction} of the free GPU memory leaves room for at most "
            f"{fits} full sequence(s) even on a {LARGEST_GPU_BYTES // 10**9} GB GPU ({need} tokens x "
            f"{per_token} bytes per token per GPU each), fewer than {_batch_text(ctx)}; a full batch "
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


@rule
def attention_window_layers(ctx: RuleContext) -> Iterator[Finding]:
    """max_attention_window_size as a per-layer list against the engine's layers: TensorRT-LLM gives layer i the
    value at i mod N (it cycles a shorter list: ``BaseKVCacheManager::groupLayersByWindowSize``, TensorRT-LLM
    ``cpp/tensorrt_llm/batch_manager/kvCacheManager.cpp``), so a list longer than the layer count has values no
    layer uses, and one whose length does not divide it cuts its last cycle short. Values above max_seq_len
    are the ``attention_window`` rule's."""
    windows = _windows(ctx)
    layers = ctx.engine.num_layers
    if not ctx.is_trt or len(windows) < 2 or not layers:
        return
    n = len(windows)
    if n > layers:
        yield Finding(
            "max_attention_window_size",
            f"{n} values for an engine with {layers} layers: layer i takes value i, so values {layers + 1} to {n} "
            f"({','.join(str(w) for w in windows[layers:])}) are never used; was the list written for another "
            "model?",
            severity="warning",
            blame="engine",
        )
    elif layers % n:
        cut = layers % n
        yield Finding(
            "max_attention_window_size",
            f"{n} values for an engine with {layers} layers: the list repeats every {n} layers (layer i takes "
            f"value i mod {n}) and {layers} is not a multiple of {n}, so the last repeat stops after its first "
            f"{cut} value(s) ({','.join(str(w) for w in windows[:cut])}); give {layers} values or a list whose "
            f"length divides {layers}",
            severity="warning",
            blame="engine",
        )


#: Settings of the paged KV cache, which an engine with a continuous KV cache or none never reads.
PAGED_KV_KEYS = ("max_tokens_in_paged_kv_cache", "kv_cache_host_memory_bytes")
#: Settings of any KV cache (no effect on an engine without one).
KV_KEYS = ("max_attention_window_size", "sink_token_length")


@rule
def kv_cache_kind(ctx: RuleContext) -> Iterator[Finding]:
    """An engine built without a paged KV cache (``build_config.kv_cache_type`` continuous or disabled, or
    ``plugin_config.paged_kv_cache`` false): what it can serve, and the KV-cache settings that do nothing.

    * disabled: nothing keeps a sequence's keys and values between steps, so a request ends after its context
      step with one generated token (TensorRT-LLM's executor tests expect exactly that of such an engine);
      in-flight batching needs a paged cache (the ``inflight_batching`` rule), V1 is the only strategy left.
    * continuous: one max_seq_len x beam slab per sequence for the engine's whole batch, allocated at load; V1
      (static batching: a batch runs until its longest request ends) only, no block reuse, no host offload.
    """
    kind = ctx.engine.kv_cache_type
    if not ctx.is_trt or kind in (None, "paged"):
        return
    e = ctx.engine
    if kind == "disabled":
        yield Finding(
            "engine_dir",
            "the engine was built without a KV cache (build_config.kv_cache_type disabled): nothing keeps a "
            "sequence's keys and values between steps, so every request ends after its context step with one "
            "generated token, whatever its output length asks (fine for scoring or one next-token, not for "
            "generating text); in-flight batching cannot run it (it needs a paged KV cache), V1 is the only "
            f"batching_strategy left; to generate text rebuild with `{BUILD} --kv_cache_type paged`",
            severity="warning",
            blame="engine",
        )
    keys = PAGED_KV_KEYS + (KV_KEYS if kind == "disabled" else ())
    where = (
        "no KV cache"
        if kind == "disabled"
        else "a continuous KV cache (one max_seq_len slab per sequence of its batch, allocated when it loads)"
    )
    per_token = e.kv_bytes_per_token()
    slab = ""
    if kind == "continuous" and per_token is not None:
        total = per_token * e.max_seq_len * ctx.beam * e.max_batch_size
        slab = (
            f"; that cache takes {total / 2**30:.2f} GiB per GPU (max_batch_size {e.max_batch_size} x max_seq_len "
            f"{e.max_seq_len} x beam {ctx.beam} x {per_token} bytes per token)"
        )
    for key in keys:
        if ctx.v(key) is not None:
            yield Finding(
                key,
                f"has no effect: the engine keeps {where}{slab}; rebuild with `{BUILD} --kv_cache_type paged` "
                "for a paged cache these settings size",
                severity="warning",
                blame="engine",
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


#: ``decoding_mode`` values of the speculative algorithms -> the engine's ``speculative_decoding_mode`` (the
#: names :data:`repo_builder.engine.SPECULATIVE_MODES` gives ``build_config.speculative_decoding_mode``).
SPECULATIVE_DECODING_MODES = {"medusa": "medusa", "eagle": "eagle", "lookahead": "lookahead_decoding"}
#: The tree parameter of each tree-based engine mode.
TREE_KEYS = {"medusa": "medusa_choices", "eagle": "eagle_choices"}
LOOKAHEAD_KEYS = ("lookahead_window_size", "lookahead_ngram_size", "lookahead_verification_set_size")


def lookahead_draft_tokens(window: int, ngram: int, verification: int) -> int:
    """Draft tokens one lookahead step needs for the triple (W, N, G): ``(N - 2) + (W - 1 + G) * (N - 1)``
    (0 when N is 1), i.e. ``(W + G) * (N - 1) - 1``. NVIDIA/TensorRT-LLM
    ``cpp/tensorrt_llm/executor/decodingConfig.cpp`` ``LookaheadDecodingConfig::calculateSpeculativeResourceTuple``;
    the executor requires it to be at most the engine's ``max_draft_len``
    (``batch_manager/trtGptModelInflightBatching.cpp``; triton-inference-server/tensorrtllm_backend#710)."""
    return (0 if ngram == 1 else ngram - 2) + (window - 1 + verification) * (ngram - 1)


def tree_problems(choices: list[list[int]], max_draft_len: int, max_depth: int | None) -> list[str]:
    """What TensorRT-LLM refuses in a Medusa / EAGLE tree (``[[0], [0, 0], [1]]``: each choice is the path of a
    node) for an engine of ``max_draft_len`` draft tokens whose paths are at most ``max_depth`` deep.

    Facts (NVIDIA/TensorRT-LLM ``cpp/tensorrt_llm/runtime/utils/speculativeChoicesUtils.cpp``
    ``initTensorsFromChoices``, checks that fail the request): the number of choices is at most the engine's
    ``max_draft_len``; the depths follow one another from 1 or 2 (no level is skipped); no choice is deeper than the
    engine's draft path length ("Choices require larger maxPathLen than the engine was built with").
    """
    if not choices:
        return ["is empty: a tree needs at least one choice"]
    out: list[str] = []
    if len({tuple(c) for c in choices}) != len(choices):
        out.append("lists a choice twice")
    if any(len(c) == 0 for c in choices):
        out.append("has an empty choice ({}): the root is implied")
    if len(choices) > max_draft_len:
        out.append(f"has {len(choices)} choices; the engine's max_draft_len is {max_draft_len} (one draft token each)")
    depths = sorted({len(c) for c in choices if c})
    level = 1  # TensorRT-LLM starts at depth 1 and takes each deeper level only as the next one
    for d in depths:
        if d not in (level, level + 1):
            out.append(f"has no choice of depth {level + 1}: the levels of a tree follow one another")
            break
        level = d
    if max_depth is not None and depths and depths[-1] > max_depth:
        out.append(f"is {depths[-1]} levels deep; the engine's draft paths are at most {max_depth} long")
    return out


def tree_orphans(choices: list[list[int]]) -> list[str]:
    """Choices whose parent path is not a choice (``{1, 0}`` without ``{1}``), as ``{1, 0}``: TensorRT-LLM does not
    refuse them but hangs them from the root's slot, so the tree it runs is not the one written."""
    seen = {tuple(c) for c in choices}
    return ["{" + ", ".join(str(i) for i in c) + "}" for c in choices if len(c) > 1 and tuple(c[:-1]) not in seen]


@rule
def speculative_engine(ctx: RuleContext) -> Iterator[Finding]:
    """Medusa / EAGLE / lookahead parameters against the engine's config.json (a TensorRT-LLM engine only).

    * ``decoding_mode`` medusa / eagle / lookahead needs an engine built in that speculative mode (the engine's
      ``build_config.speculative_decoding_mode``; trtllm-build ``--speculative_decoding_mode``);
    * ``medusa_choices`` / ``eagle_choices`` only mean something to an engine of that mode, and must fit it
      (:func:`tree_problems`: ``max_draft_len``, ``pretrained_config.num_medusa_heads`` for Medusa; EAGLE-1 also
      needs the tree exactly ``num_eagle_layers`` deep, "EAGLE-1 requires Eagle-tree depth being equal to the
      number of build-time EAGLE layers", and at most ``max_non_leaves_per_layer`` inner nodes per level);
    * the lookahead triple needs a ``lookahead_decoding`` engine whose ``max_draft_len`` holds
      :func:`lookahead_draft_tokens`, and is legal (``ngram`` 1 needs window 1 and verification set 0).

    Facts: NVIDIA/TensorRT-LLM ``cpp/tensorrt_llm/runtime/gptJsonConfig.cpp`` (which config.json keys size each
    mode), ``runtime/utils/speculativeChoicesUtils.cpp``, ``batch_manager/createNewDecoderRequests.cpp`` and
    ``executor/decodingConfig.cpp``, read at the 1.2 line (the trtllm-1.2 profile).
    """
    if not ctx.is_trt:
        return
    engine = ctx.engine
    mode = engine.speculative_decoding_mode
    built = mode if mode not in (None, "none") else "none"
    asked = ctx.v("decoding_mode")
    needed = SPECULATIVE_DECODING_MODES.get(asked) if isinstance(asked, str) else None
    if needed is not None and needed != built:
        yield Finding(
            "decoding_mode",
            f"{asked} needs an engine built with `--speculative_decoding_mode {needed}`; this engine's "
            f"speculative_decoding_mode is {built}",
        )
    for tree_mode, key in TREE_KEYS.items():
        choices = ctx.v(key)
        if not choices:
            continue
        if built != tree_mode:
            yield Finding(
                key, f"is read by a {tree_mode} engine only; this engine's speculative_decoding_mode is {built}"
            )
            continue
        depth = engine.num_medusa_heads if tree_mode == "medusa" else engine.num_eagle_layers
        problems = tree_problems([list(c) for c in choices], engine.max_draft_len, depth)
        if tree_mode == "eagle" and not problems:
            deepest = max(len(c) for c in choices)
            if depth is not None and deepest != depth:
                problems.append(f"is {deepest} levels deep; EAGLE-1 needs exactly num_eagle_layers ({depth}) levels")
            limit = engine.max_non_leaves_per_layer
            inner: dict[int, int] = {}
            prefixes = {tuple(c[:-1]) for c in choices if len(c) > 1}
            for c in choices:
                if tuple(c) in prefixes:
                    inner[len(c)] = inner.get(len(c), 0) + 1
            if limit is not None:
                over = next(((lvl, n) for lvl, n in sorted(inner.items()) if n > limit), None)
                if over is not None:
                    problems.append(
                        f"has {over[1]} inner nodes at level {over[0]}; the engine's max_non_leaves_per_layer is "
                        f"{limit}"
                    )
        for problem in problems:
            yield Finding(key, problem)
        orphans = tree_orphans([list(c) for c in choices])
        if orphans and not problems:
            yield Finding(
                key,
                f"has {', '.join(orphans)} without the parent path: TensorRT-LLM attaches such a node to a parent "
                "slot that holds no draft token, so the tree served is not this one; list every prefix too",
                severity="warning",
            )
    triple = [ctx.v(k) for k in LOOKAHEAD_KEYS]
    if all(isinstance(v, int) for v in triple):
        window, ngram, verification = triple
        if built != "lookahead_decoding":
            yield Finding(
                "lookahead_window_size",
                "lookahead sizes need an engine built with `--speculative_decoding_mode lookahead_decoding`; this "
                f"engine's speculative_decoding_mode is {built}",
            )
            return
        if ngram == 1 and (window != 1 or verification != 0):
            yield Finding(
                "lookahead_ngram_size", "1 needs lookahead_window_size 1 and lookahead_verification_set_size 0"
            )
            return
        need = lookahead_draft_tokens(window, ngram, verification)
        if need > engine.max_draft_len:
            yield Finding(
                "lookahead_window_size",
                f"(W, N, G) = ({window}, {ngram}, {verification}) needs (W + G) * (N - 1) - 1 = {need} draft tokens; "
                f"the engine was built with max_draft_len {engine.max_draft_len} (rebuild with --max_draft_len "
                f"{need} or lower the sizes)",
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


#: TensorRT-LLM's LoRA module ids (``LoraModule::ModuleType``, ``cpp/include/tensorrt_llm/runtime/loraModule.h``):
#: column 0 of an adapter's ``lora_config`` rows; the names are those of ``lora_target_modules``.
LORA_MODULE_IDS = {
    0: "attn_qkv",
    1: "attn_q",
    2: "attn_k",
    3: "attn_v",
    4: "attn_dense",
    5: "mlp_h_to_4h",
    6: "mlp_4h_to_h",
    7: "mlp_gate",
    8: "cross_attn_qkv",
    9: "cross_attn_q",
    10: "cross_attn_k",
    11: "cross_attn_v",
    12: "cross_attn_dense",
    13: "moe_h_to_4h",
    14: "moe_4h_to_h",
    15: "moe_gate",
    16: "moe_router",
    17: "mlp_router",
    18: "mlp_gate_up",
}
#: The files of one prefetched adapter: ``<lora_prefetch_dir>/<task id>/model.lora_{weights,config}.npy``
#: (TensorRT-LLM ``PeftCacheManager::prefetchLoraWeights``).
LORA_WEIGHTS_FILE, LORA_CONFIG_FILE = "model.lora_weights.npy", "model.lora_config.npy"


def _npy_header(path: Path) -> tuple[str, tuple[int, ...]]:
    """(numpy dtype name, shape) of a ``.npy`` file from its header, without reading the data.

    Raises:
        ValueError: not a .npy file.
    """
    import numpy as np

    with open(path, "rb") as f:
        version = np.lib.format.read_magic(f)
        if version == (1, 0):
            shape, _, dtype = np.lib.format.read_array_header_1_0(f)
        else:
            shape, _, dtype = np.lib.format.read_array_header_2_0(f)
    return str(dtype), tuple(int(d) for d in shape)


def lora_adapter_problems(engine: EngineInfo, adapter: Path) -> list[str]:
    """What keeps one LoRA adapter folder (``model.lora_weights.npy`` [1?, rows, size] and
    ``model.lora_config.npy`` [1?, rows, 3] int32: module id, layer, rank) from loading into ``engine``: TensorRT-LLM
    ``loraValidateRequestTensors`` refuses weights of another dtype than the base model's, a layer outside [0,
    layers), a rank of 0 or above the engine's max_lora_rank, and a module the engine was not built for. Returns
    the problems, each one line naming the file."""
    import numpy as np

    weights, config = adapter / LORA_WEIGHTS_FILE, adapter / LORA_CONFIG_FILE
    missing = [p.name for p in (weights, config) if not p.is_file()]
    if missing:
        return [f"{adapter.name}/: lacks {', '.join(missing)}"]
    out: list[str] = []
    try:
        wdtype, wshape = _npy_header(weights)
    except (OSError, ValueError) as exc:
        return [f"{adapter.name}/{weights.name}: not a .npy file ({exc})"]
    want = _DTYPE_NAMES.get(str(engine.lora_dtype or engine.dtype), str(engine.lora_dtype or engine.dtype))
    have = _DTYPE_NAMES.get(wdtype, wdtype)
    if want in _DTYPE_NAMES.values() and have != want:
        out.append(
            f"{adapter.name}/{weights.name}: dtype {have}, but the engine's LoRA weights are {want} (the "
            "backend refuses weights of another dtype than the base model's); convert the adapter to "
            f"{want}"
        )
    try:
        rows = np.load(config, allow_pickle=False)
    except (OSError, ValueError) as exc:
        return [*out, f"{adapter.name}/{config.name}: not a .npy file ({exc})"]
    if rows.ndim == 3 and rows.shape[0] == 1:
        rows = rows[0]
    if rows.ndim != 2 or rows.shape[1] < 3 or not np.issubdtype(rows.dtype, np.integer):
        return [
            *out,
            f"{adapter.name}/{config.name}: shape {list(rows.shape)} {rows.dtype}, expected [rows, 3] integers "
            "(module id, layer, rank)",
        ]
    wrows = wshape[-2] if len(wshape) >= 2 else None
    if wrows is not None and wrows != rows.shape[0]:
        out.append(
            f"{adapter.name}/: {weights.name} has {wrows} rows but {config.name} {rows.shape[0]}: one weights "
            "row per config row"
        )
    targets = set(engine.lora_target_modules)
    known = set(LORA_MODULE_IDS.values())
    bad_modules: set[str] = set()
    for module_id, layer, rank in (tuple(int(v) for v in r[:3]) for r in rows):
        name = LORA_MODULE_IDS.get(module_id, f"module id {module_id}")
        if targets and name not in targets and (module_id in LORA_MODULE_IDS or targets <= known):
            bad_modules.add(name)
        if engine.num_layers and not 0 <= layer < engine.num_layers:
            last = engine.num_layers - 1
            out.append(f"{adapter.name}/{config.name}: layer {layer} is outside the engine's 0..{last}")
            break
        if rank <= 0 or (engine.max_lora_rank and rank > engine.max_lora_rank):
            out.append(
                f"{adapter.name}/{config.name}: rank {rank} "
                + (
                    f"is above the engine's max_lora_rank {engine.max_lora_rank} (rebuild with "
                    f"`{BUILD} --max_lora_rank {rank}`)"
                    if rank > 0
                    else "must be above 0"
                )
            )
            break
    if bad_modules:
        out.append(
            f"{adapter.name}/{config.name}: module(s) {', '.join(sorted(bad_modules))} are not among the engine's "
            f"lora_target_modules ({', '.join(engine.lora_target_modules)}); rebuild with `{BUILD} "
            "--lora_target_modules ...` naming them"
        )
    return out


#: Spellings of the dtypes LoRA weights come in (numpy's and engine configs'), by the engine's name.
_DTYPE_NAMES = {
    "float16": "float16",
    "half": "float16",
    "fp16": "float16",
    "<f2": "float16",
    "bfloat16": "bfloat16",
    "bf16": "bfloat16",
    "float32": "float32",
    "float": "float32",
    "fp32": "float32",
    "<f4": "float32",
}


@rule
def lora_adapters(ctx: RuleContext) -> Iterator[Finding]:
    """Every adapter in lora_prefetch_dir (``<task id>/model.lora_{weights,config}.npy``) against the engine's LoRA
    build (:func:`lora_adapter_problems`): the executor loads them all when it starts, so one bad adapter fails
    the load."""
    prefetch = ctx.v("lora_prefetch_dir")
    if not ctx.is_trt or not prefetch or ctx.engine.lora_plugin is None:
        return
    local = ctx.local_path(str(prefetch))
    if not local.is_dir():
        return  # the lora rule says so
    adapters = sorted((p for p in local.iterdir() if p.is_dir() and p.name.isdigit()), key=lambda p: int(p.name))
    if not adapters:
        yield Finding(
            "lora_prefetch_dir",
            f"'{prefetch}' holds no adapter folder (expected <task id>/{LORA_WEIGHTS_FILE} and {LORA_CONFIG_FILE}, "
            "the task id a number)",
            severity="warning",
        )
    for adapter in adapters:
        for problem in lora_adapter_problems(ctx.engine, adapter):
            yield Finding("lora_prefetch_dir", f"'{prefetch}': {problem}")


@rule
def lora_weights_dtype(ctx: RuleContext) -> Iterator[Finding]:
    """The declared dtype of the ``lora_weights`` input against the engine's LoRA dtype: the C++ backend hands the
    tensor on as declared and TensorRT-LLM refuses weights of another dtype than the base model's
    (``loraValidateRequestTensors``), so every LoRA request with weights would fail."""
    have = ctx.v("lora_weights_data_type")
    if not ctx.is_trt or have is None or ctx.engine.lora_plugin is None:
        return
    dtype = ctx.engine.lora_dtype or ctx.engine.dtype
    want = triton_dtype(dtype)
    if want is not None and have != want:
        yield Finding(
            "lora_weights_data_type",
            f"{have} contradicts the engine's LoRA dtype {dtype} ({want}): TensorRT-LLM refuses lora_weights of "
            'another dtype than the base model\'s ("Expected lora weights to be the same data type as base model"), '
            "so every request sending weights would fail; drop the key to take it from the engine",
            blame="engine",
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


# ------------------------------------------------------------------------------------------- tokenizer and backend
@rule
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


@rule
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


@rule
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
