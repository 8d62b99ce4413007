"""The reference engine: a Hugging Face causal LM run with transformers + torch (on the CPU or a CUDA GPU)
behind the ``tensorrt_llm`` tensor contract (engine kind ``hf`` in docs/design.md).

Where it runs: ``reference_engine_device`` (``auto``: the instance's GPU when torch sees CUDA, else the CPU;
``cpu``; ``cuda``: the GPU or a load error) and ``reference_engine_dtype`` (``fp32``, ``bf16``, ``fp16``: the
weights' and KV cache's dtype; logits are processed in fp32). On CUDA the weights, the KV caches and every
input tensor of a forward live on the device ``cuda:<model_instance_device_id>`` (Triton's ``initialize``
args; the ``gpus`` of a KIND_GPU ``instance_group``, 0 for a KIND_CPU one); greedy requests without logits
processing pick their tokens for the whole batch with one argmax and one device-to-host copy per step.

One scheduler iteration runs one prefill forward for the new sequences (their prompts left-padded to the
longest; several forwards only past ``max_prefill_tokens``) and one batched forward for all decoding
sequences (their KV caches stacked, left-padded, see :meth:`ReferenceBackend.step`), so sequences of any
length interleave token by token, a long request never holds up a short one, and 8 streams cost far less
than 8 forwards per token (docs/performance.md). Logits processing follows TensorRT-LLM's order: embedding
bias, bad words, min_tokens, penalties, temperature, then greedy or top-k/top-p sampling (see
:mod:`.engine_core` for when sampling is used).

Penalties: ``repetition_penalty`` divides positive / multiplies negative logits of every token in the
prompt and the generated text (as TRT-LLM and transformers do); ``presence_penalty`` and
``frequency_penalty`` subtract a constant / a count-proportional amount for generated tokens.
``output_log_probs`` are log-softmax values of the processed logits (after temperature) at the chosen
token. Random sampling uses one ``torch.Generator`` per sequence seeded with ``seed`` (TRT-LLM's default
seed is 0, so unseeded requests sample the same way).
"""

from __future__ import annotations

from collections.abc import Sequence as Seq
from pathlib import Path
from typing import Any

import numpy as np

from .engine_outputs import Sequence
from .engine_request import EngineLoadError, GenerationRequest, ModelIO
from .params import ModelParams
from .reference_torch import (  # noqa: F401  (re-exported: moved from this module)
    CACHE_GROW_MIN,
    DEVICES,
    DTYPES,
    _grow_in_place,
    _growing_layer_class,
    _import_torch,
    _store_linear_weights_input_major,
    engine_threads,
    kv_bytes_per_token,
    select_device,
)
from .wordlists import BadWordIndex


class _SeqState:
    __slots__ = ("cache", "logits", "generator", "counts")

    def __init__(self) -> None:
        self.cache: Any = None
        self.logits: Any = None
        self.generator: Any = None
        self.counts: dict[int, int] = {}


def _bad_word_index(req: GenerationRequest) -> BadWordIndex:
    """The request's bad words indexed once (kept on the request object), so a step costs the same for 10 or
    10,000 bad words."""
    state = vars(req)
    index = state.get("_bad_word_index")
    if index is None:
        index = state["_bad_word_index"] = BadWordIndex(req.bad_words)
    return index


def _context(seq: Sequence) -> list[int]:
    """The token ids a new sequence's prefill runs over: its prompt, plus the tokens it already holds (a
    generation-only request resumes after the context phase's first token, :mod:`.engine_phases`)."""
    return seq.req.prompt + seq.tokens if seq.tokens else seq.req.prompt


class _NotBatchable(Exception):
    """The model's cache cannot be stacked (not a plain dynamic cache): step sequences one by one."""


