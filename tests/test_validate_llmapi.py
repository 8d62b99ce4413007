"""``repo-builder validate`` and ``repo-builder diff`` on llmapi repositories (``--profile llmapi-1.2``): the
model.yaml of ``tensorrt_llm`` read through the parameter schema, its ``triton_config`` against config.pbtxt,
its runtime limits against the checkpoint, each finding naming the file, the key path and its line; the
semantic diff lists model.yaml key changes. Every case is a hand edit of a rendered model.yaml (or of
config.pbtxt / the checkpoint), as a user would make it."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from repo_builder.render import render_repository
from repo_builder.repository.validate import Problem, validate_repository
from repo_builder.semdiff import semantic_diff, unexplained

PROFILE = "llmapi-1.2"
YAML_REL = "tensorrt_llm/1/model.yaml"


@pytest.fixture(scope="module")
def rendered(tiny_llama, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("validate_llmapi") / "repo"
    render_repository(tiny_llama, None, out, profile=PROFILE, engine_mode="reference")
    return out


def _copy(rendered: Path, tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    shutil.copytree(rendered, repo, symlinks=True)
    return repo


def _edit_yaml(repo: Path, change: Callable[[dict], None]) -> None:
    path = repo / YAML_REL
    data = yaml.safe_load(path.read_text())
    change(data)
    path.write_text(yaml.safe_dump(data, sort_keys=False))


def _lines(problems: list[Problem]) -> list[str]:
    return [str(p) for p in problems]


def _yaml_problems(repo: Path, **kwargs) -> list[Problem]:
    """The findings about model.yaml (the lock file's 'changed since it was rendered' left out)."""
    return [
        p
        for p in validate_repository(repo, warnings=True, **kwargs)
        if p.file == YAML_REL and "changed since it was rendered" not in p.message
    ]


def test_rendered_repository_is_valid(rendered) -> None:
    assert validate_repository(rendered, warnings=True) == []


def _set(key: str, value):
    def change(data: dict) -> None:
        head, _, rest = key.partition(".")
        if rest:
            data.setdefault(head, {})[rest] = value
        else:
            data[head] = value

    return change


def _drop(key: str):
    def change(data: dict) -> None:
        head, _, rest = key.partition(".")
        if rest:
            del data[head][rest]
        else:
            del data[head]

    return change


@pytest.mark.parametrize(
    ("change", "key", "needles"),
    [
        (_set("tensor_paralel_size", 2), "tensor_paralel_size", ["did you mean 'tensor_parallel_size'"]),
        (
            _set("kv_cache_config.free_gpu_mem_fraction", 0.3),
            "kv_cache_config.free_gpu_mem_fraction",
            ["kv_cache_config.free_gpu_memory_fraction"],
        ),
        (_set("kv_cache_free_gpu_mem_fraction", 0.3), "kv_cache_free_gpu_mem_fraction", ["profile trtllm-1.2"]),
        (_set("text_front_doors", False), "text_front_doors", ["not an LLM() argument", "--set text_front_doors"]),
        (_set("tensor_parallel_size", "two"), "tensor_parallel_size", ["expected an integer", "'two'"]),
        (_set("dtype", "float64"), "dtype", ["not one of auto, float16, bfloat16, float32"]),
        (
            _set("kv_cache_config.free_gpu_memory_fraction", 1.5),
            "kv_cache_config.free_gpu_memory_fraction",
            ["out of range", "<= 1.0"],
        ),
        (_set("triton_config.max_batch_size", 8), "triton_config.max_batch_size", ["out of range"]),
        (
            _set("speculative_config.decoding_type", "eagle"),
            "speculative_config.decoding_type",
            ["did you mean 'Eagle3'"],
        ),
        (_drop("triton_config.decoupled"), "triton_config.decoupled", ["missing", "KeyError"]),
        (_drop("triton_config.max_batch_size"), "triton_config.max_batch_size", ["missing", "KeyError"]),
        (_drop("model"), "model", ["missing", "checkpoint folder"]),
        (
            _set("triton_config.decoupled", "false"),
            "triton_config.decoupled",
            ["is a string", "bool()", "without quotes"],
        ),
        (
            _set("triton_config.decoupled", True),
            "triton_config.decoupled",
            ["config.pbtxt has model_transaction_policy.decoupled false", "same value in both"],
        ),
        (_set("max_seq_len", 100000), "max_seq_len", ["max_position_embeddings (512"]),
        (_set("tensor_parallel_size", 3), "tensor_parallel_size", ["num_attention_heads (4)"]),
        (_set("pipeline_parallel_size", 9), "pipeline_parallel_size", ["num_hidden_layers"]),
        (_set("moe_expert_parallel_size", 2), "moe_expert_parallel_size", ["has no experts"]),
        (_set("kv_cache_config.max_tokens", 16), "kv_cache_config.max_tokens", ["cannot hold one sequence"]),
        (
            _set("speculative_config.max_draft_len", 3),
            "speculative_config.max_draft_len",
            ["without speculative_config.decoding_type"],
        ),
    ],
)
def test_a_bad_model_yaml_key_is_named_with_its_line(rendered, tmp_path, change, key, needles) -> None:
    """Each hand edit gives one finding on model.yaml that names the key path, stands at the key's line
    (when the key is there) and says what to do."""
    repo = _copy(rendered, tmp_path)
    _edit_yaml(repo, change)
    found = [p for p in _yaml_problems(repo) if p.message.startswith(f"{key}: ")]
    assert found, _lines(_yaml_problems(repo))
    problem = found[0]
    assert problem.severity == "error"
    for needle in needles:
        assert needle in problem.message, problem.message
    lines = (repo / YAML_REL).read_text().splitlines()
    if problem.line is not None:
        assert lines[problem.line - 1].strip().startswith(key.rpartition(".")[2] + ":")
    else:
        assert key.rpartition(".")[2] + ":" not in "\n".join(lines)  # a missing key has no line
    assert not [p for p in _yaml_problems(rendered)]  # the original stays valid


def test_world_size_follows_the_lock_file(rendered, tmp_path) -> None:
    """tp x pp of model.yaml against the lock's launch.world_size (what launch and deploy start)."""
    repo = _copy(rendered, tmp_path)
    _edit_yaml(repo, _set("tensor_parallel_size", 2))
    messages = [p.message for p in _yaml_problems(repo)]
    assert any("= 2, but repo-builder.lock.json launch.world_size is 1" in m for m in messages), messages


def test_config_pbtxt_edit_contradicting_model_yaml(rendered, tmp_path) -> None:
    """Decoupled turned on in config.pbtxt alone (the back-and-forth of server#8896): the finding names both
    files, the config.pbtxt line and the yaml key."""
    repo = _copy(rendered, tmp_path)
    config = repo / "tensorrt_llm" / "config.pbtxt"
    config.write_text(config.read_text().replace("decoupled: false", "decoupled: true"))
    found = [p for p in _yaml_problems(repo) if p.message.startswith("triton_config.decoupled: ")]
    assert len(found) == 1, _lines(_yaml_problems(repo))
    assert "tensorrt_llm/config.pbtxt has model_transaction_policy.decoupled true (line" in found[0].message


def test_yaml_that_does_not_parse_or_is_not_a_mapping(rendered, tmp_path) -> None:
    repo = _copy(rendered, tmp_path)
    path = repo / YAML_REL
    path.write_text(path.read_text() + "triton_config: [unclosed\n")
    (problem,) = _yaml_problems(repo)
    assert "not valid YAML" in problem.message and problem.line is not None
    path.write_text("- a list\n")
    (problem,) = _yaml_problems(repo)
    assert "must be a mapping" in problem.message


def test_auto_map_checkpoint_needs_trust_remote_code(rendered, tiny_llama, tmp_path) -> None:
    """The checkpoint is read from the path ``model`` names; one with ``auto_map`` needs trust_remote_code."""
    ckpt = tmp_path / "ckpt"
    shutil.copytree(tiny_llama, ckpt)
    cfg = json.loads((ckpt / "config.json").read_text())
    cfg["auto_map"] = {"AutoModelForCausalLM": "modeling_x.X"}
    (ckpt / "config.json").write_text(json.dumps(cfg))
    repo = _copy(rendered, tmp_path)
    _edit_yaml(repo, _set("model", str(ckpt)))
    found = [p for p in _yaml_problems(repo) if p.message.startswith("trust_remote_code: ")]
    assert found and "auto_map" in found[0].message, _lines(_yaml_problems(repo))
    _edit_yaml(repo, _set("trust_remote_code", True))
    assert _yaml_problems(repo) == []


def test_missing_checkpoint_and_hub_id(rendered, tmp_path) -> None:
    """An absolute ``model`` that is no folder is an error; a hub id (NVIDIA's shipped value) a warning, and
    ``validate --engine-dir CKPT`` checks the limits against that checkpoint instead."""
    repo = _copy(rendered, tmp_path)
    _edit_yaml(repo, _set("model", str(tmp_path / "gone")))
    (problem,) = _yaml_problems(repo)
    assert problem.message.startswith("model: ") and "not an existing directory" in problem.message
    _edit_yaml(repo, _set("model", "TinyLlama/TinyLlama-1.1B-Chat-v1.0"))
    (problem,) = _yaml_problems(repo)
    assert problem.severity == "warning" and "hub id" in problem.message


def test_hand_filled_nvidia_layout_without_lock_file(tiny_llama, tmp_path) -> None:
    """NVIDIA's 1.2.1 llmapi folder as shipped, rebuilt from its facts (config.pbtxt without max_batch_size and
    transaction policy, model.yaml with a hub id, tp/pp 1, triton_config max_batch_size 0 / decoupled False):
    valid apart from the hub-id warning; with ``--engine-dir`` the checkpoint's limits are checked."""
    model = tmp_path / "repo" / "tensorrt_llm"
    (model / "1").mkdir(parents=True)
    (model / "config.pbtxt").write_text(
        'name: "tensorrt_llm"\nbackend: "python"\ninstance_group [{count: 1 kind: KIND_CPU}]\n'
        'input [{name: "text_input" data_type: TYPE_STRING dims: [-1]}]\n'
        'output [{name: "text_output" data_type: TYPE_STRING dims: [-1]}]\n'
    )
    (model / "1" / "model.yaml").write_text(
        'model: TinyLlama/TinyLlama-1.1B-Chat-v1.0\nbackend: "pytorch"\ntensor_parallel_size: 1\n'
        "pipeline_parallel_size: 1\ntriton_config:\n  max_batch_size: 0\n  decoupled: False\n"
    )
    problems = validate_repository(tmp_path / "repo", warnings=True)
    assert [p.severity for p in problems] == ["warning"], _lines(problems)
    with (model / "1" / "model.yaml").open("a") as f:
        f.write("max_seq_len: 4096\n")
    found = validate_repository(tmp_path / "repo", engine_dir=tiny_llama)
    assert [p.message for p in found] == [
        "max_seq_len: 4096 is above the checkpoint's max_position_embeddings (512, config.json)"
    ]


def test_cli_validate_prints_file_line_and_key(rendered, tmp_path) -> None:
    repo = _copy(rendered, tmp_path)
    _edit_yaml(repo, _set("tensor_paralel_size", 2))
    got = subprocess.run(
        [sys.executable, "-m", "repo_builder", "validate", str(repo)], capture_output=True, text=True, timeout=120
    )
    assert got.returncode == 1, got.stdout
    assert f"{YAML_REL}:" in got.stdout and "tensor_paralel_size: not a model.yaml key" in got.stdout
    assert "Traceback" not in got.stderr


def test_diff_lists_model_yaml_key_changes(rendered, tmp_path) -> None:
    """``repo-builder diff``: a changed, an added and a removed model.yaml key (nested ones by their path),
    none explained by a documented fix; the same repository diffs empty."""
    assert semantic_diff(rendered, rendered) == []
    repo = _copy(rendered, tmp_path)
    _edit_yaml(repo, _set("tensor_parallel_size", 2))
    _edit_yaml(repo, _set("kv_cache_config.free_gpu_memory_fraction", 0.3))
    _edit_yaml(repo, _drop("dtype"))
    changes = {(c.model, c.item): (c.before, c.after) for c in semantic_diff(rendered, repo)}
    assert changes == {
        ("tensorrt_llm", "model.yaml tensor_parallel_size"): (1, 2),
        ("tensorrt_llm", "model.yaml kv_cache_config.free_gpu_memory_fraction"): (None, 0.3),
        ("tensorrt_llm", "model.yaml dtype"): ("auto", None),
    }
    assert len(unexplained(semantic_diff(rendered, repo))) == 3
    got = subprocess.run(
        [sys.executable, "-m", "repo_builder", "diff", str(rendered), str(repo)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert got.returncode == 1 and "tensorrt_llm: model.yaml tensor_parallel_size: 1 -> 2" in got.stdout, got.stdout


def test_diff_of_two_renders_with_other_values(tiny_llama, rendered, tmp_path) -> None:
    """Two renders (front doors on, so three models take text_input: paired by folder name): the value given
    with --set shows as a model.yaml change and nothing else differs."""
    other = tmp_path / "other"
    render_repository(
        tiny_llama, None, other, profile=PROFILE, engine_mode="reference", user_values={"max_batch_size": "8"}
    )
    changes = [str(c) for c in semantic_diff(rendered, other)]
    assert changes == ["tensorrt_llm: model.yaml max_batch_size: (absent) -> 8"]


#: NVIDIA/TensorRT-LLM triton_backend/all_models/llmapi/tensorrt_llm/config.pbtxt @ c8c6df08 (the 1.2.x input set
#: triton-inference-server/server#8945 lists for v1.2.1), as facts: (name, dtype, dims); inputs all optional but
#: text_input. Written here independently of model_templates/llmapi-1.2/contract.yaml, so that a drift of the
#: contract or the templates from NVIDIA's file fails this test.
_NV_INPUTS = (
    [("text_input", "TYPE_STRING", -1), ("streaming", "TYPE_BOOL", 1)]
    + [
        (f"sampling_param_{n}", t, d)
        for n, t, d in (
            ("best_of", "TYPE_INT32", 1),
            ("temperature", "TYPE_FP32", 1),
            ("top_k", "TYPE_INT32", 1),
            ("top_p", "TYPE_FP32", 1),
            ("frequency_penalty", "TYPE_FP32", 1),
            ("presence_penalty", "TYPE_FP32", 1),
            ("max_tokens", "TYPE_INT32", 1),
            ("stop", "TYPE_STRING", -1),
            ("seed", "TYPE_UINT64", 1),
            ("exclude_input_from_output", "TYPE_BOOL", 1),
            ("return_perf_metrics", "TYPE_BOOL", 1),
        )
    ]
    + [(n, "TYPE_BOOL", 1) for n in ("return_finish_reason", "return_stop_reason", "return_cumulative_logprob", "stop")]
)
_NV_OUTPUTS = [
    ("text_output", "TYPE_STRING", -1), ("finish_reason", "TYPE_STRING", -1), ("stop_reason", "TYPE_STRING", -1),
    ("cumulative_logprob", "TYPE_FP32", -1), ("kv_cache_reused_block", "TYPE_INT32", -1),
    ("kv_cache_missed_block", "TYPE_INT32", -1), ("kv_cache_alloc_new_blocks", "TYPE_INT32", -1),
    ("kv_cache_alloc_total_blocks", "TYPE_INT32", -1), ("kv_cache_hit_rate", "TYPE_FP32", -1),
    ("arrival_time_ns", "TYPE_INT64", 1), ("first_scheduled_time_ns", "TYPE_INT64", 1),
    ("first_token_time_ns", "TYPE_INT64", 1), ("last_token_time_ns", "TYPE_INT64", 1),
    ("acceptance_rate", "TYPE_FP32", 1), ("total_accepted_draft_tokens", "TYPE_INT32", 1),
    ("total_draft_tokens", "TYPE_INT32", 1),
]  # fmt: skip


def test_render_agrees_with_nvidias_files_for_the_same_choices(tiny_llama, tmp_path) -> None:
    """NVIDIA's 1.2.1 folder rebuilt from its facts (config.pbtxt without max_batch_size / transaction policy,
    model.yaml @ c8c6df08 with its hub id) against the render with the same choices (no front doors, not
    streaming), parsed: the only differences are repo-builder's two optional inputs and two outputs (contract
    ``ours``), the checkpoint path instead of the hub id, and the LLM API defaults it writes (dtype auto,
    trust_remote_code false)."""
    nv = tmp_path / "nvidia" / "tensorrt_llm"
    (nv / "1").mkdir(parents=True)
    ins = ",".join(
        f'{{name: "{n}" data_type: {t} dims: [{d}]{"" if n == "text_input" else " optional: true"}}}'
        for n, t, d in _NV_INPUTS
    )
    outs = ",".join(f'{{name: "{n}" data_type: {t} dims: [{d}]}}' for n, t, d in _NV_OUTPUTS)
    (nv / "config.pbtxt").write_text(
        f'name: "tensorrt_llm"\nbackend: "python"\ninstance_group [{{count: 1 kind: KIND_CPU}}]\n'
        f"input [{ins}]\noutput [{outs}]\n"
    )
    (nv / "1" / "model.yaml").write_text(
        'model: TinyLlama/TinyLlama-1.1B-Chat-v1.0\nbackend: "pytorch"\ntensor_parallel_size: 1\n'
        "pipeline_parallel_size: 1\ntriton_config:\n  max_batch_size: 0\n  decoupled: False\n"
    )
    ours = tmp_path / "ours"
    render_repository(
        tiny_llama, None, ours, profile=PROFILE, engine_mode="reference", user_values={"text_front_doors": "false"}
    )
    changes = {(c.item, c.fix is not None) for c in semantic_diff(tmp_path / "nvidia", ours)}
    assert changes == {
        ("input return_num_input_tokens", True),
        ("input return_num_output_tokens", True),
        ("output num_input_tokens", True),
        ("output num_output_tokens", True),
        ("model.yaml model", False),
        ("model.yaml dtype", False),
        ("model.yaml trust_remote_code", False),
    }
    from repo_builder.repository.pbtxt import parse_model_config

    ours_cfg = parse_model_config((ours / "tensorrt_llm" / "config.pbtxt").read_text())
    assert [t.name for t in ours_cfg.input][: len(_NV_INPUTS)] == [n for n, _, _ in _NV_INPUTS]  # same order
    assert [t.name for t in ours_cfg.output][: len(_NV_OUTPUTS)] == [n for n, _, _ in _NV_OUTPUTS]
