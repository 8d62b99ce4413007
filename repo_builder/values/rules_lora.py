"""Rules of LoRA: the cache settings against the engine's LoRA build, adapters in ``lora_prefetch_dir``
(TensorRT-LLM's ``.npy`` layout) and the LoRA weights dtype. Registered in
:data:`repo_builder.values.rules.RULES`.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from ..engine import EngineInfo
from ..profile.dtypes import triton_dtype
from .findings import BUILD, Finding, RuleContext

LORA_KEYS = (
    "lora_cache_optimal_adapter_size",
    "lora_cache_max_adapter_size",
    "lora_cache_gpu_memory_fraction",
    "lora_cache_host_memory_bytes",
    "lora_prefetch_dir",
)


def lora_adapter_bytes(engine: EngineInfo) -> int | None:
    """Bytes of one LoRA adapter at the engine's max_lora_rank: per layer and target module, A (rank x hidden)
    and B (hidden x rank) in the model dtype; None when a fact is missing."""
    rank, hidden, layers = engine.max_lora_rank, engine.hidden_size, engine.num_layers
    size = engine.kv_cache_bytes_per_value
    if not rank or not hidden or not layers or not size:
        return None
    modules = max(1, len(engine.lora_target_modules))
    return 2 * rank * hidden * modules * layers * size


def lora(ctx: RuleContext) -> Iterator[Finding]:
    """LoRA cache settings against the engine's LoRA build (plugin, max rank)."""
    if not ctx.is_trt:
        return
    given = [k for k in LORA_KEYS if ctx.v(k) is not None]
    if not given:
        return
    if ctx.engine.lora_plugin is None:
        yield Finding(
            given[0],
            f"the engine was built without the LoRA plugin, so {', '.join(given)} have no effect "
            f"(rebuild with `{BUILD} --lora_plugin auto --lora_dir ...`, or drop them)",
            severity="warning",
        )
    opt, mx = ctx.v("lora_cache_optimal_adapter_size"), ctx.v("lora_cache_max_adapter_size")
    if isinstance(opt, int) and isinstance(mx, int) and opt > mx:
        yield Finding("lora_cache_optimal_adapter_size", f"{opt} is above lora_cache_max_adapter_size {mx}")
    host = ctx.v("lora_cache_host_memory_bytes")
    one = lora_adapter_bytes(ctx.engine)
    if isinstance(host, int) and host > 0:
        if one is not None and host < one:
            yield Finding(
                "lora_cache_host_memory_bytes",
                f"{host} bytes cannot hold one adapter at the engine's "
                f"max_lora_rank {ctx.engine.max_lora_rank} ({one} bytes); the minimum that works is {one}",
            )
        elif one is None and host < 1 << 20:
            yield Finding(
                "lora_cache_host_memory_bytes",
                f"{host} bytes is too small for any LoRA adapter (use at least 1 MiB; the upstream docs suggest 1 GB)",
            )
    prefetch = ctx.v("lora_prefetch_dir")
    if prefetch:
        local = ctx.local_path(str(prefetch))
        if not local.is_dir():
            yield Finding(
                "lora_prefetch_dir",
                f"'{prefetch}' is not an existing directory (the executor silently "
                "skips a missing one, so no adapter would be preloaded)",
            )


#: TensorRT-LLM's LoRA module ids (``LoraModule::ModuleType``, ``cpp/include/tensorrt_llm/runtime/loraModule.h``):
#: column 0 of an adapter's ``lora_config`` rows; the names are those of ``lora_target_modules``.
LORA_MODULE_IDS = {
    0: "attn_qkv",
    1: "attn_q",
    2: "attn_k",
    3: "attn_v",
    4: "attn_dense",
    5: "mlp_h_to_4h",
    6: "mlp_4h_to_h",
    7: "mlp_gate",
    8: "cross_attn_qkv",
    9: "cross_attn_q",
    10: "cross_attn_k",
    11: "cross_attn_v",
    12: "cross_attn_dense",
    13: "moe_h_to_4h",
    14: "moe_4h_to_h",
    15: "moe_gate",
    16: "moe_router",
    17: "mlp_router",
    18: "mlp_gate_up",
}
#: The files of one prefetched adapter: ``<lora_prefetch_dir>/<task id>/model.lora_{weights,config}.npy``
#: (TensorRT-LLM ``PeftCacheManager::prefetchLoraWeights``).
LORA_WEIGHTS_FILE, LORA_CONFIG_FILE = "model.lora_weights.npy", "model.lora_config.npy"


def _npy_header(path: Path) -> tuple[str, tuple[int, ...]]:
    """(numpy dtype name, shape) of a ``.npy`` file from its header, without reading the data.

    Raises:
        ValueError: not a .npy file.
    """
    import numpy as np

    with open(path, "rb") as f:
        version = np.lib.format.read_magic(f)
        if version == (1, 0):
            shape, _, dtype = np.lib.format.read_array_header_1_0(f)
        else:
            shape, _, dtype = np.lib.format.read_array_header_2_0(f)
    return str(dtype), tuple(int(d) for d in shape)


