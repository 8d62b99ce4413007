"""CLI commands ``generate``, ``bench`` and ``top`` (argument parsing and display only).

Logic lives in :mod:`repo_builder.client` and :mod:`repo_builder.bench`; heavy imports (tritonclient,
transformers, matplotlib) happen inside the command functions so ``repo-builder --help`` stays fast.
"""

from __future__ import annotations

import sys
from typing import Any

import typer

from ..cli import app, report_errors


@app.command()
@report_errors
def generate(
    text: str = typer.Option(..., "--text", help="The prompt (text_input)."),
    url: str | None = typer.Option(
        None, "--url", help="host:port; default localhost:8000 (http) or localhost:8001 (grpc)."
    ),
    protocol: str = typer.Option("http", "--protocol", help="http (/generate, /generate_stream) or grpc (stream API)."),
    model: str = typer.Option("ensemble", "--model", help="ensemble or tensorrt_llm_bls."),
    stream: bool = typer.Option(
        False, "--stream/--no-stream", help="Stream one response per step (needs a decoupled model)."
    ),
    max_tokens: int = typer.Option(64, "--max-tokens", help="Tokens to generate (max_tokens)."),
    stop_word: list[str] | None = typer.Option(None, "--stop-word", help="A stop word (repeatable)."),
    bad_word: list[str] | None = typer.Option(None, "--bad-word", help="A banned word (repeatable)."),
    temperature: float | None = typer.Option(None, "--temperature"),
    top_k: int | None = typer.Option(None, "--top-k"),
    top_p: float | None = typer.Option(None, "--top-p"),
    beam_width: int | None = typer.Option(None, "--beam-width"),
    min_tokens: int | None = typer.Option(None, "--min-tokens"),
    seed: int | None = typer.Option(None, "--seed"),
    end_id: int | None = typer.Option(None, "--end-id"),
    pad_id: int | None = typer.Option(None, "--pad-id"),
    exclude_input: bool | None = typer.Option(
        None, "--exclude-input/--include-input", help="exclude_input_in_output (not sent unless given)."
    ),
    request_id: str | None = typer.Option(None, "--request-id", help="Request id (default: a fresh number)."),
    tokenizer_dir: str | None = typer.Option(
        None, "--tokenizer-dir", help="Count generated tokens with this tokenizer (one tokenization of the whole text)."
    ),
    timeout: float = typer.Option(300.0, "--timeout", help="Seconds to wait for the request."),
) -> None:
    """Send one prompt to a served model, print the text as it arrives, then TTFT and token count."""
    from rich.console import Console

    from ..client import GenerateRequest, GenerateResult, LLMClient, token_counter

    counter = token_counter(tokenizer_dir) if tokenizer_dir else None
    req = GenerateRequest(
        text,
        max_tokens=max_tokens,
        stream=stream,
        stop_words=stop_word or None,
        bad_words=bad_word or None,
        temperature=temperature,
        top_k=top_k,
        top_p=top_p,
        end_id=end_id,
        pad_id=pad_id,
        exclude_input_in_output=exclude_input,
        beam_width=beam_width,
        min_tokens=min_tokens,
        seed=seed,
        request_id=request_id,
    )
    err = Console(stderr=True, highlight=False, soft_wrap=True)
    with LLMClient(url, protocol, model, timeout) as client:  # type: ignore[arg-type]
        if counter is None:  # same machine as the server: count with the tokenizer it serves
            tokenizer_dir = client.served_tokenizer_dir()
            counter = token_counter(tokenizer_dir) if tokenizer_dir else None
        result = GenerateResult(model, request_id or "", protocol, stream, 0)
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
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Show a progress bar."),
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


@app.command()
@report_errors
def top(
    url: str = typer.Argument(..., help="Triton's metrics endpoint: host:port (e.g. localhost:8002) or a URL."),
    once: bool = typer.Option(False, "--once", help="Print one view (two scrapes --interval apart) and exit."),
    interval: float = typer.Option(2.0, "--interval", min=0.1, help="Seconds between scrapes (rates span one)."),
) -> None:
    """Live view of a running server: engine requests, KV cache, tokens/s, TTFT/ITL, text-side cost per model."""
    import time

    from rich.console import Console, Group
    from rich.live import Live

    from ..top import metrics_url, scrape, tables

    target = metrics_url(url)
    prev = scrape(target)
    if once:
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
