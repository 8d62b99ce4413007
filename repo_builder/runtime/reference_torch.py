"""The torch side of the CPU reference engine (:mod:`.reference`, which re-exports these names): the device and
dtype choices and their parameter checks, torch threads, the input-major weight layout of ``nn.Linear`` layers,
the KV-cache size per token, and transformers cache layers that grow in place. torch and transformers are
imported when first needed (they are in NVIDIA's Triton TRT-LLM container).
"""

from __future__ import annotations

import os
from typing import Any

from .engine_request import EngineLoadError


def _import_torch() -> Any:
    try:
        import torch
    except ImportError as exc:  # pragma: no cover - torch is in the venv and in the TRT-LLM container
        raise EngineLoadError(
            "the CPU reference engine needs torch and transformers; "
            "install them into the Python environment the stub uses"
        ) from exc
    return torch


def _store_linear_weights_input_major(torch: Any, model: Any) -> int:
    """Store every ``nn.Linear`` weight ``[out, in]`` input-major in memory (an ``[in, out]`` contiguous block
    seen through a transposed view), so ``F.linear``'s ``x @ W.T`` reaches MKL as a plain row-major GEMM.

    Same values, same module API; only the memory order changes (fp32 sums may differ in the last bits: a
    SmolLM2 logit by <= 5e-5). Measured on this project's 2-core hosts, one torch thread, SmolLM2-135M, one
    decode step with a 32-token cache: 1 sequence 56.8 -> 48.1 ms, 8 sequences 117.6 -> 95.1 ms
    (docs/performance.md section 6.2): MKL's fp32 GEMM with a transposed ``B`` is about half as fast for the
    skinny ``[B, in] x [in, out]`` products of decoding. A weight shared with another module (tied input
    embedding and ``lm_head``) changes for both: the embedding then gathers its rows with a stride, a cost
    per prompt token that is small beside the forward. Costs one copy of the weights at load (SmolLM2: 0.5 s,
    one thread). Returns how many weights were re-laid.
    """
    done = 0
    for module in model.modules():
        if isinstance(module, torch.nn.Linear) and module.weight.is_contiguous():
            module.weight.data = module.weight.data.t().contiguous().t()
            done += 1
    return done


#: ``reference_engine_device`` values (parameters.yaml).
DEVICES = ("auto", "cpu", "cuda")

#: ``reference_engine_dtype`` values -> torch dtype names (parameters.yaml).
DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}


def select_device(requested: str, *, cuda_available: bool, device_id: int = 0) -> str:
    """The torch device of the engine for ``reference_engine_device`` = ``requested``.

    Args:
        requested: ``auto``, ``cpu`` or ``cuda``.
        cuda_available: ``torch.cuda.is_available()`` in this process.
        device_id: the instance's GPU (Triton's ``model_instance_device_id``).
    Returns:
        ``"cpu"`` or ``"cuda:<device_id>"``; ``auto`` falls back to ``"cpu"`` when CUDA is absent.
    Raises:
        EngineLoadError: ``cuda`` asked for where torch sees no CUDA device, or an unknown value.
    """
    if requested not in DEVICES:
        raise EngineLoadError(
            f"tensorrt_llm: parameter 'reference_engine_device' = {requested!r} is not one of {', '.join(DEVICES)}"
        )
    if requested == "cpu" or (requested == "auto" and not cuda_available):
        return "cpu"
    if not cuda_available:
        raise EngineLoadError(
            "tensorrt_llm: parameter 'reference_engine_device' is 'cuda' but torch sees no CUDA device in the "
            "tensorrt_llm stub (a CPU-only torch build, no GPU, or CUDA_VISIBLE_DEVICES empty); set it to 'auto' "
            "or 'cpu'"
        )
    return f"cuda:{max(0, int(device_id))}"


