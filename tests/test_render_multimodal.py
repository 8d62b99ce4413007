"""Layout multimodal without a server (repo_builder/render/multimodal.py, runtime/multimodal.py,
runtime/images.py): the facts read from a tiny random LLaVA checkpoint, the rendered models, bad values and
checkpoints refused naming their key, and the models' logic in-process (the prompt-table splice's greedy ids
equal transformers' own ``generate(pixel_values=...)``; bad images refused naming the field)."""

from __future__ import annotations

import base64
import json
import shutil

import numpy as np
import pytest
from render_support import image_data_uri, multimodal_runtime, random_pixels, render_multimodal_two_images
from typer.testing import CliRunner

from repo_builder.cli import app
from repo_builder.errors import EngineError, ParameterError, RenderError, TokenizerError
from repo_builder.render import RenderOptions, render_repository
from repo_builder.render.multimodal import multimodal_facts, render_multimodal_repository
from repo_builder.repository.lockfile import LOCK_NAME
from repo_builder.repository.pbtxt import parse_model_config, string_parameters
from repo_builder.runtime.errors import RequestError
from repo_builder.runtime.images import decode_data_uri, images_from_pixels

MODELS = ("ensemble", "preprocessing", "multimodal_encoders", "tensorrt_llm", "postprocessing")


def data_uri(fmt: str = "PNG", seed: int = 0, size: tuple[int, int] = (60, 40)) -> str:
    return image_data_uri(random_pixels(seed, size), fmt)


@pytest.fixture(scope="module")
def repo(tiny_llava, tmp_path_factory):
    return render_multimodal_two_images(tiny_llava, tmp_path_factory.mktemp("mm"))


@pytest.fixture(scope="module")
def runtime(repo):
    return multimodal_runtime(repo)


def test_facts_come_from_the_checkpoint(tiny_llava):
    f = multimodal_facts(tiny_llava)
    assert (f.vocab_size, f.hidden_size, f.features_per_image, f.image_token_id) == (32064, 64, 16, 32000)
    assert (f.image_size, f.patch_size, f.end_id, f.max_position_embeddings) == (56, 14, 2, 512)


def test_the_repository_has_five_models_and_the_table_size(repo):
    for model in MODELS:
        parse_model_config((repo / model / "config.pbtxt").read_text(), path=model)
    assert (repo / "ensemble" / "1").is_dir() and (
        repo / "tensorrt_llm" / "1" / "engine" / "model.safetensors"
    ).is_file()
    engine = string_parameters(parse_model_config((repo / "tensorrt_llm" / "config.pbtxt").read_text()))
    # max_batch_size 8 x 16 features x 2 images
    assert engine["max_prompt_embedding_table_size"] == "256"
    enc = string_parameters(parse_model_config((repo / "multimodal_encoders" / "config.pbtxt").read_text()))
    assert enc["max_prompt_table_rows"] == "32"
    lock = json.loads((repo / LOCK_NAME).read_text())
    assert lock["values"]["multimodal_max_prompt_table_size"] == {"value": 256, "origin": "checkpoint"}


def test_a_prompt_table_too_small_for_batch_x_features_is_refused(tiny_llava, tmp_path):
    opts = RenderOptions(user_values={"multimodal_max_batch_size": "4", "multimodal_max_prompt_table_size": "63"})
    with pytest.raises(ParameterError) as err:
        render_multimodal_repository(tiny_llava, tmp_path / "r", opts)
    assert err.value.key == "multimodal_max_prompt_table_size" and "4 x 16" in str(err.value)
    assert not (tmp_path / "r").exists()
    with pytest.raises(ParameterError, match="whisper_max_tokens"):
        render_multimodal_repository(tiny_llava, tmp_path / "r", RenderOptions(user_values={"whisper_max_tokens": "9"}))
    with pytest.raises(RenderError) as bad:
        render_multimodal_repository(tiny_llava, tmp_path / "r", RenderOptions(serve_path="relative/repo"))
    assert bad.value.key == "--serve-path" and not (tmp_path / "r").exists()


