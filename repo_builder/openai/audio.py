"""OpenAI's ``POST /v1/audio/transcriptions`` for a repository of layout whisper (``render --layout whisper``).

:func:`create_audio_app` is what :func:`repo_builder.openai.app.create_app` returns for a repository whose root
holds a lock file with ``"layout": "whisper"`` (:func:`repo_builder.repository.lockfile.repository_layout`).
Routes: ``GET /health``, ``GET /v1/models`` (one model, id ``--served-model-name`` or ``whisper``),
``POST /v1/audio/transcriptions``.

Request (``multipart/form-data``, as the OpenAI API and SDK send it): ``file`` a WAV file (RIFF PCM, 8/16/32-bit
integer or 32-bit float samples, mono, at the checkpoint's sampling rate, 16 kHz), ``model``, optional
``language`` (an ISO code the checkpoint has a token for: the prompt becomes
``<|startoftranscript|><|xx|><|transcribe|><|notimestamps|>``), ``response_format`` ``json`` (default) or
``text``. Other fields (``prompt``, ``temperature``, ``timestamp_granularities``) are refused with 400 naming
them. The samples go to ``whisper_bls`` as ``WAV`` / ``WAV_LENS`` / ``TEXT_PREFIX`` over gRPC; its 400s (too
long, empty) come back as 400s naming ``file``.

The form is parsed with the standard library's MIME parser (no python-multipart dependency).
"""

from __future__ import annotations

import io
import json
import wave
from email.parser import BytesParser
from email.policy import HTTP
from pathlib import Path
from typing import Any

import numpy as np
from fastapi import Request
from fastapi.responses import PlainTextResponse

from .protocol import APIError
from .single_model import single_model_app

_FIELDS = {"file", "model", "language", "response_format"}


def parse_form(body: bytes, content_type: str) -> dict[str, tuple[bytes, str | None]]:
    """{field: (bytes, filename)} of a ``multipart/form-data`` body.

    Raises:
        APIError(400): not multipart/form-data, or a part without a name.
    """
    if not content_type.lower().startswith("multipart/form-data"):
        raise APIError(400, "the request must be multipart/form-data with a 'file' part", param="file")
    message = BytesParser(policy=HTTP).parsebytes(b"Content-Type: " + content_type.encode() + b"\r\n\r\n" + body)
    if not message.is_multipart():
        raise APIError(400, "the multipart body could not be parsed", param="file")
    out: dict[str, tuple[bytes, str | None]] = {}
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        if not name:
            raise APIError(400, "a form part has no name", param="file")
        payload = part.get_payload(decode=True)
        out[str(name)] = (payload if isinstance(payload, bytes) else b"", part.get_filename())
    return out


def decode_wav(data: bytes, rate: int) -> np.ndarray:
    """Mono float32 samples in [-1, 1] of a RIFF WAV file.

    Raises:
        APIError(400, param file): not a WAV file, not mono, another sampling rate, an unsupported sample
            format, or no samples.
    """
    try:
        with wave.open(io.BytesIO(data)) as w:
            channels, width, file_rate, frames = w.getnchannels(), w.getsampwidth(), w.getframerate(), w.getnframes()
            raw = w.readframes(frames)
    except (wave.Error, EOFError) as exc:
        if data[:4] == b"RIFF" and b"WAVE" in data[:12] and "unknown format: 3" in str(exc):
            return _float_wav(data, rate)
        raise APIError(400, f"file is not a PCM WAV file ({exc})", param="file", code="invalid_value") from None
    if channels != 1:
        raise APIError(400, f"file has {channels} channels; send mono audio", param="file", code="invalid_value")
    if file_rate != rate:
        raise APIError(400, f"file is sampled at {file_rate} Hz; send {rate} Hz", param="file", code="invalid_value")
    kinds = {1: (np.uint8, 128.0, 128.0), 2: (np.int16, 0.0, 32768.0), 4: (np.int32, 0.0, 2147483648.0)}
    if width not in kinds:
        raise APIError(400, f"file has {8 * width}-bit samples; send 8/16/32-bit PCM", param="file")
    dtype, offset, scale = kinds[width]
    samples = (np.frombuffer(raw, dtype=dtype).astype(np.float32) - offset) / scale
    if samples.size == 0:
        raise APIError(400, "file holds no samples", param="file", code="invalid_value")
    return samples


