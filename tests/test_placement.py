"""Engine placement modes: copy, hardlink, symlink, reference."""

from __future__ import annotations

import errno
import os
import shutil
import stat
import threading
import uuid
from pathlib import Path

import pytest
from conftest import asset

from repo_builder import placement
from repo_builder.errors import RenderError
from repo_builder.placement import copy_file, place, plan_placement
from repo_builder.render import render_repository
from repo_builder.repository.pbtxt import load_model_config
from repo_builder.repository.validate import validate_repository

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


def test_copy_asks_the_kernel_for_the_whole_file_after_advising_sequential(tmp_path, monkeypatch):
    """One copy_file_range call for the rest of the file (64 MiB pieces were ~2x slower than cp, cold
    cache), after posix_fadvise(SEQUENTIAL) on the source, like coreutils cp."""
    if not hasattr(os, "copy_file_range"):
        pytest.skip("no os.copy_file_range on this platform")
    real_copy, real_advise = os.copy_file_range, os.posix_fadvise
    counts: list[int] = []
    advice: list[int] = []

    def copy_range(src_fd, dst_fd, count, *args):
        counts.append(count)
        return real_copy(src_fd, dst_fd, count, *args)

    def advise(fd, offset, length, what):
        advice.append(what)
        return real_advise(fd, offset, length, what)

    monkeypatch.setattr(os, "copy_file_range", copy_range)
    monkeypatch.setattr(os, "posix_fadvise", advise)
    size = (64 << 20) + 4096 + 7  # above the old 64 MiB piece size
    src = tmp_path / "big.bin"
    with open(src, "wb") as fh:
        fh.write(os.urandom(4096))
        fh.seek(size - 7)
        fh.write(b"tail-01")
    copy_file(src, tmp_path / "out.bin")
    assert counts[0] == size and sum(counts) >= size
    assert os.POSIX_FADV_SEQUENTIAL in advice
    with open(tmp_path / "out.bin", "rb") as fh:
        assert fh.read(4096) == src.read_bytes()[:4096]
        fh.seek(size - 7)
        assert fh.read() == b"tail-01"


def test_on_progress_reaches_the_size_of_a_file_above_the_threshold(engine, tmp_path):
    data = os.urandom(3 << 20)
    (engine / "rank0.engine").write_bytes(data)
    plan = plan_placement("trtllm", engine, "copy")
    calls: list[tuple[int, int]] = []
    place(
        plan, tmp_path / "root", on_progress=lambda done, total: calls.append((done, total)), progress_threshold=1 << 20
    )
    assert calls and calls[-1] == (len(data), len(data))  # config.json is under the threshold: not counted
    assert all(total == len(data) for _, total in calls)
    assert [done for done, _ in calls] == sorted(done for done, _ in calls)
    assert (tmp_path / "root" / "tensorrt_llm" / "1" / "rank0.engine").read_bytes() == data


def test_on_progress_not_called_below_the_threshold(engine, tmp_path):
    calls: list[tuple[int, int]] = []
    place(
        plan_placement("trtllm", engine, "copy"),
        tmp_path / "root",
        on_progress=lambda done, total: calls.append((done, total)),
    )
    assert calls == []


def test_progress_bar_reaches_the_file_sizes(engine, tmp_path, monkeypatch):
    """The rich bar's task is at its total (the big files' bytes) when the bar stops."""
    from rich import progress as rich_progress

    big = os.urandom(2 << 20)
    (engine / "rank0.engine").write_bytes(big)
    (engine / "rank1.engine").write_bytes(big[: 1 << 20] + b"x")
    seen: list[tuple[float, float | None]] = []
    real_stop = rich_progress.Progress.stop

    def stop(self):
        seen.extend((task.completed, task.total) for task in self.tasks)
        return real_stop(self)

    monkeypatch.setattr(rich_progress.Progress, "stop", stop)
    place(plan_placement("trtllm", engine, "copy"), tmp_path / "root", progress=True, progress_threshold=1 << 20)
    total = len(big) + (1 << 20) + 1
    assert seen == [(total, total)]


def test_watch_size_reports_the_growing_destination(tmp_path):
    path = tmp_path / "growing.bin"
    sizes: list[int] = []
    grown = threading.Event()

    def report(n: int) -> None:
        sizes.append(n)
        if n >= 3000:
            grown.set()

    with placement.watch_size(path, report, interval=0.005):
        path.write_bytes(b"a" * 1000)
        with open(path, "ab") as fh:
            fh.write(b"b" * 2000)
        assert grown.wait(timeout=30)  # a bound against hanging, not a timing assertion
    after = len(sizes)
    assert sizes[-1] == 3000 and sizes == sorted(set(sizes))
    path.write_bytes(b"c" * 5000)
    assert len(sizes) == after  # the thread stopped with the block


