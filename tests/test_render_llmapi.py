"""``render --profile llmapi-1.2``: NVIDIA's 1.2.1 llmapi layout (one Python-backend ``tensorrt_llm`` model:
config.pbtxt, 1/model.py, 1/model.yaml) from a Hugging Face checkpoint, with Triton's max_batch_size and the
transaction policy equal in both files, the LLM runtime's own limits kept apart, and every bad value refused
with an error naming its key (and nothing written)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from repo_builder.errors import RepoBuilderError
from repo_builder.profile.contract import load_contract
from repo_builder.render import render_repository
from repo_builder.repository.pbtxt import parse_model_config

PROFILE = "llmapi-1.2"
BLAME = ("model_templates", ".j2", "repo-builder bug", "Traceback")


def _render(ckpt: Path, out: Path, **fields):
    return render_repository(ckpt, None, out, profile=PROFILE, **fields)


def _files(repo: Path) -> tuple[dict, dict]:
    from google.protobuf.json_format import MessageToDict

    message = parse_model_config((repo / "tensorrt_llm" / "config.pbtxt").read_text())
    config = MessageToDict(message, preserving_proto_field_name=True)
    model_yaml = yaml.safe_load((repo / "tensorrt_llm" / "1" / "model.yaml").read_text())
    return config, model_yaml


def _names(specs) -> list[tuple[str, str, list[int], bool]]:
    return [(s["name"], s["data_type"], [int(d) for d in s["dims"]], bool(s.get("optional", False))) for s in specs]


def _decoupled(config: dict) -> bool:
    return bool(config.get("model_transaction_policy", {}).get("decoupled", False))


@pytest.fixture(scope="module")
def rendered(tiny_llama, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("llmapi") / "repo"
    _render(tiny_llama, out)
    return out


def test_layout_is_nvidias_model_plus_the_text_front_doors(rendered, tiny_llama, tmp_path):
    """NVIDIA's ``tensorrt_llm`` with its three files, and by default the two text front doors (Python models);
    ``text_front_doors=false`` leaves NVIDIA's single model alone."""
    models = sorted(p.name for p in rendered.iterdir() if p.is_dir())
    assert models == ["ensemble", "tensorrt_llm", "tensorrt_llm_bls"]
    for rel in ("config.pbtxt", "1/model.py", "1/model.yaml"):
        assert (rendered / "tensorrt_llm" / rel).is_file(), rel
    for front in ("ensemble", "tensorrt_llm_bls"):
        assert (rendered / front / "1" / "repo_builder_runtime" / "llmapi_front.py").is_file()
    assert (rendered / "repo-builder.lock.json").is_file()
    _, model_yaml = _files(rendered)
    assert "text_front_doors" not in model_yaml  # a render choice, not an LLM() argument
    bare = tmp_path / "bare"
    _render(tiny_llama, bare, user_values={"text_front_doors": "false"}, engine_mode="reference")
    assert sorted(p.name for p in bare.iterdir() if p.is_dir()) == ["tensorrt_llm"]


@pytest.mark.parametrize("streaming", [False, True])
def test_front_doors_have_the_ensemble_text_contract(tiny_llama, tmp_path, streaming):
    """ensemble and tensorrt_llm_bls: Python models with the contract's text inputs/outputs (the engine
    ensemble's names and dtypes), batch dimension (max_batch_size 1), decoupled exactly as tensorrt_llm."""
    from google.protobuf.json_format import MessageToDict

    out = tmp_path / "repo"
    _render(tiny_llama, out, streaming=streaming, engine_mode="reference")
    engine = load_contract("trtllm-1.2").models["ensemble"]
    contract = load_contract(PROFILE)
    for front in ("ensemble", "tensorrt_llm_bls"):
        message = parse_model_config((out / front / "config.pbtxt").read_text())
        config = MessageToDict(message, preserving_proto_field_name=True)
        assert config["name"] == front and config["backend"] == "python"
        assert int(config["max_batch_size"]) == 1 and _decoupled(config) is streaming
        spec = contract.models[front]
        assert _names(config["input"]) == [(s.name, s.data_type, list(s.dims), s.optional) for s in spec.inputs]
        assert _names(config["output"]) == [(s.name, s.data_type, list(s.dims), s.optional) for s in spec.outputs]
        for s in spec.inputs + spec.outputs:  # the engine ensemble's names, dtypes and dims, unchanged
            theirs = engine.input(s.name) if s in spec.inputs else engine.output(s.name)
            assert (theirs.data_type, theirs.dims, theirs.optional) == (s.data_type, s.dims, s.optional), s.name
        params = {k: v["string_value"] for k, v in config.get("parameters", {}).items()}
        assert params == {"tensorrt_llm_model_name": "tensorrt_llm"}


