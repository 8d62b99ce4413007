"""Request and response models of the Triton LLM client: what a served model accepts (:class:`ModelInfo`),
one request (:class:`GenerateRequest`), one response (:class:`StreamEvent`) and everything a request produced
(:class:`GenerateResult`), plus the decoding of output values shared by both transports."""

from __future__ import annotations

import itertools
import os
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from ..errors import ClientError
from ..runtime.triton_io import IOSpec

Protocol = Literal["http", "grpc"]

#: Request fields renamed between TensorRT-LLM versions: our name -> older ensemble input name.
#: ``min_length`` / ``random_seed`` were the ensemble inputs up to v0.x; ``min_tokens`` / ``seed`` at c2e65b8.
FIELD_ALIASES: dict[str, tuple[str, ...]] = {"min_tokens": ("min_length",), "seed": ("random_seed",)}

#: Inputs that old ensembles (v0.5.0) required although they are usually empty; sent as "" when not given.
_EMPTY_WHEN_REQUIRED = ("bad_words", "stop_words")

#: Default ports of tritonserver per protocol.
DEFAULT_URLS: dict[str, str] = {"http": "localhost:8000", "grpc": "localhost:8001"}

# A random 48-bit start per process: ids of different client processes (each CLI run, each benchmark) do
# not repeat at the server, where a repeated id makes the ensemble ask the engine for perf metrics
# (repo_builder/runtime/preprocessing.py EnsembleStreamKeys).
_ids = itertools.count(int.from_bytes(os.urandom(6), "little") + 1)
_ids_lock = threading.Lock()


def new_request_id() -> str:
    """A fresh numeric request id: TensorRT-LLM backends before v0.9 accepted only numbers (uint64)."""
    with _ids_lock:
        return str(next(_ids))


# --------------------------------------------------------------------------------------------------------
# Model configuration
# --------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ModelInfo:
    """What the client needs from a served model's configuration.

    Attributes:
        name: the model name.
        max_batch_size: 0 = no batch dimension; > 0 = tensors are sent with a leading dimension of 1.
        decoupled: ``model_transaction_policy.decoupled`` (Triton adds it to ensembles whose steps are
            decoupled).
        inputs: input specs by name.
        outputs: output names.
        parameters: the config's ``parameters`` as plain strings (e.g. preprocessing's ``tokenizer_dir``).
    """

    name: str
    max_batch_size: int
    decoupled: bool
    inputs: dict[str, IOSpec]
    outputs: tuple[str, ...]
    parameters: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> ModelInfo:
        """Build from the JSON model config (HTTP ``/config`` or gRPC ``get_model_config(as_json=True)``)."""
        inputs = {}
        for item in config.get("input", []):
            dims = tuple(int(d) for d in item.get("dims", []))
            inputs[item["name"]] = IOSpec(
                item["name"], item.get("data_type", "TYPE_STRING"), dims, bool(item.get("optional", False))
            )
        policy = config.get("model_transaction_policy") or {}
        return cls(
            name=config.get("name", "?"),
            max_batch_size=int(config.get("max_batch_size", 0) or 0),
            decoupled=bool(policy.get("decoupled", False)),
            inputs=inputs,
            outputs=tuple(o["name"] for o in config.get("output", [])),
            parameters={
                k: str((v or {}).get("string_value", "")) if isinstance(v, dict) else str(v)
                for k, v in (config.get("parameters") or {}).items()
            },
        )

    def input_name(self, field_name: str) -> str | None:
        """The model's input that carries request field ``field_name`` (following :data:`FIELD_ALIASES`)."""
        if field_name in self.inputs:
            return field_name
        for alias in FIELD_ALIASES.get(field_name, ()):
            if alias in self.inputs:
                return alias
        return None

    def accepts(self, field_name: str) -> bool:
        """Whether the model has an input for ``field_name`` (directly or by alias)."""
        return self.input_name(field_name) is not None


# --------------------------------------------------------------------------------------------------------
# Requests and results
# --------------------------------------------------------------------------------------------------------


@dataclass
class GenerateRequest:
    """One text generation request in the ensemble's vocabulary (TensorRT-LLM ``ensemble`` inputs).

    Attributes:
        text: the prompt (``text_input``).
        max_tokens: number of tokens to generate (``max_tokens``, > 0).
        stream: ask for one response per generated step (``stream``; needs a decoupled model).
        stop_words, bad_words: words (``stop_words`` / ``bad_words``, BYTES ``[-1]``).
        temperature, top_k, top_p, end_id, pad_id, exclude_input_in_output, beam_width, min_tokens, seed:
            the ensemble inputs of the same name (``min_tokens``/``seed`` fall back to ``min_length``/
            ``random_seed`` on old ensembles). ``None`` = not sent.
        request_id: the request id (``id``); a numeric one is generated when absent.
        extra: further model inputs by their exact name.
        outputs: gRPC only: the outputs to return (e.g. ``["text_output"]``); None = every output the model
            produces. HTTP ``/generate`` cannot select outputs.
    """

    text: str
    max_tokens: int = 16
    stream: bool = False
    stop_words: list[str] | None = None
    bad_words: list[str] | None = None
    temperature: float | None = None
    top_k: int | None = None
    top_p: float | None = None
    end_id: int | None = None
    pad_id: int | None = None
    exclude_input_in_output: bool | None = None
    beam_width: int | None = None
    min_tokens: int | None = None
    seed: int | None = None
    request_id: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    outputs: list[str] | None = None

    _NAMED = (
        "stop_words",
        "bad_words",
        "temperature",
        "top_k",
        "top_p",
        "end_id",
        "pad_id",
        "exclude_input_in_output",
        "beam_width",
        "min_tokens",
        "seed",
    )

    def fields(self) -> dict[str, Any]:
        """The request as ``{field: value}`` (unset fields left out), before mapping onto a model."""
        out: dict[str, Any] = {"text_input": self.text, "max_tokens": self.max_tokens}
        if self.stream:
            out["stream"] = True
        for name in self._NAMED:
            value = getattr(self, name)
            if value is not None:
                out[name] = value
        out.update(self.extra)
        return out


