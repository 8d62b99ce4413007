"""Import shim: this module moved to :mod:`repo_builder.values.rules` (issue 21); import from there."""

from .values.rules import (
    BEAM_ONE_ONLY as BEAM_ONE_ONLY,
)
from .values.rules import (
    BLS_COMPANIONS as BLS_COMPANIONS,
)
from .values.rules import (
    BUILD as BUILD,
)
from .values.rules import (
    ENGINE_LIMITS as ENGINE_LIMITS,
)
from .values.rules import (
    INFLIGHT as INFLIGHT,
)
from .values.rules import (
    LARGEST_GPU_BYTES as LARGEST_GPU_BYTES,
)
from .values.rules import (
    LORA_KEYS as LORA_KEYS,
)
from .values.rules import (
    RULES as RULES,
)
from .values.rules import (
    XGRAMMAR_KEYS as XGRAMMAR_KEYS,
)
from .values.rules import (
    Blame as Blame,
)
from .values.rules import (
    EngineLimit as EngineLimit,
)
from .values.rules import (
    Finding as Finding,
)
from .values.rules import (
    Rule as Rule,
)
from .values.rules import (
    RuleContext as RuleContext,
)
from .values.rules import (  # noqa: F401
    Severity as Severity,
)
from .values.rules import (
    attention_window as attention_window,
)
from .values.rules import (
    bls_companions as bls_companions,
)
from .values.rules import (
    check as check,
)
from .values.rules import (
    chunked_context as chunked_context,
)
from .values.rules import (
    engine_limits as engine_limits,
)
from .values.rules import (
    guided_decoding as guided_decoding,
)
from .values.rules import (
    inflight_batching as inflight_batching,
)
from .values.rules import (
    instance_count as instance_count,
)
from .values.rules import (
    kv_cache_memory as kv_cache_memory,
)
from .values.rules import (
    kv_cache_reuse as kv_cache_reuse,
)
from .values.rules import (
    kv_cache_tokens as kv_cache_tokens,
)
from .values.rules import (
    logits_dtype as logits_dtype,
)
from .values.rules import (
    lookahead as lookahead,
)
from .values.rules import (
    lora as lora,
)
from .values.rules import (
    lora_adapter_bytes as lora_adapter_bytes,
)
from .values.rules import (
    postprocessing_state as postprocessing_state,
)
from .values.rules import (
    rank_files as rank_files,
)
from .values.rules import (
    rule as rule,
)
from .values.rules import (
    streaming_beam as streaming_beam,
)
