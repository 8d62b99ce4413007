"""The synthetic engine: no model, deterministic tokens at a fixed pace (engine kind ``synthetic``).

It stands in the ``tensorrt_llm`` slot with the same tensor contract and scheduler as the CPU reference
engine (:mod:`.engine_core`), so a benchmark measures everything around the engine: Triton, the
ensemble or BLS, tokenization, detokenization, the client. The engine dir holds ``synthetic_engine.json``
(format and reader: :mod:`.synthetic_spec`)::

    {"vocab_size": 32000, "max_batch_size": 64, "max_input_len": 1024, "max_seq_len": 2048}

Tokens: :func:`synthetic_token_ids` — a splitmix64 stream seeded by an FNV-1a hash of the prompt ids
(and the request ``seed`` when given), mapped into ``[3, vocab_size)``; the request's ``end_id`` is never
produced, so a request runs to ``request_output_len`` unless a stop word matches. Pace: one scheduler
iteration (one token for every active sequence) per ``synthetic_token_delay_ms`` (0 = as fast as
possible). Sampling parameters, penalties and bad words are accepted and ignored.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from collections.abc import Sequence as Seq
from pathlib import Path

from .engine_outputs import Sequence
from .engine_request import EngineLoadError, ModelIO
from .numeric_ranges import UINT64_MAX
from .params import ModelParams
from .synthetic_spec import FIRST_TOKEN, SPEC_DEFAULTS, SPEC_FILE, read_spec  # noqa: F401  (re-exported)

_MASK = UINT64_MAX


def prompt_seed(prompt: Iterable[int], seed: int | None = None) -> int:
    """FNV-1a 64-bit hash of the prompt ids, mixed with ``seed``: the start state of the token stream."""
    h = 0xCBF29CE484222325
    for t in prompt:
        h = ((h ^ (int(t) & _MASK)) * 0x100000001B3) & _MASK
    if seed:
        h ^= (int(seed) * 0x9E3779B97F4A7C15) & _MASK
    return h


def next_token(state: int, vocab_size: int, end_id: int | None) -> tuple[int, int]:
    """One splitmix64 step: returns (new state, token id in ``[3, vocab_size)``, never ``end_id``)."""
    state = (state + 0x9E3779B97F4A7C15) & _MASK
    z = state
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
    z ^= z >> 31
    span = vocab_size - FIRST_TOKEN
    token = FIRST_TOKEN + z % span
    if token == end_id:
        token = FIRST_TOKEN + (token - FIRST_TOKEN + 1) % span
    return state, token


def synthetic_token_ids(
    prompt: Seq[int], n: int, vocab_size: int, *, end_id: int | None = None, seed: int | None = None
) -> list[int]:
    """The first ``n`` tokens the synthetic engine generates for ``prompt`` (what tests predict)."""
    state = prompt_seed(prompt, seed)
    out = []
    for _ in range(n):
        state, tok = next_token(state, vocab_size, end_id)
        out.append(tok)
    return out


class SyntheticBackend:
    """Generation backend that emits :func:`synthetic_token_ids` at ``token_delay_ms`` per iteration.

    Attributes ``vocab_size``, ``max_batch_size``, ``max_input_len``, ``max_seq_len`` come from
    ``synthetic_engine.json``. Log-probs are 0.0.
    """

    def __init__(self, engine_dir: str | Path, *, token_delay_ms: float = 0.0) -> None:
        spec = read_spec(engine_dir)
        self.vocab_size = spec["vocab_size"]
        self.max_batch_size = spec["max_batch_size"]
        self.max_input_len = spec["max_input_len"]
        self.max_seq_len = spec["max_seq_len"]
        if token_delay_ms < 0:
            raise EngineLoadError(f"tensorrt_llm: synthetic_token_delay_ms must be >= 0, got {token_delay_ms}")
        self.delay_s = token_delay_ms / 1000.0
        self._next_due = 0.0

    @classmethod
    def from_params(cls, params: ModelParams, io: ModelIO) -> SyntheticBackend:
        """Build from ``engine_dir`` and ``synthetic_token_delay_ms`` (docs/design.md)."""
        engine_dir = params.str("engine_dir") or params.str("gpt_model_path")
        if not engine_dir:
            raise EngineLoadError(
                f"model '{params.model_name}': parameter 'engine_dir' is not set; it must name "
                f"a directory holding {SPEC_FILE}"
            )
        return cls(engine_dir, token_delay_ms=float(params.float("synthetic_token_delay_ms", 0.0) or 0.0))

    def step(self, seqs: Seq[Sequence]) -> list[tuple[int, float]]:
        """Wait for the next iteration slot, then one token per sequence."""
        if self.delay_s > 0:
            now = time.monotonic()
            if now < self._next_due:
                time.sleep(self._next_due - now)
                now = self._next_due
            self._next_due = now + self.delay_s
        out = []
        vocab = self.vocab_size
        for seq in seqs:
            state = seq.state
            if state is None:
                state = prompt_seed(seq.req.prompt, seq.req.sampling.seed)
                for _ in seq.tokens:  # a generation-only request resumes after the context phase's tokens
                    state, _tok = next_token(state, vocab, seq.req.end_id)
            state, tok = next_token(state, vocab, seq.req.end_id)
            seq.state = state
            out.append((tok, 0.0))
        return out

    def release(self, seq: Sequence) -> None:
        """Nothing to free."""
        seq.state = None