@pytest.mark.parametrize(
    ("edit", "error", "key"),
    [
        (lambda c, t, p: c.update(model_type="llava_next"), EngineError, "model_type"),
        (lambda c, t, p: c.update(model_type="llama"), EngineError, "model_type"),
        (lambda c, t, p: c.update(image_token_index=31999), TokenizerError, "image_token_index"),
        (lambda c, t, p: c.update(image_seq_length=576), EngineError, "image_seq_length"),
        (lambda c, t, p: p.update(crop_size={"height": 224, "width": 224}), EngineError, "crop_size"),
        (lambda c, t, p: t.update(added_tokens=[a for a in t["added_tokens"] if a["content"] != "<image>"]),
         TokenizerError, "added_tokens"),
    ],
)  # fmt: skip
def test_bad_checkpoints_are_refused_naming_the_key(tiny_llava, tmp_path, edit, error, key):
    ckpt = tmp_path / "ckpt"
    shutil.copytree(tiny_llava, ckpt)
    files = {
        n: json.loads((ckpt / n).read_text()) for n in ("config.json", "tokenizer.json", "preprocessor_config.json")
    }
    edit(files["config.json"], files["tokenizer.json"], files["preprocessor_config.json"])
    for name, data in files.items():
        (ckpt / name).write_text(json.dumps(data))
    with pytest.raises(error) as err:
        render_multimodal_repository(ckpt, tmp_path / "out")
    assert err.value.key == key
    assert not (tmp_path / "out").exists()


