#!/usr/bin/env python3
"""What the OpenAI front end costs, measured beside direct gRPC streaming in one run (issue 14).

Renders a streaming synthetic-engine repository (``--delay-ms`` per token, default 5: the engine paces the
tokens like a real one instead of saturating the 2 cores), serves it with ``repo_builder.server.TritonServer``
(ports from ``--port-base``), starts ``repo-builder openai`` in front of it, and for each concurrency level
(default 1, 4, 16, 64) sends ``--requests`` streamed requests two ways, alternating (direct, front end,
direct, ... ``--repeats`` times):

* direct: ``repo_builder.openai.backend.TritonBackend`` in this process, one gRPC ``ModelStreamInfer``
  per request to the ensemble, exactly the request the front end sends;
* front end: ``POST /v1/chat/completions`` with ``stream: true`` through the real ``openai`` SDK
  (``AsyncOpenAI``, ``--client openai``, the default) or over raw httpx with the SSE parsed line by line
  (``--client httpx``: less client CPU on a small machine);
* with ``--before DIR``: a second front end started from the source tree ``DIR`` (e.g. ``git archive main``
  unpacked), asked the same way, in the same rotation, so a change is measured before/after in one run.

Every request asks for exactly ``--output-tokens`` tokens (``max_tokens`` = ``min_tokens``; the synthetic
engine never emits its end id). Figures per level (medians over repeats):

* front end CPU per streamed token: ``utime + stime`` of the front-end process and its children (uvicorn
  workers; ``/proc/<pid>/stat``) over the level / (successful requests x output tokens), in ms;
* TTFT p50 (first content token) direct and through the front end, and the difference (added TTFT);
* errors (any non-200, error event, missing ``[DONE]``, wrong token count).

Usage::

    .venv/bin/python scripts/bench_openai.py [--concurrency 1,4,16,64] [--requests 64] [--repeats 3] \\
        [--output-tokens 64] [--delay-ms 5] [--json results/openai.json] [--keep-serving SECONDS] \\
        [--client openai|httpx] [--before OLD_TREE]

``--repo DIR`` serves an already rendered streaming repository instead (the GPU host's 1.1B LLaMA on the
CUDA reference engine, issue 29): no render, ``--delay-ms`` unused, and the front end is asked through
``POST /v1/completions`` with the message as ``prompt`` (a tokenizer without a chat template has no chat
endpoint), the model name taken from ``GET /v1/models``.

``--keep-serving`` leaves the server and the front end up that long after the run (to point aiperf at
the printed URL), then stops them.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_common import fmt, load_average, machine, proc_cpu_s, summary  # noqa: E402

SYNTHETIC_SPEC = {"vocab_size": 32000, "max_batch_size": 64, "max_input_len": 1024, "max_seq_len": 2048}
NAME = "synthetic-llm"
MESSAGES = [{"role": "user", "content": "Write a long story about a lighthouse keeper and the sea."}]


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    s = sorted(values)
    k = (len(s) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


async def run_direct(backend, fields: dict, requests: int, concurrency: int, tokens: int) -> dict:
    """Direct gRPC streaming: TTFT (ms) per request, errors."""
    sem = asyncio.Semaphore(concurrency)
    ttft: list[float] = []
    errors = 0

    async def one(i: int) -> None:
        nonlocal errors
        async with sem:
            t0 = time.perf_counter()
            first = None
            n = n_sum = 0
            try:
                async for chunk in backend.generate(fields, f"direct-{os.getpid()}-{i}-{time.monotonic_ns()}"):
                    if chunk.text and first is None:
                        first = time.perf_counter()
                    if chunk.num_output_tokens:
                        # cumulative (synthetic engine) or per response (reference engine): either adds up
                        n = max(n, chunk.num_output_tokens)
                        n_sum += chunk.num_output_tokens
            except Exception as exc:  # noqa: BLE001 - counted
                errors += 1
                if errors == 1:
                    print(f"# first direct error: {exc!r}", flush=True)
                return
            if first is None or tokens not in (n, n_sum):
                errors += 1
                if errors == 1:
                    print(f"# first direct error: {n} tokens (asked {tokens}), first text seen {first is not None}")
                return
            ttft.append((first - t0) * 1000)

    await asyncio.gather(*(one(i) for i in range(requests)))
    return {"ttft": ttft, "errors": errors}


def content(choice: dict) -> str | None:
    """The text of a streamed choice: ``delta.content`` (chat) or ``text`` (completions)."""
    return choice["delta"].get("content") if "delta" in choice else choice.get("text")


async def run_front(client, url: str, body: dict, requests: int, concurrency: int, tokens: int) -> dict:
    """Through the front end: TTFT (ms) of the first content delta, errors. ``client``: an ``openai.AsyncOpenAI``
    (the SDK parses the stream) or an ``httpx.AsyncClient`` (SSE parsed here)."""
    sem = asyncio.Semaphore(concurrency)
    ttft: list[float] = []
    errors = 0
    sdk = not hasattr(client, "stream")

    def failed(what: str) -> None:
        nonlocal errors
        errors += 1
        if errors == 1:
            print(f"# first front-end error: {what}", flush=True)

    async def one_sdk() -> tuple[float | None, int | None]:
        first = completion = None
        chat = "messages" in body
        extra = {k: v for k, v in body.items() if k not in ("model", "messages", "prompt", "max_tokens", "stream")}
        kwargs = {"messages": body["messages"]} if chat else {"prompt": body["prompt"]}
        create = client.chat.completions.create if chat else client.completions.create
        stream = await create(
            model=body["model"], max_tokens=body["max_tokens"], stream=True, extra_body=extra, **kwargs
        )
        async for chunk in stream:
            if chunk.usage is not None:
                completion = chunk.usage.completion_tokens
            if first is None and chunk.choices:
                choice = chunk.choices[0]
                if choice.delta.content if chat else choice.text:
                    first = time.perf_counter()
        return first, completion

    async def one_httpx() -> tuple[float | None, int | None]:
        first = completion = None
        done = False
        async with client.stream("POST", url, json=body) as resp:
            if resp.status_code != 200:
                raise RuntimeError(f"HTTP {resp.status_code} {(await resp.aread())[:300]!r}")
            async for line in resp.aiter_lines():
                if not line.startswith("data: "):
                    continue
                data = line[6:]
                if data == "[DONE]":
                    done = True
                    break
                msg = json.loads(data)
                if "error" in msg:
                    raise RuntimeError(f"error event {msg}")
                if msg.get("usage"):
                    completion = msg["usage"]["completion_tokens"]
                if first is None and msg["choices"] and content(msg["choices"][0]):
                    first = time.perf_counter()
        return (first, completion) if done else (first, None)

    async def one() -> None:
        async with sem:
            t0 = time.perf_counter()
            try:
                first, completion = await (one_sdk() if sdk else one_httpx())
            except Exception as exc:  # noqa: BLE001 - counted
                failed(repr(exc)[:300])
                return
            if first is None or completion != tokens:
                failed(f"text seen {first is not None}, usage.completion_tokens {completion} (asked {tokens})")
                return
            ttft.append((first - t0) * 1000)

    await asyncio.gather(*(one() for _ in range(requests)))
    return {"ttft": ttft, "errors": errors}


def tree_cpu_s(pid: int) -> float | None:
    """utime + stime (s) of ``pid`` and its descendants (a uvicorn master and its workers)."""
    total = proc_cpu_s(pid)
    if total is None:
        return None
    try:
        kids = [int(c) for task in Path(f"/proc/{pid}/task").iterdir() for c in (task / "children").read_text().split()]
    except OSError:
        kids = []
    for kid in kids:
        total += tree_cpu_s(kid) or 0.0
    return total


def start_front(
    repo: Path, grpc_url: str, port: int, log: Path, tree: Path | None = None, workers: int = 1
) -> subprocess.Popen:
    """``repo-builder openai`` on ``port``, from the source tree ``tree`` (default: this one)."""
    import urllib.request

    env = dict(os.environ)
    if tree is not None:
        env["PYTHONPATH"] = str(tree) + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "repo_builder",
            "openai",
            "--repo",
            str(repo),
            "--grpc-url",
            grpc_url,
            "--port",
            str(port),
            *(["--workers", str(workers)] if workers > 1 else []),
        ],
        stdout=open(log, "wb"),
        stderr=subprocess.STDOUT,
        cwd=tree,
        env=env,
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"front end exited: {log.read_text()}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as resp:
                if resp.status == 200:
                    return proc
        except OSError:
            pass
        time.sleep(0.3)
    proc.terminate()
    raise SystemExit("front end not ready")


def served_name(port: int) -> str:
    """The first model id ``GET /v1/models`` lists."""
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=10) as resp:
        return str(json.loads(resp.read())["data"][0]["id"])


def _direct_fields(args) -> dict:
    """The ensemble's inputs of a direct streamed request: the first message, exactly ``--output-tokens`` tokens
    (``max_tokens`` = ``min_tokens``), token counts returned, the input left out of the output."""
    return {
        "text_input": MESSAGES[0]["content"],
        "max_tokens": args.output_tokens,
        "stream": True,
        "min_tokens": args.output_tokens,
        "return_num_input_tokens": True,
        "return_num_output_tokens": True,
        "exclude_input_in_output": True,
    }


def _front_body(args, port0: int) -> tuple[dict, str]:
    """(request body, route) for the front ends: a streamed chat completion with usage, or, for ``--repo``
    (served name asked of the front end at ``port0``), a streamed completion of the same text."""
    body: dict = {
        "model": NAME if args.repo is None else served_name(port0),
        "messages": MESSAGES,
        "max_tokens": args.output_tokens,
        "min_tokens": args.output_tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    path = "/v1/chat/completions"
    if args.repo is not None:
        body["prompt"] = body.pop("messages")[0]["content"]
        path = "/v1/completions"
    return body, path


def _front_clients(args, fronts: list[tuple[str, int, int]], http, limits) -> dict:
    """{front label: client}: an ``openai.AsyncOpenAI`` per front end (``--client openai``, own httpx client with
    ``limits``), else the shared ``httpx.AsyncClient`` ``http``."""
    import httpx
    import openai

    clients = {}
    for label, _pid, port in fronts:
        if args.client == "openai":
            clients[label] = openai.AsyncOpenAI(
                base_url=f"http://127.0.0.1:{port}/v1",
                api_key="none",
                max_retries=0,
                http_client=httpx.AsyncClient(timeout=300, limits=limits),
            )
        else:
            clients[label] = http
    return clients


async def _front_run(args, client, url: str, body: dict, pid: int, c: int, direct: dict) -> dict:
    """One :func:`run_front` round at concurrency ``c`` plus ``wall_s``, the front end's process-tree CPU per
    generated token (``cpu_ms_per_token``, None without readable CPU or successes) and ``added_ttft`` (its TTFT
    p50 minus the ``direct`` round's, ms)."""
    cpu0 = tree_cpu_s(pid)
    t0 = time.perf_counter()
    f = await run_front(client, url, body, args.requests, c, args.output_tokens)
    f["wall_s"] = time.perf_counter() - t0
    cpu1 = tree_cpu_s(pid)
    ok = args.requests - f["errors"]
    f["cpu_ms_per_token"] = (
        (cpu1 - cpu0) * 1000 / (ok * args.output_tokens) if ok and cpu0 is not None and cpu1 is not None else None
    )
    f["added_ttft"] = (
        percentile(f["ttft"], 0.5) - percentile(direct["ttft"], 0.5) if f["ttft"] and direct["ttft"] else None
    )
    return f


def _level_row(args, c: int, runs: dict[str, list[dict]], fronts: list[tuple[str, int, int]]) -> tuple[dict, str]:
    """(the level's summaries over its rounds, its printed line without the trailing errors/load part)."""
    direct_runs = runs["direct"]
    row: dict = {
        "concurrency": c,
        "requests_per_run": args.requests,
        "direct_ttft_p50_ms": summary([percentile(r["ttft"], 0.5) for r in direct_runs if r["ttft"]]),
        "direct_errors": sum(r["errors"] for r in direct_runs),
        "direct_tokens_per_s": summary(
            [(args.requests - r["errors"]) * args.output_tokens / r["wall_s"] for r in direct_runs]
        ),
    }
    line = f"c={c:>3}  TTFT p50 direct {fmt(row['direct_ttft_p50_ms']['median'], 2)} ms"
    for label, _, _ in fronts:
        fr = runs[label]
        pre = "front" if label == "front" else f"front_{label}"
        row[f"{pre}_ttft_p50_ms"] = summary([percentile(r["ttft"], 0.5) for r in fr if r["ttft"]])
        row[f"added_ttft_p50_ms{'' if label == 'front' else '_' + label}"] = added = summary(
            [r["added_ttft"] for r in fr if r["added_ttft"] is not None]
        )
        row[f"{pre}_cpu_ms_per_token"] = cpu = summary(
            [r["cpu_ms_per_token"] for r in fr if r["cpu_ms_per_token"] is not None]
        )
        row[f"{pre}_errors"] = sum(r["errors"] for r in fr)
        row[f"{pre}_tokens_per_s"] = tps = summary(
            [(args.requests - r["errors"]) * args.output_tokens / r["wall_s"] for r in fr]
        )
        line += (
            f"; [{label}] added TTFT {fmt(added['median'], 2)} ms (min {fmt(added['min'], 2)}, max "
            f"{fmt(added['max'], 2)}), CPU {fmt(cpu['median'], 4)} ms/token (min {fmt(cpu['min'], 4)}, "
            f"max {fmt(cpu['max'], 4)}), errors {row[f'{pre}_errors']}, tokens/s {fmt(tps['median'], 0)}"
        )
    return row, line


async def bench(args, server, fronts: list[tuple[str, int, int]]) -> list[dict]:
    """Per level, ``--repeats`` rounds of: direct, then each front end ``(label, pid, port)`` of ``fronts``."""
    import httpx

    from repo_builder.openai.backend import TritonBackend

    backend = TritonBackend(server.grpc_url, "ensemble")
    await backend.open()
    fields = _direct_fields(args)
    body, path = _front_body(args, fronts[0][2])
    limits = httpx.Limits(max_connections=256, max_keepalive_connections=256)
    rows = []
    async with httpx.AsyncClient(timeout=300, limits=limits) as http:
        clients = _front_clients(args, fronts, http, limits)
        # warm-up: every path
        await run_direct(backend, fields, 4, 4, args.output_tokens)
        for label, _pid, port in fronts:
            await run_front(clients[label], f"http://127.0.0.1:{port}{path}", body, 4, 4, args.output_tokens)
        for c in args.concurrency:
            runs: dict[str, list[dict]] = {"direct": [], **{label: [] for label, _, _ in fronts}}
            for _ in range(args.repeats):
                t0 = time.perf_counter()
                d = await run_direct(backend, fields, args.requests, c, args.output_tokens)
                d["wall_s"] = time.perf_counter() - t0
                runs["direct"].append(d)
                for label, pid, port in fronts:
                    url = f"http://127.0.0.1:{port}{path}"
                    runs[label].append(await _front_run(args, clients[label], url, body, pid, c, d))
            row, line = _level_row(args, c, runs, fronts)
            rows.append(row)
            print(line + f"; direct errors {row['direct_errors']}; load {load_average()}", flush=True)
        if args.client == "openai":
            for cl in clients.values():
                await cl.close()
    await backend.close()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--concurrency", default="1,4,16,64", type=lambda s: [int(x) for x in s.split(",")])
    parser.add_argument("--requests", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--output-tokens", type=int, default=64)
    parser.add_argument("--delay-ms", type=float, default=5.0)
    parser.add_argument("--port-base", type=int, default=20800)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--keep-serving", type=float, default=0.0)
    parser.add_argument("--repo", type=Path, default=None, help="an already rendered streaming repository")
    parser.add_argument("--client", choices=("openai", "httpx"), default="openai")
    parser.add_argument("--before", type=Path, default=None, help="source tree of a second front end (before)")
    args = parser.parse_args()

    from repo_builder.render import render_repository
    from repo_builder.server import LaunchConfig, TritonServer
    from repo_builder.testing import packaged_tokenizer

    with tempfile.TemporaryDirectory(prefix="bench-openai-") as tmp:
        work = Path(tmp)
        if args.repo is not None:
            repo = args.repo
        else:
            engine = work / NAME
            engine.mkdir()
            (engine / "synthetic_engine.json").write_text(json.dumps(SYNTHETIC_SPEC))
            tok = packaged_tokenizer("mistral-v1-instruct", work / "tok")
            repo = work / "repo"
            render_repository(
                engine,
                tok,
                repo,
                user_values={"synthetic_token_delay_ms": args.delay_ms, "triton_max_batch_size": 64},
                streaming=True,
            )
        p = args.port_base
        config = LaunchConfig(
            model_repo=repo, http_port=p, grpc_port=p + 1, metrics_port=p + 2, no_mpi=True, timeout=300
        )
        with TritonServer(config) as server:
            front = start_front(repo, server.grpc_url, p + 3, work / "front.log")
            fronts = [("front", front.pid, p + 3)]
            before = None
            if args.before is not None:
                before = start_front(repo, server.grpc_url, p + 4, work / "before.log", tree=args.before.resolve())
                fronts.append(("before", before.pid, p + 4))
            try:
                print(
                    f"machine: {machine()}; delay {args.delay_ms} ms/token, {args.output_tokens} tokens, "
                    f"{args.requests} requests x {args.repeats} repeats per level",
                    flush=True,
                )
                rows = asyncio.run(bench(args, server, fronts))
                if args.json:
                    args.json.parent.mkdir(parents=True, exist_ok=True)
                    args.json.write_text(
                        json.dumps(
                            {
                                "machine": machine(),
                                "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
                                "levels": rows,
                            },
                            indent=2,
                        )
                        + "\n"
                    )
                if args.keep_serving > 0:
                    print(
                        f"serving the OpenAI API at http://127.0.0.1:{p + 3}/v1 (model {NAME}) for "
                        f"{args.keep_serving:.0f} s",
                        flush=True,
                    )
                    time.sleep(args.keep_serving)
            finally:
                for proc in (front, before):
                    if proc is not None:
                        proc.terminate()
                        proc.wait(timeout=30)


if __name__ == "__main__":
    main()
