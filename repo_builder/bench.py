"""`repo-builder bench`: latency and throughput of a served text model at several concurrency levels.

For each concurrency level ``c`` the benchmark keeps ``c`` requests in flight (``c`` worker threads, each with
its own HTTP session or gRPC stream, sending its next request as soon as the previous one ends) until
``--requests`` requests have finished, then summarises them with :mod:`repo_builder.bench_stats`
(TTFT, inter-token latency, end-to-end latency p50/p90/p99, output tokens/s, requests/s, errors).

Requests ask for exactly ``--output-tokens`` tokens where the model allows it: ``max_tokens`` = N and, when
the model has the input, ``min_tokens`` = N (``min_length`` on old ensembles) so an early end-of-sequence
cannot shorten a request; ``--end-id -1`` can also be passed for engines that treat -1 as "no end id".
``exclude_input_in_output`` is sent when the model has it (TRT-LLM >= v0.16), so only generated text
comes back; otherwise a returned prompt prefix is cut off the text before counting.

Output tokens are counted after each level (outside the timed window) from returned token ids
(``output_ids``) or from ONE tokenization of the request's whole generated text with ``--tokenizer-dir``
(``add_special_tokens=False``), never per streamed chunk. Without either, token counts and tokens/s are
reported as unknown.

Synthetic prompts (no ``--prompts``) are random words from a fixed list of common English words, seeded per
request so no two prompts share a prefix. With ``--tokenizer-dir`` a prompt is cut to exactly
``--input-tokens`` tokens of that tokenizer (re-encoding the decoded text may differ by a token or two at
the cut); without it the prompt has ``round(input_tokens * WORDS_PER_TOKEN)`` words, using the common
rule of thumb of 0.75 English words per token of a BPE/SentencePiece tokenizer.

The client's own cost is measured: ``time.process_time()`` of the benchmark process over each level (all
threads) is reported as ``client_cpu_s`` and per request, so a client bottleneck is visible.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from typing import Any

from .bench_prompts import WORDS_PER_TOKEN, Prompt, load_prompts, synthetic_prompts  # noqa: F401  (re-exported)
from .bench_report import format_table, plot_levels, write_report  # noqa: F401  (re-exported)
from .bench_settings import BenchSettings as BenchSettings
from .bench_settings import parse_concurrency as parse_concurrency
from .bench_stats import LevelStats, RequestRecord, summarize
from .client import GenerateRequest, GenerateResult, LLMClient, ModelInfo, load_tokenizer, token_counter
from .errors import ClientError

# --------------------------------------------------------------------------------------------------------
# Running
# --------------------------------------------------------------------------------------------------------


def _settings_json(settings: BenchSettings) -> dict[str, Any]:
    """``settings`` as bench.json's ``settings`` object (``text_output_only`` as before ``all_outputs``)."""
    data = asdict(settings)
    data["text_output_only"] = not data.pop("all_outputs")
    return data


def build_request(settings: BenchSettings, info: ModelInfo, prompt: Prompt) -> GenerateRequest:
    """The request for one prompt, using only inputs the served model has."""
    n_out = prompt.output_tokens or settings.output_tokens
    req = GenerateRequest(prompt.text, max_tokens=n_out, stream=settings.stream)
    if settings.min_tokens and info.accepts("min_tokens"):
        req.min_tokens = n_out
    if info.accepts("exclude_input_in_output"):
        req.exclude_input_in_output = True
    if settings.end_id is not None:
        req.end_id = settings.end_id
    if settings.num_draft_tokens:
        req.extra["num_draft_tokens"] = settings.num_draft_tokens
        req.extra["return_perf_metrics"] = True
    if settings.protocol == "grpc" and not settings.all_outputs:
        wanted = ("text_output", "output_ids", *(SPECULATIVE_OUTPUTS if settings.num_draft_tokens else ()))
        req.outputs = [name for name in wanted if name in info.outputs] or None
    return req


#: The perf outputs of a speculative request (NVIDIA's BLS; cumulative over the draft loop's iterations).
SPECULATIVE_OUTPUTS = ("total_draft_tokens", "total_accepted_draft_tokens")


def _draft_counts(result: GenerateResult) -> tuple[int, int] | None:
    """(draft tokens proposed, draft tokens accepted) of one request: the last response carrying the perf
    outputs (they add up over the iterations), None when none does."""
    for event in reversed(result.events):
        values = [event.outputs.get(name) for name in SPECULATIVE_OUTPUTS]
        if all(v is not None for v in values):
            import numpy as np

            draft, accepted = (int(np.asarray(v).reshape(-1)[0]) for v in values)
            return draft, accepted
    return None


