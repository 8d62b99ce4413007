"""The config.pbtxt.j2 templates: variables == schema, I/O from the contract, escaping, omitted unset values."""

from __future__ import annotations

import shutil

import jinja2
import pytest
from google.protobuf import text_format
from hypothesis import given, settings
from hypothesis import strategies as st
from render_support import template_values
from tritonclient.grpc import model_config_pb2

from repo_builder.errors import TemplateError
from repo_builder.profile.contract import MODEL_NAMES, list_profiles, load_contract
from repo_builder.profile.paths import templates_dir
from repo_builder.profile.schema import load_schema, validate_user_values
from repo_builder.render import RESERVED_TEMPLATE_VARS, make_environment, render_configs, template_parameter_names
from repo_builder.repository.pbtxt import dtype_name, parse_model_config

PROFILES = ["trtllm-1.2", "trtllm-0.5"]
# Fixed keys a template writes by itself (not parameters): the C++ backend's input placement and worker
# binary; `engine_dir` repeats gpt_model_path for repo-builder's Python engines.
LITERAL_KEYS = {"FORCE_CPU_ONLY_INPUT_TENSORS", "executor_worker_path", "engine_dir"}


def _template_variables(profile: str, model: str) -> set[str]:
    env = make_environment()
    source = (templates_dir() / profile / model / "config.pbtxt.j2").read_text()
    from jinja2 import meta

    return meta.find_undeclared_variables(env.parse(source))


def test_profiles_have_every_template():
    assert set(PROFILES) <= set(list_profiles())
    for profile in PROFILES:
        for model in MODEL_NAMES:
            assert (templates_dir() / profile / model / "config.pbtxt.j2").is_file()


@pytest.mark.parametrize("profile", PROFILES)
def test_template_variables_equal_schema_parameters(profile):
    used: set[str] = set()
    for model in MODEL_NAMES:
        used |= _template_variables(profile, model)
    assert used - set(RESERVED_TEMPLATE_VARS) == template_parameter_names(profile)


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("model", MODEL_NAMES)
def test_each_template_uses_exactly_its_models_parameters(profile, model):
    schema = load_schema().for_profile(profile)
    expected = {name for name, p in schema.items() if model in p.models}
    assert _template_variables(profile, model) - set(RESERVED_TEMPLATE_VARS) == expected


def _parse_all(configs):
    return {m: parse_model_config(t) for m, t in configs.items()}


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("kind", ["trtllm", "hf", "synthetic"])
def test_io_sections_follow_the_contract(profile, kind):
    values = template_values(profile, kind)
    parsed = _parse_all(render_configs(profile, values, engine_kind=kind))
    contract = load_contract(profile)
    for model in MODEL_NAMES:
        spec = contract.models[model]
        cfg = parsed[model]
        for section, specs in (("input", spec.inputs), ("output", spec.outputs)):
            got = list(getattr(cfg, section))
            assert [t.name for t in got] == [s.name for s in specs], (model, section)
            for t, s in zip(got, specs):
                assert dtype_name(t.data_type) == s.dtype(values), (model, t.name)
                assert list(t.dims) == list(s.dims)
                if section == "input":
                    assert t.optional == s.optional
                    assert t.allow_ragged_batch == s.allow_ragged_batch
                    assert (list(t.reshape.shape) if t.HasField("reshape") else None) == (
                        list(s.reshape) if s.reshape is not None else None
                    )


def test_trtllm_05_uses_uint32_request_inputs():
    parsed = _parse_all(render_configs("trtllm-0.5", template_values("trtllm-0.5"), engine_kind="trtllm"))
    llm = {t.name: dtype_name(t.data_type) for t in parsed["tensorrt_llm"].input}
    assert llm["request_output_len"] == "TYPE_UINT32"
    assert llm["end_id"] == "TYPE_UINT32"
    ens = {t.name: (dtype_name(t.data_type), t.optional) for t in parsed["ensemble"].input}
    assert ens["max_tokens"] == ("TYPE_UINT32", False)
    assert ens["bad_words"] == ("TYPE_STRING", False)  # required in v0.5.0