def _float_wav(data: bytes, rate: int) -> np.ndarray:
    """A WAVE_FORMAT_IEEE_FLOAT (format 3) mono 32-bit file, which the ``wave`` module refuses."""
    pos, fmt, samples = 12, None, None
    while pos + 8 <= len(data):
        chunk, size = data[pos : pos + 4], int.from_bytes(data[pos + 4 : pos + 8], "little")
        body = data[pos + 8 : pos + 8 + size]
        if chunk == b"fmt ":
            fmt = body
        elif chunk == b"data":
            samples = body
        pos += 8 + size + (size & 1)
    if fmt is None or samples is None or len(fmt) < 16:
        raise APIError(400, "file is not a valid WAV file", param="file", code="invalid_value")
    channels = int.from_bytes(fmt[2:4], "little")
    file_rate = int.from_bytes(fmt[4:8], "little")
    bits = int.from_bytes(fmt[14:16], "little")
    if channels != 1 or file_rate != rate or bits != 32:
        raise APIError(
            400, f"file is {channels} ch / {file_rate} Hz / {bits}-bit float; send mono {rate} Hz", param="file"
        )
    out = np.frombuffer(samples[: len(samples) // 4 * 4], dtype="<f4").astype(np.float32)
    if out.size == 0:
        raise APIError(400, "file holds no samples", param="file", code="invalid_value")
    return out


def create_audio_app(config: Any) -> Any:
    """The FastAPI application serving ``config.repo`` (layout whisper) through Triton at ``config.grpc_url``.

    Raises:
        RepoBuilderError: the repository's facts file is unreadable.
    """
    from ..errors import RepoBuilderError

    repo = Path(config.repo)
    facts_path = repo / "whisper_bls" / "1" / "whisper" / "whisper.json"
    try:
        facts = json.loads(facts_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise RepoBuilderError(f"cannot read the Whisper facts: {exc}", path=facts_path) from exc
    name = config.served_model_name or "whisper"
    rate = int(facts["sampling_rate"])
    languages = list(facts["languages"])
    app, check_key, grpc = single_model_app(
        config, title="repo-builder OpenAI-compatible API (audio)", served_name=name, triton_model="whisper_bls"
    )

    @app.post("/v1/audio/transcriptions")
    async def transcriptions(request: Request) -> Any:
        import tritonclient.grpc as grpcclient
        from tritonclient.utils import InferenceServerException

        check_key(request)
        form = parse_form(await request.body(), request.headers.get("content-type", ""))
        extra = sorted(set(form) - _FIELDS)
        if extra:
            raise APIError(400, f"{extra[0]} is not supported", param=extra[0], code="unsupported_parameter")
        if "file" not in form:
            raise APIError(400, "file is required", param="file", code="missing_required_parameter")
        model = form.get("model", (b"", None))[0].decode("utf-8", "replace")
        if model != name:
            raise APIError(404, f"The model '{model}' does not exist", param="model", code="model_not_found")
        fmt = form.get("response_format", (b"json", None))[0].decode("utf-8", "replace") or "json"
        if fmt not in ("json", "text"):
            raise APIError(400, f"response_format '{fmt}' is not supported (json, text)", param="response_format")
        prefix = ""
        if "language" in form:
            lang = form["language"][0].decode("utf-8", "replace").strip().lower()
            if lang not in languages:
                raise APIError(400, f"language '{lang}' has no token in this checkpoint", param="language")
            prefix = f"<|startoftranscript|><|{lang}|><|transcribe|><|notimestamps|>"
        samples = decode_wav(form["file"][0], rate)
        inputs = []
        for tname, arr, wire in (
            ("WAV", samples[None, :], "FP32"),
            ("WAV_LENS", np.array([[samples.shape[0]]], np.int32), "INT32"),
            ("TEXT_PREFIX", np.array([[prefix.encode()]], dtype=object), "BYTES"),
        ):
            t = grpcclient.InferInput(tname, list(arr.shape), wire)
            t.set_data_from_numpy(arr)
            inputs.append(t)
        try:
            result = await (await grpc()).infer("whisper_bls", inputs)
        except InferenceServerException as exc:
            text = exc.message() or str(exc)
            if "INVALID_ARG" in str(exc.status()) or "StatusCode.INVALID_ARGUMENT" in str(exc.status()):
                field = "language" if text.startswith("TEXT_PREFIX") else "file"
                raise APIError(400, text, param=field, code="invalid_value") from None
            raise APIError(503 if "UNAVAILABLE" in str(exc.status()) else 500, text, type="server_error") from None
        transcript = result.as_numpy("TRANSCRIPTS").reshape(-1)[0]
        text = transcript.decode("utf-8") if isinstance(transcript, bytes) else str(transcript)
        if fmt == "text":
            return PlainTextResponse(text)
        return {"text": text}

    return app
