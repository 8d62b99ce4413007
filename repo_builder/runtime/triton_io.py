"""Small helpers shared by the Python-backend ``model.py`` files (preprocessing, postprocessing, engines, BLS).

Nothing here imports ``triton_python_backend_utils`` at module level: functions that need it take the
module as their ``pb`` argument, so this file stays importable (and testable) without Triton.

* :class:`RequestError`: a bad request. Its message names the request field (the client-facing name,
  e.g. ``text_input``, ``max_tokens``, ``stop_words``) so one bad request fails alone with a clear
  error while the other requests of the same batch succeed.
* :func:`get_input`: an optional input tensor as a numpy array, or None.
* :func:`output_dtypes`: numpy dtype of every output from the model config (so one model.py serves
  the trtllm-1.2 (INT32) and trtllm-0.5 (UINT32) profiles).
* :func:`strings`: a TYPE_STRING tensor as Python ``str`` (strict UTF-8, error names the field).
* :func:`error_response`: an ``InferenceResponse`` carrying a ``TritonError``.
* :func:`use_fast_bytes_codec`: one-element TYPE_STRING tensors (de)serialized without numpy iteration.
* :func:`requested_names`, :func:`only_requested`, :func:`tensor_response`: send the caller only the outputs it
  asked for.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from .errors import RequestError  # noqa: F401  (re-exported: the request error of every model)

# Triton data type names (model config "data_type" without the TYPE_ prefix, as in the JSON config
# Triton hands to initialize) -> numpy dtype: the one table of repo-builder (the engines and the client
# use it too). TYPE_STRING maps to object (bytes elements); numpy has no bfloat16, so BF16 values are
# built as float32.
_NP = {
    "BOOL": np.bool_,
    "UINT8": np.uint8,
    "UINT16": np.uint16,
    "UINT32": np.uint32,
    "UINT64": np.uint64,
    "INT8": np.int8,
    "INT16": np.int16,
    "INT32": np.int32,
    "INT64": np.int64,
    "FP16": np.float16,
    "FP32": np.float32,
    "FP64": np.float64,
    "STRING": np.object_,
    "BF16": np.float32,
}


@dataclass(frozen=True)
class IOSpec:
    """One input or output of a model config: ``data_type`` is the Triton name (``TYPE_INT32``), ``dims``
    exclude the batch dimension. Used by the Python engines (their own config) and the client (the served
    config)."""

    name: str
    data_type: str
    dims: tuple[int, ...]
    optional: bool = False

    @property
    def numpy_dtype(self) -> Any:
        """The numpy dtype that carries this tensor (``np.object_`` of bytes for TYPE_STRING, BF16 as float32)."""
        return numpy_dtype(self.data_type)

    @property
    def wire_type(self) -> str:
        """The inference-protocol data type (``INT32``, ``BYTES``, ...)."""
        wire = self.data_type[5:] if self.data_type.startswith("TYPE_") else self.data_type
        return "BYTES" if wire == "STRING" else wire


_OBJECT = np.dtype(object)
_pack_length = struct.Struct("<I").pack
_unpack_length = struct.Struct("<I").unpack_from


def fast_serialize_bytes(original: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """``serialize_byte_tensor`` for a one-element object array of ``bytes`` (every streamed text response:
    ``4-byte little-endian length + bytes``, the same bytes ``original`` returns) without ``np.nditer``;
    any other array goes to ``original``. ~1 µs instead of ~10 µs per tensor (docs/performance.md, BLS)."""

    def serialize_byte_tensor(input_tensor: Any) -> Any:
        if type(input_tensor) is np.ndarray and input_tensor.size == 1 and input_tensor.dtype is _OBJECT:
            item = input_tensor.item()
            if type(item) is bytes:
                return _pack_length(len(item)) + item
        return original(input_tensor)

    serialize_byte_tensor.__doc__ = original.__doc__
    return serialize_byte_tensor


def fast_deserialize_bytes(original: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """``deserialize_bytes_tensor`` for a buffer that holds exactly one element (its 4-byte length says it
    ends at the buffer's end): a one-element object array of that ``bytes``, as ``original`` returns; any
    other buffer goes to ``original``."""

    def deserialize_bytes_tensor(encoded_tensor: Any) -> Any:
        size = len(encoded_tensor)
        if size >= 4:
            length = _unpack_length(encoded_tensor, 0)[0]
            if length + 4 == size:
                out = np.empty(1, dtype=_OBJECT)
                out[0] = struct.unpack_from(f"<{length}s", encoded_tensor, 4)[0]
                return out
        return original(encoded_tensor)

    deserialize_bytes_tensor.__doc__ = original.__doc__
    return deserialize_bytes_tensor


def use_fast_bytes_codec(pb: Any) -> None:
    """Make this stub process's TYPE_STRING tensors of one element cheaper to build and to read.

    The Python backend's C++ side calls ``triton_python_backend_utils.serialize_byte_tensor`` for every
    ``pb_utils.Tensor`` made from an object array and ``deserialize_bytes_tensor`` for every TYPE_STRING
    tensor it hands to Python, looking both up by name on each call (python_backend ``src/pb_tensor.cc``,
    tag r24.10). Their loops cost ~10 µs for one element; the BLS sends one such tensor per streamed
    token. This wraps both with :func:`fast_serialize_bytes` / :func:`fast_deserialize_bytes` (same bytes,
    same arrays; every other tensor still goes to the original). Idempotent; a module without them is left
    alone.
    """
    wrappers = (("serialize_byte_tensor", fast_serialize_bytes), ("deserialize_bytes_tensor", fast_deserialize_bytes))
    for name, wrap in wrappers:
        original = getattr(pb, name, None)
        if callable(original) and not getattr(original, "_repo_builder_fast", False):
            fast = wrap(original)
            fast._repo_builder_fast = True  # type: ignore[attr-defined]
            setattr(pb, name, fast)


def numpy_dtype(data_type: str) -> Any:
    """numpy dtype for a Triton data type name (``TYPE_INT32`` or ``INT32``); TYPE_STRING -> object."""
    key = data_type[5:] if data_type.startswith("TYPE_") else data_type
    try:
        return _NP[key]
    except KeyError:
        raise ValueError(f"unknown Triton data type {data_type!r}") from None


def _entries(model_config: Mapping[str, Any], kind: str) -> dict[str, Mapping[str, Any]]:
    return {e["name"]: e for e in model_config.get(kind, []) or []}


def output_dtypes(model_config: Mapping[str, Any]) -> dict[str, Any]:
    """{output name: numpy dtype} from the model config dict (``json.loads(args["model_config"])``)."""
    return {n: numpy_dtype(e["data_type"]) for n, e in _entries(model_config, "output").items()}


def input_dtypes(model_config: Mapping[str, Any]) -> dict[str, Any]:
    """{input name: numpy dtype} from the model config dict."""
    return {n: numpy_dtype(e["data_type"]) for n, e in _entries(model_config, "input").items()}


def output_dims(model_config: Mapping[str, Any]) -> dict[str, list[int]]:
    """{output name: dims without the batch dimension} from the model config dict."""
    return {n: [int(d) for d in e.get("dims", [])] for n, e in _entries(model_config, "output").items()}


def get_input(pb: Any, request: Any, name: str) -> np.ndarray | None:
    """The input tensor ``name`` of ``request`` as a numpy array, or None when the client did not send it."""
    tensor = pb.get_input_tensor_by_name(request, name)
    if tensor is None:
        return None
    return tensor.as_numpy()


def get_inputs(pb: Any, request: Any, names: tuple[str, ...]) -> dict[str, np.ndarray | None]:
    """The inputs ``names`` of ``request`` as numpy arrays (None when not sent), from one ``request.inputs()``.

    ``pb.get_input_tensor_by_name`` lists all of the request's inputs on every call
    (triton_python_backend_utils.py of Triton 2.51), so reading n names costs n listings; this lists once.
    A request without a callable ``inputs`` (test doubles) falls back to :func:`get_input` per name.
    """
    listing = getattr(request, "inputs", None)
    if not callable(listing):
        return {name: get_input(pb, request, name) for name in names}
    by_name = {t.name(): t for t in listing()}
    return {name: (by_name[name].as_numpy() if name in by_name else None) for name in names}


def strings(array: np.ndarray | None, field: str) -> list[str] | None:
    """Flatten a TYPE_STRING array into Python strings (bytes decoded as strict UTF-8); None stays None.

    Raises:
        RequestError: an element is not valid UTF-8 (the message names ``field`` and the byte offset) or
            is not a string at all.
    """
    if array is None:
        return None
    out = []
    for item in np.asarray(array, dtype=object).reshape(-1).tolist():
        if isinstance(item, (bytes, bytearray)):
            try:
                out.append(bytes(item).decode("utf-8"))
            except UnicodeDecodeError as exc:
                raise RequestError(
                    field, f"is not valid UTF-8 (byte {exc.start}: {exc.reason})", "send UTF-8 text"
                ) from None
        elif isinstance(item, str):
            out.append(item)
        else:
            raise RequestError(
                field, f"must hold strings, got {type(item).__name__} {item!r}", "send a list of strings (TYPE_STRING)"
            )
    return out


def requested_names(request: Any) -> frozenset[str] | None:
    """The output names the caller asked for (``request.requested_output_names()``), None where the request
    cannot say (test doubles). Triton fills in every output of the model when a client names none, so the set
    is the whole answer the caller gets."""
    getter = getattr(request, "requested_output_names", None)
    if not callable(getter):
        return None
    names = getter()
    return None if names is None else frozenset(names)


def only_requested(outputs: Mapping[str, Any], requested: frozenset[str] | None) -> Mapping[str, Any]:
    """``outputs`` without the ones the caller did not ask for (all of them when ``requested`` is None).

    Why every response goes through this: python_backend r24.10 (Triton 2.51; unchanged up to python_backend
    main, 2026-12) drops the unrequested tensors of a response in ``ResponseSender::Send``
    (``src/response_sender.cc``) after it has released the GIL. Destroying a tensor whose numpy array it
    holds last then frees Python memory without the GIL, which crashes the Python 3.12 stub
    (SIGSEGV in ``_PyObject_Free`` -> ``_PyInterpreterState_GET``, gdb on Triton 2.51's 3.12 stub; the 3.11
    stub survives it by chance). Triton answers the crashed stub's requests, after 1 s, with "Stub process
    '<model>_0_0' is not healthy". A response that holds only requested tensors has nothing to drop.
    """
    if requested is None or all(name in requested for name in outputs):
        return outputs
    return {name: value for name, value in outputs.items() if name in requested}


def tensor_response(pb: Any, outputs: Mapping[str, Any], requested: frozenset[str] | None = None) -> Any:
    """A ``pb.InferenceResponse`` of ``outputs`` ({name: numpy array}) holding only the ``requested`` ones
    (:func:`only_requested` says why)."""
    kept = only_requested(outputs, requested)
    return pb.InferenceResponse(output_tensors=[pb.Tensor(name, np.asarray(a)) for name, a in kept.items()])


def triton_error(pb: Any, message: str, *, client: bool) -> Any:
    """A ``pb.TritonError`` whose code says who is at fault.

    ``client`` True: ``INVALID_ARG`` (tritonserver 2.51 answers HTTP 400, gRPC ``INVALID_ARGUMENT``; the
    ensemble passes the step's code on); False: ``INTERNAL`` (HTTP 500). Python backends whose
    ``TritonError`` has no codes get the message alone.
    """
    cls = pb.TritonError
    code = getattr(cls, "INVALID_ARG" if client else "INTERNAL", None)
    if code is None:
        return cls(message)
    try:
        return cls(message, code)
    except TypeError:  # a TritonError that takes no code
        return cls(message)


def is_client_error(pb: Any, error: Any) -> bool:
    """True when a ``pb.TritonError`` a step model returned carries ``INVALID_ARG``."""
    code = getattr(pb.TritonError, "INVALID_ARG", None)
    getter = getattr(error, "code", None)
    return code is not None and callable(getter) and getter() == code


def error_response(pb: Any, exc: BaseException) -> Any:
    """An ``InferenceResponse`` that carries ``exc`` as a ``TritonError`` (request fails, others go on):
    ``INVALID_ARG`` for a :class:`RequestError` (the client's mistake), ``INTERNAL`` for anything else."""
    return pb.InferenceResponse(
        output_tensors=[], error=triton_error(pb, str(exc), client=isinstance(exc, RequestError))
    )


def response_parameters_supported(pb: Any) -> bool:
    """True when ``pb.InferenceResponse`` takes ``parameters`` (python_backend r25.02+, not Triton 2.51's)."""
    try:
        pb.InferenceResponse(output_tensors=[], parameters={})
    except TypeError:
        return False
    return True


def respond_each(
    pb: Any,
    requests: Any,
    input_names: tuple[str, ...],
    process: Any,
    model: str,
    parameters: Any = None,
    metrics: Any = None,
) -> list[Any]:
    """Serve a batch of requests one by one, so a bad request fails alone.

    Args:
        pb: the ``triton_python_backend_utils`` module.
        requests: the requests ``execute`` received.
        input_names: the inputs to read (absent optional ones arrive as None).
        process: ``process(inputs: dict[str, np.ndarray | None], request) -> dict[str, np.ndarray]``.
        model: the model name for the message of an unexpected failure.
        parameters: optional ``parameters(request) -> dict`` of response parameters, called after
            ``process`` (only where the Python backend supports them: :func:`response_parameters_supported`).
        metrics: the model's :mod:`.metrics` (counts the refused requests by field), or None.
    Returns:
        one ``InferenceResponse`` per request: the outputs, or an error naming the request field
        (:class:`RequestError`) or the failure (a bug must not take the other requests down).
    """
    responses = []
    for request in requests:
        try:
            inputs = get_inputs(pb, request, input_names)
            outputs = only_requested(process(inputs, request), requested_names(request))
            tensors = [pb.Tensor(name, array) for name, array in outputs.items()]
            params = parameters(request) if parameters is not None else None
            if params:
                responses.append(pb.InferenceResponse(output_tensors=tensors, parameters=params))
            else:
                responses.append(pb.InferenceResponse(output_tensors=tensors))
        except RequestError as exc:
            if metrics is not None:
                metrics.refused(exc.field)
            responses.append(error_response(pb, exc))
        except Exception as exc:  # noqa: BLE001 - reported to the client, the other requests go on
            responses.append(error_response(pb, RuntimeError(f"{model} failed: {type(exc).__name__}: {exc}")))
    return responses


def send_each(
    pb: Any,
    requests: Any,
    input_names: tuple[str, ...],
    process: Any,
    model: str,
    after_send: Any,
    metrics: Any = None,
) -> None:
    """As :func:`respond_each`, but each response goes out through the request's response sender (final
    flag) before the next request is served, and ``after_send()`` runs once it went, whether it carried
    outputs or an error. The sender returns once the server took the response (python_backend: the stub
    waits for its parent to pass it on), so what ``after_send`` releases comes after it. ``execute`` then
    returns None (the Python backend allows a response sender in a non-decoupled model when every request
    gets exactly one final response).
    """
    final = pb.TRITONSERVER_RESPONSE_COMPLETE_FINAL
    for request in requests:
        try:
            inputs = get_inputs(pb, request, input_names)
            outputs = process(inputs, request)
            response = tensor_response(pb, outputs, requested_names(request))
        except RequestError as exc:
            if metrics is not None:
                metrics.refused(exc.field)
            response = error_response(pb, exc)
        except Exception as exc:  # noqa: BLE001 - reported to the client, the other requests go on
            response = error_response(pb, RuntimeError(f"{model} failed: {type(exc).__name__}: {exc}"))
        try:
            request.get_response_sender().send(response, flags=final)
        finally:
            after_send()
