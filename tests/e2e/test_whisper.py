"""End to end through a real tritonserver: layout whisper (``render --layout whisper``).

One repository, one server: the tiny random Whisper checkpoint (real multilingual tokenizer) served by
``whisper_bls`` and the encoder-decoder reference engine as ``tensorrt_llm``. Audio is synthesised here (a sine
plus noise, 16 kHz). Checked:

* ``TRANSCRIPTS`` equals transformers' own greedy ``generate`` on the same weights and features, decoded with
  the same tokenizer (default prompt, a German prompt, and two rows of one request with their own
  ``WAV_LENS``);
* ``WAV_LENS`` may be left out (NVIDIA's BLS crashes without it);
* bad audio fails alone with HTTP 400 naming the field: a wrong dtype, an empty ``WAV``, audio over
  ``max_audio_seconds``, a ``WAV_LENS`` beyond the row, an unknown special token in ``TEXT_PREFIX``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from e2e_support import http_infer

pytestmark = pytest.mark.server

RATE = 16000
MAX_TOKENS = 12


def tone(seconds: float, freq: float, seed: int) -> np.ndarray:
    t = np.arange(int(seconds * RATE)) / RATE
    noise = np.random.default_rng(seed).standard_normal(t.size)
    return (0.3 * np.sin(2 * np.pi * freq * t) + 0.05 * noise).astype(np.float32)


@pytest.fixture(scope="module")
def server(tiny_whisper, tmp_path_factory, serve_module):
    from repo_builder.render import RenderOptions
    from repo_builder.render.whisper import render_whisper_repository

    repo = tmp_path_factory.mktemp("whisper") / "repo"
    options = RenderOptions(user_values={"whisper_max_tokens": str(MAX_TOKENS), "whisper_max_audio_seconds": "10"})
    render_whisper_repository(tiny_whisper, repo, options)
    with serve_module(repo, timeout=600.0) as srv:
        yield srv


@pytest.fixture(scope="module")
def reference(tiny_whisper):
    """``reference(wav, prompt_ids) -> text``: transformers' greedy generate, decoded like the BLS does."""
    import torch
    from tokenizers import Tokenizer
    from transformers import WhisperFeatureExtractor, WhisperForConditionalGeneration

    model = WhisperForConditionalGeneration.from_pretrained(tiny_whisper).eval()
    features = WhisperFeatureExtractor.from_pretrained(tiny_whisper)
    tok = Tokenizer.from_file(str(tiny_whisper / "tokenizer.json"))

    def run(wav: np.ndarray, prompt: list[int]) -> str:
        feats = torch.from_numpy(features(wav, sampling_rate=RATE, return_tensors="np")["input_features"])
        with torch.inference_mode():
            out = model.generate(
                feats, decoder_input_ids=torch.tensor([prompt]), max_new_tokens=MAX_TOKENS, do_sample=False
            )[0].tolist()
        return tok.decode([i for i in out if i < 50257])

    return run


def wav_inputs(rows: list[np.ndarray], lens: list[int] | None = None, prefix: str | None = None, dtype="FP32"):
    width = max(r.shape[0] for r in rows)
    padded = np.zeros((len(rows), width), np.float32)
    for i, r in enumerate(rows):
        padded[i, : r.shape[0]] = r
    inputs: list[dict[str, Any]] = [
        {"name": "WAV", "shape": list(padded.shape), "datatype": dtype, "data": padded.reshape(-1).tolist()}
    ]
    if lens is not None:
        inputs.append({"name": "WAV_LENS", "shape": [len(rows), 1], "datatype": "INT32", "data": lens})
    if prefix is not None:
        inputs.append(
            {"name": "TEXT_PREFIX", "shape": [len(rows), 1], "datatype": "BYTES", "data": [prefix] * len(rows)}
        )
    return inputs


def transcripts(body: dict[str, Any]) -> list[str]:
    (out,) = [o for o in body["outputs"] if o["name"] == "TRANSCRIPTS"]
    return list(out["data"])


def test_transcript_equals_transformers_greedy_generate(server, reference):
    wav = tone(2.0, 440.0, 0)
    status, body = http_infer(server, "whisper_bls", wav_inputs([wav], [wav.shape[0]], ""))
    assert status == 200, body
    expected = reference(wav, [50258, 50259, 50359, 50363])
    assert transcripts(body) == [expected] and expected.strip()
    status, body = http_infer(server, "whisper_bls", wav_inputs([wav]))  # no WAV_LENS, no TEXT_PREFIX
    assert status == 200, body
    assert transcripts(body) == [expected]


