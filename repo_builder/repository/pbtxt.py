"""Reading and writing Triton ``config.pbtxt`` files with protobuf text format.

Every config is parsed into ``tritonclient.grpc.model_config_pb2.ModelConfig`` (the message Triton itself
parses ``config.pbtxt`` into), so a file that passes here is one Triton's parser accepts field for field.
String values are written through :func:`quote`, which escapes for protobuf text format (backslash,
quote, newline, non-printable bytes) so that a value round-trips exactly and can never add a field.
"""

from __future__ import annotations

import functools
import importlib.util
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import TemplateError

if TYPE_CHECKING:  # pragma: no cover
    from tritonclient.grpc.model_config_pb2 import ModelConfig

#: The file name of a model's config in a Triton model repository (``<repository>/<model>/config.pbtxt``).
CONFIG_NAME = "config.pbtxt"

#: An unfilled template placeholder as left by NVIDIA's ``fill_template.py`` (``${name}``).
PLACEHOLDER_RE = re.compile(r"\$\{([^}\n]*)\}?")


def quote(value: object, *, key: str | None = None) -> str:
    """The protobuf text-format string literal (with its double quotes) for ``value``.

    ``value`` is converted with ``str`` first. Backslash, double quote, newline, tab and every other
    non-printable byte are escaped (``google.protobuf.text_encoding.CEscape`` with UTF-8 kept as is).

    Raises:
        TemplateError: the text cannot be encoded as UTF-8 (e.g. a lone surrogate from a file name with
            undecodable bytes); the message names ``key``.
    """
    from google.protobuf import text_encoding

    text = str(value)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise TemplateError(
            f"value {text!r} is not valid UTF-8 and cannot be written into config.pbtxt",
            key=key,
            hint="rename the path to valid UTF-8",
        ) from exc
    return '"' + text_encoding.CEscape(text, as_utf8=True) + '"'


@dataclass(frozen=True)
class Placeholder:
    """An unfilled ``${...}`` placeholder: 1-based ``line`` and ``column``, and the placeholder ``name``."""

    line: int
    column: int
    name: str


def find_placeholders(text: str) -> list[Placeholder]:
    """Every ``${...}`` in ``text`` with its 1-based line and column, in order (also inside comments)."""
    found = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        for match in PLACEHOLDER_RE.finditer(line):
            found.append(Placeholder(lineno, match.start() + 1, match.group(1)))
    return found


class PbtxtParseError(TemplateError):
    """A config.pbtxt is not valid protobuf text for ``ModelConfig``; ``line``/``column`` are 1-based."""

    def __init__(self, message: str, *, path: str | Path | None, line: int | None, column: int | None) -> None:
        self.line = line
        self.column = column
        super().__init__(message, path=path)


def model_config_pb2() -> Any:
    """tritonclient's ``model_config_pb2`` without importing ``tritonclient.grpc`` (grpc, numpy: ~0.2 s; and
    ``tritonclient.grpc`` refuses to import at all unless tritonclient was installed with its ``grpc`` extra).

    The generated module only needs ``google.protobuf``; it is loaded from tritonclient's file under a private
    name. protobuf keeps one descriptor pool, so the message classes are the same ones
    ``tritonclient.grpc.model_config_pb2`` gives. Falls back to the normal import.
    """
    name = "repo_builder._model_config_pb2"
    if name in sys.modules:
        return sys.modules[name]
    if "tritonclient.grpc.model_config_pb2" not in sys.modules:
        try:
            spec = importlib.util.find_spec("tritonclient")
            if spec is not None and spec.submodule_search_locations:
                path = Path(list(spec.submodule_search_locations)[0]) / "grpc" / "model_config_pb2.py"
                file_spec = importlib.util.spec_from_file_location(name, path)
                if file_spec is not None and file_spec.loader is not None and path.is_file():
                    module = importlib.util.module_from_spec(file_spec)
                    file_spec.loader.exec_module(module)
                    sys.modules[name] = module
                    return module
        except Exception:  # noqa: BLE001 - any trouble: use the regular import below
            sys.modules.pop(name, None)
    from tritonclient.grpc import model_config_pb2

    return model_config_pb2


class _ParseFailure(Exception):
    """protobuf's ``text_format.ParseError``, carried without importing text_format on the cached path."""

    def __init__(self, line: int, column: int, detail: str) -> None:
        super().__init__(detail)
        self.line, self.column, self.detail = line, column, detail


def _parse_text(text: str) -> bytes:
    """``text`` parsed by protobuf's ``text_format`` into a ``ModelConfig``, serialized.

    Raises:
        _ParseFailure: text_format refused it (line, column, message).
    """
    from google.protobuf import text_format

    config = model_config_pb2().ModelConfig()
    try:
        text_format.Parse(text, config)
    except text_format.ParseError as exc:
        raise _ParseFailure(exc.GetLine(), exc.GetColumn(), str(exc)) from exc
    return config.SerializeToString()


@functools.lru_cache(maxsize=128)
def _parsed_bytes(text: str) -> bytes:
    """``text`` parsed into a ``ModelConfig`` and serialized, cached in this process (render parses each
    rendered config for its own checks, then again in the validation of the temp repository) and on disk
    (:mod:`repo_builder.filecache`, kind ``pbtxt``, keyed by the text, protobuf's version and the
    ``model_config.proto`` descriptor): ``text_format`` is pure Python, ~15 ms per config here, the binary
    round trip ~0.1 ms. Raises :class:`_ParseFailure` (never cached)."""
    import google.protobuf

    from ..filecache import cached_bytes, key_of

    descriptor = model_config_pb2().DESCRIPTOR.serialized_pb
    key = key_of("pbtxt", google.protobuf.__version__, descriptor, text)
    data = cached_bytes("pbtxt", key, lambda: _parse_text(text))
    assert data is not None  # _parse_text returns bytes or raises
    return data