def test_config_pbtxt_has_the_llmapi_contract(rendered):
    config, _ = _files(rendered)
    assert config["name"] == "tensorrt_llm" and config["backend"] == "python"
    contract = load_contract(PROFILE).models["tensorrt_llm"]
    expected_in = [(s.name, s.data_type, list(s.dims), s.optional) for s in contract.inputs]
    expected_out = [(s.name, s.data_type, list(s.dims), s.optional) for s in contract.outputs]
    assert _names(config["input"]) == expected_in
    assert _names(config["output"]) == expected_out
    assert expected_in[0] == ("text_input", "TYPE_STRING", [-1], False)
    assert {"streaming", "stop", "sampling_param_max_tokens", "return_finish_reason"} <= {n for n, *_ in expected_in}
    assert [g["kind"] for g in config["instance_group"]] == ["KIND_CPU"]


def test_decoupled_and_max_batch_size_agree_in_both_files(rendered, tiny_llama, tmp_path):
    config, model_yaml = _files(rendered)
    assert int(config.get("max_batch_size", 0)) == 0 == model_yaml["triton_config"]["max_batch_size"]
    assert _decoupled(config) is False
    assert model_yaml["triton_config"]["decoupled"] is False
    streamed = tmp_path / "streamed"
    _render(tiny_llama, streamed, streaming=True)
    config, model_yaml = _files(streamed)
    assert _decoupled(config) is True
    assert model_yaml["triton_config"]["decoupled"] is True
    assert int(config.get("max_batch_size", 0)) == model_yaml["triton_config"]["max_batch_size"] == 0


def test_model_yaml_keys_and_checkpoint_path(rendered):
    _, model_yaml = _files(rendered)
    assert model_yaml["model"] == str(rendered / "tensorrt_llm" / "1" / "engine")
    assert (Path(model_yaml["model"]) / "config.json").is_file()
    assert model_yaml["backend"] == "pytorch"
    assert model_yaml["tensor_parallel_size"] == 1 and model_yaml["pipeline_parallel_size"] == 1
    assert list(model_yaml)[-1] == "triton_config"
    # unset LLM() arguments are left out (the LLM API's defaults apply)
    assert "max_batch_size" not in model_yaml and "kv_cache_config" not in model_yaml


def test_typed_values_nest_and_runtime_limits_stay_apart(tiny_llama, tmp_path):
    out = tmp_path / "repo"
    _render(
        tiny_llama,
        out,
        user_values={
            "max_batch_size": "16",
            "max_num_tokens": "2048",
            "max_seq_len": "256",
            "kv_cache_config.free_gpu_memory_fraction": "0.3",
            "kv_cache_config.enable_block_reuse": "false",
            "triton_config.cancellation_check_period_ms": "50",
            "guided_decoding_backend": "xgrammar",
        },
    )
    config, model_yaml = _files(out)
    assert model_yaml["max_batch_size"] == 16 and model_yaml["max_num_tokens"] == 2048
    assert model_yaml["max_seq_len"] == 256
    assert model_yaml["kv_cache_config"] == {"free_gpu_memory_fraction": 0.3, "enable_block_reuse": False}
    assert model_yaml["guided_decoding_backend"] == "xgrammar"
    assert model_yaml["triton_config"] == {"max_batch_size": 0, "decoupled": False, "cancellation_check_period_ms": 50}
    assert int(config.get("max_batch_size", 0)) == 0  # the runtime's limit is not Triton's
    lock = json.loads((out / "repo-builder.lock.json").read_text())
    assert lock["profile"] == PROFILE and lock["launch"]["world_size"] == 1
    assert lock["values"]["max_batch_size"] == {"value": 16, "origin": "user"}


@pytest.mark.parametrize(
    ("values", "key", "needle"),
    [
        ({"kv_cache_config.free_gpu_memory_fraction": "2"}, "kv_cache_config.free_gpu_memory_fraction", "1"),
        ({"tensor_parallel_size": "3"}, "tensor_parallel_size", "num_attention_heads"),
        ({"pipeline_parallel_size": "9"}, "pipeline_parallel_size", "num_hidden_layers"),
        ({"max_seq_len": "100000"}, "max_seq_len", "max_position_embeddings"),
        ({"moe_expert_parallel_size": "2"}, "moe_expert_parallel_size", "experts"),
        ({"speculative_config.max_draft_len": "4"}, "speculative_config.max_draft_len", "decoding_type"),
        ({"speculative_config.decoding_type": "Eagle3"}, "speculative_config.speculative_model", "required"),
        ({"kv_cache_config.max_tokens": "16"}, "kv_cache_config.max_tokens", "max_seq_len"),
        ({"dtype": "float8"}, "dtype", "bfloat16"),
        ({"max_batch_size": "0"}, "max_batch_size", "1"),
        ({"triton_config.max_batch_size": "8"}, "triton_config.max_batch_size", "0"),
        ({"kv_cache_config.free_gpu_memory_fractoin": "0.5"}, "kv_cache_config.free_gpu_memory_fractoin", ""),
        ({"model": "/elsewhere"}, "model", ""),
    ],
)
def test_bad_values_are_refused_naming_the_key(tiny_llama, tmp_path, values, key, needle):
    out = tmp_path / "repo"
    with pytest.raises(RepoBuilderError) as info:
        _render(tiny_llama, out, user_values=values)
    text = str(info.value)
    assert key in text and needle in text, text
    for word in BLAME:
        assert word not in text, text
    assert not out.exists()


