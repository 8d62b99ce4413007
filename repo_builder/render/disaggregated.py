"""Layout ``disaggregated`` (``render --layout disaggregated``): the context and generation phases of every
request on two copies of the engine model, joined by ``disaggregated_serving_bls``.

What NVIDIA's layout holds (triton-inference-server/tensorrtllm_backend v0.19.0
``all_models/disaggregated_serving/README.md``): ``preprocessing``, ``postprocessing``, ``context`` and
``generation`` (copies of ``inflight_batcher_llm/tensorrt_llm``; participant ids "1" and "2", GPU ids "0" and
"1"), ``disaggregated_serving_bls``, and the ensemble with its ``tensorrt_llm`` step renamed to the BLS; no
``tensorrt_llm_bls``. Launch: ``--world_size 3 --tensorrt_llm_model_name context,generation --multi-model
--disable-spawn-processes``: "World size should be equal to tp*pp of context model + tp*pp of generation model
+ 1" (the orchestrator, rank 0).

Here the plain repository is planned first (:func:`~repo_builder.render.plan.prepare_render`, one engine for
both phases, placed once under ``context/1``) and then reshaped: the tensorrt_llm template rendered twice
(``context``, ``generation``: the same engine dir, their own ``participant_ids``/``gpu_device_ids``), the BLS
from its own template with the tensorrt_llm tensors minus ``context_phase_params``, the ensemble re-rendered
with its engine step naming the BLS. For an engine of N = tp x pp ranks the default ids are context
participants 1..N on GPUs 0..N-1 and generation participants N+1..2N on GPUs N..2N-1 (world size 2N + 1);
:func:`repo_builder.values.rules.disaggregated_findings` checks given ones. For repo-builder's Python engines
(HF checkpoint, synthetic) the ids are not rendered and one tritonserver process serves both copies.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..errors import ParameterError, RenderError
from ..placement import PlacementPlan
from ..profile.contract import ProfileContract
from ..repository.lockfile import LOCK_NAME, build_lock, dumps
from ..repository.pbtxt import config_model, parse_model_config, python_instances
from ..values.rules import disaggregated_findings
from .options import RenderOptions
from .plan import PreparedRender, RenderPlan, prepare_render
from .templates import (
    _param_formatters,
    _tidy,
    make_environment,
    model_template_vars,
    render_configs,
    template_path,
)
from .vendor import RUNTIME_FOLDER, python_model_source, runtime_files
from .write import RenderResult, write_plan, write_repository

BLS = "disaggregated_serving_bls"
#: What a separate generation engine (``--generation-engine-dir``) must share with the context engine:
#: (EngineInfo field, the key named in the error, why). The context phase's KV cache and first token are the
#: generation phase's input (NVIDIA/TensorRT-LLM ``docs/source/advanced/disaggregated-service.md``: the KV cache
#: moves between the two executors, so its layers, heads, head size and dtype must match); one BLS and one ensemble
#: declare the outputs of both (logits dtype, beam width).
GENERATION_MUST_AGREE = (
    ("kind", "--generation-engine-dir", "both phases run on one backend"),
    ("architecture", "architecture", "the generation phase resumes the context phase's sequence"),
    ("vocab_size", "vocab_size", "the generation phase continues the context phase's token ids"),
    ("dtype", "dtype", "the KV cache moves between the two engines"),
    ("kv_cache_bytes_per_value", "kv_cache_quant_algo", "the KV cache moves between the two engines"),
    ("num_layers", "num_hidden_layers", "the KV cache moves between the two engines"),
    ("num_kv_heads", "num_key_value_heads", "the KV cache moves between the two engines"),
    ("head_size", "head_size", "the KV cache moves between the two engines"),
    ("hidden_size", "hidden_size", "the KV cache moves between the two engines"),
    ("tokens_per_block", "tokens_per_block", "KV-cache blocks move whole between the two engines"),
    ("logits_dtype", "logits_dtype", "disaggregated_serving_bls declares one dtype for both phases' logits"),
    ("max_beam_width", "max_beam_width", "disaggregated_serving_bls and the ensemble declare one beam width"),
)


def check_generation_engine(context: Any, generation: Any) -> None:
    """Refuse a generation engine that cannot resume the context engine's requests.

    Args:
        context, generation: the two engines' :class:`~repo_builder.engine.EngineInfo`.

    Raises:
        EngineError: a field of :data:`GENERATION_MUST_AGREE` differs (names its key and the generation engine's
            ``config.json``), its ``max_seq_len`` is shorter than the context engine's, or a tokenizer file both
            directories hold differs (names the file).
    """
    from ..errors import EngineError
    from ..runtime.tokenizer_files import TOKENIZER_FILES

    config = generation.config_file
    for attr, key, why in GENERATION_MUST_AGREE:
        ctx, gen = getattr(context, attr), getattr(generation, attr)
        if ctx is not None and gen is not None and ctx != gen:
            raise EngineError(
                f"the generation engine has {key} {gen}, the context engine {ctx}: {why}",
                key=key,
                path=config,
                hint="build both engines from one checkpoint with the same dtype, KV-cache and beam settings",
            )
    if generation.max_seq_len < context.max_seq_len:
        raise EngineError(
            f"the generation engine holds {generation.max_seq_len} tokens (max_seq_len), the context engine "
            f"{context.max_seq_len}: requests the context phase takes would fail in the generation phase",
            key="max_seq_len",
            path=config,
            hint="build the generation engine with --max_seq_len at least the context engine's",
        )
    for name in TOKENIZER_FILES:
        a, b = Path(context.dir) / name, Path(generation.dir) / name
        if a.is_file() and b.is_file() and a.read_bytes() != b.read_bytes():
            raise EngineError(
                f"{name} differs from the context engine's ({a}): both phases detokenize with one tokenizer",
                key=name,
                path=b,
            )


def _default_ids(world: int, generation_world: int) -> dict[str, list[list[int]]]:
    return {
        "context_participant_ids": [list(range(1, world + 1))],
        "generation_participant_ids": [list(range(world + 1, world + generation_world + 1))],
        "context_gpu_device_ids": [list(range(world))],
        "generation_gpu_device_ids": [list(range(world, world + generation_world))],
    }


def world_size(values: Mapping[str, Any]) -> int:
    """Every participant of both phases + 1 (the orchestrator): the ``--world_size`` of NVIDIA's launch."""
    ranks = {
        r for key in ("context_participant_ids", "generation_participant_ids") for g in values.get(key) or [] for r in g
    }
    return len(ranks) + 1


