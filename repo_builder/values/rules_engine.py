"""Rules of the engine's shape and the user's flags: ``--streaming`` vs decoupled_mode (B29), the end id (B20),
rank files (B11), engine limits (B07, B08), instance count (B10), logits dtype (B09), device and participant
ids (B12). Registered in :data:`repo_builder.values.rules.RULES`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from ..engine import check_rank_files
from ..errors import EngineError
from ..profile.dtypes import triton_dtype
from .findings import BUILD, Blame, Finding, RuleContext, Severity


# ------------------------------------------------------------------------------------------- user and tokenizer
def streaming_flag(ctx: RuleContext) -> Iterator[Finding]:
    """``--streaming`` / ``--no-streaming`` and a user's decoupled_mode that says the opposite (B29)."""
    if ctx.streaming is None or ctx.user is None or "decoupled_mode" not in ctx.values:
        return
    given = ctx.user.get("decoupled_mode")
    if "decoupled_mode" in ctx.user and given is not bool(ctx.streaming):
        yield Finding(
            "decoupled_mode",
            f"{given} contradicts --{'streaming' if ctx.streaming else 'no-streaming'}; give only one of them",
        )


def end_id(ctx: RuleContext) -> Iterator[Finding]:
    """B20: a tokenizer whose files name no end id, and no end_id set: generation would never stop."""
    tok = ctx.tokenizer
    if tok is not None and tok.end_id is None and ctx.v("end_id") is None and "end_id" in ctx.values:
        yield Finding("end_id", f"{tok.special_ids_error or 'no end id found'} (B20)", blame="tokenizer")


# ------------------------------------------------------------------------------------------- engine shape
def rank_files(ctx: RuleContext) -> Iterator[Finding]:
    """B11: rank0.engine .. rank{tp x pp - 1}.engine must all be there."""
    try:
        check_rank_files(ctx.engine)
    except EngineError as exc:
        yield Finding("engine_dir", exc.message, blame="engine")


@dataclass(frozen=True)
class EngineLimit:
    """A row of :data:`ENGINE_LIMITS`: parameter ``key`` may not exceed the engine's ``field``.

    ``message`` is formatted with ``value`` (the parameter's), ``limit`` (the engine's) and ``build``
    (``trtllm-build``); ``severity`` and ``blame`` go to the :class:`Finding`. ``only_by_user``: the row
    checks a user's choice only (:meth:`RuleContext.by_user`; trtllm-0.5's 128 is v0.5.0's own fixed value).
    """

    key: str
    field: str
    message: str
    severity: Severity = "error"
    blame: Blame = "parameter"
    only_by_user: bool = False


#: Parameters bounded by an engine build setting (B08: a larger Triton batch still runs at most the engine's
#: batch at once, a warning; B07: the backend refuses to load with a beam width above the engine's).
ENGINE_LIMITS = (
    EngineLimit(
        "triton_max_batch_size",
        "max_batch_size",
        "{value} is above the engine's max_batch_size {limit}: the engine runs at most {limit} requests at once; "
        "a larger batch needs `{build} --max_batch_size` (B08)",
        severity="warning",
        only_by_user=True,
    ),
    EngineLimit(
        "max_beam_width",
        "max_beam_width",
        "{value} is above the engine's max_beam_width {limit} (rebuild with `{build} --max_beam_width {value}`) (B07)",
        blame="engine",
    ),
)


def engine_limits(ctx: RuleContext) -> Iterator[Finding]:
    """B07, B08: every row of :data:`ENGINE_LIMITS`."""
    for row in ENGINE_LIMITS:
        if row.only_by_user and not ctx.by_user(row.key):
            continue
        value, limit = ctx.v(row.key), getattr(ctx.engine, row.field)
        if isinstance(value, int) and value > limit:
            text = row.message.format(value=value, limit=limit, build=BUILD)
            yield Finding(row.key, text, severity=row.severity, blame=row.blame)


