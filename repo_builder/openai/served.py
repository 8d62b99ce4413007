"""The models one front end serves: options (:class:`FrontEndConfig`), what the lock file says of each LLM
(:class:`ServedModel`, :func:`load_served_models`) and the model id -> Triton model table (:func:`routing_table`).

Several LLMs (a repository rendered with ``render --model NAME=ENGINE_DIR,TOKENIZER_DIR`` repeated): ``GET
/v1/models`` lists every ``NAME``; a request's ``model`` picks the LLM, whose own Triton model
(``NAME_ensemble``, or ``NAME_tensorrt_llm_bls`` with ``--triton-model tensorrt_llm_bls``), tokenizer (chat
template) and engine limits (``max_seq_len``, ``max_input_len``) from the lock file's ``llms[]`` serve it.
``--served-model-name`` and ``--tokenizer-dir`` name one model, so they are refused there (a
:class:`~repo_builder.errors.RepoBuilderError` naming the option).

Nothing here imports fastapi: ``repo-builder openai`` reads :class:`FrontEndConfig` before serving.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .backend import TritonBackend


@dataclass
class FrontEndConfig:
    """Settings of one front end (one ``repo-builder openai`` option each).

    Attributes:
        grpc_url: Triton's gRPC ``host:port``.
        repo: the rendered repository (its lock file names the model, the tokenizer and the engine limits).
        triton_model: the Triton model requests go to (``ensemble`` or ``tensorrt_llm_bls``).
        served_model_name: the model id clients use; default: from the lock file. Single-LLM repositories
            only (refused for several LLMs, whose ids are their ``render --model`` names).
        api_key: when set, every ``/v1`` request needs ``Authorization: Bearer <api_key>``.
        tokenizer_dir: overrides the lock file's tokenizer directory (e.g. the repository was rendered on
            another machine). Single-LLM repositories only, like ``served_model_name``.
    """

    grpc_url: str
    repo: Path
    triton_model: str = "ensemble"
    served_model_name: str | None = None
    api_key: str | None = None
    tokenizer_dir: Path | None = None


@dataclass
class ServedModel:
    """What the front end knows about the model it serves (from the lock file and the tokenizer)."""

    name: str
    tokenizer: Any
    max_seq_len: int | None
    max_input_len: int | None
    add_special_tokens: bool
    preprocessing_applies_template: bool
    engine_model: str
    created: int = field(default_factory=lambda: int(time.time()))
    #: the Triton model this LLM's requests go to (``ensemble``, ``NAME_ensemble``, ``NAME_tensorrt_llm_bls``).
    triton_model: str = "ensemble"
    #: the BLS's draft model (``render --draft-engine-dir``), None without one: ``num_draft_tokens`` is refused.
    draft_model: str | None = None

    @property
    def has_chat_template(self) -> bool:
        return bool(getattr(self.tokenizer, "chat_template", None)) or self.preprocessing_applies_template


def load_served_models(config: FrontEndConfig) -> list[ServedModel]:
    """Read the lock file and load each LLM's tokenizer: one :class:`ServedModel` per LLM, in the lock's order.

    Raises:
        RepoBuilderError: no or malformed lock file; the tokenizer directory is missing or unloadable (the
            message names it and the ``--tokenizer-dir`` option); ``--served-model-name`` or
            ``--tokenizer-dir`` given for a repository with several LLMs.
    """
    from ..errors import RepoBuilderError
    from ..repository.lockfile import read_serving_info
    from ..runtime.text import TokenizerLoadError, load_tokenizer

    infos = read_serving_info(config.repo)
    if len(infos) > 1:
        names = ", ".join(i.model_name for i in infos)
        for option, given in (
            ("--served-model-name", config.served_model_name),
            ("--tokenizer-dir", config.tokenizer_dir),
        ):
            if given is not None:
                raise RepoBuilderError(
                    f"the repository serves several LLMs ({names}); {option} applies to a single-LLM repository only",
                    path=infos[0].path,
                    key=option,
                    hint="drop it: each LLM is served under its render --model NAME with the "
                    "tokenizer the lock file records for it",
                )
    served = []
    for info in infos:
        tok_dir = config.tokenizer_dir or info.tokenizer_dir
        if tok_dir is None:
            raise RepoBuilderError(
                "the lock file records no tokenizer directory" + (f" for LLM '{info.llm}'" if info.llm else ""),
                path=info.path,
                key="--tokenizer-dir",
                hint="pass --tokenizer-dir",
            )
        try:
            tokenizer = load_tokenizer(
                tok_dir, trust_remote_code=bool(info.value("trust_remote_code", False)), key="--tokenizer-dir"
            )
        except TokenizerLoadError as exc:
            raise RepoBuilderError(str(exc), key="--tokenizer-dir") from None

        def as_int(name: str, info: Any = info) -> int | None:
            value = info.value(name)
            return int(value) if isinstance(value, int) and not isinstance(value, bool) else None

        served.append(
            ServedModel(
                name=config.served_model_name or info.model_name,
                tokenizer=tokenizer,
                max_seq_len=as_int("max_seq_len"),
                max_input_len=as_int("max_input_len"),
                add_special_tokens=bool(info.value("add_special_tokens", True)),
                preprocessing_applies_template=bool(info.value("apply_chat_template", False)),
                # several LLMs: the lock's llms[].models (each LLM's values keep the single-LLM name)
                engine_model=(
                    info.triton_model("tensorrt_llm")
                    if info.llm
                    else str(info.value("tensorrt_llm_model_name") or "tensorrt_llm")
                ),
                triton_model=info.triton_model(config.triton_model),
                draft_model=str(info.value("tensorrt_llm_draft_model_name") or "") or None,
            )
        )
    return served


@dataclass
class Route:
    """Where requests for one model id go: the LLM and the Triton model (a :class:`TritonBackend`) serving it."""

    served: ServedModel
    backend: TritonBackend


def routing_table(
    config: FrontEndConfig, models: list[ServedModel], backends: list[TritonBackend] | None = None
) -> dict[str, Route]:
    """Model id -> :class:`Route`, in the lock's order (``GET /v1/models`` lists them so).

    Each LLM gets its own :class:`TritonBackend` on ``config.grpc_url`` for ``ServedModel.triton_model`` (its
    ensemble or BLS) unless ``backends`` (one per model, tests) is given. Nothing is connected here.
    """
    if backends is None:
        from .backend import TritonBackend

        backends = [TritonBackend(config.grpc_url, m.triton_model, engine_model=m.engine_model) for m in models]
    return {m.name: Route(m, b) for m, b in zip(models, backends)}
