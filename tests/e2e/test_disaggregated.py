"""End to end through a real tritonserver: layout disaggregated (``render --layout disaggregated``).

One repository, one server: the tiny random LLaMA served by the CPU reference engine as ``context`` (from the
checkpoint copied into the repository) and ``generation`` (from a second checkpoint directory, a copy of the
first, given as ``--generation-engine-dir``), joined by ``disaggregated_serving_bls``; the ensemble goes
through the BLS. The plain layout's answer comes from the same server: a second ensemble, ``ensemble_plain``,
added after the render, whose engine step names ``context`` directly (a context-and-generation request,
exactly what the plain layout's ensemble sends its ``tensorrt_llm``). Checked:

* greedy text through the disaggregated ensemble equals the plain ensemble's, non-streaming (HTTP) and
  streamed (gRPC: the deltas concatenate to the same text);
* the phases one by one, as a client of the engine models: a context-only request returns the first token
  and an opaque ``context_phase_params``; a generation-only request with it resumes and returns what a
  plain request returns, token for token;
* a generation-only request without ``context_phase_params`` fails alone, naming the input.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from e2e_support import Stream, grpc_input, http_generate, texts

pytestmark = pytest.mark.server

PROMPTS = ["The weather in Paris is", "Disaggregated serving splits"]
N_TOKENS = 24


@pytest.fixture(scope="module")
def server(tiny_llama, tmp_path_factory, serve_module):
    import shutil

    from repo_builder.render import render_repository

    base = tmp_path_factory.mktemp("disagg")
    generation_dir = base / "generation_checkpoint"  # a second checkpoint directory (the same weights)
    shutil.copytree(tiny_llama, generation_dir)
    repo = base / "repo"
    render_repository(
        tiny_llama, tiny_llama, repo, streaming=True, layout="disaggregated", generation_engine_dir=generation_dir
    )
    plain = repo / "ensemble_plain"
    (plain / "1").mkdir(parents=True)
    text = (repo / "ensemble" / "config.pbtxt").read_text()
    text = text.replace('name: "ensemble"', 'name: "ensemble_plain"', 1)
    assert text.count('model_name: "disaggregated_serving_bls"') == 1
    (plain / "config.pbtxt").write_text(text.replace('"disaggregated_serving_bls"', '"context"'))
    with serve_module(repo, timeout=600.0) as srv:  # six Python models load on a busy CI machine
        yield srv


def test_rendered_layout(server):
    repo = server.config.model_repo
    lock = json.loads((repo / "repo-builder.lock.json").read_text())
    assert lock["launch"]["tensorrt_llm_model_names"] == ["context", "generation"]
    assert lock["layout"]["name"] == "disaggregated"
    # two reference-engine models from two checkpoint directories: context's copy and generation's own
    generation_dir = lock["layout"]["generation_engine"]["dir"]
    assert generation_dir != lock["engine"]["dir"]
    assert f'string_value: "{generation_dir}"' in (repo / "generation" / "config.pbtxt").read_text()
    assert f'string_value: "{repo / "context" / "1" / "engine"}"' in (repo / "context" / "config.pbtxt").read_text()
    assert not (repo / "tensorrt_llm").exists() and not (repo / "tensorrt_llm_bls").exists()


def test_greedy_text_equals_the_plain_layouts(server):
    stream = Stream(server)
    try:
        for i, prompt in enumerate(PROMPTS):
            payload = {"text_input": prompt, "max_tokens": N_TOKENS, "exclude_input_in_output": True}
            status, disagg = http_generate(server, "ensemble", payload)
            assert status == 200, disagg
            status, plain = http_generate(server, "ensemble_plain", payload)
            assert status == 200, plain
            assert disagg["text_output"] == plain["text_output"] and plain["text_output"]
            inputs = [
                grpc_input("text_input", np.array([[prompt.encode()]], dtype=object)),
                grpc_input("max_tokens", np.array([[N_TOKENS]], np.int32)),
                grpc_input("stream", np.array([[True]], bool)),
            ]
            for model in ("ensemble", "ensemble_plain"):
                stream.send(model, inputs, f"{model}-{i}", outputs=["text_output"])
            got, errors = stream.collect({f"ensemble-{i}", f"ensemble_plain-{i}"})
            assert not errors
            streamed = "".join(texts(got[f"ensemble-{i}"]))
            assert streamed == "".join(texts(got[f"ensemble_plain-{i}"])) == disagg["text_output"]
    finally:
        stream.close()


def _engine_inputs(ids: list[int], **extra: np.ndarray) -> list[grpcclient.InferInput]:
    arrays = {
        "input_ids": np.array([ids], np.int32),
        "input_lengths": np.array([[len(ids)]], np.int32),
        "request_output_len": np.array([[N_TOKENS]], np.int32),
        "exclude_input_in_output": np.array([[True]], bool),
        **extra,
    }
    out = []
    for name, arr in arrays.items():
        wire = {"int32": "INT32", "bool": "BOOL", "uint8": "UINT8"}[str(arr.dtype)]
        t = grpcclient.InferInput(name, list(arr.shape), wire)
        t.set_data_from_numpy(arr)
        out.append(t)
    return out


def _call(server, model: str, inputs, request_type: str | None = None) -> list[dict[str, np.ndarray]]:
    """Every response of one request to a decoupled engine model ({output: array}); raises on an error."""
    import queue

    client = grpcclient.InferenceServerClient(server.grpc_url)
    events: queue.Queue = queue.Queue()
    client.start_stream(callback=lambda result, error: events.put((result, error)))
    try:
        params = {"request_type": request_type} if request_type else None
        client.async_stream_infer(
            model, inputs, request_id="phase", parameters=params, enable_empty_final_response=True
        )
        out = []
        while True:
            result, error = events.get(timeout=120)
            if error is not None:
                raise RuntimeError(str(error))
            response = result.get_response()
            if response.outputs:
                out.append({o.name: result.as_numpy(o.name) for o in response.outputs})
            if response.parameters["triton_final_response"].bool_param:
                return out
    finally:
        client.stop_stream()
        client.close()


def test_context_phase_then_generation_phase_on_the_engine_models(server):
    ids = [1, 415, 8086, 297, 5465, 349]
    plain = [t for r in _call(server, "generation", _engine_inputs(ids)) for t in r["output_ids"].reshape(-1)]
    (ctx,) = _call(server, "context", _engine_inputs(ids), "context_only")
    assert ctx["output_ids"].reshape(-1).tolist() == plain[:1]
    params = ctx["context_phase_params"]
    assert params.dtype == np.uint8 and params.size > 0
    gen = _call(server, "generation", _engine_inputs(ids, context_phase_params=params), "generation_only")
    assert [t for r in gen for t in r["output_ids"].reshape(-1)] == plain
    with pytest.raises(RuntimeError, match="'context_phase_params'"):
        _call(server, "generation", _engine_inputs(ids), "generation_only")
