"""repo-builder adopt / diff / upgrade on NVIDIA's inflight_batcher_llm templates filled by their own
fill_template.py (tests/assets/nvidia_filled: tensorrtllm_backend tags v0.5.0 and v0.19.0, TensorRT-LLM 1.2.0rc8's
triton_backend), and on hand-edited variants of them."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from pathlib import Path

import pytest
import yaml
from cli_support import assert_refused
from conftest import ASSETS
from engine_configs import config, write_engine
from typer.testing import CliRunner

from repo_builder.adopt import AdoptError, adopt_repository, write_values_file
from repo_builder.cli import app
from repo_builder.semdiff import semantic_diff, unexplained
from repo_builder.upgrade import upgrade_repository

FILLED = ASSETS / "nvidia_filled"
ENGINE_PLACEHOLDER = "/models/engines/llama-7b/1-gpu"
TOKENIZER_PLACEHOLDER = "/models/tokenizers/llama-7b"

#: The documented fixes (docs/migration.md) a round trip of each fill may show, and nothing else.
ROUND_TRIP_FIXES = {
    "v0.5.0": {
        "bls-added",
        "dynamic-batching",
        "end-pad-from-tokenizer",
        "explicit-defaults",
        "force-cpu-only-input-tensors",
        "optional-word-lists",
        "repo-builder-models",
        "repo-builder-tensors",
        "scalar-reshape",
        "tokenizer-type-dropped",
    },
    "v0.19.0": {
        "backend-read-dtypes",
        "explicit-defaults",
        "multimodal-dropped",
        "newer-contract-tensors",
        "repo-builder-models",
        "repo-builder-tensors",
        "scalar-reshape",
        "stream-keys",
    },
}
#: TensorRT-LLM 1.2.0rc8's fill shows the same fixes as v0.19.0's (its new tensors are in the contract already).
ROUND_TRIP_FIXES["v1.2.0rc8"] = ROUND_TRIP_FIXES["v0.19.0"]

runner = CliRunner()


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """The tokenizer, an engine per tag (old layout for v0.5.0, new for v0.19.0) and a function that copies a
    filled repository with the placeholder paths replaced by them (as the user filled their own paths)."""
    from repo_builder.testing import packaged_tokenizer

    base = tmp_path_factory.mktemp("adopt")
    tok = packaged_tokenizer("mistral-v1", base / "tok")
    engines = {
        "v0.5.0": write_engine(
            base / "eng-old", config("old", builder_config={"max_batch_size": 128, "max_beam_width": 1})
        ),
        "v0.19.0": write_engine(base / "eng-new", config("new", build_config={"max_batch_size": 64})),
    }
    engines["v1.2.0rc8"] = engines["v0.19.0"]

    def filled(tag: str, dest: Path) -> Path:
        shutil.copytree(FILLED / tag, dest)
        for cfg in dest.glob("*/config.pbtxt"):
            text = cfg.read_text().replace(ENGINE_PLACEHOLDER, str(engines[tag]))
            cfg.write_text(text.replace(TOKENIZER_PLACEHOLDER, str(tok)))
        return dest

    return {"tok": tok, "engines": engines, "filled": filled, "base": base}


def _tree_digest(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() for p in root.rglob("*") if p.is_file()
    }


def _edit(path: Path, pattern: str, replacement: str) -> None:
    """sed -E -i 's/pattern/replacement/' (the one edit must match)."""
    text = path.read_text()
    new, n = re.subn(pattern, replacement, text, count=1, flags=re.S)
    assert n == 1, pattern
    path.write_text(new)


@pytest.mark.parametrize(
    "tag, profile", [("v0.5.0", "trtllm-0.5"), ("v0.19.0", "trtllm-1.2"), ("v1.2.0rc8", "trtllm-1.2")]
)
def test_round_trip_adopt_render_diff(world, tmp_path, tag, profile):
    repo = world["filled"](tag, tmp_path / "repo")
    before = _tree_digest(repo)
    values = tmp_path / "values.yaml"
    res = runner.invoke(
        app,
        [
            "adopt",
            str(repo),
            "--engine-dir",
            str(world["engines"][tag]),
            "--tokenizer-dir",
            str(world["tok"]),
            "--values-out",
            str(values),
        ],
    )
    assert res.exit_code == 0, res.output
    assert f"profile {profile}" in res.output
    doc = yaml.safe_load(values.read_text())
    assert doc["adopted_from"]["repository"] == str(repo)
    new = tmp_path / "new"
    res = runner.invoke(
        app,
        [
            "render",
            "--profile",
            profile,
            "--values",
            str(values),
            "--engine-dir",
            str(world["engines"][tag]),
            "--tokenizer-dir",
            str(world["tok"]),
            "--engine-mode",
            "reference",
            "-o",
            str(new),
        ],
    )
    assert res.exit_code == 0, res.output
    changes = semantic_diff(repo, new)
    assert unexplained(changes) == []
    assert {c.fix for c in changes} == ROUND_TRIP_FIXES[tag]
    lock = json.loads((new / "repo-builder.lock.json").read_text())
    assert lock["values_source"]["adopted_from"]["repository"] == str(repo)
    assert lock["values_source"]["file"] == str(values)
    assert lock["values"]["kv_cache_free_gpu_mem_fraction"]["origin"] == "user"
    assert _tree_digest(repo) == before  # adopt and render never wrote into REPO
    res = runner.invoke(app, ["diff", str(repo), str(new)])
    assert res.exit_code == 0 and "0 unexplained" in res.output, res.output


def test_values_recovered_from_v05(world, tmp_path):
    a = adopt_repository(world["filled"]("v0.5.0", tmp_path / "repo"))
    assert a.profile == "trtllm-0.5"
    assert a.values["kv_cache_free_gpu_mem_fraction"] == 0.85
    assert a.values["enable_trt_overlap"] is False
    assert a.values["decoupled_mode"] is True
    assert a.values["batching_strategy"] == "inflight_fused_batching"
    assert a.where["enable_trt_overlap"] == "tensorrt_llm/config.pbtxt: enable_trt_overlap"
    assert a.paths["engine_dir"] == str(world["engines"]["v0.5.0"])
    assert {(f.file, f.key, f.kind) for f in a.findings} >= {
        ("preprocessing/config.pbtxt", "tokenizer_type", "dropped"),
        ("tensorrt_llm/config.pbtxt", "FORCE_CPU_ONLY_INPUT_TENSORS", "unknown_key"),
    }


def test_values_recovered_from_v019(world, tmp_path):
    a = adopt_repository(world["filled"]("v0.19.0", tmp_path / "repo"))
    assert a.profile == "trtllm-1.2"
    assert a.values["triton_max_batch_size"] == 64
    assert a.values["exclude_input_in_output"] is True
    assert a.values["max_attention_window_size"] == [2560]
    assert a.values["logits_datatype"] == "TYPE_FP32"
    holes = {f.key for f in a.findings if f.kind == "placeholder"}
    assert {"batch_scheduler_policy", "lora_prefetch_dir", "skip_special_tokens"} <= holes
    assert "tensorrt_llm/config.pbtxt" in {f.file for f in a.findings if f.key == "batch_scheduler_policy"}


def test_values_recovered_from_trtllm_12(world, tmp_path):
    """TensorRT-LLM 1.2.0rc8's triton_backend fill: its new placeholders are recovered (prompt_embedding_table's
    dtype) or named (enable_trt_overlap, live again in 1.2), its multimodal keys are dropped by name."""
    a = adopt_repository(world["filled"]("v1.2.0rc8", tmp_path / "repo"))
    assert a.profile == "trtllm-1.2"
    assert a.values["batching_strategy"] == "inflight_batching"
    assert a.values["prompt_embedding_table_data_type"] == "TYPE_FP16"
    assert a.values["decoupled_mode"] is True and a.values["kv_cache_free_gpu_mem_fraction"] == 0.5
    assert a.where["prompt_embedding_table_data_type"] == (
        "tensorrt_llm/config.pbtxt: prompt_embedding_table data_type"
    )
    holes = {(f.file, f.key) for f in a.findings if f.kind == "placeholder"}
    assert ("tensorrt_llm/config.pbtxt", "enable_trt_overlap") in holes
    assert ("tensorrt_llm_bls/config.pbtxt", "tensorrt_llm_model_name") in holes
    dropped = {(f.file, f.key) for f in a.findings if f.kind == "dropped"}
    assert {("preprocessing/config.pbtxt", k) for k in ("hf_model_path", "max_num_images")} <= dropped
    assert not [f for f in a.findings if f.kind in ("unknown_key", "refused") and f.file != "tensorrt_llm/config.pbtxt"]


def test_trtllm_12_hand_edits(world, tmp_path):
    """Hand-edited variants of the 1.2.0rc8 fill: a value changed by sed is carried, a removed key and a
    placeholder left are named by file and key."""
    repo = world["filled"]("v1.2.0rc8", tmp_path / "repo")
    cfg = repo / "tensorrt_llm/config.pbtxt"
    _edit(cfg, r'(kv_cache_free_gpu_mem_fraction".*?string_value: )"0.5"', r'\g<1>"0.7"')
    _edit(cfg, r'(key: "enable_kv_cache_reuse".*?string_value: )"False"', r'\g<1>"True"')
    _edit(cfg, r'parameters: \{\s*key: "gpt_model_path".*?\}\s*\}', "")
    _edit(cfg, r'\{\s*name: "request_output_len".*?\},', "")
    _edit(repo / "preprocessing/config.pbtxt", r'(tokenizer_dir".*?string_value: )"[^"]*"', r'\g<1>"${tokenizer_dir}"')
    a = adopt_repository(repo)
    assert a.values["kv_cache_free_gpu_mem_fraction"] == 0.7 and a.values["enable_kv_cache_reuse"] is True
    missing = {(f.file, f.key) for f in a.findings if f.kind == "missing"}
    assert {("tensorrt_llm/config.pbtxt", "gpt_model_path"), ("tensorrt_llm/config.pbtxt", "request_output_len")} <= (
        missing
    )
    holes = {(f.file, f.key) for f in a.findings if f.kind == "placeholder"}
    assert ("preprocessing/config.pbtxt", "tokenizer_dir") in holes
    assert a.paths["tokenizer_dir"] == str(world["tok"])  # postprocessing still names it


def test_trtllm_12_dtype_disagreement_named(world, tmp_path):
    """The 1.2.0rc8 BLS and ensemble declare prompt_embedding_table TYPE_FP16 themselves; a fill that gives the
    engine's another dtype leaves the models disagreeing: the engine's is adopted, the BLS's and the ensemble's
    named by file and tensor."""
    repo = world["filled"]("v1.2.0rc8", tmp_path / "repo")
    table = r'(name: "prompt_embedding_table"\s*data_type: )TYPE_FP16'
    _edit(repo / "tensorrt_llm/config.pbtxt", table, r"\g<1>TYPE_BF16")
    a = adopt_repository(repo)
    assert a.values["prompt_embedding_table_data_type"] == "TYPE_BF16"
    disagree = {(f.file, f.key): f.message for f in a.findings if f.kind == "disagree"}
    message = disagree["tensorrt_llm_bls/config.pbtxt", "prompt_embedding_table data_type"]
    assert "TYPE_FP16" in message and "TYPE_BF16" in message and "tensorrt_llm/config.pbtxt" in message
    assert set(disagree) == {
        ("tensorrt_llm_bls/config.pbtxt", "prompt_embedding_table data_type"),
        ("ensemble/config.pbtxt", "prompt_embedding_table data_type"),  # hard-coded TYPE_FP16 there too
    }


def test_trtllm_12_structural_placeholder_left(world, tmp_path):
    """1.2's prompt_embedding_table_data_type sits in a data_type field: left unfilled, Triton cannot parse the
    file (upstream server #8592); adopt names the file and the key and writes no values file."""
    repo = world["filled"]("v1.2.0rc8", tmp_path / "repo")
    _edit(
        repo / "tensorrt_llm/config.pbtxt",
        r'(name: "prompt_embedding_table"\s*data_type: )TYPE_FP16',
        r"\g<1>${prompt_embedding_table_data_type}",
    )
    res = runner.invoke(app, ["adopt", str(repo), "--values-out", str(tmp_path / "v.yaml")])
    assert_refused(res, "tensorrt_llm/config.pbtxt", "prompt_embedding_table_data_type")
    assert not (tmp_path / "v.yaml").exists()


def test_hand_edited_value_is_carried(world, tmp_path):
    repo = world["filled"]("v0.5.0", tmp_path / "repo")
    _edit(
        repo / "tensorrt_llm/config.pbtxt", r'(kv_cache_free_gpu_mem_fraction".*?string_value: )"0.85"', r'\g<1>"0.7"'
    )
    a = adopt_repository(repo)
    assert a.values["kv_cache_free_gpu_mem_fraction"] == 0.7


def test_hand_edited_refused_value_named(world, tmp_path):
    repo = world["filled"]("v0.5.0", tmp_path / "repo")
    _edit(repo / "tensorrt_llm/config.pbtxt", r'"guaranteed_no_evict"', '"guaranteed_completion"')
    _edit(
        repo / "tensorrt_llm/config.pbtxt", r'(kv_cache_free_gpu_mem_fraction".*?string_value: )"0.85"', r'\g<1>"1.5"'
    )
    a = adopt_repository(repo)
    refused = {f.key: f.message for f in a.findings if f.kind == "refused" and f.file == "tensorrt_llm/config.pbtxt"}
    assert "guaranteed_no_evict" in refused["batch_scheduler_policy"]  # the new spelling is named
    assert "kv_cache_free_gpu_mem_fraction" in refused
    assert "batch_scheduler_policy" not in a.values


def test_hand_removed_keys_named(world, tmp_path):
    repo = world["filled"]("v0.5.0", tmp_path / "repo")
    cfg = repo / "tensorrt_llm/config.pbtxt"
    _edit(cfg, r'parameters: \{\s*key: "gpt_model_path".*?\}\s*\}', "")
    _edit(cfg, r'\{\s*name: "input_lengths".*?\},', "")
    a = adopt_repository(repo)
    missing = {(f.file, f.key) for f in a.findings if f.kind == "missing"}
    assert ("tensorrt_llm/config.pbtxt", "gpt_model_path") in missing
    assert ("tensorrt_llm/config.pbtxt", "input_lengths") in missing


def test_placeholder_left_named(world, tmp_path):
    repo = world["filled"]("v0.5.0", tmp_path / "repo")
    _edit(repo / "postprocessing/config.pbtxt", r'(tokenizer_dir".*?string_value: )"[^"]*"', r'\g<1>"${tokenizer_dir}"')
    a = adopt_repository(repo)
    holes = [f for f in a.findings if f.kind == "placeholder"]
    assert [(f.file, f.key) for f in holes] == [("postprocessing/config.pbtxt", "tokenizer_dir")]
    assert a.paths["tokenizer_dir"] == str(world["tok"])  # preprocessing still names it


def test_placeholder_in_structural_field_is_an_error(world, tmp_path):
    repo = world["filled"]("v0.5.0", tmp_path / "repo")
    _edit(repo / "tensorrt_llm/config.pbtxt", r"decoupled: True", "decoupled: ${decoupled_mode}")
    res = runner.invoke(app, ["adopt", str(repo), "--values-out", str(tmp_path / "v.yaml")])
    assert_refused(res, "tensorrt_llm/config.pbtxt", "decoupled_mode")
    assert not (tmp_path / "v.yaml").exists()


def test_hand_edited_model_py_detected(world, tmp_path):
    repo = world["filled"]("v0.19.0", tmp_path / "repo")
    (repo / "preprocessing/1").mkdir(parents=True, exist_ok=True)
    (repo / "preprocessing/1/model.py").write_text("# NVIDIA's preprocessing, with a local patch\n")
    a = adopt_repository(repo)
    edits = [f for f in a.findings if f.kind == "hand_edit"]
    assert [(f.file, f.key) for f in edits] == [("preprocessing/1/model.py", "model.py")]


def test_extra_model_left_alone(world, tmp_path):
    repo = world["filled"]("v0.19.0", tmp_path / "repo")
    (repo / "embedder").mkdir()
    (repo / "embedder/config.pbtxt").write_text('name: "embedder"\nbackend: "python"\nmax_batch_size: 8\n')
    a = adopt_repository(repo)
    assert ("embedder/config.pbtxt", "extra_model") in {(f.file, f.kind) for f in a.findings}


@pytest.mark.parametrize(
    "make, expected",
    [
        (lambda d: d.mkdir(), "no <model>/config.pbtxt"),
        (lambda d: (d / "m").mkdir(parents=True) or (d / "m/config.pbtxt").write_text("name: [oops"), "m/config.pbtxt"),
        (
            lambda d: (
                (d / "m").mkdir(parents=True) or (d / "m/config.pbtxt").write_text('name: "m"\nbackend: "python"')
            ),
            "no TensorRT-LLM model",
        ),
    ],
    ids=["empty", "unparsable", "no-engine-model"],
)
def test_bad_repository(tmp_path, make, expected):
    repo = tmp_path / "repo"
    make(repo)
    res = runner.invoke(app, ["adopt", str(repo), "--values-out", str(tmp_path / "v.yaml")])
    assert_refused(res, expected)


def test_two_versions_mixed(world, tmp_path):
    repo = world["filled"]("v0.19.0", tmp_path / "repo")
    shutil.rmtree(repo / "preprocessing")
    shutil.copytree(FILLED / "v0.5.0/preprocessing", repo / "preprocessing")
    with pytest.raises(AdoptError) as err:
        adopt_repository(repo)
    text = str(err.value)
    assert "two versions mixed" in text
    assert "tensorrt_llm/config.pbtxt" in text and "preprocessing/config.pbtxt" in text
    assert "REQUEST_OUTPUT_LEN" in text


def test_engine_smaller_batch_is_a_finding(world, tmp_path):
    """B08 (rules.ENGINE_LIMITS): a Triton batch above the engine's still loads; adopt reports it by file and key."""
    repo = world["filled"]("v0.19.0", tmp_path / "repo")
    for cfg in repo.glob("*/config.pbtxt"):
        cfg.write_text(cfg.read_text().replace("max_batch_size: 64", "max_batch_size: 256"))
    a = adopt_repository(repo, engine_dir=world["engines"]["v0.19.0"])
    engine = {(f.file, f.key): f.message for f in a.findings if f.kind == "engine"}
    assert "engine's max_batch_size 64" in engine["tensorrt_llm/config.pbtxt", "max_batch_size"]
    # the fill's KV-cache settings against this engine (max_seq_len 2048) are reported too
    assert ("tensorrt_llm/config.pbtxt", "max_attention_window_size") in engine


@pytest.mark.parametrize(
    "edit, key",
    [((r'(key: "max_beam_width".*?string_value: )"1"', r'\g<1>"4"'), "max_beam_width")],
    ids=["beams"],
)
def test_engine_disagrees(world, tmp_path, edit, key):
    repo = world["filled"]("v0.19.0", tmp_path / "repo")
    _edit(repo / "tensorrt_llm/config.pbtxt", *edit)
    res = runner.invoke(
        app,
        [
            "adopt",
            str(repo),
            "--engine-dir",
            str(world["engines"]["v0.19.0"]),
            "--values-out",
            str(tmp_path / "v.yaml"),
        ],
    )
    assert_refused(res, "tensorrt_llm/config.pbtxt", key)


def test_values_out_inside_repo_refused(world, tmp_path):
    repo = world["filled"]("v0.5.0", tmp_path / "repo")
    a = adopt_repository(repo)
    with pytest.raises(AdoptError, match="into the adopted repository"):
        write_values_file(a, repo / "values.yaml")


def test_upgrade_dry_run_prints_groups_and_writes_nothing(world, tmp_path):
    repo = world["filled"]("v0.5.0", tmp_path / "repo")
    before = _tree_digest(repo)
    out = tmp_path / "new"
    res = runner.invoke(app, ["upgrade", str(repo), "--profile", "trtllm-1.2", "-o", str(out), "--dry-run"])
    assert res.exit_code == 0, res.output
    for title in ("renamed or retyped inputs:", "new parameters", "dropped keys:", "changed defaults:"):
        assert title in res.output
    assert "[int32-request-inputs]" in res.output and "[profile-default]" in res.output
    assert "[unexplained]" not in res.output
    assert "dry run: nothing written" in res.output
    assert not out.exists()
    assert _tree_digest(repo) == before


def test_upgrade_equals_fresh_render(world, tmp_path):
    """0.5 -> 1.2: the upgraded repository is what a fresh trtllm-1.2 render of the same engine and tokenizer is,
    but for the values the user chose (here enable_trt_overlap False, which 1.2 defaults to as well)."""
    from repo_builder.render import render_repository

    repo = world["filled"]("v0.5.0", tmp_path / "repo")
    u = upgrade_repository(repo, profile="trtllm-1.2", output=tmp_path / "up")
    assert u.written == tmp_path / "up"
    assert unexplained(u.changes) == []
    assert [c.item for c in u.value_changes] == [
        "default kv_cache_free_gpu_mem_fraction",
        "default triton_max_batch_size",
    ]
    # the user's own choices in the v0.5.0 fill (one pre/postprocessing instance, no TRT overlap, ...) are kept
    assert u.values["preprocessing_instance_count"] == 1
    assert "kv_cache_free_gpu_mem_fraction" not in u.values  # 0.85 was trtllm-0.5's default: 1.2's 0.9 applies
    fresh = tmp_path / "fresh"
    render_repository(
        world["engines"]["v0.5.0"],
        world["tok"],
        fresh,
        profile="trtllm-1.2",
        engine_mode="reference",
        user_values=u.values,
    )
    assert semantic_diff(u.written, fresh) == []
    lock = json.loads((u.written / "repo-builder.lock.json").read_text())
    assert lock["profile"] == "trtllm-1.2"
    assert lock["values_source"]["adopted_from"]["repository"] == str(repo)
    assert lock["values_source"]["adopted_from"]["upgraded_to"] == "trtllm-1.2"
    assert "file" not in lock["values_source"]  # the upgrade's own values file is gone


def test_upgrade_refuses_output_inside_repo(world, tmp_path):
    repo = world["filled"]("v0.5.0", tmp_path / "repo")
    res = runner.invoke(app, ["upgrade", str(repo), "-o", str(repo / "new")])
    assert_refused(res, "--output")
    assert not (repo / "new").exists()


def test_values_file_source_in_lock(world, tmp_path):
    """render --values records the file in the lock file; a malformed adopted_from block is refused by key."""
    from repo_builder.errors import ParameterError
    from repo_builder.render import render_repository

    values = tmp_path / "values.yaml"
    values.write_text("kv_cache_free_gpu_mem_fraction: 0.8\n")
    eng = world["engines"]["v0.19.0"]
    out = render_repository(eng, world["tok"], tmp_path / "r", values_file=values, engine_mode="reference").plan.output
    lock = json.loads((out / "repo-builder.lock.json").read_text())
    assert lock["values_source"] == {"file": str(values)}
    values.write_text("adopted_from: somewhere\n")
    with pytest.raises(ParameterError, match="adopted_from"):
        render_repository(eng, world["tok"], tmp_path / "r2", values_file=values, engine_mode="reference")
    assert not (tmp_path / "r2").exists()


def test_engine_world_size_disagrees(world, tmp_path):
    """A tp-2 engine against a fill that gives its one instance a single GPU: a finding naming file and key."""
    repo = world["filled"]("v0.19.0", tmp_path / "repo")
    _edit(repo / "tensorrt_llm/config.pbtxt", r'"\$\{gpu_device_ids\}"', '"0"')
    tp2 = write_engine(
        tmp_path / "eng-tp2",
        config(
            "new", build_config={"max_batch_size": 64}, pretrained_config={"mapping": {"world_size": 2, "tp_size": 2}}
        ),
        ranks=2,
    )
    a = adopt_repository(repo, engine_dir=tp2)
    engine = {(f.file, f.key): f.message for f in a.findings if f.kind == "engine"}
    assert "world size is 2" in engine["tensorrt_llm/config.pbtxt", "gpu_device_ids"]


def test_nvidia_tag_from_pristine_model_py(world, tmp_path, monkeypatch):
    """The tag is named when the model.py files are the pristine ones of one tag (their sha256 in
    PRISTINE_MODEL_PY; NVIDIA's files are not stored here, so the table is pointed at files the test writes)."""
    import repo_builder.adopt as adopt_module

    repo = world["filled"]("v0.19.0", tmp_path / "repo")
    hashes = {}
    for role in ("preprocessing", "postprocessing"):
        (repo / role / "1").mkdir(parents=True, exist_ok=True)
        data = f"# stands in for NVIDIA's {role} model.py\n".encode()
        (repo / role / "1/model.py").write_bytes(data)
        hashes[role] = hashlib.sha256(data).hexdigest()
    monkeypatch.setitem(adopt_module.PRISTINE_MODEL_PY, "v0.19.0", hashes)
    a = adopt_repository(repo)
    assert a.tag == "v0.19.0"
    assert not [f for f in a.findings if f.kind == "hand_edit"]
    (repo / "postprocessing/1/model.py").write_bytes(b"# patched\n")
    assert [f.file for f in adopt_repository(repo).findings if f.kind == "hand_edit"] == ["postprocessing/1/model.py"]


def test_repository_without_ensemble_and_bls(world, tmp_path):
    """A fill without ensemble and BLS (users who only call tensorrt_llm): adopted, and the render's added models
    are the documented fixes."""
    repo = world["filled"]("v0.19.0", tmp_path / "repo")
    shutil.rmtree(repo / "ensemble")
    shutil.rmtree(repo / "tensorrt_llm_bls")
    a = adopt_repository(repo)
    assert a.profile == "trtllm-1.2" and "accumulate_tokens" not in a.values
    values = write_values_file(a, tmp_path / "values.yaml")
    from repo_builder.render import render_repository

    eng = world["engines"]["v0.19.0"]
    out = render_repository(
        eng, world["tok"], tmp_path / "new", values_file=values, engine_mode="reference"
    ).plan.output
    changes = semantic_diff(repo, out)
    assert unexplained(changes) == []
    assert {c.fix for c in changes if c.item == "model"} == {"bls-added", "ensemble-added"}


def test_upgrade_onto_an_existing_folder_writes_nothing(world, tmp_path):
    """upgrade writes like render: an existing output is refused before anything is planned or written."""
    repo = world["filled"]("v0.5.0", tmp_path / "repo")
    out = tmp_path / "taken"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    res = runner.invoke(app, ["upgrade", str(repo), "--profile", "trtllm-1.2", "-o", str(out)])
    assert res.exit_code == 2 and "Traceback" not in res.output, res.output
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]


