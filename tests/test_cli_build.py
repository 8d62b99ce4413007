"""CLI: repo-builder render / validate / params / inspect (typer's CliRunner, the real app)."""

from __future__ import annotations

import json

import cli_support
import pytest
from cli_support import assert_refused
from conftest import REPOS, asset
from typer.testing import CliRunner

from repo_builder.cli import app

TOK = "mistral_v1_tokenizer"


@pytest.fixture
def runner():
    return CliRunner()


@pytest.fixture
def engine(engine_copy):
    return engine_copy("v1.2-smollm-llama-beam5")


def render_args(engine, out, *extra):
    return cli_support.render_args(engine, asset(TOK), out, *extra)


def test_render_then_validate(runner, engine, tmp_path):
    out = tmp_path / "repo"
    res = runner.invoke(app, render_args(engine, out, "--set", "max_queue_size=3", "--no-streaming"))
    assert res.exit_code == 0, res.output
    assert f"rendered {out}" in res.stdout
    lock = json.loads((out / "repo-builder.lock.json").read_text())
    assert lock["values"]["max_queue_size"] == {"value": 3, "origin": "user"}
    assert lock["values"]["decoupled_mode"]["value"] is False
    res = runner.invoke(app, ["validate", str(out)])
    assert res.exit_code == 0 and res.stdout.strip() == f"{out}: valid"


def test_render_prints_resolve_warnings(runner, engine, tmp_path):
    res = runner.invoke(app, render_args(engine, tmp_path / "repo", "--streaming"))
    assert res.exit_code == 0, res.output
    assert "warning:" in res.stderr and "B30" in res.stderr  # streaming with an engine of max beam 5


def test_render_set_without_equals(runner, engine, tmp_path):
    res = runner.invoke(app, render_args(engine, tmp_path / "repo", "--set", "max_queue_size"))
    assert_refused(res, "--set expects KEY=VALUE", "max_queue_size")
    assert not (tmp_path / "repo").exists()


def test_render_error_is_one_red_line_without_traceback(runner, engine, tmp_path):
    res = runner.invoke(app, render_args(engine, tmp_path / "repo", "--set", "max_beam_width=9"))
    assert_refused(res, "error:", "max_beam_width")


def test_render_dry_run_prints_plan_and_diff(runner, engine, tmp_path):
    out = tmp_path / "repo"
    res = runner.invoke(app, render_args(engine, out, "--dry-run"))
    assert res.exit_code == 0, res.output
    assert "dry run" in res.stdout and "tensorrt_llm/config.pbtxt" in res.stdout
    assert "triton_max_batch_size" in res.stdout and "engine" in res.stdout
    assert not out.exists()
    assert runner.invoke(app, render_args(engine, out)).exit_code == 0
    res = runner.invoke(app, render_args(engine, out, "--dry-run", "--set", "max_queue_size=9"))
    assert res.exit_code == 0
    assert "max_queue_size: 9" in res.stdout and "tensorrt_llm/config.pbtxt" in res.stdout


def test_render_force_and_engine_mode(runner, engine, tmp_path):
    out = tmp_path / "repo"
    assert runner.invoke(app, render_args(engine, out)).exit_code == 0
    res = runner.invoke(app, render_args(engine, out, "--engine-mode", "symlink"))
    assert_refused(res, "--force")
    res = runner.invoke(app, render_args(engine, out, "--engine-mode", "symlink", "--force"))
    assert res.exit_code == 0 and "replaced" in res.stdout
    assert (out / "tensorrt_llm" / "1" / "rank0.engine").is_symlink()


def test_render_values_file(runner, engine, tmp_path):
    values = tmp_path / "v.yaml"
    values.write_text("max_queue_delay_microseconds: 250\n")
    out = tmp_path / "repo"
    assert runner.invoke(app, render_args(engine, out, "--values", str(values))).exit_code == 0
    assert "max_queue_delay_microseconds: 250" in (out / "tensorrt_llm" / "config.pbtxt").read_text()


def test_validate_prints_one_line_per_problem_and_exits_1(runner):
    repo = REPOS / "hayleyhu-llama2-70b-tp2-v0.5"
    res = runner.invoke(app, ["validate", str(repo)])
    assert res.exit_code == 1
    lines = res.stdout.strip().splitlines()
    kv = next(
        i
        for i, line in enumerate((repo / "tensorrt_llm" / "config.pbtxt").read_text().splitlines(), 1)
        if "${max_tokens_in_paged_kv_cache}" in line
    )
    assert f"tensorrt_llm/config.pbtxt:{kv}: unfilled placeholder ${{max_tokens_in_paged_kv_cache}}" in lines
    assert all(":" in line.split(" ")[0] for line in lines)
    assert f"{len(lines)} problem(s)" in res.stderr


def test_validate_with_engine_dir(runner, engine_copy):
    repo = REPOS / "hayleyhu-llama2-70b-tp2-v0.5"
    res = runner.invoke(app, ["validate", str(repo), "--engine-dir", str(engine_copy("old-llama2-70b-tp2-int8wo"))])
    assert res.exit_code == 1
    assert "max_batch_size: 64 is above the engine's max_batch_size 32" in res.stdout


