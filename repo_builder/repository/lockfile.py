"""The lock file ``repo-builder.lock.json`` at a rendered repository's root.

Format (``docs/design.md``)::

    {"tool": "repo-builder", "version": "0.1.0", "profile": "trtllm-1.2",
     "engine": {"dir": "/abs/engine", "kind": "trtllm", "placement": "copy", "fingerprint": "sha256:..."},
     "tokenizer": {"dir": "/abs/tokenizer"},
     "values": {"kv_cache_free_gpu_mem_fraction": {"value": 0.9, "origin": "default"}, ...},
     "launch": {"world_size": 1, "tensorrt_llm_model_names": ["tensorrt_llm"],
                "tp_size": 1, "pp_size": 1, "python_instances": {"preprocessing": 1, ...}},
     "serve_path": null,
     "files": {"preprocessing/config.pbtxt": "sha256:...", ...}}

``serve_path`` is the directory the repository is served at when that differs from where it was written
(``--serve-path``); paths inside the repository's parameters start with it. ``files`` holds the sha256 of
every rendered file except engine files and the lock file itself; ``engine_files`` lists the engine files
placed into the repository (relative paths; absent in lock files written before it existed). Together they
are every file repo-builder wrote, which is what ``render --force`` may replace. The file has no timestamp,
so rendering the same inputs twice gives the same bytes.

``launch`` is what a launcher or a deployment needs without reading the engine: the MPI world size (tp x pp),
the model(s) ranks > 0 load, and the number of Python-backend stub processes per model (each needs a
``/dev/shm`` region). Lock files written before ``tp_size``/``pp_size``/``python_instances`` existed lack
them (``None``). :func:`read_launch` checks the block of a lock file repo-builder wrote,
:func:`read_lock_view` (the launcher's) any lock file's, leniently, through the same loader as
:func:`read_lock`. A repository serving several LLMs
(``render --model``) has an ``llms`` list too (:func:`build_multi_lock`, :func:`lock_llms`).

:func:`read_lock` checks the file against :class:`LockFile` (a pydantic model; unknown keys are kept, so a
newer repo-builder's lock file still reads), names the key path of the first problems and returns the
:class:`LockFile` every consumer reads: :attr:`LockFile.llms` is always a list of :class:`LockLLM` (one entry
for a single-LLM repository), :attr:`LockFile.models` the Triton models it holds (:func:`lock_models`, the one
scan of ``files`` for ``<model>/config.pbtxt``), :attr:`LockFile.data` the file's JSON object as read. The
schema's models live in :mod:`.lock_schema` (re-exported here).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from pydantic import ValidationError

from ..errors import RenderError, RepoBuilderError, field_problems, field_problems_text
from .digests import sha256_bytes, sha256_file  # re-exported: moved from this module
from .lock_schema import (  # noqa: F401  (re-exported: moved from this module)
    LOCK_NAME,
    LaunchBlock,
    LockEngine,
    LockFile,
    LockLaunch,
    LockLLM,
    LockValue,
    lock_llms,
    lock_models,
)

#: The files layouts whisper and multimodal wrote instead of :data:`LOCK_NAME` before they wrote a lock file
#: (repo-builder 0.1.0 before 2026-12-04): {file name: layout}. Read only by :func:`repository_layout` (which
#: front end serves such a repository); they are no lock file (``render --force`` refuses to replace them).
LEGACY_LAYOUT_FILES = {"repo-builder.whisper.json": "whisper", "repo-builder.multimodal.json": "multimodal"}


def _jsonable(value: Any) -> Any:
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, list):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    return value


def build_lock(
    *,
    version: str,
    profile: str,
    engine: Mapping[str, Any],
    tokenizer_dir: str | Path,
    values: Mapping[str, tuple[Any, str]],
    world_size: int,
    tensorrt_llm_model_names: list[str],
    files: Mapping[str, bytes],
    serve_path: str | Path | None = None,
    engine_files: list[str] | tuple[str, ...] = (),
    tp_size: int | None = None,
    pp_size: int | None = None,
    python_instances: Mapping[str, int] | None = None,
) -> dict[str, Any]:
    """The lock file content as a dict.

    Args:
        engine: ``{"dir", "kind", "placement", "fingerprint"}``.
        values: {parameter: (value, origin)} with origin one of default/engine/tokenizer/user.
        files: {repository-relative POSIX path: bytes} of every rendered file except engine files.
        engine_files: repository-relative paths of the engine files placed (none for ``reference``).
        tp_size, pp_size: the engine's tensor and pipeline parallel sizes (world_size = tp x pp).
        python_instances: {model: Python-backend stub processes} for every ``backend: "python"`` model.
    """
    launch: dict[str, Any] = {"world_size": int(world_size), "tensorrt_llm_model_names": list(tensorrt_llm_model_names)}
    if tp_size is not None:
        launch["tp_size"] = int(tp_size)
    if pp_size is not None:
        launch["pp_size"] = int(pp_size)
    if python_instances is not None:
        launch["python_instances"] = {str(k): int(v) for k, v in sorted(python_instances.items())}
    return {
        "tool": "repo-builder",
        "version": version,
        "profile": profile,
        "engine": _jsonable(dict(engine)),
        "tokenizer": {"dir": str(tokenizer_dir)},
        "values": {name: {"value": _jsonable(v), "origin": origin} for name, (v, origin) in sorted(values.items())},
        "launch": launch,
        "serve_path": str(serve_path) if serve_path is not None else None,
        "files": {rel: sha256_bytes(data) for rel, data in sorted(files.items())},
        "engine_files": sorted(engine_files),
    }


def build_multi_lock(
    *,
    version: str,
    profile: str,
    llms: list[tuple[str, Mapping[str, Any]]],
    files: Mapping[str, bytes],
    serve_path: str | Path | None = None,
) -> dict[str, Any]:
    """The lock file of a repository serving several LLMs (``render --model NAME=...`` repeated).

    ``llms`` is ``[(name, that LLM's own lock dict from build_lock)]``. The result has the single-LLM keys
    (``launch`` merged: the common world size, every LLM's TensorRT-LLM model, all Python stub counts;
    ``values`` empty, as values are per LLM) plus ``llms``: ``[{"name", "engine", "tokenizer", "values",
    "models": {role: model name}}]`` (and ``"checkpoint"``, the checkpoint facts, for an llmapi profile).
    ``engine``/``tokenizer`` at the top are the first LLM's (readers that know one LLM only still find an
    engine); :func:`lock_llms` lists them all.
    """
    launches = [lock["launch"] for _, lock in llms]
    launch: dict[str, Any] = {
        "world_size": launches[0]["world_size"],
        "tensorrt_llm_model_names": [n for lau in launches for n in lau["tensorrt_llm_model_names"]],
    }
    for key in ("tp_size", "pp_size"):
        if all(key in lau for lau in launches) and len({lau[key] for lau in launches}) == 1:
            launch[key] = launches[0][key]
    if all("python_instances" in lau for lau in launches):
        launch["python_instances"] = {k: v for lau in launches for k, v in sorted(lau["python_instances"].items())}
    entries = []
    for name, lock in llms:
        models = lock_models(lock["files"])
        prefix = f"{name}_"
        entries.append(
            {
                "name": name,
                "engine": lock["engine"],
                "tokenizer": lock["tokenizer"],
                "values": lock["values"],
                "models": {m[len(prefix) :]: m for m in models if m.startswith(prefix)},
                **({"checkpoint": lock["checkpoint"]} if "checkpoint" in lock else {}),  # the llmapi profiles
            }
        )
    first = llms[0][1]
    return {
        "tool": "repo-builder",
        "version": version,
        "profile": profile,
        "engine": first["engine"],
        "tokenizer": first["tokenizer"],
        "values": {},
        "llms": entries,
        "launch": launch,
        "serve_path": str(serve_path) if serve_path is not None else None,
        "files": {rel: sha256_bytes(data) for rel, data in sorted(files.items())},
        "engine_files": sorted({rel for _, lock in llms for rel in lock.get("engine_files", [])}),
    }


def dumps(lock: Mapping[str, Any]) -> bytes:
    """Serialize a lock dict (2-space indent, trailing newline, stable key order as built)."""
    return (json.dumps(lock, indent=2, ensure_ascii=False) + "\n").encode("utf-8")


_REWRITE_HINT = "re-render the repository with `repo-builder render --force`"


def _load_json(repo: str | Path, *, error: type[RepoBuilderError]) -> tuple[Path, dict[str, Any] | None]:
    """The one reader of ``repo``'s lock file: ``(its path, its JSON object)``, the object None when there is
    no lock file. :func:`read_lock` (strict) and :func:`read_lock_view` (lenient) both read through it.

    Raises:
        ``error``, naming the file: it is unreadable, not JSON, or not a JSON object.
    """
    path = Path(repo) / LOCK_NAME
    if not (path.is_file() or path.is_symlink()):
        return path, None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        raise error(f"unreadable lock file: {why}", path=path, hint=_REWRITE_HINT) from None
    if not isinstance(data, dict):
        raise error("malformed lock file: not a JSON object", path=path, hint=_REWRITE_HINT)
    return path, data


def repository_layout(repo: str | Path) -> str | None:
    """The layout of a rendered repository that is not served through the text ensemble: the lock file's
    ``layout`` key (``whisper``, ``multimodal``; written by ``render --layout whisper|multimodal``), or the
    layout of a :data:`LEGACY_LAYOUT_FILES` file for a repository rendered before those wrote a lock file.
    None for every other repository (no lock file, no ``layout`` key, or a lock file that does not read).
    """
    try:
        _, data = _load_json(repo, error=RenderError)
    except RenderError:
        data = None
    if data is not None:
        layout = data.get("layout")
        return layout if isinstance(layout, str) and layout else None
    for name, layout in LEGACY_LAYOUT_FILES.items():
        if (Path(repo) / name).is_file():
            return layout
    return None


def read_lock(repo: str | Path) -> LockFile | None:
    """The lock file of ``repo``, or None when the repository has none.

    Raises:
        RenderError: the file exists but is unreadable, not JSON, or not a lock file repo-builder writes
            (:class:`LockFile`; the message names the key path, e.g. ``files.a/b: ... not a sha256 digest``).
    """
    path, data = _load_json(repo, error=RenderError)
    if data is None:
        return None
    try:
        return LockFile.from_data(data)
    except ValidationError as exc:
        raise RenderError(f"malformed lock file: {field_problems_text(exc)}", path=path, hint=_REWRITE_HINT) from None


def engine_file_patterns(lock: LockFile) -> tuple[str, ...]:
    """Where a lock file without ``engine_files`` (older repo-builder) put engine files: glob patterns
    relative to the repository (``docs/design.md``: trtllm -> ``tensorrt_llm/1/config.json`` +
    ``rank*.engine``; hf/synthetic -> everything under ``tensorrt_llm/1/engine/``)."""
    if lock.engine.placement == "reference":
        return ()
    if lock.engine.kind == "trtllm":
        return ("tensorrt_llm/1/config.json", "tensorrt_llm/1/rank*.engine")
    return ("tensorrt_llm/1/engine/**",)


def unlisted_files(repo: str | Path, lock: LockFile) -> list[str]:
    """Files (and symlinks) under ``repo`` that the lock file does not list: neither a rendered file, the
    lock file itself, nor an engine file. ``__pycache__`` folders (Python writes them when Triton loads a
    model) are not counted. Sorted repository-relative POSIX paths."""
    import fnmatch

    root = Path(repo)
    listed = set(lock.files) | {LOCK_NAME}
    engine_files = lock.engine_files
    patterns: tuple[str, ...] = () if engine_files is not None else engine_file_patterns(lock)
    listed |= set(engine_files or ())
    out = []
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        if "__pycache__" in rel.parts or (path.is_dir() and not path.is_symlink()):
            continue
        text = rel.as_posix()
        if text in listed or any(fnmatch.fnmatchcase(text, p) for p in patterns):
            continue
        out.append(text)
    return out


def require_lock(repo: str | Path) -> LockFile:
    """:func:`read_lock` for commands that need the lock file (deploy): its absence is an error.

    Raises:
        RenderError: ``repo`` is not a directory, has no lock file, or the lock file is malformed.
    """
    root = Path(repo)
    if not root.is_dir():
        raise RenderError(
            "repository does not exist or is not a directory",
            path=root,
            hint="render one with `repo-builder render --output DIR`",
        )
    lock = read_lock(root)
    if lock is None:
        raise RenderError(
            f"no {LOCK_NAME} in the repository; deployments are generated from it",
            path=root,
            hint="render the repository with `repo-builder render` (hand-filled repositories have no lock file)",
        )
    return lock


_Block = TypeVar("_Block", bound=LaunchBlock)


def _checked_launch(
    launch: Any, model: type[_Block], *, path: str | Path | None, error: type[RepoBuilderError]
) -> _Block:
    """``launch`` validated as ``model``; the first problem raised as ``error`` naming ``launch.<key>``."""
    hint = "re-render the repository with `repo-builder render --force`"
    if not isinstance(launch, dict):
        raise error(f"'launch' must be an object, got {launch!r}", path=path, key="launch", hint=hint)
    try:
        block = model.model_validate(launch)
    except ValidationError as exc:
        first = field_problems(exc)[0]
        loc = first.loc
        msg = "missing" if first.missing else first.message
        got = "" if first.missing else f", got {first.input!r}"
        inner = "".join(f"{x}: " for x in loc[1:])  # e.g. the model of a python_instances entry
        raise error(
            f"{inner}{msg}{got}",
            path=path,
            key=f"launch.{loc[0]}" if loc else "launch",
            hint=hint,
        ) from None
    tp, pp, ws = block.tp_size, block.pp_size, block.world_size
    if tp is not None and pp is not None and ws is not None and tp * pp != ws:
        raise error(f"tp_size {tp} x pp_size {pp} != world_size {ws}", path=path, key="launch.world_size", hint=hint)
    return block


def read_launch(lock: LockFile | Mapping[str, Any], *, path: str | Path | None = None) -> LockLaunch:
    """The ``launch`` block of a lock file repo-builder wrote (a :class:`LockFile` or its JSON object), checked
    (:class:`LockLaunch`; used by deploy).

    Raises:
        RenderError: the block is missing or a field has the wrong type (names ``launch.<field>``), or
            ``tp_size x pp_size != world_size``.
    """
    if isinstance(lock, LockFile):
        lock = lock.data
    if "launch" not in lock:
        raise RenderError(
            "lock file has no 'launch' object",
            path=path,
            key="launch",
            hint="re-render the repository with `repo-builder render --force`",
        )
    return _checked_launch(lock["launch"], LockLaunch, path=path, error=RenderError)


@dataclass(frozen=True)
class LockView:
    """A lock file read leniently (:func:`read_lock_view`): hand-made and partial lock files
    (``{"launch": {"world_size": 2}}``) are views too, where :func:`read_lock` would refuse them.

    Attributes:
        path: the lock file.
        data: its JSON object as read.
        launch: its ``launch`` block checked as :class:`LaunchBlock` (every key optional), None when absent.
    """

    path: Path
    data: dict[str, Any]
    launch: LaunchBlock | None

    @property
    def models(self) -> tuple[str, ...]:
        """The Triton models its ``files`` list (:func:`lock_models`); empty when it has no ``files`` object."""
        files = self.data.get("files")
        return lock_models(files) if isinstance(files, dict) else ()


def read_lock_view(repo: str | Path, *, error: type[RepoBuilderError] = RenderError) -> LockView | None:
    """``repo``'s lock file read through the same loader as :func:`read_lock`, leniently (the launcher's reader).

    Only ``launch`` is checked (:class:`LaunchBlock`): the rest of the file may be anything.

    Returns:
        the view, or None when there is no lock file.

    Raises:
        ``error`` (default :class:`RenderError`; the launcher passes ``LaunchError``), naming the lock file:
        it is unreadable, not JSON, not a JSON object, or ``launch`` is malformed (names ``launch.<key>``).
    """
    path, data = _load_json(repo, error=error)
    if data is None:
        return None
    raw = data.get("launch")
    launch = None if raw is None else _checked_launch(raw, LaunchBlock, path=path, error=error)
    return LockView(path, data, launch)


def read_launch_block(repo: str | Path, *, error: type[RepoBuilderError] = RenderError) -> LaunchBlock | None:
    """The ``launch`` block of ``repo``'s lock file, leniently (:func:`read_lock_view`); None when there is no
    lock file or it has no ``launch`` key. Raises as :func:`read_lock_view`."""
    view = read_lock_view(repo, error=error)
    return view.launch if view is not None else None


def changed_files(repo: str | Path, lock: LockFile, *, hashes: bool = True) -> list[tuple[str, str]]:
    """Files of ``repo`` whose sha256 differs from the lock file: [(relative path, "changed"|"missing")].
    ``hashes=False``: only the missing ones (no file is read)."""
    root = Path(repo)
    out = []
    for rel, digest in lock.files.items():
        path = root / rel
        if not path.is_file():
            out.append((rel, "missing"))
        elif hashes and sha256_file(path) != digest:
            out.append((rel, "changed"))
    return out


@dataclass(frozen=True)
class ServingInfo:
    """What a client-side front end (``repo-builder openai``) needs from a repository's lock file, for one LLM.

    Attributes:
        model_name: the name to serve the LLM under. One LLM: the last component of the engine directory the
            repository was rendered from (``engine.dir``), e.g. ``llama-3-8b`` for ``/engines/llama-3-8b``.
            Several LLMs (``render --model NAME=...``): ``NAME`` (``llms[].name``).
        tokenizer_dir: the tokenizer directory as render read it (``tokenizer.dir``); the parameter
            ``tokenizer_dir`` (the path the server sees, ``--serve-path``) when the former is missing.
        profile: the template profile (``trtllm-1.2``, ``trtllm-0.5``).
        values: every resolved parameter value of this LLM by name (``values.<name>.value``).
        path: the lock file.
        llm: the LLM's name in a several-LLM repository (``llms[].name``), None for a single-LLM one.
        models: role -> Triton model name of this LLM (``ensemble`` -> ``NAME_ensemble`` when several, the role
            itself when one: :func:`lock_llms`).
    """

    model_name: str
    tokenizer_dir: Path | None
    profile: str
    values: dict[str, Any]
    path: Path
    llm: str | None = None
    models: dict[str, str] = field(default_factory=dict)

    def value(self, name: str, default: Any = None) -> Any:
        """The resolved value of parameter ``name`` (``default`` when unset or absent)."""
        got = self.values.get(name)
        return default if got is None else got

    def triton_model(self, role: str) -> str:
        """The Triton model of this LLM for ``role`` (``ensemble``, ``tensorrt_llm_bls``): ``NAME_<role>`` in a
        several-LLM repository, ``role`` itself otherwise (also when the lock lists no such model)."""
        return self.models.get(role) or (f"{self.llm}_{role}" if self.llm else role)


def read_serving_info(repo: str | Path) -> list[ServingInfo]:
    """Read one :class:`ServingInfo` per LLM from ``repo``'s lock file (one entry for a single-LLM
    repository; for ``render --model NAME=...`` repeated, one per ``llms[]`` entry, in the lock's order).

    Raises:
        RenderError: the repository has no lock file (names the path, hints at ``--served-model-name`` /
            ``--tokenizer-dir``), or it is unreadable or malformed (see :func:`read_lock`).
    """
    lock = read_lock(repo)
    path = Path(repo) / LOCK_NAME
    if lock is None:
        raise RenderError(
            "no lock file: the repository was not rendered by repo-builder",
            path=path,
            hint="render it with `repo-builder render`, or point --repo at a rendered repository",
        )

    infos = []
    for llm in lock.llms:
        values = llm.resolved
        engine_dir = str(llm.engine.get("dir") or "").rstrip("/\\")
        name = llm.name or (Path(engine_dir).name if engine_dir else "")
        tok_dir = llm.tokenizer.get("dir") or values.get("tokenizer_dir")
        infos.append(
            ServingInfo(
                model_name=name or Path(repo).resolve().name,
                tokenizer_dir=Path(tok_dir) if tok_dir else None,
                profile=str(lock.profile or ""),
                values=values,
                path=path,
                llm=llm.name,
                models=dict(llm.models),
            )
        )
    if not infos:
        raise RenderError("the lock file lists no LLM", path=path, key="llms", hint="re-render the repository")
    return infos