def parse_model_config(text: str, *, path: str | Path | None = None) -> ModelConfig:
    """Parse ``text`` into a ``ModelConfig`` exactly as Triton would (unknown fields are errors).

    Every call returns a new message (callers may change it); equal texts are parsed once per process, and
    once per machine while the on-disk cache keeps them (:func:`_parsed_bytes`).

    Raises:
        PbtxtParseError: with the 1-based line and column of the first error.
    """
    try:
        data = _parsed_bytes(text)
    except _ParseFailure as exc:
        # ParseError's text starts with "L:C : "; keep only the message part.
        detail = re.sub(r"^\d+:\d+ : ", "", exc.detail)
        raise PbtxtParseError(
            f"line {exc.line}: not a valid Triton model config: {detail}", path=path, line=exc.line, column=exc.column
        ) from exc
    message = model_config_pb2().ModelConfig
    try:
        return message.FromString(data)
    except Exception:  # noqa: BLE001 - a damaged cache entry: parse the text itself
        return message.FromString(_parse_text(text))


def load_model_config(path: str | Path) -> ModelConfig:
    """Read and parse one ``config.pbtxt`` file (see :func:`parse_model_config`)."""
    p = Path(path)
    return parse_model_config(p.read_text(encoding="utf-8"), path=p)


def config_model(rel: str) -> str | None:
    """The model a repository-relative POSIX path is the config of (``"tensorrt_llm/config.pbtxt"`` ->
    ``"tensorrt_llm"``); None for every other path (``a/1/config.pbtxt``, ``config.pbtxt``)."""
    model, sep, name = rel.partition("/")
    return model if sep and model and name == CONFIG_NAME else None


@dataclass(frozen=True)
class ModelFolder:
    """One model folder of a repository as :func:`read_model_folders` found it.

    Attributes:
        name: the folder name (Triton's model name).
        path: its ``config.pbtxt`` (which may not exist).
        text: the file's text; None when the file is missing or unreadable (``unreadable`` says why).
        config: the parsed ``ModelConfig``; None when there is no text or it does not parse (``error``).
        unreadable: ``None``, ``"missing"`` (no config.pbtxt in the folder), or the OS / UTF-8 error text.
        error: the parse error (1-based line and column) when the text is not a valid model config.
    """

    name: str
    path: Path
    text: str | None
    config: ModelConfig | None
    unreadable: str | None = None
    error: PbtxtParseError | None = None

    @property
    def rel(self) -> str:
        """``<name>/config.pbtxt``, the repository-relative path problems name."""
        return f"{self.name}/{CONFIG_NAME}"


def read_model_folders(repo: str | Path) -> list[ModelFolder]:
    """Every model folder of ``repo`` (each directory whose name does not start with ``.``), sorted by name,
    with its ``config.pbtxt`` read and parsed (:func:`parse_model_config`). This is the one reader of a
    repository's configs: validate, adopt and the launcher decide what each missing, unreadable or
    unparsable config means to them. Raises nothing for a folder; ``repo`` must be a directory (OSError)."""
    root = Path(repo)
    out = []
    for folder in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")):
        path = folder / CONFIG_NAME
        if not path.is_file():
            out.append(ModelFolder(folder.name, path, None, None, unreadable="missing"))
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            out.append(ModelFolder(folder.name, path, None, None, unreadable=str(exc)))
            continue
        try:
            config = parse_model_config(text, path=f"{folder.name}/{CONFIG_NAME}")
        except PbtxtParseError as exc:
            out.append(ModelFolder(folder.name, path, text, None, error=exc))
            continue
        out.append(ModelFolder(folder.name, path, text, config))
    return out


def dtype_name(value: int) -> str:
    """``TYPE_*`` name of a ``DataType`` enum value (e.g. 8 -> ``TYPE_INT32``)."""
    return str(model_config_pb2().DataType.Name(value))


def string_parameters(config: ModelConfig) -> dict[str, str]:
    """The ``parameters`` map of a model config as {key: string_value}."""
    return {k: v.string_value for k, v in config.parameters.items()}


def backend_json(config: ModelConfig) -> dict:
    """``config`` as the JSON dict Triton's Python backend hands to ``initialize`` (``args["model_config"]``).

    Proto field names, enum names (``TYPE_INT32``), and ``dims``/``reshape`` as plain integers (protobuf's
    JSON mapping writes int64 as strings; Triton does not). ``parameters`` is sorted by key: protobuf map
    iteration order differs between processes, and a rendered file must not.
    """
    from google.protobuf.json_format import MessageToDict

    data = MessageToDict(config, preserving_proto_field_name=True)
    for kind in ("input", "output"):
        for entry in data.get(kind, []):
            entry["dims"] = [int(d) for d in entry.get("dims", [])]
            if "reshape" in entry:
                entry["reshape"]["shape"] = [int(d) for d in entry["reshape"].get("shape", [])]
    if isinstance(data.get("parameters"), dict):
        data["parameters"] = dict(sorted(data["parameters"].items()))
    return data


def python_instances(config: ModelConfig) -> int:
    """Python-backend stub processes a model config starts: the sum over ``instance_group`` of ``count``
    (0 means 1) times the number of listed GPUs (at least 1); 1 when there is no group.

    Triton starts one stub process per model instance (python_backend README, "Multiple instances").
    Meaningful for ``backend: "python"`` configs only; the caller decides that.
    """
    groups = list(config.instance_group)
    if not groups:
        return 1
    total = 0
    for group in groups:
        count = group.count if group.count > 0 else 1
        gpus = len(group.gpus) if group.kind == 1 else 0  # KIND_GPU = 1
        total += count * max(gpus, 1)
    return total
