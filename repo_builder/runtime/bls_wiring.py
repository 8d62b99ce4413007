"""BLS wiring: the ensemble steps of the profile's tensor contract, read from the rendered ``1/wiring.json``
(:class:`Wiring`, :class:`Step`), checked against the BLS's own inputs and outputs. See :mod:`.bls`."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import ModelLoadError

#: The name the wiring gives the engine step; the BLS calls ``tensorrt_llm_model_name`` instead.
ENGINE_STEP_MODEL = "tensorrt_llm"


class WiringError(ModelLoadError, ValueError):
    """``wiring.json`` is missing, malformed or inconsistent; the message names the file and key."""


# --------------------------------------------------------------------------------------------------
# wiring


@dataclass(frozen=True)
class Step:
    """One ensemble step: ``input_map`` is {step input: ensemble tensor}, ``output_map`` is
    {step output: ensemble tensor} (the contract's ``ensemble.steps`` entries)."""

    model: str
    input_map: Mapping[str, str]
    output_map: Mapping[str, str]

    def gather(self, env: Mapping[str, Any]) -> dict[str, Any]:
        """The step's inputs from ``env`` (ensemble tensor name -> array), renamed to the step's input
        names; ensemble tensors absent from ``env`` (optional inputs not sent) are left out."""
        return {dst: env[src] for dst, src in self.input_map.items() if src in env}

    def scatter(self, outputs: Mapping[str, Any], env: dict[str, Any]) -> None:
        """Store the step's ``outputs`` (step output name -> array) in ``env`` under their ensemble names."""
        omap = self.output_map
        for name, value in outputs.items():
            target = omap.get(name)
            if target is not None:
                env[target] = value


@dataclass(frozen=True)
class Wiring:
    """The ensemble steps plus the BLS's input and output names, from ``wiring.json``.

    ``steps`` before the engine step run once per request, the engine step streams, and the steps
    after it run once per engine response.
    """

    steps: tuple[Step, ...]
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    engine_index: int

    @classmethod
    def from_data(
        cls,
        data: Any,
        *,
        source: str = "wiring.json",
        inputs: Iterable[str] | None = None,
        outputs: Iterable[str] | None = None,
    ) -> Wiring:
        """Build from plain data: either a list of steps (``ProfileContract.wiring()``) or a dict
        ``{"steps": [...], "inputs": [...], "outputs": [...]}`` whose inputs/outputs are names or
        tensor dicts with a ``name``. ``inputs``/``outputs`` given here win (e.g. the BLS's own
        model config).

        Raises:
            WiringError: no or several engine steps, a step input fed by nothing, malformed entries.
        """
        if isinstance(data, Mapping):
            raw_steps = data.get("steps")
            data_inputs = data.get("inputs")
            data_outputs = data.get("outputs")
        else:
            raw_steps, data_inputs, data_outputs = data, None, None
        if not isinstance(raw_steps, list) or not raw_steps:
            raise WiringError(f"{source}: 'steps' must be a non-empty list of ensemble steps")
        steps = []
        for i, raw in enumerate(raw_steps):
            try:
                steps.append(
                    Step(model=str(raw["model"]), input_map=dict(raw["input_map"]), output_map=dict(raw["output_map"]))
                )
            except (KeyError, TypeError) as exc:
                raise WiringError(f"{source}: steps[{i}] needs 'model', 'input_map' and 'output_map'") from exc

        def names(items: Any) -> tuple[str, ...] | None:
            if items is None:
                return None
            return tuple(str(x["name"]) if isinstance(x, Mapping) else str(x) for x in items)

        in_names = names(inputs) or names(data_inputs)
        out_names = names(outputs) or names(data_outputs)
        engine = [i for i, s in enumerate(steps) if s.model == ENGINE_STEP_MODEL]
        if len(engine) != 1:
            raise WiringError(
                f"{source}: expected exactly one step with model '{ENGINE_STEP_MODEL}', found {len(engine)}"
            )
        produced: set[str] = set()
        for s in steps:
            produced.update(s.output_map.values())
        if in_names is None:
            # Without an explicit list every tensor not produced by a step is a request input.
            in_names = tuple(dict.fromkeys(v for s in steps for v in s.input_map.values() if v not in produced))
        if out_names is None:
            out_names = tuple(v for s in steps for v in s.output_map.values() if not v.startswith("_"))
        available = set(in_names)
        for i, s in enumerate(steps):
            for dst, src in s.input_map.items():
                if src not in available:
                    raise WiringError(
                        f"{source}: steps[{i}] ({s.model}) input '{dst}' reads '{src}', which is "
                        "neither a request input nor an output of an earlier step"
                    )
            available.update(s.output_map.values())
        return cls(steps=tuple(steps), inputs=in_names, outputs=out_names, engine_index=engine[0])

    @classmethod
    def load(cls, path: str | Path, **kwargs: Any) -> Wiring:
        """Read ``wiring.json``. Raises WiringError naming the file."""
        p = Path(path)
        try:
            data = json.loads(p.read_text())
        except OSError as exc:
            raise WiringError(f"{p}: cannot read the BLS wiring ({exc}); re-render the repository") from exc
        except json.JSONDecodeError as exc:
            raise WiringError(f"{p}: not valid JSON ({exc}); re-render the repository") from exc
        return cls.from_data(data, source=str(p), **kwargs)

    @property
    def pre_steps(self) -> tuple[Step, ...]:
        """Steps that run once before the engine (preprocessing)."""
        return self.steps[: self.engine_index]

    @property
    def engine_step(self) -> Step:
        """The engine step (``tensorrt_llm``)."""
        return self.steps[self.engine_index]

    @property
    def post_steps(self) -> tuple[Step, ...]:
        """Steps that run once per engine response (postprocessing)."""
        return self.steps[self.engine_index + 1 :]

    @property
    def text_outputs(self) -> tuple[str, ...]:
        """Ensemble outputs produced by the post steps (``text_output``): where stop strings apply."""
        outs = set(self.outputs)
        return tuple(v for s in self.post_steps for v in s.output_map.values() if v in outs)

    def engine_outputs_for(self, wanted: Iterable[str]) -> list[str]:
        """Engine output names to request so that every post step gets its inputs and every
        ensemble tensor in ``wanted`` (client-requested outputs) is produced."""
        needed = set(wanted)
        for s in self.post_steps:
            needed.update(s.input_map.values())
        return [out for out, ens in self.engine_step.output_map.items() if ens in needed]
