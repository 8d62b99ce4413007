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

#: Qwen2-VL's vision tokens by role (Qwen2-VL's tokenizer_config.json; checked against config.json's ids).
QWEN2_VL_TOKENS = {
    "vision_start_token_id": "<|vision_start|>",
    "vision_end_token_id": "<|vision_end|>",
    "image_token_id": "<|image_pad|>",
}


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


def _mrope_section(cfg: Mapping[str, Any], text: Mapping[str, Any], head_dim: int, cfg_path: Path) -> list[int]:
    """Qwen2-VL's ``mrope_section`` (rope_parameters, rope_scaling of the text config or the top level of
    config.json ``cfg``): the rotary dimensions per position axis (temporal, height, width), summing to
    ``head_dim`` / 2.

    Raises:
        EngineError: missing, not a list of ints, or not summing to half the head size (key ``mrope_section``).
    """
    rope = text.get("rope_parameters") or text.get("rope_scaling") or cfg.get("rope_scaling") or {}
    section = rope.get("mrope_section") if isinstance(rope, dict) else None
    if not (isinstance(section, list) and section and all(isinstance(x, int) for x in section)):
        raise EngineError("needs rope_parameters.mrope_section (a list of ints)", key="mrope_section", path=cfg_path)
    if 2 * sum(section) != head_dim:
        raise EngineError(
            f"mrope_section {section} sums to {sum(section)}, not head_dim / 2 = {head_dim // 2}",
            key="mrope_section",
            path=cfg_path,
        )
    return section


def _check_qwen2_vl_tokens(
    root: Path, cfg: Mapping[str, Any], text: Mapping[str, Any], vocab: int, cfg_path: Path
) -> dict[str, int]:
    """{config.json key: id} of Qwen2-VL's vision tokens (:data:`QWEN2_VL_TOKENS`; top level of ``cfg``, else
    its text config), each checked against tokenizer.json's added tokens under ``root`` and ``vocab``.

    Raises:
        EngineError: an id missing or not an integer (names the key).
        TokenizerError: a token missing from tokenizer.json, with another id, or outside vocab_size.
    """
    ids = {key: cfg.get(key, text.get(key)) for key in QWEN2_VL_TOKENS}
    for key, value in ids.items():
        if isinstance(value, bool) or not isinstance(value, int):
            raise EngineError(f"needs an integer {key}", key=key, path=cfg_path)
    tok_path = root / "tokenizer.json"
    added = _added_tokens(tok_path)
    for key, token in QWEN2_VL_TOKENS.items():
        if added.get(token) != ids[key]:
            raise TokenizerError(
                f"{token} is {added.get(token, 'missing')} but config.json {key} is {ids[key]}", key=key, path=tok_path
            )
        if ids[key] >= vocab:
            raise TokenizerError(f"{token} {ids[key]} is outside vocab_size {vocab}", key="vocab_size", path=tok_path)
    return ids


def _qwen2_vl_max_pixels(root: Path, patch: int, merge: int) -> int:
    """The image processor's largest image in pixels (preprocessor_config.json under ``root``: ``max_pixels``,
    or ``size.longest_edge``), its patch and merge sizes checked against the vision tower's ``patch`` /
    ``merge``.

    Raises:
        EngineError: the processor's patch_size / merge_size not the vision tower's, or max_pixels not an integer
            of at least one image token ((patch x merge)^2 pixels), naming the key.
    """
    pre_path = root / "preprocessor_config.json"
    pre = _read_json(pre_path)
    for key, want in (("patch_size", patch), ("merge_size", merge)):
        if pre.get(key, want) != want:
            raise EngineError(
                f"the image processor's {key} is {pre.get(key)} but the vision tower's is {want}",
                key=key,
                path=pre_path,
            )
    size: dict[str, Any] = pre["size"] if isinstance(pre.get("size"), dict) else {}
    max_pixels = pre.get("max_pixels", size.get("longest_edge"))
    if isinstance(max_pixels, bool) or not isinstance(max_pixels, int) or max_pixels < (patch * merge) ** 2:
        raise EngineError(
            f"needs an integer max_pixels >= {(patch * merge) ** 2} (one image token)", key="max_pixels", path=pre_path
        )
    return max_pixels