def instance_count(ctx: RuleContext) -> Iterator[Finding]:
    """B10: one tensorrt_llm instance drives every GPU of the engine (a TensorRT-LLM engine; repo-builder's
    Python engines, ``hf`` and ``synthetic``, run as several independent instances)."""
    count = ctx.v("tensorrt_llm_instance_count")
    if isinstance(count, int) and count != 1 and ctx.engine.kind == "trtllm":
        yield Finding(
            "tensorrt_llm_instance_count",
            f"{count} instances of tensorrt_llm are not supported (one "
            'instance drives all GPUs of the engine); for replicas set gpu_device_ids (e.g. "0,1;2,3") '
            "and participant_ids, or render one repository per replica (B10)",
        )


def logits_dtype(ctx: RuleContext) -> Iterator[Finding]:
    """B09: logits outputs must have the engine's logits dtype or they are misread."""
    want = triton_dtype(ctx.engine.logits_dtype)
    have = ctx.v("logits_datatype")
    if want is not None and have is not None and have != want:
        yield Finding(
            "logits_datatype",
            f"{have} contradicts the engine's logits dtype {ctx.engine.logits_dtype} "
            f"({want}); logits would be misread (B09) - drop the key to take it from the engine",
            blame="engine",
        )


def device_groups(ctx: RuleContext) -> Iterator[Finding]:
    """The world size in gpu_device_ids / participant_ids: each ``;``-separated group lists the devices (or MPI
    ranks) of one tensorrt_llm instance, one per rank of the engine (tensorrtllm_backend v0.19.0 docs, data
    parallelism: ``gpu_device_ids "0,1;2,3"`` with ``participant_ids "1,2;3,4"`` for a tp-2 engine). A group with
    fewer ids than the engine's tp x pp ranks leaves ranks without a device of their own (a warning: extra ids
    are unused, fewer are a fill made for another engine)."""
    if not ctx.is_trt:
        return
    world = ctx.engine.world_size
    for key in ("gpu_device_ids", "participant_ids"):
        groups = ctx.v(key)
        if not isinstance(groups, list):
            continue
        short = [g for g in groups if isinstance(g, list) and len(g) < world]
        if short:
            shown = ";".join(",".join(str(i) for i in g) for g in groups)
            yield Finding(
                key,
                f"{shown!r} lists {len(short[0])} id(s) for an instance, but the engine's world size is {world} "
                f"(tp {ctx.engine.tp_size} x pp {ctx.engine.pp_size}): each `;`-separated group needs one id per "
                "rank; was the repository filled for another engine?",
                severity="warning",
                blame="engine",
            )


def _groups_text(groups: list[list[int]]) -> str:
    return ";".join(",".join(str(i) for i in g) for g in groups)


def placement_findings(values: Mapping[str, Any], world_size: int, *, world_source: str) -> list[Finding]:
    """gpu_device_ids, participant_ids and the tensorrt_llm instance_group against each other and against the
    engine's world size (``world_source`` says where it came from: the engine's tp x pp, or the lock file).

    Facts (tensorrtllm_backend v0.19.0 docs/model_config.md, TensorRT-LLM ``WorldConfig``): each ``;``-separated
    group of gpu_device_ids is one tensorrt_llm instance, one id per rank (rank r of the instance runs on the
    group's r-th id); participant_ids lists the MPI ranks of each instance the same way; Triton creates one
    instance per GPU listed in a KIND_GPU ``instance_group`` (times its count), while the C++ backend places its
    ranks itself (NVIDIA's templates use KIND_CPU). Short groups are the ``device_groups`` rule's.
    """
    gpus = values.get("gpu_device_ids")
    parts = values.get("participant_ids")
    gpus = [g for g in gpus if isinstance(g, list)] if isinstance(gpus, list) else None
    parts = [g for g in parts if isinstance(g, list)] if isinstance(parts, list) else None
    out: list[Finding] = []
    for key, groups in (("gpu_device_ids", gpus), ("participant_ids", parts)):
        if groups:
            out.extend(_group_findings(key, groups, world_size, world_source))
    if gpus and parts:
        out.extend(_pairing_findings(gpus, parts))
    out.extend(_instance_kind_findings(values, gpus, world_size))
    return out


