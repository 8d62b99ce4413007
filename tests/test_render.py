"""render_repository on every decoder engine of tests/assets/engines with every test tokenizer that fits it,
the CPU reference engine (HF checkpoint) and the synthetic engine, both profiles."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

import pytest
from conftest import ENGINES, HF_TOKENIZERS, asset

from repo_builder.errors import EngineError
from repo_builder.render import render_repository
from repo_builder.repository.lockfile import LOCK_NAME, sha256_file
from repo_builder.repository.pbtxt import load_model_config
from repo_builder.repository.validate import validate_repository

DECODERS = sorted(p.name for p in ENGINES.iterdir() if p.is_dir() and p.name != "old-bert-base-benchmark")


from repo_builder.tokenizer import inspect_tokenizer as _real_inspect_tokenizer  # noqa: E402


@cache
def _tokenizer_info(path: str):
    return _real_inspect_tokenizer(path)


@pytest.fixture(autouse=True)
def cached_tokenizers(monkeypatch):
    """Loading a tokenizer takes seconds; render inspects the same few directories again and again."""
    import repo_builder.tokenizer as tok

    def cached(path, *, trust_remote_code=False):
        if trust_remote_code:
            return _real_inspect_tokenizer(path, trust_remote_code=True)
        return _tokenizer_info(str(Path(path).resolve()))

    monkeypatch.setattr(tok, "inspect_tokenizer", cached)


def engine_facts(engine_dir: Path) -> dict:
    """Limits read straight from the engine's config.json (independently of repo_builder.engine)."""
    cfg = json.loads((engine_dir / "config.json").read_text())
    if "build_config" in cfg:
        b = cfg["build_config"]
        m = cfg["pretrained_config"].get("mapping", {})
        return {
            "max_batch_size": b["max_batch_size"],
            "max_beam_width": b.get("max_beam_width", 1),
            "max_input_len": b["max_input_len"],
            "world_size": m.get("tp_size", 1) * m.get("pp_size", 1),
            "vocab_size": cfg["pretrained_config"]["vocab_size"],
        }
    b = cfg["builder_config"]
    return {
        "max_batch_size": b["max_batch_size"],
        "max_beam_width": b.get("max_beam_width") or 1,
        "max_input_len": b["max_input_len"],
        "world_size": (b.get("tensor_parallel") or 1) * (b.get("pipeline_parallel") or 1),
        "vocab_size": b["vocab_size"],
    }


def fitting_tokenizers(engine_dir: Path) -> list[str]:
    vocab = engine_facts(engine_dir)["vocab_size"]
    return [t for t in HF_TOKENIZERS if _tokenizer_info(str(asset(t).resolve())).vocab_size <= vocab]


def params(cfg) -> dict[str, str]:
    return {k: v.string_value for k, v in cfg.parameters.items()}


@pytest.mark.parametrize("engine_name", DECODERS)
def test_render_every_engine_with_every_fitting_tokenizer(engine_name, engine_copy, tmp_path):
    engine = engine_copy(engine_name)
    facts = engine_facts(engine)
    toks = fitting_tokenizers(engine)
    assert toks, f"no test tokenizer fits {engine_name}"
    for tok in toks:
        out = tmp_path / f"repo-{tok}"
        result = render_repository(engine, asset(tok), out)
        assert result.written and out.is_dir()
        assert validate_repository(out) == []
        assert validate_repository(out, engine_dir=engine) == []
        lock = json.loads((out / LOCK_NAME).read_text())
        values = {k: v["value"] for k, v in lock["values"].items()}
        origins = {k: v["origin"] for k, v in lock["values"].items()}
        assert values["triton_max_batch_size"] == facts["max_batch_size"]
        assert origins["triton_max_batch_size"] == "engine"
        assert values["max_beam_width"] == facts["max_beam_width"] and origins["max_beam_width"] == "engine"
        assert values["max_input_len"] == facts["max_input_len"]
        assert lock["launch"]["world_size"] == facts["world_size"]
        assert values["tokenizer_dir"] == str(asset(tok).resolve())
        llm = load_model_config(out / "tensorrt_llm" / "config.pbtxt")
        assert llm.backend == "tensorrtllm"
        assert llm.max_batch_size == facts["max_batch_size"]
        assert params(llm)["max_beam_width"] == str(facts["max_beam_width"])
        assert params(llm)["gpt_model_path"] == str(out / "tensorrt_llm" / "1")
        pre = load_model_config(out / "preprocessing" / "config.pbtxt")
        assert params(pre)["max_input_len"] == str(facts["max_input_len"])
        assert params(pre)["end_id"] == str(_tokenizer_info(str(asset(tok).resolve())).end_id)
        placed = out / "tensorrt_llm" / "1"
        assert (placed / "config.json").read_bytes() == (engine / "config.json").read_bytes()
        assert sorted(p.name for p in placed.glob("rank*.engine")) == [
            f"rank{r}.engine" for r in range(facts["world_size"])
        ]


