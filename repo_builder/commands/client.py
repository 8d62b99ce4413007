"""CLI commands ``generate``, ``bench`` and ``top`` (argument parsing and display only).

Logic lives in :mod:`repo_builder.client` and :mod:`repo_builder.bench`; heavy imports (tritonclient,
transformers, matplotlib) happen inside the command functions so ``repo-builder --help`` stays fast.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

from ..cli import app, command, report_errors
from ..cli_options import REQUIRED, Opt, forward, option


@dataclass(frozen=True, kw_only=True)
class GenerateArgs:
    """``repo-builder generate`` options (each becomes the :class:`~repo_builder.client.GenerateRequest` field
    of the same name, or says how to reach the server)."""

    text: str = option(REQUIRED, "--text", help="The prompt (text_input).")
    url: str | None = option(None, "--url", help="host:port; default localhost:8000 (http) or localhost:8001 (grpc).")
    protocol: str = option("http", "--protocol", help="http (/generate, /generate_stream) or grpc (stream API).")
    model: str = option("ensemble", "--model", help="ensemble or tensorrt_llm_bls.")
    stream: bool = option(False, "--stream/--no-stream", help="Stream one response per step (needs a decoupled model).")
    max_tokens: int = option(64, "--max-tokens", help="Tokens to generate (max_tokens).")
    stop_words: list[str] | None = option(None, "--stop-word", help="A stop word (repeatable).")
    bad_words: list[str] | None = option(None, "--bad-word", help="A banned word (repeatable).")
    temperature: float | None = option(None, "--temperature", help="")
    top_k: int | None = option(None, "--top-k", help="")
    top_p: float | None = option(None, "--top-p", help="")
    beam_width: int | None = option(None, "--beam-width", help="")
    min_tokens: int | None = option(None, "--min-tokens", help="")
    seed: int | None = option(None, "--seed", help="")
    end_id: int | None = option(None, "--end-id", help="")
    pad_id: int | None = option(None, "--pad-id", help="")
    exclude_input_in_output: bool | None = option(
        None, "--exclude-input/--include-input", help="exclude_input_in_output (not sent unless given)."
    )
    request_id: str | None = option(None, "--request-id", help="Request id (default: a fresh number).")
    tokenizer_dir: str | None = option(
        None, "--tokenizer-dir", help="Count generated tokens with this tokenizer (one tokenization of the whole text)."
    )
    timeout: float = option(300.0, "--timeout", help="Seconds to wait for the request.")


@command(GenerateArgs)
def generate(args: GenerateArgs) -> None:
    """Send one prompt to a served model, print the text as it arrives, then TTFT and token count."""
    from rich.console import Console

    from ..client import GenerateRequest, GenerateResult, LLMClient, token_counter

    url, protocol, model, stream, tokenizer_dir = args.url, args.protocol, args.model, args.stream, args.tokenizer_dir
    counter = token_counter(tokenizer_dir) if tokenizer_dir else None
    req = forward(GenerateRequest, args, stop_words=args.stop_words or None, bad_words=args.bad_words or None)
    err = Console(stderr=True, highlight=False, soft_wrap=True)
    with LLMClient(url, protocol, model, args.timeout) as client:  # type: ignore[arg-type]
        if counter is None:  # same machine as the server: count with the tokenizer it serves
            tokenizer_dir = client.served_tokenizer_dir()
            counter = token_counter(tokenizer_dir) if tokenizer_dir else None
        result = GenerateResult(model, args.request_id or "", protocol, stream, 0)
        for event in client.iter_events(req, result=result):
            if event.text:
                sys.stdout.write(event.text)
                sys.stdout.flush()
    sys.stdout.write("\n")
    sys.stdout.flush()
    ttft = result.ttft_ms
    tokens, source = result.counted_output_tokens(counter)
    how = {
        "num_output_tokens": "the server's num_output_tokens",
        "output_ids": "returned token ids",
        "text": f"one tokenization of the whole text with {tokenizer_dir}",
    }.get(source or "")
    err.print(f"request id: {result.request_id}")
    err.print(f"time to first token: {ttft:.1f} ms" if ttft is not None else "time to first token: - (no output)")
    err.print(f"total time: {result.latency_ms:.1f} ms, responses: {len(result.chunk_times_ns)}")
    if tokens is None:
        err.print("tokens generated: unknown (pass --tokenizer-dir to count them)")
    else:
        err.print(f"tokens generated: {tokens} (counted from {how})")


_PROGRESS = Opt(True, ("--progress/--no-progress",), help="Show a progress bar.")


def _bench(name: str) -> Any:
    """The ``typer.Option`` of :class:`repo_builder.bench_settings.BenchSettings` field ``name``."""
    from ..bench_settings import BenchSettings
    from ..cli_options import typer_option

    return typer_option(BenchSettings, name)


@app.command()
@report_errors
def bench(
    url: str | None = _bench("url"),
    protocol: str = _bench("protocol"),
    model: str = _bench("model"),
    stream: bool = _bench("stream"),
    concurrency: str = _bench("concurrency"),
    requests: int = _bench("requests"),
    input_tokens: int = _bench("input_tokens"),
    output_tokens: int = _bench("output_tokens"),
    prompts_file: str | None = _bench("prompts_file"),
    tokenizer_dir: str | None = _bench("tokenizer_dir"),
    output_dir: str = _bench("output_dir"),
    warmup: int = _bench("warmup"),
    min_tokens: bool = _bench("min_tokens"),
    end_id: int | None = _bench("end_id"),
    seed: int = _bench("seed"),
    timeout_s: float = _bench("timeout_s"),
    progress: bool = _PROGRESS.typer(),
    all_outputs: bool = _bench("all_outputs"),
    num_draft_tokens: int | None = _bench("num_draft_tokens"),
) -> None:
    """Measure TTFT, inter-token latency, end-to-end latency and throughput at several concurrency levels."""
    options = dict(locals())
    from rich.console import Console

    from ..bench import BenchSettings, format_table, run_bench, write_report
    from ..cli_options import from_cli
    from ..errors import ClientError

    console = Console(highlight=False, soft_wrap=True)
    settings: BenchSettings = from_cli(BenchSettings, options, error=ClientError)
    report = run_bench(settings, progress=progress, log=lambda msg: console.print(f"[yellow]{msg}[/yellow]"))
    paths = write_report(report, output_dir)
    console.print(format_table(report))
    for kind in ("json", "csv", "png", "requests"):
        console.print(f"wrote {paths[kind]}")


@dataclass(frozen=True, kw_only=True)
class TopArgs:
    """``repo-builder top`` options."""

    url: str = option(
        REQUIRED,
        help="Triton's metrics endpoint: host:port (e.g. localhost:8002) or a URL.",
        argument=True,
    )
    once: bool = option(False, "--once", help="Print one view (two scrapes --interval apart) and exit.")
    interval: float = option(
        2.0, "--interval", ge=0.1, show_range=True, help="Seconds between scrapes (rates span one)."
    )


@command(TopArgs)
def top(args: TopArgs) -> None:
    """Live view of a running server: engine requests, KV cache, tokens/s, TTFT/ITL, text-side cost per model."""
    import time

    from rich.console import Console, Group
    from rich.live import Live

    from ..top import metrics_url, scrape, tables

    target, interval = metrics_url(args.url), args.interval
    prev = scrape(target)
    if args.once:
        time.sleep(interval)
        Console().print(*tables(prev, scrape(target), target))
        return
    with Live(Group(*tables(None, prev, target)), refresh_per_second=4, screen=False) as live:
        try:
            while True:
                time.sleep(interval)
                cur = scrape(target)
                live.update(Group(*tables(prev, cur, target)))
                prev = cur
        except KeyboardInterrupt:
            pass
