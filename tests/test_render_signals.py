"""A signal during the write phase of a render (SIGTERM, SIGINT, SIGHUP) leaves nothing beside the output:
the temporary folder is removed and the process exits with 128 + the signal number.

Real subprocesses (``python -m repo_builder render``) copying a large sparse engine file, stopped with
SIGSTOP while the engine file is being copied, so the signal lands mid-copy on every run.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from cli_support import cli_argv, render_args
from engine_configs import packaged_mistral, write_engine

PROJECT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    return packaged_mistral(tmp_path_factory)


def _temp_engine_file(work: Path) -> Path | None:
    for tmp in work.glob(".repo.repo-builder-tmp-*"):
        target = tmp / "tensorrt_llm" / "1" / "rank0.engine"
        if target.exists():
            return target
    return None


def _start(engine: Path, tok: Path, out: Path) -> subprocess.Popen:
    return subprocess.Popen(
        cli_argv(*render_args(engine, tok, out)),
        cwd=PROJECT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _signal_mid_copy(proc: subprocess.Popen, work: Path, size: int, signum: int) -> bool:
    """Wait until the engine file is being copied, stop the process there, send ``signum``, resume.
    False when the copy finished before the process could be stopped (then it is left to finish)."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        target = _temp_engine_file(work)
        if target is not None and target.stat().st_size < size:
            os.kill(proc.pid, signal.SIGSTOP)
            try:
                if target.exists() and target.stat().st_size < size:
                    os.kill(proc.pid, signum)
                    return True
            finally:
                os.kill(proc.pid, signal.SIGCONT)
            return False
        time.sleep(0.001)
    return False


@pytest.mark.parametrize("signame,code", [("SIGTERM", 143), ("SIGINT", 130), ("SIGHUP", 129)])
def test_signal_during_copy_removes_the_temporary_folder(tmp_path, tok, signame, code):
    signum = getattr(signal, signame)
    work = tmp_path / "work"
    work.mkdir()
    size = 256 << 20
    for attempt in range(4):
        engine = write_engine(tmp_path / f"engine{attempt}", rank_size=size)
        proc = _start(engine, tok, work / "repo")
        try:
            hit = _signal_mid_copy(proc, work, size, signum)
            _, err = proc.communicate(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        if hit:
            break
        assert proc.returncode == 0, err
        for p in work.iterdir():  # the copy won the race: start again with a bigger file
            import shutil

            shutil.rmtree(p)
        size *= 2
    else:
        pytest.fail("the render never got stopped mid-copy")
    assert proc.returncode == code, err
    assert f"interrupted by {signame}" in err and "Traceback" not in err, err
    assert list(work.iterdir()) == [], f"the signal left files beside the output; stderr: {err}"
