"""End to end through a real tritonserver: layout multimodal for Qwen2-VL (``render --layout multimodal`` on a
``Qwen2VLForConditionalGeneration`` checkpoint).

One repository, one server: the tiny random Qwen2-VL (repo_builder.testing_multimodal.make_tiny_qwen2_vl, the
packaged Qwen3 tokenizer) served by preprocessing (image processor -> pixel patches + ``IMAGE_GRID_THW``, fake ids
+ ``VISION_INPUT_ID``) -> multimodal_encoders (vision tower -> prompt table; transformers' ``get_rope_index`` ->
``MROPE_ROTARY_COS_SIN`` / ``MROPE_POSITION_DELTAS``) -> tensorrt_llm (splice + the given 3-D rotary positions)
-> postprocessing. Checked:

* ``text_output`` for PNG and JPEG data URIs, one and two images, equals transformers' own greedy
  ``generate(pixel_values=..., image_grid_thw=...)`` on the same weights, decoded with the same tokenizer;
* a text-only request through the same ensemble equals transformers' text-only output;
* ``repo-builder openai``: the openai SDK's ``chat.completions.create`` with ``image_url`` parts (the
  tokenizer's chat template, Qwen2-VL's image block at the part's place) returns the same text; with
  ``temperature``, ``top_p`` and ``seed`` it equals transformers' ``generate(do_sample=True)`` after
  ``torch.manual_seed(seed)``; ``presence_penalty`` is refused with 400 naming it.
"""

from __future__ import annotations

import base64
import io
from typing import Any

import numpy as np
import pytest
from e2e_support import http_infer, random_pixels
from e2e_support import image_data_uri as data_uri

pytestmark = pytest.mark.server

MAX_TOKENS = 10
BLOCK = "<|vision_start|><|image_pad|><|vision_end|>"
PROMPT = f"<|im_start|>user\n{BLOCK}Describe the image.<|im_end|>\n<|im_start|>assistant\n"


def pixels(seed: int, size: tuple[int, int] = (80, 60)) -> np.ndarray:
    return random_pixels(seed, size)


def decoded(uri: str) -> np.ndarray:
    from PIL import Image

    return np.asarray(Image.open(io.BytesIO(base64.b64decode(uri.split(",", 1)[1]))).convert("RGB"))


@pytest.fixture(scope="module")
def server(tiny_qwen2_vl, tmp_path_factory, serve_module):
    from repo_builder.render import RenderOptions
    from repo_builder.render.multimodal import render_multimodal_repository

    repo = tmp_path_factory.mktemp("qwen2_vl") / "repo"
    render_multimodal_repository(tiny_qwen2_vl, repo, RenderOptions(user_values={"multimodal_max_num_images": "2"}))
    with serve_module(repo, timeout=600.0) as srv:
        yield srv


