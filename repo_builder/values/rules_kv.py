"""Rules of batching and the KV cache: in-flight batching needs a paged cache, block reuse (B06), chunked
context, KV-cache tokens and memory against a full batch, attention windows, engines without a paged cache.
Registered in :data:`repo_builder.values.rules.RULES`. Sizing facts: TensorRT-LLM ``KVCacheManager``.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

from .findings import BUILD, INFLIGHT, LARGEST_GPU_BYTES, Finding, RuleContext


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


# ------------------------------------------------------------------------------------------- batching
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