def lora_adapter_problems(engine: EngineInfo, adapter: Path) -> list[str]:
    """What keeps one LoRA adapter folder (``model.lora_weights.npy`` [1?, rows, size] and
    ``model.lora_config.npy`` [1?, rows, 3] int32: module id, layer, rank) from loading into ``engine``: TensorRT-LLM
    ``loraValidateRequestTensors`` refuses weights of another dtype than the base model's, a layer outside [0,
    layers), a rank of 0 or above the engine's max_lora_rank, and a module the engine was not built for. Returns
    the problems, each one line naming the file."""
    import numpy as np

    weights, config = adapter / LORA_WEIGHTS_FILE, adapter / LORA_CONFIG_FILE
    missing = [p.name for p in (weights, config) if not p.is_file()]
    if missing:
        return [f"{adapter.name}/: lacks {', '.join(missing)}"]
    out: list[str] = []
    try:
        wdtype, wshape = _npy_header(weights)
    except (OSError, ValueError) as exc:
        return [f"{adapter.name}/{weights.name}: not a .npy file ({exc})"]
    want = _DTYPE_NAMES.get(str(engine.lora_dtype or engine.dtype), str(engine.lora_dtype or engine.dtype))
    have = _DTYPE_NAMES.get(wdtype, wdtype)
    if want in _DTYPE_NAMES.values() and have != want:
        out.append(
            f"{adapter.name}/{weights.name}: dtype {have}, but the engine's LoRA weights are {want} (the "
            "backend refuses weights of another dtype than the base model's); convert the adapter to "
            f"{want}"
        )
    try:
        rows = np.load(config, allow_pickle=False)
    except (OSError, ValueError) as exc:
        return [*out, f"{adapter.name}/{config.name}: not a .npy file ({exc})"]
    if rows.ndim == 3 and rows.shape[0] == 1:
        rows = rows[0]
    if rows.ndim != 2 or rows.shape[1] < 3 or not np.issubdtype(rows.dtype, np.integer):
        return [
            *out,
            f"{adapter.name}/{config.name}: shape {list(rows.shape)} {rows.dtype}, expected [rows, 3] integers "
            "(module id, layer, rank)",
        ]
    wrows = wshape[-2] if len(wshape) >= 2 else None
    if wrows is not None and wrows != rows.shape[0]:
        out.append(
            f"{adapter.name}/: {weights.name} has {wrows} rows but {config.name} {rows.shape[0]}: one weights "
            "row per config row"
        )
    targets = set(engine.lora_target_modules)
    known = set(LORA_MODULE_IDS.values())
    bad_modules: set[str] = set()
    for module_id, layer, rank in (tuple(int(v) for v in r[:3]) for r in rows):
        name = LORA_MODULE_IDS.get(module_id, f"module id {module_id}")
        if targets and name not in targets and (module_id in LORA_MODULE_IDS or targets <= known):
            bad_modules.add(name)
        if engine.num_layers and not 0 <= layer < engine.num_layers:
            last = engine.num_layers - 1
            out.append(f"{adapter.name}/{config.name}: layer {layer} is outside the engine's 0..{last}")
            break
        if rank <= 0 or (engine.max_lora_rank and rank > engine.max_lora_rank):
            out.append(
                f"{adapter.name}/{config.name}: rank {rank} "
                + (
                    f"is above the engine's max_lora_rank {engine.max_lora_rank} (rebuild with "
                    f"`{BUILD} --max_lora_rank {rank}`)"
                    if rank > 0
                    else "must be above 0"
                )
            )
            break
    if bad_modules:
        out.append(
            f"{adapter.name}/{config.name}: module(s) {', '.join(sorted(bad_modules))} are not among the engine's "
            f"lora_target_modules ({', '.join(engine.lora_target_modules)}); rebuild with `{BUILD} "
            "--lora_target_modules ...` naming them"
        )
    return out


#: Spellings of the dtypes LoRA weights come in (numpy's and engine configs'), by the engine's name.
_DTYPE_NAMES = {
    "float16": "float16",
    "half": "float16",
    "fp16": "float16",
    "<f2": "float16",
    "bfloat16": "bfloat16",
    "bf16": "bfloat16",
    "float32": "float32",
    "float": "float32",
    "fp32": "float32",
    "<f4": "float32",
}


def lora_adapters(ctx: RuleContext) -> Iterator[Finding]:
    """Every adapter in lora_prefetch_dir (``<task id>/model.lora_{weights,config}.npy``) against the engine's LoRA
    build (:func:`lora_adapter_problems`): the executor loads them all when it starts, so one bad adapter fails
    the load."""
    prefetch = ctx.v("lora_prefetch_dir")
    if not ctx.is_trt or not prefetch or ctx.engine.lora_plugin is None:
        return
    local = ctx.local_path(str(prefetch))
    if not local.is_dir():
        return  # the lora rule says so
    adapters = sorted((p for p in local.iterdir() if p.is_dir() and p.name.isdigit()), key=lambda p: int(p.name))
    if not adapters:
        yield Finding(
            "lora_prefetch_dir",
            f"'{prefetch}' holds no adapter folder (expected <task id>/{LORA_WEIGHTS_FILE} and {LORA_CONFIG_FILE}, "
            "the task id a number)",
            severity="warning",
        )
    for adapter in adapters:
        for problem in lora_adapter_problems(ctx.engine, adapter):
            yield Finding("lora_prefetch_dir", f"'{prefetch}': {problem}")


def lora_weights_dtype(ctx: RuleContext) -> Iterator[Finding]:
    """The declared dtype of the ``lora_weights`` input against the engine's LoRA dtype: the C++ backend hands the
    tensor on as declared and TensorRT-LLM refuses weights of another dtype than the base model's
    (``loraValidateRequestTensors``), so every LoRA request with weights would fail."""
    have = ctx.v("lora_weights_data_type")
    if not ctx.is_trt or have is None or ctx.engine.lora_plugin is None:
        return
    dtype = ctx.engine.lora_dtype or ctx.engine.dtype
    want = triton_dtype(dtype)
    if want is not None and have != want:
        yield Finding(
            "lora_weights_data_type",
            f"{have} contradicts the engine's LoRA dtype {dtype} ({want}): TensorRT-LLM refuses lora_weights of "
            'another dtype than the base model\'s ("Expected lora weights to be the same data type as base model"), '
            "so every request sending weights would fail; drop the key to take it from the engine",
            blame="engine",
        )
