"""The CPU reference engine: a Hugging Face causal LM run with transformers + torch behind the
``tensorrt_llm`` tensor contract (engine kind ``hf`` in docs/design.md).

Each sequence keeps its own KV cache (``past_key_values``); one scheduler iteration runs one forward per
active sequence (the prompt at its first iteration, then one token), so sequences of any length
interleave token by token and a long request never holds up a short one. Logits processing follows
TensorRT-LLM's order: embedding bias, bad words, min_tokens, penalties, temperature, then greedy or
top-k/top-p sampling (see :mod:`.engine_core` for when sampling is used).

Penalties: ``repetition_penalty`` divides positive / multiplies negative logits of every token in the
prompt and the generated text (as TRT-LLM and transformers do); ``presence_penalty`` and
``frequency_penalty`` subtract a constant / a count-proportional amount for generated tokens.
``output_log_probs`` are log-softmax values of the processed logits (after temperature) at the chosen
token. Random sampling uses one ``torch.Generator`` per sequence seeded with ``seed`` (TRT-LLM's default
seed is 0, so unseeded requests sample the same way).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence as Seq

import numpy as np

from .engine_outputs import Sequence
from .engine_request import EngineLoadError, GenerationRequest, ModelIO
from .params import ModelParams


def _import_torch() -> Any:
    try:
        import torch
    except ImportError as exc:  # pragma: no cover - torch is in the venv and in the TRT-LLM container
        raise EngineLoadError("the CPU reference engine needs torch and transformers; "
                              "install them into the Python environment the stub uses") from exc
    return torch


class _SeqState:
    __slots__ = ("cache", "logits", "generator", "counts")

    def __init__(self) -> None:
        self.cache: Any = None
        self.logits: Any = None
        self.generator: Any = None
        self.counts: dict[int, int] = {}


class ReferenceBackend:
    """Greedy/sampled generation with a transformers causal LM on CPU.

    Args:
        engine_dir: a Hugging Face checkpoint directory (``config.json`` with ``architectures``, weights).
        num_threads: torch intra-op threads for this model instance (1 keeps several instances from
            fighting over cores; set higher for a single big model).
    Attributes:
        vocab_size: the model's vocabulary size (tokens; logits width).
        max_seq_len: ``max_position_embeddings`` of the checkpoint (tokens), used when the
            ``max_seq_len`` parameter is unset.
    Raises:
        EngineLoadError: the directory is missing, has no ``config.json``, or transformers cannot load it.
    """

    def __init__(self, engine_dir: str | Path, *, num_threads: int = 1) -> None:
        torch = _import_torch()
        self.torch = torch
        path = Path(engine_dir)
        if not path.is_dir():
            raise EngineLoadError(f"tensorrt_llm: engine_dir '{path}' is not a directory; set the engine_dir "
                                  "parameter to a Hugging Face checkpoint directory")
        if not (path / "config.json").is_file():
            raise EngineLoadError(f"tensorrt_llm: engine_dir '{path}' has no config.json; the CPU reference "
                                  "engine needs a Hugging Face checkpoint (config.json + weights)")
        if num_threads > 0:
            torch.set_num_threads(num_threads)
        try:
            from transformers import AutoModelForCausalLM

            self.model = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32)
        except Exception as exc:  # noqa: BLE001 - report any loader failure with the path
            raise EngineLoadError(f"tensorrt_llm: cannot load the Hugging Face checkpoint in engine_dir "
                                  f"'{path}': {exc}") from exc
        self.model.eval()
        import inspect

        accepted = set(inspect.signature(self.model.forward).parameters)
        # transformers 5.2x renamed past_key_values -> cache; 4.x (older TRT-LLM containers) has only the old name.
        self._cache_kw = "cache" if "cache" in accepted else "past_key_values"
        self._keep_kw = next((k for k in ("logits_to_keep", "num_logits_to_keep") if k in accepted), None)
        cfg = self.model.config
        self.vocab_size = int(cfg.vocab_size)
        self.max_seq_len = int(getattr(cfg, "max_position_embeddings", 0) or 0) or None
        self.max_input_len = self.max_seq_len

    @classmethod
    def from_params(cls, params: ModelParams, io: ModelIO) -> "ReferenceBackend":
        """Build from the model parameters (``engine_dir``; see docs/design.md)."""
        engine_dir = params.str("engine_dir") or params.str("gpt_model_path")
        if not engine_dir:
            raise EngineLoadError(f"model '{params.model_name}': parameter 'engine_dir' is not set; it must name "
                                  "the Hugging Face checkpoint directory")
        return cls(engine_dir)

    # ------------------------------------------------------------------------------------------
    def step(self, seqs: Seq[Sequence]) -> list[tuple[int, float]]:
        """One token for every sequence: prefill on its first call, then one cached forward each."""
        torch = self.torch
        out: list[tuple[int, float]] = []
        with torch.inference_mode():
            for seq in seqs:
                st: _SeqState | None = seq.state
                if st is None:
                    st = _SeqState()
                    seq.state = st
                    ids = torch.tensor([seq.req.prompt], dtype=torch.long)
                    kwargs = {self._keep_kw: 1} if self._keep_kw else {}
                    res = self.model(input_ids=ids, use_cache=True, **kwargs)
                    seed = seq.req.sampling.seed
                    if not seq.req.sampling.greedy:
                        st.generator = torch.Generator().manual_seed(int(seed or 0) & 0xFFFF_FFFF_FFFF_FFFF)
                else:
                    ids = torch.tensor([[seq.tokens[-1]]], dtype=torch.long)
                    res = self.model(input_ids=ids, use_cache=True, **{self._cache_kw: st.cache})
                st.cache = res[self._cache_kw]
                logits = res.logits[0, -1].float()
                token, logprob = self.choose(logits, seq, st)
                if token != seq.req.end_id:
                    st.counts[token] = st.counts.get(token, 0) + 1
                out.append((token, logprob))
        return out

    def release(self, seq: Sequence) -> None:
        """Drop the sequence's KV cache."""
        seq.state = None

    # ------------------------------------------------------------------------------------------
    def process_logits(self, logits: Any, req: GenerationRequest, generated: list[int],
                       counts: dict[int, int]) -> Any:
        """Apply bias, bad words, min_tokens, penalties and temperature to FP32 ``[vocab]`` logits."""
        torch = self.torch
        logits = logits.clone()
        if req.embedding_bias is not None:
            logits += torch.from_numpy(np.asarray(req.embedding_bias, dtype=np.float32))
        if req.bad_words:
            history = req.prompt + generated
            for word in req.bad_words:
                prefix = word[:-1]
                if not prefix or (len(prefix) <= len(history) and history[-len(prefix):] == prefix):
                    if 0 <= word[-1] < logits.shape[0]:
                        logits[word[-1]] = float("-inf")
        sp = req.sampling
        if req.end_id is not None and len(generated) < sp.min_tokens and 0 <= req.end_id < logits.shape[0]:
            logits[req.end_id] = float("-inf")
        if sp.repetition_penalty is not None and sp.repetition_penalty != 1.0:
            seen = torch.tensor(sorted(set(req.prompt) | set(generated)), dtype=torch.long)
            vals = logits[seen]
            logits[seen] = torch.where(vals > 0, vals / sp.repetition_penalty, vals * sp.repetition_penalty)
        if counts and (sp.presence_penalty or sp.frequency_penalty):
            idx = torch.tensor(list(counts.keys()), dtype=torch.long)
            cnt = torch.tensor(list(counts.values()), dtype=torch.float32)
            logits[idx] -= float(sp.presence_penalty or 0.0) + float(sp.frequency_penalty or 0.0) * cnt
        if sp.temperature is not None and sp.temperature > 0 and sp.temperature != 1.0:
            logits = logits / sp.temperature
        return logits

    def choose(self, logits: Any, seq: Sequence, st: _SeqState) -> tuple[int, float]:
        """Pick the next token (greedy or top-k/top-p sampling); returns (id, log-prob)."""
        torch = self.torch
        req = seq.req
        logits = self.process_logits(logits, req, seq.tokens, st.counts)
        logprobs = torch.log_softmax(logits, dim=-1)
        sp = req.sampling
        if sp.greedy:
            token = int(torch.argmax(logits).item())
            return token, float(logprobs[token].item())
        probs = torch.softmax(logits, dim=-1)
        if sp.top_k:
            k = min(int(sp.top_k), probs.shape[0])
            kth = torch.topk(probs, k).values[-1]
            probs = torch.where(probs >= kth, probs, torch.zeros_like(probs))
        if sp.top_p is not None and 0.0 < sp.top_p < 1.0:
            sorted_p, order = torch.sort(probs, descending=True)
            cum = torch.cumsum(sorted_p, dim=-1) / sorted_p.sum()
            drop = cum - sorted_p / sorted_p.sum() >= sp.top_p
            sorted_p[drop] = 0.0
            probs = torch.zeros_like(probs).scatter(0, order, sorted_p)
        token = int(torch.multinomial(probs / probs.sum(), 1, generator=st.generator).item())
        return token, float(logprobs[token].item())

