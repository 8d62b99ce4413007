"""The dashboard's panels and their PromQL, in one table (:data:`PANELS`): what the Grafana dashboard of
:mod:`repo_builder.deploy.monitoring` shows, what ``repo-builder top`` reads and what
tests/e2e/test_metrics_served.py runs against a real Prometheus. The families they query: see
:mod:`repo_builder.deploy.monitoring` and docs/metrics.md.

In a query text, ``{job}`` is the job name, ``{window}`` the rate window (Grafana: ``$__rate_interval``;
tests: a fixed duration) and ``{front}`` a regex of the models clients call (ensemble and BLS models).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Query:
    """One PromQL query of a panel: ``expr`` with ``{job}``/``{window}``/``{front}`` placeholders, and the
    legend (Grafana ``legendFormat``)."""

    expr: str
    legend: str


@dataclass(frozen=True)
class Panel:
    """A dashboard panel: ``key`` (stable id: tests and ``repo-builder top`` use it), row, title, Grafana
    unit, kind (``timeseries`` or ``stat``), description, queries."""

    key: str
    row: str
    title: str
    unit: str
    kind: str
    description: str
    queries: tuple[Query, ...]


_J = 'job="{job}"'


def _per_preprocessed_request(seconds_total: str) -> Query:
    """Seconds of counter ``seconds_total`` per preprocessed request, by model."""
    return Query(
        "sum by (model) (rate(" + seconds_total + "{" + _J + "}[{window}])) / sum by (model) "
        "(rate(repo_builder_tokenize_requests_total{" + _J + "}[{window}]))",
        "{{model}}",
    )


#: Every panel of the dashboard, in order (rows: throughput, latency, queue and KV cache, text-side cost, the
#: OpenAI front end).
PANELS: tuple[Panel, ...] = (
    # ---- throughput
    Panel(
        "output_tokens_rate",
        "Throughput",
        "Generated tokens / s",
        "short",
        "timeseries",
        "Tokens the engine generated per second, counted every iteration.",
        (Query("sum by (model) (rate(repo_builder_engine_output_tokens_total{" + _J + "}[{window}]))", "{{model}}"),),
    ),
    Panel(
        "requests_rate",
        "Throughput",
        "Requests / s (front door)",
        "reqps",
        "timeseries",
        "Successful requests per second of the models clients call (Triton's nv_inference_request_success).",
        (
            Query(
                "sum by (model) (rate(nv_inference_request_success{" + _J + ',model=~"{front}"}[{window}]))',
                "{{model}}",
            ),
        ),
    ),
    Panel(
        "output_tokens_total",
        "Throughput",
        "Tokens generated (total)",
        "short",
        "stat",
        "Tokens of the requests the engine finished since it started (NVIDIA's nv_llm_output_token_len sum).",
        (Query("sum by (model) (nv_llm_output_token_len_sum{" + _J + "})", "{{model}}"),),
    ),
    Panel(
        "finished_by_reason",
        "Throughput",
        "Sequences finished / s, by reason",
        "short",
        "timeseries",
        "How sequences ended in the engine: end_id, stop_words, length, stopped, cancelled, error.",
        (Query("sum by (reason) (rate(repo_builder_engine_finished_total{" + _J + "}[{window}]))", "{{reason}}"),),
    ),
    # ---- latency
    Panel(
        "ttft",
        "Latency",
        "Time to first token (engine)",
        "s",
        "timeseries",
        "From a request's arrival at the engine to its first token: p50 and p95.",
        (
            Query(
                "histogram_quantile(0.5, sum by (le) (rate(repo_builder_engine_first_token_seconds_bucket{"
                + _J
                + "}[{window}])))",
                "p50",
            ),
            Query(
                "histogram_quantile(0.95, sum by (le) (rate(repo_builder_engine_first_token_seconds_bucket{"
                + _J
                + "}[{window}])))",
                "p95",
            ),
        ),
    ),
    Panel(
        "itl",
        "Latency",
        "Inter-token latency (engine, mean)",
        "s",
        "timeseries",
        "Mean time between two tokens of a sequence.",
        (
            Query(
                "sum(rate(repo_builder_engine_inter_token_seconds_total{"
                + _J
                + "}[{window}])) / sum(rate(repo_builder_engine_inter_token_gaps_total{"
                + _J
                + "}[{window}]))",
                "mean",
            ),
        ),
    ),
    Panel(
        "request_latency",
        "Latency",
        "Request latency (Triton, mean)",
        "s",
        "timeseries",
        "Mean time from Triton receiving a request to its last response (nv_inference_request_duration_us).",
        (
            Query(
                "sum by (model) (rate(nv_inference_request_duration_us{"
                + _J
                + ',model=~"{front}"}[{window}])) / 1e6 / sum by (model) (rate(nv_inference_request_success{'
                + _J
                + ',model=~"{front}"}[{window}]))',
                "{{model}}",
            ),
        ),
    ),
    # ---- queue and KV cache
    Panel(
        "engine_requests",
        "Queue & KV cache",
        "Engine requests",
        "short",
        "timeseries",
        "NVIDIA's request states: active (held by the engine), scheduled and context (last iteration), waiting.",
        (
            Query(
                "sum by (request_type) (nv_trt_llm_request_metrics{"
                + _J
                + ',request_type=~"active|scheduled|context|waiting"})',
                "{{request_type}}",
            ),
        ),
    ),
    Panel(
        "triton_pending",
        "Queue & KV cache",
        "Pending in Triton",
        "short",
        "timeseries",
        "Requests Triton holds before a model executes them (nv_inference_pending_request_count).",
        (Query("sum by (model) (nv_inference_pending_request_count{" + _J + "})", "{{model}}"),),
    ),
    Panel(
        "kv_blocks",
        "Queue & KV cache",
        "KV-cache blocks",
        "short",
        "timeseries",
        "Used and free KV-cache blocks (nv_trt_llm_kv_cache_block_metrics).",
        (
            Query(
                "sum by (kv_cache_block_type) (nv_trt_llm_kv_cache_block_metrics{"
                + _J
                + ',kv_cache_block_type=~"used|free"})',
                "{{kv_cache_block_type}}",
            ),
        ),
    ),
    Panel(
        "kv_fraction",
        "Queue & KV cache",
        "KV cache used",
        "percentunit",
        "timeseries",
        "Used / max KV-cache blocks, over the engine model's instances.",
        (
            Query(
                "sum by (model) (nv_trt_llm_kv_cache_block_metrics{"
                + _J
                + ',kv_cache_block_type="used"}) / sum by (model) (nv_trt_llm_kv_cache_block_metrics{'
                + _J
                + ',kv_cache_block_type="max"})',
                "{{model}}",
            ),
        ),
    ),
    # ---- text-side cost
    Panel(
        "tokenize_per_request",
        "Text-side cost",
        "Tokenize time per request",
        "s",
        "timeseries",
        "Prompt encoding (chat template included) per preprocessed request.",
        (_per_preprocessed_request("repo_builder_tokenize_seconds_total"),),
    ),
    Panel(
        "word_lists_per_request",
        "Text-side cost",
        "Word-list time per request",
        "s",
        "timeseries",
        "Stop/bad word lists and embedding bias per preprocessed request.",
        (_per_preprocessed_request("repo_builder_word_list_seconds_total"),),
    ),
    Panel(
        "detokenize_per_token",
        "Text-side cost",
        "Detokenize time per token",
        "s",
        "timeseries",
        "Turning token ids into text, per token (postprocessing, or the BLS running it in-process).",
        (
            Query(
                "sum by (model) (rate(repo_builder_detokenize_seconds_total{"
                + _J
                + "}[{window}])) / sum by (model) (rate(repo_builder_detokenize_tokens_total{"
                + _J
                + "}[{window}]))",
                "{{model}}",
            ),
        ),
    ),
    Panel(
        "text_cpu",
        "Text-side cost",
        "Text-side CPU (cores)",
        "short",
        "timeseries",
        "Seconds per second spent tokenizing, building word lists and detokenizing, per model and stage.",
        tuple(
            Query(
                "sum by (model) (rate(repo_builder_" + stage + "_seconds_total{" + _J + "}[{window}]))",
                "{{model}} " + stage,
            )
            for stage in ("tokenize", "word_list", "detokenize")
        ),
    ),
    Panel(
        "refused",
        "Text-side cost",
        "Refused requests / s, by reason",
        "reqps",
        "timeseries",
        "Requests refused as the client's mistake, by the model and the request field at fault.",
        (
            Query(
                "sum by (model, reason) (rate(repo_builder_requests_refused_total{" + _J + "}[{window}]))",
                "{{model}} {{reason}}",
            ),
        ),
    ),
    Panel(
        "bls_stream_ends",
        "Text-side cost",
        "BLS: cancelled streams and stop strings / s",
        "reqps",
        "timeseries",
        "Streams the client cancelled and streams ended at a stop string, in the BLS.",
        (
            Query("sum(rate(repo_builder_streams_cancelled_total{" + _J + "}[{window}]))", "cancelled"),
            Query("sum(rate(repo_builder_stop_strings_hit_total{" + _J + "}[{window}]))", "stop string"),
        ),
    ),
    # ---- the OpenAI front end (its own /metrics: repo_builder.openai.metrics; `model` = the served model id)
    Panel(
        "openai_requests",
        "OpenAI front end",
        "Requests / s, by HTTP status",
        "reqps",
        "timeseries",
        "Requests the OpenAI front end answered (/v1 and /health), by status.",
        (Query("sum by (status) (rate(repo_builder_openai_requests_total{" + _J + "}[{window}]))", "{{status}}"),),
    ),
    Panel(
        "openai_refused",
        "OpenAI front end",
        "Refused / s by reason, cancelled / s",
        "reqps",
        "timeseries",
        "Requests refused as the client's mistake (4xx) by OpenAI error code; answers whose client went away.",
        (
            Query(
                "sum by (reason) (rate(repo_builder_openai_requests_refused_total{" + _J + "}[{window}]))",
                "{{reason}}",
            ),
            Query("sum(rate(repo_builder_openai_streams_cancelled_total{" + _J + "}[{window}]))", "cancelled"),
        ),
    ),
    Panel(
        "openai_ttft",
        "OpenAI front end",
        "Time to first token (front door)",
        "s",
        "timeseries",
        "Streamed requests: from the request's arrival at the front end to its first text delta, p50 and p95.",
        tuple(
            Query(
                f"histogram_quantile({q}, sum by (le) (rate(repo_builder_openai_first_token_seconds_bucket{{"
                + _J
                + "}[{window}])))",
                label,
            )
            for q, label in ((0.5, "p50"), (0.95, "p95"))
        ),
    ),
    Panel(
        "openai_itl",
        "OpenAI front end",
        "Inter-token latency (front door)",
        "s",
        "timeseries",
        "Streamed requests: time between successive text deltas at the front end, p50 and p95.",
        tuple(
            Query(
                f"histogram_quantile({q}, sum by (le) (rate(repo_builder_openai_inter_token_seconds_bucket{{"
                + _J
                + "}[{window}])))",
                label,
            )
            for q, label in ((0.5, "p50"), (0.95, "p95"))
        ),
    ),
    Panel(
        "openai_output_tokens_rate",
        "OpenAI front end",
        "Completion tokens / s",
        "short",
        "timeseries",
        "Completion tokens answered per second (usage.completion_tokens), per served model.",
        (
            Query(
                "sum by (model) (rate(repo_builder_openai_output_tokens_total{" + _J + "}[{window}]))",
                "{{model}}",
            ),
        ),
    ),
    Panel(
        "openai_output_tokens_total",
        "OpenAI front end",
        "Completion tokens (total)",
        "short",
        "stat",
        "Completion tokens the front end answered since it started, per served model.",
        (Query("sum by (model) (repo_builder_openai_output_tokens_total{" + _J + "})", "{{model}}"),),
    ),
)

PANEL_BY_KEY: dict[str, Panel] = {p.key: p for p in PANELS}
