"""The encoder-decoder reference engine of layout whisper (vendored): the ``tensorrt_llm`` model of the layout,
a Hugging Face ``WhisperForConditionalGeneration`` run with transformers + torch on the CPU.

Tensor contract (names and types of TensorRT-LLM's ``tensorrt_llm`` model in encoder-decoder mode,
triton-inference-server/tensorrtllm_backend v0.19.0 ``all_models/inflight_batcher_llm/tensorrt_llm``; the
subset ``whisper_bls`` sends; a batch dimension in front):

* ``encoder_input_features`` FP32 ``[frames, n_mels]`` (log-mel; transposed to the model's
  ``[1, n_mels, frames]``), ``encoder_output_lengths`` / ``input_lengths`` INT32 ``[1]`` (accepted, unused:
  the encoder always sees the whole window);
* ``decoder_input_ids`` INT32 ``[-1]`` (the prompt), ``request_output_len`` INT32 ``[1]`` (tokens to
  generate at most), ``end_id`` / ``pad_id`` INT32 ``[1]``;
* out: ``output_ids`` INT32 ``[1, len]`` (prompt + generated, the end id included when reached, padded with
  ``pad_id``) and ``sequence_length`` INT32 ``[1]``.

Decoding is greedy (argmax) with the decoder's KV cache: the encoder runs once per request, then one decoder
step per token; no tokens are suppressed, so the output equals transformers' ``generate`` with
``do_sample=False`` on a generation config that suppresses nothing. Errors: ``decoder_input_ids`` empty,
``request_output_len`` < 1, or prompt + ``request_output_len`` over ``max_target_positions`` (the request
fails alone, naming the input); features whose mel count is not the model's ``num_mel_bins``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from .errors import EngineLoadError, RequestError
from .triton_io import respond_each

INPUTS = (
    "encoder_input_features",
    "encoder_output_lengths",
    "input_lengths",
    "decoder_input_ids",
    "request_output_len",
    "end_id",
    "pad_id",
)


class WhisperEngine:
    """A loaded checkpoint; :meth:`generate` serves one request (no Triton; tested in-process).

    Raises (from the constructor):
        EngineLoadError: the checkpoint cannot be loaded (names the path).
    """

    def __init__(self, engine_dir: str | Path, threads: int | None = None) -> None:
        try:
            import torch
            from transformers import WhisperForConditionalGeneration
        except ImportError as exc:  # pragma: no cover - both are in the venv and the TRT-LLM container
            raise EngineLoadError("the Whisper reference engine needs torch and transformers") from exc
        self.torch = torch
        if threads:
            torch.set_num_threads(threads)
        try:
            self.model = WhisperForConditionalGeneration.from_pretrained(str(engine_dir), dtype=torch.float32).eval()
        except Exception as exc:  # noqa: BLE001 - shown as the model's load error
            raise EngineLoadError(f"engine_dir {engine_dir}: cannot load the Whisper checkpoint: {exc}") from exc
        import inspect

        # transformers 5.2x renamed the forward's past_key_values to cache (the old name warns)
        forward = inspect.signature(self.model.forward).parameters
        self.cache_kw = "cache" if "cache" in forward else "past_key_values"
        self.n_mels = int(self.model.config.num_mel_bins)
        self.max_target = int(self.model.config.max_target_positions)

    def generate(self, features: np.ndarray, prompt: list[int], max_new: int, end_id: int | None) -> list[int]:
        """Greedy ids: ``prompt`` + up to ``max_new`` tokens, ending with ``end_id`` when it is generated.

        Args:
            features: ``[frames, n_mels]`` float32 log-mel.
        Raises:
            RequestError: see the module docstring.
        """
        torch = self.torch
        if features.ndim != 2 or features.shape[1] != self.n_mels:
            raise RequestError("encoder_input_features", f"shape {list(features.shape)} is not [frames, {self.n_mels}]")
        if not prompt:
            raise RequestError("decoder_input_ids", "is empty")
        if max_new < 1:
            raise RequestError("request_output_len", f"must be >= 1, got {max_new}")
        if len(prompt) + max_new > self.max_target:
            raise RequestError(
                "request_output_len",
                f"{len(prompt)} prompt + {max_new} tokens exceed max_target_positions {self.max_target}",
            )
        with torch.inference_mode():
            feats = torch.from_numpy(np.ascontiguousarray(features.T, dtype=np.float32))[None]
            encoded = self.model.model.encoder(feats).last_hidden_state
            ids = list(prompt)
            step = torch.tensor([prompt], dtype=torch.long)
            past = None
            for _ in range(max_new):
                kwargs = {self.cache_kw: past}
                out = self.model(encoder_outputs=(encoded,), decoder_input_ids=step, use_cache=True, **kwargs)
                past = getattr(out, "cache", None) or out.past_key_values
                token = int(out.logits[0, -1].argmax())
                ids.append(token)
                if end_id is not None and token == end_id:
                    break
                step = torch.tensor([[token]], dtype=torch.long)
        return ids


def _scalar(array: np.ndarray | None, default: int | None) -> int | None:
    if array is None:
        return default
    return int(np.asarray(array).reshape(-1)[0])


class WhisperEngineModel:
    """The Triton side: parameters ``engine_dir`` (the checkpoint folder) and ``max_target_positions``."""

    def __init__(self, pb: Any, args: dict[str, Any]) -> None:
        self.pb = pb
        config = json.loads(args["model_config"])
        params = {k: v.get("string_value", "") for k, v in (config.get("parameters") or {}).items()}
        engine_dir = params.get("engine_dir") or str(Path(args["model_repository"]) / args["model_version"] / "engine")
        self.engine = WhisperEngine(engine_dir, threads=1)

    def process(self, inputs: dict[str, np.ndarray | None], request: Any) -> dict[str, np.ndarray]:
        feats = inputs["encoder_input_features"]
        ids = inputs["decoder_input_ids"]
        if feats is None or ids is None:
            raise RequestError("encoder_input_features" if feats is None else "decoder_input_ids", "is required")
        feats = np.asarray(feats, dtype=np.float32)
        if feats.ndim == 3:
            if feats.shape[0] != 1:
                raise RequestError("encoder_input_features", "one request row at a time")
            feats = feats[0]
        prompt = [int(i) for i in np.asarray(ids).reshape(-1)]
        max_new = _scalar(inputs["request_output_len"], None)
        if max_new is None:
            raise RequestError("request_output_len", "is required")
        end_id = _scalar(inputs["end_id"], None)
        out = self.engine.generate(feats, prompt, max_new, end_id)
        return {
            "output_ids": np.array([[out]], np.int32),
            "sequence_length": np.array([[len(out)]], np.int32),
        }

    def execute(self, requests: list[Any]) -> list[Any]:
        return respond_each(self.pb, requests, INPUTS, self.process, "tensorrt_llm")
