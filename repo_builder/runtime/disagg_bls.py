"""The flow of the ``disaggregated_serving_bls`` model: one request, two engine models.

Facts (triton-inference-server/tensorrtllm_backend v0.19.0
``all_models/disaggregated_serving/disaggregated_serving_bls/1/model.py`` and ``README.md``): the BLS has
the ``tensorrt_llm`` model's inputs and outputs (minus ``context_phase_params``), so the ensemble's engine
step can name it instead; it sends each request to ``context_model_name`` with request parameter
``request_type: context_only``, takes ``context_phase_params`` from that one response, and sends the original
inputs plus ``context_phase_params`` to ``generation_model_name`` with ``request_type: generation_only``; the
generation model's responses are the BLS's responses. This module is repo-builder's own implementation of
that flow (the engines' side is :mod:`.engine_phases`).

Differences, chosen here: a ``stop`` request (TensorRT-LLM's cancellation input) goes to the generation
model only (the context phase is one step); a failed phase fails the request with an error that names the
phase's model; requests without ``requested_output_names`` get every output the BLS declares.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from .engine_phases import CONTEXT_ONLY, CONTEXT_PHASE_PARAMS, GENERATION_ONLY, REQUEST_TYPE
from .errors import StepError

Tensors = Mapping[str, np.ndarray]


class PhaseCaller(Protocol):
    """How the BLS reaches an engine model (pb_utils BLS requests inside tritonserver; fakes in tests).

    ``call`` returns the one response of a non-decoupled model; ``stream`` yields each non-empty response of
    a decoupled one. Both raise :class:`~.errors.StepError` for an error response.
    """

    def call(
        self, model: str, inputs: Tensors, parameters: Mapping[str, str], outputs: Sequence[str], request_id: str
    ) -> dict[str, np.ndarray]: ...

    def stream(
        self, model: str, inputs: Tensors, parameters: Mapping[str, str], outputs: Sequence[str], request_id: str
    ) -> Iterable[dict[str, np.ndarray]]: ...


@dataclass(frozen=True)
class DisaggregatedSettings:
    """The BLS's parameters: ``context_model_name``, ``generation_model_name`` (model names in the repository)
    and whether the models are decoupled (``model_transaction_policy``; the engines share the BLS's mode)."""

    context_model: str
    generation_model: str
    decoupled: bool
    outputs: tuple[str, ...]


def _stop(inputs: Tensors) -> bool:
    arr = inputs.get("stop")
    return arr is not None and bool(np.asarray(arr).any())


class DisaggregatedCore:
    """Runs one request through the context model, then the generation model.

    ``send(outputs, final)`` receives every response (``outputs`` None: a final flag alone).
    """

    def __init__(self, settings: DisaggregatedSettings, caller: PhaseCaller) -> None:
        self.settings = settings
        self.caller = caller

    def _wanted(self, requested: Sequence[str]) -> list[str]:
        declared = self.settings.outputs
        return [n for n in requested if n in declared] if requested else list(declared)

    def context_phase(self, inputs: Tensors, request_id: str) -> np.ndarray:
        """The ``context_phase_params`` of the context-only request (UINT8 ``[1, n]``).

        Raises:
            StepError: the context model failed, answered more than once, or sent no context_phase_params.
        """
        s = self.settings
        params = {REQUEST_TYPE: CONTEXT_ONLY}
        if s.decoupled:
            responses = list(self.caller.stream(s.context_model, inputs, params, [CONTEXT_PHASE_PARAMS], request_id))
        else:
            responses = [self.caller.call(s.context_model, inputs, params, [CONTEXT_PHASE_PARAMS], request_id)]
        if len(responses) != 1:
            raise StepError(s.context_model, f"a context-only request must get one response, got {len(responses)}")
        phase = responses[0].get(CONTEXT_PHASE_PARAMS)
        if phase is None or not np.asarray(phase).size:
            raise StepError(
                s.context_model,
                f"the context-only response has no {CONTEXT_PHASE_PARAMS} output "
                f"(does the model honour request parameter {REQUEST_TYPE}?)",
            )
        return np.asarray(phase, dtype=np.uint8).reshape(1, -1)

    def run(
        self,
        inputs: Tensors,
        send: Callable[[Mapping[str, np.ndarray] | None, bool], None],
        *,
        requested_outputs: Sequence[str] = (),
        request_id: str = "",
    ) -> None:
        """Serve one request: context phase, then the generation phase's responses through ``send``.

        Raises:
            StepError: a phase failed (names its model; ``client`` when the engine blamed the request).
        """
        s = self.settings
        wanted = self._wanted(requested_outputs)
        if _stop(inputs):  # cancellation: only the generation phase can still be running
            gen_inputs = dict(inputs)
            params: dict[str, str] = {}
        else:
            gen_inputs = {k: v for k, v in inputs.items() if k != CONTEXT_PHASE_PARAMS}
            gen_inputs[CONTEXT_PHASE_PARAMS] = self.context_phase(gen_inputs, request_id)
            params = {REQUEST_TYPE: GENERATION_ONLY}
        if not s.decoupled:
            out = self.caller.call(s.generation_model, gen_inputs, params, wanted, request_id)
            send(_kept(out, s.outputs), True)
            return
        for out in self.caller.stream(s.generation_model, gen_inputs, params, wanted, request_id):
            send(_kept(out, s.outputs), False)
        send(None, True)


def reshaped_dims(model_config: Mapping[str, Any]) -> dict[str, tuple[int, ...]]:
    """{input name: declared dims} of the inputs whose config has a ``reshape`` (from the model config JSON).

    Triton hands the model such an input in the reshaped form (``input_lengths`` ``[B]`` for dims ``[1]``
    reshape ``[]``) but checks a BLS request's tensors against the target's declared dims, so the BLS must
    forward them as declared (:func:`as_declared`).
    """
    out: dict[str, tuple[int, ...]] = {}
    for entry in model_config.get("input", []) or []:
        if "reshape" in entry:
            out[entry["name"]] = tuple(int(d) for d in entry.get("dims", []))
    return out


def as_declared(inputs: Tensors, dims: Mapping[str, tuple[int, ...]]) -> dict[str, np.ndarray]:
    """``inputs`` with every reshaped input (:func:`reshaped_dims`) back in its declared shape ``[B, *dims]``."""
    out = dict(inputs)
    for name, declared in dims.items():
        arr = out.get(name)
        if arr is None or any(d < 0 for d in declared):
            continue
        batch = arr.shape[0] if arr.ndim else 1
        out[name] = np.asarray(arr).reshape((batch, *declared))
    return out


def _kept(outputs: Mapping[str, np.ndarray], declared: Sequence[str]) -> dict[str, np.ndarray]:
    """The outputs the BLS declares (``context_phase_params`` and anything else dropped)."""
    return {name: arr for name, arr in outputs.items() if name in declared}


__all__ = [
    "DisaggregatedCore",
    "as_declared",
    "reshaped_dims",
    "DisaggregatedSettings",
    "PhaseCaller",
]