@dataclass
class StreamEvent:
    """One response of a request as the client received it.

    Attributes:
        index: 0-based position in the request's responses.
        time_ns: ``time.perf_counter_ns()`` at arrival.
        text: ``text_output`` of this response ("" if absent) — a delta when streaming.
        token_ids: ``output_ids`` flattened (token ids) if the model returned them, else None.
        outputs: every output of the response (numpy arrays, decoded on access, for gRPC; JSON values for HTTP).
        final: this response closed the request (gRPC ``triton_final_response``; HTTP: last of the body).
    """

    index: int
    time_ns: int
    text: str
    token_ids: list[int] | None
    outputs: Mapping[str, Any]
    final: bool = False

    @property
    def has_output(self) -> bool:
        """Whether the response carried generated text or tokens (an empty final response does not)."""
        return bool(self.text) or bool(self.token_ids)


@dataclass
class GenerateResult:
    """Everything one request produced.

    Attributes:
        model, request_id, protocol, stream: what was asked.
        start_ns: ``perf_counter_ns()`` just before the request was sent.
        end_ns: ``perf_counter_ns()`` when the final response (or the error) arrived.
        events: the responses in arrival order (empty final responses included, ``has_output`` False).
        error: the server's or transport's error, if the request failed.
        prompt: the prompt text, if any.
        prompt_ids: the prompt's token ids, for a token-id request (to tell an echoed prompt from output).
    """

    model: str
    request_id: str
    protocol: str
    stream: bool
    start_ns: int
    end_ns: int = 0
    events: list[StreamEvent] = field(default_factory=list)
    error: ClientError | None = None
    prompt: str | None = None
    prompt_ids: list[int] | None = None

    @property
    def ok(self) -> bool:
        """True when the request finished without error."""
        return self.error is None

    @property
    def text(self) -> str:
        """The generated text: the streamed deltas joined (or the single response's text)."""
        return "".join(e.text for e in self.events)

    @property
    def token_ids(self) -> list[int] | None:
        """Token ids returned by the model (``output_ids``), joined over responses; None if none returned."""
        if not any(e.token_ids is not None for e in self.events):
            return None
        return [t for e in self.events for t in (e.token_ids or [])]

    @property
    def chunk_times_ns(self) -> list[int]:
        """Arrival times (perf_counter_ns) of the responses that carried output."""
        return [e.time_ns for e in self.events if e.has_output]

    @property
    def ttft_ms(self) -> float | None:
        """Time to first token in ms: first response with output minus ``start_ns``; None if there was none."""
        times = self.chunk_times_ns
        return (times[0] - self.start_ns) / 1e6 if times else None

    @property
    def latency_ms(self) -> float:
        """End-to-end latency in ms (``end_ns - start_ns``)."""
        return (self.end_ns - self.start_ns) / 1e6

    def count_output_tokens(self, count_tokens: Callable[[str], int] | None = None) -> int | None:
        """Generated tokens, counted from what the server says (see :meth:`counted_output_tokens`)."""
        return self.counted_output_tokens(count_tokens)[0]

    def counted_output_tokens(self, count_tokens: Callable[[str], int] | None = None) -> tuple[int | None, str | None]:
        """Generated tokens and where the count comes from, preferring what the server says to re-tokenizing:

        1. ``"num_output_tokens"``: their sum over the responses (TRT-LLM 1.2 outputs it per response, when
           the request sets ``return_num_output_tokens``, which :class:`LLMClient` does);
        2. ``"output_ids"``: the returned ids, without an echoed prompt (non-streaming responses start with
           the prompt unless ``exclude_input_in_output``; ``sequence_length`` counts the same tokens);
        3. ``"text"``: ONE tokenization of the whole text with ``count_tokens`` (never per chunk, which would
           over-count split words). ``(None, None)`` if none of these exists.
        """
        counts = [e.outputs.get("num_output_tokens") for e in self.events if e.has_output]
        if counts and all(c is not None for c in counts):
            return int(sum(int(np.asarray(c).reshape(-1)[0]) for c in counts)), "num_output_tokens"
        ids = self.token_ids
        if ids is not None:
            p = self.prompt_ids
            if p and not self.stream and ids[: len(p)] == p:
                return len(ids) - len(p), "output_ids"
            return len(ids), "output_ids"
        if count_tokens is not None:
            return count_tokens(self.text), "text"
        return None, None

    def raise_for_error(self) -> GenerateResult:
        """Raise the stored :class:`ClientError`, if any; return self otherwise."""
        if self.error is not None:
            raise self.error
        return self


# --------------------------------------------------------------------------------------------------------
# Decoding responses (both transports)
# --------------------------------------------------------------------------------------------------------


def _text_of(value: Any) -> str:
    """``text_output`` (JSON string/list, or numpy array of bytes) as one string."""
    if value is None:
        return ""
    if isinstance(value, np.ndarray):
        value = value.reshape(-1).tolist()
    if isinstance(value, list):
        return "".join(_text_of(v) for v in value)
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return str(value)


def _ids_of(value: Any) -> list[int] | None:
    if value is None:
        return None
    return [int(v) for v in np.asarray(value).reshape(-1).tolist()]


def _server_error(model: str, message: str) -> ClientError:
    err = ClientError(f"model '{model}' returned an error: {message}")
    err.server_message = message  # type: ignore[attr-defined]
    return err
