"""Rendering an llmapi profile (``--profile llmapi-1.2``): one Python-backend ``tensorrt_llm`` model over the
LLM API for a Hugging Face checkpoint (NVIDIA/TensorRT-LLM v1.2.1 ``triton_backend/all_models/llmapi/``)::

    REPO/
      repo-builder.lock.json
      tensorrt_llm/config.pbtxt          NVIDIA's llmapi inputs/outputs (contract.yaml), max_batch_size and
                                         decoupled equal to model.yaml's triton_config
      tensorrt_llm/1/model.py            ours (model_templates/python_models/llmapi/model.py)
      tensorrt_llm/1/model.yaml          LLM() arguments + triton_config, from the schema's typed values
      tensorrt_llm/1/repo_builder_runtime/   the vendored runtime (llmapi_model.py, llmapi_standin.py, ...)
      tensorrt_llm/1/engine/             the checkpoint (copy | hardlink | symlink; nothing for reference)
      ensemble/, tensorrt_llm_bls/       the text front doors (parameter text_front_doors, on by default):
                                         Python models with the engine ensemble's text inputs/outputs over
                                         tensorrt_llm (model_templates/python_models/llmapi_front/model.py)

The same two steps as the engine profiles (:mod:`.plan`): :func:`prepare_llmapi_render` checks everything
cheap and plans the checkpoint placement; :meth:`PreparedLLMAPIRender.finish` inspects the tokenizer,
resolves (:func:`repo_builder.values.llmapi.resolve_llmapi`) and renders every file in memory. The result is
a :class:`.plan.RenderPlan`, written atomically by :func:`.write.write_repository`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..engine import EngineInfo
from ..engine.checkpoint import CheckpointFacts
from ..errors import RenderError
from ..placement import PlacementPlan, check_placement_mode, plan_placement
from ..profile.contract import ProfileContract, load_contract
from ..repository.lockfile import LOCK_NAME, build_lock, dumps
from ..repository.pbtxt import parse_model_config
from ..values.llmapi import LLMAPI_MODEL
from .options import RenderOptions
from .output import check_output
from .plan import RenderPlan, serve_root_of, user_values
from .templates import _tidy, make_environment, template_path
from .vendor import RUNTIME_FOLDER, python_model_source, runtime_files

#: The Python source kind of an llmapi repository's model (model_templates/python_models/<kind>/).
LLMAPI_SOURCE_KIND = "llmapi"
MODEL_YAML = "model.yaml"
#: The text front doors (parameter ``text_front_doors``), their Python source kind and Triton max_batch_size:
#: 1, so clients send the batch dimension NVIDIA's ensemble clients send, one request per call.
FRONT_DOORS = ("ensemble", "tensorrt_llm_bls")
FRONT_SOURCE_KIND = "llmapi_front"
FRONT_MAX_BATCH_SIZE = 1

_YAML_HEADER = """\
# Rendered by repo-builder (profile {profile}); edit the values, not this file: `repo-builder render`.
# Every key but triton_config is a tensorrt_llm.LLM() argument (TensorRT-LLM {version}); triton_config is read
# by the model. triton_config.max_batch_size and triton_config.decoupled equal config.pbtxt's max_batch_size and
# model_transaction_policy.decoupled (render writes both; the model refuses to load when they differ).
# max_batch_size / max_num_tokens / max_seq_len at the top are the LLM runtime's own limits.
"""


def model_yaml_text(profile: str, values: dict[str, Any], contract: ProfileContract) -> str:
    """``1/model.yaml``: the profile's ``tensorrt_llm`` parameters with a value, nested at their dots, in schema
    order, ``triton_config`` last. Unset (None) parameters are left out (the LLM API's defaults apply)."""
    import yaml

    from ..profile.schema import load_schema

    tree: dict[str, Any] = {}
    triton: dict[str, Any] = {}
    for name, param in load_schema().for_profile(profile).items():
        value = values.get(name)
        if value is None or LLMAPI_MODEL not in param.models:  # text_front_doors: a render choice, no LLM() key
            continue
        head, _, rest = name.partition(".")
        if head == "triton_config":
            triton[rest] = value
        elif rest:
            tree.setdefault(head, {})[rest] = value
        else:
            tree[head] = value
    tree["triton_config"] = triton
    body = yaml.safe_dump(tree, sort_keys=False, default_flow_style=False, allow_unicode=True)
    return _YAML_HEADER.format(profile=profile, version=contract.trtllm_version) + body


def _render_config(profile: str, template_model: str, model_name: str, **variables: Any) -> str:
    """``<model_name>/config.pbtxt`` from ``model_templates/<profile>/<template_model>/config.pbtxt.j2`` rendered
    with ``model_name`` and ``variables``, tidied and parsed with protobuf's text format.

    Raises:
        TemplateError: a missing template or one protobuf refuses (names it).
    """
    from ..errors import TemplateError

    path = template_path(profile, template_model)
    if not path.is_file():
        raise TemplateError("template missing", path=path)
    text = _tidy(
        make_environment()
        .get_template(f"{profile}/{template_model}/config.pbtxt.j2")
        .render(model_name=model_name, **variables)
    )
    parse_model_config(text, path=f"{model_name}/config.pbtxt (rendered from {path})")
    return text


def render_llmapi_config(profile: str, values: dict[str, Any], contract: ProfileContract, model_name: str) -> str:
    """``tensorrt_llm/config.pbtxt`` from ``model_templates/<profile>/tensorrt_llm/config.pbtxt.j2``.

    Raises:
        TemplateError: a missing template or one protobuf refuses (names it).
    """
    return _render_config(
        profile,
        LLMAPI_MODEL,
        model_name,
        contract=contract.models[LLMAPI_MODEL],
        triton_max_batch_size=values["triton_config.max_batch_size"],
        decoupled=bool(values["triton_config.decoupled"]),
    )


def front_door_files(
    profile: str, values: dict[str, Any], contract: ProfileContract, model_prefix: str = ""
) -> dict[str, bytes]:
    """{relative path: bytes} of the text front doors (:data:`FRONT_DOORS`, each named ``<model_prefix><door>``
    over ``<model_prefix>tensorrt_llm``), each with the vendored runtime; empty when ``text_front_doors`` is
    false."""
    if not values.get("text_front_doors"):
        return {}
    files: dict[str, bytes] = {}
    runtime = runtime_files()
    engine_model = f"{model_prefix}{LLMAPI_MODEL}"
    for door in FRONT_DOORS:  # Python models over engine_model, decoupled exactly when it is
        name = f"{model_prefix}{door}"
        files[f"{name}/config.pbtxt"] = _render_config(
            profile,
            door,
            name,
            contract=contract.models[door],
            front_max_batch_size=FRONT_MAX_BATCH_SIZE,
            decoupled=bool(values["triton_config.decoupled"]),
            tensorrt_llm_model_name=engine_model,
        ).encode()
        files[f"{name}/1/model.py"] = python_model_source(FRONT_SOURCE_KIND)
        for rel, data in runtime.items():
            files[f"{name}/1/{RUNTIME_FOLDER}/{rel}"] = data
    return files


@dataclass
class PreparedLLMAPIRender:
    """What :func:`prepare_llmapi_render` checked; :meth:`finish` turns it into the :class:`RenderPlan`."""

    options: RenderOptions
    contract: ProfileContract
    output: Path
    checkpoint_path: Path
    tokenizer_path: Path
    serve_root: Path
    checked: dict[str, Any]
    engine: EngineInfo
    checkpoint: CheckpointFacts
    placement: PlacementPlan
    values_source: dict[str, Any] | None = None
    #: ``<name>_`` for one LLM of several (``render --model NAME=...``): every model folder and name is prefixed.
    model_prefix: str = ""

    def finish(self) -> RenderPlan:
        """Inspect the tokenizer, resolve every value and render every file in memory.

        Raises:
            TokenizerError, ParameterError, EngineError (the checks against the checkpoint), TemplateError.
        """
        from ..tokenizer import inspect_tokenizer
        from ..values.llmapi import resolve_llmapi

        opts, profile = self.options, self.options.profile
        tokenizer = inspect_tokenizer(
            self.tokenizer_path, trust_remote_code=bool(self.checked.get("trust_remote_code"))
        )
        model_path = str(self.placement.engine_dir_in(self.serve_root))
        resolution = resolve_llmapi(
            profile, self.checkpoint, tokenizer, self.checked, model_path=model_path, streaming=opts.streaming
        )
        values = resolution.as_template_vars()
        engine_model = f"{self.model_prefix}{LLMAPI_MODEL}"
        files: dict[str, bytes] = {
            f"{engine_model}/config.pbtxt": render_llmapi_config(profile, values, self.contract, engine_model).encode(),
            f"{engine_model}/1/{MODEL_YAML}": model_yaml_text(profile, values, self.contract).encode(),
            f"{engine_model}/1/model.py": python_model_source(LLMAPI_SOURCE_KIND),
        }
        for rel, data in runtime_files().items():
            files[f"{engine_model}/1/{RUNTIME_FOLDER}/{rel}"] = data
        files.update(front_door_files(profile, values, self.contract, self.model_prefix))
        targets = {f.target for f in self.placement.files}
        for rel in files:
            if rel in targets:
                raise RenderError(
                    f"a checkpoint file would overwrite a rendered file: {rel}", path=self.checkpoint_path
                )
        lock = self._lock(resolution, values, tokenizer, files, model_path, engine_model)
        files[LOCK_NAME] = dumps(lock)
        return RenderPlan(
            output=self.output,
            serve_root=self.serve_root,
            profile=profile,
            engine=self.engine,
            tokenizer=tokenizer,
            resolution=resolution,
            placement=self.placement,
            files=files,
            empty_dirs=[],
            lock=lock,
            warnings=list(resolution.warnings),
        )

    def _lock(
        self,
        resolution: Any,
        values: dict[str, Any],
        tokenizer: Any,
        files: dict[str, bytes],
        model_path: str,
        engine_model: str,
    ) -> dict[str, Any]:
        """The lock file's data for the rendered ``files``: the checkpoint (served at ``model_path`` by the
        model ``engine_model``), its tp x pp from the template ``values``, the resolved values, the tokenizer's
        special ids and the front doors' instance counts."""
        from .. import __version__
        from ..engine import engine_fingerprint

        opts = self.options
        tp = int(values["tensor_parallel_size"] or 1)
        pp = int(values["pipeline_parallel_size"] or 1)
        lock = build_lock(
            version=__version__,
            profile=opts.profile,
            engine={
                "dir": str(self.checkpoint_path),
                "kind": "hf",
                "placement": opts.engine_mode,
                "fingerprint": engine_fingerprint(self.engine),
                "engine_dir": model_path,
            },
            tokenizer_dir=str(self.tokenizer_path),
            values={name: (rv.value, rv.origin) for name, rv in resolution.values.items()},
            world_size=tp * pp,
            tensorrt_llm_model_names=[engine_model],
            files=files,
            serve_path=opts.serve_path,
            engine_files=[f.target for f in self.placement.files],
            tp_size=tp,
            pp_size=pp,
            python_instances={
                engine_model: 1,
                **{
                    f"{self.model_prefix}{m}": 1 for m in FRONT_DOORS if f"{self.model_prefix}{m}/config.pbtxt" in files
                },
            },
        )
        lock["checkpoint"] = self.checkpoint.lock_block()
        lock["tokenizer"].update(
            eos_token_id=tokenizer.eos_token_id,
            pad_token_id=tokenizer.pad_token_id,
            end_id=tokenizer.end_id,
            pad_id=tokenizer.pad_id,
            chat_template=tokenizer.has_chat_template,
        )
        if self.values_source is not None:
            lock["values_source"] = self.values_source
        return lock


def prepare_llmapi_render(
    checkpoint_dir: str | Path,
    tokenizer_dir: str | Path | None,
    output: str | Path,
    options: RenderOptions,
    *,
    model_prefix: str = "",
) -> PreparedLLMAPIRender:
    """Check what needs no tokenizer and plan the checkpoint placement (writes nothing).

    ``tokenizer_dir`` None: the checkpoint folder (the LLM API loads the tokenizer from the model folder).
    ``model_prefix`` (one LLM of several, :func:`repo_builder.render.render_multi_repository`) prefixes every
    model folder and name (``<prefix>tensorrt_llm``, ``<prefix>ensemble``, ...) and the checkpoint's folder.

    Raises:
        RenderError (unknown ``--engine-mode``, an output that may not be written, a relative serve path),
        ParameterError (``--values``/``--set``), EngineError (not a checkpoint: names config.json and the key),
        TokenizerError (no tokenizer files).
    """
    from ..engine import inspect_engine
    from ..engine.checkpoint import read_checkpoint_facts
    from ..errors import EngineError
    from ..tokenizer import check_tokenizer_dir

    opts = options
    check_placement_mode(opts.engine_mode, key="--engine-mode")
    contract = load_contract(opts.profile)
    out = Path(output).expanduser().absolute()
    checkpoint_path = Path(checkpoint_dir).expanduser().resolve()
    if not checkpoint_path.is_dir():
        raise EngineError(
            "not a directory",
            path=checkpoint_path,
            hint="--checkpoint-dir must be a local Hugging Face checkpoint folder (repo-builder never downloads)",
        )
    tokenizer_path = check_tokenizer_dir(str(tokenizer_dir if tokenizer_dir is not None else checkpoint_path))
    check_output(
        out,
        checkpoint_path,
        tokenizer_path,
        force=opts.force,
        dry_run=opts.dry_run,
        placement=opts.engine_mode,
        delete_unlisted=opts.delete_unlisted,
    )
    serve_root = serve_root_of(opts, out)
    checked, values_source = user_values(opts)
    facts = read_checkpoint_facts(checkpoint_path)
    engine = inspect_engine(checkpoint_path)
    if engine.kind != "hf":
        raise EngineError(
            f"a {engine.kind} engine folder, not a Hugging Face checkpoint; the llmapi profiles serve checkpoints",
            path=checkpoint_path,
            hint="render TensorRT-LLM engines with --profile trtllm-1.2 --engine-dir",
        )
    placement = plan_placement("hf", checkpoint_path, opts.engine_mode)
    if model_prefix:
        from .plan import _prefixed_placement

        placement = _prefixed_placement(placement, model_prefix)
    return PreparedLLMAPIRender(
        options=opts,
        contract=contract,
        output=out,
        checkpoint_path=checkpoint_path,
        tokenizer_path=tokenizer_path,
        serve_root=serve_root,
        checked=checked,
        engine=engine,
        checkpoint=facts,
        placement=placement,
        values_source=values_source,
        model_prefix=model_prefix,
    )
