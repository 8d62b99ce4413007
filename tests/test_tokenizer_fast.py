"""Render-time tokenizer facts read from the files (repo_builder.tokenizer.inspect_tokenizer_files) equal
what AutoTokenizer gives, and the CLI's render/validate/params/inspect/--help never import torch,
transformers, grpc or tritonclient.grpc, nor numpy (0.5 s to import; the synthetic engine's spec is read
by repo_builder.runtime.synthetic_spec, not the runtime engine) (issue 10: a CLI that starts instantly)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import repo_builder.tokenizer as tokenizer_mod
from repo_builder.testing import packaged_tokenizer

# Facts render reads (resolve.py) plus the informational ones inspect prints; class_name is the class named in
# the files (transformers 5 reports PreTrainedTokenizerFast as TokenizersBackend).
FIELDS = (
    "vocab_size",
    "bos_token_id",
    "eos_token_id",
    "pad_token_id",
    "unk_token_id",
    "has_chat_template",
    "add_bos",
    "end_id",
    "pad_id",
    "stop_token_ids",
    "special_id_sources",
    "special_ids_error",
)
HEAVY = ("torch", "transformers", "grpc", "tritonclient.grpc", "numpy")


@pytest.fixture(scope="module")
def sp_tokenizer(tmp_path_factory) -> Path:
    """Mistral v1: a SentencePiece tokenizer.model (LlamaTokenizer) with no tokenizer.json."""
    return packaged_tokenizer("mistral-v1", tmp_path_factory.mktemp("mistral") / "tok")


@pytest.fixture(scope="module")
def json_tokenizer(tmp_path_factory, sp_tokenizer) -> Path:
    """The same vocabulary saved by transformers as tokenizer.json, with a chat template and an added token."""
    from transformers import AutoTokenizer

    out = tmp_path_factory.mktemp("mistral-json") / "tok"
    tok = AutoTokenizer.from_pretrained(str(sp_tokenizer))
    tok.add_special_tokens({"additional_special_tokens": ["<|tool|>"]})
    tok.chat_template = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
    tok.save_pretrained(str(out))
    assert (out / "tokenizer.json").is_file()
    return out


@pytest.fixture(scope="module")
def bpe_tokenizer(tmp_path_factory) -> Path:
    """A byte-level BPE trained here with `tokenizers`, saved as a generic PreTrainedTokenizerFast folder whose
    generation_config.json lists two end ids."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    out = tmp_path_factory.mktemp("bpe") / "tok"
    out.mkdir()
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(["What is the capital of France? Paris is.", "héllo wörld 你好 🙂"] * 20, trainer)
    tok.save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "tokenizer_class": "PreTrainedTokenizerFast",
                "bos_token": "<|im_start|>",
                "eos_token": "<|im_end|>",
                "pad_token": "<|endoftext|>",
                "unk_token": "<|endoftext|>",
            }
        )
    )
    (out / "generation_config.json").write_text(json.dumps({"eos_token_id": [2, 0]}))
    return out


@pytest.mark.parametrize("name", ["sp_tokenizer", "json_tokenizer", "bpe_tokenizer"])
def test_file_facts_equal_autotokenizer(request, monkeypatch, name):
    path = request.getfixturevalue(name)
    fast = tokenizer_mod.inspect_tokenizer_files(path)
    assert fast is not None, f"{name}: the file reader should handle this layout"
    monkeypatch.setattr(tokenizer_mod, "inspect_tokenizer_files", lambda _path: None)
    slow = tokenizer_mod.inspect_tokenizer(path)
    assert {f: getattr(fast, f) for f in FIELDS} == {f: getattr(slow, f) for f in FIELDS}


def test_bpe_folder_facts(bpe_tokenizer):
    info = tokenizer_mod.inspect_tokenizer(bpe_tokenizer)
    assert (info.end_id, info.stop_token_ids, info.pad_id) == (2, (0,), 0)
    assert info.special_id_sources["end_id"] == "generation_config.json eos_token_id"


def test_layouts_it_does_not_know_go_to_autotokenizer(tmp_path, sp_tokenizer):
    remote = tmp_path / "remote"
    remote.mkdir()
    (remote / "tokenizer.model").write_bytes((sp_tokenizer / "tokenizer.model").read_bytes())
    (remote / "tokenizer_config.json").write_text(
        json.dumps(
            {"tokenizer_class": "ChatGLMTokenizer", "auto_map": {"AutoTokenizer": ["tok.ChatGLMTokenizer", None]}}
        )
    )
    assert tokenizer_mod.inspect_tokenizer_files(remote) is None
    bpe = tmp_path / "bpe"
    bpe.mkdir()
    (bpe / "vocab.json").write_text("{}")
    (bpe / "merges.txt").write_text("")
    (bpe / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "GPT2Tokenizer"}))
    assert tokenizer_mod.inspect_tokenizer_files(bpe) is None


def _imported_by(argv: list[str], cwd: Path) -> tuple[int, list[str]]:
    code = (
        "import json, sys\n"
        "from repo_builder.cli import app\n"
        f"sys.argv = {['repo-builder', *argv]!r}\n"
        "try:\n    app()\nexcept SystemExit as exc:\n    rc = exc.code or 0\nelse:\n    rc = 0\n"
        f"heavy = sorted(m for m in sys.modules if any(m == h or m.startswith(h + '.') for h in {HEAVY!r}))\n"
        "print('\\n' + json.dumps([rc, heavy]))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True, check=False)
    rc, heavy = json.loads(out.stdout.strip().splitlines()[-1])
    return rc, heavy


def test_cli_commands_import_no_torch(tmp_path, sp_tokenizer, json_tokenizer):
    engine = tmp_path / "engine"
    engine.mkdir()
    (engine / "synthetic_engine.json").write_text(
        json.dumps({"vocab_size": 32001, "max_batch_size": 8, "max_input_len": 256, "max_seq_len": 512})
    )
    runs = {
        "help": ["--help"],
        "params": ["params", "--json"],
        "render-reference": [
            "render",
            "--engine-dir",
            str(engine),
            "--tokenizer-dir",
            str(sp_tokenizer),
            "--output",
            str(tmp_path / "repo"),
            "--engine-mode",
            "reference",
        ],
        "render-symlink": [
            "render",
            "--engine-dir",
            str(engine),
            "--tokenizer-dir",
            str(json_tokenizer),
            "--output",
            str(tmp_path / "repo2"),
            "--engine-mode",
            "symlink",
        ],
        "validate": ["validate", str(tmp_path / "repo")],
        "inspect-repo": ["inspect", str(tmp_path / "repo"), "--json"],
        "inspect-engine": ["inspect", str(engine)],
    }
    for name, argv in runs.items():
        rc, heavy = _imported_by(argv, tmp_path)
        assert rc == 0, f"{name}: exit {rc}"
        assert heavy == [], f"{name} imported {heavy}"
