"""The four Python models of layout multimodal (vendored; run inside tritonserver without repo-builder).

Tensor names follow NVIDIA's ``all_models/multimodal`` (triton-inference-server/tensorrtllm_backend v0.13.0 -
v0.19.0: ``ensemble``, ``multimodal_encoders``, and the ``preprocessing`` / ``tensorrt_llm`` / ``postprocessing``
of ``inflight_batcher_llm``), the subset a LLaVA request uses; a batch dimension in front, one row per request.
The checkpoint is a Hugging Face ``LlavaForConditionalGeneration`` folder (``tensorrt_llm/1/engine``); its facts
(``multimodal.json``, written by render) and tokenizer / image processor sit in ``preprocessing/1/multimodal``.

Flow of one request (``ensemble``):

1. ``preprocessing`` (:class:`MultimodalPreprocessing`): ``QUERY`` -> ids with the tokenizer. Images from
   ``IMAGE_URL`` (data URIs) and ``IMAGE_BYTES`` (UINT8 pixels) -> ``PIXEL_VALUES`` FP32 ``[n_img, 3, H, W]``
   (the checkpoint's image processor; ``[0, 3, H, W]`` for a text-only request). Each ``<image>`` token of the
   text, or one block before the text when the text has none, becomes image ``k``'s ``features`` fake ids
   ``vocab_size + k * features + j`` (NVIDIA's scheme, ``tensorrtllm_backend`` v0.19.0 preprocessing
   ``_setup_fake_prompts``) -> ``INPUT_ID`` INT32.
2. ``multimodal_encoders`` (:class:`MultimodalEncoders`): ``pixel_values`` -> the vision tower + projector
   (transformers' ``LlavaForConditionalGeneration.get_image_features``) -> ``OUT_PROMPT_EMBEDDING_TABLE`` FP32
   ``[n_img * features, hidden]`` and ``OUT_PROMPT_VOCAB_SIZE`` INT32 (its rows). No image: one zero row and
   vocabulary size 0 (NVIDIA's encoder asserts, so a text-only request fails there).
3. ``tensorrt_llm`` (:class:`PromptTableEngine`): ids below ``vocab_size`` are looked up in the text
   embedding, ids ``vocab_size + r`` take row ``r`` of ``prompt_embedding_table`` (r < ``prompt_vocab_size``),
   then decoding with the KV cache (greedy, or :class:`Sampling`) -> ``output_ids`` (the generated tokens
   only: this layout's ``tensorrt_llm`` excludes the prompt, whose fake ids cannot be detokenized) and
   ``sequence_length``; Qwen2-VL's prefill takes the encoder's mrope cos/sin. With ``render --streaming`` it is
   decoupled: one response per token, each with every token so far.
4. ``postprocessing`` (:class:`MultimodalPostprocessing`): ids -> ``OUTPUT`` text (special tokens skipped).

Dtypes differ from NVIDIA's in one place: pixel values and the prompt table are FP32 (NVIDIA: FP16) because the
CPU stand-in runs in fp32 and its greedy output must equal transformers' own.

Errors (the request fails alone, HTTP 400, naming the ensemble field): see :mod:`.images`; more images than
``max_num_images``; ``<image>`` markers without images or more markers than images; a prompt plus
``max_tokens`` over ``max_position_embeddings``; a fake id outside the prompt table.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from .errors import ModelLoadError, RequestError
from .images import decode_data_uri, images_from_pixels
from .multimodal_common import (  # noqa: F401  (re-exported: moved from this module)
    FACTS_FOLDER,
    FACTS_NAME,
    QWEN2_VL,
    _import_torch,
    _load_model,
    _params,
    _real,
    _scalar,
    _text_model,
    load_facts,
    mrope_positions,
)
from .multimodal_engine import (  # noqa: F401  (re-exported: moved from this module)
    PromptTableEngine,
    PromptTableEngineModel,
    Sampling,
    _given_rotary,
)
from .triton_io import respond_each, strings

# --------------------------------------------------------------------------------------------------
# preprocessing


class MultimodalText:
    """Prompt ids with fake image ids, and pixel values (no Triton; tested in-process).

    Args:
        folder: ``preprocessing/1/multimodal`` (``multimodal.json``, the tokenizer, ``preprocessor_config.json``).
    Raises:
        ModelLoadError: a file is missing or unreadable (names it).
    """

    def __init__(self, folder: str | Path) -> None:
        self.facts = load_facts(folder)
        try:
            from transformers import AutoImageProcessor, AutoTokenizer

            self.tokenizer = AutoTokenizer.from_pretrained(str(folder))
            self.images = AutoImageProcessor.from_pretrained(str(folder))
        except Exception as exc:  # noqa: BLE001 - shown as the model's load error
            raise ModelLoadError(f"{folder}: cannot load the tokenizer / image processor: {exc}") from exc
        self.vocab_size = int(self.facts["vocab_size"])
        self.image_token_id = int(self.facts["image_token_id"])
        self.features = int(self.facts["features_per_image"])
        self.max_images = int(self.facts["max_num_images"])
        self.size = int(self.facts["image_size"])
        self.qwen = self.facts["model_type"] == QWEN2_VL
        self.merge = int(self.facts.get("spatial_merge_size") or 1)
        self.marker = "<|vision_start|><|image_pad|><|vision_end|>" if self.qwen else "<image>"

    def pixel_values(self, images: list[Any]) -> np.ndarray:
        """FP32 ``[n_img, 3, H, W]`` from RGB PIL images (``[0, 3, H, W]`` for none); Qwen2-VL: its image
        processor's flattened patches ``[n_patches, C x temporal x patch x patch]`` (:meth:`qwen_pixels`)."""
        if self.qwen:
            return self.qwen_pixels(images)[0]
        if not images:
            return np.zeros((0, 3, self.size, self.size), np.float32)
        out = self.images(images=images, return_tensors="np")["pixel_values"]
        return np.ascontiguousarray(out, dtype=np.float32)

    def qwen_pixels(self, images: list[Any]) -> tuple[np.ndarray, np.ndarray]:
        """Qwen2-VL: FP32 ``pixel_values`` ``[n_patches, 3 x temporal_patch x patch^2]`` and INT64
        ``image_grid_thw`` ``[n_img, 3]`` (the checkpoint's image processor; ``[0, ...]`` for none)."""
        width = 3 * 2 * int(self.facts["patch_size"]) ** 2
        if not images:
            return np.zeros((0, width), np.float32), np.zeros((0, 3), np.int64)
        out = self.images(images=images, return_tensors="np")
        return (
            np.ascontiguousarray(out["pixel_values"], dtype=np.float32),
            np.ascontiguousarray(out["image_grid_thw"], dtype=np.int64),
        )

    def features_of(self, grid_thw: np.ndarray) -> list[int]:
        """Prompt-table rows of each image: ``features_per_image`` (LLaVA), ``t x h x w / merge^2`` (Qwen2-VL)."""
        return [int(np.prod(g)) // self.merge**2 for g in np.asarray(grid_thw).reshape(-1, 3)]

    def prompt_ids(self, text: str, n_images: int | list[int]) -> list[int]:
        """The ids of ``text`` with each image marker (or one block before the text) replaced by fake ids
        (:meth:`prompt_and_vision_ids`)."""
        return self.prompt_and_vision_ids(text, n_images)[0]

    def prompt_and_vision_ids(self, text: str, n_images: int | list[int]) -> tuple[list[int], list[int]]:
        """``(ids, vision ids)`` of ``text``: each image marker (``<image>``; Qwen2-VL ``<|image_pad|>``), or,
        when the text has none, one marker block per image before the text, becomes image k's fake ids
        ``vocab_size + (rows of images before k) + j``; the vision ids hold the marker's own id there instead
        (Qwen2-VL's mrope positions are computed from them: NVIDIA's ``VISION_INPUT_ID``).

        Args:
            n_images: the number of images (LLaVA: ``features_per_image`` rows each) or each image's rows.
        Raises:
            RequestError: markers without images, or markers and images not matching in number (``text_input``).
        """
        counts = [self.features] * n_images if isinstance(n_images, int) else list(n_images)
        ids = list(self.tokenizer(text)["input_ids"])
        markers = [i for i, t in enumerate(ids) if t == self.image_token_id]
        if markers and len(markers) != len(counts):
            raise RequestError(
                "text_input",
                f"has {len(markers)} {self.marker} marker(s) but the request sends {len(counts)} image(s)",
                hint=f"one {self.marker} per image, or none (the image then goes before the text)",
            )
        if counts and not markers:
            start = 1 if ids and ids[0] == self.tokenizer.bos_token_id else 0
            block = [self.image_token_id]
            if self.qwen:
                block = [int(self.facts["vision_start_id"]), self.image_token_id, int(self.facts["vision_end_id"])]
            ids[start:start] = block * len(counts)
        out: list[int] = []
        vision: list[int] = []
        k = base = 0
        for t in ids:
            if t == self.image_token_id:
                out.extend(range(self.vocab_size + base, self.vocab_size + base + counts[k]))
                vision.extend([t] * counts[k])
                base += counts[k]
                k += 1
            else:
                out.append(t)
                vision.append(t)
        return out, vision

    def images_of(self, urls: list[str] | None, pixels: np.ndarray | None) -> list[Any]:
        """The request's images: the data URIs first, then the pixel arrays.

        Raises:
            RequestError: see :mod:`.images`; more than ``max_num_images`` (``image_url_input``).
        """
        images = [decode_data_uri(u) for u in (urls or []) if u != ""]
        if pixels is not None and np.asarray(pixels).size:
            images += images_from_pixels(np.asarray(pixels))
        if len(images) > self.max_images:
            raise RequestError(
                "image_url_input" if urls else "image_bytes_input",
                f"{len(images)} images, over max_num_images {self.max_images}",
                hint="render with --set multimodal_max_num_images=N",
            )
        return images


class MultimodalPreprocessing:
    """The Triton side of ``preprocessing``."""

    INPUTS = ("QUERY", "REQUEST_OUTPUT_LEN", "END_ID", "PAD_ID", "IMAGE_URL", "IMAGE_BYTES")

    def __init__(self, pb: Any, args: dict[str, Any]) -> None:
        self.pb = pb
        folder = Path(args["model_repository"]) / args["model_version"] / FACTS_FOLDER
        self.text = MultimodalText(folder)

    def process(self, inputs: dict[str, np.ndarray | None], request: Any) -> dict[str, np.ndarray]:
        query = strings(inputs["QUERY"], "text_input")
        if not query:
            raise RequestError("text_input", "is required")
        if len(query) != 1:
            raise RequestError("text_input", f"one row per request, got {len(query)}")
        max_new = _scalar(inputs["REQUEST_OUTPUT_LEN"])
        if max_new is None or max_new < 1:
            raise RequestError("max_tokens", f"must be >= 1, got {max_new}")
        pixels = inputs["IMAGE_BYTES"]
        if pixels is not None and np.asarray(pixels).ndim == 5:  # [batch, n_img, H, W, C]
            pixels = np.asarray(pixels)[0]
        images = self.text.images_of(strings(inputs["IMAGE_URL"], "image_url_input"), pixels)
        extra: dict[str, np.ndarray] = {}
        if self.text.qwen:
            pixel_values, grid = self.text.qwen_pixels(images)
            ids, vision = self.text.prompt_and_vision_ids(query[0], self.text.features_of(grid))
            extra = {
                "PIXEL_VALUES": pixel_values[None, None, None],  # [batch, 1, 1, n_patches, width]
                "IMAGE_GRID_THW": grid[None],
                "VISION_INPUT_ID": np.array([vision], np.int32),
            }
        else:
            ids = self.text.prompt_ids(query[0], len(images))
            extra = {"PIXEL_VALUES": self.text.pixel_values(images)[None]}
        facts = self.text.facts
        limit = int(facts["max_position_embeddings"])
        if len(ids) + max_new > limit:
            raise RequestError(
                "max_tokens", f"{len(ids)} prompt tokens + {max_new} exceed max_position_embeddings {limit}"
            )
        end_id = _scalar(inputs["END_ID"], int(facts["end_id"]))
        pad_id = _scalar(inputs["PAD_ID"], int(facts["pad_id"]))
        return {
            "INPUT_ID": np.array([ids], np.int32),
            "REQUEST_INPUT_LEN": np.array([[len(ids)]], np.int32),
            "REQUEST_OUTPUT_LEN": np.array([[max_new]], np.int32),
            "OUT_END_ID": np.array([[end_id]], np.int32),
            "OUT_PAD_ID": np.array([[pad_id]], np.int32),
            **extra,
        }

    def execute(self, requests: list[Any]) -> list[Any]:
        return respond_each(self.pb, requests, self.INPUTS, self.process, "preprocessing")


# --------------------------------------------------------------------------------------------------
# multimodal_encoders


class VisionEncoder:
    """The vision tower + projector of a LLaVA checkpoint (no Triton; tested in-process)."""

    def __init__(self, checkpoint: str | Path, threads: int | None = None) -> None:
        self.torch = _import_torch()
        if threads:
            self.torch.set_num_threads(threads)
        self.model = _load_model(checkpoint)
        config = self.model.config
        self.qwen = config.model_type == QWEN2_VL
        text = getattr(config, "text_config", config)
        self.hidden = int(text.hidden_size)
        token = getattr(config, "image_token_id", None)
        self.image_token_id = int(token if token is not None else getattr(config, "image_token_index", 0))

    def table(self, pixel_values: np.ndarray, grid_thw: np.ndarray | None = None) -> np.ndarray:
        """FP32 ``[n_img * features, hidden]`` rows for ``[n_img, 3, H, W]`` pixels (``[0, hidden]`` for none);
        Qwen2-VL: for ``[n_patches, width]`` patches and ``grid_thw`` INT64 ``[n_img, 3]``."""
        if pixel_values.shape[0] == 0:
            return np.zeros((0, self.hidden), np.float32)
        with self.torch.inference_mode():
            pv = self.torch.from_numpy(np.ascontiguousarray(pixel_values, dtype=np.float32))
            extra = {}
            if self.qwen:
                extra["image_grid_thw"] = self.torch.from_numpy(np.asarray(grid_thw, np.int64).reshape(-1, 3))
            out = self.model.get_image_features(pixel_values=pv, **extra)
            feats = getattr(out, "pooler_output", out)
            if isinstance(feats, (list, tuple)):
                feats = self.torch.cat(list(feats), dim=0)
            return feats.reshape(-1, self.hidden).float().numpy()

    def mrope_cos_sin(self, vision_ids: list[int], grid_thw: np.ndarray) -> tuple[np.ndarray, int]:
        """Qwen2-VL: ``(MROPE_ROTARY_COS_SIN, MROPE_POSITION_DELTAS)`` of a prompt: FP32 ``[2 x L x head_dim]``
        (cos then sin of the prompt's 3-D positions after the ``mrope_section`` mix, the text model's own rotary
        embedding) and the decode-position delta."""
        with self.torch.inference_mode():
            positions, delta = mrope_positions(self.model, vision_ids, grid_thw, self.image_token_id)
            probe = self.torch.zeros((1, len(vision_ids), 1), dtype=self.torch.float32)
            cos, sin = _text_model(self.model).rotary_emb(probe, positions)
            return self.torch.stack([cos[0], sin[0]]).float().numpy().reshape(-1), delta


class MultimodalEncoders:
    """The Triton side of ``multimodal_encoders``: parameters ``multimodal_model_path`` (the checkpoint) and
    ``max_prompt_table_rows`` (rows one request may fill: ``features_per_image x max_num_images``; the engine's
    table holds ``max_batch_size`` times that, checked at render)."""

    INPUTS = ("pixel_values", "image_grid_thw", "vision_input_id")

    def __init__(self, pb: Any, args: dict[str, Any]) -> None:
        self.pb = pb
        params = _params(args)
        self.encoder = VisionEncoder(params["multimodal_model_path"], threads=1)
        self.max_rows = int(params.get("max_prompt_table_rows") or 0)

    def process(self, inputs: dict[str, np.ndarray | None], request: Any) -> dict[str, np.ndarray]:
        pv = inputs["pixel_values"]
        pv = np.zeros((0,), np.float32) if pv is None else np.asarray(pv, np.float32)
        grid = np.zeros((0, 3), np.int64)
        if self.encoder.qwen:
            pv = pv.reshape(-1, pv.shape[-1]) if pv.ndim else pv
            if inputs["image_grid_thw"] is not None:
                grid = np.asarray(inputs["image_grid_thw"], np.int64).reshape(-1, 3)
        elif pv.ndim == 5:
            pv = pv[0]
        if pv.size == 0:
            table, rows = np.zeros((1, self.encoder.hidden), np.float32), 0
        else:
            table = self.encoder.table(pv, grid)
            rows = table.shape[0]
        if self.max_rows and rows > self.max_rows:
            raise RequestError("image_url_input", f"{rows} prompt-table rows exceed {self.max_rows} per request")
        out = {
            "OUT_PROMPT_EMBEDDING_TABLE": table[None],
            "OUT_PROMPT_VOCAB_SIZE": np.array([[rows]], np.int32),
        }
        if self.encoder.qwen:
            raw = inputs["vision_input_id"]
            if raw is None or np.asarray(raw).size == 0:
                raise RequestError("vision_input_id", "is required for Qwen2-VL (the prompt's mrope positions)")
            vision = [int(i) for i in np.asarray(raw).reshape(-1)]
            cos_sin, delta = self.encoder.mrope_cos_sin(vision, grid)
            out["MROPE_ROTARY_COS_SIN"] = cos_sin[None]
            out["MROPE_POSITION_DELTAS"] = np.array([[delta]], np.int64)
        return out

    def execute(self, requests: list[Any]) -> list[Any]:
        return respond_each(self.pb, requests, self.INPUTS, self.process, "multimodal_encoders")


# --------------------------------------------------------------------------------------------------
# postprocessing


class MultimodalPostprocessing:
    """The Triton side of ``postprocessing``: ``TOKENS_BATCH`` + ``SEQUENCE_LENGTH`` -> ``OUTPUT``."""

    INPUTS = ("TOKENS_BATCH", "SEQUENCE_LENGTH")

    def __init__(self, pb: Any, args: dict[str, Any]) -> None:
        self.pb = pb
        folder = Path(args["model_repository"]) / args["model_version"] / FACTS_FOLDER
        try:
            from transformers import AutoTokenizer

            self.tokenizer = AutoTokenizer.from_pretrained(str(folder))
        except Exception as exc:  # noqa: BLE001 - shown as the model's load error
            raise ModelLoadError(f"{folder}: cannot load the tokenizer: {exc}") from exc

    def process(self, inputs: dict[str, np.ndarray | None], request: Any) -> dict[str, np.ndarray]:
        tokens = np.asarray(inputs["TOKENS_BATCH"]).reshape(-1)
        length = _scalar(inputs["SEQUENCE_LENGTH"], tokens.size)
        text = str(self.tokenizer.decode([int(t) for t in tokens[:length]], skip_special_tokens=True))
        return {"OUTPUT": np.array([[text.encode("utf-8")]], dtype=object)}

    def execute(self, requests: list[Any]) -> list[Any]:
        return respond_each(self.pb, requests, self.INPUTS, self.process, "postprocessing")
