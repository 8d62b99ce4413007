"""Engine placement modes: copy, hardlink, symlink, reference."""

from __future__ import annotations

import errno
import os
import shutil
import stat
import uuid
from pathlib import Path

import pytest

from conftest import asset
from repo_builder import placement
from repo_builder.errors import RenderError
from repo_builder.pbtxt import load_model_config
from repo_builder.placement import copy_file, place, plan_placement
from repo_builder.render import render_repository
from repo_builder.validate import validate_repository

TOK = "mistral_v1_tokenizer"


def gpt_model_path(repo: Path) -> str:
    return load_model_config(repo / "tensorrt_llm" / "config.pbtxt").parameters["gpt_model_path"].string_value


@pytest.fixture
def engine(engine_copy):
    eng = engine_copy("v0.8-mistral-7b-dolphin")
    (eng / "rank0.engine").write_bytes(os.urandom(4096))
    os.chmod(eng / "rank0.engine", 0o640)
    return eng


def test_copy(engine, tmp_path):
    out = tmp_path / "repo"
    render_repository(engine, asset(TOK), out, engine_mode="copy")
    for name in ("config.json", "rank0.engine"):
        src, dst = engine / name, out / "tensorrt_llm" / "1" / name
        assert dst.read_bytes() == src.read_bytes()
        assert not dst.is_symlink() and dst.stat().st_ino != src.stat().st_ino
    assert stat.S_IMODE((out / "tensorrt_llm" / "1" / "rank0.engine").stat().st_mode) == 0o640
    assert gpt_model_path(out) == str(out / "tensorrt_llm" / "1")


def test_hardlink_shares_the_inode(engine, tmp_path):
    out = tmp_path / "repo"
    render_repository(engine, asset(TOK), out, engine_mode="hardlink")
    for name in ("config.json", "rank0.engine"):
        assert (out / "tensorrt_llm" / "1" / name).stat().st_ino == (engine / name).stat().st_ino
    assert gpt_model_path(out) == str(out / "tensorrt_llm" / "1")
    assert validate_repository(out) == []


def test_symlink_points_at_the_original(engine, tmp_path):
    out = tmp_path / "repo"
    render_repository(engine, asset(TOK), out, engine_mode="symlink")
    for name in ("config.json", "rank0.engine"):
        link = out / "tensorrt_llm" / "1" / name
        assert link.is_symlink() and Path(os.readlink(link)) == (engine / name).resolve()
    assert validate_repository(out) == []


def test_reference_places_nothing(engine, tmp_path):
    out = tmp_path / "repo"
    result = render_repository(engine, asset(TOK), out, engine_mode="reference")
    assert result.plan.placement.files == []
    assert list((out / "tensorrt_llm" / "1").iterdir()) == []
    assert gpt_model_path(out) == str(engine.resolve())
    assert validate_repository(out) == []


def test_hf_checkpoint_placement_modes(tiny_llama, tmp_path):
    for mode in ("hardlink", "symlink", "reference"):
        out = tmp_path / mode
        render_repository(tiny_llama, tiny_llama, out, engine_mode=mode)
        p = load_model_config(out / "tensorrt_llm" / "config.pbtxt").parameters
        if mode == "reference":
            assert p["engine_dir"].string_value == str(tiny_llama.resolve())
            assert not (out / "tensorrt_llm" / "1" / "engine").exists()
        else:
            weights = out / "tensorrt_llm" / "1" / "engine" / "model.safetensors"
            assert p["engine_dir"].string_value == str(weights.parent)
            if mode == "hardlink":
                assert weights.stat().st_ino == (tiny_llama / "model.safetensors").stat().st_ino
            else:
                assert Path(os.readlink(weights)) == (tiny_llama / "model.safetensors").resolve()
        assert validate_repository(out) == []


@pytest.fixture
def other_fs_engine(engine):
    """The engine copied to /dev/shm (tmpfs, a different filesystem from the test's tmp dir)."""
    shm = Path("/dev/shm")
    if not shm.is_dir() or os.stat(shm).st_dev == os.stat(engine).st_dev:
        pytest.skip("no second filesystem for a cross-device hardlink")
    dst = shm / f"repo-builder-test-{uuid.uuid4().hex}"
    shutil.copytree(engine, dst)
    yield dst
    shutil.rmtree(dst, ignore_errors=True)


def test_hardlink_across_filesystems_names_the_file(other_fs_engine, tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    with pytest.raises(RenderError) as err:
        render_repository(other_fs_engine, asset(TOK), work / "repo", engine_mode="hardlink")
    text = str(err.value)
    assert str(other_fs_engine / "config.json") in text and "different filesystems" in text and "copy" in text
    assert list(work.iterdir()) == []


def test_copy_reports_progress_in_chunks(tmp_path, monkeypatch):
    monkeypatch.setattr(placement, "_CHUNK", 1 << 20)
    src = tmp_path / "big.bin"
    data = os.urandom((5 << 20) + 123)
    src.write_bytes(data)
    steps: list[int] = []
    copy_file(src, tmp_path / "out.bin", advance=steps.append)
    assert (tmp_path / "out.bin").read_bytes() == data
    assert sum(steps) == len(data) and len(steps) == 6


@pytest.mark.parametrize("broken", ["copy_file_range", "both"])
def test_copy_falls_back_when_kernel_copy_is_unavailable(tmp_path, monkeypatch, broken):
    def unsupported(*args, **kwargs):
        raise OSError(errno.EXDEV, "cross-device")

    monkeypatch.setattr(os, "copy_file_range", unsupported, raising=False)
    if broken == "both":
        monkeypatch.setattr(os, "sendfile", unsupported)
    src = tmp_path / "src.bin"
    data = os.urandom(3 << 20)
    src.write_bytes(data)
    copy_file(src, tmp_path / "dst.bin")
    assert (tmp_path / "dst.bin").read_bytes() == data


def test_progress_bar_for_large_files(engine, tmp_path, monkeypatch):
    monkeypatch.setattr(placement, "PROGRESS_THRESHOLD", 1024)
    plan = plan_placement("trtllm", engine, "copy")
    root = tmp_path / "root"
    place(plan, root, progress=True)
    assert (root / "tensorrt_llm" / "1" / "rank0.engine").read_bytes() == (engine / "rank0.engine").read_bytes()


def test_dry_run_places_nothing(engine, tmp_path):
    plan = plan_placement("trtllm", engine, "copy")
    place(plan, tmp_path / "root", dry_run=True)
    assert not (tmp_path / "root").exists()
    assert plan.total_bytes == (engine / "config.json").stat().st_size + 4096