def test_a_prompt_and_two_rows_with_their_lengths(server, reference):
    a, b = tone(1.5, 300.0, 1), tone(3.0, 700.0, 2)
    prefix = "<|startoftranscript|><|de|><|transcribe|><|notimestamps|>"
    status, body = http_infer(server, "whisper_bls", wav_inputs([a, b], [a.shape[0], b.shape[0]], prefix))
    assert status == 200, body
    prompt = [50258, 50261, 50359, 50363]
    expected = [reference(a, prompt), reference(b, prompt)]
    assert transcripts(body) == expected and expected[0] != expected[1]


@pytest.mark.parametrize(
    ("inputs", "words"),
    [
        (lambda: wav_inputs([tone(1.0, 440.0, 0)], dtype="FP64"), "WAV"),
        (lambda: [{"name": "WAV", "shape": [1, 0], "datatype": "FP32", "data": []}], "WAV: is empty"),
        (lambda: wav_inputs([tone(10.5, 440.0, 0)]), "WAV: 168000 samples (10.50 s) exceed max_audio_seconds 10"),
        (lambda: wav_inputs([tone(1.0, 440.0, 0)], [16001]), "WAV_LENS: 16001 is outside 1..16000"),
        (lambda: wav_inputs([tone(1.0, 440.0, 0)], None, "<|startoftranscript|><|xx|>"), "TEXT_PREFIX: <|xx|>"),
    ],
    ids=["dtype", "empty", "too-long", "lens", "prefix"],
)
def test_bad_audio_fails_alone_naming_the_field(server, inputs, words):
    status, body = http_infer(server, "whisper_bls", inputs())
    assert status == 400, body
    assert words in body.get("error", ""), body


# ------------------------------------------------------------------ OpenAI front end: /v1/audio/transcriptions


def wav_file(samples: np.ndarray, rate: int = RATE, channels: int = 1) -> bytes:
    """A 16-bit PCM RIFF WAV file of ``samples`` (the test's own encoder: the standard library's ``wave``)."""
    import io
    import wave

    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(channels)
        w.setsampwidth(2)
        w.setframerate(rate)
        pcm = np.clip(np.round(samples * 32767), -32768, 32767).astype("<i2")
        w.writeframes(np.repeat(pcm, channels).tobytes())
    return buf.getvalue()


def test_openai_transcription_equals_transformers_greedy_generate(served_openai, reference):
    import openai

    client = openai.OpenAI(base_url=f"{served_openai}/v1", api_key="none")
    wav = tone(2.0, 440.0, 0)
    pcm16 = np.clip(np.round(wav * 32767), -32768, 32767).astype(np.int16).astype(np.float32) / 32768.0
    got = client.audio.transcriptions.create(model="whisper", file=("a.wav", wav_file(wav), "audio/wav"))
    expected = reference(pcm16, [50258, 50259, 50359, 50363])
    assert got.text == expected and expected.strip()
    german = client.audio.transcriptions.create(
        model="whisper", file=("a.wav", wav_file(wav), "audio/wav"), language="de", response_format="text"
    )
    assert german == reference(pcm16, [50258, 50261, 50359, 50363])
    assert [m.id for m in client.models.list().data] == ["whisper"]


def test_openai_bad_audio_is_a_400_naming_the_field(served_openai):
    import openai

    client = openai.OpenAI(base_url=f"{served_openai}/v1", api_key="none", max_retries=0)
    cases = [
        (wav_file(tone(1.0, 440.0, 0), rate=8000), {}, "file", "8000 Hz"),
        (wav_file(tone(1.0, 440.0, 0), channels=2), {}, "file", "2 channels"),
        (b"not a wav file", {}, "file", "not a PCM WAV file"),
        (wav_file(tone(10.5, 440.0, 0)), {}, "file", "exceed max_audio_seconds 10"),
        (wav_file(tone(1.0, 440.0, 0)), {"language": "xx"}, "language", "language 'xx'"),
    ]
    for data, extra, param, words in cases:
        with pytest.raises(openai.BadRequestError) as err:
            client.audio.transcriptions.create(model="whisper", file=("a.wav", data, "audio/wav"), **extra)
        body = err.value.body
        assert body["param"] == param and words in body["message"], body
