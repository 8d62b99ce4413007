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


def _blocks_tokens(ctx: RuleContext) -> tuple[int, int, int]:
    """(tokens per block, blocks one beam of a full sequence takes, tokens one full request takes)."""
    tpb = ctx.engine.tokens_per_block or 1
    blocks = math.ceil(ctx.engine.max_seq_len / tpb)
    return tpb, blocks, blocks * tpb * ctx.beam


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
        "'{value}': repo-builder's BLS has no draft-model loop (it refuses num_draft_tokens > 0); for "
        "draft/target speculative decoding use tensorrtllm_backend's own tensorrt_llm_bls, or engine-side modes "
        "(decoding_mode medusa, eagle, lookahead)",
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
