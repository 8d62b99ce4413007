"""Image inputs of layout multimodal (vendored): data URIs and decoded pixel arrays to RGB PIL images.

Two request forms, both named after NVIDIA's ensemble inputs (triton-inference-server/tensorrtllm_backend
v0.16.0 - v0.19.0 ``all_models/multimodal/ensemble``):

* ``image_url_input`` (STRING, one or more per row): a ``data:image/<type>;base64,<payload>`` URI. PNG, JPEG,
  and anything else Pillow decodes, whatever the declared type (NVIDIA's preprocessing decodes only
  ``data:image/jpeg;base64,`` and sends every other string to ``requests.get``). http(s) URLs are refused: the
  server is offline by design;
* ``image_bytes_input`` (UINT8 ``[n_img, H, W, C]``, C = 3 or 4, or ``[H, W, C]`` for one image): decoded
  pixels, as NVIDIA's client sends them (``np.array([[PIL image]])``).

Every failure is a :class:`RequestError` naming the request field.
"""

from __future__ import annotations

import base64
import binascii
import io
from typing import Any

import numpy as np

from .errors import RequestError

#: Refuse a data URI over this many characters (an 8 MiB payload) before decoding it.
MAX_URI_CHARS = 12 * 1024 * 1024
#: Refuse an image with more pixels than this (a decompression bomb) before decoding it.
MAX_PIXELS = 4096 * 4096


def decode_data_uri(uri: str, field: str = "image_url_input") -> Any:
    """An RGB ``PIL.Image`` from a ``data:image/...;base64,`` URI.

    Raises:
        RequestError: not a data URI (an http(s) URL included), not base64, empty, too large, or not an image
            Pillow can decode (names ``field``).
    """
    from PIL import Image

    text = uri.strip()
    if text.startswith(("http://", "https://")):
        raise RequestError(field, "http(s) URLs are not fetched (the server is offline)", hint="send a data: URI")
    if not text.startswith("data:"):
        raise RequestError(field, f"is not a data: URI (starts {text[:16]!r})", hint="data:image/png;base64,...")
    head, sep, payload = text.partition(",")
    if not sep or not head.endswith(";base64"):
        raise RequestError(field, "a data: URI needs ';base64,' before its payload")
    if not head[5:].startswith("image/"):
        raise RequestError(field, f"media type {head[5:-7]!r} is not image/*")
    if len(payload) > MAX_URI_CHARS:
        raise RequestError(field, f"payload of {len(payload)} characters is over {MAX_URI_CHARS}")
    try:
        raw = base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise RequestError(field, f"payload is not base64: {exc}") from exc
    if not raw:
        raise RequestError(field, "payload is empty")
    try:
        with Image.open(io.BytesIO(raw)) as img:
            if img.width * img.height > MAX_PIXELS:
                raise RequestError(field, f"{img.width}x{img.height} pixels is over {MAX_PIXELS}")
            return img.convert("RGB")
    except RequestError:
        raise
    except Exception as exc:  # noqa: BLE001 - PIL raises several types for undecodable data
        raise RequestError(field, f"not a decodable image: {type(exc).__name__}: {exc}") from exc


def images_from_pixels(array: np.ndarray, field: str = "image_bytes_input") -> list[Any]:
    """RGB ``PIL.Image`` s from a UINT8 ``[n_img, H, W, C]`` (or ``[H, W, C]``) pixel array.

    Raises:
        RequestError: another dtype or rank, C not 3 or 4, or an empty dimension (names ``field``).
    """
    from PIL import Image

    if array.dtype != np.uint8:
        raise RequestError(field, f"must be UINT8 pixels, got {array.dtype}")
    if array.ndim == 3:
        array = array[None]
    if array.ndim != 4:
        raise RequestError(field, f"shape {list(array.shape)} is not [n_images, height, width, channels]")
    if 0 in array.shape:
        raise RequestError(field, f"shape {list(array.shape)} is empty")
    if array.shape[3] not in (3, 4):
        raise RequestError(field, f"has {array.shape[3]} channels, not 3 (RGB) or 4 (RGBA)")
    if array.shape[1] * array.shape[2] > MAX_PIXELS:
        raise RequestError(field, f"{array.shape[2]}x{array.shape[1]} pixels is over {MAX_PIXELS}")
    return [Image.fromarray(np.ascontiguousarray(img)).convert("RGB") for img in array]
