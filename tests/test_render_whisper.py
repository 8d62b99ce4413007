"""Layout whisper without a server (repo_builder/render/whisper.py, runtime/whisper_bls.py,
runtime/whisper_engine.py): the facts read from a tiny random Whisper checkpoint with the real multilingual
tokenizer, the rendered models, every bad value or checkpoint refused naming its key, and the BLS's and the
engine's logic in-process (greedy ids equal transformers' own ``generate``; bad audio refused naming the
field)."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from cli_support import assert_refused
from typer.testing import CliRunner

from repo_builder.cli import app
from repo_builder.errors import EngineError, ParameterError, RenderError, TokenizerError
from repo_builder.render import RenderOptions, render_repository
from repo_builder.render.whisper import render_whisper_repository, whisper_facts
from repo_builder.repository.pbtxt import parse_model_config, string_parameters
from repo_builder.runtime.errors import RequestError
from repo_builder.testing_whisper import write_whisper_tokenizer

RATE = 16000


def tone(seconds: float, freq: float = 440.0, seed: int = 0) -> np.ndarray:
    """A sine plus a little noise, float32 in [-1, 1]."""
    t = np.arange(int(seconds * RATE)) / RATE
    noise = np.random.default_rng(seed).standard_normal(t.size)
    return (0.3 * np.sin(2 * np.pi * freq * t) + 0.05 * noise).astype(np.float32)


@pytest.fixture(scope="module")
def repo(tiny_whisper, tmp_path_factory):
    out = tmp_path_factory.mktemp("whisper") / "repo"
    render_whisper_repository(tiny_whisper, out)
    return out


def test_facts_come_from_the_checkpoint(tiny_whisper):
    f = whisper_facts(tiny_whisper)
    assert (f.num_mel_bins, f.vocab_size, f.num_languages, f.max_target_positions) == (80, 51865, 99, 448)
    # tiny ... large-v2 numbering (99 languages): NVIDIA's 100-language prompt would say 50360 / 50364
    assert f.special_ids == {"eot": 50257, "sot": 50258, "translate": 50358, "transcribe": 50359, "notimestamps": 50363}
    assert f.languages[:3] == ["en", "zh", "de"] and f.languages[-1] == "su"
    assert f.default_prefix == "<|startoftranscript|><|en|><|transcribe|><|notimestamps|>"
    assert f.default_prefix_ids == [50258, 50259, 50359, 50363]


def test_a_100_language_tokenizer_moves_the_task_ids(tiny_whisper, tmp_path):
    ckpt = tmp_path / "v3"
    ckpt.mkdir()
    cfg = json.loads((tiny_whisper / "config.json").read_text())
    (ckpt / "config.json").write_text(json.dumps({**cfg, "vocab_size": 51866}))
    write_whisper_tokenizer(ckpt, num_languages=100)
    f = whisper_facts(ckpt)
    assert f.num_languages == 100 and f.languages[-1] == "yue"
    assert (f.special_ids["transcribe"], f.special_ids["notimestamps"]) == (50360, 50364)


def test_rendered_models(repo, tiny_whisper):
    assert sorted(p.name for p in repo.iterdir() if p.is_dir()) == ["tensorrt_llm", "whisper_bls"]
    bls = parse_model_config((repo / "whisper_bls" / "config.pbtxt").read_text())
    assert {i.name: (i.data_type, list(i.dims)) for i in bls.input} == {
        "TEXT_PREFIX": (13, [1]),  # TYPE_STRING
        "WAV": (11, [-1]),  # TYPE_FP32
        "WAV_LENS": (8, [1]),  # TYPE_INT32
    }
    assert [o.name for o in bls.output] == ["TRANSCRIPTS"] and bls.max_batch_size == 8
    params = string_parameters(bls)
    assert (params["n_mels"], params["max_tokens"], params["max_audio_seconds"]) == ("80", "96", "30.0")
    engine = parse_model_config((repo / "tensorrt_llm" / "config.pbtxt").read_text())
    assert "encoder_input_features" in {i.name for i in engine.input}
    assert string_parameters(engine)["engine_dir"] == str(repo / "tensorrt_llm" / "1" / "engine")
    assert (repo / "tensorrt_llm" / "1" / "engine" / "model.safetensors").is_file()
    for model in ("whisper_bls", "tensorrt_llm"):
        assert (repo / model / "1" / "repo_builder_runtime" / "whisper_bls.py").is_file()
    facts = json.loads((repo / "whisper_bls" / "1" / "whisper" / "whisper.json").read_text())
    assert facts["max_tokens"] == 96 and facts["num_languages"] == 99
    assert (repo / "whisper_bls" / "1" / "whisper" / "tokenizer.json").is_file()


def test_values_are_typed_and_checked_naming_the_key(tiny_whisper, tmp_path):
    out = tmp_path / "r"
    render_whisper_repository(
        tiny_whisper, out, _opts(whisper_max_tokens="444", whisper_max_batch_size="2", whisper_bls_count="3")
    )
    bls = parse_model_config((out / "whisper_bls" / "config.pbtxt").read_text())
    assert bls.max_batch_size == 2 and bls.instance_group[0].count == 3
    assert string_parameters(bls)["max_tokens"] == "444"
    cases = [
        ({"whisper_max_tokens": "445"}, "whisper_max_tokens", "max_target_positions 448"),
        ({"whisper_max_tokens": "0"}, "whisper_max_tokens", ">= 1"),
        ({"whisper_max_batch_size": "two"}, "whisper_max_batch_size", "integer"),
        ({"whisper_max_audio_seconds": "31"}, "whisper_max_audio_seconds", "30 s window"),
        ({"triton_max_batch_size": "4"}, "triton_max_batch_size", "not read by layout whisper"),
    ]
    for i, (values, key, words) in enumerate(cases):
        with pytest.raises(ParameterError) as err:
            render_whisper_repository(tiny_whisper, tmp_path / f"bad{i}", _opts(**values))
        assert key in str(err.value) and words in str(err.value), str(err.value)
        assert not (tmp_path / f"bad{i}").exists()
    # the server sees the repository at --serve-path: a relative one would write a relative engine_dir
    with pytest.raises(RenderError) as bad:
        render_whisper_repository(tiny_whisper, tmp_path / "rel", RenderOptions(serve_path="relative/repo"))
    assert bad.value.key == "--serve-path" and not (tmp_path / "rel").exists()


def test_the_plain_layout_refuses_whisper_keys(tiny_llama, tmp_path):
    with pytest.raises(ParameterError, match="whisper_max_tokens.*only read by layout whisper"):
        render_repository(tiny_llama, tiny_llama, tmp_path / "r", user_values={"whisper_max_tokens": "8"})


def test_bad_checkpoints_are_refused_naming_file_and_key(tiny_whisper, tmp_path):
    def variant(name, edit_config=None, drop=None):
        ckpt = tmp_path / name
        shutil.copytree(tiny_whisper, ckpt)
        if edit_config:
            cfg = json.loads((ckpt / "config.json").read_text())
            cfg.update(edit_config)
            (ckpt / "config.json").write_text(json.dumps(cfg))
        if drop:
            (ckpt / drop).unlink()
        return ckpt

    cases = [
        (variant("llama", {"model_type": "llama"}), EngineError, "model_type"),
        (variant("nomel", {"num_mel_bins": None}), EngineError, "num_mel_bins"),
        (variant("sot", {"decoder_start_token_id": 50257}), TokenizerError, "decoder_start_token_id"),
        (variant("mels", {"num_mel_bins": 128}), EngineError, "feature_size"),
        (variant("notok", drop="tokenizer.json"), TokenizerError, "tokenizer.json"),
        (variant("noweights", drop="model.safetensors"), EngineError, "no weights"),
    ]
    for ckpt, cls, words in cases:
        out = tmp_path / f"out-{ckpt.name}"
        with pytest.raises(cls) as err:
            render_whisper_repository(ckpt, out)
        assert words in str(err.value), str(err.value)
        assert not out.exists() and not list(tmp_path.glob(f".out-{ckpt.name}.*"))


def test_an_existing_output_is_never_touched(tiny_whisper, tmp_path):
    out = tmp_path / "taken"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    with pytest.raises(RenderError, match="already exists"):
        render_whisper_repository(tiny_whisper, out)
    assert [p.name for p in out.iterdir()] == ["keep.txt"]
    from repo_builder.render import RenderOptions

    refused = [(RenderOptions(engine_mode="symlink"), "--engine-mode"), (RenderOptions(streaming=True), "--streaming")]
    for opts, key in refused:
        with pytest.raises(RenderError) as err:
            render_whisper_repository(tiny_whisper, tmp_path / "new", opts)
        assert err.value.key == key and not (tmp_path / "new").exists()


def test_cli_render(tiny_whisper, tmp_path):
    out = tmp_path / "cli"
    args = ["render", "--layout", "whisper", "--engine-dir", str(tiny_whisper), "--output", str(out)]
    result = CliRunner().invoke(app, [*args, "--set", "whisper_max_tokens=32"])
    assert result.exit_code == 0, result.output
    assert "80 mels, 99 languages, max_tokens 32" in result.output
    bad = CliRunner().invoke(app, [*args[:-1], str(tmp_path / "cli2"), "--set", "whisper_max_tokens=1000"])
    assert_refused(bad, "whisper_max_tokens")


# ------------------------------------------------------------------ runtime, in-process


@pytest.fixture(scope="module")
def runtime(repo):
    from transformers import WhisperFeatureExtractor

    from repo_builder.runtime.whisper_bls import WhisperText
    from repo_builder.runtime.whisper_engine import WhisperEngine

    folder = repo / "whisper_bls" / "1" / "whisper"
    return (
        WhisperText(folder),
        WhisperFeatureExtractor.from_pretrained(folder),
        WhisperEngine(repo / "tensorrt_llm" / "1" / "engine"),
    )


def test_engine_greedy_ids_equal_transformers_generate(runtime, tiny_whisper):
    import torch
    from transformers import WhisperForConditionalGeneration

    text, features, engine = runtime
    model = WhisperForConditionalGeneration.from_pretrained(tiny_whisper).eval()
    prompt = text.prompt_ids("")
    outs = []
    for wav in (tone(1.5), tone(2.0, 220.0, seed=1)):
        feats = features(wav, sampling_rate=RATE, return_tensors="np")["input_features"]
        ours = engine.generate(feats[0].T, prompt, 16, text.eot)
        ref = model.generate(
            torch.from_numpy(feats), decoder_input_ids=torch.tensor([prompt]), max_new_tokens=16, do_sample=False
        )[0].tolist()
        assert ours[: len(prompt)] == prompt
        assert ours[len(prompt) :] == ref[-(len(ours) - len(prompt)) :]
        outs.append(ours)
    assert outs[0] != outs[1] and len(set(outs[0][len(prompt) :])) > 1  # the audio and the steps matter


def test_prompt_ids(runtime):
    text = runtime[0]
    assert text.prompt_ids("<|startoftranscript|><|de|><|transcribe|><|notimestamps|>") == [50258, 50261, 50359, 50363]
    for prefix, words in [
        ("hello", "must start with <|startoftranscript|>"),
        ("<|startoftranscript|><|xx|><|transcribe|>", "<|xx|> is not a special token"),
        ("<|startoftranscript|>" + " word" * 400, "max_target_positions 448"),
    ]:
        with pytest.raises(RequestError) as err:
            text.prompt_ids(prefix)
        assert err.value.field == "TEXT_PREFIX" and words in str(err.value)


def test_bad_audio_is_refused_naming_the_field(runtime):
    text = runtime[0]
    ok = text.check_wav(np.stack([tone(1.0), tone(1.0)]), np.array([[16000], [8000]], np.int32))
    assert [r.shape[0] for r in ok] == [16000, 8000]
    assert text.check_wav(tone(0.5)[None], None)[0].shape[0] == 8000  # WAV_LENS really is optional
    nan = tone(0.5)
    nan[10] = np.nan
    cases = [
        (np.zeros((1, 0), np.float32), None, "WAV", "empty"),
        (tone(30.5)[None], None, "WAV", "exceed max_audio_seconds 30"),
        (nan[None], None, "WAV", "NaN"),
        (tone(1.0)[None], np.array([[0]], np.int32), "WAV_LENS", "outside 1..16000"),
        (tone(1.0)[None], np.array([[16001]], np.int32), "WAV_LENS", "outside 1..16000"),
        (tone(1.0)[None], np.array([[1], [2]], np.int32), "WAV_LENS", "2 values for 1 WAV rows"),
    ]
    for wav, lens, field, words in cases:
        with pytest.raises(RequestError) as err:
            text.check_wav(wav, lens)
        assert err.value.field == field and words in str(err.value), str(err.value)


def test_transcript_leaves_out_special_and_timestamp_ids(runtime):
    text = runtime[0]
    ids = text.tokenizer.encode(" hello world", add_special_tokens=False).ids
    assert text.transcript([50258, 50259, 50359, 50363, *ids, 50400, 50257], 4) == " hello world"


def _opts(**values):
    from repo_builder.render import RenderOptions

    return RenderOptions(user_values=values)