NVIDIA_ROLES = {"tensorrt_llm", "preprocessing", "postprocessing", "ensemble"}


@pytest.mark.parametrize(
    "name, profile, roles",
    [
        ("hayleyhu-llama2-70b-tp2-v0.5", "trtllm-0.5", NVIDIA_ROLES),
        # renamed models, and a tokenizer/detokenizer of the user's own (lower-case query/tokens_batch tensors):
        # the engine and the ensemble are recognised, the user's two Python models are extra ones left alone
        ("sfc-llama2-7b-tp4-v0.5", "trtllm-0.5", {"tensorrt_llm", "ensemble"}),
        ("codota-starchat-v0.7", "trtllm-1.2", NVIDIA_ROLES),
        ("codota-dolphin-mistral-v0.8", "trtllm-1.2", NVIDIA_ROLES),
    ],
)
def test_users_repositories_adopt(name, profile, roles, tmp_path):
    """The hand-filled repositories of tests/assets/triton_model_repos (public users' fills) are recognised."""
    a = adopt_repository(ASSETS / "triton_model_repos" / name)
    assert a.profile == profile
    assert roles <= set(a.models)
    extra = {f.file.split("/")[0] for f in a.findings if f.kind == "extra_model"}
    assert extra == {m.name for m in a.models.values() if m.role is None}
    assert a.values["decoupled_mode"] in (True, False)
    write_values_file(a, tmp_path / "values.yaml")


def test_users_repository_with_structural_placeholder(tmp_path):
    """medusa-vicuna-v0.13's BLS has `max_batch_size: ${triton_max_batch_size}` (B02): named, no values file."""
    res = runner.invoke(
        app, ["adopt", str(ASSETS / "triton_model_repos/medusa-vicuna-v0.13"), "--values-out", str(tmp_path / "v.yaml")]
    )
    assert_refused(res, "tensorrt_llm_bls/config.pbtxt", "triton_max_batch_size")
    assert not (tmp_path / "v.yaml").exists()
