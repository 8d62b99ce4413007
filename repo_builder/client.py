"""Clients for text-in/text-out LLM models served by Triton (ensemble, tensorrt_llm_bls) and token-id requests.

Two protocols, one result type:

* HTTP: ``POST /v2/models/{model}/generate`` (exactly one response) and ``/generate_stream`` (Server-Sent
  Events, one ``data: {...}`` line per response). Triton's generate extension maps each JSON field onto the
  model input of the same name; scalars become ``[1]`` (``[1, 1]`` with ``max_batch_size > 0``).
* gRPC: ``tritonclient.grpc`` ``start_stream(callback=...)`` + ``async_stream_infer(...,
  enable_empty_final_response=True)`` for decoupled models (the end of a request is the response parameter
  ``triton_final_response``), unary ``infer`` for the others.

Input data types and shapes are read from the served model's configuration (``GET /v2/models/{m}/config`` or
gRPC ``get_model_config``), so one client serves the trtllm-1.2 profile (``max_tokens`` INT32, ``text_input``
dims ``[1]``) and trtllm-0.5 (UINT32, dims ``[-1]``, required ``bad_words``/``stop_words``). With
``max_batch_size > 0`` every tensor gets a leading batch dimension of 1.

Client-side checks (each raises :class:`~repo_builder.errors.ClientError` naming the request field):

* ``beam_width > 1`` together with ``stream`` (TensorRT-LLM: "Streaming mode is only supported with beam
  width of 1"; case B30).
* ``stream`` on a model that is not decoupled (the backend answers "Streaming is only supported if model is
  deployed using decoupled mode"; case B29a).
* ``/generate`` with ``stream: true`` on a decoupled model (Triton answers "generate expects model to produce
  exactly 1 response, use generate stream ..."; case B29b): use ``/generate_stream``.
* token-id requests never go to ``/generate`` (Triton's JSON mapping rejects ``[N]`` ids on some versions:
  "Shape does not match true shape of 'data' field"; case B33): :meth:`LLMClient.infer_token_ids` sends an
  explicit ``[1, N]`` INT32 tensor through ``/v2/models/tensorrt_llm/infer`` (or the gRPC stream when the
  model is decoupled, because HTTP ``/infer`` refuses decoupled models).

Timestamps are ``time.perf_counter_ns()`` taken when each response arrives in the client.
"""

from __future__ import annotations

import itertools
import json
import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Literal, Mapping, Sequence

import numpy as np

from .errors import ClientError
from .runtime.triton_io import IOSpec

Protocol = Literal["http", "grpc"]

#: Triton config data types -> (numpy dtype, wire data type of the inference protocol).

#: Request fields renamed between TensorRT-LLM versions: our name -> older ensemble input name.
#: ``min_length`` / ``random_seed`` were the ensemble inputs up to v0.x; ``min_tokens`` / ``seed`` at c2e65b8.
FIELD_ALIASES: dict[str, tuple[str, ...]] = {"min_tokens": ("min_length",), "seed": ("random_seed",)}

#: Inputs that old ensembles (v0.5.0) required although they are usually empty; sent as "" when not given.
_EMPTY_WHEN_REQUIRED = ("bad_words", "stop_words")

#: Default ports of tritonserver per protocol.
DEFAULT_URLS: dict[str, str] = {"http": "localhost:8000", "grpc": "localhost:8001"}

_ids = itertools.count(1)
_ids_lock = threading.Lock()


def new_request_id() -> str:
    """A fresh numeric request id ("1", "2", ...): TensorRT-LLM backends before v0.9 accepted only numbers."""
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
    def from_config(cls, config: dict[str, Any]) -> "ModelInfo":
        """Build from the JSON model config (HTTP ``/config`` or gRPC ``get_model_config(as_json=True)``)."""
        inputs = {}
        for item in config.get("input", []):
            dims = tuple(int(d) for d in item.get("dims", []))
            inputs[item["name"]] = IOSpec(item["name"], item.get("data_type", "TYPE_STRING"), dims,
                                             bool(item.get("optional", False)))
        policy = config.get("model_transaction_policy") or {}
        return cls(name=config.get("name", "?"), max_batch_size=int(config.get("max_batch_size", 0) or 0),
                   decoupled=bool(policy.get("decoupled", False)), inputs=inputs,
                   outputs=tuple(o["name"] for o in config.get("output", [])),
                   parameters={k: str((v or {}).get("string_value", "")) if isinstance(v, dict) else str(v)
                               for k, v in (config.get("parameters") or {}).items()})

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

    _NAMED = ("stop_words", "bad_words", "temperature", "top_k", "top_p", "end_id", "pad_id",
              "exclude_input_in_output", "beam_width", "min_tokens", "seed")

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
        """Generated tokens: the returned token ids if any, else ONE tokenization of the whole text with
        ``count_tokens`` (never per chunk, which would over-count split words); None if neither exists."""
        ids = self.token_ids
        if ids is not None:
            return len(ids)
        if count_tokens is not None:
            return count_tokens(self.text)
        return None

    def raise_for_error(self) -> "GenerateResult":
        """Raise the stored :class:`ClientError`, if any; return self otherwise."""
        if self.error is not None:
            raise self.error
        return self


