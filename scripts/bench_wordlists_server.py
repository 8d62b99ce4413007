#!/usr/bin/env python3
"""Does a request with a huge stop-word list hold up other clients? (docs/performance.md §6.1, issue 15)

Renders a streaming synthetic-engine repository (engine cost zero), serves it with tritonserver and, per
model and round, over gRPC streaming:

* ``alone``: the TTFT of a small request (short prompt, no stop words) on an idle server;
* ``beside fresh``: a request with ``--words`` stop words never sent before is started (from a second
  client process, so that its client-side work holds no GIL of this one); ``--gap-ms`` later small
  requests are sent one after another until the big one is done: their worst and median TTFT, how many
  there were, the big request's TTFT, and the CPU milliseconds of every server process in the round
  (``/proc``, 10 ms ticks; includes the small requests, whose own cost is the ``alone`` figure);
* ``beside repeat``: the same with the list of the previous round sent again (the row cache).

Prints medians with min-max over ``--rounds``. Usage::

    .venv/bin/python scripts/bench_wordlists_server.py [--words 10000] [--rounds 5] \\
        [--set preprocessing_instance_count=2] [--tokenizer-dir DIR]
"""

from __future__ import annotations

import argparse
import multiprocessing
import queue
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_common import TOKENIZER_HELP, load_average, machine, tokenizer_dir_or_default  # noqa: E402
from bench_server_cpu import render_repo, sample, server_processes  # noqa: E402


def stream_ttft(url: str, model: str, prompt: str, stop_words: list[str], max_tokens: int, out: dict) -> None:
    """One streamed request on its own gRPC stream; ``out['ttft_ms']``/``out['e2e_ms']`` or ``out['error']``."""
    import numpy as np
    import tritonclient.grpc as grpcclient

    def tensor(name: str, arr: np.ndarray, dtype: str) -> grpcclient.InferInput:
        t = grpcclient.InferInput(name, list(arr.shape), dtype)
        t.set_data_from_numpy(arr)
        return t

    inputs = [
        tensor("text_input", np.array([[prompt.encode()]], dtype=object), "BYTES"),
        tensor("max_tokens", np.array([[max_tokens]], dtype=np.int32), "INT32"),
        tensor("stream", np.array([[True]], dtype=bool), "BOOL"),
    ]
    if stop_words:
        inputs.append(tensor("stop_words", np.array([[w.encode() for w in stop_words]], dtype=object), "BYTES"))
    events: queue.Queue = queue.Queue()
    client = grpcclient.InferenceServerClient(url)
    client.start_stream(callback=lambda result, error: events.put((result, error, time.perf_counter())))
    t0 = time.perf_counter()
    client.async_stream_infer(model, inputs, request_id="r", enable_empty_final_response=True)
    try:
        while True:
            result, error, t = events.get(timeout=300)
            if error is not None:
                out["error"] = str(error)
                return
            response = result.get_response()
            if response.outputs and "ttft_ms" not in out:
                out["ttft_ms"] = (t - t0) * 1e3
            if response.parameters["triton_final_response"].bool_param:
                out["e2e_ms"] = (t - t0) * 1e3
                return
    finally:
        client.stop_stream()
        client.close()


def _big_worker(url: str, model: str, words: list[str], max_tokens: int, ready, go, results) -> None:
    """The big request from its own process (its client-side serialization must not hold the small
    request's GIL): signals ``ready``, waits for ``go``, puts its result dict."""
    import tritonclient.grpc  # noqa: F401 - imported before the clock starts

    ready.set()
    go.wait()
    out: dict = {}
    stream_ttft(url, model, "Hi", words, max_tokens, out)
    results.put(out)


def fmt(values: list[float]) -> str:
    if not values:
        return "-"
    return f"{statistics.median(values):.1f} ({min(values):.1f}-{max(values):.1f})"


