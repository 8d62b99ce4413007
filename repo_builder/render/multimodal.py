"""Layout ``multimodal`` (``render --layout multimodal``): a vision-language model through an ensemble of
``preprocessing`` -> ``multimodal_encoders`` -> ``tensorrt_llm`` -> ``postprocessing``.

What NVIDIA's layout holds (triton-inference-server/tensorrtllm_backend v0.13.0 - v0.19.0
``all_models/multimodal``, ``docs/multimodal.md``; end of life in TensorRT-LLM 1.2): a copy of
``inflight_batcher_llm`` plus ``multimodal/ensemble`` (replacing the text ensemble) and ``multimodal_encoders``
(a Python model running the vision engine). The encoder's output is the engine's prompt table: the prompt
carries "fake" ids ``vocab_size ... vocab_size + features - 1`` per image, which the engine replaces by the
table's rows.

What repo-builder does differently (each one a silent limit or defect of NVIDIA's files):

* every fact comes from the checkpoint (:func:`multimodal_facts`): vocabulary, hidden size, features per image
  (vision ``image_size`` / ``patch_size`` and the feature-select strategy), the ``<image>`` token (checked
  against tokenizer.json), the image size (checked against preprocessor_config.json);
* the prompt-table size is checked at render against ``max_batch_size x features x max_num_images``
  (NVIDIA's docs say the two MUST be kept in step, nothing checks it);
* images are decoded server-side for LLaVA, from PNG or JPEG data URIs or pixel arrays (NVIDIA's LLaVA path
  takes only client-preprocessed ``image_input``, and decodes only JPEG data URIs);
* a text-only request works through the same ensemble (NVIDIA's encoder asserts).

Served here: the checkpoint is a Hugging Face ``LlavaForConditionalGeneration`` folder, placed under
``tensorrt_llm/1/engine``; ``multimodal_encoders`` runs its vision tower + projector and ``tensorrt_llm`` its
language model with the prompt-table splice (``runtime/multimodal.py``), both on the CPU. Qwen2-VL (mrope) and
mllama (cross-attention) are refused for now (docs/layouts.md).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ..errors import EngineError, ParameterError
from ..profile.schema import load_schema
from ..repository.lockfile import LOCK_NAME
from ..runtime.tokenizer_files import TOKENIZER_FILES
from .layouts import MULTIMODAL_PARAMETERS as LAYOUT_PARAMETERS
from .multimodal_checks import (  # noqa: F401  (IMAGE_TOKEN, QWEN2_VL_TOKENS re-exported: moved from this module)
    IMAGE_TOKEN,
    QWEN2_VL_TOKENS,
    _added_tokens,
    _check_llava_crop,
    _check_llava_image_token,
    _check_qwen2_vl_tokens,
    _llava_features,
    _mrope_section,
    _qwen2_vl_max_pixels,
)
from .options import RenderOptions
from .plan import serve_root_of
from .vendor import RUNTIME_FOLDER, python_model_source, runtime_files
from .whisper import (
    CheckpointRenderResult,
    _int_key,
    _read_json,
    _render_template,
    checkpoint_lock,
    refuse_unsupported,
    write_checkpoint_repository,
)

ENGINE = "tensorrt_llm"
ENCODERS = "multimodal_encoders"
#: repository model -> (template folder under the profile, python model kind or None).
MODELS = {
    "ensemble": ("multimodal_ensemble", None),
    "preprocessing": ("multimodal_preprocessing", "multimodal_preprocessing"),
    ENCODERS: ("multimodal_encoders", "multimodal_encoders"),
    ENGINE: ("multimodal_tensorrt_llm", "multimodal_engine"),
    "postprocessing": ("multimodal_postprocessing", "multimodal_postprocessing"),
}
#: The checkpoint's tokenizer files copied beside preprocessing / postprocessing: every tokenizer file name, and
#: the chat template (transformers 5 writes it to chat_template.jinja, not tokenizer_config.json).
_TOKENIZER_FILES = (*TOKENIZER_FILES, "special_tokens_map.json", "added_tokens.json", "chat_template.jinja")
#: model_type values of NVIDIA's other families, refused with a reason.
_NOT_YET = {
    "mllama": "mllama needs cross-attention in the engine, not built yet",
    "llava_onevision": "LLaVA-OneVision (anyres tiling, video) is not built yet",
    "llava_next": "LLaVA-NeXT (anyres tiling) is not built yet",
}
FACTS_FOLDER = "multimodal"


@dataclass(frozen=True)
class MultimodalFacts:
    """What the layout needs from a LLaVA checkpoint (every field read from its files).

    Attributes:
        model_type: config.json ``model_type`` (``llava``).
        vocab_size: ``text_config.vocab_size``: the first fake id.
        hidden_size: ``text_config.hidden_size``: the prompt table's width.
        max_position_embeddings: ``text_config.max_position_embeddings`` (prompt + generated tokens).
        image_size, patch_size: ``vision_config`` pixels.
        features_per_image: prompt-table rows of one image: (image_size / patch_size)^2, plus the CLS row
            when ``vision_feature_select_strategy`` is ``full``.
        image_token_id: ``image_token_index`` (= the ``<image>`` id of tokenizer.json).
        end_id, pad_id: ``eos_token_id`` / ``pad_token_id`` (generation_config.json, else text_config).
    """

    model_type: str
    vocab_size: int
    hidden_size: int
    max_position_embeddings: int
    image_size: int
    patch_size: int
    features_per_image: int
    image_token_id: int
    end_id: int
    pad_id: int
    spatial_merge_size: int = 1
    head_dim: int = 0
    mrope_section: tuple[int, ...] = ()
    vision_start_id: int | None = None
    vision_end_id: int | None = None


def _eos_pad(root: Path, text: Mapping[str, Any], cfg_path: Path) -> tuple[int, int]:
    gen_path = root / "generation_config.json"
    gen = _read_json(gen_path) if gen_path.is_file() else {}
    eos = gen.get("eos_token_id", text.get("eos_token_id"))
    if isinstance(eos, list):
        eos = eos[0] if eos else None
    if not isinstance(eos, int) or isinstance(eos, bool):
        raise EngineError("needs an integer eos_token_id", key="eos_token_id", path=cfg_path)
    pad = gen.get("pad_token_id", text.get("pad_token_id"))
    return eos, (pad if isinstance(pad, int) and not isinstance(pad, bool) else eos)


def qwen2_vl_facts(root: Path, cfg: Mapping[str, Any], cfg_path: Path) -> MultimodalFacts:
    """The facts of a Hugging Face ``Qwen2VLForConditionalGeneration`` checkpoint (config.json in the
    transformers 4.x form, text keys at the top, or the 5.x form with ``text_config``).

    Every id is read from the checkpoint (NVIDIA's preprocessing hard-codes Qwen2-VL-7B's ``vocab_size`` 152064
    and token ids 151654-151656, wrong for Qwen2-VL-2B's 151936 and extended vocabularies,
    triton-inference-server/tensorrtllm_backend#849). Features per image: the image processor's largest image
    (``max_pixels``, or ``size.longest_edge``) over (``patch_size`` x ``spatial_merge_size``)^2 pixels per token.

    Raises:
        EngineError: a key missing or not an integer, ``mrope_section`` not summing to half the head size
            (names the key), the image processor's patch / merge size not the vision tower's.
        TokenizerError: a vision token missing from tokenizer.json or with another id than config.json's.
    """
    text = cfg.get("text_config") if isinstance(cfg.get("text_config"), dict) else cfg
    vision = cfg.get("vision_config")
    if not isinstance(vision, dict):
        raise EngineError("needs a vision_config object", key="vision_config", path=cfg_path)
    assert isinstance(text, dict)
    vocab = _int_key(text, "vocab_size", cfg_path)
    hidden = _int_key(text, "hidden_size", cfg_path)
    max_pos = _int_key(text, "max_position_embeddings", cfg_path)
    heads = _int_key(text, "num_attention_heads", cfg_path)
    head_dim = int(text.get("head_dim") or hidden // heads)
    section = _mrope_section(cfg, text, head_dim, cfg_path)
    patch = _int_key(vision, "patch_size", cfg_path)
    merge = _int_key(vision, "spatial_merge_size", cfg_path)
    ids = _check_qwen2_vl_tokens(root, cfg, text, vocab, cfg_path)
    max_pixels = _qwen2_vl_max_pixels(root, patch, merge)
    eos, pad = _eos_pad(root, text, cfg_path)
    return MultimodalFacts(
        model_type="qwen2_vl",
        vocab_size=vocab,
        hidden_size=hidden,
        max_position_embeddings=max_pos,
        image_size=0,
        patch_size=patch,
        features_per_image=max_pixels // (patch * merge) ** 2,
        image_token_id=ids["image_token_id"],
        end_id=eos,
        pad_id=pad,
        spatial_merge_size=merge,
        head_dim=head_dim,
        mrope_section=tuple(section),
        vision_start_id=ids["vision_start_token_id"],
        vision_end_id=ids["vision_end_token_id"],
    )


def multimodal_facts(checkpoint: str | Path) -> MultimodalFacts:
    """Read and cross-check the facts of a Hugging Face LLaVA checkpoint directory.

    Raises:
        EngineError: config.json missing or not LLaVA, a key missing, or the image processor's size and the
            vision tower's disagree (names the file and key).
        TokenizerError: tokenizer.json missing, no ``<image>`` token, or its id is not ``image_token_index``.
    """
    root = Path(checkpoint)
    cfg_path = root / "config.json"
    cfg = _read_json(cfg_path)
    model_type = cfg.get("model_type")
    if model_type in _NOT_YET:
        raise EngineError(f"model_type {model_type}: {_NOT_YET[model_type]}", key="model_type", path=cfg_path)
    if model_type == "qwen2_vl":
        return qwen2_vl_facts(root, cfg, cfg_path)
    if model_type != "llava":
        raise EngineError(
            f"model_type is {model_type!r}, not 'llava' or 'qwen2_vl'",
            key="model_type",
            path=cfg_path,
            hint="layout multimodal takes a LlavaForConditionalGeneration or Qwen2VLForConditionalGeneration "
            "checkpoint",
        )
    text, vision = cfg.get("text_config"), cfg.get("vision_config")
    for key, sub in (("text_config", text), ("vision_config", vision)):
        if not isinstance(sub, dict):
            raise EngineError(f"needs a {key} object", key=key, path=cfg_path)
    assert isinstance(text, dict) and isinstance(vision, dict)
    vocab = _int_key(text, "vocab_size", cfg_path)
    hidden = _int_key(text, "hidden_size", cfg_path)
    max_pos = _int_key(text, "max_position_embeddings", cfg_path)
    size, patch, features = _llava_features(cfg, vision, cfg_path)
    image_id = cfg.get("image_token_index", cfg.get("image_token_id"))
    if isinstance(image_id, bool) or not isinstance(image_id, int):
        raise EngineError("needs an integer image_token_index", key="image_token_index", path=cfg_path)

    _check_llava_image_token(root, image_id, vocab)
    _check_llava_crop(root, size)
    eos, pad = _eos_pad(root, text, cfg_path)
    return MultimodalFacts(
        model_type="llava",
        vocab_size=vocab,
        hidden_size=hidden,
        max_position_embeddings=max_pos,
        image_size=size,
        patch_size=patch,
        features_per_image=features,
        image_token_id=image_id,
        end_id=eos,
        pad_id=pad,
    )


#: The fields only Qwen2-VL sets (left out of a LLaVA repository's files, which stay as before Qwen2-VL).
_QWEN2_VL_ONLY = ("spatial_merge_size", "head_dim", "mrope_section", "vision_start_id", "vision_end_id")


def facts_dict(facts: MultimodalFacts) -> dict[str, Any]:
    """The facts as written to ``multimodal.json`` and the lock file: every field for Qwen2-VL, LLaVA's only
    for LLaVA."""
    out = asdict(facts)
    if facts.model_type != "qwen2_vl":
        for key in _QWEN2_VL_ONLY:
            del out[key]
    return out


def resolve_multimodal_values(facts: MultimodalFacts, options: RenderOptions) -> dict[str, tuple[Any, str]]:
    """{parameter: (typed value, origin)}: schema defaults, then ``--values``, then ``--set``; the prompt-table
    size defaults to (and must be at least) ``max_batch_size x features_per_image x max_num_images``.

    Raises:
        ParameterError: a bad or unknown key, a key of another layout, or a prompt table too small, naming the key.
    """
    from .plan import user_values

    given, _ = user_values(options)
    foreign = [k for k in given if k not in LAYOUT_PARAMETERS]
    if foreign:
        raise ParameterError(
            f"{foreign[0]} is not read by layout multimodal (its parameters: {', '.join(LAYOUT_PARAMETERS)})",
            key=foreign[0],
        )
    params = load_schema().for_profile(options.profile)
    values: dict[str, tuple[Any, str]] = {}
    for name in LAYOUT_PARAMETERS:
        if given.get(name) is not None:
            values[name] = (given[name], "user")
        else:
            values[name] = (params[name].default_for(options.profile), "default")
    batch, images = values["multimodal_max_batch_size"][0], values["multimodal_max_num_images"][0]
    need = batch * facts.features_per_image * images
    table = values["multimodal_max_prompt_table_size"][0]
    if table is None:
        values["multimodal_max_prompt_table_size"] = (need, "checkpoint")
    elif table < need:
        raise ParameterError(
            f"a prompt table of {table} rows cannot hold max_batch_size {batch} x {facts.features_per_image} features "
            f"per image x max_num_images {images} = {need}",
            key="multimodal_max_prompt_table_size",
            hint=f"at least {need}, or lower multimodal_max_batch_size / multimodal_max_num_images",
        )
    return values


def plan_multimodal_files(
    checkpoint: Path,
    facts: MultimodalFacts,
    values: Mapping[str, tuple[Any, str]],
    serve_root: Path,
    profile: str,
    serve_path: str | Path | None = None,
    streaming: bool = False,
) -> dict[str, bytes]:
    """{repository-relative path: bytes} of every file except the checkpoint copy (the lock file included).

    ``streaming`` (``render --streaming``): ``tensorrt_llm`` is decoupled and sends one response per generated
    token, each holding every token so far (postprocessing decodes the whole text, so each streamed
    ``text_output`` is the text so far and the last one equals the non-streamed text); ``multimodal.json`` and
    the lock facts say ``"streaming": true`` (the OpenAI front end then streams over gRPC).
    """
    v = {k: val for k, (val, _) in values.items()}
    engine_dir = serve_root / ENGINE / "1" / "engine"
    variables = {
        "values": v,
        "facts": asdict(facts),
        "engine_dir": str(engine_dir),
        "max_batch_size": v["multimodal_max_batch_size"],
        "max_prompt_table_rows": facts.features_per_image * v["multimodal_max_num_images"],
        "streaming": streaming,
    }
    files: dict[str, bytes] = {}
    runtime = runtime_files()
    for model, (template, kind) in MODELS.items():
        files[f"{model}/config.pbtxt"] = _render_template(profile, template, variables).encode()
        if kind is None:  # the ensemble: an empty version folder, made by the write
            continue
        files[f"{model}/1/model.py"] = python_model_source(kind)
        for rel, data in runtime.items():
            files[f"{model}/1/{RUNTIME_FOLDER}/{rel}"] = data
    facts_json = {**facts_dict(facts), "max_num_images": v["multimodal_max_num_images"]}
    if streaming:
        facts_json["streaming"] = True
    for model in ("preprocessing", "postprocessing"):
        folder = f"{model}/1/{FACTS_FOLDER}"
        files[f"{folder}/multimodal.json"] = (json.dumps(facts_json, indent=2) + "\n").encode()
        for name in (*_TOKENIZER_FILES, "preprocessor_config.json"):
            if (checkpoint / name).is_file():
                files[f"{folder}/{name}"] = (checkpoint / name).read_bytes()
    files[LOCK_NAME] = checkpoint_lock(
        "multimodal",
        checkpoint,
        profile,
        values,
        files,
        facts=facts_dict(facts) | ({"streaming": True} if streaming else {}),
        tensorrt_llm_model_names=[ENGINE, ENCODERS],
        serve_path=serve_path,
    )
    return files


def render_multimodal_repository(
    checkpoint_dir: str | Path, output: str | Path, options: RenderOptions | None = None
) -> CheckpointRenderResult[MultimodalFacts]:
    """Render layout ``multimodal`` for a Hugging Face LLaVA checkpoint.

    The repository is written into a temp dir beside ``output`` and renamed into place; a failure leaves
    nothing; an existing ``output`` is replaced only with ``force`` when its lock file proves repo-builder
    rendered it (:func:`refuse_unsupported`), and is left as it was when the render fails.

    Raises:
        EngineError / TokenizerError (:func:`multimodal_facts`), ParameterError
        (:func:`resolve_multimodal_values`), RenderError: ``output`` exists, an unsupported profile,
        ``engine_mode`` other than copy, ``streaming``, or the write failed.
    """
    opts = options or RenderOptions()
    checkpoint = Path(checkpoint_dir).resolve()
    out = Path(output).absolute()
    refuse_unsupported("multimodal", opts, out, checkpoint)
    facts = multimodal_facts(checkpoint)
    values = resolve_multimodal_values(facts, opts)
    serve_root = serve_root_of(opts, out)
    files = plan_multimodal_files(
        checkpoint, facts, values, serve_root, opts.profile, opts.serve_path, streaming=bool(opts.streaming)
    )
    existed = write_checkpoint_repository(out, files, checkpoint, empty_dirs=("ensemble/1",))
    return CheckpointRenderResult(output=out, facts=facts, values=values, files=sorted(files), existed=existed)
