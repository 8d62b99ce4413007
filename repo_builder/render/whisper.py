"""Layout ``whisper`` (``render --layout whisper``): speech recognition through ``whisper_bls`` and an
encoder-decoder ``tensorrt_llm``.

What NVIDIA's layout holds (triton-inference-server/tensorrtllm_backend v0.15.0 ... v0.19.0
``all_models/whisper``, ``docs/whisper.md``): ``whisper_bls`` (Python: log-mel features, tiktoken prompt,
one request to ``tensorrt_llm``) and a copy of ``inflight_batcher_llm/tensorrt_llm`` in encoder-decoder mode
(``encoder_engine_dir``); no ensemble. Clients call ``whisper_bls`` with ``WAV`` (FP32 ``[-1]``, 16 kHz
samples), ``WAV_LENS`` (INT32 ``[1]``) and ``TEXT_PREFIX`` (STRING ``[1]``) and get ``TRANSCRIPTS``.

What repo-builder does differently (each one a silent limit of NVIDIA's files):

* every fact comes from the checkpoint (:func:`whisper_facts`): mel bins, the special ids and the number of
  languages from its ``tokenizer.json`` (NVIDIA hard-codes 100 languages, right only for large-v3), the
  audio window from ``preprocessor_config.json`` and ``max_source_positions``, the decoder limit from
  ``max_target_positions``;
* ``whisper_max_tokens`` (NVIDIA: 50, fixed), ``whisper_max_batch_size`` (NVIDIA: batch 1) and
  ``whisper_max_audio_seconds`` (NVIDIA: audio over 30 s overflows the encoder) are typed parameters
  (model_templates/parameters.yaml), checked here against the checkpoint, naming the key;
* ``WAV_LENS`` is really optional (NVIDIA declares it optional and crashes without it).

Served here: the checkpoint is a Hugging Face ``WhisperForConditionalGeneration`` directory, placed under
``tensorrt_llm/1/engine`` and run by repo-builder's encoder-decoder reference engine
(``runtime/whisper_engine.py``); the BLS is ``runtime/whisper_bls.py``. TensorRT-LLM engine pairs are not
rendered yet (docs/layouts.md).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

from ..errors import EngineError, ParameterError, RenderError
from ..profile.schema import load_schema, validate_user_values
from ..repository.lockfile import LOCK_NAME, dumps
from ..repository.pbtxt import parse_model_config
from .layouts import WHISPER_PARAMETERS as LAYOUT_PARAMETERS
from .options import RenderOptions
from .plan import serve_root_of
from .vendor import RUNTIME_FOLDER, python_model_source, runtime_files
from .whisper_facts import (  # noqa: F401  (re-exported: moved from this module)
    WhisperFacts,
    _int_key,
    _read_json,
    whisper_facts,
)
from .write import swap_into_place

BLS = "whisper_bls"
ENGINE = "tensorrt_llm"
_PROFILES = ("trtllm-1.2",)
#: Checkpoint layouts with a streaming (decoupled) mode.
_STREAMING_LAYOUTS: tuple[str, ...] = ("multimodal",)
#: Checkpoint files the reference engine loads (weights: any of the safetensors / bin names).
_MODEL_FILES = ("config.json", "generation_config.json")
#: Files of the BLS's facts folder (``whisper_bls/1/whisper``).
FACTS_NAME = "whisper.json"


def resolve_whisper_values(
    facts: WhisperFacts, options: RenderOptions, *, checkpoint: Path
) -> dict[str, tuple[Any, str]]:
    """{parameter: (typed value, origin)} for this layout: schema defaults, then ``--values``, then ``--set``,
    checked against the checkpoint.

    Raises:
        ParameterError: a bad or unknown key, a key of another layout, or a value the checkpoint cannot serve
            (``whisper_max_tokens`` + the default prompt over ``max_target_positions``;
            ``whisper_max_audio_seconds`` over the encoder window), naming the key.
    """
    given: dict[str, Any] = {}
    if options.values_file is not None:
        from .plan import _load_values_file

        data = _load_values_file(options.values_file)
        given.update(validate_user_values(options.profile, data, source=str(options.values_file)))
    if options.user_values:
        given.update(validate_user_values(options.profile, options.user_values, source="--set"))
    foreign = [k for k in given if k not in LAYOUT_PARAMETERS]
    if foreign:
        raise ParameterError(
            f"{foreign[0]} is not read by layout whisper (its parameters: {', '.join(LAYOUT_PARAMETERS)})",
            key=foreign[0],
        )
    params = load_schema().for_profile(options.profile)
    values: dict[str, tuple[Any, str]] = {}
    for name in LAYOUT_PARAMETERS:
        if given.get(name) is not None:
            values[name] = (given[name], "user")
        else:
            values[name] = (params[name].default_for(options.profile), "default")
    room = facts.max_target_positions - len(facts.default_prefix_ids)
    if values["whisper_max_tokens"][0] > room:
        raise ParameterError(
            f"{values['whisper_max_tokens'][0]} tokens after the {len(facts.default_prefix_ids)}-token prompt exceed "
            f"the decoder's max_target_positions {facts.max_target_positions} (config.json)",
            key="whisper_max_tokens",
            path=checkpoint / "config.json",
            hint=f"at most {room}",
        )
    if values["whisper_max_audio_seconds"][0] > facts.chunk_seconds:
        raise ParameterError(
            f"{values['whisper_max_audio_seconds'][0]} s is longer than the encoder's {facts.chunk_seconds} s window "
            "(long-form audio needs chunking, which this layout does not do)",
            key="whisper_max_audio_seconds",
            hint=f"at most {facts.chunk_seconds}",
        )
    return values


def _render_template(profile: str, model: str, variables: Mapping[str, Any]) -> str:
    import jinja2

    from ..profile.paths import templates_dir

    path = templates_dir() / profile / model / "config.pbtxt.j2"
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True, autoescape=False)
    try:
        text = env.from_string(path.read_text(encoding="utf-8")).render(**variables)
    except jinja2.UndefinedError as exc:
        from ..errors import TemplateError

        raise TemplateError(f"template uses an undefined variable: {exc.message}", path=path) from exc
    parse_model_config(text, path=f"{model}/config.pbtxt (rendered from {path})")
    return text


def _weight_files(checkpoint: Path) -> list[Path]:
    found = sorted(
        p for p in checkpoint.iterdir() if p.is_file() and (p.suffix == ".safetensors" or p.name == "pytorch_model.bin")
    )
    index = checkpoint / "model.safetensors.index.json"
    if index.is_file():
        found.append(index)
    if not found:
        raise EngineError("no weights (model.safetensors / pytorch_model.bin)", path=checkpoint)
    return found


def refuse_unsupported(layout: str, opts: RenderOptions, out: Path, checkpoint: Path) -> bool:
    """The refusals every checkpoint layout (whisper, multimodal) shares before it reads the checkpoint.

    Returns:
        whether ``out`` exists (then ``opts.force`` was given and its lock file proves repo-builder rendered
        it: :func:`repo_builder.render.output.check_output`).
    Raises:
        RenderError: a profile other than :data:`_PROFILES` (key ``--profile``), ``engine_mode`` other than copy
            (``--engine-mode``), ``streaming`` (``--streaming``), or ``out`` exists without ``force``, or holds
            no lock file or unlisted files (``--output``).
        EngineError: ``checkpoint`` is not a directory (``--engine-dir``).
    """
    from .output import check_output

    if opts.profile not in _PROFILES:
        raise RenderError(f"layout {layout} needs profile {', '.join(_PROFILES)}, not {opts.profile}", key="--profile")
    if opts.engine_mode != "copy":
        raise RenderError(
            f"--engine-mode {opts.engine_mode} is not supported by layout {layout} (the checkpoint is copied)",
            key="--engine-mode",
        )
    if opts.streaming and layout not in _STREAMING_LAYOUTS:
        raise RenderError(f"layout {layout} has no streaming (decoupled) mode yet", key="--streaming")
    if opts.generation_engine_dir is not None:
        raise RenderError(
            f"--generation-engine-dir is for layout disaggregated, not {layout}", key="--generation-engine-dir"
        )
    if not checkpoint.is_dir():
        raise EngineError("not a directory", path=checkpoint, key="--engine-dir")
    return check_output(
        out,
        checkpoint,
        checkpoint,
        force=opts.force,
        dry_run=False,
        placement="copy",
        delete_unlisted=opts.delete_unlisted,
    )


def checkpoint_lock(
    layout: str,
    checkpoint: Path,
    profile: str,
    values: Mapping[str, tuple[Any, str]],
    files: Mapping[str, bytes],
    *,
    facts: Mapping[str, Any],
    tensorrt_llm_model_names: list[str],
    serve_path: str | Path | None,
) -> bytes:
    """The lock file (``repository/lockfile.py``, :data:`LOCK_NAME`) of a checkpoint layout: the checkpoint
    is the engine (kind ``hf``, placement ``copy``, its files under ``tensorrt_llm/1/engine``), and its
    tokenizer; world size 1; one stub process per Python model (every model of these layouts). Beside the
    common keys: ``layout`` (``whisper`` / ``multimodal``, what the OpenAI front end serves) and ``facts``
    (what render read from the checkpoint).

    Args:
        files: {repository-relative path: bytes} of every rendered file except the checkpoint copy.
    """
    from .. import __version__
    from ..engine.files import folder_fingerprint
    from ..repository.lockfile import build_lock
    from ..repository.pbtxt import python_instances

    weights = _checkpoint_files(checkpoint)
    instances = {
        rel.partition("/")[0]: python_instances(parse_model_config(data.decode(), path=rel))
        for rel, data in files.items()
        if rel.endswith("/config.pbtxt") and rel.count("/") == 1 and b'backend: "python"' in data
    }
    lock = build_lock(
        version=__version__,
        profile=profile,
        engine={
            "dir": str(checkpoint),
            "kind": "hf",
            "placement": "copy",
            "fingerprint": folder_fingerprint(checkpoint / "config.json", checkpoint),
        },
        tokenizer_dir=checkpoint,
        values=values,
        world_size=1,
        tensorrt_llm_model_names=tensorrt_llm_model_names,
        files=files,
        serve_path=serve_path,
        engine_files=[f"{ENGINE}/1/engine/{p.name}" for p in weights],
        tp_size=1,
        pp_size=1,
        python_instances=instances,
    )
    lock["layout"] = layout
    lock["facts"] = dict(facts)
    return dumps(lock)


def _checkpoint_files(checkpoint: Path) -> list[Path]:
    """The checkpoint files copied into ``tensorrt_llm/1/engine``: config files and weights."""
    return [checkpoint / n for n in _MODEL_FILES if (checkpoint / n).is_file()] + _weight_files(checkpoint)


def write_checkpoint_repository(
    out: Path, files: Mapping[str, bytes], checkpoint: Path, empty_dirs: tuple[str, ...] = ()
) -> bool:
    """Write ``files`` ({repository-relative path: bytes}), the folders ``empty_dirs`` and the checkpoint's model
    files and weights (into ``tensorrt_llm/1/engine``) into a temp dir beside ``out``, then rename it into place
    (an existing ``out``, checked by :func:`refuse_unsupported`, is swapped out and deleted only after the new
    one is in place): a failure leaves nothing and the old repository as it was.

    Returns:
        whether an existing repository was replaced.
    Raises:
        EngineError: the checkpoint has no weights (:func:`_weight_files`); OSError from the write.
    """
    weights = _checkpoint_files(checkpoint)
    existed = out.exists()
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        os.chmod(tmp, 0o755)
        for rel, data in files.items():
            target = tmp / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
        for rel in empty_dirs:
            (tmp / rel).mkdir(parents=True, exist_ok=True)
        engine = tmp / ENGINE / "1" / "engine"
        engine.mkdir(parents=True, exist_ok=True)
        for src in weights:
            shutil.copyfile(src, engine / src.name)
        swap_into_place(tmp, out, existed)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return existed


FactsT = TypeVar("FactsT")


@dataclass
class CheckpointRenderResult(Generic[FactsT]):
    """What a render from a Hugging Face checkpoint wrote (:func:`render_whisper_repository`,
    :func:`.multimodal.render_multimodal_repository`): the repository, the facts read from the checkpoint
    (``WhisperFacts``, ``MultimodalFacts``), the values ({parameter: (value, origin)}), the files (paths relative
    to the repository, sorted) and whether ``output`` existed before (replaced with ``force``)."""

    output: Path
    facts: FactsT
    values: dict[str, tuple[Any, str]]
    files: list[str]
    existed: bool = False


def plan_whisper_files(
    checkpoint: Path,
    facts: WhisperFacts,
    values: Mapping[str, tuple[Any, str]],
    serve_root: Path,
    profile: str,
    serve_path: str | Path | None = None,
) -> dict[str, bytes]:
    """{repository-relative path: bytes} of every file except the checkpoint copy (the lock file included)."""
    v = {k: val for k, (val, _) in values.items()}
    engine_dir = serve_root / ENGINE / "1" / "engine"
    variables = {
        "values": v,
        "facts": asdict(facts),
        "engine_dir": str(engine_dir),
        "max_batch_size": v["whisper_max_batch_size"],
    }
    files: dict[str, bytes] = {}
    files[f"{BLS}/config.pbtxt"] = _render_template(profile, BLS, variables).encode()
    files[f"{ENGINE}/config.pbtxt"] = _render_template(profile, "whisper_tensorrt_llm", variables).encode()
    for model, kind in ((BLS, "whisper_bls"), (ENGINE, "whisper_engine")):
        files[f"{model}/1/model.py"] = python_model_source(kind)
        for rel, data in runtime_files().items():
            files[f"{model}/1/{RUNTIME_FOLDER}/{rel}"] = data
    facts_json = {
        **asdict(facts),
        "max_tokens": v["whisper_max_tokens"],
        "max_audio_seconds": v["whisper_max_audio_seconds"],
    }
    files[f"{BLS}/1/whisper/{FACTS_NAME}"] = (json.dumps(facts_json, indent=2) + "\n").encode()
    for name in ("tokenizer.json", "tokenizer_config.json", "preprocessor_config.json"):
        if (checkpoint / name).is_file():
            files[f"{BLS}/1/whisper/{name}"] = (checkpoint / name).read_bytes()
    if f"{BLS}/1/whisper/preprocessor_config.json" not in files:
        pre = {
            "feature_extractor_type": "WhisperFeatureExtractor",
            "feature_size": facts.num_mel_bins,
            "sampling_rate": facts.sampling_rate,
            "hop_length": facts.hop_length,
            "n_fft": facts.n_fft,
            "chunk_length": facts.chunk_seconds,
            "padding_value": 0.0,
        }
        files[f"{BLS}/1/whisper/preprocessor_config.json"] = (json.dumps(pre, indent=2) + "\n").encode()
    files[LOCK_NAME] = checkpoint_lock(
        "whisper",
        checkpoint,
        profile,
        values,
        files,
        facts=asdict(facts) | {"languages": len(facts.languages)},
        tensorrt_llm_model_names=[ENGINE, BLS],
        serve_path=serve_path,
    )
    return files


def render_whisper_repository(
    checkpoint_dir: str | Path, output: str | Path, options: RenderOptions | None = None
) -> CheckpointRenderResult[WhisperFacts]:
    """Render layout ``whisper`` for a Hugging Face Whisper checkpoint.

    The repository is written into a temp dir beside ``output`` and renamed into place; a failure leaves
    nothing; an existing ``output`` is replaced only with ``force`` when its lock file proves repo-builder
    rendered it (:func:`refuse_unsupported`), and is left as it was when the render fails.

    Raises:
        EngineError / TokenizerError (:func:`whisper_facts`), ParameterError (:func:`resolve_whisper_values`),
        RenderError: ``output`` exists (without ``force``, or not rendered by repo-builder), an unsupported
            profile, ``engine_mode`` other than copy, ``streaming``, or the write failed.
    """
    opts = options or RenderOptions()
    checkpoint = Path(checkpoint_dir).resolve()
    out = Path(output).absolute()
    refuse_unsupported("whisper", opts, out, checkpoint)
    facts = whisper_facts(checkpoint)
    values = resolve_whisper_values(facts, opts, checkpoint=checkpoint)
    serve_root = serve_root_of(opts, out)
    files = plan_whisper_files(checkpoint, facts, values, serve_root, opts.profile, opts.serve_path)
    existed = write_checkpoint_repository(out, files, checkpoint)
    return CheckpointRenderResult(output=out, facts=facts, values=values, files=sorted(files), existed=existed)