def test_bert_engine_is_refused_with_why(tmp_path):
    out = tmp_path / "repo"
    with pytest.raises(EngineError) as err:
        render_repository(ENGINES / "old-bert-base-benchmark", asset("mistral_v1_tokenizer"), out)
    text = str(err.value)
    assert "old-bert-base-benchmark" in text and "encoder" in text and "gpt_attention_plugin" in text
    assert not out.exists() and list(tmp_path.iterdir()) == []


def test_hf_checkpoint_renders_the_reference_engine(tiny_llama, tmp_path):
    out = tmp_path / "repo"
    render_repository(tiny_llama, tiny_llama, out)
    llm = load_model_config(out / "tensorrt_llm" / "config.pbtxt")
    assert llm.backend == "python"
    p = params(llm)
    engine_dir = Path(p["engine_dir"])
    assert engine_dir == out / "tensorrt_llm" / "1" / "engine" and p["gpt_model_path"] == str(engine_dir)
    assert (engine_dir / "model.safetensors").read_bytes() == (tiny_llama / "model.safetensors").read_bytes()
    assert (engine_dir / "config.json").is_file()
    from repo_builder.profile.paths import templates_dir

    assert (out / "tensorrt_llm" / "1" / "model.py").read_bytes() == (
        templates_dir() / "python_models" / "reference_engine" / "model.py"
    ).read_bytes()
    assert (out / "tensorrt_llm" / "1" / "repo_builder_runtime" / "__init__.py").is_file()
    assert "synthetic_token_delay_ms" not in p and "kv_cache_free_gpu_mem_fraction" not in p
    assert validate_repository(out) == []


def test_synthetic_engine_streaming(tmp_path):
    eng = tmp_path / "synthetic"
    eng.mkdir()
    (eng / "synthetic_engine.json").write_text(
        json.dumps({"vocab_size": 32000, "max_batch_size": 16, "max_input_len": 256, "max_seq_len": 512})
    )
    out = tmp_path / "repo"
    render_repository(
        eng, asset("mistral_v1_tokenizer"), out, streaming=True, user_values={"synthetic_token_delay_ms": "2.5"}
    )
    llm = load_model_config(out / "tensorrt_llm" / "config.pbtxt")
    assert llm.backend == "python" and llm.model_transaction_policy.decoupled
    assert load_model_config(out / "tensorrt_llm_bls" / "config.pbtxt").model_transaction_policy.decoupled
    p = params(llm)
    assert p["synthetic_token_delay_ms"] == "2.5"
    assert (p["max_input_len"], p["max_seq_len"]) == ("256", "512")
    from repo_builder.profile.paths import templates_dir

    assert (out / "tensorrt_llm" / "1" / "model.py").read_bytes() == (
        templates_dir() / "python_models" / "synthetic_engine" / "model.py"
    ).read_bytes()
    assert validate_repository(out) == []


def test_python_models_runtime_and_wiring(tmp_path, engine_copy):
    from repo_builder.profile.contract import load_contract
    from repo_builder.profile.paths import runtime_dir, templates_dir

    out = tmp_path / "repo"
    render_repository(engine_copy("v1.2-smollm-llama-beam5"), asset("mistral_v1_tokenizer"), out)
    for model in ("preprocessing", "postprocessing", "tensorrt_llm_bls"):
        assert (out / model / "1" / "model.py").read_bytes() == (
            templates_dir() / "python_models" / model / "model.py"
        ).read_bytes()
        vendored = out / model / "1" / "repo_builder_runtime"
        for src in runtime_dir().rglob("*.py"):
            if "__pycache__" in src.parts:
                continue
            assert (vendored / src.relative_to(runtime_dir())).read_bytes() == src.read_bytes()
        assert not list(vendored.rglob("__pycache__"))
    assert not (out / "tensorrt_llm" / "1" / "model.py").exists()  # the C++ backend serves TRT-LLM engines
    assert (out / "ensemble" / "1").is_dir() and not list((out / "ensemble" / "1").iterdir())
    wiring = json.loads((out / "tensorrt_llm_bls" / "1" / "wiring.json").read_text())
    contract = load_contract("trtllm-1.2")
    assert wiring["steps"] == contract.wiring()
    assert [t["name"] for t in wiring["inputs"]] == [s.name for s in contract.models["tensorrt_llm_bls"].inputs]
    assert [t["name"] for t in wiring["outputs"]] == [s.name for s in contract.models["ensemble"].outputs]
    assert {t["data_type"] for t in wiring["outputs"] if t["name"] == "generation_logits"} == {"TYPE_FP32"}
    from repo_builder.runtime.bls import Wiring

    Wiring.from_data(wiring)  # the BLS accepts it


