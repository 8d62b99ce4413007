"""End to end through a real tritonserver: layout multimodal rendered with ``--streaming`` (the tiny LLaVA).

``tensorrt_llm`` is decoupled and sends one response per generated token, each holding every token so far, the
last flagged final; postprocessing decodes each, so every streamed ``text_output`` is the text so far. Checked:

* a gRPC stream of the ensemble with an image: one response per token, each extending the one before, the last
  equal to transformers' greedy ``generate(pixel_values=...)`` (the non-streamed text);
* ``repo-builder openai``: the openai SDK's ``chat.completions.create(stream=True)`` with an ``image_url`` part
  gives content deltas whose concatenation equals the same text, a ``finish_reason`` on the last chunk, and the
  non-streamed request on the same repository the same text; a bad image in a stream is a 400 naming
  ``messages`` before any chunk.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import pytest
from e2e_support import image_data_uri as data_uri
from e2e_support import llava_reference
from e2e_support import random_pixels as pixels

pytestmark = pytest.mark.server

MAX_TOKENS = 8
PROMPT = "<image>\nDescribe the image."


@pytest.fixture(scope="module")
def server(tiny_llava, tmp_path_factory, serve_module):
    from repo_builder.render import RenderOptions
    from repo_builder.render.multimodal import render_multimodal_repository

    repo = tmp_path_factory.mktemp("mm_stream") / "repo"
    render_multimodal_repository(tiny_llava, repo, RenderOptions(streaming=True))
    with serve_module(repo, timeout=600.0) as srv:
        yield srv


@pytest.fixture(scope="module")
def reference(tiny_llava):
    """``reference(image) -> text`` for :data:`PROMPT`: transformers' greedy generate (:func:`llava_reference`)."""
    return functools.partial(llava_reference(tiny_llava, MAX_TOKENS), PROMPT)


def test_a_grpc_stream_sends_the_text_so_far_per_token_ending_with_the_full_text(server, reference):
    from e2e_support import Stream, grpc_input

    image = pixels(0)
    stream = Stream(server)
    try:
        inputs: list[Any] = [
            grpc_input("text_input", np.array([[PROMPT.encode()]], dtype=object)),
            grpc_input("max_tokens", np.array([[MAX_TOKENS]], np.int32)),
            grpc_input("image_url_input", np.array([[data_uri(image).encode()]], dtype=object)),
        ]
        stream.send("ensemble", inputs, "s1")
        got, errors = stream.collect_text({"s1"})
    finally:
        stream.close()
    assert errors == []
    texts = got["s1"]
    expected = reference(image)
    assert len(texts) > 1 and texts[-1] == expected and expected.strip()
    assert all(b.startswith(a.rstrip("\ufffd")) for a, b in zip(texts, texts[1:], strict=False))


def test_openai_stream_true_deltas_add_up_to_the_non_streamed_text(served_openai, reference):
    import openai

    client = openai.OpenAI(base_url=f"{served_openai}/v1", api_key="none", max_retries=0)
    image = pixels(1)
    content = [
        {"type": "image_url", "image_url": {"url": data_uri(image)}},
        {"type": "text", "text": "\nDescribe the image."},
    ]
    messages = [{"role": "user", "content": content}]
    chunks = list(client.chat.completions.create(model="llava", messages=messages, max_tokens=MAX_TOKENS, stream=True))
    deltas = [c.choices[0].delta.content or "" for c in chunks]
    expected = reference(image)
    assert "".join(deltas) == expected and expected.strip()
    assert sum(1 for d in deltas if d) > 1, deltas  # streamed in pieces, not one chunk
    assert chunks[-1].choices[0].finish_reason in ("stop", "length")
    whole = client.chat.completions.create(model="llava", messages=messages, max_tokens=MAX_TOKENS)
    assert whole.choices[0].message.content == expected
    bad = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]}]
    with pytest.raises(openai.BadRequestError) as err:
        list(client.chat.completions.create(model="llava", messages=bad, stream=True))
    assert err.value.body["param"] == "messages", err.value.body
