"""End to end through a real tritonserver: layout multimodal (``render --layout multimodal``).

One repository, one server: the tiny random LLaVA checkpoint (CLIP 56 px vision tower + Llama, the packaged
Mistral v1 tokenizer with ``<image>``) served by the ensemble preprocessing -> multimodal_encoders ->
tensorrt_llm (prompt-table splice) -> postprocessing. Test images are made here (random pixels, PNG / JPEG).
Checked:

* ``text_output`` for a PNG data URI equals transformers' own greedy ``generate(pixel_values=...)`` on the same
  weights, decoded with the same tokenizer; the same image sent as UINT8 pixels in ``image_bytes_input`` gives
  the same text;
* a text-only request through the same ensemble equals transformers' text-only greedy output (NVIDIA's
  encoder asserts on it);
* OpenAI chat content parts (text + ``image_url``) turned into the prompt and ``image_url_input`` by
  repo_builder/openai/images.py give the same text;
* bad images fail alone with HTTP 400 naming the field;
* ``repo-builder openai`` on the repository: the openai SDK's ``chat.completions.create`` with an ``image_url``
  part returns the same text, and a bad image URL is a 400 naming the field.
"""

from __future__ import annotations

import base64
import io
from typing import Any

import numpy as np
import pytest
from e2e_support import http_infer, llava_reference
from e2e_support import image_data_uri as data_uri
from e2e_support import random_pixels as pixels

pytestmark = pytest.mark.server

MAX_TOKENS = 10
PROMPT = "<image>\nDescribe the image."


@pytest.fixture(scope="module")
def server(tiny_llava, tmp_path_factory, serve_module):
    from repo_builder.render.multimodal import render_multimodal_repository

    repo = tmp_path_factory.mktemp("multimodal") / "repo"
    render_multimodal_repository(tiny_llava, repo)
    with serve_module(repo, timeout=600.0) as srv:
        yield srv


@pytest.fixture(scope="module")
def reference(tiny_llava):
    """``reference(text, image | None) -> text``: transformers' greedy generate (:func:`llava_reference`)."""
    return llava_reference(tiny_llava, MAX_TOKENS)


def request(text: str, urls: list[str] | None = None, image: np.ndarray | None = None) -> list[dict[str, Any]]:
    inputs: list[dict[str, Any]] = [
        {"name": "text_input", "shape": [1, 1], "datatype": "BYTES", "data": [text]},
        {"name": "max_tokens", "shape": [1, 1], "datatype": "INT32", "data": [MAX_TOKENS]},
    ]
    if urls is not None:
        inputs.append({"name": "image_url_input", "shape": [1, len(urls)], "datatype": "BYTES", "data": urls})
    if image is not None:
        shape = [1, 1, *image.shape]
        inputs.append(
            {"name": "image_bytes_input", "shape": shape, "datatype": "UINT8", "data": image.reshape(-1).tolist()}
        )
    return inputs


def text_output(body: dict[str, Any]) -> str:
    (out,) = [o for o in body["outputs"] if o["name"] == "text_output"]
    return str(out["data"][0])


def test_image_description_equals_transformers_generate_with_pixel_values(server, reference):
    image = pixels(0)
    status, body = http_infer(server, "ensemble", request(PROMPT, [data_uri(image)]))
    assert status == 200, body
    expected = reference(PROMPT, image)
    assert text_output(body) == expected and expected.strip()
    other = pixels(1)
    assert reference(PROMPT, other) != expected  # the output depends on the image
    status, body = http_infer(server, "ensemble", request(PROMPT, image=other))
    assert status == 200, body
    assert text_output(body) == reference(PROMPT, other)


def test_openai_image_url_content_parts_through_the_ensemble(server, reference):
    from repo_builder.openai.images import image_chat
    from repo_builder.openai.protocol import ChatMessage

    image = pixels(2)
    parts = [
        {"type": "image_url", "image_url": {"url": data_uri(image, "JPEG"), "detail": "auto"}},
        {"type": "text", "text": "\nDescribe the image."},
    ]
    chat = image_chat([ChatMessage.model_validate({"role": "user", "content": parts})], max_images=1)
    (message,) = chat.conversation  # the tiny tokenizer has no chat template: the user text is the prompt
    assert message["content"] == PROMPT
    images = chat.ensemble_fields()["image_url_input"]
    status, body = http_infer(server, "ensemble", request(message["content"], images))
    assert status == 200, body
    from PIL import Image

    decoded = np.asarray(Image.open(io.BytesIO(base64.b64decode(parts[0]["image_url"]["url"].split(",", 1)[1]))))
    assert text_output(body) == reference(PROMPT, decoded)


def test_a_text_only_request_through_the_same_ensemble(server, reference):
    status, body = http_infer(server, "ensemble", request("Tell me a story."))
    assert status == 200, body
    assert text_output(body) == reference("Tell me a story.", None)


@pytest.mark.parametrize(
    ("inputs", "words"),
    [
        (lambda: request(PROMPT, ["data:image/png;base64," + base64.b64encode(b"junk").decode()]),
         "image_url_input: not a decodable image"),
        (lambda: request(PROMPT, ["https://example.com/cat.png"]), "image_url_input: http(s) URLs"),
        (lambda: request(PROMPT, [data_uri(pixels(0)), data_uri(pixels(1))]), "over max_num_images 1"),
        (lambda: request(PROMPT), "text_input: has 1 <image> marker(s) but the request sends 0"),
    ],
    ids=["undecodable", "http", "too-many", "marker-without-image"],
)  # fmt: skip
def test_bad_images_fail_alone_naming_the_field(server, inputs, words):
    status, body = http_infer(server, "ensemble", inputs())
    assert status == 400, body
    assert words in body.get("error", ""), body


# ------------------------------------------------------------------ OpenAI front end: /v1/chat/completions


def test_openai_chat_with_an_image_equals_transformers_generate(served_openai, reference):
    import openai

    client = openai.OpenAI(base_url=f"{served_openai}/v1", api_key="none", max_retries=0)
    image = pixels(3)
    content = [
        {"type": "image_url", "image_url": {"url": data_uri(image)}},
        {"type": "text", "text": "\nDescribe the image."},
    ]
    got = client.chat.completions.create(
        model="llava", messages=[{"role": "user", "content": content}], max_tokens=MAX_TOKENS
    )
    expected = reference(PROMPT, image)
    assert got.choices[0].message.content == expected and expected.strip()
    assert [m.id for m in client.models.list().data] == ["llava"]
    cases = [
        ([{"type": "image_url", "image_url": {"url": "https://x/cat.png"}}], "messages[0].content[0].image_url.url"),
        ([{"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}], "messages"),
    ]
    for parts, param in cases:
        with pytest.raises(openai.BadRequestError) as err:
            client.chat.completions.create(model="llava", messages=[{"role": "user", "content": parts}])
        assert err.value.body["param"] == param, err.value.body
    with pytest.raises(openai.BadRequestError) as err:  # temperature/top_p/seed pass (test_multimodal_qwen2_vl.py)
        client.chat.completions.create(
            model="llava", messages=[{"role": "user", "content": "hi"}], frequency_penalty=0.5
        )
    assert err.value.body["param"] == "frequency_penalty"