@pytest.mark.parametrize("profile", ["trtllm-1.2", "trtllm-0.5"])
def test_both_profiles_render_and_validate(profile, engine_copy, tmp_path):
    out = tmp_path / profile
    engine = engine_copy("old-llama2-7b-tp4")
    render_repository(engine, asset("sp_tiny_hf_tokenizer"), out, profile=profile)
    assert validate_repository(out, engine_dir=engine) == []
    llm = load_model_config(out / "tensorrt_llm" / "config.pbtxt")
    dtypes = {t.name: t.data_type for t in llm.input}
    from repo_builder.repository.pbtxt import dtype_name

    assert dtype_name(dtypes["request_output_len"]) == ("TYPE_UINT32" if profile == "trtllm-0.5" else "TYPE_INT32")
    lock = json.loads((out / LOCK_NAME).read_text())
    assert lock["profile"] == profile and lock["launch"]["world_size"] == 4


def test_values_file_then_set(tmp_path, engine_copy):
    values = tmp_path / "values.yaml"
    values.write_text(
        "kv_cache_free_gpu_mem_fraction: 0.5\nmax_queue_delay_microseconds: 100\ngpu_device_ids: [[0, 1], [2, 3]]\n"
    )
    out = tmp_path / "repo"
    render_repository(
        engine_copy("v0.8-mistral-7b-dolphin"),
        asset("mistral_v1_tokenizer"),
        out,
        values_file=values,
        user_values={"kv_cache_free_gpu_mem_fraction": "0.7"},
    )
    llm = load_model_config(out / "tensorrt_llm" / "config.pbtxt")
    p = params(llm)
    assert p["kv_cache_free_gpu_mem_fraction"] == "0.7"  # --set wins
    assert p["gpu_device_ids"] == "0,1;2,3"
    assert llm.dynamic_batching.max_queue_delay_microseconds == 100
    lock = json.loads((out / LOCK_NAME).read_text())
    assert lock["values"]["kv_cache_free_gpu_mem_fraction"] == {"value": 0.7, "origin": "user"}


def test_unset_runtime_value_is_omitted(tmp_path, engine_copy):
    out = tmp_path / "repo"
    render_repository(
        engine_copy("v0.8-mistral-7b-dolphin"),
        asset("mistral_v1_tokenizer"),
        out,
        user_values={"kv_cache_free_gpu_mem_fraction": ""},
    )
    assert "kv_cache_free_gpu_mem_fraction" not in params(load_model_config(out / "tensorrt_llm" / "config.pbtxt"))


def test_serve_path_writes_engine_dir_in_the_servers_namespace(tmp_path, engine_copy):
    """Case B22: the repository is mounted at /models in the server's container."""
    out = tmp_path / "repo"
    render_repository(engine_copy("v0.8-mistral-7b-dolphin"), asset("mistral_v1_tokenizer"), out, serve_path="/models")
    assert (
        params(load_model_config(out / "tensorrt_llm" / "config.pbtxt"))["gpt_model_path"] == "/models/tensorrt_llm/1"
    )
    assert json.loads((out / LOCK_NAME).read_text())["serve_path"] == "/models"
    assert validate_repository(out) == []  # the lock's serve_path maps /models to the repository


def test_lock_hashes_match_files_and_skip_engine_files(tmp_path, engine_copy):
    out = tmp_path / "repo"
    render_repository(engine_copy("v1.2-smollm-llama-beam5"), asset("mistral_v1_tokenizer"), out)
    lock = json.loads((out / LOCK_NAME).read_text())
    on_disk = {p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()}
    engine_files = {"tensorrt_llm/1/config.json", "tensorrt_llm/1/rank0.engine"}
    assert set(lock["files"]) == on_disk - engine_files - {LOCK_NAME}
    for rel, digest in lock["files"].items():
        assert sha256_file(out / rel) == digest
