"""The options of ``repo-builder bench`` (:class:`BenchSettings`), each declared once: default, flags, help and
bounds on its field (:func:`repo_builder.cli_options.option`); the CLI builds its parameters from them.

Kept free of heavy imports (no client, no pydantic at import time): ``repo-builder --help`` reads it.
"""

from __future__ import annotations

from dataclasses import dataclass

from .cli_options import check_options, option
from .errors import ClientError


def parse_concurrency(text: str) -> list[int]:
    """``"1,4,16"`` -> ``[1, 4, 16]``; ClientError naming ``--concurrency`` otherwise."""
    try:
        levels = [int(part) for part in text.replace(" ", "").split(",") if part]
    except ValueError:
        raise ClientError(
            f"not a comma-separated list of integers: {text!r}", key="--concurrency", hint="e.g. --concurrency 1,4,16"
        ) from None
    if not levels or any(c < 1 for c in levels):
        raise ClientError(f"concurrency levels must be positive integers, got {text!r}", key="--concurrency")
    return levels


_URL_HELP = "host:port; default localhost:8000 (http) or localhost:8001 (grpc)."


@dataclass
class BenchSettings:
    """Everything a benchmark run needs; each field is one ``repo-builder bench`` option.

    Attributes:
        url, protocol, model: where to send (``ensemble`` or ``tensorrt_llm_bls``).
        stream: streamed requests (needed for TTFT/ITL to mean anything).
        concurrency: levels, requests kept in flight.
        requests: requests per level.
        input_tokens, output_tokens: prompt length and requested output length (tokens).
        prompts_file: JSONL with ``{"text": ...}`` (or ``prompt``/``text_input``) and optional
            ``output_tokens``/``max_tokens`` per line; used round-robin instead of synthetic prompts.
        tokenizer_dir: Hugging Face tokenizer used to size prompts and count output tokens.
        output_dir: where bench.json, bench.csv, bench.png and requests.jsonl go.
        warmup: requests sent once before the first level, not recorded.
        timeout_s: per-request timeout.
        min_tokens: send ``min_tokens`` = output length when the model has it.
        end_id: sent as ``end_id`` if set (e.g. -1 to disable end-of-sequence on engines that support it).
        seed: seed of the synthetic prompts.
        num_draft_tokens: draft tokens per speculative iteration (``num_draft_tokens`` of ``tensorrt_llm_bls``
            with a draft model; ``return_perf_metrics`` is sent too), None = not sent.
        all_outputs: over gRPC, ask for every output the model produces instead of only ``text_output`` (and
            ``output_ids`` if declared); HTTP ``/generate_stream`` cannot select outputs.
    """

    url: str | None = option(None, "--url", help=_URL_HELP)
    protocol: str = option("http", "--protocol", help="http or grpc.", choices=("http", "grpc"))
    model: str = option("ensemble", "--model", help="ensemble or tensorrt_llm_bls.")
    stream: bool = option(False, "--stream/--no-stream", help="Streamed requests (TTFT and ITL).")
    concurrency: list[int] = option(
        [1, 4, 16],
        "--concurrency",
        help="Comma-separated levels of requests in flight.",
        min_length=1,
        item_ge=1,
        parse=parse_concurrency,
    )
    requests: int = option(32, "--requests", help="Requests per concurrency level.", ge=1)
    input_tokens: int = option(128, "--input-tokens", help="Synthetic prompt length (tokens).", ge=1)
    output_tokens: int = option(64, "--output-tokens", help="Tokens to generate per request.", ge=1)
    prompts_file: str | None = option(
        None, "--prompts", help='JSONL file, lines like {"text": "...", "output_tokens": 64}.'
    )
    tokenizer_dir: str | None = option(None, "--tokenizer-dir", help="Sizes prompts and counts output tokens.")
    output_dir: str = option(
        "bench-results", "--output", help="Folder for bench.json, bench.csv, bench.png, requests.jsonl."
    )
    warmup: int = option(2, "--warmup", help="Unrecorded requests before the first level.", ge=0)
    timeout_s: float = option(300.0, "--timeout", help="Seconds per request.", gt=0)
    min_tokens: bool = option(
        True, "--min-tokens/--no-min-tokens", help="Send min_tokens = --output-tokens when the model has it."
    )
    end_id: int | None = option(
        None, "--end-id", help="Send this end_id (e.g. -1: never stop at end-of-sequence, where supported)."
    )
    seed: int = option(0, "--seed", help="Seed of the synthetic prompts.")
    num_draft_tokens: int | None = option(
        None,
        "--num-draft-tokens",
        help="Draft-target speculative decoding: send num_draft_tokens (and return_perf_metrics) to a BLS with a "
        "draft model; the report adds the acceptance rate and tokens per target step.",
        ge=1,
    )
    all_outputs: bool = option(
        False,
        "--all-outputs/--text-output-only",
        help="gRPC: receive every output the model produces instead of only "
        "text_output (HTTP always receives every output).",
    )

    @property
    def text_output_only(self) -> bool:
        """Over gRPC, ask only for ``text_output`` (and ``output_ids``): not :attr:`all_outputs`."""
        return not self.all_outputs

    def check(self) -> None:
        """Raise :class:`ClientError` naming the option (``--requests``, ...) for a value out of its bounds."""
        check_options(self, error=ClientError)
