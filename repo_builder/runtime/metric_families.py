"""The metric families the served Python models export: :data:`FAMILIES` (name, kind, label, values, buckets,
meaning of every family; NVIDIA's ``nv_trt_llm_*`` / ``nv_llm_*`` and repo-builder's ``repo_builder_*``), the
roles that export them and the ``reason`` label of a refused request. Recording is :mod:`.metrics`, which
re-exports every name here; docs/metrics.md is generated from this table (scripts/gen_metrics_doc.py).
"""

from __future__ import annotations

from dataclasses import dataclass

COUNTER, GAUGE, HISTOGRAM = "counter", "gauge", "histogram"

#: roles of the models that export metrics (``Family.roles``)
ENGINE, PRE, POST, BLS = "tensorrt_llm", "preprocessing", "postprocessing", "tensorrt_llm_bls"

#: NVIDIA's buckets of the ``nv_llm_*_token_len`` histograms (tokens; custom_metrics_reporter.cc v0.19.0)
TOKEN_LEN_BUCKETS = (10.0, 50.0, 100.0, 500.0, 1000.0)

#: buckets of repo-builder's latency histograms (seconds)
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)

#: ``tokens_per`` of the Python engines' KV-cache blocks: trtllm-build's default ``--tokens_per_block``
#: (64, also what NVIDIA's README example shows); their caches are not paged, blocks are an accounting unit.
TOKENS_PER_BLOCK = 64

#: why a request was refused: the client field at fault (``RequestError.field``), mapped onto these values;
#: any other field counts as ``other``
REFUSAL_REASONS = (
    "text_input",
    "max_tokens",
    "input_ids",
    "stop_words",
    "bad_words",
    "end_id",
    "pad_id",
    "beam_width",
    "sampling",
    "other",
)

_SAMPLING_FIELDS = frozenset(
    {"temperature", "top_k", "top_p", "runtime_top_k", "runtime_top_p", "seed", "random_seed", "length_penalty"}
)

#: how a sequence of the engine ended (``Sequence.finished``)
FINISH_REASONS = ("end_id", "stop_words", "length", "stopped", "cancelled", "error")


@dataclass(frozen=True)
class Family:
    """One metric family.

    ``label``/``values``: the category label and its values (one series each), or None for a single series.
    ``roles``: which models export it. ``buckets``: histogram bucket bounds (in the family's unit).
    """

    name: str
    kind: str
    description: str
    roles: tuple[str, ...]
    label: str | None = None
    values: tuple[str, ...] = ()
    buckets: tuple[float, ...] | None = None
    unit: str = ""


_E = (ENGINE,)

_TEXT = (PRE, POST, BLS)