def speculative_stats(done: list[_Done], records: list[RequestRecord]) -> dict[str, Any]:
    """The level's speculative figures: draft tokens proposed and accepted (summed over the requests that
    reported them), ``acceptance_rate`` = accepted / proposed, and ``tokens_per_step`` = output tokens per target
    call. Each target call returns the draft tokens it accepts plus one token of its own, so the calls are
    output tokens - accepted tokens (exact unless an end id or stop word cuts a call short); None when the
    output tokens are not counted (no tokenizer, no ids)."""
    draft = accepted = tokens = 0
    counted, reported = True, 0
    for d, rec in zip(done, records):
        counts = _draft_counts(d.result) if d.result.ok else None
        if counts is None:
            continue
        reported += 1
        draft += counts[0]
        accepted += counts[1]
        if rec.output_tokens is None:
            counted = False
        else:
            tokens += rec.output_tokens
    steps = tokens - accepted
    return {
        "requests_reporting": reported,
        "draft_tokens": draft,
        "accepted_draft_tokens": accepted,
        "acceptance_rate": accepted / draft if draft else None,
        "tokens_per_step": tokens / steps if counted and reported and steps > 0 else None,
    }


@dataclass
class _Done:
    prompt: Prompt
    result: GenerateResult


def _run_level(
    settings: BenchSettings,
    info: ModelInfo,
    prompts: list[Prompt],
    concurrency: int,
    on_done: Callable[[], None] | None,
) -> tuple[list[_Done], int, float]:
    """Send ``settings.requests`` requests with ``concurrency`` in flight. Returns (done, wall ns, client CPU s)."""
    lock = threading.Lock()
    counter = iter(range(settings.requests))
    done: list[_Done] = []
    failures: list[BaseException] = []

    def worker() -> None:
        try:
            with LLMClient(settings.url, settings.protocol, settings.model, settings.timeout_s) as client:  # type: ignore[arg-type]
                client._infos[settings.model] = info
                while True:
                    with lock:
                        index = next(counter, None)
                    if index is None:
                        return
                    prompt = prompts[index % len(prompts)]
                    result = client.generate(build_request(settings, info, prompt))
                    with lock:
                        done.append(_Done(prompt, result))
                    if on_done is not None:
                        on_done()
        except BaseException as exc:  # noqa: BLE001 - surfaced in the main thread
            failures.append(exc)

    cpu0 = time.process_time()
    t0 = time.perf_counter_ns()
    threads = [threading.Thread(target=worker, daemon=True) for _ in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter_ns() - t0
    cpu = time.process_time() - cpu0
    if failures:
        raise failures[0]
    return done, wall, cpu


def _generated_text(done: _Done, info: ModelInfo) -> str:
    text = done.result.text
    if not info.accepts("exclude_input_in_output") and not done.result.stream and text.startswith(done.prompt.text):
        text = text[len(done.prompt.text) :]
    return text


def _records(done: list[_Done], info: ModelInfo, count: Callable[[str], int] | None) -> list[RequestRecord]:
    records = []
    for d in done:
        r = d.result
        tokens = None
        if r.ok:
            ids = r.token_ids
            tokens = len(ids) if ids is not None else (count(_generated_text(d, info)) if count else None)
        records.append(
            RequestRecord(r.start_ns, tuple(r.chunk_times_ns), r.end_ns, tokens, None if r.ok else str(r.error))
        )
    return records


def _probe(settings: BenchSettings, tokenizer: Any) -> tuple[ModelInfo, str, list[Prompt], str]:
    """Check the served model against ``settings``, load the prompts and send the warm-up requests.

    Takes the checked settings and the tokenizer (or None) that cuts synthetic prompts. Returns (model info,
    server version string, prompts, prompt source: the prompts file's path or ``"synthetic"``).

    Raises:
        ClientError: unreachable server, unknown model, ``--stream`` on a model that is not decoupled,
            ``--num-draft-tokens`` on a model without that input, a failed warm-up request.
    """
    with LLMClient(settings.url, settings.protocol, settings.model, settings.timeout_s) as probe:  # type: ignore[arg-type]
        info = probe.model_info()
        server_version = probe.server_version()
        if settings.stream and not info.decoupled:
            raise ClientError(
                f"model '{info.name}' is not decoupled, so it cannot stream",
                key="--stream",
                hint="drop --stream or serve a streaming repository",
            )
        if settings.num_draft_tokens and not info.accepts("num_draft_tokens"):
            raise ClientError(
                f"model '{info.name}' has no num_draft_tokens input: speculative requests go to tensorrt_llm_bls "
                "of a repository rendered with --draft-engine-dir",
                key="--num-draft-tokens",
                hint="pass --model tensorrt_llm_bls, or drop --num-draft-tokens",
            )
        if settings.prompts_file:
            prompts = load_prompts(settings.prompts_file)
            source = str(settings.prompts_file)
        else:
            prompts = synthetic_prompts(settings.requests, settings.input_tokens, tokenizer, settings.seed)
            source = "synthetic"
        for i in range(settings.warmup):  # loads lazy state in the server (first-request costs)
            warm = probe.generate(build_request(settings, info, prompts[i % len(prompts)]))
            if warm.error is not None:
                raise ClientError(
                    f"warm-up request failed: {warm.error}",
                    key="--model",
                    hint="check the server log; the benchmark stops before measuring",
                )
    return info, server_version, prompts, source


def _start_bar(progress: bool) -> Any:
    """A started rich Progress bar with one line per level (``c=<concurrency>``), or None without ``progress``."""
    if not progress:
        return None
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    bar = Progress(
        TextColumn("[bold]c={task.fields[c]}[/bold]"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        transient=False,
    )
    bar.start()
    return bar


def _level_report(
    settings: BenchSettings, c: int, done: list[_Done], records: list[RequestRecord], wall: int, cpu: float
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """One level's summary and its per-request rows for requests.jsonl.

    Takes the level's concurrency ``c``, its finished requests and their records, the wall time (ns) and the
    client CPU time (s). Returns (the :class:`LevelStats` dict plus ``client_cpu_s``,
    ``client_cpu_ms_per_request``, ``chunks_per_request`` and, with draft tokens, ``speculative``; the rows).
    """
    stats: LevelStats = summarize(records, concurrency=c, wall=wall)
    level = stats.to_dict()
    level["client_cpu_s"] = cpu
    level["client_cpu_ms_per_request"] = cpu * 1000 / max(1, len(done))
    level["chunks_per_request"] = (
        sum(len(r.chunk_ns) for r in records if r.ok) / stats.completed if stats.completed else None
    )
    if settings.num_draft_tokens:
        level["speculative"] = speculative_stats(done, records)
    rows = [
        {
            "concurrency": c,
            "request_id": d.result.request_id,
            "start_ns": rec.start_ns,
            "chunk_ns": list(rec.chunk_ns),
            "end_ns": rec.end_ns,
            "output_tokens": rec.output_tokens,
            "error": rec.error,
        }
        for rec, d in zip(records, done)
    ]
    return level, rows


def _run_levels(
    settings: BenchSettings,
    info: ModelInfo,
    prompts: list[Prompt],
    count: Callable[[str], int] | None,
    progress: bool,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Run every level of ``settings.concurrency`` in order. Returns (level dicts, per-request rows of all levels)."""
    levels: list[dict[str, Any]] = []
    all_records: list[dict[str, Any]] = []
    bar = _start_bar(progress)
    try:
        for c in settings.concurrency:
            task = bar.add_task("level", total=settings.requests, c=c) if bar else None
            advance = (lambda task=task: bar.advance(task)) if bar else None
            done, wall, cpu = _run_level(settings, info, prompts, c, advance)
            records = _records(done, info, count)
            level, rows = _level_report(settings, c, done, records, wall, cpu)
            levels.append(level)
            all_records.extend(rows)
    finally:
        if bar:
            bar.stop()
    return levels, all_records


def run_bench(
    settings: BenchSettings, progress: bool = True, log: Callable[[str], None] | None = None
) -> dict[str, Any]:
    """Run every concurrency level and return the report (a JSON-serialisable dict).

    The report holds ``settings``, ``server`` (model name, decoupled, max_batch_size), ``prompts`` (source and
    measured input length), ``levels`` (one :class:`~repo_builder.bench_stats.LevelStats` dict per level plus
    ``client_cpu_s`` and ``client_cpu_ms_per_request``) and ``records`` (per-request timings, used for
    requests.jsonl).

    Raises:
        ClientError: bad settings, unreachable server, unknown model, a request refused client-side.
    """
    settings.check()
    say = log or (lambda _msg: None)
    tokenizer = None
    count = None
    if settings.tokenizer_dir:
        tokenizer = load_tokenizer(settings.tokenizer_dir)
        count = token_counter(tokenizer)
    info, server_version, prompts, source = _probe(settings, tokenizer)
    prompt_tokens = [count(p.text) for p in prompts] if count else None
    if not settings.min_tokens or not info.accepts("min_tokens"):
        say("note: the model has no min_tokens input (or --no-min-tokens); requests may end early at end_id")
    if count is None:
        say("note: no --tokenizer-dir and the model returns no token ids: output tokens are not counted")
    levels, all_records = _run_levels(settings, info, prompts, count, progress)
    return {
        "tool": "repo-builder bench",
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "settings": _settings_json(settings),
        "server": {
            "url": settings.url,
            "protocol": settings.protocol,
            "version": server_version,
            "model": info.name,
            "decoupled": info.decoupled,
            "max_batch_size": info.max_batch_size,
            "min_tokens_sent": bool(settings.min_tokens and info.accepts("min_tokens")),
            "exclude_input_in_output_sent": info.accepts("exclude_input_in_output"),
            "outputs_requested": build_request(settings, info, prompts[0]).outputs or "all",
        },
        "prompts": {
            "source": source,
            "count": len(prompts),
            "words_per_token": WORDS_PER_TOKEN,
            "input_tokens_mean": (sum(prompt_tokens) / len(prompt_tokens)) if prompt_tokens else None,
            "token_count_method": "tokenizer" if count else "returned ids or unknown",
        },
        "levels": levels,
        "records": all_records,
    }
