"""``render --force`` replaces only a repository that a valid lock file proves repo-builder rendered, and
never deletes a file the lock file does not list without saying so: it refuses and lists such files unless
``--delete-unlisted`` is given."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from cli_support import render_args, run_cli
from engine_configs import packaged_mistral, write_engine

from repo_builder.errors import RenderError
from repo_builder.render import render_repository
from repo_builder.repository.lockfile import LOCK_NAME, read_lock

PROJECT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    return packaged_mistral(tmp_path_factory)


@pytest.fixture(scope="module")
def engines(tmp_path_factory):
    root = tmp_path_factory.mktemp("engines")
    trt = write_engine(root / "trtllm", rank_size=1024)
    syn = root / "synthetic"
    syn.mkdir()
    (syn / "synthetic_engine.json").write_text(json.dumps({"max_batch_size": 4}))
    (syn / "sub").mkdir()
    (syn / "sub" / "notes.txt").write_text("placed with the engine")
    return {"trtllm": trt, "synthetic": syn}


def snapshot(root: Path) -> dict[str, str]:
    return {
        p.relative_to(root).as_posix(): ("<dir>" if p.is_dir() else hashlib.sha256(p.read_bytes()).hexdigest())
        for p in sorted(root.rglob("*"))
    }


def _refuse(out: Path, *args, match: list[str], **kwargs) -> str:
    before = snapshot(out)
    with pytest.raises(RenderError) as err:
        render_repository(*args, out, force=True, **kwargs)
    text = str(err.value)
    for needle in match:
        assert needle in text, f"{needle!r} not in {text!r}"
    assert snapshot(out) == before, "a refused --force changed the folder"
    return text


@pytest.mark.parametrize(
    "garbage", ["{not json", "[]", "{}", '{"files": {}, "values": {}}', "\xff\xfe".encode("latin-1").decode("latin-1")]
)
def test_a_garbage_lock_file_is_not_proof(tmp_path, tok, engines, garbage):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "thesis.tex").write_text("years of work")
    (out / LOCK_NAME).write_bytes(garbage.encode("latin-1"))
    _refuse(out, engines["trtllm"], tok, match=["lock file does not prove", LOCK_NAME])


@pytest.mark.parametrize(
    "mutate,key",
    [
        (lambda lk: lk.update(tool="other-tool"), "tool"),
        (lambda lk: lk["files"].update({"../../etc/passwd": "sha256:" + "0" * 64}), "files"),
        (lambda lk: lk["files"].update({"preprocessing/config.pbtxt": "md5:abc"}), "files"),
        (lambda lk: lk["values"].update({"x": {"value": 1, "origin": "somewhere"}}), "values.x.origin"),
        (lambda lk: lk["engine"].update(placement="teleport"), "engine.placement"),
        (lambda lk: lk["launch"].update(world_size="1"), "launch.world_size"),
        (lambda lk: lk.pop("files"), "files"),
    ],
)
def test_a_lock_file_failing_its_schema_is_not_proof(tmp_path, tok, engines, mutate, key):
    out = tmp_path / "repo"
    render_repository(engines["trtllm"], tok, out)
    lock = json.loads((out / LOCK_NAME).read_text())
    mutate(lock)
    (out / LOCK_NAME).write_text(json.dumps(lock))
    text = _refuse(out, engines["trtllm"], tok, match=["lock file does not prove", key])
    assert "Traceback" not in text


@pytest.mark.parametrize(
    "kind,mode", [("trtllm", "copy"), ("trtllm", "symlink"), ("synthetic", "copy"), ("synthetic", "reference")]
)
def test_unlisted_files_are_listed_and_kept(tmp_path, tok, engines, kind, mode):
    out = tmp_path / "repo"
    render_repository(engines[kind], tok, out, engine_mode=mode)
    assert read_lock(out).engine_files or mode == "reference"
    # files Triton's Python backend writes when it loads the models are not the user's
    (out / "preprocessing" / "1" / "__pycache__").mkdir()
    (out / "preprocessing" / "1" / "__pycache__" / "model.cpython-311.pyc").write_bytes(b"\0")
    render_repository(engines[kind], tok, out, engine_mode=mode, force=True)  # nothing unlisted: replaced
    (out / "notes.md").write_text("mine")
    (out / "tensorrt_llm" / "1" / "extra.bin").write_bytes(b"mine too")
    text = _refuse(
        out,
        engines[kind],
        tok,
        engine_mode=mode,
        match=["2 file(s)", "notes.md", "tensorrt_llm/1/extra.bin", "--delete-unlisted"],
    )
    assert "config.pbtxt" not in text.split("deleted:")[1]
    result = render_repository(engines[kind], tok, out, engine_mode=mode, force=True, delete_unlisted=True)
    assert result.written and not (out / "notes.md").exists() and not (out / "tensorrt_llm/1/extra.bin").exists()


def test_an_old_lock_file_without_engine_files_still_proves_its_engine_files(tmp_path, tok, engines):
    out = tmp_path / "repo"
    render_repository(engines["trtllm"], tok, out)
    lock = json.loads((out / LOCK_NAME).read_text())
    del lock["engine_files"]
    (out / LOCK_NAME).write_text(json.dumps(lock))
    assert render_repository(engines["trtllm"], tok, out, force=True).written


def test_cli_names_the_flag(tmp_path, tok, engines):
    out = tmp_path / "repo"
    render_repository(engines["trtllm"], tok, out)
    (out / "keep.txt").write_text("x")
    args = render_args(engines["trtllm"], tok, out, "--force")
    proc = run_cli(*args, cwd=PROJECT)
    assert proc.returncode == 2 and "keep.txt" in proc.stderr and "--delete-unlisted" in proc.stderr, proc.stderr
    assert (out / "keep.txt").read_text() == "x"
    proc = run_cli(*args, "--delete-unlisted", cwd=PROJECT)
    assert proc.returncode == 0, proc.stderr
    assert not (out / "keep.txt").exists()