#: Every family the served models export. NVIDIA's first (names, label names and values, descriptions and
#: meanings as in tensorrtllm_backend v0.19.0), then repo-builder's (``repo_builder_<what>_<unit>``, counters
#: ending in ``_total``, durations in seconds). docs/metrics.md explains each.
FAMILIES: tuple[Family, ...] = (
    Family(
        "nv_trt_llm_request_metrics",
        GAUGE,
        "TRT LLM request metrics",
        _E,
        "request_type",
        ("active", "max", "scheduled", "context", "waiting"),
        unit="requests",
    ),
    Family(
        "nv_trt_llm_runtime_memory_metrics",
        GAUGE,
        "TRT LLM runtime memory metrics",
        _E,
        "memory_type",
        ("cpu", "gpu", "pinned"),
        unit="bytes",
    ),
    Family(
        "nv_trt_llm_kv_cache_block_metrics",
        GAUGE,
        "TRT LLM KV cache block metrics",
        _E,
        "kv_cache_block_type",
        ("max", "free", "used", "tokens_per", "reused", "fraction"),
        unit="blocks",
    ),
    Family(
        "nv_trt_llm_disaggregated_serving_metrics",
        COUNTER,
        "TRT LLM disaggregated serving metrics",
        _E,
        "disaggregated_serving_type",
        ("kv_cache_transfer_ms", "request_count"),
    ),
    Family(
        "nv_trt_llm_inflight_batcher_metrics",
        GAUGE,
        "TRT LLM inflight_batcher-specific metrics",
        _E,
        "inflight_batcher_specific_metric",
        ("total_context_tokens", "generation_requests", "micro_batch_id", "paused_requests"),
    ),
    Family(
        "nv_trt_llm_general_metrics",
        GAUGE,
        "General TRT LLM metrics",
        _E,
        "general_type",
        ("timestamp", "iteration_counter"),
    ),
    Family(
        "nv_llm_output_token_len",
        HISTOGRAM,
        "TRT LLM response metrics",
        _E,
        "response_metric_type",
        ("total_output_tokens",),
        TOKEN_LEN_BUCKETS,
        "tokens",
    ),
    Family(
        "nv_llm_input_token_len",
        HISTOGRAM,
        "TRT LLM response metrics",
        _E,
        "response_metric_type",
        ("total_input_tokens",),
        TOKEN_LEN_BUCKETS,
        "tokens",
    ),
    # ---- repo-builder: the engine's request outcomes and latencies
    Family(
        "repo_builder_engine_finished_total",
        COUNTER,
        "Sequences the engine finished, by how they ended",
        _E,
        "reason",
        FINISH_REASONS,
        unit="sequences",
    ),
    Family(
        "repo_builder_engine_output_tokens_total",
        COUNTER,
        "Tokens the engine generated, counted every iteration (the end token not counted)",
        _E,
        unit="tokens",
    ),
    Family(
        "repo_builder_engine_first_token_seconds",
        HISTOGRAM,
        "Time from a request's arrival at the engine to its first generated token",
        _E,
        buckets=LATENCY_BUCKETS,
        unit="seconds",
    ),
    Family(
        "repo_builder_engine_queue_seconds",
        HISTOGRAM,
        "Time from a request's arrival at the engine to its first scheduled iteration",
        _E,
        buckets=LATENCY_BUCKETS,
        unit="seconds",
    ),
    Family(
        "repo_builder_engine_inter_token_seconds_total",
        COUNTER,
        "Sum over sequences of the time between their first and last token (divide by "
        "repo_builder_engine_inter_token_gaps_total for the mean inter-token latency)",
        _E,
        unit="seconds",
    ),
    Family(
        "repo_builder_engine_inter_token_gaps_total",
        COUNTER,
        "Token gaps summed in repo_builder_engine_inter_token_seconds_total (tokens - 1 per sequence)",
        _E,
    ),
    # ---- repo-builder: requests refused, by the model that refused them
    Family(
        "repo_builder_requests_refused_total",
        COUNTER,
        "Requests refused as the client's mistake, by the request field at fault",
        (ENGINE, PRE, POST, BLS),
        "reason",
        REFUSAL_REASONS,
        unit="requests",
    ),
    # ---- repo-builder: text side
    Family(
        "repo_builder_tokenize_seconds_total",
        COUNTER,
        "Time spent encoding prompts (chat template included)",
        (PRE,),
        unit="seconds",
    ),
    Family("repo_builder_tokenize_requests_total", COUNTER, "Requests whose prompts were encoded", (PRE,)),
    Family("repo_builder_prompt_tokens_total", COUNTER, "Prompt tokens produced by preprocessing", (PRE,)),
    Family(
        "repo_builder_word_list_seconds_total",
        COUNTER,
        "Time spent building stop/bad word lists and embedding biases",
        (PRE,),
        unit="seconds",
    ),
    Family(
        "repo_builder_detokenize_seconds_total",
        COUNTER,
        "Time spent turning token ids into text (divide by repo_builder_detokenize_tokens_total per token)",
        (POST, BLS),
        unit="seconds",
    ),
    Family(
        "repo_builder_detokenize_tokens_total",
        COUNTER,
        "Token ids detokenized",
        (POST, BLS),
        unit="tokens",
    ),
    Family(
        "repo_builder_detokenizer_streams",
        GAUGE,
        "Streams whose incremental detokenizer state this model holds (a stream's state is dropped when it "
        "ends; in the ensemble only the streams the stream ledger counts, others wait for the LRU bound "
        "detokenizer_max_streams)",
        (POST, BLS),
        unit="streams",
    ),
    Family(
        "repo_builder_stream_ledger_streams",
        GAUGE,
        "Ensemble streams registered in the stream ledger and not yet ended (each keyed by its request id "
        "alone; an id registered here costs later requests with it the engine's perf metrics)",
        (POST,),
        unit="streams",
    ),
    Family(
        "repo_builder_streams_cancelled_total",
        COUNTER,
        "Streaming requests the client cancelled while the BLS served them",
        (BLS,),
        unit="requests",
    ),
    Family(
        "repo_builder_stop_strings_hit_total",
        COUNTER,
        "Requests the BLS ended at a stop string: a stream, whose engine request is then cancelled, or a "
        "non-streaming request whose every text was cut there",
        (BLS,),
        unit="requests",
    ),
)

FAMILY_BY_NAME: dict[str, Family] = {f.name: f for f in FAMILIES}


def refusal_reason(field_name: str) -> str:
    """The ``reason`` label value of a refused request whose fault is ``field_name`` (a client field)."""
    if field_name in REFUSAL_REASONS:
        return field_name
    if field_name in _SAMPLING_FIELDS:
        return "sampling"
    if field_name in ("prompt", "QUERY", "input_lengths"):
        return "text_input"
    if field_name in ("request_output_len", "REQUEST_OUTPUT_LEN"):
        return "max_tokens"
    return "other"