def load_tokenizer(tokenizer_dir: str) -> Any:
    """Load the Hugging Face tokenizer in ``tokenizer_dir`` (local files only).

    Raises:
        ClientError: the tokenizer cannot be loaded (key ``--tokenizer-dir``).
    """
    try:
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(str(tokenizer_dir), local_files_only=True)
    except Exception as exc:  # transformers raises many types (OSError, ValueError, ...)
        raise ClientError(f"cannot load a tokenizer from {tokenizer_dir}: {exc}", key="--tokenizer-dir",
                          hint="pass a local Hugging Face tokenizer directory") from None


def token_counter(tokenizer: Any) -> Callable[[str], int]:
    """A function counting the tokens of a text (``add_special_tokens=False``: only the text's own tokens).

    Args:
        tokenizer: a loaded tokenizer, or a tokenizer directory (loaded with :func:`load_tokenizer`).
    """
    tok = load_tokenizer(tokenizer) if isinstance(tokenizer, (str, bytes)) or hasattr(tokenizer, "__fspath__") \
        else tokenizer

    def count(text: str) -> int:
        return len(tok.encode(text, add_special_tokens=False)) if text else 0

    return count


# --------------------------------------------------------------------------------------------------------
# Building the inputs
# --------------------------------------------------------------------------------------------------------


def _as_array(spec: IOSpec, value: Any, field_name: str, model: str) -> np.ndarray:
    """``value`` as a 1-D numpy array of the input's dtype; ClientError naming ``field_name`` if it does not fit."""
    values = list(value) if isinstance(value, (list, tuple, np.ndarray)) else [value]
    if spec.data_type == "TYPE_STRING":
        return np.array([v.encode("utf-8") if isinstance(v, str) else bytes(v) for v in values], dtype=np.object_)
    dtype = np.dtype(spec.numpy_dtype)
    try:
        if dtype.kind in "iu":
            ints = [int(v) for v in values]
            if any(isinstance(v, float) and not float(v).is_integer() for v in values):
                raise ValueError("not an integer")
            info = np.iinfo(dtype)
            bad = [v for v in ints if v < info.min or v > info.max]
            if bad:
                raise ClientError(f"value {bad[0]} does not fit model '{model}' input '{spec.name}' "
                                  f"({spec.data_type})", key=field_name,
                                  hint="unsigned inputs (TensorRT-LLM v0.5-v0.6 templates) take no negative ids")
            return np.array(ints, dtype=dtype)
        if dtype.kind == "b":
            if any(not isinstance(v, (bool, np.bool_)) for v in values):
                raise ValueError("not a boolean")
            return np.array(values, dtype=dtype)
        return np.array([float(v) for v in values], dtype=dtype)
    except (TypeError, ValueError) as exc:
        raise ClientError(f"value {value!r} is not valid for model '{model}' input '{spec.name}' "
                          f"({spec.data_type}): {exc}", key=field_name) from None


def prepare_inputs(info: ModelInfo, fields: dict[str, Any]) -> dict[str, np.ndarray]:
    """Map request fields onto the model's inputs: ``{input name: array}`` with the model's dtypes and shapes.

    Shapes: a scalar becomes ``[1]``, a list ``[len]``; with ``max_batch_size > 0`` a leading 1 is added
    (``[1, 1]`` / ``[1, len]``). Required ``bad_words``/``stop_words`` of old ensembles are sent as ``[""]``.

    Raises:
        ClientError: a field the model has no input for, a value of the wrong type or range, or a required
            input missing (key = the field).
    """
    arrays: dict[str, np.ndarray] = {}
    for field_name, value in fields.items():
        if value is None:
            continue
        name = info.input_name(field_name)
        if name is None:
            raise ClientError(f"model '{info.name}' has no input for request field '{field_name}'",
                              key=field_name, hint=f"its inputs are: {', '.join(sorted(info.inputs))}")
        arr = _as_array(info.inputs[name], value, field_name, info.name)
        if info.max_batch_size > 0:
            arr = arr.reshape(1, -1)
        arrays[name] = arr
    for name, spec in info.inputs.items():
        if spec.optional or name in arrays:
            continue
        if name in _EMPTY_WHEN_REQUIRED:
            arr = np.array([b""], dtype=np.object_)
            arrays[name] = arr.reshape(1, -1) if info.max_batch_size > 0 else arr
        else:
            raise ClientError(f"model '{info.name}' requires input '{name}', which the request does not set",
                              key=name)
    return arrays