@pytest.fixture(scope="module")
def reference(tiny_qwen2_vl):
    """``reference(text, images) -> text``: transformers' greedy generate, each ``<|image_pad|>`` expanded to the
    image's ``t x h x w / merge^2`` tokens as Qwen2-VL's processor does, decoded with the same tokenizer."""
    import torch
    from PIL import Image
    from transformers import AutoImageProcessor, AutoTokenizer, Qwen2VLForConditionalGeneration

    model = Qwen2VLForConditionalGeneration.from_pretrained(tiny_qwen2_vl).eval()
    tok = AutoTokenizer.from_pretrained(tiny_qwen2_vl)
    processor = AutoImageProcessor.from_pretrained(tiny_qwen2_vl)
    pad = model.config.image_token_id

    def run(text: str, images: list[np.ndarray], **sample: Any) -> str:
        kwargs: dict[str, Any] = {}
        counts: list[int] = []
        if images:
            out = processor(images=[Image.fromarray(i) for i in images], return_tensors="pt")
            kwargs = {"pixel_values": out["pixel_values"], "image_grid_thw": out["image_grid_thw"]}
            counts = [int(g.prod()) // 4 for g in out["image_grid_thw"]]
        ids: list[int] = []
        for i in tok(text)["input_ids"]:
            ids += [i] * counts.pop(0) if i == pad else [i]
        inp = torch.tensor([ids])
        if images:
            kwargs["mm_token_type_ids"] = (inp == pad).int()
        if sample:  # transformers' sampling after torch.manual_seed(seed), as the engine's Sampling
            torch.manual_seed(sample.pop("seed"))
            kwargs.update(do_sample=True, top_k=0, **sample)
        else:
            kwargs["do_sample"] = False
        with torch.inference_mode():
            got = model.generate(
                input_ids=inp, attention_mask=torch.ones_like(inp), max_new_tokens=MAX_TOKENS, **kwargs
            )  # noqa: E501
        return str(tok.decode(got[0, len(ids) :].tolist(), skip_special_tokens=True))

    return run


def request(text: str, urls: list[str] | None = None) -> list[dict[str, Any]]:
    inputs: list[dict[str, Any]] = [
        {"name": "text_input", "shape": [1, 1], "datatype": "BYTES", "data": [text]},
        {"name": "max_tokens", "shape": [1, 1], "datatype": "INT32", "data": [MAX_TOKENS]},
    ]
    if urls is not None:
        inputs.append({"name": "image_url_input", "shape": [1, len(urls)], "datatype": "BYTES", "data": urls})
    return inputs


def text_output(body: dict[str, Any]) -> str:
    (out,) = [o for o in body["outputs"] if o["name"] == "text_output"]
    return str(out["data"][0])


def test_image_descriptions_equal_transformers_generate_with_image_grid_thw(server, reference):
    image = pixels(0)
    status, body = http_infer(server, "ensemble", request(PROMPT, [data_uri(image)]))
    assert status == 200, body
    expected = reference(PROMPT, [image])
    assert text_output(body) == expected and expected.strip()
    assert reference(PROMPT, [pixels(1)]) != expected  # the output depends on the image
    uris = [data_uri(pixels(2), "JPEG"), data_uri(pixels(3, (112, 56)))]
    two = PROMPT.replace(BLOCK, BLOCK + "and" + BLOCK)
    status, body = http_infer(server, "ensemble", request(two, uris))
    assert status == 200, body
    assert text_output(body) == reference(two, [decoded(u) for u in uris])


def test_a_text_only_request_through_the_same_ensemble(server, reference):
    text = "<|im_start|>user\nTell me a story.<|im_end|>\n<|im_start|>assistant\n"
    status, body = http_infer(server, "ensemble", request(text))
    assert status == 200, body
    assert text_output(body) == reference(text, [])


def test_a_marker_without_an_image_fails_alone_naming_the_field(server):
    status, body = http_infer(server, "ensemble", request(PROMPT))
    assert status == 400 and f"text_input: has 1 {BLOCK} marker(s)" in body.get("error", ""), body


def test_openai_chat_with_image_url_parts_equals_transformers_generate(served_openai, reference, tiny_qwen2_vl):
    import openai
    from transformers import AutoTokenizer

    client = openai.OpenAI(base_url=f"{served_openai}/v1", api_key="none", max_retries=0)
    assert [m.id for m in client.models.list().data] == ["qwen2-vl"]
    image = pixels(4)
    content = [
        {"type": "text", "text": "Look: "},
        {"type": "image_url", "image_url": {"url": data_uri(image)}},
        {"type": "text", "text": " What is it?"},
    ]
    got = client.chat.completions.create(
        model="qwen2-vl", messages=[{"role": "user", "content": content}], max_tokens=MAX_TOKENS
    )
    tok = AutoTokenizer.from_pretrained(tiny_qwen2_vl)
    prompt = tok.apply_chat_template(
        [{"role": "user", "content": f"Look: {BLOCK} What is it?"}], tokenize=False, add_generation_prompt=True
    )
    expected = reference(prompt, [image])
    assert got.choices[0].message.content == expected and expected.strip()
    sampled = {}
    for seed in (5, 6):
        got = client.chat.completions.create(
            model="qwen2-vl",
            messages=[{"role": "user", "content": content}],
            max_tokens=MAX_TOKENS,
            temperature=0.9,
            top_p=0.95,
            seed=seed,
        )
        sampled[seed] = got.choices[0].message.content
        assert sampled[seed] == reference(prompt, [image], temperature=0.9, top_p=0.95, seed=seed)
    assert sampled[5] != sampled[6] and expected not in sampled.values()  # sampled, by the seed
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(
            model="qwen2-vl", messages=[{"role": "user", "content": content}], presence_penalty=0.5
        )
    assert err.value.body["param"] == "presence_penalty", err.value.body
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(model="qwen2-vl", messages=[{"role": "user", "content": content}], top_p=1.5)
    assert err.value.body["param"] == "top_p", err.value.body
