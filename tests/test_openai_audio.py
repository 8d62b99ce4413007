"""The whisper layout's OpenAI transcription endpoint without a server (repo_builder/openai/audio.py): the
multipart form parser (on the bytes httpx, which the openai SDK uses, sends) and the WAV decoder (PCM 8/16/32-bit
and IEEE float written here), each refusal naming the field."""

from __future__ import annotations

import io
import struct
import wave

import httpx
import numpy as np
import pytest

from repo_builder.openai.audio import decode_wav, parse_form
from repo_builder.openai.protocol import APIError

RATE = 16000
SAMPLES = (0.5 * np.sin(2 * np.pi * 440 * np.arange(1600) / RATE)).astype(np.float32)


def pcm_wav(width: int, channels: int = 1, rate: int = RATE) -> bytes:
    kinds = {1: (np.uint8, 127, 128), 2: (np.int16, 32767, 0), 4: (np.int32, 2147483647, 0)}
    dtype, scale, offset = kinds[width]
    data = (np.round(SAMPLES * scale) + offset).astype(dtype)
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(channels)
        w.setsampwidth(width)
        w.setframerate(rate)
        w.writeframes(np.repeat(data, channels).tobytes())
    return buf.getvalue()


def float_wav(samples: np.ndarray, rate: int = RATE) -> bytes:
    """WAVE_FORMAT_IEEE_FLOAT (3), mono, 32-bit: RIFF header, ``fmt `` and ``data`` chunks."""
    data = samples.astype("<f4").tobytes()
    fmt = struct.pack("<HHIIHH", 3, 1, rate, rate * 4, 4, 32)
    body = b"WAVE" + b"fmt " + struct.pack("<I", len(fmt)) + fmt + b"data" + struct.pack("<I", len(data)) + data
    return b"RIFF" + struct.pack("<I", len(body)) + body


def test_pcm_and_float_wavs_decode_to_the_samples():
    assert np.allclose(decode_wav(pcm_wav(2), RATE), SAMPLES, atol=1 / 32768)
    assert np.allclose(decode_wav(pcm_wav(1), RATE), SAMPLES, atol=1 / 127)
    assert np.allclose(decode_wav(pcm_wav(4), RATE), SAMPLES, atol=1e-6)
    assert np.array_equal(decode_wav(float_wav(SAMPLES), RATE), SAMPLES)


@pytest.mark.parametrize(
    ("data", "words"),
    [
        (pcm_wav(2, channels=2), "2 channels"),
        (pcm_wav(2, rate=8000), "8000 Hz; send 16000 Hz"),
        (b"RIFF....WAVEjunk", "not a PCM WAV file"),
        (float_wav(np.zeros(0, np.float32)), "no samples"),
        (float_wav(SAMPLES, rate=44100), "44100 Hz"),
    ],
)
def test_bad_files_are_refused_naming_file(data, words):
    with pytest.raises(APIError) as err:
        decode_wav(data, RATE)
    assert err.value.status == 400 and err.value.param == "file" and words in err.value.message


def test_the_form_httpx_sends_is_parsed():
    request = httpx.Request(
        "POST",
        "http://x/v1/audio/transcriptions",
        data={"model": "whisper", "language": "de"},
        files={"file": ("a.wav", pcm_wav(2), "audio/wav")},
    )
    body = request.read()
    form = parse_form(body, request.headers["content-type"])
    assert form["model"] == (b"whisper", None) and form["language"][0] == b"de"
    assert form["file"] == (pcm_wav(2), "a.wav")
    with pytest.raises(APIError) as err:
        parse_form(b"{}", "application/json")
    assert err.value.param == "file"