class ReferenceBackend:
    """Greedy/sampled generation with a transformers causal LM on the CPU or a CUDA GPU.

    Args:
        engine_dir: a Hugging Face checkpoint directory (``config.json`` with ``architectures``, weights).
        num_threads: torch intra-op threads for this model instance (1 keeps several instances from
            fighting over cores; set higher for a single big model).
        max_prefill_tokens: most padded prompt tokens (rows x longest prompt) one batched prefill forward
            takes; more new sequences are prefilled in several forwards, and a single prompt longer than
            this still runs (alone).
        device: ``reference_engine_device`` (``auto``, ``cpu``, ``cuda``; see :func:`select_device`).
        dtype: ``reference_engine_dtype`` (``fp32``, ``bf16``, ``fp16``): weights and KV cache.
        device_id: the GPU index used on CUDA (Triton's ``model_instance_device_id``).
    Attributes:
        vocab_size: the model's vocabulary size (tokens; logits width).
        max_seq_len: ``max_position_embeddings`` of the checkpoint (tokens), used when the
            ``max_seq_len`` parameter is unset.
    Raises:
        EngineLoadError: the directory is missing, has no ``config.json``, or transformers cannot load it.
    """

    def __init__(
        self,
        engine_dir: str | Path,
        *,
        num_threads: int = 1,
        max_prefill_tokens: int = 4096,
        device: str = "cpu",
        dtype: str = "fp32",
        device_id: int = 0,
    ) -> None:
        torch = _import_torch()
        self.torch = torch
        if dtype not in DTYPES:
            raise EngineLoadError(
                f"tensorrt_llm: parameter 'reference_engine_dtype' = {dtype!r} is not one of {', '.join(DTYPES)}"
            )
        self.device = torch.device(select_device(device, cuda_available=torch.cuda.is_available(), device_id=device_id))
        self.dtype = getattr(torch, DTYPES[dtype])
        path = Path(engine_dir)
        if not path.is_dir():
            raise EngineLoadError(
                f"tensorrt_llm: engine_dir '{path}' is not a directory; set the engine_dir "
                "parameter to a Hugging Face checkpoint directory"
            )
        if not (path / "config.json").is_file():
            raise EngineLoadError(
                f"tensorrt_llm: engine_dir '{path}' has no config.json; the CPU reference "
                "engine needs a Hugging Face checkpoint (config.json + weights)"
            )
        if num_threads > 0:
            torch.set_num_threads(num_threads)
        try:
            from transformers import AutoModelForCausalLM

            self.model = AutoModelForCausalLM.from_pretrained(str(path), dtype=self.dtype).to(self.device)
        except Exception as exc:  # noqa: BLE001 - report any loader failure with the path
            raise EngineLoadError(
                f"tensorrt_llm: cannot load the Hugging Face checkpoint in engine_dir '{path}': {exc}"
            ) from exc
        self.model.eval()
        # MKL's layout preference; cuBLAS takes either layout at full speed
        on_cpu = self.device.type == "cpu"
        self.relaid_weights = _store_linear_weights_input_major(torch, self.model) if on_cpu else 0
        import inspect

        accepted = set(inspect.signature(self.model.forward).parameters)
        # transformers 5.2x renamed past_key_values -> cache; 4.x (older TRT-LLM containers) has only the old name.
        self._cache_kw = "cache" if "cache" in accepted else "past_key_values"
        self._keep_kw = next((k for k in ("logits_to_keep", "num_logits_to_keep") if k in accepted), None)
        cfg = self.model.config
        self.vocab_size = int(cfg.vocab_size)
        self.max_seq_len = int(getattr(cfg, "max_position_embeddings", 0) or 0) or None
        self.max_input_len = self.max_seq_len
        #: KV-cache bytes per token (keys + values of every layer), for nv_trt_llm_runtime_memory_metrics
        self.kv_bytes_per_token = kv_bytes_per_token(cfg, torch.empty((), dtype=self.dtype).element_size())
        self._batch_ok = True
        self.max_prefill_tokens = max(1, int(max_prefill_tokens))
        self.batched_forwards = 0  # decode forwards that stepped more than one sequence (for tests/benchmarks)
        self.batched_prefills = 0  # prefill forwards that ran more than one prompt (for tests/benchmarks)
        self._group: tuple[list[Sequence], list[int], Any] | None = None  # stacked seqs, left pads, cache
        self._mask: Any = None  # their attention mask [B, len]

    @classmethod
    def from_params(cls, params: ModelParams, io: ModelIO) -> ReferenceBackend:
        """Build from the model parameters (``engine_dir``, ``reference_engine_threads``, ``reference_engine_device``,
        ``reference_engine_dtype``; see docs/parameters.md) and the instance's GPU (KIND_GPU instances).

        Raises:
            EngineLoadError: ``engine_dir`` unset or unloadable; ``cuda`` asked for without CUDA.
            ParameterValueError: ``reference_engine_threads`` is not an integer >= 0, or the device / dtype is
                not one of its choices.
        """
        engine_dir = params.str("engine_dir") or params.str("gpt_model_path")
        if not engine_dir:
            raise EngineLoadError(
                f"model '{params.model_name}': parameter 'engine_dir' is not set; it must name "
                "the Hugging Face checkpoint directory"
            )
        return cls(
            engine_dir,
            num_threads=engine_threads(params.int("reference_engine_threads", 0, minimum=0)),
            device=params.choice("reference_engine_device", DEVICES, "auto") or "auto",
            dtype=params.choice("reference_engine_dtype", tuple(DTYPES), "fp32") or "fp32",
            device_id=params.instance_device_id if params.instance_kind == "GPU" else 0,
        )

    # ------------------------------------------------------------------------------------------
    def step(self, seqs: Seq[Sequence]) -> list[tuple[int, float]]:
        """One token for every sequence: ONE prefill forward for the new sequences, then ONE forward for all
        the sequences that are decoding (in-flight batching).

        New sequences' prompts are left-padded to the longest (``attention_mask`` 0 over the padding,
        ``position_ids`` counting from 0 at each prompt's first token) and run together, at most
        ``max_prefill_tokens`` padded tokens per forward; each then keeps its own KV cache without the
        padding. The decoding sequences' KV caches are stacked into one batched cache, left-padded to the
        longest (the same mask and positions), and kept stacked while the set of decoding sequences stays
        the same; it is re-stacked only when one joins or leaves (once per request, not per token). Models
        whose cache is not a plain dynamic cache (e.g. sliding-window layers) are stepped one forward per
        sequence.
        """
        torch = self.torch
        out: dict[int, tuple[int, float]] = {}
        with torch.inference_mode():
            decoding = [seq for seq in seqs if seq.state is not None]
            for chunk in self._prefill_chunks([seq for seq in seqs if seq.state is None]):
                if len(chunk) > 1 and self._batch_ok:
                    try:
                        out.update(self._prefill_batch(chunk))
                        continue
                    except _NotBatchable:
                        self._batch_ok = False
                        self._unstack()
                for seq in chunk:
                    out[id(seq)] = self._prefill(seq)
            if len(decoding) > 1 and self._batch_ok:
                try:
                    out.update(self._decode_batch(decoding))
                    decoding = []
                except _NotBatchable:
                    self._batch_ok = False
                    self._unstack()
            for seq in decoding:
                out[id(seq)] = self._decode_one(seq)
        return [out[id(seq)] for seq in seqs]

    @staticmethod
    def _plain_greedy(seq: Sequence) -> bool:
        """True when :meth:`process_logits` would leave the request's logits as they are and it is greedy: its
        token is the argmax and its log-prob the log-softmax of the raw logits."""
        req = seq.req
        sp = req.sampling
        return (
            sp.greedy
            and req.embedding_bias is None
            and not req.bad_words
            and (req.end_id is None or len(seq.tokens) >= sp.min_tokens)
            and (sp.repetition_penalty is None or sp.repetition_penalty == 1.0)
            and not sp.presence_penalty
            and not sp.frequency_penalty
            and (sp.temperature is None or sp.temperature <= 0 or sp.temperature == 1.0)
        )

    def _pick_plain(self, seqs: Seq[Sequence], logits: Any) -> dict[int, tuple[int, float]]:
        """Rows of ``logits`` ``[B, vocab]`` whose sequence is :meth:`_plain_greedy`: (token, log-prob) for all
        of them from one argmax and one log-softmax over the batch, copied to the host once (one device sync
        per step instead of two per sequence). Same tokens as :meth:`choose` (argmax of the same fp32 values)."""
        rows = [row for row, seq in enumerate(seqs) if self._plain_greedy(seq)]
        if len(rows) < 2:
            return {}
        torch = self.torch
        sel = logits[torch.tensor(rows, device=logits.device)].float()
        tokens = torch.argmax(sel, dim=-1)
        lps = torch.log_softmax(sel, dim=-1).gather(1, tokens[:, None])[:, 0]
        return {row: (int(t), float(lp)) for row, t, lp in zip(rows, tokens.tolist(), lps.tolist())}

    def _finish(
        self, seq: Sequence, st: _SeqState, logits: Any, picked: tuple[int, float] | None = None
    ) -> tuple[int, float]:
        token, logprob = picked if picked is not None else self.choose(logits.float(), seq, st)
        if token != seq.req.end_id:
            st.counts[token] = st.counts.get(token, 0) + 1
        return token, logprob

    def _new_state(self, seq: Sequence, cache: Any) -> _SeqState:
        st = _SeqState()
        st.cache = _grow_in_place(cache)
        for token in seq.tokens:  # tokens a context phase generated (engine_phases: generation-only requests)
            st.counts[token] = st.counts.get(token, 0) + 1
        if not seq.req.sampling.greedy:
            seed = seq.req.sampling.seed
            st.generator = self.torch.Generator(device=self.device).manual_seed(int(seed or 0) & 0xFFFF_FFFF_FFFF_FFFF)
        seq.state = st
        return st

    def _prefill(self, seq: Sequence) -> tuple[int, float]:
        torch = self.torch
        ids = torch.tensor([_context(seq)], dtype=torch.long, device=self.device)
        kwargs = {self._keep_kw: 1} if self._keep_kw else {}
        res = self.model(input_ids=ids, use_cache=True, **kwargs)
        st = self._new_state(seq, res[self._cache_kw])
        return self._finish(seq, st, res.logits[0, -1])

    def _prefill_chunks(self, new: list[Sequence]) -> list[list[Sequence]]:
        """The new sequences, shortest prompt first (less padding), cut into groups of at most
        ``max_prefill_tokens`` padded tokens (a group always takes at least one sequence)."""
        chunks: list[list[Sequence]] = []
        chunk: list[Sequence] = []
        for seq in sorted(new, key=lambda s: len(_context(s))):
            # sorted: this prompt is the chunk's longest
            if chunk and (len(chunk) + 1) * len(_context(seq)) > self.max_prefill_tokens:
                chunks.append(chunk)
                chunk = []
            chunk.append(seq)
        if chunk:
            chunks.append(chunk)
        return chunks

    def _prefill_batch(self, seqs: list[Sequence]) -> dict[int, tuple[int, float]]:
        """One forward over the prompts of ``seqs``, left-padded to the longest (``input_ids``,
        ``attention_mask`` and ``position_ids`` all ``[B, longest]`` int64); every sequence gets its own
        KV cache with the padding cut off. Raises _NotBatchable (before any sequence is touched) when the
        model's cache is not a plain dynamic cache."""
        torch = self.torch
        contexts = [_context(seq) for seq in seqs]
        lengths = [len(c) for c in contexts]
        longest = max(lengths)
        ids = torch.zeros((len(seqs), longest), dtype=torch.long)  # the pad id never matters: masked out
        mask = torch.zeros((len(seqs), longest), dtype=torch.long)
        for row, (context, n) in enumerate(zip(contexts, lengths)):
            ids[row, longest - n :] = torch.tensor(context, dtype=torch.long)
            mask[row, longest - n :] = 1
        positions = (mask.cumsum(dim=1) - 1).clamp(min=0)  # 0 at each prompt's first token (padding: 0)
        ids, mask, positions = (t.to(self.device) for t in (ids, mask, positions))
        kwargs = {self._keep_kw: 1} if self._keep_kw else {}
        res = self.model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True, **kwargs)
        layers = self._layers(res[self._cache_kw])
        self.batched_prefills += 1
        picked = self._pick_plain(seqs, res.logits[:, -1])
        out: dict[int, tuple[int, float]] = {}
        for row, (seq, n) in enumerate(zip(seqs, lengths)):
            pad = longest - n
            cache = self._make_cache(
                [(k[row : row + 1, :, pad:].clone(), v[row : row + 1, :, pad:].clone()) for k, v in layers]
            )
            out[id(seq)] = self._finish(seq, self._new_state(seq, cache), res.logits[row, -1], picked.get(row))
        return out

    def _decode_one(self, seq: Sequence) -> tuple[int, float]:
        torch = self.torch
        st: _SeqState = seq.state
        if st.cache is None:  # its cache is a row of the stacked batch: take it out first
            self._unstack()
        ids = torch.tensor([[seq.tokens[-1]]], dtype=torch.long, device=self.device)
        res = self.model(input_ids=ids, use_cache=True, **{self._cache_kw: st.cache})
        st.cache = res[self._cache_kw]
        return self._finish(seq, st, res.logits[0, -1])

    # -- the stacked batch --------------------------------------------------------------------------
    def _layers(self, cache: Any) -> list[tuple[Any, Any]]:
        """Per layer (keys, values) ``[batch, kv_heads, len, head_dim]`` of a plain dynamic cache."""
        layers = getattr(cache, "layers", None)
        if layers is not None:
            if any(type(layer).__name__ not in ("DynamicLayer", "GrowingDynamicLayer") for layer in layers):
                raise _NotBatchable()
            return [(layer.keys, layer.values) for layer in layers]
        if hasattr(cache, "key_cache"):  # transformers 4.x
            return list(zip(cache.key_cache, cache.value_cache))
        raise _NotBatchable()

    def _make_cache(self, layers: list[tuple[Any, Any]]) -> Any:
        from transformers import DynamicCache

        try:
            return _grow_in_place(DynamicCache(ddp_cache_data=layers))
        except TypeError:  # transformers 4.x
            # gone from transformers 5 (the installed stubs); this branch only runs on 4.x
            return DynamicCache.from_legacy_cache(tuple(layers))  # type: ignore[attr-defined]

    def _unstack(self) -> None:
        """Give every sequence of the stacked batch its own cache again (padding dropped)."""
        if self._group is None:
            return
        seqs, pads, cache = self._group
        self._group = None
        layers = self._layers(cache)
        for row, (seq, pad) in enumerate(zip(seqs, pads)):
            st = seq.state
            if st is None:
                continue  # released meanwhile
            st.cache = self._make_cache(
                [(k[row : row + 1, :, pad:].clone(), v[row : row + 1, :, pad:].clone()) for k, v in layers]
            )

    def _decode_batch(self, seqs: list[Sequence]) -> dict[int, tuple[int, float]]:
        torch = self.torch
        if self._group is None or [id(s) for s in self._group[0]] != [id(s) for s in seqs]:
            self._unstack()
            per_seq = [self._layers(seq.state.cache) for seq in seqs]
            lengths = [layers[0][0].shape[2] for layers in per_seq]
            longest = max(lengths)
            stacked = []
            for li in range(len(per_seq[0])):
                ks, vs = [], []
                for layers, n in zip(per_seq, lengths):
                    k, v = layers[li]
                    if n < longest:
                        pad = (0, 0, longest - n, 0)  # left-pad the sequence axis
                        k, v = torch.nn.functional.pad(k, pad), torch.nn.functional.pad(v, pad)
                    ks.append(k)
                    vs.append(v)
                stacked.append((torch.cat(ks), torch.cat(vs)))
            for seq in seqs:
                seq.state.cache = None  # now a row of the stacked cache
            mask = torch.zeros((len(seqs), longest), dtype=torch.long)
            for row, n in enumerate(lengths):
                mask[row, longest - n :] = 1
            mask = mask.to(self.device)
            self._group = (list(seqs), [longest - n for n in lengths], self._make_cache(stacked))
            self._mask = mask
        seqs_, pads, cache = self._group
        lengths = [self._mask.shape[1] - pad for pad in pads]
        dev = self.device
        self._mask = torch.cat([self._mask, torch.ones((len(seqs), 1), dtype=torch.long, device=dev)], dim=1)
        ids = torch.tensor([[seq.tokens[-1]] for seq in seqs], dtype=torch.long, device=dev)
        positions = torch.tensor([[n] for n in lengths], dtype=torch.long, device=dev)
        res = self.model(
            input_ids=ids, attention_mask=self._mask, position_ids=positions, use_cache=True, **{self._cache_kw: cache}
        )
        self._group = (seqs_, pads, res[self._cache_kw])
        self.batched_forwards += 1
        logits = res.logits[:, -1]
        picked = self._pick_plain(seqs, logits)
        return {id(seq): self._finish(seq, seq.state, logits[row], picked.get(row)) for row, seq in enumerate(seqs)}

    def release(self, seq: Sequence) -> None:
        """Drop the sequence's KV cache (a stacked batch holding it is re-stacked at the next step)."""
        seq.state = None

    # ------------------------------------------------------------------------------------------
    def process_logits(self, logits: Any, req: GenerationRequest, generated: list[int], counts: dict[int, int]) -> Any:
        """Apply bias, bad words, min_tokens, penalties and temperature to FP32 ``[vocab]`` logits."""
        torch = self.torch
        logits = logits.clone()
        if req.embedding_bias is not None:
            logits += torch.from_numpy(np.asarray(req.embedding_bias, dtype=np.float32)).to(logits.device)
        if req.bad_words:
            banned = [t for t in _bad_word_index(req).banned(req.prompt + generated) if 0 <= t < logits.shape[0]]
            if banned:
                logits[banned] = float("-inf")
        sp = req.sampling
        if req.end_id is not None and len(generated) < sp.min_tokens and 0 <= req.end_id < logits.shape[0]:
            logits[req.end_id] = float("-inf")
        if sp.repetition_penalty is not None and sp.repetition_penalty != 1.0:
            seen = torch.tensor(sorted(set(req.prompt) | set(generated)), dtype=torch.long, device=logits.device)
            vals = logits[seen]
            logits[seen] = torch.where(vals > 0, vals / sp.repetition_penalty, vals * sp.repetition_penalty)
        if counts and (sp.presence_penalty or sp.frequency_penalty):
            idx = torch.tensor(list(counts.keys()), dtype=torch.long, device=logits.device)
            cnt = torch.tensor(list(counts.values()), dtype=torch.float32, device=logits.device)
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
