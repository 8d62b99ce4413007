"""Helpers shared by the end-to-end tests: HTTP /generate, a gRPC stream collector, the OpenAI front end."""

from __future__ import annotations

import json
import queue
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

import numpy as np
import tritonclient.grpc as grpcclient
from cli_support import cli_argv, run_cli
from render_support import image_data_uri, random_pixels  # noqa: F401  (re-exported for the e2e tests)


def _http_post(url: str, payload: dict[str, Any], timeout: float) -> tuple[int, dict[str, Any]]:
    """POST ``payload`` as JSON; (HTTP status, JSON body), errors included."""
    req = urllib.request.Request(url, data=json.dumps(payload).encode(), headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")


def http_generate(server, model: str, payload: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    return _http_post(f"{server.http_url}/v2/models/{model}/generate", payload, timeout=120)


def http_infer(server, model: str, inputs: list[dict[str, Any]]) -> tuple[int, dict[str, Any]]:
    """KServe v2 ``/v2/models/<model>/infer`` with JSON ``inputs``; (HTTP status, JSON body)."""
    return _http_post(f"{server.http_url}/v2/models/{model}/infer", {"inputs": inputs}, timeout=300)


def grpc_input(name: str, arr: np.ndarray) -> Any:
    wire = {"int32": "INT32", "uint32": "UINT32", "bool": "BOOL", "object": "BYTES"}
    t = grpcclient.InferInput(name, list(arr.shape), wire[str(arr.dtype)])
    t.set_data_from_numpy(arr)
    return t


class Stream:
    """One gRPC stream; responses and errors collected per request id until each id is final."""

    def __init__(self, server) -> None:
        self.client = grpcclient.InferenceServerClient(server.grpc_url)
        self.events: queue.Queue[tuple[Any, Any]] = queue.Queue()
        self.client.start_stream(callback=lambda result, error: self.events.put((result, error)))

    def send(self, model: str, inputs: list[Any], request_id: str, outputs: list[str] | None = None) -> None:
        requested = [grpcclient.InferRequestedOutput(n) for n in outputs] if outputs else None
        self.client.async_stream_infer(
            model, inputs, request_id=request_id, outputs=requested, enable_empty_final_response=True
        )

    def collect(self, pending: set[str], timeout: float = 120.0) -> tuple[dict[str, list[Any]], list[str]]:
        """({request id: [result with outputs]}, error messages) until every pending id is final or failed."""
        got: dict[str, list[Any]] = {rid: [] for rid in pending}
        errors: list[str] = []
        pending = set(pending)
        while pending:
            result, error = self.events.get(timeout=timeout)
            if error is not None:
                errors.append(str(error))
                rid = next((r for r in pending if r in str(error)), None)
                pending.discard(rid if rid is not None else sorted(pending)[0])
                continue
            response = result.get_response()
            if response.outputs:
                got[response.id].append(result)
            if response.parameters["triton_final_response"].bool_param:
                pending.discard(response.id)
        return got, errors

    def close(self) -> None:
        self.client.stop_stream()
        self.client.close()

    def collect_text(self, pending: set[str], timeout: float = 120.0) -> tuple[dict[str, list[str]], list[str]]:
        """Like :meth:`collect`, with each response reduced to its ``text_output`` delta."""
        got, errors = self.collect(pending, timeout)
        return {rid: texts(results) for rid, results in got.items()}, errors


def texts(results: list[Any]) -> list[str]:
    return [r.as_numpy("text_output").reshape(-1)[0].decode() for r in results]


# ---------------------------------------------------------------------------------------------- OpenAI front end
def wait_healthy(base: str, proc: subprocess.Popen, *, timeout_s: float = 300.0, log: Path | None = None) -> None:
    """Poll ``GET {base}/health`` until it answers 200; fail when ``proc`` exits first or ``timeout_s`` passes
    (the message quotes ``log`` when given)."""
    import httpx

    def output() -> str:
        return log.read_text(errors="replace") if log is not None and log.exists() else ""

    deadline = time.monotonic() + timeout_s
    while True:
        assert proc.poll() is None, f"{proc.args[3]} exited with {proc.returncode}: {output()}"
        try:
            if httpx.get(f"{base}/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        assert time.monotonic() < deadline, f"{base}/health was not 200 after {timeout_s:.0f} s: {output()}"
        time.sleep(0.3)


@contextmanager
def openai_front_ends(
    repo: Path, grpc_url: str, options: Sequence[Sequence[str]], *, log_dir: Path | None = None
) -> Iterator[list[str]]:
    """One standalone ``repo-builder openai --repo REPO --grpc-url URL --port <free port> OPTIONS`` per entry of
    ``options``, all started before any is waited for; yields their base URLs (``http://127.0.0.1:PORT``) once
    each answers ``/health``, and terminates them afterwards. Output goes to ``log_dir/front<i>.log`` if given."""
    from conftest import free_ports

    procs: list[subprocess.Popen] = []
    logs: list[Path | None] = []
    bases: list[str] = []
    try:
        for i, (extra, port) in enumerate(zip(options, free_ports(len(options)))):
            log = None if log_dir is None else log_dir / f"front{i}.log"
            out: IO[bytes] | None = None if log is None else open(log, "wb")
            try:
                procs.append(
                    subprocess.Popen(
                        cli_argv("openai", "--repo", str(repo), "--grpc-url", grpc_url) + ["--port", str(port), *extra],
                        stdout=out,
                        stderr=None if out is None else subprocess.STDOUT,
                    )
                )
            finally:
                if out is not None:
                    out.close()
            logs.append(log)
            bases.append(f"http://127.0.0.1:{port}")
        for base, proc, log in zip(bases, procs, logs):
            wait_healthy(base, proc, log=log)
        yield bases
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(timeout=30)


@contextmanager
def openai_front_end(repo: Path, grpc_url: str, *options: str, log_dir: Path | None = None) -> Iterator[str]:
    """:func:`openai_front_ends` for one front end: yields its base URL."""
    with openai_front_ends(repo, grpc_url, [options], log_dir=log_dir) as (base,):
        yield base


def greedy_reference(
    checkpoint: Path, prompts: Sequence[tuple[list[int], int]], *, eos_token_id: int, pad_token_id: int, threads: int
) -> list[list[int]]:
    """transformers' own greedy ``generate()`` on a Hugging Face checkpoint in this process (fp32), the
    reference the served text is compared with: for each ``(prompt ids, max_tokens)`` the generated ids
    (ending with ``eos_token_id`` when generation stopped there).

    ``threads``: torch's thread count meanwhile (the served reference engine's, so the matmuls reduce in the
    same order); restored afterwards. Needs torch and transformers (callers skip without them).
    """
    import torch
    import transformers

    model = transformers.AutoModelForCausalLM.from_pretrained(str(checkpoint), dtype=torch.float32).eval()
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        with torch.inference_mode():
            return [
                model.generate(
                    torch.tensor([ids]),
                    max_new_tokens=max_tokens,
                    do_sample=False,
                    eos_token_id=eos_token_id,
                    pad_token_id=pad_token_id,
                )[0, len(ids) :].tolist()
                for ids, max_tokens in prompts
            ]
    finally:
        torch.set_num_threads(before)


#: The two LLMs of the multi-LLM tests, (name, packaged tokenizer, seed): different SentencePiece tokenizers
#: (Mistral v1: 32000 tokens; Mistral v3: 32768 tokens, other ids) and seeds whose greedy continuations differ
#: (these tiny random models mostly repeat the prompt's last token), so an LLM that got the other's checkpoint
#: or tokenizer answers differently from transformers' greedy generate() on its own checkpoint.
TWO_LLMS = (("alpha", "mistral-v1", 2), ("beta", "mistral-v3", 0))


def two_tiny_llamas(base: Path) -> dict[str, Path]:
    """{name: checkpoint dir} of :data:`TWO_LLMS` under ``base``: each a tiny random LLaMA holding its own
    packaged tokenizer (``base/<name>``; the tokenizer first written to ``base/tok-<name>``)."""
    from repo_builder.testing import make_tiny_llama, packaged_tokenizer

    out = {}
    for name, tokenizer, seed in TWO_LLMS:
        tok = packaged_tokenizer(tokenizer, base / f"tok-{name}")
        out[name] = make_tiny_llama(base / name, tok, seed=seed)
    return out


def render_llms(out: Path, models: dict[str, str], *options: str) -> Path:
    """``out``, rendered by ``repo-builder render OPTIONS --model NAME=SPEC ... --output OUT`` in a child process
    (one ``--model`` per entry of ``models``, in order; 300 s at most); AssertionError with its stderr when it
    fails."""
    args = [a for name, spec in models.items() for a in ("--model", f"{name}={spec}")]
    got = run_cli("render", *options, *args, "--output", str(out), timeout=300)
    assert got.returncode == 0, got.stderr
    return out


def llava_reference(checkpoint: Path, max_tokens: int) -> Callable[[str, np.ndarray | None], str]:
    """``reference(text, image | None) -> text``: transformers' greedy ``generate()`` on the LLaVA ``checkpoint``
    (at most ``max_tokens`` new tokens), ``<image>`` (id 32000) expanded to the 16 image tokens as LLaVA's
    processor does, ``image`` (uint8 ``[H, W, 3]``) given as ``pixel_values``, decoded with the checkpoint's
    tokenizer without special tokens. Needs torch, transformers and PIL (callers skip without them)."""
    import torch
    from PIL import Image
    from transformers import AutoImageProcessor, AutoTokenizer, LlavaForConditionalGeneration

    model = LlavaForConditionalGeneration.from_pretrained(checkpoint).eval()
    tok = AutoTokenizer.from_pretrained(checkpoint)
    images = AutoImageProcessor.from_pretrained(checkpoint)

    def run(text: str, image: np.ndarray | None) -> str:
        ids: list[int] = []
        for i in tok(text)["input_ids"]:
            ids += [i] * 16 if i == 32000 else [i]
        kwargs: dict[str, Any] = {}
        if image is not None:
            kwargs["pixel_values"] = images(images=Image.fromarray(image), return_tensors="pt")["pixel_values"]
        with torch.inference_mode():
            out = model.generate(input_ids=torch.tensor([ids]), max_new_tokens=max_tokens, do_sample=False, **kwargs)
        return str(tok.decode(out[0, len(ids) :].tolist(), skip_special_tokens=True))

    return run
