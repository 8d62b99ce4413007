"""Rules of streaming (B30) and the decoding features: lookahead, speculative decoding (Medusa, EAGLE,
draft tokens), guided decoding with xgrammar. Registered in :data:`repo_builder.values.rules.RULES`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from ..engine import EngineInfo
from .findings import Finding, RuleContext

# ------------------------------------------------------------------------------------------- streaming
#: Settings that work with beam width 1 only (B30: TRT-LLM streams only with beam width 1; accumulation too):
#: (parameter, message formatted with ``beam``); warnings, since a request may still ask for beam width 1.
BEAM_ONE_ONLY = (
    (
        "decoupled_mode",
        "streaming with max_beam_width {beam}: streaming requests must use beam_width 1 (beam search is only "
        "returned whole) (B30)",
    ),
    ("accumulate_tokens", "with max_beam_width {beam}: accumulation works with beam_width 1 only (B30)"),
)


def streaming_beam(ctx: RuleContext) -> Iterator[Finding]:
    """B30: every row of :data:`BEAM_ONE_ONLY` that is on while max_beam_width > 1."""
    for key, message in BEAM_ONE_ONLY:
        if ctx.v(key) and ctx.beam > 1:
            yield Finding(key, message.format(beam=ctx.beam), severity="warning")


def postprocessing_state(ctx: RuleContext) -> Iterator[Finding]:
    """Several streaming postprocessing instances share their streams' detokenizer states in the order of
    the engine's ``token_offset`` (runtime/stream_state.py), which only repo-builder's Python engines send."""
    post = ctx.v("postprocessing_instance_count")
    if ctx.v("decoupled_mode") and isinstance(post, int) and post > 1 and ctx.is_trt:
        yield Finding(
            "postprocessing_instance_count",
            f"{post} with streaming: the instances share a stream's detokenizer state in the order of the "
            "engine's token_offset output, which TensorRT-LLM's backend does not send; use 1",
        )


# ------------------------------------------------------------------------------------------- decoding features
def lookahead(ctx: RuleContext) -> Iterator[Finding]:
    """The backend fails to load lookahead decoding without its three sizes."""
    if ctx.v("decoding_mode") == "lookahead":
        missing = [
            k
            for k in ("lookahead_window_size", "lookahead_ngram_size", "lookahead_verification_set_size")
            if ctx.v(k) is None
        ]
        if missing:
            yield Finding(
                "decoding_mode", f"lookahead needs {', '.join(missing)} (the backend fails to load without them)"
            )


#: ``decoding_mode`` values of the speculative algorithms -> the engine's ``speculative_decoding_mode`` (the
#: names :data:`repo_builder.engine.SPECULATIVE_MODES` gives ``build_config.speculative_decoding_mode``).
SPECULATIVE_DECODING_MODES = {"medusa": "medusa", "eagle": "eagle", "lookahead": "lookahead_decoding"}
#: The tree parameter of each tree-based engine mode.
TREE_KEYS = {"medusa": "medusa_choices", "eagle": "eagle_choices"}
LOOKAHEAD_KEYS = ("lookahead_window_size", "lookahead_ngram_size", "lookahead_verification_set_size")


def lookahead_draft_tokens(window: int, ngram: int, verification: int) -> int:
    """Draft tokens one lookahead step needs for the triple (W, N, G): ``(N - 2) + (W - 1 + G) * (N - 1)``
    (0 when N is 1), i.e. ``(W + G) * (N - 1) - 1``. NVIDIA/TensorRT-LLM
    ``cpp/tensorrt_llm/executor/decodingConfig.cpp`` ``LookaheadDecodingConfig::calculateSpeculativeResourceTuple``;
    the executor requires it to be at most the engine's ``max_draft_len``
    (``batch_manager/trtGptModelInflightBatching.cpp``; triton-inference-server/tensorrtllm_backend#710)."""
    return (0 if ngram == 1 else ngram - 2) + (window - 1 + verification) * (ngram - 1)


def tree_problems(choices: list[list[int]], max_draft_len: int, max_depth: int | None) -> list[str]:
    """What TensorRT-LLM refuses in a Medusa / EAGLE tree (``[[0], [0, 0], [1]]``: each choice is the path of a
    node) for an engine of ``max_draft_len`` draft tokens whose paths are at most ``max_depth`` deep.

    Facts (NVIDIA/TensorRT-LLM ``cpp/tensorrt_llm/runtime/utils/speculativeChoicesUtils.cpp``
    ``initTensorsFromChoices``, checks that fail the request): the number of choices is at most the engine's
    ``max_draft_len``; the depths follow one another from 1 or 2 (no level is skipped); no choice is deeper than the
    engine's draft path length ("Choices require larger maxPathLen than the engine was built with").
    """
    if not choices:
        return ["is empty: a tree needs at least one choice"]
    out: list[str] = []
    if len({tuple(c) for c in choices}) != len(choices):
        out.append("lists a choice twice")
    if any(len(c) == 0 for c in choices):
        out.append("has an empty choice ({}): the root is implied")
    if len(choices) > max_draft_len:
        out.append(f"has {len(choices)} choices; the engine's max_draft_len is {max_draft_len} (one draft token each)")
    depths = sorted({len(c) for c in choices if c})
    level = 1  # TensorRT-LLM starts at depth 1 and takes each deeper level only as the next one
    for d in depths:
        if d not in (level, level + 1):
            out.append(f"has no choice of depth {level + 1}: the levels of a tree follow one another")
            break
        level = d
    if max_depth is not None and depths and depths[-1] > max_depth:
        out.append(f"is {depths[-1]} levels deep; the engine's draft paths are at most {max_depth} long")
    return out


def tree_orphans(choices: list[list[int]]) -> list[str]:
    """Choices whose parent path is not a choice (``{1, 0}`` without ``{1}``), as ``{1, 0}``: TensorRT-LLM does not
    refuse them but hangs them from the root's slot, so the tree it runs is not the one written."""
    seen = {tuple(c) for c in choices}
    return ["{" + ", ".join(str(i) for i in c) + "}" for c in choices if len(c) > 1 and tuple(c[:-1]) not in seen]


def _eagle_problems(engine: EngineInfo, choices: list[list[int]], depth: int | None) -> list[str]:
    """What EAGLE-1 refuses, beyond :func:`tree_problems`, in an ``eagle_choices`` tree (each choice the path of a
    node) for ``engine``, whose draft paths are ``depth`` (``num_eagle_layers``) deep: a tree not exactly ``depth``
    levels deep, and the first level with more inner nodes than ``max_non_leaves_per_layer``. Returns the
    messages, in that order (empty: nothing refused)."""
    problems: list[str] = []
    deepest = max(len(c) for c in choices)
    if depth is not None and deepest != depth:
        problems.append(f"is {deepest} levels deep; EAGLE-1 needs exactly num_eagle_layers ({depth}) levels")
    limit = engine.max_non_leaves_per_layer
    inner: dict[int, int] = {}
    prefixes = {tuple(c[:-1]) for c in choices if len(c) > 1}
    for c in choices:
        if tuple(c) in prefixes:
            inner[len(c)] = inner.get(len(c), 0) + 1
    if limit is not None:
        over = next(((lvl, n) for lvl, n in sorted(inner.items()) if n > limit), None)
        if over is not None:
            problems.append(
                f"has {over[1]} inner nodes at level {over[0]}; the engine's max_non_leaves_per_layer is {limit}"
            )
    return problems


def _tree_findings(engine: EngineInfo, built: str, tree_mode: str, key: str, choices: Any) -> Iterator[Finding]:
    """The findings on the non-empty tree ``choices`` of parameter ``key`` (``medusa_choices`` / ``eagle_choices``,
    read by a ``tree_mode`` engine) for ``engine``, whose speculative_decoding_mode is ``built``: a wrong engine
    mode (then nothing else), else every :func:`tree_problems` (and :func:`_eagle_problems` for EAGLE when the
    tree has none), else a warning on :func:`tree_orphans`."""
    if built != tree_mode:
        yield Finding(key, f"is read by a {tree_mode} engine only; this engine's speculative_decoding_mode is {built}")
        return
    depth = engine.num_medusa_heads if tree_mode == "medusa" else engine.num_eagle_layers
    problems = tree_problems([list(c) for c in choices], engine.max_draft_len, depth)
    if tree_mode == "eagle" and not problems:
        problems.extend(_eagle_problems(engine, choices, depth))
    for problem in problems:
        yield Finding(key, problem)
    orphans = tree_orphans([list(c) for c in choices])
    if orphans and not problems:
        yield Finding(
            key,
            f"has {', '.join(orphans)} without the parent path: TensorRT-LLM attaches such a node to a parent "
            "slot that holds no draft token, so the tree served is not this one; list every prefix too",
            severity="warning",
        )


def _lookahead_findings(ctx: RuleContext, built: str) -> Iterator[Finding]:
    """The finding, if any, on the lookahead triple (W, N, G) of ``ctx`` when all three are ints, for an engine
    whose speculative_decoding_mode is ``built``: the first of a non-lookahead engine, an illegal ``ngram`` 1
    triple, or more draft tokens (:func:`lookahead_draft_tokens`) than the engine's ``max_draft_len``."""
    triple = [ctx.v(k) for k in LOOKAHEAD_KEYS]
    if not all(isinstance(v, int) for v in triple):
        return
    window, ngram, verification = triple
    if built != "lookahead_decoding":
        yield Finding(
            "lookahead_window_size",
            "lookahead sizes need an engine built with `--speculative_decoding_mode lookahead_decoding`; this "
            f"engine's speculative_decoding_mode is {built}",
        )
        return
    if ngram == 1 and (window != 1 or verification != 0):
        yield Finding("lookahead_ngram_size", "1 needs lookahead_window_size 1 and lookahead_verification_set_size 0")
        return
    engine = ctx.engine
    need = lookahead_draft_tokens(window, ngram, verification)
    if need > engine.max_draft_len:
        yield Finding(
            "lookahead_window_size",
            f"(W, N, G) = ({window}, {ngram}, {verification}) needs (W + G) * (N - 1) - 1 = {need} draft tokens; "
            f"the engine was built with max_draft_len {engine.max_draft_len} (rebuild with --max_draft_len "
            f"{need} or lower the sizes)",
        )


def speculative_engine(ctx: RuleContext) -> Iterator[Finding]:
    """Medusa / EAGLE / lookahead parameters against the engine's config.json (a TensorRT-LLM engine only).

    * ``decoding_mode`` medusa / eagle / lookahead needs an engine built in that speculative mode (the engine's
      ``build_config.speculative_decoding_mode``; trtllm-build ``--speculative_decoding_mode``);
    * ``medusa_choices`` / ``eagle_choices`` only mean something to an engine of that mode, and must fit it
      (:func:`tree_problems`: ``max_draft_len``, ``pretrained_config.num_medusa_heads`` for Medusa; EAGLE-1 also
      needs the tree exactly ``num_eagle_layers`` deep, "EAGLE-1 requires Eagle-tree depth being equal to the
      number of build-time EAGLE layers", and at most ``max_non_leaves_per_layer`` inner nodes per level);
    * the lookahead triple needs a ``lookahead_decoding`` engine whose ``max_draft_len`` holds
      :func:`lookahead_draft_tokens`, and is legal (``ngram`` 1 needs window 1 and verification set 0).

    Facts: NVIDIA/TensorRT-LLM ``cpp/tensorrt_llm/runtime/gptJsonConfig.cpp`` (which config.json keys size each
    mode), ``runtime/utils/speculativeChoicesUtils.cpp``, ``batch_manager/createNewDecoderRequests.cpp`` and
    ``executor/decodingConfig.cpp``, read at the 1.2 line (the trtllm-1.2 profile).
    """
    if not ctx.is_trt:
        return
    engine = ctx.engine
    mode = engine.speculative_decoding_mode
    built = mode if mode not in (None, "none") else "none"
    asked = ctx.v("decoding_mode")
    needed = SPECULATIVE_DECODING_MODES.get(asked) if isinstance(asked, str) else None
    if needed is not None and needed != built:
        yield Finding(
            "decoding_mode",
            f"{asked} needs an engine built with `--speculative_decoding_mode {needed}`; this engine's "
            f"speculative_decoding_mode is {built}",
        )
    for tree_mode, key in TREE_KEYS.items():
        choices = ctx.v(key)
        if choices:
            yield from _tree_findings(engine, built, tree_mode, key, choices)
    yield from _lookahead_findings(ctx, built)


#: Keys of the xgrammar tokenizer-info JSON the C++ backend reads (tensorrtllm_backend docs/guided_decoding.md,
#: v0.19.0: written by its tools/generate_xgrammar_tokenizer_info.py).
XGRAMMAR_KEYS = ("encoded_vocab", "tokenizer_str", "stop_token_ids")


def guided_decoding(ctx: RuleContext) -> Iterator[Finding]:
    """guided_decoding_backend=xgrammar needs xgrammar_tokenizer_info_path, a JSON file with the vocabulary."""
    if ctx.v("guided_decoding_backend") != "xgrammar" or not ctx.is_trt:
        return
    path = ctx.v("xgrammar_tokenizer_info_path")
    if not path:
        yield Finding(
            "xgrammar_tokenizer_info_path",
            "unset, but guided_decoding_backend is xgrammar: the backend "
            f"needs the tokenizer-info JSON ({', '.join(XGRAMMAR_KEYS)}); generate it with "
            "tensorrtllm_backend's tools/generate_xgrammar_tokenizer_info.py and set this path",
        )
        return
    local = ctx.local_path(str(path))
    if not local.is_file():
        yield Finding(
            "xgrammar_tokenizer_info_path",
            f"'{path}' is not a file (guided decoding with xgrammar reads the tokenizer info from it)",
        )
        return
    try:
        data = json.loads(local.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        yield Finding("xgrammar_tokenizer_info_path", f"'{path}' is not readable JSON: {exc}")
        return
    missing = [k for k in XGRAMMAR_KEYS if not isinstance(data, dict) or k not in data]
    if missing:
        yield Finding(
            "xgrammar_tokenizer_info_path",
            f"'{path}' lacks {', '.join(missing)} (expected the output of generate_xgrammar_tokenizer_info.py)",
        )
