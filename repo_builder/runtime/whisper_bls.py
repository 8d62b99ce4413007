"""``whisper_bls`` of layout whisper (vendored; runs inside tritonserver without repo-builder installed).

Request (names, types and dims as NVIDIA's ``all_models/whisper/whisper_bls/config.pbtxt``,
triton-inference-server/tensorrtllm_backend v0.15.0 ... v0.19.0; a batch dimension in front):

* ``WAV`` FP32 ``[-1]``: mono samples at the checkpoint's ``sampling_rate`` (16 kHz), in [-1, 1]; raw samples,
  not WAV-file bytes;
* ``WAV_LENS`` INT32 ``[1]``, optional: the valid samples of each row (the rest is padding); default the row's
  length (NVIDIA declares it optional but reads it unconditionally);
* ``TEXT_PREFIX`` STRING ``[1]``, optional: the decoder prompt, special tokens written out
  (``<|startoftranscript|><|de|><|transcribe|><|notimestamps|>``); empty or absent: the checkpoint's default
  (``whisper.json`` ``default_prefix``).

Response: ``TRANSCRIPTS`` STRING ``[1]`` per row: the generated tokens after the prompt, decoded with the
checkpoint's tokenizer, special and timestamp tokens (ids >= ``<|endoftext|>``) left out.

Per row: ``WAV_LENS`` samples -> log-mel features of one ``chunk_seconds`` window (transformers'
``WhisperFeatureExtractor`` with the checkpoint's ``preprocessor_config.json``: zero-padded to 30 s, 80/128
mels x 3000 frames, float32) -> one request to the engine model (``encoder_input_features`` ``[frames,
n_mels]``, ``decoder_input_ids``, ``request_output_len`` = ``max_tokens``, ``end_id`` = ``pad_id`` =
``<|endoftext|>``) -> ``output_ids``.

Errors (the request fails alone, HTTP 400, naming the field): ``WAV`` empty, not finite, or longer than
``max_audio_seconds`` (one encoder window; longer audio would need chunking); ``WAV_LENS`` < 1 or over the row;
``TEXT_PREFIX`` with unknown special tokens or too long for ``max_target_positions`` with ``max_tokens``. A
wrong dtype is refused by tritonserver itself ("unexpected datatype ... for inference input 'WAV'").
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np

from .errors import ModelLoadError, RequestError, StepError
from .triton_io import is_client_error, respond_each

INPUTS = ("WAV", "WAV_LENS", "TEXT_PREFIX")


class WhisperText:
    """The checkpoint's tokenizer and facts: prompt ids and transcripts (no Triton; tested in-process).

    Args:
        folder: ``whisper_bls/1/whisper`` (``whisper.json``, ``tokenizer.json``, ``preprocessor_config.json``).
    Raises:
        ModelLoadError: a file is missing or unreadable (names it).
    """

    def __init__(self, folder: str | Path) -> None:
        from tokenizers import Tokenizer

        self.folder = Path(folder)
        try:
            self.facts: dict[str, Any] = json.loads((self.folder / "whisper.json").read_text(encoding="utf-8"))
            self.tokenizer = Tokenizer.from_file(str(self.folder / "tokenizer.json"))
        except (OSError, ValueError, Exception) as exc:  # tokenizers raises its own Exception type
            raise ModelLoadError(f"{self.folder}: cannot load whisper.json / tokenizer.json: {exc}") from exc
        self.eot = int(self.facts["special_ids"]["eot"])
        self.rate = int(self.facts["sampling_rate"])
        self.max_samples = int(float(self.facts["max_audio_seconds"]) * self.rate)
        self.max_tokens = int(self.facts["max_tokens"])
        self.max_target = int(self.facts["max_target_positions"])

    def prompt_ids(self, prefix: str | None) -> list[int]:
        """Decoder prompt ids of ``TEXT_PREFIX`` (the default prompt when empty).

        Raises:
            RequestError(TEXT_PREFIX): it does not start with ``<|startoftranscript|>``, writes a ``<|...|>``
                token the tokenizer does not know, or leaves no room for ``max_tokens``.
        """
        if not prefix:
            return [int(i) for i in self.facts["default_prefix_ids"]]
        ids = self.tokenizer.encode(prefix, add_special_tokens=False).ids
        sot = int(self.facts["special_ids"]["sot"])
        if not ids or ids[0] != sot:
            raise RequestError("TEXT_PREFIX", "must start with <|startoftranscript|>", self.facts["default_prefix"])
        for name in re.findall(r"<\|[^|<>]*\|>", prefix):
            tid = self.tokenizer.token_to_id(name)
            if tid is None or tid < self.eot:
                raise RequestError("TEXT_PREFIX", f"{name} is not a special token of this checkpoint's tokenizer")
        if len(ids) + self.max_tokens > self.max_target:
            raise RequestError(
                "TEXT_PREFIX",
                f"{len(ids)} prompt tokens + max_tokens {self.max_tokens} exceed the decoder's "
                f"max_target_positions {self.max_target}",
            )
        return ids

    def check_wav(self, wav: np.ndarray | None, lens: np.ndarray | None) -> list[np.ndarray]:
        """The valid samples of each row of ``WAV`` (``[batch, n]`` float32).

        Raises:
            RequestError(WAV / WAV_LENS): see the module docstring.
        """
        if wav is None:
            raise RequestError("WAV", "is required")
        wav = np.asarray(wav)
        if wav.ndim == 1:
            wav = wav[None, :]
        if wav.ndim != 2 or wav.shape[1] == 0:
            raise RequestError("WAV", f"is empty (shape {list(wav.shape)}); send mono samples at {self.rate} Hz")
        rows = []
        for i, row in enumerate(wav):
            n = row.shape[0]
            if lens is not None:
                flat = np.asarray(lens).reshape(-1)
                if flat.shape[0] != wav.shape[0]:
                    raise RequestError("WAV_LENS", f"has {flat.shape[0]} values for {wav.shape[0]} WAV rows")
                n = int(flat[i])
                if n < 1 or n > row.shape[0]:
                    raise RequestError("WAV_LENS", f"{n} is outside 1..{row.shape[0]} (the samples of WAV row {i})")
            if n > self.max_samples:
                raise RequestError(
                    "WAV",
                    f"{n} samples ({n / self.rate:.2f} s) exceed max_audio_seconds {self.max_samples / self.rate:g} "
                    f"({self.max_samples} samples at {self.rate} Hz)",
                    "split the audio into windows of at most that length",
                )
            samples = np.asarray(row[:n], dtype=np.float32)
            if not np.all(np.isfinite(samples)):
                raise RequestError("WAV", f"row {i} holds NaN or infinite samples")
            rows.append(samples)
        return rows

    def transcript(self, output_ids: list[int], prompt_len: int) -> str:
        """The text of the generated ids after the prompt, ids >= ``<|endoftext|>`` left out."""
        return self.tokenizer.decode([i for i in output_ids[prompt_len:] if 0 <= i < self.eot])


class WhisperBLS:
    """The Triton side of ``whisper_bls``: one engine request per ``WAV`` row.

    Raises (from the constructor):
        ModelLoadError: the facts, tokenizer or feature extractor cannot be loaded.
    """

    def __init__(self, pb: Any, args: dict[str, Any]) -> None:
        self.pb = pb
        config = json.loads(args["model_config"])
        params = {k: v.get("string_value", "") for k, v in (config.get("parameters") or {}).items()}
        folder = Path(args["model_repository"]) / args["model_version"] / "whisper"
        self.text = WhisperText(folder)
        self.engine = params.get("tensorrt_llm_model_name") or "tensorrt_llm"
        try:
            from transformers import WhisperFeatureExtractor

            self.features = WhisperFeatureExtractor.from_pretrained(str(folder))
        except Exception as exc:  # noqa: BLE001 - shown as the model's load error
            msg = f"{folder}/preprocessor_config.json: cannot load the feature extractor: {exc}"
            raise ModelLoadError(msg) from exc

    def mel(self, samples: np.ndarray) -> np.ndarray:
        """Log-mel features ``[frames, n_mels]`` float32 of one window (``[1, n_mels, frames]`` transposed)."""
        out = self.features(samples, sampling_rate=self.text.rate, return_tensors="np")
        return np.ascontiguousarray(out["input_features"][0].T.astype(np.float32))

    def _generate(self, features: np.ndarray, prompt: list[int]) -> list[int]:
        pb = self.pb
        eot = np.array([[self.text.eot]], np.int32)
        inputs = [
            pb.Tensor("encoder_input_features", features[None, ...]),
            pb.Tensor("encoder_output_lengths", np.array([[features.shape[0] // 2]], np.int32)),
            pb.Tensor("input_lengths", np.array([[features.shape[0]]], np.int32)),
            pb.Tensor("decoder_input_ids", np.array([prompt], np.int32)),
            pb.Tensor("request_output_len", np.array([[self.text.max_tokens]], np.int32)),
            pb.Tensor("end_id", eot),
            pb.Tensor("pad_id", eot),
        ]
        request = pb.InferenceRequest(
            model_name=self.engine, inputs=inputs, requested_output_names=["output_ids", "sequence_length"]
        )
        response = request.exec()
        if response.has_error():
            err = response.error()
            raise StepError(self.engine, err.message(), client=is_client_error(pb, err))
        ids = pb.get_output_tensor_by_name(response, "output_ids").as_numpy()
        length = int(pb.get_output_tensor_by_name(response, "sequence_length").as_numpy().reshape(-1)[0])
        return [int(i) for i in ids.reshape(-1)[:length]]

    def process(self, inputs: dict[str, np.ndarray | None], request: Any) -> dict[str, np.ndarray]:
        rows = self.text.check_wav(inputs["WAV"], inputs["WAV_LENS"])
        prefixes = inputs["TEXT_PREFIX"]
        texts = []
        for i, samples in enumerate(rows):
            prefix = None
            if prefixes is not None:
                flat = np.asarray(prefixes, dtype=object).reshape(-1)
                item = flat[i] if i < flat.shape[0] else flat[0]
                try:
                    prefix = item.decode("utf-8") if isinstance(item, bytes) else str(item)
                except UnicodeDecodeError:
                    raise RequestError("TEXT_PREFIX", "is not valid UTF-8") from None
            prompt = self.text.prompt_ids(prefix)
            out = self._generate(self.mel(samples), prompt)
            texts.append(self.text.transcript(out, len(prompt)).encode("utf-8"))
        return {"TRANSCRIPTS": np.array(texts, dtype=object).reshape(-1, 1)}

    def execute(self, requests: list[Any]) -> list[Any]:
        return respond_each(self.pb, requests, INPUTS, self.process, "whisper_bls")