def _moved_placement(placement: PlacementPlan, model: str) -> PlacementPlan:
    """``placement`` with the engine folder ``tensorrt_llm/1...`` moved to ``<model>/1...``."""
    if placement.engine_subdir is None:
        return placement

    def moved(path: str) -> str:
        head, _, rest = path.partition("/")
        return f"{model}/{rest}" if head == "tensorrt_llm" else path

    return PlacementPlan(
        placement.mode,
        placement.source_dir,
        moved(placement.engine_subdir),
        [type(f)(f.source, moved(f.target), f.size) for f in placement.files],
    )


def _bls_contract(contract: ProfileContract) -> Any:
    """The tensorrt_llm contract entry without ``context_phase_params`` (the BLS's inputs and outputs)."""
    engine = contract.models["tensorrt_llm"]
    return engine.model_copy(
        update={
            "inputs": [t for t in engine.inputs if t.name != "context_phase_params"],
            "outputs": [t for t in engine.outputs if t.name != "context_phase_params"],
        }
    )


def _routed_contract(contract: ProfileContract) -> ProfileContract:
    """``contract`` with the ensemble's tensorrt_llm step naming the BLS."""
    ensemble = contract.models["ensemble"]
    steps = [s.model_copy(update={"model": BLS}) if s.model == "tensorrt_llm" else s for s in ensemble.steps]
    models = dict(contract.models)
    models["ensemble"] = ensemble.model_copy(update={"steps": steps})
    return contract.model_copy(update={"models": models})


def _render_bls(profile: str, values: Mapping[str, Any], engine_kind: str, contract: ProfileContract) -> str:
    """The BLS's config.pbtxt text (parsed once, so a template bug fails here)."""
    import jinja2

    from ..errors import TemplateError

    path = template_path(profile, BLS)
    env = make_environment(_param_formatters(profile))
    variables = model_template_vars(profile, BLS, values, engine_kind)
    variables.update(contract=_bls_contract(contract), model_name=BLS, engine_kind=engine_kind)
    try:
        text = _tidy(env.get_template(f"{profile}/{BLS}/config.pbtxt.j2").render(**variables))
    except jinja2.UndefinedError as exc:
        raise TemplateError(f"template uses an undefined variable: {exc.message}", path=path) from exc
    parse_model_config(text, path=f"{BLS}/config.pbtxt (rendered from {path})")
    return text