def check_request(info: ModelInfo, fields: dict[str, Any]) -> None:
    """Client-side checks that do not depend on the endpoint.

    Raises:
        ClientError: ``beam_width`` > 1 with ``stream`` (B30); ``stream`` on a non-decoupled model (B29a);
            ``max_tokens`` not a positive integer.
    """
    stream = bool(fields.get("stream"))
    beam = fields.get("beam_width")
    if stream and beam is not None and int(beam) > 1:
        raise ClientError(f"beam_width={beam} cannot be combined with stream=true: TensorRT-LLM streams only "
                          "with a beam width of 1", key="beam_width",
                          hint="set beam_width to 1 or turn streaming off")
    if stream and not info.decoupled:
        raise ClientError(f"model '{info.name}' is not decoupled, so it cannot stream (the server would answer "
                          "'Streaming is only supported if model is deployed using decoupled mode')", key="stream",
                          hint="render the repository with streaming enabled, or send stream=false")
    max_tokens = fields.get("max_tokens")
    if max_tokens is not None and (isinstance(max_tokens, bool) or not isinstance(max_tokens, (int, np.integer))
                                   or int(max_tokens) <= 0):
        raise ClientError(f"max_tokens must be a positive integer, got {max_tokens!r}", key="max_tokens")


def _json_value(arr: np.ndarray, spec: IOSpec, was_list: bool) -> Any:
    """A validated array back to the JSON value Triton's generate endpoint maps onto the input."""
    flat = arr.reshape(-1)
    if spec.data_type == "TYPE_STRING":
        items = [b.decode("utf-8") for b in flat]
    else:
        items = flat.tolist()
    return items if was_list else items[0]


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


# --------------------------------------------------------------------------------------------------------
# The client
# --------------------------------------------------------------------------------------------------------


def _host_port(url: str) -> str:
    if url.startswith("https://"):
        raise ClientError("TLS endpoints are not supported by this client", key="--url",
                          hint="give host:port of a plain HTTP or gRPC endpoint")
    for prefix in ("http://", "grpc://"):
        if url.startswith(prefix):
            url = url[len(prefix):]
    return url.rstrip("/")


