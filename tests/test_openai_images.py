"""repo_builder/openai/images.py: chat ``image_url`` content parts -> a conversation with ``<image>`` markers
and the ensemble's ``image_url_input`` (layout multimodal); bad parts refused naming the field."""

from __future__ import annotations

import pytest

from repo_builder.openai.images import image_chat
from repo_builder.openai.protocol import APIError, ChatMessage

PNG = "data:image/png;base64,iVBORw0KGgo="


def messages(*items: dict) -> list[ChatMessage]:
    return [ChatMessage.model_validate(m) for m in items]


def test_image_parts_become_markers_in_place_and_urls_in_order():
    chat = image_chat(
        messages(
            {"role": "developer", "content": "Be brief."},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "Compare "},
                    {"type": "image_url", "image_url": {"url": PNG, "detail": "low"}},
                    {"type": "text", "text": " with "},
                    {"type": "image_url", "image_url": {"url": PNG.replace("png", "jpeg")}},
                ],
            },
        ),
        max_images=2,
    )
    assert chat.conversation == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Compare <image> with <image>"},
    ]
    assert chat.ensemble_fields() == {"image_url_input": [PNG, PNG.replace("png", "jpeg")]}
    assert image_chat(messages({"role": "user", "content": "hi"}), max_images=1).ensemble_fields() == {}


@pytest.mark.parametrize(
    ("content", "param", "words"),
    [
        ([{"type": "image_url", "image_url": {"url": "https://x/cat.png"}}], "messages[0].content[0].image_url.url",
         "not fetched"),
        ([{"type": "image_url", "image_url": {"url": "data:text/plain;base64,aGk="}}],
         "messages[0].content[0].image_url.url", "not a data:image"),
        ([{"type": "image_url"}], "messages[0].content[0].image_url", "needs"),
        ([{"type": "image_url", "image_url": {"url": PNG}}] * 2, "messages[0].content[1]", "more than 1 image"),
        ([{"type": "input_audio", "input_audio": {}}], "messages[0].content[0]", "'input_audio' is not supported"),
        ([{"type": "text", "text": "<image> sneaky"}], "messages[0].content[0]", "image marker"),
    ],
)  # fmt: skip
def test_bad_parts_are_refused_naming_the_field(content, param, words):
    with pytest.raises(APIError) as err:
        image_chat(messages({"role": "user", "content": content}), max_images=1)
    assert err.value.status == 400 and err.value.param == param and words in err.value.message


def test_an_image_outside_a_user_message_is_refused():
    with pytest.raises(APIError) as err:
        image_chat(
            messages({"role": "assistant", "content": [{"type": "image_url", "image_url": {"url": PNG}}]}),
            max_images=1,
        )
    assert err.value.param == "messages[0].content[0]"