class _Prepared:
    """The plain plan's preparation plus what this layout needs to reshape it."""

    def __init__(self, prepared: PreparedRender, generation: Any = None) -> None:
        self.prepared = prepared
        #: the generation phase's own engine (``--generation-engine-dir``), None when the context engine serves both
        self.generation = generation

    def finish(self) -> RenderPlan:
        """Finish the plain plan, then reshape it (see the module docstring).

        Raises:
            ParameterError: a name or id of :func:`disaggregated_findings` (all of them, one per line).
        """
        prep = self.prepared
        plain = prep.finish()
        engine = plain.engine
        resolution = plain.resolution
        is_trt = engine.kind == "trtllm"
        world = engine.world_size if is_trt else 1
        gen_engine = self.generation
        gen_world = gen_engine.world_size if is_trt and gen_engine is not None else world
        values = _checked_values(resolution, is_trt, world, gen_world)
        ctx, gen = str(values["context_model_name"]), str(values["generation_model_name"])
        files = self._model_files(plain, values, ctx, gen)
        placement = prep.placement
        targets = {f.target for f in placement.files}
        clash = sorted(set(files) & targets)
        if clash:
            raise RenderError(f"engine file would overwrite a rendered file: {clash[0]}", path=prep.engine_path)
        lock = self._lock(plain, values, files, ctx, gen, world=world, gen_world=gen_world)
        files[LOCK_NAME] = dumps(lock)
        return RenderPlan(
            output=plain.output,
            serve_root=plain.serve_root,
            profile=plain.profile,
            engine=engine,
            tokenizer=plain.tokenizer,
            resolution=resolution,
            placement=placement,
            files=files,
            empty_dirs=[
                f"{m}/1"
                for m in (ctx, gen, "ensemble")
                if not any(r.startswith(f"{m}/1/") for r in files) and not any(t.startswith(f"{m}/1/") for t in targets)
            ],
            lock=lock,
            warnings=plain.warnings,
        )

    def _model_files(self, plain: RenderPlan, values: Mapping[str, Any], ctx: str, gen: str) -> dict[str, bytes]:
        """The plain plan's files reshaped (lock file left out): preprocessing and postprocessing as planned, the
        engine model rendered as ``ctx`` and ``gen`` (each with its phase's ids; ``gen`` pointing at the
        generation engine where one was given), the ensemble routed through the BLS, and the BLS itself.

        Raises:
            TemplateError: a template failed to render.
        """
        engine, profile, contract, gen_engine = plain.engine, plain.profile, self.prepared.contract, self.generation
        files = {
            rel: data
            for rel, data in plain.files.items()
            if rel != LOCK_NAME and rel.partition("/")[0] not in ("tensorrt_llm", "tensorrt_llm_bls", "ensemble")
        }
        engine_files = dict(
            (rel, data) for rel, data in plain.files.items() if rel.startswith("tensorrt_llm/1/") and rel != LOCK_NAME
        )
        for phase, name in (("context", ctx), ("generation", gen)):
            phase_values = dict(values)
            phase_values["participant_ids"] = values.get(f"{phase}_participant_ids")
            phase_values["gpu_device_ids"] = values.get(f"{phase}_gpu_device_ids")
            if phase == "generation" and gen_engine is not None:  # its own engine, where it is (nothing copied)
                phase_values["engine_dir"] = str(gen_engine.dir)
                if engine.kind != "trtllm":  # the Python engines' limits come from their checkpoint
                    phase_values["max_input_len"] = gen_engine.max_input_len
                    phase_values["max_seq_len"] = gen_engine.max_seq_len
            text = render_configs(
                profile, phase_values, engine_kind=engine.kind, contract=contract, names={"tensorrt_llm": name}
            )["tensorrt_llm"]
            files[f"{name}/config.pbtxt"] = text.encode()
            for rel, data in engine_files.items():  # the Python engine's model.py and vendored runtime
                files[f"{name}/{rel.partition('/')[2]}"] = data
        files["ensemble/config.pbtxt"] = render_configs(
            profile, values, engine_kind=engine.kind, contract=_routed_contract(contract)
        )["ensemble"].encode()
        bls_text = _render_bls(profile, values, engine.kind, contract)
        files[f"{BLS}/config.pbtxt"] = bls_text.encode()
        files[f"{BLS}/1/model.py"] = python_model_source(BLS)
        for rel, data in runtime_files().items():
            files[f"{BLS}/1/{RUNTIME_FOLDER}/{rel}"] = data
        return files

    def _lock(
        self,
        plain: RenderPlan,
        values: Mapping[str, Any],
        files: dict[str, bytes],
        ctx: str,
        gen: str,
        *,
        world: int,
        gen_world: int,
    ) -> dict[str, Any]:
        """The lock file's data: the plain plan's with both engine models (``ctx``, ``gen``), the orchestrator's
        world size (TensorRT-LLM engines; ``world``/``gen_world``: the context/generation engine's ranks), the
        ``layout`` block and the generation engine where one was given."""
        from .. import __version__
        from ..engine import engine_fingerprint

        prep, engine, gen_engine = self.prepared, plain.engine, self.generation
        opts, placement = prep.options, prep.placement
        is_trt = engine.kind == "trtllm"
        lock = build_lock(
            version=__version__,
            profile=plain.profile,
            engine={
                "dir": str(prep.engine_path),
                "kind": engine.kind,
                "placement": opts.engine_mode,
                "fingerprint": engine_fingerprint(engine),
                "engine_dir": str(placement.engine_dir_in(prep.serve_root)),
            },
            tokenizer_dir=str(prep.tokenizer_path),
            values={name: (rv.value, rv.origin) for name, rv in plain.resolution.values.items()},
            world_size=world,
            tensorrt_llm_model_names=[ctx, gen],
            files=files,
            serve_path=opts.serve_path,
            engine_files=[f.target for f in placement.files],
            tp_size=engine.tp_size if is_trt else 1,
            pp_size=engine.pp_size if is_trt else 1,
            python_instances=_python_instances(files),
        )
        if is_trt:  # NVIDIA's launch: --multi-model --disable-spawn-processes --world_size <world_size>
            lock["launch"]["orchestrator_world_size"] = world_size(values)
        lock["layout"] = {
            "name": "disaggregated",
            "models": {"context": ctx, "generation": gen, "bls": BLS},
            "orchestrator": is_trt,
        }
        if gen_engine is not None:  # the context engine is lock["engine"]; the generation one is referenced
            lock["layout"]["generation_engine"] = {
                "dir": str(gen_engine.dir),
                "kind": gen_engine.kind,
                "placement": "reference",
                "fingerprint": engine_fingerprint(gen_engine),
                "engine_dir": str(gen_engine.dir),
                "world_size": gen_world,
            }
        if prep.values_source is not None:
            lock["values_source"] = prep.values_source
        return lock


