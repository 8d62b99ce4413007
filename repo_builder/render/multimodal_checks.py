"""The cross-checks of a vision-language checkpoint's files that :func:`.multimodal.multimodal_facts` (LLaVA) and
:func:`.multimodal.qwen2_vl_facts` (Qwen2-VL) run, split out of them (issue 21). Each raises the error
:mod:`.multimodal` documents, naming the file and key; :mod:`.multimodal` re-exports every public name.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..errors import EngineError, TokenizerError
from .whisper_facts import _int_key, _read_json

IMAGE_TOKEN = "<image>"


def _added_tokens(tok_path: Path) -> dict[str, int]:
    """{token text: id} of the ``added_tokens`` of tokenizer.json at ``tok_path``.

    Raises:
        TokenizerError: the file missing, not readable JSON or not a JSON object.
    """
    tok = _read_json(tok_path, TokenizerError)
    return {str(t.get("content")): int(t.get("id")) for t in tok.get("added_tokens") or [] if "content" in t}


def _llava_features(cfg: Mapping[str, Any], vision: Mapping[str, Any], cfg_path: Path) -> tuple[int, int, int]:
    """(image_size, patch_size, features per image) of a LLaVA config.json ``cfg`` (``vision`` its
    ``vision_config``): (image_size / patch_size)^2 prompt-table rows, plus the CLS row when
    ``vision_feature_select_strategy`` is ``full``, checked against ``image_seq_length`` when given.

    Raises:
        EngineError: image_size or patch_size not a positive integer, image_size not a multiple of patch_size,
            a strategy other than ``default`` / ``full``, or another image_seq_length (names the key).
    """
    size = _int_key(vision, "image_size", cfg_path)
    patch = _int_key(vision, "patch_size", cfg_path)
    if size % patch:
        raise EngineError(f"image_size {size} is not a multiple of patch_size {patch}", key="image_size", path=cfg_path)
    strategy = cfg.get("vision_feature_select_strategy", "default")
    if strategy not in ("default", "full"):
        raise EngineError(
            f"vision_feature_select_strategy {strategy!r} is not 'default' or 'full'",
            key="vision_feature_select_strategy",
            path=cfg_path,
        )
    features = (size // patch) ** 2 + (1 if strategy == "full" else 0)
    seq = cfg.get("image_seq_length")
    if seq is not None and seq != features:
        raise EngineError(
            f"image_seq_length {seq} but the vision tower gives {features} features per image "
            f"(({size} / {patch})^2, strategy {strategy})",
            key="image_seq_length",
            path=cfg_path,
        )
    return size, patch, features


def _check_llava_image_token(root: Path, image_id: int, vocab: int) -> None:
    """Check that ``root``/tokenizer.json has the ``<image>`` token with id ``image_id`` (config.json's
    ``image_token_index``) and that the id is below ``vocab`` (``text_config.vocab_size``).

    Raises:
        TokenizerError: tokenizer.json missing or unreadable, no ``<image>`` token, another id, or an id >= vocab.
    """
    tok_path = root / "tokenizer.json"
    added = _added_tokens(tok_path)
    if IMAGE_TOKEN not in added:
        raise TokenizerError(f"has no {IMAGE_TOKEN} token", key="added_tokens", path=tok_path)
    if added[IMAGE_TOKEN] != image_id:
        raise TokenizerError(
            f"{IMAGE_TOKEN} is {added[IMAGE_TOKEN]} but config.json image_token_index is {image_id}",
            key="image_token_index",
            path=tok_path,
        )
    if image_id >= vocab:
        raise TokenizerError(f"{IMAGE_TOKEN} {image_id} is outside vocab_size {vocab}", key="vocab_size", path=tok_path)


def _check_llava_crop(root: Path, size: int) -> None:
    """Check that ``root``/preprocessor_config.json makes ``size`` x ``size`` pixel images
    (``crop_size``, or ``size`` when ``do_center_crop`` is off), ``size`` being ``vision_config.image_size``.

    Raises:
        EngineError: preprocessor_config.json missing or unreadable, or another image size (key ``crop_size``).
    """
    pre_path = root / "preprocessor_config.json"
    pre = _read_json(pre_path)
    crop = pre.get("crop_size") if pre.get("do_center_crop", True) else pre.get("size")
    dims = (crop.get("height"), crop.get("width")) if isinstance(crop, dict) else (crop, crop)
    if dims != (size, size):
        raise EngineError(
            f"the image processor makes {dims[0]}x{dims[1]} images but vision_config.image_size is {size}",
            key="crop_size",
            path=pre_path,
        )
