"""The load of one scripts/bench_server_cpu.py level spread over several client processes (``--client-procs``).

Why: one Python client process drives at most ~3,000-4,000 streamed tokens/s however fast the server is (its
gRPC streams share one GIL; 0.3-0.4 ms of client CPU per token measured on the 16-core GPU host, 2026-12-06),
which capped every "tensorrt_llm alone" and scaling figure there. Each process gets an equal share of the
concurrency and of the requests (its prompts seeded apart), loads its tokenizer and probes the model first,
and only then do all start together; the level's wall time runs from that start to the last process's end, and
the records of all processes are summarised together (``repo_builder.bench_stats.summarize``; perf_counter is
CLOCK_MONOTONIC on Linux, one clock for every process).
"""

from __future__ import annotations

import multiprocessing as mp
import time
from collections.abc import Callable
from typing import Any

from bench_cpu_measure import ENGINE_MODEL, SYNTHETIC_SPEC, cpu_delta, sample

Record = tuple[int, tuple[int, ...], int, "int | None", "str | None"]


def split(total: int, parts: int) -> list[int]:
    """``total`` in ``parts`` near-equal shares, larger ones first; shares of 0 are dropped."""
    base, extra = divmod(total, parts)
    return [n for n in (base + (1 if i < extra else 0) for i in range(parts)) if n > 0]


def _text_job(kw: dict[str, Any], ready: Any, go: Any, out: Any) -> None:
    """One client process of a text level: ``repo-builder bench``'s probe, then its level loop."""
    from repo_builder.bench import BenchSettings, _probe, _records, _run_level
    from repo_builder.client import load_tokenizer, token_counter

    try:
        settings = BenchSettings(**kw)
        tokenizer = load_tokenizer(settings.tokenizer_dir) if settings.tokenizer_dir else None
        count = token_counter(tokenizer) if tokenizer is not None else None
        info, _, prompts, _ = _probe(settings, tokenizer)
        ready.put(None)
        go.wait()
        cpu0 = time.process_time()
        done, _, _ = _run_level(settings, info, prompts, settings.concurrency[0], None)
        recs = _records(done, info, count)
        out.put(
            ([(r.start_ns, r.chunk_ns, r.end_ns, r.output_tokens, r.error) for r in recs], time.process_time() - cpu0)
        )
    except BaseException as exc:  # noqa: BLE001 - reported by the parent
        ready.put(None)
        out.put(exc)


def stream_token_ids(url: str, concurrency: int, indices: range, input_tokens: int, output_tokens: int) -> list[Any]:
    """Stream random token ids straight to ``tensorrt_llm`` (``LLMClient.infer_token_ids``, gRPC, streaming) with
    ``concurrency`` threads, request ``i`` of ``indices`` seeded by ``i``; returns the results in finishing order.
    Raises the first exception a thread met."""
    import random
    import threading

    from repo_builder.client import LLMClient

    lock = threading.Lock()
    counter = iter(indices)
    results: list[Any] = []
    failures: list[BaseException] = []

    def worker() -> None:
        try:
            with LLMClient(url, "grpc", ENGINE_MODEL) as client:
                while True:
                    with lock:
                        i = next(counter, None)
                    if i is None:
                        return
                    rng = random.Random(i)
                    ids = [rng.randrange(3, SYNTHETIC_SPEC["vocab_size"]) for _ in range(input_tokens)]
                    res = client.infer_token_ids(ids, output_tokens, streaming=True)
                    with lock:
                        results.append(res)
        except BaseException as exc:  # noqa: BLE001 - raised below, in the caller's thread
            failures.append(exc)

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if failures:
        raise failures[0]
    return results


def _direct_job(kw: dict[str, Any], ready: Any, go: Any, out: Any) -> None:
    """One client process of a ``tensorrt_llm`` level: :func:`stream_token_ids` with its share."""
    try:
        ready.put(None)
        go.wait()
        cpu0 = time.process_time()
        indices = range(kw["first"], kw["first"] + kw["requests"])
        results = stream_token_ids(kw["url"], kw["concurrency"], indices, kw["input_tokens"], kw["output_tokens"])
        recs = [
            (
                r.start_ns,
                tuple(r.chunk_times_ns),
                r.end_ns,
                kw["output_tokens"] if r.ok else None,
                None if r.ok else str(r.error),
            )
            for r in results
        ]
        out.put((recs, time.process_time() - cpu0))
    except BaseException as exc:  # noqa: BLE001
        ready.put(None)
        out.put(exc)


def run_procs(
    job: Callable[..., None], kws: list[dict[str, Any]], pids: dict[str, int]
) -> tuple[list[Any], float, float, dict[str, float]]:
    """Run ``job`` in one spawned process per ``kws`` entry, all started together once every one is ready.

    Returns (``RequestRecord`` list of all processes, wall seconds, client CPU seconds of all, server CPU
    seconds by process over the window). Raises the first exception a process reported.
    """
    from repo_builder.bench_stats import RequestRecord

    ctx = mp.get_context("spawn")
    ready, out, go = ctx.Queue(), ctx.Queue(), ctx.Event()
    procs = [ctx.Process(target=job, args=(kw, ready, go, out), daemon=True) for kw in kws]
    for p in procs:
        p.start()
    try:
        for _ in procs:
            ready.get(timeout=300)
        before = sample(pids) if pids else {}
        t0 = time.perf_counter()
        go.set()
        results = [out.get(timeout=3600) for _ in procs]
        wall = time.perf_counter() - t0
        delta = cpu_delta(before, sample(pids)) if pids else {}
    finally:
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
    for r in results:
        if isinstance(r, BaseException):
            raise r
    records = [RequestRecord(*rec) for recs, _ in results for rec in recs]
    return records, wall, sum(cpu for _, cpu in results), delta


def text_kws(base: dict[str, Any], concurrency: int, requests: int, procs: int) -> list[dict[str, Any]]:
    """The ``BenchSettings`` keywords of each process: its share of the concurrency and requests, its own seed."""
    shares = split(concurrency, procs)
    reqs = split(requests, len(shares))
    return [
        {**base, "concurrency": [c], "requests": r, "seed": base.get("seed", 0) + 1000 * i}
        for i, (c, r) in enumerate(zip(shares, reqs))
    ]


def direct_kws(base: dict[str, Any], concurrency: int, requests: int, procs: int) -> list[dict[str, Any]]:
    """The keywords of each ``tensorrt_llm`` process: its share, and the first request index it sends."""
    shares = split(concurrency, procs)
    reqs = split(requests, len(shares))
    starts = [sum(reqs[:i]) for i in range(len(reqs))]
    return [{**base, "concurrency": c, "requests": r, "first": s} for c, r, s in zip(shares, reqs, starts)]