class LLMClient:
    """A client for one Triton server, speaking HTTP or gRPC.

    Args:
        url: ``host:port`` (``http://`` accepted); default ``localhost:8000`` (HTTP) / ``localhost:8001`` (gRPC).
        protocol: ``"http"`` or ``"grpc"``.
        model: the text model (``ensemble`` or ``tensorrt_llm_bls``).
        timeout_s: seconds to wait for a request to finish (and for the connection, HTTP).

    Not thread-safe for HTTP streaming across threads sharing one session; use one client per thread
    (the benchmark does). :meth:`generate_many` runs several requests at once itself.

    Raises:
        ClientError: the server cannot be reached or does not serve ``model`` (at first use).
    """

    def __init__(self, url: str | None = None, protocol: Protocol = "http", model: str = "ensemble",
                 timeout_s: float = 300.0) -> None:
        if protocol not in ("http", "grpc"):
            raise ClientError(f"unknown protocol '{protocol}'", key="--protocol", hint="use http or grpc")
        self.protocol: Protocol = protocol
        self.url = _host_port(url or DEFAULT_URLS[protocol])
        self.model = model
        self.timeout_s = timeout_s
        self._infos: dict[str, ModelInfo] = {}
        self._session: Any = None
        self._grpc: Any = None
        self._router: _GrpcRouter | None = None
        self._lock = threading.Lock()

    # -- lifecycle -------------------------------------------------------------------------------------
    def __enter__(self) -> "LLMClient":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        """Close the HTTP session / gRPC stream and channel."""
        if self._grpc is not None:
            try:
                self._grpc.stop_stream(cancel_requests=True)
            except Exception:  # noqa: BLE001 - closing a dead stream
                pass
            self._grpc.close()
            self._grpc = None
            self._router = None
        if self._session is not None:
            self._session.close()
            self._session = None

    def _http(self) -> Any:
        if self._session is None:
            import requests

            self._session = requests.Session()
        return self._session

    def _grpc_client(self) -> Any:
        if self._grpc is None:
            import tritonclient.grpc as grpcclient

            self._grpc = grpcclient.InferenceServerClient(self.url)
        return self._grpc

    def _timed_out(self, model: str, rid: str) -> ClientError:
        return ClientError(f"model '{model}': no complete response within {self.timeout_s:g} s (request id {rid})",
                           key="--timeout", hint="raise the timeout, or ask for fewer tokens")

    def _unreachable(self, exc: Exception) -> ClientError:
        return ClientError(f"cannot reach tritonserver at {self.url} over {self.protocol}: {exc}", key="--url",
                           hint="start the server (repo-builder launch REPO) or fix --url/--protocol "
                                "(HTTP is port 8000 by default, gRPC 8001)")

    # -- server ----------------------------------------------------------------------------------------
    def server_version(self) -> str:
        """The server's version string from its metadata (HTTP ``GET /v2``, gRPC ``ServerMetadata``).

        Raises:
            ClientError: the server cannot be reached (key ``--url``).
        """
        if self.protocol == "http":
            import requests

            try:
                return str(self._http().get(f"http://{self.url}/v2", timeout=30).json().get("version", "?"))
            except (requests.RequestException, ValueError) as exc:
                raise self._unreachable(exc) from None
        from tritonclient.utils import InferenceServerException

        try:
            return str(self._grpc_client().get_server_metadata(as_json=True).get("version", "?"))
        except InferenceServerException as exc:
            raise self._unreachable(exc) from None

    # -- model config ----------------------------------------------------------------------------------
    def model_info(self, model: str | None = None) -> ModelInfo:
        """The served configuration of ``model`` (default: the client's model), fetched once.

        Raises:
            ClientError: unreachable server or unknown model (key ``--model``).
        """
        model = model or self.model
        if model in self._infos:
            return self._infos[model]
        if self.protocol == "http":
            import requests

            try:
                resp = self._http().get(f"http://{self.url}/v2/models/{model}/config", timeout=30)
            except requests.RequestException as exc:
                raise self._unreachable(exc) from None
            if resp.status_code != 200:
                raise ClientError(f"model '{model}' is not available on {self.url}: {_error_text(resp.text)}",
                                  key="--model", hint="check the name with GET /v2/repository/index")
            config = resp.json()
        else:
            from tritonclient.utils import InferenceServerException

            try:
                config = self._grpc_client().get_model_config(model, as_json=True)["config"]
            except InferenceServerException as exc:
                text = exc.message() or str(exc)
                if "StatusCode.UNAVAILABLE" in str(exc.status()) or "failed to connect" in text.lower():
                    raise self._unreachable(exc) from None
                raise ClientError(f"model '{model}' is not available on {self.url}: {text}", key="--model",
                                  hint="check the model name") from None
        info = ModelInfo.from_config(config)
        self._infos[model] = info
        return info

    def served_tokenizer_dir(self) -> str | None:
        """The ``tokenizer_dir`` of the served ``preprocessing`` model when that directory exists here.

        Lets ``generate`` count tokens with the tokenizer the server uses when client and server share a
        filesystem; None otherwise (remote server, no preprocessing model).
        """
        from pathlib import Path

        try:
            path = self.model_info("preprocessing").parameters.get("tokenizer_dir", "")
        except ClientError:
            return None
        return path if path and Path(path).is_dir() else None

    # -- text generation -------------------------------------------------------------------------------
    def _prepare(self, request: GenerateRequest, model: str) -> tuple[ModelInfo, dict[str, Any], dict[str, np.ndarray]]:
        info = self.model_info(model)
        fields = request.fields()
        check_request(info, fields)
        if request.outputs is not None:
            if self.protocol != "grpc":
                raise ClientError("HTTP /generate returns every output; selecting outputs needs gRPC", key="outputs",
                                  hint="drop outputs or use protocol grpc")
            unknown = [o for o in request.outputs if o not in info.outputs]
            if unknown:
                raise ClientError(f"model '{info.name}' has no output '{unknown[0]}'", key="outputs",
                                  hint=f"its outputs are: {', '.join(info.outputs)}")
        return info, fields, prepare_inputs(info, fields)

    def iter_events(self, request: GenerateRequest, model: str | None = None,
                    result: GenerateResult | None = None, endpoint: str | None = None) -> Iterator[StreamEvent]:
        """Send ``request`` and yield each response as it arrives.

        HTTP uses ``/generate_stream`` when ``request.stream`` and ``/generate`` otherwise (``endpoint``
        forces one of the two; ``/generate`` with ``stream`` on a decoupled model is refused, B29b); gRPC
        uses the stream API for decoupled models and ``infer`` otherwise. Pass ``result`` to have it filled
        as well (start/end times, events, error). A server error is raised as :class:`ClientError` naming
        the model and carrying the server's message.
        """
        if endpoint not in (None, "generate", "generate_stream"):
            raise ClientError(f"unknown endpoint '{endpoint}'", key="endpoint", hint="generate or generate_stream")
        if endpoint is not None and self.protocol != "http":
            raise ClientError("endpoints are an HTTP notion", key="endpoint", hint="use protocol http")
        model = model or self.model
        info, fields, arrays = self._prepare(request, model)
        rid = request.request_id or new_request_id()
        res = result if result is not None else GenerateResult(model, rid, self.protocol, request.stream, 0)
        res.model, res.request_id, res.protocol, res.stream, res.prompt = (model, rid, self.protocol,
                                                                           request.stream, request.text)
        if self.protocol == "http":
            endpoint = endpoint or ("generate_stream" if request.stream else "generate")
            yield from self._http_events(info, fields, arrays, endpoint, rid, res)
        else:
            yield from self._grpc_events(info, arrays, rid, res, request.outputs)

    def generate(self, request: GenerateRequest, model: str | None = None,
                 endpoint: str | None = None) -> GenerateResult:
        """Run ``request`` to completion. A server error is stored in ``result.error`` (not raised), so a
        benchmark can count it; client-side refusals are raised as :class:`ClientError`. ``endpoint``: see
        :meth:`iter_events`."""
        result = GenerateResult(model or self.model, request.request_id or "", self.protocol, request.stream, 0)
        try:
            for _ in self.iter_events(request, model, result, endpoint):
                pass
        except ClientError as exc:
            if result.start_ns == 0:  # refused before sending
                raise
            result.error = exc
            result.end_ns = result.end_ns or time.perf_counter_ns()
        return result

    def generate_many(self, requests: Sequence[GenerateRequest], model: str | None = None) -> list[GenerateResult]:
        """Run several requests at once; results in the order of ``requests``.

        gRPC decoupled: all are in flight together on this client's single stream and are told apart by
        request id (ids must be unique). Otherwise one thread per request with its own connection.
        """
        model = model or self.model
        if self.protocol == "grpc" and self.model_info(model).decoupled:
            ids = [r.request_id for r in requests if r.request_id]
            if len(ids) != len(set(ids)):
                raise ClientError("request ids must be unique among requests in flight on one stream",
                                  key="request_id")
            prepared = []
            for req in requests:
                info, _, arrays = self._prepare(req, model)
                rid = req.request_id or new_request_id()
                prepared.append((GenerateResult(model, rid, "grpc", req.stream, 0, prompt=req.text), arrays,
                                 req.outputs))
            router = self._ensure_router()
            info = self.model_info(model)
            handles = [router.submit(info, arrays, res, outputs=outs) for res, arrays, outs in prepared]
            for handle in handles:
                try:
                    for _ in handle.events(self.timeout_s):
                        pass
                except ClientError:
                    pass  # stored in the handle's result
            return [res for res, _, _ in prepared]
        results: list[GenerateResult | None] = [None] * len(requests)
        errors: list[BaseException] = []

        def run(i: int) -> None:
            try:
                with LLMClient(self.url, self.protocol, model, self.timeout_s) as c:
                    c._infos = dict(self._infos)
                    results[i] = c.generate(requests[i])
            except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
                errors.append(exc)

        threads = [threading.Thread(target=run, args=(i,)) for i in range(len(requests))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise errors[0]
        return [r for r in results if r is not None]

    # -- token ids (B33) -------------------------------------------------------------------------------
    def infer_token_ids(self, input_ids: Sequence[int], request_output_len: int, model: str = "tensorrt_llm",
                        **fields: Any) -> GenerateResult:
        """Send token ids straight to the TensorRT-LLM model (no tokenizer involved).

        ``input_ids`` go as an explicit ``[1, N]`` INT32 tensor with ``input_lengths`` = ``[[N]]`` and
        ``request_output_len`` = ``[[request_output_len]]`` (dtype per the served config; the batch dimension
        only when ``max_batch_size > 0``). HTTP uses ``POST /v2/models/{model}/infer`` (binary-free JSON
        tensors), never ``/generate``; a decoupled model is refused over HTTP (Triton's ``/infer`` rejects
        decoupled models) — use ``protocol="grpc"``, which streams. Further ``fields`` are model inputs by
        exact name (``end_id``, ``streaming``, ...).

        Returns:
            a result whose ``token_ids`` are ``output_ids`` (may include the prompt unless
            ``exclude_input_in_output`` was sent).

        Raises:
            ClientError: empty ``input_ids`` (key ``input_ids``), decoupled model over HTTP (key ``protocol``),
                unknown field, or a server error.
        """
        ids = [int(t) for t in input_ids]
        if not ids:
            raise ClientError("input_ids is empty", key="input_ids")
        info = self.model_info(model)
        if self.protocol == "http" and info.decoupled:
            raise ClientError(f"model '{model}' is decoupled and Triton's HTTP /infer endpoint refuses "
                              "decoupled models", key="protocol", hint="use protocol grpc for token-id requests")
        values: dict[str, Any] = {"input_ids": ids, "input_lengths": len(ids),
                                  "request_output_len": int(request_output_len)}
        values.update({k: v for k, v in fields.items() if v is not None})
        arrays = prepare_inputs(info, values)
        rid = new_request_id()
        stream = bool(fields.get("streaming"))
        result = GenerateResult(model, rid, self.protocol, stream, 0)
        if self.protocol == "http":
            self._http_infer(info, arrays, rid, result)
        else:
            for _ in self._grpc_events(info, arrays, rid, result):
                pass
        return result.raise_for_error()

    # -- HTTP ------------------------------------------------------------------------------------------
    def _http_events(self, info: ModelInfo, fields: dict[str, Any], arrays: dict[str, np.ndarray],
                     endpoint: str, rid: str, res: GenerateResult) -> Iterator[StreamEvent]:
        import requests

        if endpoint == "generate" and fields.get("stream") and info.decoupled:
            raise ClientError(f"POST /v2/models/{info.name}/generate returns exactly one response, but stream=true "
                              "on a decoupled model produces many (Triton: 'generate expects model to produce exactly "
                              "1 response')", key="stream",
                              hint=f"use POST /v2/models/{info.name}/generate_stream (repo-builder generate --stream)")
        body: dict[str, Any] = {"id": rid}
        for field_name, value in fields.items():
            name = info.input_name(field_name)
            if name is not None and name in arrays:
                body[name] = _json_value(arrays[name], info.inputs[name], isinstance(value, (list, tuple)))
        for name, arr in arrays.items():  # inputs filled by prepare_inputs (empty required words)
            body.setdefault(name, _json_value(arr, info.inputs[name], True))
        url = f"http://{self.url}/v2/models/{info.name}/{endpoint}"
        res.start_ns = time.perf_counter_ns()
        try:
            resp = self._http().post(url, data=json.dumps(body), stream=(endpoint == "generate_stream"),
                                     timeout=(10, self.timeout_s), headers={"Content-Type": "application/json"})
        except requests.Timeout:
            res.end_ns = time.perf_counter_ns()
            res.error = self._timed_out(info.name, rid)
            raise res.error from None
        except requests.RequestException as exc:
            res.end_ns = time.perf_counter_ns()
            raise self._unreachable(exc) from None
        with resp:
            if endpoint == "generate":
                now = time.perf_counter_ns()
                payload = _json_or_error(resp.text)
                if resp.status_code != 200 or "error" in payload:
                    res.end_ns = now
                    res.error = _server_error(info.name, payload.get("error", resp.text))
                    raise res.error
                event = _event_from_json(0, now, payload, final=True)
                res.events.append(event)
                res.end_ns = now
                yield event
                return
            if resp.status_code != 200:
                res.end_ns = time.perf_counter_ns()
                res.error = _server_error(info.name, _error_text(resp.text))
                raise res.error
            index = 0
            last: StreamEvent | None = None
            lines = resp.iter_lines(chunk_size=None)
            while True:
                try:
                    line = next(lines, None)
                except requests.Timeout:
                    res.end_ns = time.perf_counter_ns()
                    res.error = self._timed_out(info.name, rid)
                    raise res.error from None
                except requests.RequestException as exc:  # connection lost mid-stream
                    res.end_ns = time.perf_counter_ns()
                    res.error = ClientError(f"model '{info.name}': the response stream broke off after "
                                            f"{index} event(s): {exc}", key="--url")
                    raise res.error from None
                if line is None:
                    break
                now = time.perf_counter_ns()
                if not line.startswith(b"data:"):
                    continue
                payload = _json_or_error(line[5:].decode("utf-8", errors="replace").strip())
                if "error" in payload:
                    res.end_ns = now
                    res.error = _server_error(info.name, payload["error"])
                    raise res.error
                last = _event_from_json(index, now, payload, final=False)
                res.events.append(last)
                index += 1
                yield last
            # SSE has no end-of-request marker: the body's end is the final response
            res.end_ns = time.perf_counter_ns()
            if last is not None:
                last.final = True

    def _http_infer(self, info: ModelInfo, arrays: dict[str, np.ndarray], rid: str, res: GenerateResult) -> None:
        import requests

        body = {"id": rid, "inputs": [
            {"name": name, "shape": list(arr.shape), "datatype": info.inputs[name].wire_type,
             "data": [b.decode("utf-8") for b in arr.reshape(-1)] if arr.dtype == np.object_ else arr.reshape(-1).tolist()}
            for name, arr in arrays.items()]}
        res.start_ns = time.perf_counter_ns()
        try:
            resp = self._http().post(f"http://{self.url}/v2/models/{info.name}/infer", data=json.dumps(body),
                                     timeout=(10, self.timeout_s), headers={"Content-Type": "application/json"})
        except requests.RequestException as exc:
            raise self._unreachable(exc) from None
        now = time.perf_counter_ns()
        res.end_ns = now
        payload = _json_or_error(resp.text)
        if resp.status_code != 200 or "error" in payload:
            res.error = _server_error(info.name, payload.get("error", resp.text))
            return
        outputs = {o["name"]: np.asarray(o.get("data", [])).reshape(o.get("shape", [-1])) for o in payload.get("outputs", [])}
        res.events.append(StreamEvent(0, now, _text_of(outputs.get("text_output")), _ids_of(outputs.get("output_ids")),
                                      outputs, final=True))

    # -- gRPC ------------------------------------------------------------------------------------------
    def _ensure_router(self) -> "_GrpcRouter":
        with self._lock:
            if self._router is None:
                self._router = _GrpcRouter(self._grpc_client())
            return self._router

    def _grpc_events(self, info: ModelInfo, arrays: dict[str, np.ndarray], rid: str,
                     res: GenerateResult, outputs: list[str] | None = None) -> Iterator[StreamEvent]:
        if info.decoupled:
            handle = self._ensure_router().submit(info, arrays, res, rid, outputs)
            yield from handle.events(self.timeout_s)
            return
        from tritonclient.utils import InferenceServerException

        inputs = _grpc_inputs(info, arrays)
        res.request_id = rid
        res.start_ns = time.perf_counter_ns()
        try:
            out = self._grpc_client().infer(info.name, inputs, request_id=rid, client_timeout=self.timeout_s,
                                            outputs=_grpc_outputs(outputs))
        except InferenceServerException as exc:
            res.end_ns = time.perf_counter_ns()
            text = exc.message() or str(exc)
            if "UNAVAILABLE" in str(exc.status()):
                res.error = self._unreachable(exc)
            else:
                res.error = _server_error(info.name, text)
            raise res.error from None
        now = time.perf_counter_ns()
        res.end_ns = now
        event = _event_from_grpc(0, now, out, final=True)
        res.events.append(event)
        yield event


def _grpc_outputs(names: list[str] | None) -> list[Any] | None:
    if names is None:
        return None
    import tritonclient.grpc as grpcclient

    return [grpcclient.InferRequestedOutput(n) for n in names]


def _grpc_inputs(info: ModelInfo, arrays: dict[str, np.ndarray]) -> list[Any]:
    import tritonclient.grpc as grpcclient

    inputs = []
    for name, arr in arrays.items():
        item = grpcclient.InferInput(name, list(arr.shape), info.inputs[name].wire_type)
        item.set_data_from_numpy(arr)
        inputs.append(item)
    return inputs


class _Handle:
    """The per-request side of :class:`_GrpcRouter`: a queue of responses for one request id."""

    def __init__(self, router: "_GrpcRouter", result: GenerateResult) -> None:
        self.router = router
        self.result = result
        self.queue: "queue.Queue[tuple[str, Any, int]]" = queue.Queue()
        self.done = False

    def events(self, timeout_s: float) -> Iterator[StreamEvent]:
        res = self.result
        deadline = time.monotonic() + timeout_s
        while not self.done:
            try:
                kind, payload, now = self.queue.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                self.router.forget(res.request_id)
                res.end_ns = time.perf_counter_ns()
                res.error = ClientError(f"model '{res.model}': no complete response within {timeout_s:g} s "
                                        f"(request id {res.request_id})", key="--timeout",
                                        hint="raise the timeout, or ask for fewer tokens")
                self.done = True
                raise res.error from None
            if kind == "error":
                res.end_ns = now
                res.error = payload
                self.done = True
                raise payload
            event = _event_from_grpc(len(res.events), now, payload, final=False)
            event.final = _is_final(payload)
            res.events.append(event)
            if event.final:
                res.end_ns = now
                self.done = True
            yield event


class _GrpcRouter:
    """One gRPC stream shared by many requests; responses are routed by request id.

    tritonclient's stream callback receives errors without the request id (``result`` is None). Such an
    error is parked; whenever the number of parked errors reaches the number of requests still in flight,
    the errors go to those requests (a failed request never gets a final response, so by then every other
    request has finished). With one request in flight this is immediate.
    """

    def __init__(self, client: Any) -> None:
        self.client = client
        self.lock = threading.Lock()
        self.handles: dict[str, _Handle] = {}
        self.orphans: list[ClientError] = []
        self.stream_error: ClientError | None = None
        client.start_stream(callback=self._callback)

    def submit(self, info: ModelInfo, arrays: dict[str, np.ndarray], result: GenerateResult,
               rid: str | None = None, outputs: list[str] | None = None) -> _Handle:
        """Send one request on the stream; its responses arrive through the returned handle."""
        model = info.name
        rid = rid or result.request_id or new_request_id()
        result.request_id = rid
        handle = _Handle(self, result)
        with self.lock:
            if rid in self.handles:
                raise ClientError(f"request id '{rid}' is already in flight on this stream", key="request_id")
            self.handles[rid] = handle
        inputs = _grpc_inputs(info, arrays)
        result.start_ns = time.perf_counter_ns()
        try:
            self.client.async_stream_infer(model, inputs, request_id=rid, enable_empty_final_response=True,
                                           outputs=_grpc_outputs(outputs))
        except Exception as exc:  # noqa: BLE001 - a broken stream surfaces as InferenceServerException
            self.forget(rid)
            result.end_ns = time.perf_counter_ns()
            result.error = ClientError(f"model '{model}': cannot send on the gRPC stream: {exc}", key="--url")
            handle.queue.put(("error", result.error, result.end_ns))
        return handle

    def forget(self, rid: str) -> None:
        with self.lock:
            self.handles.pop(rid, None)

    def _callback(self, result: Any, error: Any) -> None:
        now = time.perf_counter_ns()
        with self.lock:
            if error is not None:
                message = error.message() if hasattr(error, "message") else str(error)
                status = error.status() if hasattr(error, "status") else None
                if status:  # the stream itself failed (gRPC status): every request in flight is lost
                    for rid, handle in list(self.handles.items()):
                        err = ClientError(f"model '{handle.result.model}': gRPC stream failed: {status} {message}",
                                          key="--url")
                        handle.queue.put(("error", err, now))
                    self.handles.clear()
                    return
                self.orphans.append(_server_error("?", message))
                self._assign_orphans()
                return
            rid = result.get_response().id
            handle = self.handles.get(rid)
            if handle is None:
                return
            if _is_final(result):
                self.handles.pop(rid, None)
            handle.queue.put(("response", result, now))
            self._assign_orphans()

    def _assign_orphans(self) -> None:
        # caller holds self.lock
        if self.orphans and len(self.orphans) >= len(self.handles):
            now = time.perf_counter_ns()
            for rid, err in zip(list(self.handles), list(self.orphans)):
                handle = self.handles.pop(rid)
                err = _server_error(handle.result.model, err.server_message)  # type: ignore[attr-defined]
                handle.queue.put(("error", err, now))
            self.orphans.clear()


def _is_final(result: Any) -> bool:
    params = result.get_response().parameters
    return "triton_final_response" in params and params["triton_final_response"].bool_param


class _GrpcOutputs(Mapping[str, Any]):
    """The outputs of one gRPC response, decoded to numpy on first access (most are never read)."""

    def __init__(self, result: Any) -> None:
        self._result = result
        self._names = [o.name for o in result.get_response().outputs]
        self._cache: dict[str, Any] = {}

    def __getitem__(self, name: str) -> Any:
        if name not in self._names:
            raise KeyError(name)
        if name not in self._cache:
            self._cache[name] = self._result.as_numpy(name)
        return self._cache[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)


def _event_from_grpc(index: int, now: int, result: Any, final: bool) -> StreamEvent:
    outputs = _GrpcOutputs(result)
    return StreamEvent(index, now, _text_of(outputs.get("text_output")), _ids_of(outputs.get("output_ids")),
                       outputs, final)  # type: ignore[arg-type]


def _event_from_json(index: int, now: int, payload: dict[str, Any], final: bool) -> StreamEvent:
    outputs = {k: v for k, v in payload.items() if k not in ("model_name", "model_version", "id")}
    return StreamEvent(index, now, _text_of(outputs.get("text_output")), _ids_of(outputs.get("output_ids")),
                       outputs, final)


def _json_or_error(text: str) -> dict[str, Any]:
    text = text.strip()
    if text.startswith("data:"):  # an SSE body (generate_stream answers errors with an event)
        text = text[5:].strip()
    try:
        value = json.loads(text)
    except ValueError:
        return {"error": text.strip() or "empty response body"}
    return value if isinstance(value, dict) else {"error": f"unexpected response: {text[:200]}"}


def _error_text(text: str) -> str:
    return str(_json_or_error(text).get("error", text))


def _server_error(model: str, message: str) -> ClientError:
    err = ClientError(f"model '{model}' returned an error: {message}")
    err.server_message = message  # type: ignore[attr-defined]
    return err