def _group_findings(key: str, groups: list[list[int]], world_size: int, world_source: str) -> list[Finding]:
    """The groups of one ids parameter (gpu_device_ids or participant_ids): no id twice in an instance, no more
    ids than the engine has ranks, no id shared by two instances."""
    out: list[Finding] = []
    shown = _groups_text(groups)
    what = "GPU" if key == "gpu_device_ids" else "MPI rank"
    for n, group in enumerate(groups):
        dup = sorted({i for i in group if group.count(i) > 1})
        if dup:
            out.append(
                Finding(
                    key,
                    f"{shown!r}: instance {n} lists {what} {', '.join(map(str, dup))} twice: each rank of an "
                    f"instance needs its own {what}",
                )
            )
        if len(group) > world_size:
            out.append(
                Finding(
                    key,
                    f"{shown!r}: instance {n} lists {len(group)} ids, but the engine's world size is {world_size} "
                    f"({world_source}): ids {','.join(map(str, group[world_size:]))} are never used",
                    severity="warning",
                    blame="engine",
                )
            )
    seen: dict[int, int] = {}
    for n, group in enumerate(groups):
        for i in group:
            if seen.setdefault(i, n) != n:
                out.append(
                    Finding(
                        key,
                        f"{shown!r}: {what} {i} is in instance {seen[i]} and instance {n}; instances must not "
                        f"share a {what}",
                        severity="warning" if key == "gpu_device_ids" else "error",
                    )
                )
                break
        else:
            continue
        break
    return out


def _pairing_findings(gpus: list[list[int]], parts: list[list[int]]) -> list[Finding]:
    """gpu_device_ids and participant_ids: one participant group per device group, one rank per GPU."""
    out: list[Finding] = []
    if len(gpus) != len(parts):
        out.append(
            Finding(
                "participant_ids",
                f"{_groups_text(parts)!r} has {len(parts)} instance group(s), gpu_device_ids "
                f"{_groups_text(gpus)!r} has {len(gpus)}: one participant group per device group",
            )
        )
    else:
        for n, (g, q) in enumerate(zip(gpus, parts, strict=True)):
            if len(g) != len(q):
                out.append(
                    Finding(
                        "participant_ids",
                        f"instance {n}: {len(q)} MPI rank(s) ({','.join(map(str, q))}) for {len(g)} GPU(s) "
                        f"({','.join(map(str, g))}) in gpu_device_ids: one rank per GPU",
                    )
                )
    return out


def _instance_kind_findings(values: Mapping[str, Any], gpus: list[list[int]] | None, world_size: int) -> list[Finding]:
    """A KIND_GPU instance_group of tensorrt_llm: Triton's instances against the backend's own rank placement."""
    out: list[Finding] = []
    kind = values.get("tensorrt_llm_instance_kind")
    listed = values.get("tensorrt_llm_instance_gpus")
    if kind == "KIND_GPU":
        listed_text = f"gpus [{', '.join(map(str, listed))}]" if listed else "no gpus (one instance per visible GPU)"
        if gpus and listed and list(listed) != gpus[0][: len(listed)]:
            out.append(
                Finding(
                    "tensorrt_llm_instance_kind",
                    f"KIND_GPU with {listed_text} disagrees with gpu_device_ids {_groups_text(gpus)!r}, which "
                    "places the ranks; use KIND_CPU and let gpu_device_ids say where they run",
                )
            )
        else:
            out.append(
                Finding(
                    "tensorrt_llm_instance_kind",
                    f"KIND_GPU with {listed_text}: Triton creates one tensorrt_llm instance per listed GPU, while "
                    f"the C++ backend places its {world_size} rank(s) itself (gpu_device_ids, default the visible "
                    "GPUs in order); NVIDIA's templates and repo-builder use KIND_CPU",
                    severity="warning",
                )
            )
    return out


def gpu_placement(ctx: RuleContext) -> Iterator[Finding]:
    """:func:`placement_findings` with the engine's world size (tp x pp)."""
    if not ctx.is_trt:
        return
    e = ctx.engine
    yield from placement_findings(ctx.values, e.world_size, world_source=f"tp {e.tp_size} x pp {e.pp_size}")