def test_bad_value_leaves_an_existing_repository_alone(rendered, tiny_llama):
    before = {p: p.read_bytes() for p in rendered.rglob("*") if p.is_file() and "engine" not in p.parts}
    with pytest.raises(RepoBuilderError):
        _render(tiny_llama, rendered, user_values={"tensor_parallel_size": "3"}, force=True)
    after = {p: p.read_bytes() for p in rendered.rglob("*") if p.is_file() and "engine" not in p.parts}
    assert after == before


def test_remote_code_checkpoint_needs_trust_remote_code(tiny_llama, tmp_path):
    import shutil

    ckpt = tmp_path / "ckpt"
    shutil.copytree(tiny_llama, ckpt)
    cfg = json.loads((ckpt / "config.json").read_text())
    cfg["auto_map"] = {"AutoModelForCausalLM": "modeling_x.XForCausalLM"}
    (ckpt / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(RepoBuilderError, match="trust_remote_code"):
        _render(ckpt, tmp_path / "repo")
    _render(ckpt, tmp_path / "repo2", user_values={"trust_remote_code": "true"}, engine_mode="reference")
    _, model_yaml = _files(tmp_path / "repo2")
    assert model_yaml["trust_remote_code"] is True and model_yaml["model"] == str(ckpt)


def test_cli_checkpoint_dir(tiny_llama, tmp_path):
    """``--checkpoint-dir`` renders the llmapi layout; with an engine profile it is refused naming the flag."""
    from typer.testing import CliRunner

    from repo_builder.cli import app

    runner = CliRunner()
    ok = runner.invoke(
        app, ["render", "--profile", PROFILE, "--checkpoint-dir", str(tiny_llama), "--output", str(tmp_path / "r")]
    )
    assert ok.exit_code == 0, ok.output
    assert (tmp_path / "r" / "tensorrt_llm" / "1" / "model.yaml").is_file()
    bad = runner.invoke(
        app,
        ["render", "--profile", "trtllm-1.2", "--checkpoint-dir", str(tiny_llama), "--output", str(tmp_path / "b")],
    )
    assert bad.exit_code != 0 and "--checkpoint-dir" in bad.output, bad.output
    assert "Traceback" not in bad.output and not (tmp_path / "b").exists()


@pytest.mark.parametrize(
    ("key", "edit"),
    [
        ("decoupled", ("decoupled: false", "decoupled: true")),
        ("max_batch_size", ("max_batch_size: 0", "max_batch_size: 4")),
    ],
)
def test_model_refuses_to_load_when_the_two_files_differ(rendered, tmp_path, key, edit):
    """The rendered model's own load check (before any LLM is built): triton_config in model.yaml must equal
    config.pbtxt, else a load error names the key and both files."""
    import shutil

    from google.protobuf.json_format import MessageToJson

    from repo_builder.runtime.errors import ModelLoadError
    from repo_builder.runtime.llmapi_model import LLMAPIModel

    model_dir = tmp_path / "tensorrt_llm"
    shutil.copytree(rendered / "tensorrt_llm", model_dir, ignore=shutil.ignore_patterns("engine"))
    yaml_path = model_dir / "1" / "model.yaml"
    text_before = yaml_path.read_text()
    assert f"  {edit[0]}" in text_before
    yaml_path.write_text(text_before.replace(f"  {edit[0]}", f"  {edit[1]}"))
    config = parse_model_config((model_dir / "config.pbtxt").read_text())
    args = {
        "model_config": MessageToJson(config, preserving_proto_field_name=True),
        "model_repository": str(model_dir),
        "model_version": "1",
    }

    def no_llm(**kwargs):
        raise AssertionError("the LLM must not be built when the files differ")

    with pytest.raises(ModelLoadError) as info:
        LLMAPIModel(object(), args, llm_factory=no_llm)
    text = str(info.value)
    assert f"triton_config.{key}" in text and "config.pbtxt" in text and "model.yaml" in text, text
    yaml_path.write_text(text_before)  # the rendered pair passes the check and reaches the LLM factory
    with pytest.raises(ModelLoadError, match="failed to start"):
        LLMAPIModel(object(), args, llm_factory=no_llm)


@pytest.mark.parametrize("layout", ["disaggregated", "whisper"])
def test_other_layouts_are_refused_naming_the_flag(tiny_llama, tmp_path, layout):
    from typer.testing import CliRunner

    from repo_builder.cli import app

    args = ["render", "--profile", PROFILE, "--checkpoint-dir", str(tiny_llama), "--output", str(tmp_path / "r")]
    res = CliRunner().invoke(app, [*args, "--layout", layout])
    assert res.exit_code != 0 and "--layout" in res.output and "Traceback" not in res.output, res.output
    assert not (tmp_path / "r").exists()