def _parse_args() -> argparse.Namespace:
    """The command line (``--help`` is this module's docstring and the options below)."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--words", type=int, default=10_000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--gap-ms", type=float, default=20.0, help="delay between the big and the small request")
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--models", default="ensemble,tensorrt_llm_bls")
    ap.add_argument(
        "--tokenizer-dir",
        default=None,
        help=TOKENIZER_HELP,
    )
    ap.add_argument("--set", action="append", default=[], help="KEY=VALUE for render")
    ap.add_argument("--port-base", type=int, default=20800)
    return ap.parse_args()


class _WordLists:
    """Stop-word lists never sent before (each call's words carry a new serial number)."""

    def __init__(self, words: int) -> None:
        self.words, self.serial = words, 0

    def fresh(self) -> list[str]:
        """``words`` new two-word stop phrases."""
        self.serial += 1
        return [f"stop{self.serial}x{i} phrase" for i in range(self.words)]


def _big_round(
    ctx: Any, url: str, model: str, words: list[str], args: argparse.Namespace, pids: dict[str, int]
) -> tuple[list[float], dict, dict[str, float], dict[str, float]]:
    """One big request with ``words`` (in a spawned process) and small requests back to back beside it, from
    ``--gap-ms`` after its start until it ends. Returns (the small requests' TTFTs in ms, the big request's
    result, CPU samples of ``pids`` before and after).

    Raises:
        SystemExit: a small request failed.
    """
    ready, go, results = ctx.Event(), ctx.Event(), ctx.Queue()
    proc = ctx.Process(target=_big_worker, args=(url, model, words, args.max_tokens, ready, go, results))
    proc.start()
    ready.wait(120)
    before = sample(pids)
    go.set()
    time.sleep(args.gap_ms / 1e3)
    smalls: list[float] = []
    while not smalls or results.empty():  # small requests back to back while the big one runs
        small: dict = {}
        stream_ttft(url, model, "Hello there", [], args.max_tokens, small)
        if "error" in small:
            raise SystemExit(f"{model}: {small['error']}")
        smalls.append(small["ttft_ms"])
    big = results.get(timeout=300)
    proc.join()
    after = sample(pids)
    return smalls, big, before, after


def _bench_model(
    ctx: Any, url: str, model: str, args: argparse.Namespace, pids: dict[str, int], lists: _WordLists
) -> dict[str, list[float]]:
    """A warm-up, then ``--rounds`` rounds of: a small request alone, a big request with fresh stop words, one
    with the same words again. Returns {figure: one value per round} (TTFTs in ms, CPU in ms, counts).

    Raises:
        SystemExit: a request failed.
    """
    pre = [name for name in pids if name.startswith("preprocessing")]
    warm: dict = {}
    stream_ttft(url, model, "Hello", lists.fresh()[:100], args.max_tokens, warm)
    res: dict[str, list[float]] = {}
    last: list[str] = lists.fresh()
    for _ in range(args.rounds):
        alone: dict = {}
        stream_ttft(url, model, "Hello there", [], args.max_tokens, alone)
        res.setdefault("alone small TTFT", []).append(alone.get("ttft_ms", float("nan")))
        for kind in ("fresh", "repeat"):
            words = lists.fresh() if kind == "fresh" else last
            last = words
            smalls, big, before, after = _big_round(ctx, url, model, words, args, pids)
            if "error" in big:
                raise SystemExit(f"{model}: {big['error']}")
            res.setdefault(f"{kind}: small TTFT beside it, worst", []).append(max(smalls))
            res.setdefault(f"{kind}: small TTFT beside it, median", []).append(statistics.median(smalls))
            res.setdefault(f"{kind}: small requests beside it", []).append(len(smalls))
            res.setdefault(f"{kind}: big request TTFT", []).append(big["ttft_ms"])
            res.setdefault(f"{kind}: preprocessing CPU of the round", []).append(
                sum(after.get(n, 0) - before.get(n, 0) for n in pre) * 1e3
            )
            for name in pids:
                if name not in pre:
                    res.setdefault(f"{kind}: {name} CPU of the round", []).append(
                        (after.get(name, 0) - before.get(name, 0)) * 1e3
                    )
    return res


def main() -> int:
    """Render, serve, bench every model and print its figures; returns 0."""
    args = _parse_args()

    from repo_builder.server import LaunchConfig, TritonServer

    extra = dict(item.partition("=")[::2] for item in args.set)
    work = Path(tempfile.mkdtemp(prefix="rb-bench-words-"))
    args.tokenizer_dir = tokenizer_dir_or_default(args.tokenizer_dir, work)
    info = machine()
    print(f"# {info['date']}  {info['cpu']}  {info['cores']} cores  load {info['load_average_start']}  {args.set}")
    repo = render_repo(work, args.tokenizer_dir, extra)
    p = args.port_base
    cfg = LaunchConfig(model_repo=repo, http_port=p, grpc_port=p + 1, metrics_port=p + 2, no_mpi=True, timeout=600)
    lists = _WordLists(args.words)
    ctx = multiprocessing.get_context("spawn")
    with TritonServer(cfg) as server:
        url = server.grpc_url
        pids = server_processes(server.rank_pids()[0][0])
        for model in [m for m in args.models.split(",") if m]:
            res = _bench_model(ctx, url, model, args, pids, lists)
            print(f"\n## {model}, {args.words} stop words, gRPC streaming, {args.rounds} rounds (median (min-max) ms)")
            for key, values in res.items():
                print(f"  {key:<40} {fmt(values)}")
    print(f"\n# load average at the end {load_average()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
