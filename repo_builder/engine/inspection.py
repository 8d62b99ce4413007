"""``inspect_engine``: which kind of engine directory this is, read with the parser of its layout.

The length checks that hold for every layout (:func:`_check_lengths`) run here too; the rank files are
checked separately (:func:`.files.check_rank_files`), so that bare configs can be inspected.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..errors import EngineError
from ..runtime.errors import EngineLoadError
from ..runtime.synthetic_spec import SPEC_DEFAULTS, SpecError, read_spec
from .files import list_files, rank_index
from .info import ENGINE_PATTERNS, SYNTHETIC_FILE, WEIGHT_PATTERNS, EngineInfo, EngineKind
from .layouts import HF_MAX_DRAFT_LEN, parse_hf, parse_new, parse_old
from .sections import HFConfig, NewLayout, OldLayout, check_config


def _read_json(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise EngineError(f"cannot read: {exc.strerror or exc}", path=path) from exc
    except UnicodeDecodeError as exc:
        raise EngineError(
            f"not UTF-8 text (byte {exc.start}: {exc.reason}); JSON files are UTF-8",
            path=path,
            hint="engine_dir must hold the config.json written by trtllm-build",
        ) from None
    try:
        return json.loads(text)
    except RecursionError:
        raise EngineError("invalid JSON: nested too deeply", path=path) from None
    except json.JSONDecodeError as exc:
        raise EngineError(
            f"invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}",
            path=path,
            hint="engine_dir must hold the config.json written by trtllm-build",
        ) from exc


# Over 80 lines on purpose: which kind of folder this is decides the parser; each refusal names the file and the
# fix, in the order a user meets them.
def inspect_engine(engine_dir: str | Path) -> EngineInfo:
    """Read an engine directory's configuration (it does not load or check the engine files).

    Args:
        engine_dir: a TRT-LLM engine dir, an HF checkpoint dir or a synthetic engine dir.
    Returns:
        The :class:`EngineInfo`; ``rank_files`` lists the ``rank*.engine`` files present (count checked by
        :func:`check_rank_files`, so that bare configs can be inspected).
    Raises:
        EngineError (naming the path): missing directory, no config.json, invalid JSON (line/column),
        a config.json that is neither a TRT-LLM engine nor an HF checkpoint with weights (B11), a TRT-LLM
        checkpoint that was not built yet, or an encoder-only engine such as BERT.
    """
    directory = Path(engine_dir).expanduser()
    if directory.is_symlink() and not directory.exists():
        raise EngineError(
            "the engine directory is a symbolic link that cannot be followed (it points nowhere or "
            "to itself: a symlink loop)",
            path=directory,
            hint="pass the real directory",
        )
    if not directory.exists():
        raise EngineError(
            "engine directory does not exist",
            path=directory,
            hint="pass the trtllm-build --output_dir (holding config.json and rank*.engine)",
        )
    if not directory.is_dir():
        raise EngineError("not a directory", path=directory, hint="pass the directory holding config.json, not a file")
    directory = directory.resolve()

    synthetic = directory / SYNTHETIC_FILE
    if synthetic.is_file():
        try:
            spec = read_spec(directory)
        except EngineLoadError as exc:
            raise EngineError(
                exc.problem if isinstance(exc, SpecError) else str(exc),
                path=synthetic,
                hint="keys (all optional): " + ", ".join(f"{k} (default {v})" for k, v in SPEC_DEFAULTS.items()),
            ) from None
        return EngineInfo(
            kind="synthetic",
            dir=directory,
            layout="synthetic",
            architecture="synthetic",
            dtype="float32",
            vocab_size=spec["vocab_size"],
            max_batch_size=spec["max_batch_size"],
            max_beam_width=1,
            max_draft_len=HF_MAX_DRAFT_LEN,
            max_input_len=spec["max_input_len"],
            max_seq_len=spec["max_seq_len"],
            logits_dtype="float32",
        )

    config = directory / "config.json"
    for special in (synthetic, config):
        if special.is_symlink() and not special.exists():
            raise EngineError(
                "a symbolic link that cannot be followed (it points nowhere, or to itself: a symlink loop)",
                path=special,
                hint="replace it with the file itself",
            )
    if not config.is_file():
        found = sorted(p.name for p in directory.iterdir())[:8]
        raise EngineError(
            "no config.json in the engine directory"
            + (f" (found: {', '.join(found)})" if found else " (the directory is empty)"),
            path=directory,
            hint=f"engine_dir must be the trtllm-build --output_dir, an HF checkpoint, or a dir with {SYNTHETIC_FILE}",
        )
    cfg = _read_json(config)
    if not isinstance(cfg, dict):
        raise EngineError("config.json is not a JSON object", path=config)

    if "builder_config" in cfg and "plugin_config" in cfg:
        check_config(OldLayout, cfg, config)
        fields = parse_old(directory, cfg)
        kind: EngineKind = "trtllm"
    elif "pretrained_config" in cfg and "build_config" in cfg:
        check_config(NewLayout, cfg, config)
        fields = parse_new(directory, cfg)
        kind = "trtllm"
    elif "architecture" in cfg and "mapping" in cfg:
        raise EngineError(
            "this is a TensorRT-LLM checkpoint (convert_checkpoint.py output), not an engine",
            path=config,
            hint=f"build it first: trtllm-build --checkpoint_dir {directory} --output_dir <engine_dir>",
        )
    elif cfg.get("architectures"):
        check_config(HFConfig, cfg, config, what="a Hugging Face checkpoint's config.json")
        weights = list_files(directory, WEIGHT_PATTERNS)
        if not weights:
            raise EngineError(
                "config.json is a Hugging Face model config (architectures "
                f"{cfg['architectures']}), but the directory has no weights (*.safetensors, *.bin) and no "
                "build_config/pretrained_config: it is neither a TensorRT-LLM engine nor an HF checkpoint",
                path=config,
                hint="point --engine-dir at the trtllm-build output dir (config.json with "
                "build_config + rank*.engine), or at a full HF checkpoint for the CPU engine",
            )
        fields = parse_hf(directory, cfg)
        fields["weight_files"] = weights
        kind = "hf"
    else:
        raise EngineError(
            "config.json is neither a TensorRT-LLM engine config (builder_config + plugin_config, or "
            "pretrained_config + build_config) nor a Hugging Face config (architectures)",
            path=config,
            hint="engine_dir must be the trtllm-build --output_dir",
        )

    _check_lengths(fields, config, kind, cfg)
    if kind == "trtllm":
        fields["rank_files"] = tuple(sorted(list_files(directory, ENGINE_PATTERNS), key=rank_index))
    info = EngineInfo(kind=kind, dir=directory, **fields)
    if not info.is_decoder:
        why = (
            "the engine was built without gpt_attention_plugin (plugin_config.gpt_attention_plugin is off), "
            "so it cannot generate tokens"
            if info.kind == "trtllm" and info.gpt_attention_plugin is None
            else "it is not a causal (text-generation) language model"
        )
        raise EngineError(
            f"architecture {info.architecture} is an encoder, not a text-generation decoder: {why}",
            path=config,
            hint="repo-builder serves decoder (GPT-style) engines built with trtllm-build --gpt_attention_plugin auto",
        )
    return info


def _check_lengths(fields: dict[str, Any], config: Path, kind: str, cfg: dict[str, Any]) -> None:
    """Lengths that contradict each other (tokens): max_seq_len (prompt + output) below max_input_len, or
    no room for a single generated token in an HF checkpoint.

    Raises:
        EngineError: naming the key of config.json that is too small.
    """
    max_input, max_seq = fields["max_input_len"], fields["max_seq_len"]
    if kind == "hf":
        if max_seq < 2:
            raise EngineError(
                f"max_position_embeddings {max_seq} leaves no room for a prompt and one generated token",
                key="max_position_embeddings",
                path=config,
            )
        return
    if max_seq >= max_input:
        return
    if fields.get("layout") == "old":
        key = (
            "builder_config.max_output_len"
            if "max_output_len" in cfg["builder_config"]
            else "builder_config.max_position_embeddings"
        )
    else:
        build = cfg["build_config"]
        key = (
            "build_config.max_seq_len"
            if build.get("max_seq_len") is not None
            else "build_config.max_output_len"
            if build.get("max_output_len") is not None
            else "pretrained_config.max_position_embeddings"
        )
    raise EngineError(
        f"the maximum sequence length (prompt + output) {max_seq} is below max_input_len {max_input}",
        key=key,
        path=config,
        hint="the engine cannot hold its own longest prompt; rebuild it with "
        "trtllm-build --max_seq_len above --max_input_len",
    )
