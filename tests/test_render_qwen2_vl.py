"""Layout multimodal for Qwen2-VL without a server (repo_builder/render/multimodal.py ``qwen2_vl_facts``,
runtime/multimodal.py): facts read from a tiny random Qwen2-VL checkpoint (no hard-coded 7B ids), the extra
mrope tensors in the rendered models, bad checkpoints refused naming their key, and the models' logic in-process:
greedy ids from preprocessing -> encoder (prompt table + ``MROPE_ROTARY_COS_SIN``) -> engine equal
transformers' own ``Qwen2VLForConditionalGeneration.generate(pixel_values=..., image_grid_thw=...)``."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from render_support import multimodal_runtime, random_pixels, render_multimodal_two_images

from repo_builder.errors import EngineError, TokenizerError
from repo_builder.render.multimodal import multimodal_facts, render_multimodal_repository
from repo_builder.repository.lockfile import read_lock
from repo_builder.repository.pbtxt import parse_model_config, string_parameters
from repo_builder.repository.validate import validate_repository
from repo_builder.runtime.errors import RequestError

PROMPT = "<|im_start|>user\nDescribe the image.<|im_end|>\n<|im_start|>assistant\n"


def image(seed: int, size: tuple[int, int] = (80, 60)):
    from PIL import Image

    return Image.fromarray(random_pixels(seed, size))


@pytest.fixture(scope="module")
def repo(tiny_qwen2_vl, tmp_path_factory):
    return render_multimodal_two_images(tiny_qwen2_vl, tmp_path_factory.mktemp("qwen"))


@pytest.fixture(scope="module")
def runtime(repo):
    return multimodal_runtime(repo)


def test_facts_come_from_the_checkpoint_not_qwen2_vl_7b(tiny_qwen2_vl):
    f = multimodal_facts(tiny_qwen2_vl)
    assert (f.model_type, f.vocab_size, f.hidden_size, f.head_dim, f.mrope_section) == (
        "qwen2_vl", 151936, 128, 128, (16, 24, 24),
    )  # fmt: skip
    assert (f.image_token_id, f.vision_start_id, f.vision_end_id, f.spatial_merge_size) == (151655, 151652, 151653, 2)
    assert f.features_per_image == 16  # max_pixels 112 x 112 / (14 x 2)^2


def test_the_repository_wires_the_mrope_tensors(repo):
    ens = (repo / "ensemble" / "config.pbtxt").read_text()
    for name in ("_IMAGE_GRID_THW", "_VISION_INPUT_ID", "mrope_rotary_cos_sin", "mrope_position_deltas"):
        assert name in ens
    engine = parse_model_config((repo / "tensorrt_llm" / "config.pbtxt").read_text())
    assert {"mrope_rotary_cos_sin", "mrope_position_deltas"} <= {i.name for i in engine.input}
    assert string_parameters(engine)["max_prompt_embedding_table_size"] == "256"  # 8 x 16 x 2
    assert validate_repository(repo) == []
    lock = read_lock(repo)
    assert lock is not None and lock.data["facts"]["model_type"] == "qwen2_vl"
    # transformers 5 keeps the chat template apart: the OpenAI front end reads it from here
    assert (repo / "preprocessing" / "1" / "multimodal" / "chat_template.jinja").is_file()


@pytest.mark.parametrize(
    ("edit", "error", "key"),
    [
        (lambda c, t, p: c["text_config"]["rope_parameters"].update(mrope_section=[16, 16, 16]), EngineError,
         "mrope_section"),
        (lambda c, t, p: c.update(image_token_id=151654), TokenizerError, "image_token_id"),
        (lambda c, t, p: c["text_config"].update(vocab_size=151000), TokenizerError, "vocab_size"),
        (lambda c, t, p: p.update(merge_size=4), EngineError, "merge_size"),
        (lambda c, t, p: c.update(model_type="mllama"), EngineError, "model_type"),
    ],
)  # fmt: skip
def test_bad_checkpoints_are_refused_naming_the_key(tiny_qwen2_vl, tmp_path, edit, error, key):
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    for src in tiny_qwen2_vl.iterdir():
        (ckpt / src.name).symlink_to(src)
    names = ("config.json", "tokenizer.json", "preprocessor_config.json")
    files = {n: json.loads((tiny_qwen2_vl / n).read_text()) for n in names}
    edit(files["config.json"], files["tokenizer.json"], files["preprocessor_config.json"])
    for name, data in files.items():
        (ckpt / name).unlink()
        (ckpt / name).write_text(json.dumps(data))
    with pytest.raises(error) as err:
        render_multimodal_repository(ckpt, tmp_path / "out")
    assert err.value.key == key
    assert not (tmp_path / "out").exists()
    shutil.rmtree(ckpt)


def test_mrope_splice_equals_transformers_generate_with_image_grid_thw(runtime):
    import torch

    text, encoder, engine = runtime
    for images in ([image(1)], [image(2), image(3, (50, 90))], []):
        pixel_values, grid = text.qwen_pixels(images)
        ids, vision = text.prompt_and_vision_ids(PROMPT, text.features_of(grid))
        table = encoder.table(pixel_values, grid)
        cos_sin, delta = encoder.mrope_cos_sin(vision, grid)
        mrope = (cos_sin, delta)
        got = engine.generate(ids, 10, text.facts["end_id"], table if len(table) else None, len(table), mrope)
        inp = torch.tensor([vision])
        kwargs = {}
        if images:
            kwargs = {
                "pixel_values": torch.from_numpy(pixel_values),
                "image_grid_thw": torch.from_numpy(grid),
                "mm_token_type_ids": (inp == text.image_token_id).int(),
            }
        with torch.inference_mode():
            ref = encoder.model.generate(
                input_ids=inp, attention_mask=torch.ones_like(inp), max_new_tokens=10, do_sample=False, **kwargs
            )
        assert got == ref[0, len(vision) :].tolist(), (len(images), grid.tolist())
        if images:
            assert delta < 0  # the image's 3-D positions: fewer distinct positions than tokens
            flat, _ = encoder.mrope_cos_sin(vision, np.zeros((0, 3), np.int64))  # 1-D positions instead
            plain = engine.generate(ids, 10, text.facts["end_id"], table, len(table), (flat, 0))
            assert plain != got, "mrope positions must matter for this check to mean anything"


def test_the_engine_refuses_missing_or_short_mrope(runtime):
    text, encoder, engine = runtime
    ids = text.prompt_ids(PROMPT, [])
    with pytest.raises(RequestError) as err:
        engine.generate(ids, 2, None, None, 0, None)
    assert err.value.field == "mrope_rotary_cos_sin"
    with pytest.raises(RequestError, match="2 x"):
        engine.generate(ids, 2, None, None, 0, (np.zeros(10, np.float32), 0))