def engine_threads(requested: int | None) -> int:
    """torch intra-op threads for ``reference_engine_threads``: the value itself when > 0, else every CPU this
    process may run on (its affinity mask; ``os.cpu_count()`` where there is none).

    One thread per CPU is what the batched decode needs: 8 SmolLM2 streams are compute-bound (fp32 GEMMs), one
    stream is memory-bound, and both ran about 1.6x faster with 2 threads than with 1 on this project's
    2-core hosts, through Triton as well (docs/performance.md section 6.2).
    """
    if requested:
        return requested
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


#: Least spare room (tokens) a growing cache layer adds when it reallocates; it otherwise doubles.
CACHE_GROW_MIN = 64

_GROWING_LAYER: Any = None


def _growing_layer_class() -> Any:
    """``GrowingDynamicLayer``: transformers' ``DynamicLayer`` whose ``keys``/``values`` ``[batch, kv_heads,
    len, head_dim]`` are views of buffers with spare room along the sequence axis, so a decode step writes
    its key/value column in place instead of copying the whole cache with ``torch.cat`` (8 SmolLM2 streams:
    about 4 % of a decode step, docs/performance.md section 6.2). Whenever ``keys`` is not a view of the
    buffer's start (another method replaced it: crop, reorder, batch select), the next update copies it into
    a new buffer, so every ``DynamicLayer`` method stays correct."""
    global _GROWING_LAYER
    if _GROWING_LAYER is None:
        from transformers.cache_utils import DynamicLayer

        class GrowingDynamicLayer(DynamicLayer):
            _buf_k: Any = None
            _buf_v: Any = None

            def update(self, key_states: Any, value_states: Any, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
                if not self.is_initialized:
                    self.lazy_initialization(key_states, value_states)
                keys: Any = self.keys
                values: Any = self.values
                n = keys.shape[-2] if keys.dim() >= 2 else 0
                q = key_states.shape[-2]
                buf_k = self._buf_k
                if (
                    buf_k is None
                    or n + q > buf_k.shape[-2]
                    or buf_k.shape[:-2] != key_states.shape[:-2]
                    or (n and (keys.data_ptr() != buf_k.data_ptr() or values.data_ptr() != self._buf_v.data_ptr()))
                ):
                    cap = n + q + max(CACHE_GROW_MIN, n + q)
                    shape = (*key_states.shape[:-2], cap, key_states.shape[-1])
                    buf_k, buf_v = key_states.new_empty(shape), value_states.new_empty(shape)
                    if n:
                        buf_k[..., :n, :] = keys
                        buf_v[..., :n, :] = values
                    self._buf_k, self._buf_v = buf_k, buf_v
                self._buf_k[..., n : n + q, :] = key_states
                self._buf_v[..., n : n + q, :] = value_states
                self.keys = self._buf_k[..., : n + q, :]
                self.values = self._buf_v[..., : n + q, :]
                return self.keys, self.values

        _GROWING_LAYER = GrowingDynamicLayer
    return _GROWING_LAYER


def _grow_in_place(cache: Any) -> Any:
    """Turn the plain ``DynamicLayer``s of ``cache`` into growing ones (see :func:`_growing_layer_class`);
    other layer kinds (sliding windows...) and transformers 4.x caches are left as they are."""
    layers = getattr(cache, "layers", None)
    if layers:
        growing = _growing_layer_class()
        for layer in layers:
            if type(layer).__name__ == "DynamicLayer":
                layer.__class__ = growing
    return cache


def kv_bytes_per_token(cfg: Any, element_size: int) -> int:
    """Bytes the KV cache holds per token: 2 (keys, values) x layers x KV heads x head dim x ``element_size``,
    from a transformers model config (``num_key_value_heads`` falls back to ``num_attention_heads``,
    ``head_dim`` to hidden size / heads); 0 when the config lacks them."""
    try:
        heads = int(cfg.num_attention_heads)
        kv_heads = int(getattr(cfg, "num_key_value_heads", None) or heads)
        head_dim = int(getattr(cfg, "head_dim", None) or int(cfg.hidden_size) // heads)
        return 2 * int(cfg.num_hidden_layers) * kv_heads * head_dim * int(element_size)
    except (AttributeError, TypeError, ValueError, ZeroDivisionError):
        return 0
