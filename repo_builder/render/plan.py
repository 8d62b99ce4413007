"""Planning a render in memory: inspect, resolve, render every file (writes nothing).

Two steps, so that the engine copy can start before the slow part (``repo_builder.render.write``):

* :func:`prepare_render`: everything that refuses bad input before a byte is written and costs little: the
  placement mode, the output (``check_output``), the serve path, the ``--values``/``--set`` values, the
  engine's ``config.json`` and rank files, and where the engine files go (:class:`PreparedRender`);
* :meth:`PreparedRender.finish`: tokenizer inspection, resolve (the rule table), the templates, the vendored
  files and the lock file (:class:`RenderPlan`). This is render's fixed ~0.25 s (docs/performance.md 4.1).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..engine import EngineInfo
from ..errors import ParameterError, RenderError
from ..placement import PlacementPlan, check_placement_mode, plan_placement
from ..profile.contract import MODEL_NAMES, ProfileContract, load_contract
from ..repository.lockfile import LOCK_NAME, build_lock, dumps
from ..repository.pbtxt import backend_json, parse_model_config
from .layouts import check_layout_values
from .options import RenderOptions
from .output import check_output
from .templates import render_configs
from .vendor import (
    ENGINE_MODEL_KINDS,
    PYTHON_MODEL_KINDS,
    RUNTIME_FOLDER,
    python_model_source,
    runtime_files,
    wiring_data,
)


@dataclass
class RenderPlan:
    """Everything :func:`repo_builder.render.render_repository` will write.

    Attributes:
        output: where the repository goes (absolute).
        serve_root: the path the server will see the repository at (``output`` unless ``serve_path``).
        files: {repository-relative POSIX path: bytes} of every file except engine files (lock included).
        empty_dirs: folders created empty (``ensemble/1``).
        placement: the engine placement.
    """

    output: Path
    serve_root: Path
    profile: str
    engine: Any
    tokenizer: Any
    resolution: Any
    placement: PlacementPlan
    files: dict[str, bytes]
    empty_dirs: list[str]
    lock: dict[str, Any]
    warnings: list[str] = field(default_factory=list)


def _load_values_file(values_file: str | Path) -> dict[str, Any]:
    """The ``--values`` YAML mapping as {parameter: value}.

    Raises:
        ParameterError: unreadable, not YAML, or not a mapping (names the file).
    """
    import yaml

    from ..profile.yamlio import safe_load

    path = Path(values_file)
    try:
        data = safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ParameterError(f"cannot read the values file: {exc.strerror or exc}", path=path) from exc
    except yaml.YAMLError as exc:
        raise ParameterError(f"not valid YAML: {exc}", path=path) from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ParameterError("the values file must be a YAML mapping of parameter: value", path=path)
    return {str(k): v for k, v in data.items()}


#: The reserved key of a values file written by ``repo-builder adopt`` (:mod:`repo_builder.adopt`): where the
#: values came from. Not a parameter; render records it in the lock file as ``values_source.adopted_from``.
ADOPTED_FROM_KEY = "adopted_from"


def _values_source(values_file: str | Path, adopted_from: Any) -> dict[str, Any]:
    """The lock file's ``values_source`` block: the values file (absolute path) and, for a file written by
    ``repo-builder adopt``, its ``adopted_from`` mapping (the repository, profile and NVIDIA tag adopted).

    Raises:
        ParameterError: ``adopted_from`` is not a mapping (names the file and key).
    """
    source: dict[str, Any] = {"file": str(Path(values_file).expanduser().absolute())}
    if adopted_from is not None:
        if not isinstance(adopted_from, dict):
            raise ParameterError(
                "adopted_from must be the mapping `repo-builder adopt` writes (repository, profile, ...)",
                key=ADOPTED_FROM_KEY,
                path=values_file,
            )
        source["adopted_from"] = {str(k): v for k, v in adopted_from.items() if k != "transient_file"}
        if adopted_from.get("transient_file"):  # `repo-builder upgrade`'s own file, removed after the render
            del source["file"]
    return source


@dataclass
class PreparedRender:
    """What :func:`prepare_render` checked and found; :meth:`finish` turns it into the :class:`RenderPlan`.

    Attributes:
        checked: the ``--values`` and ``--set`` values, typed by the schema.
        placement: where the engine files go (already final: the copy may start from it).
        names: {model role: model folder name} (``<model_prefix><role>``).
    """

    options: RenderOptions
    contract: ProfileContract
    output: Path
    engine_path: Path
    tokenizer_path: Path
    serve_root: Path
    checked: dict[str, Any]
    engine: EngineInfo
    placement: PlacementPlan
    names: dict[str, str]
    model_prefix: str = ""
    values_source: dict[str, Any] | None = None

    def finish(self) -> RenderPlan:
        """Inspect the tokenizer, resolve every value and render every file in memory.

        Raises:
            TokenizerError, ParameterError, EngineError (resolve's cross-checks), TemplateError, RenderError.
        """
        from ..tokenizer import inspect_tokenizer
        from ..values.resolve import resolve

        opts, engine, names, placement = self.options, self.engine, self.names, self.placement
        profile, kind = opts.profile, engine.kind
        tokenizer = inspect_tokenizer(
            self.tokenizer_path, trust_remote_code=bool(self.checked.get("trust_remote_code"))
        )
        engine_dir_value = placement.engine_dir_in(self.serve_root)
        resolution = resolve(
            profile,
            engine,
            tokenizer,
            self.checked,
            streaming=opts.streaming,
            engine_dir_in_repo=str(engine_dir_value),
            prechecked=True,
        )
        values = resolution.as_template_vars()
        render_contract = self.contract
        if self.model_prefix:
            values["tensorrt_llm_model_name"] = names["tensorrt_llm"]
            render_contract = _prefixed_contract(self.contract, names)

        configs = render_configs(profile, values, engine_kind=kind, contract=render_contract, names=names)
        # each text is parsed once per process (repo_builder.pbtxt caches): these calls cost a copy each
        parsed = {m: parse_model_config(text, path=f"{names[m]}/config.pbtxt") for m, text in configs.items()}
        files = self._model_files(configs, parsed, values, render_contract)
        targets = {f.target for f in placement.files}
        for rel in files:
            if rel in targets:
                raise RenderError(f"engine file would overwrite a rendered file: {rel}", path=self.engine_path)
        empty_dirs = [
            f"{names[m]}/1"
            for m in MODEL_NAMES
            if not any(r.startswith(f"{names[m]}/1/") for r in files)
            and not any(t.startswith(f"{names[m]}/1/") for t in targets)
        ]
        lock = self._lock(resolution, files, parsed, str(engine_dir_value))
        files[LOCK_NAME] = dumps(lock)
        return RenderPlan(
            output=self.output,
            serve_root=self.serve_root,
            profile=profile,
            engine=engine,
            tokenizer=tokenizer,
            resolution=resolution,
            placement=placement,
            files=files,
            empty_dirs=empty_dirs,
            lock=lock,
            warnings=list(getattr(resolution, "warnings", []) or []),
        )

    def _model_files(
        self,
        configs: Mapping[str, str],
        parsed: Mapping[str, Any],
        values: Mapping[str, Any],
        render_contract: ProfileContract,
    ) -> dict[str, bytes]:
        """{repository-relative path: bytes} of every model's files but the engine's: the ``configs``
        ({model role: config.pbtxt text}, ``parsed`` the same parsed), the Python models' ``model.py`` and
        vendored runtime, the BLS's ``wiring.json`` (from ``render_contract`` and the template ``values``) and
        its copy of postprocessing's config."""
        names = self.names
        files: dict[str, bytes] = {f"{names[m]}/config.pbtxt": text.encode("utf-8") for m, text in configs.items()}
        python_models = dict(PYTHON_MODEL_KINDS)
        if self.engine.kind in ENGINE_MODEL_KINDS:
            python_models["tensorrt_llm"] = ENGINE_MODEL_KINDS[self.engine.kind]
        runtime = runtime_files()
        for model, src_kind in python_models.items():
            files[f"{names[model]}/1/model.py"] = python_model_source(src_kind)
            for rel, data in runtime.items():
                files[f"{names[model]}/1/{RUNTIME_FOLDER}/{rel}"] = data
        wiring = wiring_data(render_contract, values)
        for step in wiring["steps"]:  # the BLS finds the engine step by its role and calls tensorrt_llm_model_name
            if step["model"] == names["tensorrt_llm"]:
                step["model"] = "tensorrt_llm"
        files[f"{names['tensorrt_llm_bls']}/1/wiring.json"] = (json.dumps(wiring, indent=2) + "\n").encode()
        # The BLS runs postprocessing's code in-process (bls_local_postprocessing) with postprocessing's own config.
        post_config = backend_json(parsed["postprocessing"])
        files[f"{names['tensorrt_llm_bls']}/1/postprocessing_config.json"] = (
            json.dumps(post_config, indent=2, sort_keys=True) + "\n"
        ).encode()
        return files

    def _lock(
        self, resolution: Any, files: dict[str, bytes], parsed: Mapping[str, Any], engine_dir_value: str
    ) -> dict[str, Any]:
        """The lock file's data for the rendered ``files`` (``parsed``: the configs, for the Python instance
        counts), the resolved values and the engine as the server sees it (``engine_dir_value``)."""
        from .. import __version__
        from ..engine import engine_fingerprint

        opts, engine, names, placement = self.options, self.engine, self.names, self.placement
        kind = engine.kind
        lock = build_lock(
            version=__version__,
            profile=opts.profile,
            engine={
                "dir": str(self.engine_path),
                "kind": kind,
                "placement": opts.engine_mode,
                "fingerprint": engine_fingerprint(engine),
                "engine_dir": engine_dir_value,
            },
            tokenizer_dir=str(self.tokenizer_path),
            values={name: (rv.value, rv.origin) for name, rv in resolution.values.items()},
            world_size=int(getattr(resolution, "world_size", 1) or 1),
            tensorrt_llm_model_names=[names["tensorrt_llm"]],
            files=files,
            serve_path=opts.serve_path,
            engine_files=[f.target for f in placement.files],
            tp_size=engine.tp_size if kind == "trtllm" else 1,
            pp_size=engine.pp_size if kind == "trtllm" else 1,
            python_instances={names[m]: n for m, n in _python_instances(parsed).items()},
        )
        if self.values_source is not None:
            lock["values_source"] = self.values_source
        return lock


def serve_root_of(opts: RenderOptions, out: Path) -> Path:
    """The path the server will see the repository at: ``--serve-path``, else ``out``.

    Raises:
        RenderError: ``--serve-path`` is not absolute.
    """
    serve_root = Path(opts.serve_path) if opts.serve_path is not None else out
    if not serve_root.is_absolute():
        raise RenderError(
            "the serve path must be absolute (the repository's path inside the server)",
            key="--serve-path",
            path=serve_root,
        )
    return serve_root


def user_values(opts: RenderOptions) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """The ``--values`` file's and ``--set`` values typed by the schema (``--set`` wins), and the lock file's
    ``values_source`` block (None without ``--values``).

    Raises:
        RenderError: the values file cannot be read; ParameterError: a value the schema refuses (naming the key).
    """
    from ..profile.schema import validate_user_values

    checked: dict[str, Any] = {}
    values_source: dict[str, Any] | None = None
    if opts.values_file is not None:
        file_values = _load_values_file(opts.values_file)
        values_source = _values_source(opts.values_file, file_values.pop(ADOPTED_FROM_KEY, None))
        checked.update(validate_user_values(opts.profile, file_values, source=str(opts.values_file)))
    if opts.user_values:
        checked.update(validate_user_values(opts.profile, dict(opts.user_values), source="--set"))
    return checked, values_source


def prepare_render(
    engine_dir: str | Path,
    tokenizer_dir: str | Path,
    output: str | Path,
    options: RenderOptions,
    *,
    model_prefix: str = "",
) -> PreparedRender:
    """Check the inputs that need no tokenizer and no template, and plan the engine placement (writes nothing).

    ``model_prefix`` (one LLM of several in a repository, :func:`repo_builder.render.render_multi_repository`)
    prefixes every model folder and name (``<prefix>preprocessing``, ...), the ensemble's steps, the engine's
    folder and the BLS's ``tensorrt_llm_model_name``.

    Raises:
        RenderError (unknown ``--engine-mode``, an output that may not be written, a relative serve path, a
        missing engine file), ParameterError (``--values``/``--set``), EngineError, TokenizerError (not a
        tokenizer directory).
    """
    from ..engine import check_rank_files, inspect_engine
    from ..tokenizer import check_tokenizer_dir

    opts = options
    check_placement_mode(opts.engine_mode, key="--engine-mode")
    contract = load_contract(opts.profile)
    out = Path(output).expanduser().absolute()
    engine_path = Path(engine_dir).expanduser().resolve()
    tokenizer_path = check_tokenizer_dir(str(tokenizer_dir))  # the raw text, so a hub id is named as one (B22)
    check_output(
        out,
        engine_path,
        tokenizer_path,
        force=opts.force,
        dry_run=opts.dry_run,
        placement=opts.engine_mode,
        delete_unlisted=opts.delete_unlisted,
    )
    serve_root = serve_root_of(opts, out)
    checked, values_source = user_values(opts)

    check_layout_values(opts.layout, opts.profile, checked)
    engine = inspect_engine(engine_path)
    check_rank_files(engine)
    placement = plan_placement(engine.kind, engine_path, opts.engine_mode)
    if model_prefix:
        placement = _prefixed_placement(placement, model_prefix)
    return PreparedRender(
        options=opts,
        contract=contract,
        output=out,
        engine_path=engine_path,
        tokenizer_path=tokenizer_path,
        serve_root=serve_root,
        checked=checked,
        engine=engine,
        placement=placement,
        names={m: f"{model_prefix}{m}" for m in MODEL_NAMES},
        model_prefix=model_prefix,
        values_source=values_source,
    )


def plan_render(
    engine_dir: str | Path,
    tokenizer_dir: str | Path,
    output: str | Path,
    options: RenderOptions | None = None,
    *,
    model_prefix: str = "",
    **fields: Any,
) -> RenderPlan:
    """Inspect, resolve and render everything in memory (writes nothing): :func:`prepare_render` then
    :meth:`PreparedRender.finish`. ``options`` and ``fields`` as in :func:`repo_builder.render.render_repository`.
    """
    opts = RenderOptions.of(options, fields)
    return prepare_render(engine_dir, tokenizer_dir, output, opts, model_prefix=model_prefix).finish()


def _prefixed_placement(placement: PlacementPlan, prefix: str) -> PlacementPlan:
    """``placement`` with the engine folder (``tensorrt_llm/1...``) moved to ``<prefix>tensorrt_llm/1...``."""
    if placement.engine_subdir is None:
        return placement
    return PlacementPlan(
        placement.mode,
        placement.source_dir,
        prefix + placement.engine_subdir,
        [type(f)(f.source, prefix + f.target, f.size) for f in placement.files],
    )


def _prefixed_contract(contract: ProfileContract, names: Mapping[str, str]) -> ProfileContract:
    """``contract`` with the ensemble's step models renamed by ``names`` (role -> model name)."""
    ensemble = contract.models["ensemble"]
    steps = [step.model_copy(update={"model": names.get(step.model, step.model)}) for step in ensemble.steps]
    models = dict(contract.models)
    models["ensemble"] = ensemble.model_copy(update={"steps": steps})
    return contract.model_copy(update={"models": models})


def _python_instances(parsed: Mapping[str, Any]) -> dict[str, int]:
    """{model: Python-backend stub processes} of the rendered ``backend: "python"`` configs (for the lock file)."""
    from ..repository.pbtxt import python_instances

    return {model: python_instances(cfg) for model, cfg in parsed.items() if cfg.backend == "python"}
