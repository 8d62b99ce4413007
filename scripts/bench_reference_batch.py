"""In-flight batching of the CPU reference engine, without Triton (docs/performance.md, section 6.2).

    python scripts/bench_reference_batch.py --model ~/.cache/repo-builder/smollm2 [--streams 1,8] [--tokens 64]

For each stream count: that many greedy requests (the same chat-like prompt with a different suffix each) go
through the engine's own :class:`~repo_builder.runtime.engine_scheduler.Scheduler` at once; prints wall
tokens/s, process CPU milliseconds per token, the median time to first token (ms from the start of the run to
each stream's first generated token), the number of batched decode and prefill forwards, and checks that
stream 0's tokens equal the single-stream run of the same prompt.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--streams", default="1,8")
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    import numpy as np
    from engine_fakes import engine_model_config, req_inputs
    from transformers import AutoTokenizer

    from repo_builder.profile.contract import load_contract  # noqa: F401  (tests' helper below needs the package)
    from repo_builder.runtime.engine_core import (
        CollectingSink,
        EngineLimits,
        ModelIO,
        RequestGroup,
        Scheduler,
        parse_request,
    )
    from repo_builder.runtime.reference import ReferenceBackend

    model = os.path.expanduser(args.model)
    tok = AutoTokenizer.from_pretrained(model)
    backend = ReferenceBackend(model, num_threads=args.threads)
    io = ModelIO.from_config(engine_model_config("trtllm-1.2"))
    limits = EngineLimits(
        vocab_size=backend.vocab_size, max_input_len=1024, max_seq_len=2048, exclude_input_in_output=True
    )
    prompts = [
        f"Write a short story about a robot number {i} who learns to paint."
        for i in range(max(int(x) for x in args.streams.split(",")))
    ]

    def run(n: int, tokens: int | None = None) -> tuple[float, float, list[list[int]], int, int, float]:
        sched = Scheduler(backend)
        sinks, groups = [], []
        f0, p0 = backend.batched_forwards, getattr(backend, "batched_prefills", 0)
        for p in prompts[:n]:
            sink = CollectingSink()
            inputs = req_inputs(tok(p)["input_ids"], tokens or args.tokens, end_id=np.array([-1], np.int32))
            groups.append(RequestGroup(parse_request(inputs, io, limits), sink, io))
            sched.submit(groups[-1])
            sinks.append(sink)
        start_ns, w, c = time.time_ns(), time.perf_counter(), time.process_time()
        sched.run_until_idle()
        w, c = time.perf_counter() - w, time.process_time() - c
        outs = []
        for sink in sinks:
            o = sink.responses[-1][0]
            outs.append(o["output_ids"][0, 0, : int(o["sequence_length"][0, 0])].tolist())
        ttft = statistics.median((g.seqs[0].first_token_ns - start_ns) / 1e9 for g in groups)
        return w, c, outs, backend.batched_forwards - f0, getattr(backend, "batched_prefills", 0) - p0, ttft

    single: dict[int, list[int]] = {}
    print(f"load average {os.getloadavg()[0]:.1f}, torch threads {args.threads}")
    base = None
    run(2, 4)  # warm-up (first forwards allocate and page in the weights)
    for n in (int(x) for x in args.streams.split(",")):
        w, c, outs, batched, prefills, ttft = run(n)
        tokens = sum(len(o) for o in outs)
        if n == 1 and 0 not in single:
            single[0] = outs[0]
        same = "n/a"
        if 0 in single and n > 1:
            same = str(outs[0] == single[0])
        tps = tokens / w
        base = base or (tps if n == 1 else None)
        print(
            f"{n:>2} streams: {tokens} tokens, {tps:.1f} tokens/s wall ({(tps / base) if base else 0:.2f}x), "
            f"{c * 1e3 / tokens:.1f} ms CPU/token, TTFT p50 {ttft * 1e3:.0f} ms, batched forwards {batched}, "
            f"batched prefills {prefills}, stream 0 equals single: {same}"
        )


if __name__ == "__main__":
    main()
