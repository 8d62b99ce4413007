"""Rendering the same inputs twice gives byte-identical repositories, also across processes (hash seeds,
protobuf map order differ between processes). Renders with the same ``--serve-path`` so that nothing may
legitimately differ: every path, every file's bytes and permission bits are compared."""

from __future__ import annotations

import json
import os
import stat
import subprocess
from pathlib import Path

import pytest
from cli_support import cli_argv, render_args
from engine_configs import packaged_mistral, write_engine

PROJECT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    return packaged_mistral(tmp_path_factory)


def tree(root: Path) -> dict[str, tuple[str, int, bytes]]:
    """{relative path: (kind, permission bits, bytes or link target)} of everything under ``root``."""
    out = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        st = path.lstat()
        if stat.S_ISLNK(st.st_mode):
            out[rel] = ("link", 0, os.readlink(path).encode())
        elif path.is_dir():
            out[rel] = ("dir", stat.S_IMODE(st.st_mode), b"")
        else:
            out[rel] = ("file", stat.S_IMODE(st.st_mode), path.read_bytes())
    return out


@pytest.mark.parametrize("kind", ["trtllm", "synthetic"])
def test_two_renders_in_two_processes_are_byte_identical(tmp_path, tok, kind):
    if kind == "trtllm":
        engine = write_engine(tmp_path / "engine", rank_size=4096)
    else:
        engine = tmp_path / "engine"
        engine.mkdir()
        (engine / "synthetic_engine.json").write_text(json.dumps({"vocab_size": 32000, "max_batch_size": 4}))
    procs = []
    for i, seed in enumerate(("1", "2")):
        env = dict(os.environ, PYTHONHASHSEED=seed)
        procs.append(
            subprocess.Popen(
                cli_argv(
                    *render_args(engine, tok, tmp_path / f"out{i}"),
                    "--serve-path",
                    "/srv/models/repo",
                    "--set",
                    "stop_token_ids=2,3",
                    "--set",
                    "gpu_device_ids=0,1",
                ),
                cwd=PROJECT,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
    first, second = tree(tmp_path / "out0"), tree(tmp_path / "out1")
    assert sorted(first) == sorted(second)
    different = [rel for rel in first if first[rel] != second[rel]]
    assert different == [], f"files differ between two renders: {different}"
