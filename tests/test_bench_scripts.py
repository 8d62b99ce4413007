"""Pure parts of the benchmark scripts (scripts/bench_common.py, bench_render.py, bench_launch.py,
bench_server_cpu.py): statistics, size parsing, /proc parsing, stub identification, CPU attribution and
py-spy profile aggregation. No clocks, no servers."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"


def _load(name: str):
    if str(SCRIPTS) not in sys.path:
        sys.path.insert(0, str(SCRIPTS))
    spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(module)
    return module


common = _load("bench_common")
render = _load("bench_render")
launch = _load("bench_launch")
cpu = _load("bench_server_cpu")


# ----------------------------------------------------------------------------------------- bench_common
def test_summary_median_and_spread():
    s = common.summary([3.0, 1.0, 2.0, 10.0])
    assert s == {"n": 4, "median": 2.5, "min": 1.0, "max": 10.0, "spread": pytest.approx(9.0 / 2.5)}
    assert common.summary([]) == {"n": 0, "median": None, "min": None, "max": None, "spread": None}
    assert common.summary([0.0, 0.0])["spread"] is None


def test_ratio_handles_missing_and_zero():
    assert common.ratio(3.0, 2.0) == 1.5
    assert common.ratio(None, 2.0) is None
    assert common.ratio(1.0, 0) is None


@pytest.mark.parametrize(
    "text, expected",
    [
        ("4GiB", 4 << 30),
        ("4KiB", 4096),
        ("4G", 4 << 30),
        ("4096", 4096),
        ("1.5MiB", 3 << 19),
        ("64 mib", 64 << 20),
        ("2kb", 2048),
    ],
)
def test_parse_size(text, expected):
    assert common.parse_size(text) == expected


@pytest.mark.parametrize("text", ["", "GiB", "4 parsecs", "-1K"])
def test_parse_size_rejects(text):
    with pytest.raises(ValueError):
        common.parse_size(text)


def test_format_size():
    assert common.format_size(4 << 30) == "4 GiB"
    assert common.format_size(4096) == "4 KiB"
    assert common.format_size(100) == "100 B"


def test_parse_proc_stat_with_spaces_and_parens_in_comm():
    # fields after comm: state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime ...
    line = "1234 (tri ton) (x)) S 1 1234 1234 0 -1 4194560 100 0 0 0 517 93 0 0 20 0 12 0 5555 0 0\n"
    assert common.parse_proc_stat(line) == (517, 93)
    with pytest.raises(ValueError):
        common.parse_proc_stat("garbage")
    with pytest.raises(ValueError):
        common.parse_proc_stat("1 (x) S 1 2")


def test_parse_proc_stat_reads_this_process():
    utime, stime = common.parse_proc_stat(Path("/proc/self/stat").read_text())
    assert utime >= 0 and stime >= 0


# ----------------------------------------------------------------------------------------- bench_render
def test_engine_config_is_a_valid_new_layout_engine(tmp_path):
    from repo_builder.engine import check_rank_files, inspect_engine

    engine = render.make_engine(tmp_path / "e", 4096, render.engine_config())
    info = inspect_engine(engine)
    check_rank_files(info)
    assert (info.kind, info.layout, info.vocab_size, info.world_size) == ("trtllm", "new", 32000, 1)
    data = (engine / "rank0.engine").read_bytes()
    assert len(data) == 4096 and data.count(0) == 0  # filled, never zero bytes


def test_write_filled_is_not_sparse(tmp_path):
    path = tmp_path / "f"
    render.write_filled(path, 3 * 1024 * 1024 + 5)
    st = path.stat()
    assert st.st_size == 3 * 1024 * 1024 + 5
    assert st.st_blocks * 512 >= st.st_size


def test_rotated_and_methods():
    assert render.rotated(["a", "b", "c"], 1) == ["b", "c", "a"]
    assert render.rotated(["a", "b", "c"], 4) == ["b", "c", "a"]
    assert render.rotated([], 3) == []
    assert render.methods_for(["copy", "hardlink"], ["copy"], True) == ["api:copy", "api:hardlink", "cli:copy", "cp"]


def test_analyse_ratios():
    times = {
        "4 GiB": {
            "api:copy": [5.0, 6.0, 7.0],
            "api:reference": [1.0, 1.0, 1.0],
            "api:hardlink": [1.1],
            "cp": [4.0, 5.0, 6.0],
        },
        "4 KiB": {"api:copy": [1.0], "api:reference": [1.0], "api:hardlink": [1.0], "cp": [0.01]},
    }
    out = render.analyse(times, "4 GiB", "4 KiB")
    assert out["copy_over_cp"] == {"api": pytest.approx(1.2), "cli": None}
    assert out["large_over_small"]["api:hardlink"] == pytest.approx(1.1)
    assert out["copy_minus_reference_over_cp"] == pytest.approx(1.0)
    assert out["summary"]["4 GiB"]["cp"]["median"] == 5.0


def test_evict_runs_on_a_file(tmp_path):
    path = tmp_path / "f"
    path.write_bytes(b"x" * 8192)
    render.evict([path])  # no error; the data stays
    assert path.read_bytes() == b"x" * 8192


# ----------------------------------------------------------------------------------------- bench_launch
def test_overheads_against_bare():
    out = launch.overheads({"bare": [2.0, 3.0, 4.0], "api": [3.5, 3.2, 3.3], "cli": []})
    assert out["api"] == pytest.approx(0.3)
    assert out["cli"] is None
    assert "bare" not in out


def test_ports_stay_in_range():
    ports = launch.Ports(20700)
    seen = [ports.next() for _ in range(40)]
    assert seen[0] == (20700, 20701, 20702)
    assert all(20700 <= p < 20800 for triple in seen for p in triple)
    assert len({t for t in seen[:33]}) == 33


def test_all_ready():
    body = json.dumps([{"name": "a", "state": "READY"}, {"name": "b", "state": "LOADING"}]).encode()
    assert launch.all_ready(body, {"a"})
    assert not launch.all_ready(body, {"a", "b"})
    assert not launch.all_ready(b"[]", {"a"})


# ----------------------------------------------------------------------------------------- bench_server_cpu
def test_stub_model_from_argv():
    argv = [
        "/x/backends/python/triton_python_backend_stub",
        "/repo/postprocessing/1/model.py",
        "rbab_r0_postprocessing_0_0",
        "1048576",
        "1048576",
        "123",
        "/x/backends/python",
        "336",
        "postprocessing_0_0",
        "DEFAULT",
    ]
    assert cpu.stub_model(argv) == "postprocessing"
    assert cpu.stub_model(["/usr/bin/python3", "/repo/postprocessing/1/model.py"]) is None
    assert cpu.stub_model([]) is None


def test_cpu_delta_and_per_token():
    before = {
        "tritonserver": 1.0,
        "preprocessing": 0.5,
        "postprocessing": 0.5,
        "tensorrt_llm_bls": 0.2,
        "tensorrt_llm": 2.0,
    }
    after = {
        "tritonserver": 2.0,
        "preprocessing": 0.6,
        "postprocessing": 1.0,
        "tensorrt_llm_bls": 0.3,
        "tensorrt_llm": 3.0,
        "gone_later": 9.0,
    }
    delta = cpu.cpu_delta(before, after)
    assert delta == pytest.approx(
        {"tritonserver": 1.0, "preprocessing": 0.1, "postprocessing": 0.5, "tensorrt_llm_bls": 0.1, "tensorrt_llm": 1.0}
    )
    ens = cpu.per_token(delta, 1000, cpu.PATH_PROCESSES["ensemble"])
    assert ens["around_engine"] == pytest.approx(1.6)  # server 1.0 + pre 0.1 + post 0.5 s over 1000 tokens
    assert ens["total"] == pytest.approx(2.7)
    assert ens["tensorrt_llm"] == pytest.approx(1.0)
    bls = cpu.per_token(delta, 1000, cpu.PATH_PROCESSES["tensorrt_llm_bls"])
    assert bls["around_engine"] == pytest.approx(1.7)
    assert cpu.per_token(delta, 1000)["around_engine"] == pytest.approx(1.7)  # default: all but the engine
    assert cpu.per_token(delta, 0)["around_engine"] is None


def test_per_token_counts_extra_instances():
    delta = {"tritonserver": 1.0, "postprocessing": 0.5, "postprocessing#2": 0.5, "tensorrt_llm": 3.0}
    assert cpu.per_token(delta, 1000, ("tritonserver", "postprocessing"))["around_engine"] == pytest.approx(2.0)


def test_frame_key():
    assert (
        cpu.frame_key("Postprocessor.process (repo_builder_runtime/postprocessing.py:131)")
        == "Postprocessor.process (repo_builder_runtime/postprocessing.py)"
    )
    assert cpu.frame_key("f (a.py:12)", lines=True) == "f (a.py:12)"
    assert cpu.frame_key("0x7f15c6ca3f16 (libc.so.6)") == "0x7f15c6ca3f16 (libc.so.6)"


def test_top_frames_self_and_inclusive():
    raw = "\n".join(
        [
            "thread (1): MainThread;execute (model.py:10);process (post.py:5);decode (tok.py:1) 6",
            "execute (model.py:10);process (post.py:7) 3",
            "execute (model.py:11);send (model.py:20) 1",
            "thread (2): idle 2",
            "not a line",
        ]
    )
    top = cpu.top_frames(raw)
    assert top["total"] == [("samples", 12, 1.0)]
    assert top["self"][0] == ("decode (tok.py)", 6, 0.5)
    selfs = dict((f, c) for f, c, _ in top["self"])
    assert selfs["process (post.py)"] == 3 and selfs["<no Python frame>"] == 2 and selfs["send (model.py)"] == 1
    incl = dict((f, c) for f, c, _ in top["inclusive"])
    assert incl["execute (model.py)"] == 10  # counted once per stack even with two line numbers
    assert incl["process (post.py)"] == 9
    assert cpu.top_frames("")["self"] == []


def test_copy_fixture_adds_empty_version_dirs(tmp_path):
    src = tmp_path / "src"
    (src / "ensemble").mkdir(parents=True)
    (src / "ensemble" / "config.pbtxt").write_text('name: "ensemble"\n')
    (src / "m" / "1" / "__pycache__").mkdir(parents=True)
    (src / "m" / "config.pbtxt").write_text('name: "m"\n')
    (src / "m" / "1" / "model.py").write_text("")
    out = launch.copy_fixture(src, tmp_path / "dst")
    assert (out / "ensemble" / "1").is_dir()
    assert (out / "m" / "1" / "model.py").is_file()
    assert not (out / "m" / "1" / "__pycache__").exists()


# ----------------------------------------------------------------------------------------- bench_client_procs
def test_client_processes_share_concurrency_and_requests():
    procs = _load("bench_client_procs")
    assert procs.split(256, 8) == [32] * 8
    assert procs.split(10, 4) == [3, 3, 2, 2]
    assert procs.split(2, 4) == [1, 1]  # no process without a stream
    kws = procs.text_kws({"model": "ensemble", "seed": 7}, 10, 64, 4)
    assert [k["concurrency"] for k in kws] == [[3], [3], [2], [2]]
    assert sum(k["requests"] for k in kws) == 64 and len({k["seed"] for k in kws}) == 4
    direct = procs.direct_kws({"url": "u"}, 3, 10, 2)
    assert [(k["concurrency"], k["requests"], k["first"]) for k in direct] == [(2, 5, 0), (1, 5, 5)]
