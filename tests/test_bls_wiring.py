"""The BLS follows the profile's ensemble wiring: request fields reach the step models under the
step models' names (top_k -> runtime_top_k, stream -> streaming, ...), for every profile."""

from __future__ import annotations

import json

import numpy as np
import pytest

from repo_builder.profile.contract import list_profiles, load_contract
from repo_builder.runtime.bls import ENGINE_STEP_MODEL, Wiring, WiringError

PROFILES = list_profiles("ensemble")


def _bls_wiring(profile: str) -> Wiring:
    c = load_contract(profile)
    bls = c.models["tensorrt_llm_bls"]
    return Wiring.from_data(c.wiring(), inputs=[t.name for t in bls.inputs], outputs=[t.name for t in bls.outputs])


def _marked(names):
    """One distinct array per name, so a routed tensor can be traced back to its source."""
    return {n: np.array([[i]], dtype=np.int64) for i, n in enumerate(names)}


def test_both_profiles_exist():
    assert {"trtllm-1.2", "trtllm-0.5"} <= set(PROFILES)


@pytest.mark.parametrize("profile", PROFILES)
def test_every_bls_input_reaches_a_step(profile):
    c = load_contract(profile)
    w = _bls_wiring(profile)
    sources = {src for s in w.steps for src in s.input_map.values()}
    extras = {t.name for t in c.models["tensorrt_llm_bls"].extra_inputs}
    missing = [t.name for t in c.models["tensorrt_llm_bls"].inputs if t.name not in sources and t.name not in extras]
    assert missing == []


@pytest.mark.parametrize("profile", PROFILES)
def test_step_inputs_are_gathered_under_step_names(profile):
    c = load_contract(profile)
    w = _bls_wiring(profile)
    env = _marked(w.inputs)
    for step in w.steps:
        declared = {t.name for t in c.models[step.model].inputs}
        got = step.gather(env)
        for dst, arr in got.items():
            assert dst in declared, f"{step.model} has no input {dst}"
            assert arr is env[step.input_map[dst]]
        # every mapped source present in env reaches the step
        assert set(got) == {d for d, s in step.input_map.items() if s in env}
        # fake the step's outputs and store them under ensemble names
        outs = {o: np.array([[1000 + k]]) for k, o in enumerate(step.output_map)}
        step.scatter(outs, env)
        for o, ens in step.output_map.items():
            assert env[ens] is outs[o]
            assert o in {t.name for t in c.models[step.model].outputs}


def test_engine_renames_in_trtllm_12():
    w = _bls_wiring("trtllm-1.2")
    env = _marked(["top_k", "top_p", "stream", "length_penalty", "min_tokens", "seed", "beam_width"])
    got = w.engine_step.gather(env)
    assert got["runtime_top_k"] is env["top_k"]
    assert got["runtime_top_p"] is env["top_p"]
    assert got["streaming"] is env["stream"]
    assert got["len_penalty"] is env["length_penalty"]
    assert got["min_tokens"] is env["min_tokens"]
    assert got["seed"] is env["seed"]
    assert "temperature" not in got  # optional and not sent


def test_engine_renames_in_trtllm_05():
    w = _bls_wiring("trtllm-0.5")
    env = _marked(["top_k", "random_seed", "min_length", "stream"])
    got = w.engine_step.gather(env)
    assert got["runtime_top_k"] is env["top_k"]
    assert got["random_seed"] is env["random_seed"]
    assert got["min_length"] is env["min_length"]
    assert got["streaming"] is env["stream"]


@pytest.mark.parametrize("profile", PROFILES)
def test_engine_outputs_cover_postprocessing(profile):
    w = _bls_wiring(profile)
    outs = w.engine_outputs_for([])
    produced = {w.engine_step.output_map[o] for o in outs}
    for step in w.post_steps:
        for src in step.input_map.values():
            if src in w.engine_step.output_map.values():
                assert src in produced
    assert w.text_outputs == ("text_output",)


def test_engine_outputs_follow_requested_outputs():
    w = _bls_wiring("trtllm-1.2")
    base = set(w.engine_outputs_for([]))
    assert "cum_log_probs" not in base
    assert "cum_log_probs" in w.engine_outputs_for(["cum_log_probs"])


def test_wiring_json_dict_form(tmp_path):
    c = load_contract("trtllm-1.2")
    data = {
        "steps": c.wiring(),
        "inputs": [t.model_dump() for t in c.models["ensemble"].inputs],
        "outputs": [t.name for t in c.models["ensemble"].outputs],
    }
    p = tmp_path / "wiring.json"
    p.write_text(json.dumps(data))
    w = Wiring.load(p)
    assert w.engine_step.model == ENGINE_STEP_MODEL
    assert "text_input" in w.inputs and "text_output" in w.outputs


def test_wiring_errors_name_the_problem(tmp_path):
    with pytest.raises(WiringError, match="wiring.json"):
        Wiring.load(tmp_path / "wiring.json")
    steps = load_contract("trtllm-1.2").wiring()
    with pytest.raises(WiringError, match="exactly one step"):
        Wiring.from_data([s for s in steps if s["model"] != "tensorrt_llm"])
    with pytest.raises(WiringError, match="input 'QUERY' reads 'text_input'"):
        Wiring.from_data(steps, inputs=["max_tokens"])
