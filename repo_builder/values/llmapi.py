"""resolve for the llmapi profiles: every model.yaml parameter's value and origin, and the checks against the
Hugging Face checkpoint and its tokenizer.

Order for each parameter (first wins), as :func:`repo_builder.values.resolve.resolve` does it for the engine
profiles: the user's value (``--set`` / ``--values``; ``--streaming`` sets ``triton_config.decoupled``) ->
``user``; the checkpoint's path as the server sees it (``model``) -> ``engine``; the profile default ->
``default``. Then every rule of :data:`LLMAPI_RULES` runs and all problems are raised together.

The rules (each finding names the parameter key; facts of NVIDIA/TensorRT-LLM v1.2.1 and the LLM API):

* ``max_seq_len`` at most the checkpoint's ``max_position_embeddings``;
* ``tensor_parallel_size`` divides ``num_attention_heads`` and fits ``num_key_value_heads`` (divides it, or is
  a multiple of it); ``pipeline_parallel_size`` at most ``num_hidden_layers``;
* ``moe_expert_parallel_size`` / ``moe_tensor_parallel_size`` only with experts; the expert-parallel size
  divides the expert count and ``tensor_parallel_size``; both together multiply to ``tensor_parallel_size``;
* ``trust_remote_code`` must be true when config.json has ``auto_map``;
* ``dtype`` float32 is refused for a quantized checkpoint (the quantized kernels take 16-bit activations);
* ``kv_cache_config.max_tokens`` holds at least one sequence of ``max_seq_len``;
* ``speculative_config.*`` go together (type, draft length, draft model);
* the tokenizer has an end-of-sequence token (``eos_token``): the LLM API stops on it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ..engine.checkpoint import SUPPORTED_ARCHITECTURES, CheckpointFacts
from ..errors import EngineError, ParameterError, RepoBuilderError, TokenizerError
from ..profile.schema import check_text_value, load_schema, validate_user_values
from ..tokenizer import TokenizerInfo
from .resolve import Resolution, ResolvedValue

#: The model of an llmapi repository: the Python-backend ``tensorrt_llm`` that reads ``1/model.yaml``.
LLMAPI_MODEL = "tensorrt_llm"


@dataclass(frozen=True)
class LLMAPIFinding:
    """One problem: the parameter ``key``, the message, who is at fault, and ``warning`` or ``error``."""

    key: str
    message: str
    blame: type[RepoBuilderError] = ParameterError
    severity: str = "error"


Rule = Callable[[CheckpointFacts, TokenizerInfo | None, Mapping[str, Any]], list[LLMAPIFinding]]


def _seq_len(ck: CheckpointFacts, tok: TokenizerInfo | None, v: Mapping[str, Any]) -> list[LLMAPIFinding]:
    limit, asked = ck.max_position_embeddings, v.get("max_seq_len")
    if limit is not None and asked is not None and asked > limit:
        return [
            LLMAPIFinding(
                "max_seq_len",
                f"{asked} is above the checkpoint's max_position_embeddings ({limit}, config.json)",
            )
        ]
    return []


def _parallel(ck: CheckpointFacts, tok: TokenizerInfo | None, v: Mapping[str, Any]) -> list[LLMAPIFinding]:
    out = []
    tp, pp = v.get("tensor_parallel_size") or 1, v.get("pipeline_parallel_size") or 1
    heads, kv, layers = ck.num_attention_heads, ck.num_key_value_heads, ck.num_hidden_layers
    if heads is not None and heads % tp:
        out.append(
            LLMAPIFinding(
                "tensor_parallel_size",
                f"{tp} does not divide the checkpoint's num_attention_heads ({heads}); take a divisor of it",
            )
        )
    if kv is not None and tp > 1 and kv % tp and tp % kv:
        out.append(
            LLMAPIFinding(
                "tensor_parallel_size",
                f"{tp} neither divides nor is a multiple of the checkpoint's num_key_value_heads ({kv})",
            )
        )
    if layers is not None and pp > layers:
        out.append(
            LLMAPIFinding("pipeline_parallel_size", f"{pp} is more than the checkpoint's num_hidden_layers ({layers})")
        )
    ep, moe_tp = v.get("moe_expert_parallel_size"), v.get("moe_tensor_parallel_size")
    for key, value in (("moe_expert_parallel_size", ep), ("moe_tensor_parallel_size", moe_tp)):
        if value is not None and ck.num_experts is None:
            out.append(LLMAPIFinding(key, f"{value} given, but the checkpoint ({ck.architecture}) has no experts"))
    if ck.num_experts is not None and ep is not None:
        if ck.num_experts % ep:
            out.append(
                LLMAPIFinding(
                    "moe_expert_parallel_size", f"{ep} does not divide the checkpoint's {ck.num_experts} experts"
                )
            )
        if tp % ep:
            out.append(LLMAPIFinding("moe_expert_parallel_size", f"{ep} does not divide tensor_parallel_size ({tp})"))
        if moe_tp is not None and ep * moe_tp != tp:
            out.append(
                LLMAPIFinding(
                    "moe_tensor_parallel_size",
                    f"moe_expert_parallel_size x moe_tensor_parallel_size = {ep * moe_tp}, "
                    f"but tensor_parallel_size is {tp}; they must be equal",
                )
            )
    return out


def _checkpoint(ck: CheckpointFacts, tok: TokenizerInfo | None, v: Mapping[str, Any]) -> list[LLMAPIFinding]:
    out = []
    if ck.auto_map and not v.get("trust_remote_code"):
        out.append(
            LLMAPIFinding(
                "trust_remote_code",
                "the checkpoint's config.json has auto_map (custom model code), which the LLM API only runs "
                "with trust_remote_code=true",
                blame=EngineError,
            )
        )
    if ck.quantization is not None and v.get("dtype") == "float32":
        method = ck.quantization.get("quant_method") or ck.quantization.get("quant_algo") or "quantized"
        out.append(
            LLMAPIFinding(
                "dtype",
                f"float32 with a {method} checkpoint ({ck.quantization.get('source')}); use auto, float16 or bfloat16",
            )
        )
    if ck.architecture not in SUPPORTED_ARCHITECTURES:
        out.append(
            LLMAPIFinding(
                "model",
                f"architecture {ck.architecture} is not in TensorRT-LLM 1.2's PyTorch model list; the CPU "
                "stand-in serves it, NVIDIA's container may not",
                severity="warning",
            )
        )
    return out


def _kv_cache(ck: CheckpointFacts, tok: TokenizerInfo | None, v: Mapping[str, Any]) -> list[LLMAPIFinding]:
    tokens = v.get("kv_cache_config.max_tokens")
    seq = v.get("max_seq_len") or ck.max_position_embeddings
    if tokens is not None and seq is not None and tokens < seq:
        return [
            LLMAPIFinding(
                "kv_cache_config.max_tokens",
                f"{tokens} tokens cannot hold one sequence of max_seq_len ({seq}); raise it or lower max_seq_len",
            )
        ]
    return []


def _speculative(ck: CheckpointFacts, tok: TokenizerInfo | None, v: Mapping[str, Any]) -> list[LLMAPIFinding]:
    kind = v.get("speculative_config.decoding_type")
    others = ("speculative_config.max_draft_len", "speculative_config.speculative_model")
    if kind is None:
        return [
            LLMAPIFinding(key, "given without speculative_config.decoding_type")
            for key in others
            if v.get(key) is not None
        ]
    return [
        LLMAPIFinding(key, f"required with speculative_config.decoding_type {kind}")
        for key in others
        if v.get(key) is None
    ]


def _tokenizer(ck: CheckpointFacts, tok: TokenizerInfo | None, v: Mapping[str, Any]) -> list[LLMAPIFinding]:
    if tok is not None and tok.eos_token_id is None and tok.end_id is None:
        return [
            LLMAPIFinding(
                "model",
                f"the tokenizer in {tok.dir} has no end-of-sequence token (eos_token in tokenizer_config.json); "
                "the LLM API stops generation on it",
                blame=TokenizerError,
            )
        ]
    return []


#: The rule table of the llmapi profiles (run by render and by ``validate --engine-dir``).
LLMAPI_RULES: tuple[Rule, ...] = (_seq_len, _parallel, _checkpoint, _kv_cache, _speculative, _tokenizer)


def check_llmapi(ck: CheckpointFacts, tok: TokenizerInfo | None, values: Mapping[str, Any]) -> list[LLMAPIFinding]:
    """Every finding of :data:`LLMAPI_RULES` for ``values`` ({parameter: typed value or None})."""
    out: list[LLMAPIFinding] = []
    for rule in LLMAPI_RULES:
        out.extend(rule(ck, tok, values))
    return out


def resolve_llmapi(
    profile: str,
    checkpoint: CheckpointFacts,
    tokenizer: TokenizerInfo | None,
    user_values: Mapping[str, Any],
    *,
    model_path: str,
    streaming: bool | None = None,
) -> Resolution:
    """Resolve every parameter of the llmapi ``profile`` and check it against the checkpoint and tokenizer.

    Args:
        model_path: the checkpoint folder as the server sees it (the ``model`` key).
        streaming: when given, sets ``triton_config.decoupled``.
    Returns:
        :class:`repo_builder.values.resolve.Resolution` (``world_size`` = tensor x pipeline parallel size).
    Raises:
        ParameterError / EngineError / TokenizerError: every problem at once, one per line naming the key.
    """
    params = load_schema().for_profile(profile)
    user = validate_user_values(profile, user_values, source="the given values") if user_values else {}
    values: dict[str, ResolvedValue] = {}
    problems: list[tuple[type[RepoBuilderError], str]] = []
    for name, param in params.items():
        if name in user:
            values[name] = ResolvedValue(user[name], "user")
        else:
            values[name] = ResolvedValue(param.default_for(profile), "default")
    try:
        values["model"] = ResolvedValue(check_text_value(model_path), "engine")
    except ValueError as exc:
        problems.append((EngineError, f"model: the checkpoint's path cannot be written: {exc}"))
    if streaming is not None:
        key = "triton_config.decoupled"
        if key in user and user[key] is not bool(streaming):
            problems.append(
                (
                    ParameterError,
                    f"{key}: {user[key]} contradicts --{'streaming' if streaming else 'no-streaming'}; "
                    "give only one of them",
                )
            )
        values[key] = ResolvedValue(bool(streaming), "user")
    warnings: list[str] = []
    for f in check_llmapi(checkpoint, tokenizer, {n: rv.value for n, rv in values.items()}):
        if f.severity == "warning":
            warnings.append(f"{f.key}: {f.message}")
        else:
            problems.append((f.blame, f"{f.key}: {f.message}"))
    for name, param in params.items():
        if (param.kind == "structural" or param.required) and values[name].value is None:
            problems.append((ParameterError, f"{name}: has no value; expected {param.type_text()}"))
    if problems:
        classes = {cls for cls, _ in problems}
        cls = classes.pop() if len(classes) == 1 else ParameterError
        lines = [text for _, text in problems]
        error = cls(
            f"{len(lines)} problem(s) with profile {profile} and checkpoint {checkpoint.dir}:\n" + "\n".join(lines)
        )
        error.problems = lines  # type: ignore[attr-defined]
        raise error
    tp = values["tensor_parallel_size"].value or 1
    pp = values["pipeline_parallel_size"].value or 1
    return Resolution(profile=profile, values=values, warnings=warnings, world_size=int(tp) * int(pp), engine_kind="hf")
