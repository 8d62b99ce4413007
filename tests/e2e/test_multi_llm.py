"""Two LLMs in one repository (`render --model NAME=ENGINE_DIR,TOKENIZER_DIR` twice), served by one real
tritonserver: each answers through its own ensemble and BLS with its own weights and its own tokenizer.

The two tiny random LLaMAs use different packaged SentencePiece tokenizers (Mistral v1: 32000 tokens; Mistral
v3: 32768 tokens, other ids), so an LLM that got the other's tokenizer or engine would answer differently from
transformers' greedy generate() on its own checkpoint.
"""

from __future__ import annotations

import json
from pathlib import Path

import deploy_support
import pytest
from cli_support import run_cli
from e2e_support import render_llms, two_tiny_llamas

from repo_builder.deploy.facts import read_facts
from repo_builder.repository.lockfile import LOCK_NAME, lock_llms

pytestmark = pytest.mark.server

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

PROMPT = "What is machine learning?"
N_TOKENS = 8
ROLES = ("preprocessing", "tensorrt_llm", "postprocessing", "ensemble", "tensorrt_llm_bls")


@pytest.fixture(scope="module")
def llms(tmp_path_factory) -> dict[str, Path]:
    return two_tiny_llamas(tmp_path_factory.mktemp("llms"))


@pytest.fixture(scope="module")
def repo(llms, tmp_path_factory) -> Path:
    return render_llms(tmp_path_factory.mktemp("repo") / "two", {name: f"{ckpt},{ckpt}" for name, ckpt in llms.items()})


@pytest.fixture(scope="module")
def server(repo, serve_module):
    with serve_module(repo, timeout=600) as srv:
        yield srv


def test_one_lock_file_lists_both_llms(repo, llms) -> None:
    lock = json.loads((repo / LOCK_NAME).read_text())
    entries = lock_llms(lock)
    assert [e["name"] for e in entries] == ["alpha", "beta"]
    for entry in entries:
        assert entry["models"] == {role: f"{entry['name']}_{role}" for role in ROLES}
        assert entry["tokenizer"]["dir"] == str(llms[entry["name"]])
    assert lock["launch"]["tensorrt_llm_model_names"] == ["alpha_tensorrt_llm", "beta_tensorrt_llm"]
    assert sorted(p.name for p in repo.iterdir() if p.is_dir()) == sorted(f"{n}_{r}" for n in llms for r in ROLES)
    facts = read_facts(repo)  # deploy reads both
    assert facts.llms == ("alpha", "beta") and facts.tensorrt_llm_models == ("alpha_tensorrt_llm", "beta_tensorrt_llm")
    assert facts.tokenizer_dirs == (str(llms["alpha"]), str(llms["beta"]))


def test_bad_model_options_are_named(llms, tmp_path) -> None:
    ckpt = llms["alpha"]
    for args, text in (
        (["--model", f"alpha={ckpt}"], "NAME=ENGINE_DIR,TOKENIZER_DIR"),
        (["--model", f"a={ckpt},{ckpt}", "--model", f"a={ckpt},{ckpt}"], "given twice"),
        (["--model", f"a b={ckpt},{ckpt}", "--model", f"c={ckpt},{ckpt}"], "not a model name"),
        (["--model", f"a={ckpt},{ckpt}"], "at least two"),
        (["--model", f"a={ckpt},{ckpt}", "--model", f"b={tmp_path}/none,{ckpt}"], "--model b:"),
    ):
        got = run_cli("render", *args, "--output", str(tmp_path / "out"))
        assert got.returncode == 2 and text in got.stderr and "Traceback" not in got.stderr, (args, got.stderr)
        assert not (tmp_path / "out").exists()


def test_each_preprocessing_tokenizes_with_its_own_tokenizer(server, llms) -> None:
    import urllib.request

    ids = {}
    for name, ckpt in llms.items():
        body = {
            "inputs": [
                {"name": "QUERY", "datatype": "BYTES", "shape": [1, 1], "data": [PROMPT]},
                {"name": "REQUEST_OUTPUT_LEN", "datatype": "INT32", "shape": [1, 1], "data": [N_TOKENS]},
            ],
            "outputs": [{"name": "INPUT_ID"}],
        }
        req = urllib.request.Request(
            f"{server.http_url}/v2/models/{name}_preprocessing/infer",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=60) as resp:
            ids[name] = json.loads(resp.read())["outputs"][0]["data"]
        assert ids[name] == transformers.AutoTokenizer.from_pretrained(str(ckpt))(PROMPT)["input_ids"], name
    assert ids["alpha"] != ids["beta"]  # v1 and v3 give the prompt other ids


@pytest.mark.parametrize("entry", ["ensemble", "tensorrt_llm_bls"])
def test_each_llm_answers_with_its_own_weights_and_tokenizer(server, llms, entry) -> None:
    expected = {name: deploy_support.greedy_text(ckpt, PROMPT, N_TOKENS) for name, ckpt in llms.items()}
    assert expected["alpha"] != expected["beta"]
    for name in llms:
        body = deploy_support.http_generate(
            server.http_hostport,
            f"{name}_{entry}",
            {
                "text_input": PROMPT,
                "max_tokens": N_TOKENS,
                "bad_words": "",
                "stop_words": "",
                "exclude_input_in_output": True,
            },
        )
        assert body["text_output"] == expected[name], name


@pytest.fixture(scope="module", params=["ensemble", "tensorrt_llm_bls"])
def front_end(request, server, repo, tmp_path_factory):
    """`repo-builder openai --repo REPO --triton-model ROLE` in front of the module's tritonserver."""
    from e2e_support import openai_front_end

    log_dir = tmp_path_factory.mktemp("openai")
    with openai_front_end(repo, server.grpc_url, "--triton-model", request.param, log_dir=log_dir) as base:
        yield {"base": base, "role": request.param}


def test_openai_lists_both_llms_and_routes_each_to_its_own_model(front_end, server, llms) -> None:
    openai = pytest.importorskip("openai")
    with openai.OpenAI(base_url=f"{front_end['base']}/v1", api_key="none", max_retries=0) as client:
        assert [m.id for m in client.models.list().data] == ["alpha", "beta"]
        answers = {}
        for name in llms:
            got = client.completions.create(model=name, prompt=PROMPT, max_tokens=N_TOKENS, temperature=0)
            own = deploy_support.http_generate(
                server.http_hostport,
                f"{name}_{front_end['role']}",
                {
                    "text_input": PROMPT,
                    "max_tokens": N_TOKENS,
                    "bad_words": "",
                    "stop_words": "",
                    "exclude_input_in_output": True,
                },
            )
            assert got.model == name and got.choices[0].text == own["text_output"], name
            answers[name] = got.choices[0].text
        assert answers["alpha"] != answers["beta"]
        with pytest.raises(openai.NotFoundError) as err:
            client.completions.create(model="gamma", prompt=PROMPT, max_tokens=2)
        assert err.value.body["code"] == "model_not_found"