def test_logits_dtype_parameter_reaches_every_logits_tensor():
    values = template_values("trtllm-1.2", logits_datatype="TYPE_BF16")
    parsed = _parse_all(render_configs("trtllm-1.2", values, engine_kind="trtllm"))
    for model in ("tensorrt_llm", "ensemble", "tensorrt_llm_bls"):
        outs = {t.name: dtype_name(t.data_type) for t in parsed[model].output}
        assert outs["generation_logits"] == "TYPE_BF16"
        assert outs["context_logits"] == "TYPE_BF16"
    ins = {t.name: dtype_name(t.data_type) for t in parsed["tensorrt_llm"].input}
    assert ins["draft_logits"] == "TYPE_BF16"


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("kind", ["trtllm", "hf", "synthetic"])
def test_structural_fields(profile, kind):
    values = template_values(
        profile,
        kind,
        decoupled_mode=True,
        triton_max_batch_size=16,
        max_queue_delay_microseconds=250,
        max_queue_size=7,
        preprocessing_instance_count=3,
    )
    parsed = _parse_all(render_configs(profile, values, engine_kind=kind))
    for model in MODEL_NAMES:
        assert parsed[model].name == model
        assert parsed[model].max_batch_size == 16
    llm = parsed["tensorrt_llm"]
    assert llm.backend == ("tensorrtllm" if kind == "trtllm" else "python")
    assert [(g.count, g.kind) for g in llm.instance_group] == [(1, model_config_pb2.ModelInstanceGroup.KIND_CPU)]
    assert llm.model_transaction_policy.decoupled is True
    assert parsed["tensorrt_llm_bls"].model_transaction_policy.decoupled is True
    assert list(llm.dynamic_batching.preferred_batch_size) == [16]
    assert llm.dynamic_batching.max_queue_delay_microseconds == 250
    assert llm.dynamic_batching.default_queue_policy.max_queue_size == 7
    assert parsed["preprocessing"].instance_group[0].count == 3
    for model in ("preprocessing", "postprocessing", "tensorrt_llm_bls"):
        assert parsed[model].backend == "python"
    assert parsed["ensemble"].platform == "ensemble"
    assert not parsed["ensemble"].backend
    steps = parsed["ensemble"].ensemble_scheduling.step
    assert [s.model_name for s in steps] == [s.model for s in load_contract(profile).models["ensemble"].steps]
    values["decoupled_mode"] = False
    parsed = _parse_all(render_configs(profile, values, engine_kind=kind))
    assert parsed["tensorrt_llm"].model_transaction_policy.decoupled is False


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("kind", ["trtllm", "hf", "synthetic"])
def test_parameters_use_schema_config_keys_and_values(profile, kind):
    schema = load_schema()
    values = template_values(profile, kind)
    parsed = _parse_all(render_configs(profile, values, engine_kind=kind))
    for model in MODEL_NAMES:
        written = {k: v.string_value for k, v in parsed[model].parameters.items()}
        expected = {}
        for p in schema.model_parameters(profile, model, kind):
            if values.get(p.name) is not None:
                expected[p.key] = p.format_value(values[p.name])
        if model == "postprocessing":  # the structural decoupled_mode, also told to postprocessing as a string
            expected["decoupled_mode"] = schema.parameters["decoupled_mode"].format_value(values["decoupled_mode"])
        extra = set(written) - set(expected)
        assert extra <= LITERAL_KEYS, (model, extra)
        assert {k: written.get(k) for k in expected} == expected, model
    llm = {k: v.string_value for k, v in parsed["tensorrt_llm"].parameters.items()}
    if kind == "trtllm":
        assert "engine_dir" not in llm and "max_input_len" not in llm  # build-time limits: not for the C++ backend
        assert llm["gpt_model_type"] == "inflight_fused_batching"
    else:
        assert llm["engine_dir"] == llm["gpt_model_path"] == values["engine_dir"]
        assert llm["max_seq_len"] == "200"
        assert "kv_cache_free_gpu_mem_fraction" not in llm  # C++-only parameters are left out
        assert "gpt_model_type" not in llm
    assert ("synthetic_token_delay_ms" in llm) == (kind == "synthetic")
    assert ("reference_engine_threads" in llm) == (kind == "hf")


def test_unset_runtime_parameters_are_omitted():
    values = template_values("trtllm-1.2", max_tokens_in_paged_kv_cache=None, kv_cache_free_gpu_mem_fraction=None)
    llm = parse_model_config(render_configs("trtllm-1.2", values, engine_kind="trtllm")["tensorrt_llm"])
    assert "max_tokens_in_paged_kv_cache" not in llm.parameters
    assert "kv_cache_free_gpu_mem_fraction" not in llm.parameters
    values = template_values("trtllm-1.2", max_tokens_in_paged_kv_cache=4096)
    llm = parse_model_config(render_configs("trtllm-1.2", values, engine_kind="trtllm")["tensorrt_llm"])
    assert llm.parameters["max_tokens_in_paged_kv_cache"].string_value == "4096"


def test_list_values_render_as_one_string():
    """Case B03: lists are structured input, rendered as one string inside string_value."""
    typed = validate_user_values(
        "trtllm-1.2",
        {
            "gpu_device_ids": "0,1;2,3",
            "participant_ids": [[1, 2]],
            "medusa_choices": [[0, 0, 0], [0, 1]],
            "max_attention_window_size": "4096,2048",
        },
        source="test",
    )
    values = template_values("trtllm-1.2", **typed)
    llm = parse_model_config(render_configs("trtllm-1.2", values, engine_kind="trtllm")["tensorrt_llm"])
    p = {k: v.string_value for k, v in llm.parameters.items()}
    assert p["gpu_device_ids"] == "0,1;2,3"
    assert p["participant_ids"] == "1,2"
    assert p["medusa_choices"] == "{0, 0, 0}, {0, 1}"
    assert p["max_attention_window_size"] == "4096,2048"