def test_cli_renders_and_refuses_what_the_layout_lacks(tiny_llava, tmp_path):
    runner = CliRunner()
    out = tmp_path / "cli"
    result = runner.invoke(app, ["render", "--layout", "multimodal", "--engine-dir", str(tiny_llava), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert "16 features per image" in result.output and (out / "multimodal_encoders" / "config.pbtxt").is_file()
    again = runner.invoke(app, ["render", "--layout", "multimodal", "--engine-dir", str(tiny_llava), "-o", str(out)])
    assert again.exit_code != 0 and "already exists" in again.output
    with pytest.raises(RenderError, match="LLaVA checkpoint alone"):
        render_repository(tiny_llava, tiny_llava, tmp_path / "x", RenderOptions(layout="multimodal"))


def test_splice_equals_transformers_generate_with_pixel_values(tiny_llava, runtime):
    import torch
    from transformers import LlavaForConditionalGeneration

    text, encoder, engine = runtime
    model = LlavaForConditionalGeneration.from_pretrained(tiny_llava).eval()
    images = text.images_of([data_uri("PNG", 0), data_uri("JPEG", 1)], None)
    pv = text.pixel_values(images)
    ids = text.prompt_ids("<image> and <image>: which is brighter?", len(images))
    assert ids.count(32064) == 1 and ids.count(32064 + 16) == 1 and max(ids) == 32064 + 31
    table = encoder.table(pv)
    assert table.shape == (32, 64)
    got = engine.generate(ids, 10, None, table, 32)
    native = [32000 if i >= 32064 else i for i in ids]
    with torch.inference_mode():
        ref = model.generate(
            input_ids=torch.tensor([native]), pixel_values=torch.from_numpy(pv), max_new_tokens=10, do_sample=False
        )[0, len(native) :].tolist()
    assert got == ref
    # no <image> marker: the image block goes right after BOS, the text's own ids follow
    plain = text.prompt_ids("hi", 0)
    assert text.prompt_ids("hi", 1) == [plain[0], *range(32064, 32080), *plain[1:]]
    with pytest.raises(RequestError, match="prompt_embedding_table"):
        engine.generate(ids, 2, None, table[:16], 16)


def test_bad_images_are_refused_naming_the_field(runtime):
    text = runtime[0]
    for uri, what in (
        ("https://example.com/a.png", "http"),
        ("data:image/png;base64,!!!", "base64"),
        ("data:image/png;base64," + base64.b64encode(b"not an image").decode(), "decodable"),
        ("data:text/plain;base64,aGk=", "image/"),
        ("data:image/png;base64,", "empty"),
        ("cat.png", "data: URI"),
    ):
        with pytest.raises(RequestError, match=what) as err:
            decode_data_uri(uri)
        assert err.value.field == "image_url_input"
    for array in (
        np.zeros((1, 8, 8, 3), np.float32),
        np.zeros((1, 8, 8, 2), np.uint8),
        np.zeros((0, 8, 8, 3), np.uint8),
    ):
        with pytest.raises(RequestError) as err:
            images_from_pixels(array)
        assert err.value.field == "image_bytes_input"
    with pytest.raises(RequestError, match="max_num_images 2") as err:
        text.images_of([data_uri()] * 3, None)
    with pytest.raises(RequestError, match="2 <image> marker") as err:
        text.prompt_ids("<image><image>", 1)
    assert err.value.field == "text_input"


def test_streaming_makes_the_engine_decoupled_and_tells_the_front_end(tiny_llava, repo, tmp_path):
    from repo_builder.openai.vision import text_delta

    out = tmp_path / "stream"
    render_multimodal_repository(tiny_llava, out, RenderOptions(streaming=True))
    engine = parse_model_config((out / "tensorrt_llm" / "config.pbtxt").read_text())
    assert engine.model_transaction_policy.decoupled
    plain = parse_model_config((repo / "tensorrt_llm" / "config.pbtxt").read_text())
    assert not plain.model_transaction_policy.decoupled
    facts = json.loads((out / "preprocessing" / "1" / "multimodal" / "multimodal.json").read_text())
    assert facts["streaming"] is True and "streaming" not in json.loads(
        (repo / "preprocessing" / "1" / "multimodal" / "multimodal.json").read_text()
    )
    # the OpenAI front end's deltas of the text so far: a trailing U+FFFD (a cut character) waits for its bytes
    assert [text_delta("", "ab"), text_delta("ab", "abc\ufffd"), text_delta("abc", "abcé")] == ["ab", "c", "é"]


def test_sampling_equals_transformers_generate_do_sample_with_the_seed(tiny_llava, runtime):
    import torch
    from transformers import LlavaForConditionalGeneration

    from repo_builder.runtime.multimodal import Sampling

    text, encoder, engine = runtime
    model = LlavaForConditionalGeneration.from_pretrained(tiny_llava).eval()
    images = text.images_of([data_uri("PNG", 4)], None)
    pv = text.pixel_values(images)
    ids = text.prompt_ids("<image> Describe it.", 1)
    native = [32000 if i >= 32064 else i for i in ids]
    table = encoder.table(pv)
    runs = {}
    for seed in (3, 4):
        got = engine.generate(ids, 10, None, table, 16, sampling=Sampling(0.8, 0.9, seed))
        torch.manual_seed(seed)
        with torch.inference_mode():
            ref = model.generate(
                input_ids=torch.tensor([native]),
                pixel_values=torch.from_numpy(pv),
                max_new_tokens=10,
                do_sample=True,
                temperature=0.8,
                top_p=0.9,
                top_k=0,
            )[0, len(native) :].tolist()
        assert got == ref, seed
        runs[seed] = got
    assert runs[3] != runs[4] != engine.generate(ids, 10, None, table, 16)  # sampled, and by the seed
    assert engine.generate(ids, 10, None, table, 16, sampling=Sampling(0.0, 0.5, 9)) == engine.generate(
        ids, 10, None, table, 16
    )  # temperature 0: greedy
    for args, field in (((-1.0, None, None), "temperature"), ((0.5, 1.5, None), "top_p")):
        with pytest.raises(RequestError) as err:
            Sampling(*args)
        assert err.value.field == field
