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
   then greedy decoding with the KV cache -> ``output_ids`` (the generated tokens only: this layout's
   ``tensorrt_llm`` excludes the prompt, whose fake ids cannot be detokenized) and ``sequence_length``.
4. ``postprocessing`` (:class:`MultimodalPostprocessing`): ids -> ``OUTPUT`` text (special tokens skipped).

Dtypes differ from NVIDIA's in one place: pixel values and the prompt table are FP32 (NVIDIA: FP16) because the
CPU stand-in runs in fp32 and its greedy output must equal transformers' own.

Errors (the request fails alone, HTTP 400, naming the ensemble field): see :mod:`.images`; more images than
``max_num_images``; ``<image>`` markers without images or more markers than images; a prompt plus
``max_tokens`` over ``max_position_embeddings``; a fake id outside the prompt table.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from .errors import EngineLoadError, ModelLoadError, RequestError
from .images import decode_data_uri, images_from_pixels
from .triton_io import respond_each, strings

FACTS_NAME = "multimodal.json"
FACTS_FOLDER = "multimodal"


def _params(args: dict[str, Any]) -> dict[str, str]:
    config = json.loads(args["model_config"])
    return {k: v.get("string_value", "") for k, v in (config.get("parameters") or {}).items()}


def _scalar(array: np.ndarray | None, default: int | None = None) -> int | None:
    if array is None or np.asarray(array).size == 0:
        return default
    return int(np.asarray(array).reshape(-1)[0])


def load_facts(folder: str | Path) -> dict[str, Any]:
    """``multimodal.json`` of ``folder``.

    Raises:
        ModelLoadError: missing or not JSON (names the path).
    """
    path = Path(folder) / FACTS_NAME
    try:
        return dict(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError) as exc:
        raise ModelLoadError(f"{path}: {exc}") from exc


def _import_torch() -> Any:
    try:
        import torch
    except ImportError as exc:  # pragma: no cover - torch is in the venv and the TRT-LLM container
        raise EngineLoadError("layout multimodal needs torch and transformers") from exc
    return torch


def _load_llava(path: str | Path) -> Any:
    torch = _import_torch()
    from transformers import LlavaForConditionalGeneration

    try:
        return LlavaForConditionalGeneration.from_pretrained(str(path), dtype=torch.float32).eval()
    except Exception as exc:  # noqa: BLE001 - shown as the model's load error
        raise EngineLoadError(f"{path}: cannot load the LLaVA checkpoint: {exc}") from exc


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

    def pixel_values(self, images: list[Any]) -> np.ndarray:
        """FP32 ``[n_img, 3, H, W]`` from RGB PIL images (``[0, 3, H, W]`` for none)."""
        if not images:
            return np.zeros((0, 3, self.size, self.size), np.float32)
        out = self.images(images=images, return_tensors="np")["pixel_values"]
        return np.ascontiguousarray(out, dtype=np.float32)

    def prompt_ids(self, text: str, n_images: int) -> list[int]:
        """The ids of ``text`` with each ``<image>`` (or one block before the text) replaced by fake ids.

        Raises:
            RequestError: ``<image>`` markers without images, or markers and images not matching in number
                (``text_input``).
        """
        ids = list(self.tokenizer(text)["input_ids"])
        markers = [i for i, t in enumerate(ids) if t == self.image_token_id]
        if markers and len(markers) != n_images:
            raise RequestError(
                "text_input",
                f"has {len(markers)} <image> marker(s) but the request sends {n_images} image(s)",
                hint="one <image> per image, or none (the image then goes before the text)",
            )
        if n_images and not markers:
            start = 1 if ids and ids[0] == self.tokenizer.bos_token_id else 0
            ids[start:start] = [self.image_token_id] * n_images
        out: list[int] = []
        k = 0
        for t in ids:
            if t == self.image_token_id:
                base = self.vocab_size + k * self.features
                out.extend(range(base, base + self.features))
                k += 1
            else:
                out.append(t)
        return out

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
        ids = self.text.prompt_ids(query[0], len(images))
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
            "PIXEL_VALUES": self.text.pixel_values(images)[None],
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
        self.model = _load_llava(checkpoint)
        self.hidden = int(self.model.config.text_config.hidden_size)

    def table(self, pixel_values: np.ndarray) -> np.ndarray:
        """FP32 ``[n_img * features, hidden]`` rows for ``[n_img, 3, H, W]`` pixels (``[0, hidden]`` for none)."""
        if pixel_values.shape[0] == 0:
            return np.zeros((0, self.hidden), np.float32)
        with self.torch.inference_mode():
            pv = self.torch.from_numpy(np.ascontiguousarray(pixel_values, dtype=np.float32))
            out = self.model.get_image_features(pixel_values=pv)
            feats = getattr(out, "pooler_output", out)
            if isinstance(feats, (list, tuple)):
                feats = self.torch.cat(list(feats), dim=0)
            return feats.reshape(-1, self.hidden).float().numpy()