def test_copy_error_names_the_file_and_stops_the_watcher(engine, tmp_path, monkeypatch):
    if not hasattr(os, "copy_file_range"):
        pytest.skip("no os.copy_file_range on this platform")
    (engine / "rank0.engine").write_bytes(os.urandom(2 << 20))
    real_copy = os.copy_file_range

    def fails_on_big(src_fd, dst_fd, count, *args):
        if count > 1 << 20:  # only the tracked rank0.engine copy, while its watcher runs
            raise OSError(errno.EIO, "Input/output error")
        return real_copy(src_fd, dst_fd, count, *args)

    monkeypatch.setattr(os, "copy_file_range", fails_on_big)
    with pytest.raises(RenderError) as err:
        place(plan_placement("trtllm", engine, "copy"), tmp_path / "root", progress=True, progress_threshold=1 << 20)
    assert str(engine / "rank0.engine") in str(err.value) and "Input/output error" in str(err.value)
    assert not any(t.name.startswith("repo-builder-progress") for t in threading.enumerate())


def test_placement_job_cancel_kicks_the_copying_thread(engine, tmp_path, monkeypatch):
    """PlacementJob.cancel() sets the stop flag and hands the copying thread's id to ``kick`` while the thread
    is inside a kernel copy call; the call returns early (as after a signal), the copy stops there."""
    if not hasattr(os, "copy_file_range"):
        pytest.skip("no os.copy_file_range on this platform")
    (engine / "rank0.engine").write_bytes(os.urandom(1 << 20))
    real_copy = os.copy_file_range
    in_call = threading.Event()
    kicked = threading.Event()
    kicks: list[int] = []

    def blocking_copy(src_fd, dst_fd, count, *args):
        if count < 1 << 20:  # config.json
            return real_copy(src_fd, dst_fd, count, *args)
        in_call.set()
        kicked.wait(60)  # a long kernel call, until a signal would interrupt it
        return real_copy(src_fd, dst_fd, 4096, *args)  # interrupted: part of the file

    def kick(ident: int) -> None:
        kicks.append(ident)
        kicked.set()

    monkeypatch.setattr(os, "copy_file_range", blocking_copy)
    job = placement.PlacementJob(plan_placement("trtllm", engine, "copy"), tmp_path / "root").start()
    assert in_call.wait(60)
    ident = job.thread.ident
    job.cancel(kick=kick)
    assert not job.thread.is_alive() and kicks and set(kicks) == {ident}
    job.join()  # the cancellation is not an error of the caller's
    assert (tmp_path / "root" / "tensorrt_llm" / "1" / "rank0.engine").stat().st_size == 4096


def test_placement_job_join_raises_the_copy_error(engine, tmp_path):
    job = placement.PlacementJob(plan_placement("trtllm", engine, "hardlink"), tmp_path / "root")
    (tmp_path / "root" / "tensorrt_llm" / "1").mkdir(parents=True)
    (tmp_path / "root" / "tensorrt_llm" / "1" / "config.json").write_text("{}")  # in the way of the link
    job.start()
    with pytest.raises(RenderError, match="placing engine file"):
        job.join()
    assert not job.thread.is_alive()


def test_placement_job_places_small_files_first(engine, tmp_path, monkeypatch):
    """wait_small() returns once the files up to PROGRESS_THRESHOLD are placed, while a large one is still being
    copied (render validates the repository then: it reads the engine's config.json, not the rank files)."""
    (engine / "rank0.engine").write_bytes(os.urandom(1 << 20))
    monkeypatch.setattr(placement, "PROGRESS_THRESHOLD", 1 << 19)
    release = threading.Event()
    real_copy = placement.copy_file

    def copy_file(src, dst, **kwargs):
        if src.name == "rank0.engine":
            assert release.wait(60)
        return real_copy(src, dst, **kwargs)

    monkeypatch.setattr(placement, "copy_file", copy_file)
    plan = plan_placement("trtllm", engine, "copy")
    plan.files.reverse()  # the large file first in the plan: still placed after the small ones
    job = placement.PlacementJob(plan, tmp_path / "root").start()
    job.wait_small()
    folder = tmp_path / "root" / "tensorrt_llm" / "1"
    assert (folder / "config.json").read_bytes() == (engine / "config.json").read_bytes()
    assert job.thread.is_alive()
    release.set()
    job.join()
    assert (folder / "rank0.engine").read_bytes() == (engine / "rank0.engine").read_bytes()
