"""``prompt_embedding_table`` data types per profile, as NVIDIA's templates declare them (issue 12, item 13).

Facts (tensorrtllm_backend tags, ``all_models/inflight_batcher_llm/<model>/config.pbtxt``; TensorRT-LLM
``triton_backend/`` for 1.2: github.com/triton-inference-server/tensorrtllm_backend, github.com/NVIDIA/TensorRT-LLM):

* v0.5.0: no model declares ``prompt_embedding_table`` or ``prompt_vocab_size`` (they arrived in v0.6.0).
* v0.19.0: ``tensorrt_llm``, ``ensemble`` and ``tensorrt_llm_bls`` declare it TYPE_FP16 ``[-1, -1]``, optional;
  ``preprocessing`` does not have it (only ``PROMPT_TABLE_EXTRA_ID``).
* TensorRT-LLM 1.2.0rc8 (profile trtllm-1.2): ``tensorrt_llm`` types it ``${prompt_embedding_table_data_type}``
  and NVIDIA's docs fill that key into ``tensorrt_llm_bls`` too; the ensemble keeps TYPE_FP16. Ours ties
  all three to the one parameter (docs/compatibility.md): an ensemble input must have the dtype of the step
  input it feeds, so one value keeps a non-FP16 table loadable; with TYPE_FP16 the files say what NVIDIA's say.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from repo_builder.profile.contract import load_contract
from repo_builder.repository.pbtxt import dtype_name, load_model_config

MODELS = ("preprocessing", "tensorrt_llm", "ensemble", "tensorrt_llm_bls")
TABLE_MODELS = ("tensorrt_llm", "ensemble", "tensorrt_llm_bls")


def _names(profile: str, model: str) -> set[str]:
    spec = load_contract(profile).models[model]
    return {t.name for t in (*spec.inputs, *spec.extra_inputs)}


def test_trtllm_05_declares_no_prompt_table_inputs():
    for model in load_contract("trtllm-0.5").models:
        assert not {"prompt_embedding_table", "prompt_vocab_size", "PROMPT_EMBEDDING_TABLE"} & _names(
            "trtllm-0.5", model
        ), model


def test_trtllm_12_prompt_table_is_typed_by_one_parameter():
    contract = load_contract("trtllm-1.2")
    assert "prompt_embedding_table" not in _names("trtllm-1.2", "preprocessing")
    for model in TABLE_MODELS:
        spec = contract.models[model].input("prompt_embedding_table")
        assert spec.data_type_param == "prompt_embedding_table_data_type" and spec.data_type is None, model
        assert spec.dims == (-1, -1) and spec.optional, model
        assert spec.dtype({"prompt_embedding_table_data_type": "TYPE_BF16"}) == "TYPE_BF16"


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory) -> Path:
    from repo_builder.testing import make_tiny_llama, packaged_tokenizer

    base = tmp_path_factory.mktemp("ptable")
    return make_tiny_llama(base / "ckpt", packaged_tokenizer("mistral-v1", base / "tok"), seed=0)


def _table_dtypes(repo: Path) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for model in MODELS:
        config = load_model_config(repo / model / "config.pbtxt")
        found = [t for t in config.input if t.name == "prompt_embedding_table"]
        out[model] = dtype_name(found[0].data_type) if found else None
    return out


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ({"prompt_embedding_table_data_type": "TYPE_FP16"}, "TYPE_FP16"),  # NVIDIA's v0.19.0 / docs value
        ({"prompt_embedding_table_data_type": "TYPE_BF16"}, "TYPE_BF16"),
        ({}, "TYPE_FP32"),  # default: the engine's dtype (the tiny checkpoint is float32)
    ],
)
def test_rendered_repository_declares_one_table_dtype(ckpt, tmp_path, values, expected):
    from repo_builder.render import render_repository

    repo = render_repository(ckpt, ckpt, tmp_path / "repo", user_values=values).output
    assert _table_dtypes(Path(repo)) == {
        "preprocessing": None,
        "tensorrt_llm": expected,
        "ensemble": expected,
        "tensorrt_llm_bls": expected,
    }


def test_rendered_05_repository_has_no_table(ckpt, tmp_path):
    from repo_builder.render import render_repository

    repo = render_repository(ckpt, ckpt, tmp_path / "repo", profile="trtllm-0.5").output
    assert set(_table_dtypes(Path(repo)).values()) == {None}
