"""The OpenAI front end's routing table for a repository with several LLMs (``render --model`` repeated):
one model id per LLM, each with its own Triton model, tokenizer and engine limits from the lock file; the
single-LLM repository keeps its one entry named after the engine directory. No Triton is needed: the table
and ``GET /v1/models`` / the 404 of an unknown model never reach it (the app's lifespan is not run).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from deploy_support import trtllm_engine

from repo_builder.errors import RepoBuilderError
from repo_builder.render import render_multi_repository, render_repository
from repo_builder.repository.lockfile import read_serving_info
from repo_builder.testing import packaged_tokenizer

pytest.importorskip("fastapi")


def _engine(out: Path, max_seq_len: int, vocab: int) -> Path:
    eng = trtllm_engine(out, 1, 1)
    cfg = json.loads((eng / "config.json").read_text())
    cfg["build_config"]["max_seq_len"] = max_seq_len
    cfg["pretrained_config"]["vocab_size"] = vocab
    (eng / "config.json").write_text(json.dumps(cfg))
    return eng


@pytest.fixture(scope="module")
def repos(tmp_path_factory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("route")
    tok1 = packaged_tokenizer("mistral-v1", base / "tok1")
    tok3 = packaged_tokenizer("mistral-v3", base / "tok3")
    two = base / "two"
    render_multi_repository(
        [("alpha", _engine(base / "ea", 2048, 32000), tok1), ("beta", _engine(base / "eb", 1536, 32768), tok3)], two
    )
    one = base / "one"
    render_repository(_engine(base / "llama-one", 2048, 32000), tok1, one)
    return {"two": two, "one": one, "tok1": tok1, "tok3": tok3}


def _config(repo: Path, **kw):
    from repo_builder.openai.served import FrontEndConfig

    return FrontEndConfig(grpc_url="127.0.0.1:1", repo=repo, **kw)


@pytest.mark.parametrize("role", ["ensemble", "tensorrt_llm_bls"])
def test_each_llm_routes_to_its_own_triton_model_tokenizer_and_limits(repos, role) -> None:
    from repo_builder.openai.served import load_served_models, routing_table

    config = _config(repos["two"], triton_model=role)
    table = routing_table(config, load_served_models(config))
    assert list(table) == ["alpha", "beta"]
    assert [r.backend.model for r in table.values()] == [f"alpha_{role}", f"beta_{role}"]
    assert [r.backend.engine_model for r in table.values()] == ["alpha_tensorrt_llm", "beta_tensorrt_llm"]
    assert [r.served.max_seq_len for r in table.values()] == [2048, 1536]
    assert [len(r.served.tokenizer) for r in table.values()] == [32000, 32768]  # v1 vs v3: each its own
    assert [str(i.tokenizer_dir) for i in read_serving_info(repos["two"])] == [str(repos["tok1"]), str(repos["tok3"])]


def test_single_llm_keeps_its_engine_name_and_served_model_name(repos) -> None:
    from repo_builder.openai.served import load_served_models, routing_table

    config = _config(repos["one"])
    table = routing_table(config, load_served_models(config))
    assert list(table) == ["llama-one"]
    assert (table["llama-one"].backend.model, table["llama-one"].backend.engine_model) == ("ensemble", "tensorrt_llm")
    config = _config(repos["one"], served_model_name="mine", triton_model="tensorrt_llm_bls")
    table = routing_table(config, load_served_models(config))
    assert list(table) == ["mine"] and table["mine"].backend.model == "tensorrt_llm_bls"


@pytest.mark.parametrize("option", ["served_model_name", "tokenizer_dir"])
def test_single_model_options_are_refused_for_several_llms(repos, option) -> None:
    from repo_builder.openai.served import load_served_models

    value = "x" if option == "served_model_name" else repos["tok1"]
    with pytest.raises(RepoBuilderError) as err:
        load_served_models(_config(repos["two"], **{option: value}))
    assert "--" + option.replace("_", "-") in str(err.value) and "alpha, beta" in str(err.value)


def test_models_lists_both_and_an_unknown_model_is_404(repos) -> None:
    from fastapi.testclient import TestClient

    from repo_builder.openai.app import create_app

    client = TestClient(create_app(_config(repos["two"])))  # no `with`: the lifespan (Triton) is not run
    got = client.get("/v1/models").json()
    assert [m["id"] for m in got["data"]] == ["alpha", "beta"]
    assert client.get("/v1/models/beta").json()["id"] == "beta"
    resp = client.post("/v1/completions", json={"model": "gamma", "prompt": "hi"})
    assert resp.status_code == 404
    assert resp.json()["error"]["code"] == "model_not_found" and resp.json()["error"]["param"] == "model"
    assert "'alpha', 'beta'" in resp.json()["error"]["message"]


def _samples(text: str) -> dict[str, float]:
    """``{'name{labels}': value}`` of a Prometheus text exposition (comments skipped)."""
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.rpartition(" ")
            out[key] = float(value)
    return out


def test_metrics_count_statuses_and_refusals_by_code_and_follow_the_naming_scheme(repos) -> None:
    from fastapi.testclient import TestClient

    from repo_builder.openai.app import create_app
    from repo_builder.openai.metrics import FAMILIES
    from repo_builder.runtime.metrics import FAMILY_BY_NAME

    client = TestClient(create_app(_config(repos["two"], api_key="k")))  # no `with`: no Triton
    auth = {"Authorization": "Bearer k"}
    before = _samples(client.get("/metrics").text)
    # every series exists from the start, at 0, for each served model and for "" (no model named)
    for model in ("", "alpha", "beta"):
        assert before[f'repo_builder_openai_requests_total{{model="{model}",status="200"}}'] == 0
        assert before[f'repo_builder_openai_first_token_seconds_bucket{{model="{model}",le="+Inf"}}'] == 0
    assert client.get("/v1/models").status_code == 401  # no key
    assert client.get("/v1/models", headers=auth).status_code == 200
    assert client.post("/v1/completions", json={"model": "gamma", "prompt": "hi"}, headers=auth).status_code == 404
    bad = {"model": "alpha", "prompt": "hi", "n": 2}
    assert client.post("/v1/completions", json=bad, headers=auth).status_code == 400
    assert client.post("/v1/completions", content=b"{", headers=auth).status_code == 400
    resp = client.get("/metrics")  # no key needed, like /health
    assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/plain; version=0.0.4")
    got = _samples(resp.text)
    delta = {k: got[k] - before.get(k, 0) for k in got if got[k] != before.get(k, 0)}
    assert delta == {
        'repo_builder_openai_requests_total{model="",status="401"}': 1,
        'repo_builder_openai_requests_total{model="",status="200"}': 1,
        'repo_builder_openai_requests_total{model="",status="404"}': 1,
        'repo_builder_openai_requests_total{model="alpha",status="400"}': 1,
        'repo_builder_openai_requests_total{model="",status="400"}': 1,
        'repo_builder_openai_requests_refused_total{model="",reason="invalid_api_key"}': 1,
        'repo_builder_openai_requests_refused_total{model="",reason="model_not_found"}': 1,
        'repo_builder_openai_requests_refused_total{model="alpha",reason="unsupported_parameter"}': 1,
        'repo_builder_openai_requests_refused_total{model="",reason="invalid_json"}': 1,
    }
    # one naming scheme with the served models' families: repo_builder_*, counters *_total, no name twice
    for fam in FAMILIES:
        assert fam.name.startswith("repo_builder_openai_") and fam.name not in FAMILY_BY_NAME
        assert fam.name.endswith("_total") == (fam.kind == "counter")
        assert f"# TYPE {fam.name} {fam.kind}" in resp.text
