"""One engine request of a BLS request (:class:`RowCall`): the environment the pre steps left, the post
steps run on each engine response and the assembly of the BLS response. Moved here from
:meth:`.bls.BLSCore._serve_row`, whose closures these were. Vendored with the rest of ``runtime/``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from .bls_calls import Sender, StepCaller
from .bls_request import RequestPlan
from .bls_wiring import Step


@dataclass
class RowCall:
    """One row's engine request ``rid`` and what its responses go through.

    Attributes:
        caller: executes the post step models.
        engine: the engine step (its ``output_map`` places a response's tensors in the environment).
        post: the post steps, each with the outputs to ask of it.
        plan: the row's request plan.
        names: the BLS outputs the client asked for.
        send: the response callback.
        rid: the engine (and post step) request id.
        env: the request tensors and the pre steps' outputs, by ensemble tensor name.
        protected: the echoed prompt stop strings are not searched in ("" when none is echoed).
    """

    caller: StepCaller
    engine: Step
    post: list[tuple[Step, list[str]]]
    plan: RequestPlan
    names: tuple[str, ...]
    send: Sender
    rid: str
    env: dict[str, Any]
    protected: str

    def postprocess(self, resp: Mapping[str, np.ndarray]) -> dict[str, Any]:
        """A copy of :attr:`env` with the engine response ``resp`` and every post step's outputs added."""
        penv = self.env.copy()
        self.engine.scatter(resp, penv)
        for step, outs in self.post:
            step.scatter(self.caller.call(step.model, step.gather(penv), outs, self.rid), penv)
        return penv

    def assemble(self, penv: Mapping[str, Any]) -> dict[str, np.ndarray]:
        """The BLS response: the tensors of ``penv`` among :attr:`names` (missing ones left out)."""
        return {n: penv[n] for n in self.names if n in penv}
