"""Where the reference engine runs (issue 29): ``reference_engine_device`` / ``reference_engine_dtype`` as typed
parameters, the device choice (``auto`` falls back to the CPU without CUDA, ``cuda`` without CUDA fails the
load by name), the instance's GPU from Triton's ``initialize`` args, a bf16 engine equal to transformers in
bf16, and render writing a KIND_GPU ``instance_group`` only for ``cuda``. CI has no GPU: the CUDA kernels run
on the GPU host (scripts/gpu_host.sh bench exact, docs/performance.md)."""

from __future__ import annotations

import pytest
from engine_fakes import engine_model_config, fake_pb_utils, init_args

from repo_builder.errors import RepoBuilderError
from repo_builder.render import render_repository
from repo_builder.repository.pbtxt import load_model_config
from repo_builder.repository.validate import validate_repository
from repo_builder.runtime.engine_core import EngineLoadError, TritonEngineModel
from repo_builder.runtime.params import ModelParams, ParameterValueError
from repo_builder.runtime.reference import ReferenceBackend, select_device

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")


def test_select_device_auto_falls_back_to_cpu_and_cuda_without_cuda_fails_by_name():
    assert select_device("cpu", cuda_available=True) == "cpu"
    assert select_device("auto", cuda_available=False) == "cpu"
    assert select_device("auto", cuda_available=True, device_id=3) == "cuda:3"
    assert select_device("cuda", cuda_available=True) == "cuda:0"
    with pytest.raises(EngineLoadError, match="reference_engine_device' is 'cuda' but torch sees no CUDA"):
        select_device("cuda", cuda_available=False)
    with pytest.raises(EngineLoadError, match="reference_engine_device' = 'tpu'"):
        select_device("tpu", cuda_available=True)


def test_choice_parameter_names_the_key_and_the_choices():
    params = ModelParams({"name": "tensorrt_llm", "parameters": {"reference_engine_dtype": {"string_value": "BF16"}}})
    assert params.choice("reference_engine_dtype", ("fp32", "bf16")) == "bf16"
    assert params.choice("reference_engine_device", ("auto", "cpu"), "auto") == "auto"
    bad = ModelParams({"name": "tensorrt_llm", "parameters": {"reference_engine_dtype": {"string_value": "int4"}}})
    with pytest.raises(ParameterValueError, match="'reference_engine_dtype' = 'int4' is not one of fp32, bf16"):
        bad.choice("reference_engine_dtype", ("fp32", "bf16"))


def load(tiny_llama, extra_args=None, **params):
    config = engine_model_config(params={"engine_dir": str(tiny_llama), "max_beam_width": "1", **params})
    args = {**init_args(config), **(extra_args or {})}
    return TritonEngineModel(fake_pb_utils(), args, ReferenceBackend.from_params)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only behaviour")
def test_engine_on_a_host_without_cuda(tiny_llama):
    """auto (the default) loads on the CPU; cuda fails the load naming the parameter; a bad dtype likewise."""
    model = load(tiny_llama, reference_engine_device="auto")
    try:
        assert model.scheduler.backend.device.type == "cpu"
    finally:
        model.finalize()
    with pytest.raises(EngineLoadError, match="reference_engine_device' is 'cuda'"):
        load(tiny_llama, reference_engine_device="cuda")
    with pytest.raises(EngineLoadError, match="reference_engine_dtype"):
        load(tiny_llama, reference_engine_dtype="fp8")


def test_instance_gpu_comes_from_the_initialize_args(tiny_llama, monkeypatch):
    """A KIND_GPU instance runs on the GPU Triton names (model_instance_device_id); a KIND_CPU one on GPU 0.
    The GPU cannot exist here: the constructor's arguments are what is checked."""
    seen = {}

    def fake_init(self, engine_dir, **kwargs):
        seen.update(kwargs)
        raise EngineLoadError("stop here")

    monkeypatch.setattr(ReferenceBackend, "__init__", fake_init)
    gpu = {"model_instance_kind": "GPU", "model_instance_device_id": "2"}
    with pytest.raises(EngineLoadError, match="stop here"):
        load(tiny_llama, gpu, reference_engine_device="cuda", reference_engine_dtype="fp16")
    assert seen["device"] == "cuda" and seen["dtype"] == "fp16" and seen["device_id"] == 2
    with pytest.raises(EngineLoadError):
        load(tiny_llama, {"model_instance_kind": "CPU", "model_instance_device_id": "2"})
    assert seen["device"] == "auto" and seen["dtype"] == "fp32" and seen["device_id"] == 0