def _checked_values(resolution: Any, is_trt: bool, world: int, gen_world: int) -> dict[str, Any]:
    """The template values of ``resolution`` with the default ids of a TensorRT-LLM engine filled in where
    unset (``world``/``gen_world``: the context/generation engine's ranks; ``resolution.values`` updated).

    Raises:
        ParameterError: a name or id of :func:`disaggregated_findings` (all of them, one per line).
    """
    from ..values.resolve import ResolvedValue

    if is_trt:
        for key, ids in _default_ids(world, gen_world).items():
            if resolution.values[key].value is None:
                resolution.values[key] = ResolvedValue(ids, "engine")
    values: dict[str, Any] = resolution.as_template_vars()
    problems = [f for f in disaggregated_findings(world, values, generation_world=gen_world) if f.severity == "error"]
    if problems:
        raise ParameterError(
            f"{len(problems)} problem(s) with layout disaggregated:\n"
            + "\n".join(f"{f.key}: {f.message}" for f in problems),
            key=problems[0].key,
        )
    return values


def _python_instances(files: Mapping[str, bytes]) -> dict[str, int]:
    """{model: Python-backend stub processes} of the ``backend: "python"`` configs among ``files``."""
    instances = {}
    for rel, data in files.items():
        model = config_model(rel)
        if model is not None:
            cfg = parse_model_config(data.decode(), path=rel)
            if cfg.backend == "python":
                instances[model] = python_instances(cfg)
    return instances


def render_disaggregated_repository(
    engine_dir: str | Path,
    tokenizer_dir: str | Path,
    output: str | Path,
    options: RenderOptions,
) -> RenderResult:
    """Render the disaggregated layout for one engine (both phases; or ``options.generation_engine_dir`` for the
    generation phase, checked by :func:`check_generation_engine` and referenced where it is) and a tokenizer.

    Raises:
        whatever :func:`repo_builder.render.render_repository` raises; RenderError (profile, placement);
        ParameterError naming the key of a bad model name or id.
    """
    generation = None
    if options.generation_engine_dir is not None:
        from ..engine import check_rank_files, inspect_engine

        generation = inspect_engine(Path(options.generation_engine_dir).expanduser().resolve())
        check_rank_files(generation)
    prepared = prepare_render(engine_dir, tokenizer_dir, output, options)
    if generation is not None:
        check_generation_engine(prepared.engine, generation)
    names = {
        key: prepared.checked.get(key, default)
        for key, default in (("context_model_name", "context"), ("generation_model_name", "generation"))
    }
    bad = disaggregated_findings(1, names)  # the names decide where the engine goes: check them first
    if bad:
        raise ParameterError(bad[0].message, key=bad[0].key)
    prepared.placement = _moved_placement(prepared.placement, str(names["context_model_name"]))
    job = _Prepared(prepared, generation)
    if options.dry_run:
        return write_plan(job.finish(), dry_run=True)
    return write_repository(prepared.output, prepared.placement, job.finish, progress=options.progress)
