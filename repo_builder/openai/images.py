"""Chat ``image_url`` content parts -> the prompt and the ``image_url_input`` of a layout-multimodal ensemble.

OpenAI's chat format (platform.openai.com/docs/api-reference/chat, "image_url" content part): a user message's
``content`` is a list of parts ``{"type": "text", "text": ...}`` and ``{"type": "image_url", "image_url":
{"url": ..., "detail": "auto" | "low" | "high"}}``. :func:`image_chat` turns such messages into:

* a conversation of plain-text messages (for the chat template) where each image part becomes the model's
  image marker (``<image>`` for LLaVA) at its place in the text, so the ensemble's preprocessing splices the
  image's prompt-table rows there (repo_builder/runtime/multimodal.py);
* the image URLs in the same order, the ensemble's ``image_url_input``.

Only ``data:image/...;base64,`` URLs are taken (the server fetches nothing); the image itself is decoded by
the repository's preprocessing, whose errors name ``image_url_input``. ``detail`` is accepted and ignored
(the vision tower has one input size).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .protocol import APIError, ChatMessage, TextPart

IMAGE_MARKER = "<image>"


@dataclass
class ImageChat:
    """``conversation``: [{"role", "content": str}], image parts replaced by the marker; ``urls``: the data URIs."""

    conversation: list[dict[str, str]] = field(default_factory=list)
    urls: list[str] = field(default_factory=list)

    def ensemble_fields(self) -> dict[str, Any]:
        """``{"image_url_input": urls}``, or nothing for a text-only chat."""
        return {"image_url_input": list(self.urls)} if self.urls else {}


def _bad(param: str, message: str) -> APIError:
    return APIError(400, message, param=param, code="invalid_value")


def _url_of(part: Any, param: str) -> str:
    extra = getattr(part, "model_extra", None) or {}
    value = extra.get("image_url")
    url = value.get("url") if isinstance(value, dict) else value
    if not isinstance(url, str) or not url:
        raise _bad(f"{param}.image_url", 'an image_url part needs "image_url": {"url": "data:image/...;base64,..."}')
    if url.startswith(("http://", "https://")):
        raise _bad(
            f"{param}.image_url.url", "http(s) image URLs are not fetched (the server is offline); send a data: URI"
        )
    head, sep, payload = url.partition(",")
    if not (url.startswith("data:image/") and sep and head.endswith(";base64") and payload):
        raise _bad(f"{param}.image_url.url", f"is not a data:image/...;base64, URI (starts {url[:24]!r})")
    return url


def image_chat(messages: list[ChatMessage], *, max_images: int, marker: str = IMAGE_MARKER) -> ImageChat:
    """The conversation with image markers and the image URLs (see the module docstring).

    Args:
        max_images: the repository's ``multimodal_max_num_images``.
        marker: the model's image token text.
    Raises:
        APIError: 400 naming ``messages[i].content[j]...``: a part that is neither text nor image_url, an
            image outside a user message, a URL that is not a base64 image data URI, more than ``max_images``
            images, or a text part that already holds the marker.
    """
    out = ImageChat()
    for i, msg in enumerate(messages):
        role = "system" if msg.role == "developer" else msg.role
        if msg.content is None or isinstance(msg.content, str):
            text = msg.content or ""
            if marker in text:
                raise _bad(f"messages[{i}].content", f"contains the image marker {marker}; send an image_url part")
            out.conversation.append({"role": role, "content": text})
            continue
        pieces: list[str] = []
        for j, part in enumerate(msg.content):
            param = f"messages[{i}].content[{j}]"
            if isinstance(part, TextPart):
                if marker in part.text:
                    raise _bad(param, f"contains the image marker {marker}; send an image_url part")
                pieces.append(part.text)
            elif part.type == "image_url":
                if msg.role != "user":
                    raise _bad(param, f"image_url parts belong in user messages, not {msg.role}")
                out.urls.append(_url_of(part, param))
                if len(out.urls) > max_images:
                    raise _bad(param, f"more than {max_images} image(s) (the repository's multimodal_max_num_images)")
                pieces.append(marker)
            else:
                raise APIError(
                    400,
                    f"content part type {part.type!r} is not supported (text and image_url)",
                    param=param,
                    code="unsupported_parameter",
                )
        out.conversation.append({"role": role, "content": "".join(pieces)})
    return out