class MultimodalEncoders:
    """The Triton side of ``multimodal_encoders``: parameters ``multimodal_model_path`` (the checkpoint) and
    ``max_prompt_table_rows`` (rows one request may fill: ``features_per_image x max_num_images``; the engine's
    table holds ``max_batch_size`` times that, checked at render)."""

    INPUTS = ("pixel_values",)

    def __init__(self, pb: Any, args: dict[str, Any]) -> None:
        self.pb = pb
        params = _params(args)
        self.encoder = VisionEncoder(params["multimodal_model_path"], threads=1)
        self.max_rows = int(params.get("max_prompt_table_rows") or 0)

    def process(self, inputs: dict[str, np.ndarray | None], request: Any) -> dict[str, np.ndarray]:
        pv = inputs["pixel_values"]
        pv = np.zeros((0,), np.float32) if pv is None else np.asarray(pv, np.float32)
        if pv.ndim == 5:
            pv = pv[0]
        if pv.size == 0:
            table, rows = np.zeros((1, self.encoder.hidden), np.float32), 0
        else:
            table = self.encoder.table(pv)
            rows = table.shape[0]
        if self.max_rows and rows > self.max_rows:
            raise RequestError("image_url_input", f"{rows} prompt-table rows exceed {self.max_rows} per request")
        return {
            "OUT_PROMPT_EMBEDDING_TABLE": table[None],
            "OUT_PROMPT_VOCAB_SIZE": np.array([[rows]], np.int32),
        }

    def execute(self, requests: list[Any]) -> list[Any]:
        return respond_each(self.pb, requests, self.INPUTS, self.process, "multimodal_encoders")


# --------------------------------------------------------------------------------------------------
# tensorrt_llm


class PromptTableEngine:
    """The language model of a LLaVA checkpoint with NVIDIA's prompt-table splice (no Triton; tested
    in-process): greedy decoding with the KV cache, equal to transformers' ``generate(pixel_values=...)``."""

    def __init__(self, checkpoint: str | Path, threads: int | None = None) -> None:
        import inspect

        self.torch = _import_torch()
        if threads:
            self.torch.set_num_threads(threads)
        self.model = _load_llava(checkpoint)
        text = self.model.config.text_config
        self.vocab_size = int(text.vocab_size)
        self.max_positions = int(text.max_position_embeddings)
        forward = inspect.signature(self.model.forward).parameters
        self.cache_kw = "cache" if "cache" in forward else "past_key_values"

    def embed(self, ids: list[int], table: np.ndarray | None, table_rows: int) -> Any:
        """``[1, len, hidden]`` input embeddings: text rows for ids < vocab_size, table rows above.

        Raises:
            RequestError: a fake id without a table row (``prompt_embedding_table``).
        """
        torch = self.torch
        tensor = torch.tensor([ids], dtype=torch.long)
        fake = tensor >= self.vocab_size
        embeds = self.model.get_input_embeddings()(tensor.clamp(max=self.vocab_size - 1))
        if bool(fake.any()):
            rows = tensor[fake] - self.vocab_size
            top = int(rows.max())
            if table is None or top >= min(table_rows, table.shape[0]):
                have = 0 if table is None else min(table_rows, table.shape[0])
                raise RequestError(
                    "prompt_embedding_table", f"input id {self.vocab_size + top} needs row {top}, the table has {have}"
                )
            values = torch.from_numpy(np.ascontiguousarray(table, dtype=np.float32))
            embeds[fake] = values[rows].to(embeds.dtype)
        return embeds

    def generate(
        self, ids: list[int], max_new: int, end_id: int | None, table: np.ndarray | None = None, table_rows: int = 0
    ) -> list[int]:
        """The generated ids (up to ``max_new``, ending with ``end_id`` when generated).

        Raises:
            RequestError: empty ids, ``max_new`` < 1, over ``max_position_embeddings``, or see :meth:`embed`.
        """
        torch = self.torch
        if not ids:
            raise RequestError("input_ids", "is empty")
        if max_new < 1:
            raise RequestError("request_output_len", f"must be >= 1, got {max_new}")
        if len(ids) + max_new > self.max_positions:
            raise RequestError(
                "request_output_len",
                f"{len(ids)} prompt + {max_new} tokens exceed max_position_embeddings {self.max_positions}",
            )
        out: list[int] = []
        with torch.inference_mode():
            step: dict[str, Any] = {"inputs_embeds": self.embed(ids, table, table_rows)}
            past = None
            for _ in range(max_new):
                result = self.model(**step, use_cache=True, **{self.cache_kw: past})
                past = getattr(result, "cache", None) or result.past_key_values
                token = int(result.logits[0, -1].argmax())
                out.append(token)
                if end_id is not None and token == end_id:
                    break
                step = {"input_ids": torch.tensor([[token]], dtype=torch.long)}
        return out


class PromptTableEngineModel:
    """The Triton side of ``tensorrt_llm``: parameter ``engine_dir`` (the checkpoint folder)."""

    INPUTS = (
        "input_ids",
        "input_lengths",
        "request_output_len",
        "end_id",
        "pad_id",
        "prompt_embedding_table",
        "prompt_vocab_size",
    )

    def __init__(self, pb: Any, args: dict[str, Any]) -> None:
        self.pb = pb
        params = _params(args)
        engine_dir = params.get("engine_dir") or str(Path(args["model_repository"]) / args["model_version"] / "engine")
        self.engine = PromptTableEngine(engine_dir, threads=1)

    def process(self, inputs: dict[str, np.ndarray | None], request: Any) -> dict[str, np.ndarray]:
        raw = inputs["input_ids"]
        if raw is None:
            raise RequestError("input_ids", "is required")
        ids = [int(i) for i in np.asarray(raw).reshape(-1)]
        max_new = _scalar(inputs["request_output_len"])
        if max_new is None:
            raise RequestError("request_output_len", "is required")
        table = inputs["prompt_embedding_table"]
        if table is not None:
            table = np.asarray(table, np.float32)
            table = table.reshape(-1, table.shape[-1]) if table.size else None
        rows = _scalar(inputs["prompt_vocab_size"], 0 if table is None else table.shape[0]) or 0
        out = self.engine.generate(ids, max_new, _scalar(inputs["end_id"]), table, rows)
        return {
            "output_ids": np.array([[out]], np.int32),
            "sequence_length": np.array([[len(out)]], np.int32),
        }

    def execute(self, requests: list[Any]) -> list[Any]:
        return respond_each(self.pb, requests, self.INPUTS, self.process, "tensorrt_llm")


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
