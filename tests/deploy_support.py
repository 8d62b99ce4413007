"""Rendered repositories for the deploy tests: a TensorRT-LLM engine directory (``config.json`` in the 0.8+
layout with tp x pp ranks and empty ``rank<N>.engine`` files: the deploy code reads only the lock file) and
the packaged Mistral v1 SentencePiece tokenizer (mistral-common), rendered with repo_builder.render."""

from __future__ import annotations

import json
from pathlib import Path

from repo_builder.render import render_repository
from repo_builder.testing import packaged_tokenizer


def trtllm_engine(out: Path, tp: int, pp: int) -> Path:
    """An engine directory for a LLaMA-architecture engine built with ``tp`` x ``pp`` ranks (32000 vocab)."""
    out.mkdir(parents=True)
    cfg = {
        "version": "0.13.0",
        "pretrained_config": {
            "architecture": "LlamaForCausalLM",
            "dtype": "float16",
            "vocab_size": 32000,
            "mapping": {"tp_size": tp, "pp_size": pp, "world_size": tp * pp},
            "max_position_embeddings": 4096,
            "logits_dtype": "float32",
        },
        "build_config": {
            "max_batch_size": 8,
            "max_input_len": 1024,
            "max_seq_len": 2048,
            "max_beam_width": 1,
            "kv_cache_type": "PAGED",
            "plugin_config": {
                "gpt_attention_plugin": "float16",
                "remove_input_padding": True,
                "paged_kv_cache": True,
                "context_fmha": True,
                "tokens_per_block": 64,
            },
        },
    }
    (out / "config.json").write_text(json.dumps(cfg))
    for r in range(tp * pp):
        (out / f"rank{r}.engine").write_bytes(b"")
    return out


def rendered_repo(base: Path, tp: int, pp: int, *, serve_path: str = "/models/llama") -> Path:
    """Render a repository for a tp x pp engine into ``base/repo`` to be served at ``serve_path``."""
    tok = packaged_tokenizer("mistral-v1", base / "tokenizer")
    engine = trtllm_engine(base / "engine", tp, pp)
    render_repository(engine, tok, base / "repo", serve_path=serve_path)
    return base / "repo"


def tiny_llama_repo(base: Path) -> tuple[Path, Path]:
    """``(repository, checkpoint)``: the tiny random LLaMA (repo_builder.testing.make_tiny_llama) with the
    packaged Mistral v1 tokenizer, rendered for the CPU reference engine (world size 1)."""
    from repo_builder.testing import make_tiny_llama

    tok = packaged_tokenizer("mistral-v1", base / "tokenizer")
    ckpt = make_tiny_llama(base / "ckpt", tok, seed=0)
    render_repository(ckpt, ckpt, base / "repo")
    return base / "repo", ckpt


def greedy_text(ckpt: Path, prompt: str, n_tokens: int) -> str:
    """What the server must answer: transformers' greedy ``generate()`` on ``ckpt``, decoded without special
    tokens (the repository's defaults: prompt with BOS, prompt not echoed)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(ckpt))
    model = AutoModelForCausalLM.from_pretrained(str(ckpt), dtype=torch.float32).eval()
    ids = tok(prompt)["input_ids"]
    with torch.inference_mode():
        out = model.generate(torch.tensor([ids]), max_new_tokens=n_tokens, do_sample=False, pad_token_id=0)
    return tok.decode(out[0, len(ids) :].tolist(), skip_special_tokens=True)


def http_generate(host_port: str, model: str, payload: dict) -> dict:
    """POST ``/v2/models/<model>/generate`` and return the JSON body (AssertionError with the server's text)."""
    import urllib.error
    import urllib.request

    req = urllib.request.Request(
        f"http://{host_port}/v2/models/{model}/generate",
        data=json.dumps(payload).encode(),
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(req, timeout=120) as resp:
            return json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        raise AssertionError(f"HTTP {exc.code}: {exc.read().decode()}") from exc
