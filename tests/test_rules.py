"""The rule table (repo_builder/rules.py) is the one both ``render`` (resolve) and ``validate --engine-dir``
use: every case below is refused (or warned about) by render and reported the same way by validate on a
repository whose config carries the value. Cases: KV-cache block rounding with beam search and the minimum
that works, a KV cache or free-memory fraction too small for a full batch, xgrammar without its tokenizer
info, LoRA cache settings against the engine's LoRA build, draft-model and multimodal BLS names, attention
window / sink tokens / max_num_tokens against the engine's lengths."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from engine_configs import config, packaged_mistral, write_engine

from repo_builder.errors import ParameterError, RepoBuilderError
from repo_builder.profile.schema import load_schema
from repo_builder.render import render_repository
from repo_builder.repository.validate import validate_repository

LORA_ENGINE = {
    "build_config": {
        "plugin_config": {"lora_plugin": "float16"},
        "lora_config": {"max_lora_rank": 64, "lora_target_modules": ["attn_q", "attn_v"]},
    }
}
# one adapter at rank 64: 2 (A and B) x 64 x hidden 512 x 2 modules x 4 layers x 2 bytes
LORA_BYTES = 2 * 64 * 512 * 2 * 4 * 2
BEAM = {"build_config": {"max_beam_width": 4, "max_seq_len": 2050}}
# Speculative engines (config.json keys per NVIDIA/TensorRT-LLM cpp/tensorrt_llm/runtime/gptJsonConfig.cpp):
# speculative_decoding_mode 4 = medusa, 32 = eagle, 8 = lookahead_decoding.
MEDUSA = {
    "build_config": {"speculative_decoding_mode": 4, "max_draft_len": 4},
    "pretrained_config": {"num_medusa_heads": 2, "max_draft_len": 4},
}
EAGLE = {
    "build_config": {"speculative_decoding_mode": 32, "max_draft_len": 8},
    "pretrained_config": {"num_eagle_layers": 3, "max_non_leaves_per_layer": 2},
}
LOOKAHEAD = {"build_config": {"speculative_decoding_mode": 8, "max_draft_len": 8}}


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    return packaged_mistral(tmp_path_factory)


def lora_dir(tmp: Path, rows: list[tuple[int, int, int]], dtype: str = "float16", task: int = 1) -> str:
    """A prefetch dir holding adapter ``task`` (``model.lora_{weights,config}.npy``, TRT-LLM's layout) with one
    config row (module id, layer, rank) per entry of ``rows``."""
    import numpy as np

    adapter = tmp / "loras" / str(task)
    adapter.mkdir(parents=True, exist_ok=True)
    np.save(adapter / "model.lora_config.npy", np.array([rows], dtype=np.int32))
    np.save(adapter / "model.lora_weights.npy", np.zeros((1, len(rows), 8 * 512), dtype=dtype))
    return str(tmp / "loras")


def xgrammar_file(tmp: Path, content: Any) -> str:
    path = tmp / "xgrammar.json"
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    return str(path)


# (id, engine sections, values (callable of tmp dir allowed), severity, needle)
CASES = [
    (
        "kv-blocks-beam",
        BEAM,
        {"max_beam_width": 4, "max_tokens_in_paged_kv_cache": 8200},
        "error",
        "max_tokens_in_paged_kv_cache: 8200 tokens cannot hold one full sequence (max_seq_len 2050 in blocks of 32 "
        "tokens = 65 blocks = 2080 tokens, x max_beam_width 4 = 8320 tokens); the minimum that works is 8320",
    ),
    (
        "kv-fewer-than-batch",
        BEAM,
        {"max_beam_width": 4, "max_tokens_in_paged_kv_cache": 8320},
        "warning",
        "fewer than the batch size 8: at most 1 request(s) run at once and the others wait for KV-cache blocks; "
        "66560 tokens hold a full batch",
    ),
    (
        "kv-tiny-fraction",
        {},
        {"kv_cache_free_gpu_mem_fraction": 0.0001},
        "warning",
        "kv_cache_free_gpu_mem_fraction: 0.0001 of the free GPU memory leaves room for at most 2 full sequence(s)",
    ),
    (
        "xgrammar-no-file",
        {},
        {"guided_decoding_backend": "xgrammar"},
        "error",
        "xgrammar_tokenizer_info_path: unset, but guided_decoding_backend is xgrammar",
    ),
    (
        "xgrammar-missing",
        {},
        {"guided_decoding_backend": "xgrammar", "xgrammar_tokenizer_info_path": "/nonexistent/xg.json"},
        "error",
        "xgrammar_tokenizer_info_path: '/nonexistent/xg.json' is not a file",
    ),
    (
        "xgrammar-bad-json",
        {},
        lambda t: {"guided_decoding_backend": "xgrammar", "xgrammar_tokenizer_info_path": xgrammar_file(t, "{nope")},
        "error",
        "xgrammar_tokenizer_info_path: '{tmp}/xgrammar.json' is not readable JSON",
    ),
    (
        "xgrammar-wrong-keys",
        {},
        lambda t: {
            "guided_decoding_backend": "xgrammar",
            "xgrammar_tokenizer_info_path": xgrammar_file(t, {"vocab": []}),
        },
        "error",
        "xgrammar_tokenizer_info_path: '{tmp}/xgrammar.json' lacks encoded_vocab, tokenizer_str, stop_token_ids",
    ),
    (
        "lora-one-byte",
        LORA_ENGINE,
        {"lora_cache_host_memory_bytes": 1},
        "error",
        f"lora_cache_host_memory_bytes: 1 bytes cannot hold one adapter at the engine's max_lora_rank 64 "
        f"({LORA_BYTES} bytes); the minimum that works is {LORA_BYTES}",
    ),
    (
        "lora-prefetch-missing",
        LORA_ENGINE,
        {"lora_prefetch_dir": "/nonexistent/loras"},
        "error",
        "lora_prefetch_dir: '/nonexistent/loras' is not an existing directory",
    ),
    (
        "lora-sizes",
        LORA_ENGINE,
        {"lora_cache_optimal_adapter_size": 128, "lora_cache_max_adapter_size": 64},
        "error",
        "lora_cache_optimal_adapter_size: 128 is above lora_cache_max_adapter_size 64",
    ),
    (
        "lora-no-plugin",
        {},
        {"lora_cache_gpu_memory_fraction": 0.1},
        "warning",
        "lora_cache_gpu_memory_fraction: the engine was built without the LoRA plugin",
    ),
    (
        "lora-adapter-dtype",
        LORA_ENGINE,
        lambda t: {"lora_prefetch_dir": lora_dir(t, [(1, 0, 8), (3, 0, 8)], dtype="float32")},
        "error",
        "lora_prefetch_dir: '{tmp}/loras': 1/model.lora_weights.npy: dtype float32, but the engine's LoRA weights "
        "are float16",
    ),
    (
        "lora-adapter-rank",
        LORA_ENGINE,
        lambda t: {"lora_prefetch_dir": lora_dir(t, [(1, 0, 128)])},
        "error",
        "lora_prefetch_dir: '{tmp}/loras': 1/model.lora_config.npy: rank 128 is above the engine's max_lora_rank 64 "
        "(rebuild with `trtllm-build --max_lora_rank 128`)",
    ),
    (
        "lora-adapter-module",
        LORA_ENGINE,
        lambda t: {"lora_prefetch_dir": lora_dir(t, [(1, 0, 8), (5, 1, 8), (6, 1, 8)])},
        "error",
        "lora_prefetch_dir: '{tmp}/loras': 1/model.lora_config.npy: module(s) mlp_4h_to_h, mlp_h_to_4h are not among "
        "the engine's lora_target_modules (attn_q, attn_v)",
    ),
    (
        "lora-adapter-layer",
        LORA_ENGINE,
        lambda t: {"lora_prefetch_dir": lora_dir(t, [(1, 4, 8)])},
        "error",
        "lora_prefetch_dir: '{tmp}/loras': 1/model.lora_config.npy: layer 4 is outside the engine's 0..3",
    ),
    (
        "lora-prefetch-empty",
        LORA_ENGINE,
        lambda t: {"lora_prefetch_dir": str((t / "empty").mkdir() or t / "empty")},
        "warning",
        "lora_prefetch_dir: '{tmp}/empty' holds no adapter folder",
    ),
    (
        "draft-model",
        {},
        {"tensorrt_llm_draft_model_name": "draft"},
        "error",
        "tensorrt_llm_draft_model_name: 'draft': the draft model is rendered by `render --draft-engine-dir DIR`",
    ),
    (
        "multimodal",
        {},
        {"multimodal_encoders_name": "multimodal_encoders"},
        "error",
        "multimodal_encoders_name: 'multimodal_encoders': repo-builder renders text-only repositories",
    ),
    (
        "sink-window",
        {},
        {"max_attention_window_size": "512", "sink_token_length": 512},
        "error",
        "sink_token_length: 512 sink tokens leave no room in the attention window (max_attention_window_size 512)",
    ),
    (
        "window-above-seq",
        {},
        {"max_attention_window_size": "4096"},
        "warning",
        "max_attention_window_size: 4096 is above the engine's max_seq_len 2048",
    ),
    (
        "window-list-longer-than-layers",
        {},
        {"max_attention_window_size": "512,512,512,512,1024"},
        "warning",
        "max_attention_window_size: 5 values for an engine with 4 layers: layer i takes value i, so values 5 to 5 "
        "(1024) are never used",
    ),
    (
        "window-list-cut",
        {},
        {"max_attention_window_size": "512,1024,2048"},
        "warning",
        "max_attention_window_size: 3 values for an engine with 4 layers: the list repeats every 3 layers (layer i "
        "takes value i mod 3) and 4 is not a multiple of 3, so the last repeat stops after its first 1 value(s) (512)",
    ),
    (
        "kv-counts-the-window",  # 512 tokens hold one sequence of a 512-token window (not of max_seq_len 2048)
        {},
        {"max_attention_window_size": "512", "max_tokens_in_paged_kv_cache": 512},
        "warning",
        "max_tokens_in_paged_kv_cache: 512 tokens hold 1 full sequence(s) (max_attention_window_size 512 (below "
        "max_seq_len 2048) in blocks of 32 tokens = 16 blocks = 512 tokens, x max_beam_width 1 = 512 tokens each), "
        "fewer than the batch size 8: at most 1 request(s) run at once",
    ),
    (
        "kv-window-beam-sink",  # sink 4 -> 28 tokens of bubble; beam search with a window keeps one spare block
        BEAM,
        {
            "max_beam_width": 4,
            "max_attention_window_size": "512",
            "sink_token_length": 4,
            "max_tokens_in_paged_kv_cache": 2300,
        },
        "error",
        "max_tokens_in_paged_kv_cache: 2300 tokens cannot hold one full sequence (max_attention_window_size 512 "
        "(below max_seq_len 2050) + 28 tokens of sink bubble + 32 tokens of the spare block beam search keeps with "
        "a window in blocks of 32 tokens = 18 blocks = 576 tokens, x max_beam_width 4 = 2304 tokens)",
    ),
    (
        "kv-continuous-cache",
        {
            "build_config": {
                "kv_cache_type": "continuous",
                "plugin_config": {"paged_kv_cache": False, "use_paged_context_fmha": False},
            }
        },
        {"batching_strategy": "V1", "max_tokens_in_paged_kv_cache": 4096},
        "warning",
        "max_tokens_in_paged_kv_cache: has no effect: the engine keeps a continuous KV cache (one max_seq_len slab "
        "per sequence of its batch, allocated when it loads); that cache takes 0.06 GiB per GPU (max_batch_size 8 x "
        "max_seq_len 2048 x beam 1 x 4096 bytes per token)",
    ),
    (
        "no-kv-cache-window",
        {
            "build_config": {
                "kv_cache_type": "disabled",
                "plugin_config": {"paged_kv_cache": False, "use_paged_context_fmha": False},
            }
        },
        {"batching_strategy": "V1", "max_attention_window_size": "512"},
        "warning",
        "max_attention_window_size: has no effect: the engine keeps no KV cache",
    ),
    (
        "max-num-tokens",
        {"build_config": {"max_num_tokens": 512}},
        {},
        "warning",
        "enable_chunked_context: off, but the engine's max_num_tokens 512 is below its max_input_len 1024",
    ),
    (
        "medusa-tree-too-many-choices",
        MEDUSA,
        {"decoding_mode": "medusa", "medusa_choices": "{0}, {1}, {2}, {0,0}, {0,1}"},
        "error",
        "medusa_choices: has 5 choices; the engine's max_draft_len is 4 (one draft token each)",
    ),
    (
        "medusa-tree-too-deep",
        MEDUSA,
        {"medusa_choices": "{0}, {0,0}, {0,0,0}"},
        "error",
        "medusa_choices: is 3 levels deep; the engine's draft paths are at most 2 long",
    ),
    (
        "medusa-tree-orphan",
        MEDUSA,
        {"medusa_choices": "{0}, {1,0}"},
        "warning",
        "medusa_choices: has {1, 0} without the parent path",
    ),
    (
        "medusa-tree-skips-a-level",
        MEDUSA,
        {"medusa_choices": "{0}, {0,0,0}"},
        "error",
        "medusa_choices: has no choice of depth 2: the levels of a tree follow one another",
    ),
    (
        "medusa-tree-on-plain-engine",
        {},
        {"medusa_choices": "{0}, {1}"},
        "error",
        "medusa_choices: is read by a medusa engine only; this engine's speculative_decoding_mode is none",
    ),
    (
        "decoding-mode-needs-engine-mode",
        MEDUSA,
        {"decoding_mode": "eagle"},
        "error",
        "decoding_mode: eagle needs an engine built with `--speculative_decoding_mode eagle`; this engine's "
        "speculative_decoding_mode is medusa",
    ),
    (
        "eagle-tree-depth",
        EAGLE,
        {"eagle_choices": "{0}, {1}, {0,0}"},
        "error",
        "eagle_choices: is 2 levels deep; EAGLE-1 needs exactly num_eagle_layers (3) levels",
    ),
    (
        "eagle-non-leaves",
        EAGLE,
        {"eagle_choices": "{0}, {1}, {2}, {0,0}, {1,0}, {2,0}, {0,0,0}"},
        "error",
        "eagle_choices: has 3 inner nodes at level 1; the engine's max_non_leaves_per_layer is 2",
    ),
    (
        "lookahead-needs-draft-len",
        LOOKAHEAD,
        {
            "decoding_mode": "lookahead",
            "lookahead_window_size": 4,
            "lookahead_ngram_size": 3,
            "lookahead_verification_set_size": 4,
        },
        "error",
        "lookahead_window_size: (W, N, G) = (4, 3, 4) needs (W + G) * (N - 1) - 1 = 15 draft tokens; the engine was "
        "built with max_draft_len 8",
    ),
    (
        "lookahead-on-plain-engine",
        {},
        {
            "decoding_mode": "lookahead",
            "lookahead_window_size": 2,
            "lookahead_ngram_size": 2,
            "lookahead_verification_set_size": 1,
        },
        "error",
        "decoding_mode: lookahead needs an engine built with `--speculative_decoding_mode lookahead_decoding`",
    ),
]


def _values(spec: Any, tmp: Path) -> dict[str, Any]:
    return spec(tmp) if callable(spec) else dict(spec)


def _render_text(engine: Path, tok: Path, out: Path, values: dict[str, Any]) -> tuple[str, str]:
    """(severity found by render, all its text): "error" with the error's text, else "warning"/"none"."""
    try:
        result = render_repository(engine, tok, out, user_values={k: str(v) for k, v in values.items()}, dry_run=True)
    except ParameterError as exc:  # mixed classes come as ParameterError; single ones may be EngineError
        return "error", str(exc)
    except RepoBuilderError as exc:
        return "error", str(exc)
    text = "\n".join(result.warnings)
    return ("warning" if text else "none"), text


def _add_params(repo: Path, values: dict[str, Any]) -> None:
    params = load_schema().parameters
    for name, value in values.items():
        param = params[name]
        model = "tensorrt_llm" if "tensorrt_llm" in param.models else param.models[0]
        path = repo / model / "config.pbtxt"
        text = path.read_text()
        formatted = param.format_value(param.coerce(value))
        entry = f'parameters: {{ key: "{param.key}" value: {{ string_value: "{formatted}" }} }}'
        if f'key: "{param.key}"' in text:
            import re

            text = re.sub(
                r'parameters: \{\s*key: "' + param.key + r'"\s*value: \{\s*string_value: "[^"]*"\s*\}\s*\}', entry, text
            )
        else:
            text += entry + "\n"
        path.write_text(text)


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_render_and_validate_report_it_alike(tmp_path, tok, case):
    _, sections, spec, severity, needle = case
    needle = needle.replace("{tmp}", str(tmp_path))
    engine = write_engine(tmp_path / "engine", config("new", **sections))
    values = _values(spec, tmp_path)
    got_severity, text = _render_text(engine, tok, tmp_path / "dry", values)
    assert got_severity == severity and needle in text, text
    # the same finding from validate --engine-dir, on a repository whose configs carry the values
    repo = tmp_path / "repo"
    strategy = {k: str(v) for k, v in values.items() if k == "batching_strategy"}  # an engine only V1 can run
    render_repository(engine, tok, repo, engine_mode="reference", user_values=strategy)
    _add_params(repo, values)
    problems = validate_repository(repo, engine_dir=engine, warnings=True)
    key = needle.split(":")[0]
    shown = load_schema().parameters[key].key if key in load_schema().parameters else key
    mine = [p for p in problems if shown in p.message and "sha256" not in p.message]
    assert any(p.severity == severity and needle.split(": ", 1)[1] in p.message for p in mine), "\n".join(
        str(p) for p in problems
    )


def test_a_good_xgrammar_file_and_lora_settings_pass(tmp_path, tok):
    engine = write_engine(tmp_path / "engine", config("new", **LORA_ENGINE))
    loras = lora_dir(tmp_path, [(1, 0, 64), (3, 3, 8)])
    info = xgrammar_file(tmp_path, {"encoded_vocab": [], "tokenizer_str": "", "stop_token_ids": [2]})
    values = {
        "guided_decoding_backend": "xgrammar",
        "xgrammar_tokenizer_info_path": info,
        "lora_prefetch_dir": loras,
        "lora_cache_host_memory_bytes": LORA_BYTES,
        "kv_cache_free_gpu_mem_fraction": 0.9,
    }
    assert _render_text(engine, tok, tmp_path / "dry", values) == ("none", "")


def test_build_time_lengths_are_refused_naming_the_flag(tmp_path, tok):
    engine = write_engine(tmp_path / "engine")
    for key in ("max_output_len", "max_seq_len", "max_input_len"):
        severity, text = _render_text(engine, tok, tmp_path / "dry", {key: -1})
        assert severity == "error" and f"{key}: a build-time setting" in text and "trtllm-build" in text, text


def test_draft_and_multimodal_names_are_known_to_the_schema():
    from repo_builder.profile.schema import validate_user_values

    with pytest.raises(ParameterError, match="exists in profile trtllm-1.2 only"):
        validate_user_values("trtllm-0.5", {"tensorrt_llm_draft_model_name": "d"}, source="--set")
    assert validate_user_values("trtllm-1.2", {"multimodal_encoders_name": "m"}, source="--set") == {
        "multimodal_encoders_name": "m"
    }


# ---------------------------------------------------------------- checks that were inline in resolve() (issue 21)
def _validate_lines(repo: Path, engine: Path) -> list[str]:
    return [str(p) for p in validate_repository(repo, engine_dir=engine, warnings=True) if "sha256" not in p.message]


def test_python_backend_without_decoupled_is_refused_by_render_and_validate_b29(tmp_path, tok):
    engine = write_engine(tmp_path / "engine")
    with pytest.raises(ParameterError, match=r"triton_backend: python with a TensorRT-LLM engine needs decoupled mode"):
        render_repository(
            engine, tok, tmp_path / "dry", user_values={"triton_backend": "python"}, streaming=False, dry_run=True
        )
    repo = tmp_path / "repo"
    render_repository(engine, tok, repo, user_values={"triton_backend": "python"}, streaming=True)
    assert _validate_lines(repo, engine) == []
    path = repo / "tensorrt_llm" / "config.pbtxt"
    path.write_text(path.read_text().replace("decoupled: true", "decoupled: false"))
    backend_line = next(i for i, t in enumerate(path.read_text().splitlines(), 1) if t.startswith("backend:"))
    assert _validate_lines(repo, engine) == [
        f"tensorrt_llm/config.pbtxt:{backend_line}: backend: python with a TensorRT-LLM engine needs decoupled mode "
        "(the Python backend model only runs decoupled); set --streaming or triton_backend=tensorrtllm (B29)"
    ]


def test_tokenizer_larger_than_the_engine_vocabulary_is_refused_by_render_and_validate(tmp_path, tok):
    small = write_engine(tmp_path / "small", config("new", pretrained_config={"vocab_size": 1000}))
    needle = (
        "tokenizer_dir: the tokenizer has 32000 tokens but the engine's vocabulary is 1000: ids above 999 would be "
        f"out of range (wrong tokenizer for {small}?)"
    )
    severity, text = _render_text(small, tok, tmp_path / "dry", {})
    assert severity == "error" and needle in text, text
    repo = tmp_path / "repo"
    render_repository(write_engine(tmp_path / "engine"), tok, repo, engine_mode="reference")
    got = _validate_lines(repo, small)
    assert len(got) == 1 and got[0].endswith(f": {needle}"), got  # at the tokenizer_dir line of a text model
    where, line = got[0].split(":")[:2]
    assert "tokenizer_dir" in (repo / where).read_text().splitlines()[int(line) - 1]


def test_the_rules_of_render_only_inputs_need_those_inputs(tmp_path):
    """Without the user's values, --streaming, a tokenizer or the profile (validate's view of a filled repository)
    the streaming-flag, end-id, vocabulary and unset rules find nothing; with them they do."""
    from repo_builder.engine import inspect_engine
    from repo_builder.tokenizer import TokenizerInfo
    from repo_builder.values.rules import check

    engine = inspect_engine(write_engine(tmp_path / "e", config("new", pretrained_config={"vocab_size": 10})))
    values = {"decoupled_mode": True, "end_id": None, "triton_backend": "tensorrtllm", "tokenizer_dir": None}
    assert check(engine, values) == []
    tokenizer = TokenizerInfo(
        dir=Path("/t"), class_name="LlamaTokenizerFast", vocab_size=11, special_ids_error="no end id found in /t"
    )
    params = load_schema().for_profile("trtllm-1.2")
    got = {
        f.key: f.message
        for f in check(
            engine,
            values,
            tokenizer=tokenizer,
            user={"decoupled_mode": False},
            streaming=True,
            params={"tokenizer_dir": params["tokenizer_dir"]},
        )
    }
    assert got["decoupled_mode"] == "False contradicts --streaming; give only one of them"
    assert got["end_id"] == "no end id found in /t (B20)"
    assert got["tokenizer_dir"].startswith("required but unset")
    vocab = check(engine, {}, tokenizer=tokenizer)
    assert [f.message.split(":")[0] for f in vocab if f.key == "tokenizer_dir"] == [
        "the tokenizer has 11 tokens but the engine's vocabulary is 10"
    ]


def test_engine_without_kv_cache_says_what_it_can_serve(tmp_path, tok):
    sections = {
        "build_config": {
            "kv_cache_type": "disabled",
            "plugin_config": {"paged_kv_cache": False, "use_paged_context_fmha": False},
        }
    }
    engine = write_engine(tmp_path / "engine", config("new", **sections))
    severity, text = _render_text(engine, tok, tmp_path / "dry", {"batching_strategy": "V1"})
    assert severity == "warning" and "engine_dir: the engine was built without a KV cache" in text, text
    assert "one generated token" in text and "V1 is the only batching_strategy left" in text
    # in-flight batching is refused, naming the paged KV cache it needs
    severity, text = _render_text(engine, tok, tmp_path / "dry2", {})
    assert severity == "error" and "batching_strategy: in-flight batching" in text and "paged KV cache" in text
    repo = tmp_path / "repo"
    render_repository(engine, tok, repo, engine_mode="reference", user_values={"batching_strategy": "V1"})
    problems = validate_repository(repo, engine_dir=engine, warnings=True)
    assert any(p.file == str(engine) and "without a KV cache" in p.message for p in problems), problems


def test_pipeline_parallel_engine_needs_kv_for_pp_micro_batches(tmp_path):
    from repo_builder.engine import inspect_engine
    from repo_builder.values.rules import check

    pre = {"mapping": {"world_size": 2, "tp_size": 1, "pp_size": 2, "cp_size": 1}}
    engine = inspect_engine(write_engine(tmp_path / "engine", config("new", pretrained_config=pre), ranks=2))
    found = [f for f in check(engine, {"max_tokens_in_paged_kv_cache": 8 * 2048}) if f.severity == "warning"]
    assert [f.key for f in found] == ["max_tokens_in_paged_kv_cache"], found
    assert "fewer than the 16 sequences the engine runs at once (batch size 8 x pp 2)" in found[0].message
    assert "16384 tokens hold 8 full sequence(s)" in found[0].message and "32768 tokens hold a full batch" in (
        found[0].message
    )


def test_lora_weights_input_follows_the_engine_dtype(tmp_path, tok):
    """A bfloat16 engine gets lora_weights TYPE_BF16 (NVIDIA's TYPE_FP16 would make TRT-LLM refuse every request's
    weights); a repository declaring another dtype is refused by render and validate alike."""
    bf16 = {"pretrained_config": {"dtype": "bfloat16"}, **LORA_ENGINE}
    engine = write_engine(tmp_path / "engine", config("new", **bf16))
    repo = tmp_path / "repo"
    render_repository(engine, tok, repo, engine_mode="reference")
    for model in ("tensorrt_llm", "ensemble", "tensorrt_llm_bls"):
        text = (repo / model / "config.pbtxt").read_text()
        block = text[text.index('name: "lora_weights"') :][:80]
        assert "TYPE_BF16" in block, (model, block)
    severity, text = _render_text(engine, tok, tmp_path / "dry", {"lora_weights_data_type": "TYPE_FP16"})
    assert severity == "error" and "lora_weights_data_type: TYPE_FP16 contradicts the engine's LoRA dtype bfloat16" in (
        text
    ), text
    path = repo / "tensorrt_llm" / "config.pbtxt"
    text = path.read_text()
    at = text.index('name: "lora_weights"')
    path.write_text(text[:at] + text[at:].replace("TYPE_BF16", "TYPE_FP16", 1))
    problems = validate_repository(repo, engine_dir=engine)
    assert any(
        p.file == "tensorrt_llm/config.pbtxt" and p.message.startswith("input lora_weights data_type: TYPE_FP16")
        for p in problems
    ), "\n".join(str(p) for p in problems)


TP2 = {"pretrained_config": {"mapping": {"world_size": 2, "tp_size": 2, "pp_size": 1, "cp_size": 1}}}


@pytest.mark.parametrize(
    ("values", "severity", "needle"),
    [
        ({"gpu_device_ids": "0,0"}, "error", "gpu_device_ids: '0,0': instance 0 lists GPU 0 twice"),
        (
            {"gpu_device_ids": "0,1,2"},
            "warning",
            "gpu_device_ids: '0,1,2': instance 0 lists 3 ids, but the engine's world size is 2 (tp 2 x pp 1): ids 2 "
            "are never used",
        ),
        (
            {"gpu_device_ids": "0,1;1,2"},
            "warning",
            "gpu_device_ids: '0,1;1,2': GPU 1 is in instance 0 and instance 1; instances must not share a GPU",
        ),
        (
            {"gpu_device_ids": "0,1;2,3", "participant_ids": "1,2"},
            "error",
            "participant_ids: '1,2' has 1 instance group(s), gpu_device_ids '0,1;2,3' has 2",
        ),
        (
            {"gpu_device_ids": "0,1", "participant_ids": "1,2,3"},
            "error",
            "participant_ids: instance 0: 3 MPI rank(s) (1,2,3) for 2 GPU(s) (0,1) in gpu_device_ids",
        ),
    ],
)
def test_gpu_placement_render(tmp_path, tok, values, severity, needle):
    engine = write_engine(tmp_path / "engine", config("new", **TP2), ranks=2)
    got, text = _render_text(engine, tok, tmp_path / "dry", values)
    assert got == severity and needle in text, text


def _placement_repo(tmp_path: Path, tok: Path, gpu_ids: str) -> tuple[Path, Path]:
    engine = write_engine(tmp_path / "engine", config("new", **TP2), ranks=2)
    repo = tmp_path / "repo"
    render_repository(engine, tok, repo, engine_mode="reference", user_values={"gpu_device_ids": gpu_ids})
    return engine, repo


def test_gpu_placement_validate_with_and_without_lock_file(tmp_path, tok):
    engine, repo = _placement_repo(tmp_path, tok, "0,1,2")
    needle = "gpu_device_ids: '0,1,2': instance 0 lists 3 ids, but the engine's world size is 2"
    # with the lock file and no --engine-dir: the world size is the lock file's
    problems = validate_repository(repo, warnings=True)
    mine = [p for p in problems if needle in p.message]
    assert mine and mine[0].file == "tensorrt_llm/config.pbtxt", problems
    assert "launch.world_size" in mine[0].message and mine[0].severity == "warning" and mine[0].line is not None
    # without the lock file: --engine-dir gives it
    from repo_builder.repository.lockfile import LOCK_NAME

    (repo / LOCK_NAME).unlink()
    assert not [p for p in validate_repository(repo, warnings=True) if needle in p.message]
    problems = validate_repository(repo, engine_dir=engine, warnings=True)
    assert any(needle in p.message and "(tp 2 x pp 1)" in p.message for p in problems), problems


def test_kind_gpu_instance_group_is_counted_per_listed_gpu(tmp_path, tok):
    engine, repo = _placement_repo(tmp_path, tok, "0,1")
    path = repo / "tensorrt_llm" / "config.pbtxt"
    text = path.read_text()
    assert "kind: KIND_CPU" in text
    path.write_text(text.replace("kind: KIND_CPU", "kind: KIND_GPU\n    gpus: [ 0, 1 ]", 1))
    for problems in (validate_repository(repo), validate_repository(repo, engine_dir=engine, warnings=True)):
        text = "\n".join(str(p) for p in problems)
        assert "2 instances of the TensorRT-LLM model" in text, text
    problems = validate_repository(repo, warnings=True)
    kind = [p for p in problems if p.message.startswith("instance_group kind: KIND_GPU with gpus [0, 1]")]
    assert kind and kind[0].severity == "warning" and "the C++ backend places its 2 rank(s) itself" in kind[0].message
    path.write_text(path.read_text().replace("gpus: [ 0, 1 ]", "gpus: [ 3 ]", 1))
    problems = validate_repository(repo, engine_dir=engine)
    assert any(
        p.message.startswith("instance_group kind: KIND_GPU with gpus [3] disagrees with gpu_device_ids '0,1'")
        for p in problems
    ), problems


@pytest.mark.parametrize(
    ("sections", "values"),
    [
        (MEDUSA, {"decoding_mode": "medusa", "medusa_choices": "{0}, {1}, {0,0}, {0,1}"}),
        (EAGLE, {"eagle_choices": "{0}, {1}, {0,0}, {1,0}, {0,0,0}"}),
        (
            LOOKAHEAD,
            {
                "decoding_mode": "lookahead",
                "lookahead_window_size": 2,
                "lookahead_ngram_size": 3,
                "lookahead_verification_set_size": 2,
            },
        ),
    ],
    ids=["medusa", "eagle", "lookahead"],
)
def test_speculative_parameters_that_fit_the_engine_pass(tmp_path, tok, sections, values):
    """A tree within max_draft_len and the engine's depth, and a lookahead triple needing (2+2)*(3-1)-1 = 7 <= 8
    draft tokens, render without a finding and validate clean against the engine."""
    engine = write_engine(tmp_path / "engine", config("new", **sections))
    assert _render_text(engine, tok, tmp_path / "dry", values) == ("none", "")
    repo = tmp_path / "repo"
    render_repository(engine, tok, repo, user_values={k: str(v) for k, v in values.items()})
    assert [str(p) for p in validate_repository(repo, engine_dir=engine, warnings=True)] == []


@pytest.mark.parametrize("profile", ["trtllm-1.2", "trtllm-0.5"])
def test_kv_cache_capacity_is_checked_on_both_profiles(tmp_path, tok, profile):
    """The KV-cache capacity rule (issue 28) reads engine facts both profiles render from; the 0.5 profile
    has max_tokens_in_paged_kv_cache and max_beam_width too, so a budget that cannot hold one full sequence
    is refused there alike, naming the minimum that works (attention windows, LoRA and GPU placement are
    1.2-only parameters)."""
    from repo_builder.render import render_repository as render

    engine = write_engine(tmp_path / "engine", config("new", **BEAM))
    values = {"max_beam_width": "4", "max_tokens_in_paged_kv_cache": "8200"}
    with pytest.raises(RepoBuilderError) as err:
        render(engine, tok, tmp_path / "dry", profile=profile, user_values=values, dry_run=True)
    assert "max_tokens_in_paged_kv_cache: 8200 tokens cannot hold one full sequence" in str(err.value)
    assert "the minimum that works is 8320" in str(err.value)