def test_bf16_engine_equals_transformers_in_bf16(tiny_llama):
    """Weights and KV cache in the asked dtype; greedy tokens equal transformers' generate in that dtype
    (one sequence and a batched decode of three)."""
    from test_reference_engine import PROMPTS, generate, hf_generate, req_inputs

    backend = ReferenceBackend(tiny_llama, dtype="bf16")
    assert {p.dtype for p in backend.model.parameters()} == {torch.bfloat16}
    hf = transformers.AutoModelForCausalLM.from_pretrained(str(tiny_llama), dtype=torch.bfloat16).eval()
    tok = transformers.AutoTokenizer.from_pretrained(str(tiny_llama))
    ids = [tok(p)["input_ids"] for p in PROMPTS]
    want = [hf_generate(hf, i, 12) for i in ids]
    ((one, _),) = generate(backend, req_inputs(ids[0], 12))
    assert one == want[0]
    got = [r[0] for r in generate(backend, *[req_inputs(i, 12) for i in ids])]
    assert got == want
    assert backend.batched_forwards > 0


def instance_group(repo):
    return load_model_config(repo / "tensorrt_llm" / "config.pbtxt").instance_group


@pytest.mark.parametrize("profile", ["trtllm-1.2", "trtllm-0.5"])
def test_render_writes_kind_gpu_only_for_cuda(tiny_llama, tmp_path, profile):
    cuda = render_repository(
        tiny_llama,
        tiny_llama,
        tmp_path / "cuda",
        profile=profile,
        user_values={"reference_engine_device": "cuda", "reference_engine_dtype": "bf16"},
    ).output
    (group,) = instance_group(cuda)
    assert group.kind == group.KIND_GPU and list(group.gpus) == [0] and group.count == 1
    cfg = load_model_config(cuda / "tensorrt_llm" / "config.pbtxt")
    assert cfg.parameters["reference_engine_device"].string_value == "cuda"
    assert cfg.parameters["reference_engine_dtype"].string_value == "bf16"
    assert validate_repository(cuda) == []
    default = render_repository(tiny_llama, tiny_llama, tmp_path / "auto", profile=profile).output
    (group,) = instance_group(default)
    assert group.kind == group.KIND_CPU and list(group.gpus) == []
    assert (
        load_model_config(default / "tensorrt_llm" / "config.pbtxt").parameters["reference_engine_device"].string_value
        == "auto"
    )


def test_render_refuses_a_bad_device_by_name(tiny_llama, tmp_path):
    with pytest.raises(RepoBuilderError, match="reference_engine_device"):
        render_repository(tiny_llama, tiny_llama, tmp_path / "bad", user_values={"reference_engine_device": "gpu"})
    assert not (tmp_path / "bad").exists()


def test_batched_greedy_pick_equals_the_per_sequence_choice(tiny_llama):
    """One argmax + log-softmax over the batch (one device-to-host copy per step) gives each plain greedy row
    the token and log-prob :meth:`choose` gives it; rows with logits processing are left to ``choose``."""
    from engine_fakes import req_inputs

    from repo_builder.runtime.engine_core import EngineLimits, ModelIO, parse_request
    from repo_builder.runtime.engine_outputs import Sequence

    backend = ReferenceBackend(tiny_llama)
    io = ModelIO.from_config(engine_model_config("trtllm-1.2"))
    limits = EngineLimits(vocab_size=backend.vocab_size, max_input_len=64, max_seq_len=128)
    plain = parse_request(req_inputs([5, 6, 7], 4), io, limits).rows[0]
    steered = parse_request(req_inputs([5, 6, 7], 4, repetition_penalty=[1.5]), io, limits).rows[0]
    seqs = [Sequence(plain, None), Sequence(steered, None), Sequence(plain, None)]
    for seq in seqs:
        seq.tokens.extend([9, 10])
    logits = torch.randn(3, backend.vocab_size, generator=torch.Generator().manual_seed(0))
    picked = backend._pick_plain(seqs, logits)
    assert set(picked) == {0, 2}
    for row in (0, 2):
        st = type("St", (), {"counts": {}, "generator": None})()
        token, logprob = backend.choose(logits[row], seqs[row], st)
        assert picked[row][0] == token
        assert picked[row][1] == pytest.approx(logprob, abs=1e-5)
