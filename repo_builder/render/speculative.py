"""Draft-target speculative decoding (``render --draft-engine-dir DIR``): a ``tensorrt_llm_draft`` model beside
``tensorrt_llm``, and the BLS's ``tensorrt_llm_draft_model_name`` pointing at it.

Facts (triton-inference-server/tensorrtllm_backend c2e65b8 ``tensorrt_llm_bls``; NVIDIA/TensorRT-LLM
``examples/draft_target_model/README.md``): the draft model is a copy of ``tensorrt_llm`` with its own engine;
the target engine is built with ``--speculative_decoding_mode draft_tokens_external --max_draft_len N`` (else
"Number of draft tokens (56) is larger than maximum number of draft tokens (0)",
triton-inference-server/tensorrtllm_backend#473); both need the same tokenizer (vocabulary).

Here the draft model is rendered from the tensorrt_llm template and points at the draft engine directory where
it is (placement ``reference``: nothing is copied); render refuses a draft of another engine kind, vocabulary
or world size, and a TensorRT-LLM target built without ``max_draft_len``. Requests then use
``num_draft_tokens`` (at most the target's ``max_draft_len`` for a TensorRT-LLM engine, checked by the engine).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..engine import EngineInfo, inspect_engine
from ..errors import EngineError, RenderError
from ..repository.lockfile import LOCK_NAME, dumps
from ..repository.pbtxt import parse_model_config, python_instances
from .options import RenderOptions
from .plan import PreparedRender, RenderPlan, prepare_render
from .templates import render_configs
from .vendor import ENGINE_MODEL_KINDS, RUNTIME_FOLDER, python_model_source, runtime_files
from .write import RenderResult, write_plan, write_repository

DRAFT_MODEL = "tensorrt_llm_draft"
DRAFT_KEY = "tensorrt_llm_draft_model_name"


def check_draft(target: EngineInfo, draft: EngineInfo) -> None:
    """Refuse a draft engine the target cannot verify.

    Raises:
        EngineError: another engine kind, vocabulary or world size (names ``--draft-engine-dir``); a TensorRT-LLM
            target without ``max_draft_len`` or not in mode ``draft_tokens_external`` (names ``max_draft_len``).
    """
    if draft.kind != target.kind:
        raise EngineError(
            f"the draft engine is a {draft.kind} engine, the target a {target.kind} one; both run on one backend",
            key="--draft-engine-dir",
            path=draft.dir,
        )
    if draft.vocab_size and target.vocab_size and draft.vocab_size != target.vocab_size:
        raise EngineError(
            f"the draft's vocabulary has {draft.vocab_size} tokens, the target's {target.vocab_size}; draft tokens "
            "are verified as the target's ids, so both need the same tokenizer",
            key="--draft-engine-dir",
            path=draft.dir,
        )
    if draft.world_size != target.world_size:
        raise EngineError(
            f"the draft engine needs world size {draft.world_size}, the target {target.world_size}; one launch "
            "serves both (ranks > 0 load every engine model)",
            key="--draft-engine-dir",
            path=draft.dir,
        )
    if target.kind == "trtllm":
        if target.max_draft_len <= 0:
            raise EngineError(
                "the target engine was built without draft tokens (max_draft_len 0): every speculative request "
                "would fail with 'Number of draft tokens ... is larger than maximum number of draft tokens (0)'",
                key="max_draft_len",
                path=target.dir,
                hint="rebuild the target with `trtllm-build --speculative_decoding_mode draft_tokens_external "
                "--max_draft_len N`",
            )
        if target.speculative_decoding_mode not in (None, "draft_tokens_external"):
            raise EngineError(
                f"the target engine's speculative decoding mode is {target.speculative_decoding_mode}, not "
                "draft_tokens_external (the mode that takes draft_input_ids)",
                key="speculative_decoding_mode",
                path=target.dir,
            )


class _Prepared:
    def __init__(self, prepared: PreparedRender, draft: EngineInfo) -> None:
        self.prepared = prepared
        self.draft = draft

    def finish(self) -> RenderPlan:
        """The plain plan plus the draft model, the BLS re-rendered with its name, the lock file rebuilt."""
        from ..values.resolve import ResolvedValue

        prep = self.prepared
        name = prep.checked.pop(DRAFT_KEY, None) or DRAFT_MODEL  # resolve's rule refuses it without a draft
        try:
            plain = prep.finish()
        finally:
            prep.checked[DRAFT_KEY] = name
        resolution = plain.resolution
        resolution.values[DRAFT_KEY] = ResolvedValue(name, "user")
        values = resolution.as_template_vars()
        profile, kind = plain.profile, plain.engine.kind
        files = dict(plain.files)
        del files[LOCK_NAME]
        draft_values = dict(values, engine_dir=str(self.draft.dir))
        draft_values["max_input_len"] = self.draft.max_input_len if kind != "trtllm" else values.get("max_input_len")
        draft_values["max_seq_len"] = self.draft.max_seq_len if kind != "trtllm" else values.get("max_seq_len")
        configs = render_configs(profile, draft_values, engine_kind=kind, names={"tensorrt_llm": name})
        files[f"{name}/config.pbtxt"] = configs["tensorrt_llm"].encode()
        if kind in ENGINE_MODEL_KINDS:
            files[f"{name}/1/model.py"] = python_model_source(ENGINE_MODEL_KINDS[kind])
            for rel, data in runtime_files().items():
                files[f"{name}/1/{RUNTIME_FOLDER}/{rel}"] = data
        empty = [] if kind in ENGINE_MODEL_KINDS else [f"{name}/1"]
        bls = render_configs(profile, values, engine_kind=kind)["tensorrt_llm_bls"]
        files["tensorrt_llm_bls/config.pbtxt"] = bls.encode()
        lock = dict(plain.lock)
        lock["values"] = dict(lock["values"], **{DRAFT_KEY: {"value": name, "origin": "user"}})
        lock["launch"] = dict(lock["launch"], tensorrt_llm_model_names=["tensorrt_llm", name])
        instances = dict(lock["launch"].get("python_instances") or {})
        cfg = parse_model_config(configs["tensorrt_llm"], path=f"{name}/config.pbtxt")
        if cfg.backend == "python":
            instances[name] = python_instances(cfg)
        lock["launch"]["python_instances"] = dict(sorted(instances.items()))
        lock["draft"] = {"dir": str(self.draft.dir), "kind": self.draft.kind, "model": name}
        from ..repository.lockfile import sha256_bytes

        lock["files"] = {rel: sha256_bytes(data) for rel, data in sorted(files.items())}
        files[LOCK_NAME] = dumps(lock)
        plan = plain
        plan.files, plan.lock, plan.empty_dirs = files, lock, [*plain.empty_dirs, *empty]
        return plan


def render_speculative_repository(
    engine_dir: str | Path, tokenizer_dir: str | Path, output: str | Path, options: RenderOptions
) -> RenderResult:
    """Render the default layout plus a ``tensorrt_llm_draft`` model for ``options.draft_engine_dir``.

    Raises:
        whatever :func:`repo_builder.render.render_repository` raises; EngineError from :func:`check_draft`;
        RenderError: a draft with layout disaggregated or several LLMs.
    """
    if options.layout != "inflight_batcher_llm":
        raise RenderError("--draft-engine-dir works with the default layout only", key="--draft-engine-dir")
    assert options.draft_engine_dir is not None
    draft = inspect_engine(Path(options.draft_engine_dir).expanduser().resolve())
    prepared = prepare_render(engine_dir, tokenizer_dir, output, options)
    check_draft(prepared.engine, draft)
    job: Any = _Prepared(prepared, draft)
    if options.dry_run:
        return write_plan(job.finish(), dry_run=True)
    return write_repository(prepared.output, prepared.placement, job.finish, progress=options.progress)
