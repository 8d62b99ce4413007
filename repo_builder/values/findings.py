"""What the rules of :mod:`repo_builder.values.rules` see and say: :class:`RuleContext` (the engine, the values
and what else the caller knows) and :class:`Finding` (the parameter at fault, why, which input has to
change), plus the facts several rule modules share. The table itself is :data:`repo_builder.values.rules.RULES`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from ..engine import EngineInfo
from ..profile.schema import Parameter
from ..tokenizer import TokenizerInfo

Severity = Literal["error", "warning"]
Blame = Literal["parameter", "engine", "tokenizer"]

#: Bytes of the largest GPU memory shipping today (NVIDIA B200/B300 class, 192 GB). The free-memory warning
#: only fires when not even a GPU this large would hold a full batch, so it is never wrong about a real GPU.
LARGEST_GPU_BYTES = 192 * 10**9

INFLIGHT = ("inflight_fused_batching", "inflight_batching")
BUILD = "trtllm-build"


#: Marks a :class:`Finding` without a fix.
NO_FIX: Any = object()


@dataclass(frozen=True)
class Finding:
    """One contradiction: ``key`` is the parameter name at fault, ``message`` says why (without the key),
    ``blame`` which input has to change (the class of error resolve raises).

    ``fix`` (a warning only): the value resolve gives ``key`` instead of a default that contradicts the engine
    (the user did not set it); its warning reads ``"<key> <message>"``.
    """

    key: str
    message: str
    severity: Severity = "error"
    blame: Blame = "parameter"
    fix: Any = NO_FIX

    @property
    def has_fix(self) -> bool:
        return self.fix is not NO_FIX


@dataclass
class RuleContext:
    """What a rule sees.

    Attributes:
        engine: the engine the values are for.
        values: {parameter name: typed value or None}.
        local_path: maps a path parameter's value to the path to look at on this machine (validate maps paths
            under the serve path into the repository).
        tokenizer: the tokenizer (None: unknown, its rules are skipped).
        user: {parameter name: typed value} the user set (``--set`` / ``--values``); None: every value is
            someone's choice (validate reads a filled repository).
        streaming: ``--streaming`` / ``--no-streaming`` (None: not given).
        params: the profile's parameters (None: the unset-value rule is skipped; validate finds unset values as
            unfilled placeholders and parse errors).
    """

    engine: EngineInfo
    values: Mapping[str, Any]
    local_path: Callable[[str], Path] = field(default=Path)
    tokenizer: TokenizerInfo | None = None
    user: Mapping[str, Any] | None = None
    streaming: bool | None = None
    params: Mapping[str, Parameter] | None = None

    def v(self, name: str) -> Any:
        return self.values.get(name)

    def by_user(self, name: str) -> bool:
        """Whether ``name``'s value is the user's choice (always, when the context has no user values)."""
        return self.user is None or name in self.user

    @property
    def beam(self) -> int:
        beam = self.v("max_beam_width")
        return beam if isinstance(beam, int) and beam > 0 else self.engine.max_beam_width

    @property
    def is_trt(self) -> bool:
        return self.engine.kind == "trtllm"


Rule = Callable[[RuleContext], Iterator[Finding]]
