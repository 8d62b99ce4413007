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

import csv
import json
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from .bench_prompts import WORDS_PER_TOKEN, Prompt, load_prompts, synthetic_prompts  # noqa: F401  (re-exported)
from .bench_settings import BenchSettings as BenchSettings
from .bench_settings import parse_concurrency as parse_concurrency
from .bench_stats import CSV_COLUMNS, LevelStats, RequestRecord, csv_row, summarize
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
    prompt_tokens = [count(p.text) for p in prompts] if count else None
    if not settings.min_tokens or not info.accepts("min_tokens"):
        say("note: the model has no min_tokens input (or --no-min-tokens); requests may end early at end_id")
    if count is None:
        say("note: no --tokenizer-dir and the model returns no token ids: output tokens are not counted")

    levels: list[dict[str, Any]] = []
    all_records: list[dict[str, Any]] = []
    bar: Any = None
    if progress:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        bar = Progress(
            TextColumn("[bold]c={task.fields[c]}[/bold]"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            transient=False,
        )
        bar.start()
    try:
        for c in settings.concurrency:
            task = bar.add_task("level", total=settings.requests, c=c) if bar else None
            advance = (lambda task=task: bar.advance(task)) if bar else None
            done, wall, cpu = _run_level(settings, info, prompts, c, advance)
            records = _records(done, info, count)
            stats: LevelStats = summarize(records, concurrency=c, wall=wall)
            level = stats.to_dict()
            level["client_cpu_s"] = cpu
            level["client_cpu_ms_per_request"] = cpu * 1000 / max(1, len(done))
            level["chunks_per_request"] = (
                sum(len(r.chunk_ns) for r in records if r.ok) / stats.completed if stats.completed else None
            )
            if settings.num_draft_tokens:
                level["speculative"] = speculative_stats(done, records)
            levels.append(level)
            for rec, d in zip(records, done):
                all_records.append(
                    {
                        "concurrency": c,
                        "request_id": d.result.request_id,
                        "start_ns": rec.start_ns,
                        "chunk_ns": list(rec.chunk_ns),
                        "end_ns": rec.end_ns,
                        "output_tokens": rec.output_tokens,
                        "error": rec.error,
                    }
                )
    finally:
        if bar:
            bar.stop()
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


# --------------------------------------------------------------------------------------------------------
# Writing
# --------------------------------------------------------------------------------------------------------


def write_report(report: dict[str, Any], output_dir: str | Path) -> dict[str, Path]:
    """Write ``bench.json`` (report without per-request records), ``bench.csv`` (one row per level),
    ``requests.jsonl`` (per-request timings) and ``bench.png`` (latency and throughput against concurrency)
    into ``output_dir``. Returns the paths by kind."""
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {
        "json": out / "bench.json",
        "csv": out / "bench.csv",
        "png": out / "bench.png",
        "requests": out / "requests.jsonl",
    }
    summary = {k: v for k, v in report.items() if k != "records"}
    paths["json"].write_text(json.dumps(summary, indent=2) + "\n")
    with paths["csv"].open("w", newline="") as fh:
        speculative = (
            ["acceptance_rate", "tokens_per_step"] if any("speculative" in lv for lv in report["levels"]) else []
        )
        writer = csv.DictWriter(fh, fieldnames=CSV_COLUMNS + ["client_cpu_ms_per_request", *speculative])
        writer.writeheader()
        for level in report["levels"]:
            stats = _stats_from_dict(level)
            row = csv_row(stats)
            row["client_cpu_ms_per_request"] = level.get("client_cpu_ms_per_request", "")
            for key in speculative:
                value = (level.get("speculative") or {}).get(key)
                row[key] = "" if value is None else value
            writer.writerow(row)
    with paths["requests"].open("w") as fh:
        for rec in report.get("records", []):
            fh.write(json.dumps(rec) + "\n")
    plot_levels(
        report["levels"],
        paths["png"],
        title=f"{report['server']['model']} "
        f"({report['settings']['protocol']}, {'stream' if report['settings']['stream'] else 'no stream'})",
    )
    return paths


def _stats_from_dict(level: dict[str, Any]) -> LevelStats:
    from .bench_stats import Distribution

    keys = {f for f in LevelStats.__dataclass_fields__}
    data = {k: v for k, v in level.items() if k in keys}
    for name in ("ttft_ms", "itl_ms", "e2e_ms"):
        data[name] = Distribution(**level[name])
    return LevelStats(**data)


def plot_levels(levels: list[dict[str, Any]], path: str | Path, title: str = "") -> Path:
    """PNG with latency (ms, left) and throughput (right) against concurrency (matplotlib, Agg backend)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    xs = [lv["concurrency"] for lv in levels]

    def series(metric: str, key: str) -> list[float]:
        return [float("nan") if lv[metric][key] is None else lv[metric][key] for lv in levels]

    fig, (ax_lat, ax_thr) = plt.subplots(1, 2, figsize=(11, 4.2))
    for metric, key, style in (
        ("ttft_ms", "p50", "o-"),
        ("ttft_ms", "p99", "o--"),
        ("itl_ms", "p50", "s-"),
        ("e2e_ms", "p50", "^-"),
        ("e2e_ms", "p99", "^--"),
    ):
        ax_lat.plot(xs, series(metric, key), style, label=f"{metric[:-3].upper()} {key}")
    ax_lat.set_xlabel("concurrency (requests in flight)")
    ax_lat.set_ylabel("latency (ms)")
    ax_lat.set_xscale("log", base=2)
    ax_lat.set_xticks(xs, [str(x) for x in xs])
    ax_lat.grid(True, alpha=0.3)
    ax_lat.legend(fontsize=8)
    ax_lat.set_title("latency")
    tok = [float("nan") if lv["output_tokens_per_s"] is None else lv["output_tokens_per_s"] for lv in levels]
    ax_thr.plot(xs, tok, "o-", color="tab:blue", label="output tokens/s")
    ax_thr.set_xlabel("concurrency (requests in flight)")
    ax_thr.set_ylabel("output tokens/s", color="tab:blue")
    ax_thr.set_xscale("log", base=2)
    ax_thr.set_xticks(xs, [str(x) for x in xs])
    ax_thr.grid(True, alpha=0.3)
    ax_req = ax_thr.twinx()
    ax_req.plot(xs, [lv["requests_per_s"] for lv in levels], "s--", color="tab:orange", label="requests/s")
    ax_req.set_ylabel("requests/s", color="tab:orange")
    ax_thr.set_ylim(bottom=0)
    ax_req.set_ylim(bottom=0)
    ax_thr.set_title("throughput")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return Path(path)


def format_table(report: dict[str, Any]) -> Any:
    """A rich Table of the levels (ms and per-second figures) for the terminal."""
    from rich.table import Table

    def f(v: Any, digits: int = 1) -> str:
        return "-" if v is None else f"{v:.{digits}f}"

    table = Table(
        title=f"{report['server']['model']} over {report['settings']['protocol']}"
        f"{' (stream)' if report['settings']['stream'] else ''}"
    )
    for col in (
        "conc",
        "ok/err",
        "TTFT ms p50/90/99",
        "ITL ms p50/90/99",
        "E2E ms p50/90/99",
        "out tok/s",
        "req/s",
        "client CPU ms/req",
        *(("accepted", "tok/step") if any("speculative" in lv for lv in report["levels"]) else ()),
    ):
        table.add_column(col, justify="right", no_wrap=True)
    for lv in report["levels"]:

        def trio(name: str, lv: dict = lv) -> str:
            d = lv[name]
            return f"{f(d['p50'])}/{f(d['p90'])}/{f(d['p99'])}"

        table.add_row(
            str(lv["concurrency"]),
            f"{lv['completed']}/{lv['errors']}",
            trio("ttft_ms"),
            trio("itl_ms"),
            trio("e2e_ms"),
            f(lv["output_tokens_per_s"]),
            f(lv["requests_per_s"], 2),
            f(lv["client_cpu_ms_per_request"], 2),
            *(
                (f(lv["speculative"]["acceptance_rate"], 3), f(lv["speculative"]["tokens_per_step"], 2))
                if "speculative" in lv
                else ()
            ),
        )
    return table