NASTY = [
    '/models/tok"enizer',
    "C:\\models\\tok",
    '/a/b\nparameters: { key: "evil" }',
    'x" } } parameters { key: "evil',
    "/tab\there",
    "/bell\x07\x01",
    "/ünïcødé/токенизатор/模型",
    "/trailing\\",
    "${tokenizer_dir}x"[2:],
]


@pytest.mark.parametrize("path", NASTY)
def test_string_values_round_trip_and_never_add_a_field(path):
    values = template_values("trtllm-1.2", tokenizer_dir=path)
    baseline = parse_model_config(
        render_configs("trtllm-1.2", template_values("trtllm-1.2"), engine_kind="trtllm")["preprocessing"]
    )
    text = render_configs("trtllm-1.2", values, engine_kind="trtllm")["preprocessing"]
    cfg = model_config_pb2.ModelConfig()
    text_format.Parse(text, cfg)
    assert cfg.parameters["tokenizer_dir"].string_value == path
    assert set(cfg.parameters) == set(baseline.parameters)
    assert len(cfg.input) == len(baseline.input) and len(cfg.output) == len(baseline.output)


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.characters(exclude_categories=("Cs",)), max_size=40))
def test_any_text_round_trips(path):
    env = make_environment()
    tpl = env.from_string('{% import "_macros.j2" as m %}{{ m.param("tokenizer_dir", v) }}')
    cfg = model_config_pb2.ModelConfig()
    text_format.Parse(tpl.render(v=path), cfg)
    assert cfg.parameters["tokenizer_dir"].string_value == path
    assert list(cfg.parameters) == ["tokenizer_dir"]


def test_value_that_cannot_be_utf8_is_refused_naming_the_key():
    values = template_values("trtllm-1.2", tokenizer_dir="/bad/\udcff")
    with pytest.raises(TemplateError, match="tokenizer_dir"):
        render_configs("trtllm-1.2", values, engine_kind="trtllm")


def test_bad_dtype_value_is_refused_naming_the_parameter():
    values = template_values("trtllm-1.2", logits_datatype="float16")
    with pytest.raises(TemplateError, match="logits_datatype"):
        render_configs("trtllm-1.2", values, engine_kind="trtllm")


@pytest.fixture
def template_copy(tmp_path, monkeypatch):
    """A private copy of model_templates/ selected with REPO_BUILDER_TEMPLATES."""
    dst = tmp_path / "templates"
    shutil.copytree(templates_dir(), dst)
    monkeypatch.setenv("REPO_BUILDER_TEMPLATES", str(dst))
    return dst


def test_undefined_variable_names_the_variable_and_template(template_copy):
    path = template_copy / "trtllm-1.2" / "postprocessing" / "config.pbtxt.j2"
    path.write_text(path.read_text() + '{{ m.param("x", not_a_parameter) }}\n')
    with pytest.raises(TemplateError) as err:
        render_configs("trtllm-1.2", template_values("trtllm-1.2"), engine_kind="trtllm")
    assert "not_a_parameter" in str(err.value) and "postprocessing" in str(err.value)


def _batch_line() -> int:
    """Line of max_batch_size in the ensemble rendered from the real templates."""
    text = render_configs("trtllm-1.2", template_values("trtllm-1.2"), engine_kind="trtllm")["ensemble"]
    return next(i for i, line in enumerate(text.splitlines(), 1) if line.startswith("max_batch_size:"))


def test_template_that_renders_invalid_pbtxt_fails_with_the_line(template_copy):
    line = _batch_line()
    path = template_copy / "trtllm-1.2" / "ensemble" / "config.pbtxt.j2"
    path.write_text(
        path.read_text().replace("max_batch_size: {{ triton_max_batch_size | pbint }}", "max_batch_size: eight")
    )
    with pytest.raises(TemplateError) as err:
        render_configs("trtllm-1.2", template_values("trtllm-1.2"), engine_kind="trtllm")
    assert "ensemble/config.pbtxt" in str(err.value) and f"line {line}:" in str(err.value)


def test_leftover_placeholder_fails_with_the_line(template_copy):
    """Case B01: a `${...}` never reaches a written file."""
    line = _batch_line()
    path = template_copy / "trtllm-1.2" / "ensemble" / "config.pbtxt.j2"
    path.write_text(
        path.read_text().replace(
            "max_batch_size: {{ triton_max_batch_size | pbint }}", "max_batch_size: ${triton_max_batch_size}"
        )
    )
    with pytest.raises(TemplateError) as err:
        render_configs("trtllm-1.2", template_values("trtllm-1.2"), engine_kind="trtllm")
    assert "${triton_max_batch_size}" in str(err.value) and f"line {line}:" in str(err.value)


def test_strict_undefined_is_on():
    env = make_environment()
    assert env.undefined is jinja2.StrictUndefined
    assert env.keep_trailing_newline and not env.autoescape