def test_validate_missing_repo(runner, tmp_path):
    res = runner.invoke(app, ["validate", str(tmp_path / "nope")])
    assert_refused(res, "nope")


def test_params_json_lists_every_parameter(runner):
    from repo_builder.profile.schema import load_schema

    for profile in ("trtllm-1.2", "trtllm-0.5"):
        res = runner.invoke(app, ["params", "--profile", profile, "--json"])
        assert res.exit_code == 0
        rows = json.loads(res.stdout)
        assert {r["name"] for r in rows} == set(load_schema().for_profile(profile, include_build_time=True))
        assert {"name", "models", "type", "default", "allowed", "kind", "description"} <= set(rows[0])


def test_params_table(runner):
    res = runner.invoke(app, ["params"], env={"COLUMNS": "250"})
    assert res.exit_code == 0
    assert "kv_cache_free_gpu_mem_fraction" in res.stdout and "description" in res.stdout


def test_params_unknown_profile(runner):
    res = runner.invoke(app, ["params", "--profile", "nope"])
    assert_refused(res, "nope")


def test_inspect_engine_dir(runner):
    res = runner.invoke(app, ["inspect", str(asset("engines", "old-llama2-7b-tp4")), "--json"])
    assert res.exit_code == 0
    data = json.loads(res.stdout)
    assert data["engine"]["world_size"] == 4 and data["engine"]["max_batch_size"] == 8


def test_validate_lists_the_engine_inputs_a_text_client_cannot_reach(runner, engine, tmp_path):
    out = tmp_path / "repo"
    assert runner.invoke(app, render_args(engine, out)).exit_code == 0
    res = runner.invoke(app, ["validate", str(out), "--engine-inputs"])
    assert res.exit_code == 0, res.output
    listed = {
        line.split(": ", 1)[1].split(" ")[0]: line
        for line in res.stdout.splitlines()
        if line.startswith("unreachable from text: ")
    }
    # every engine input the ensemble does not wire is listed with its reason; the ones the C++ backend reads for
    # text requests (sampling, lookahead, KV retention, early stopping) are wired, so they are not listed
    assert set(listed) == {
        "encoder_input_features",
        "encoder_output_lengths",
        "decoder_input_ids",
        "decoder_input_lengths",
        "draft_input_ids",
        "draft_logits",
        "draft_acceptance_threshold",
        "runtime_top_p_min",
        "stop",
        "cross_attention_mask",
        "mrope_rotary_cos_sin",
        "mrope_position_deltas",
        "context_phase_params",
        "skip_cross_attn_blocks",
    }, res.stdout
    assert "reads it under the name runtime_top_k_min" in listed["runtime_top_p_min"]
    assert "disaggregated serving" in listed["context_phase_params"]
    assert res.stdout.strip().splitlines()[-1] == f"{out}: valid"


def test_inspect_shows_the_engines_lora_and_kv_cache_facts(runner, tmp_path):
    from engine_configs import config, write_engine

    lora = {
        "pretrained_config": {"dtype": "bfloat16"},
        "build_config": {
            "kv_cache_type": "paged",
            "plugin_config": {"lora_plugin": "auto"},
            "lora_config": {"max_lora_rank": 16, "lora_target_modules": ["attn_q", "attn_v"], "max_loras": 4},
        },
    }
    engine = write_engine(tmp_path / "engine", config("new", **lora))
    res = runner.invoke(app, ["inspect", str(engine), "--json"])
    assert res.exit_code == 0, res.output
    facts = json.loads(res.stdout)["engine"]
    assert {
        k: facts[k] for k in ("lora_plugin", "lora_dtype", "max_lora_rank", "lora_target_modules", "max_loras")
    } == {
        "lora_plugin": "auto",
        "lora_dtype": "bfloat16",
        "max_lora_rank": 16,
        "lora_target_modules": ["attn_q", "attn_v"],
        "max_loras": 4,
    }
    assert facts["kv_cache_type"] == "paged"
    res = runner.invoke(app, ["inspect", str(engine)], env={"COLUMNS": "200"})
    assert res.exit_code == 0 and "lora_dtype" in res.stdout and "bfloat16" in res.stdout


def test_inspect_repository(runner, engine, tmp_path):
    out = tmp_path / "repo"
    assert runner.invoke(app, render_args(engine, out)).exit_code == 0
    res = runner.invoke(app, ["inspect", str(out), "--json"])
    assert res.exit_code == 0
    data = json.loads(res.stdout)
    assert data["lock"]["values"]["max_beam_width"] == {"value": 5, "origin": "engine"}
    assert data["engine"]["max_beam_width"] == 5
    res = runner.invoke(app, ["inspect", str(out)], env={"COLUMNS": "200"})
    assert res.exit_code == 0 and "max_beam_width" in res.stdout and "engine" in res.stdout


def test_inspect_bert_explains(runner):
    res = runner.invoke(app, ["inspect", str(asset("engines", "old-bert-base-benchmark"))])
    assert_refused(res, "encoder")
