"""Launcher unit tests: rank/mpirun argv, world-size resolution, binary discovery, preflight checks.

No server is started here; tests/test_launcher_server.py starts real ones.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import cli_support
import pydantic
import pytest
from cli_support import assert_refused
from conftest import PROJECT, free_ports

from repo_builder.errors import LaunchError
from repo_builder.server import (
    LaunchConfig,
    find_tritonserver,
    launch_argv,
    procs,
    rank_argv,
    resolve_plan,
    scan_repository,
)
from repo_builder.server import binary as binary_mod
from repo_builder.server.preflight import check_ports, check_shm, shm_requirement

FIXTURES = PROJECT / "tests" / "fixtures" / "launcher"
TS = "/opt/ts/bin/tritonserver"


def ranks(n: int, names: list[str] | None = None, verbose: bool = False) -> list[list[str]]:
    return [
        rank_argv(
            binary=TS,
            backend_args=["--backend-directory=/opt/ts/backends"],
            model_repo="/repo",
            rank=r,
            launch_id="rbTEST",
            http_address="127.0.0.1",
            http_port=8000,
            grpc_port=8001,
            metrics_port=8002,
            trtllm_models=names or ["tensorrt_llm"],
            verbose=verbose,
        )
        for r in range(n)
    ]


def split_ranks(argv: list[str]) -> list[list[str]]:
    """The per-rank argv lists of an mpirun command (after its options)."""
    first = argv.index("-n")
    out, cur = [], []
    for arg in argv[first:]:
        if arg == ":":
            out.append(cur)
            cur = []
        else:
            cur.append(arg)
    out.append(cur)
    for part in out:
        assert part[:2] == ["-n", "1"]
    return [part[2:] for part in out]


def test_single_rank_with_mpi() -> None:
    argv = launch_argv(ranks(1), use_mpi=True)
    assert argv[:2] == ["mpirun", "--allow-run-as-root"]
    assert "--oversubscribe" not in argv
    assert argv[-1] != ":" and ":" not in argv
    (rank0,) = split_ranks(argv)
    assert rank0[0] == TS
    assert "--model-repository=/repo" in rank0 and "--disable-auto-complete-config" in rank0
    assert "--backend-config=python,shm-region-prefix-name=rbTEST_r0_" in rank0
    assert "--http-port=8000" in rank0 and "--grpc-port=8001" in rank0 and "--metrics-port=8002" in rank0
    assert "--http-address=127.0.0.1" in rank0
    assert not any(a.startswith("--load-model") or a.startswith("--model-control-mode") for a in rank0)


@pytest.mark.parametrize("n", [1, 2])
def test_mpirun_does_not_pin_ranks_to_one_core(n: int) -> None:
    # Open MPI binds <= 2 ranks to one core each by default; the Python stubs inherit the mask
    argv = launch_argv(ranks(n), use_mpi=True)
    first_rank = argv.index("-n")
    assert argv[argv.index("--bind-to") + 1] == "none"
    assert argv.index("--bind-to") < first_rank


def test_no_mpi_is_the_bare_rank() -> None:
    assert launch_argv(ranks(1), use_mpi=False) == ranks(1)[0]
    with pytest.raises(ValueError):
        launch_argv(ranks(2), use_mpi=False)


@pytest.mark.parametrize("n", [2, 3])
def test_n_ranks(n: int) -> None:
    argv = launch_argv(ranks(n), use_mpi=True, oversubscribe=n > 2, export_env=["LD_LIBRARY_PATH", "PATH"])
    assert ("--oversubscribe" in argv) == (n > 2)
    assert argv.count(":") == n - 1 and argv[-1] != ":"
    assert argv[argv.index("-x") + 1] == "LD_LIBRARY_PATH"
    per_rank = split_ranks(argv)
    assert len(per_rank) == n
    prefixes = set()
    for r, rank in enumerate(per_rank):
        assert "--disable-auto-complete-config" in rank
        (prefix,) = [a.split("=", 2)[2] for a in rank if a.startswith("--backend-config=python,shm-region-prefix")]
        prefixes.add(prefix)
        ports = [a for a in rank if a.split("=")[0] in ("--http-port", "--grpc-port", "--metrics-port")]
        # no port flag twice (upstream repeats them); ranks > 0 open no endpoint at all
        assert len(ports) == len(set(a.split("=")[0] for a in ports))
        if r == 0:
            assert len(ports) == 3
            assert not any(a.startswith("--load-model") for a in rank)
        else:
            assert ports == []
            assert "--model-control-mode=explicit" in rank and "--load-model=tensorrt_llm" in rank
            assert {"--allow-http=false", "--allow-grpc=false", "--allow-metrics=false"} <= set(rank)
    assert len(prefixes) == n
    # no prefix is a prefix of another, so cleanup by prefix never touches another rank's regions
    assert not any(a != b and b.startswith(a) for a in prefixes for b in prefixes)


def test_prefix_of_rank_1_is_not_prefix_of_rank_10() -> None:
    names = [a for r in ranks(11) for a in r if "shm-region-prefix-name" in a]
    assert names[1].endswith("rbTEST_r1_") and not names[10].split("=", 2)[2].startswith("rbTEST_r1_")


def test_several_trtllm_models_and_verbose() -> None:
    rank0, rank1 = ranks(2, names=["a", "b"], verbose=True)
    assert [x for x in rank1 if x.startswith("--load-model")] == ["--load-model=a", "--load-model=b"]
    assert "--log-verbose=3" in rank0 and "--log-verbose=3" not in rank1


def test_histogram_latencies_only_on_rank_0_and_only_when_asked() -> None:
    """Rank 0 alone serves metrics; tritonserver keeps its histograms off unless --metrics-config says so."""
    kw = dict(binary=TS, backend_args=[], model_repo="/repo", launch_id="rbTEST", http_address="127.0.0.1")
    ports = dict(http_port=8000, grpc_port=8001, metrics_port=8002, trtllm_models=["tensorrt_llm"])
    on = [rank_argv(rank=r, histogram_latencies=True, **kw, **ports) for r in range(2)]
    assert "--metrics-config=histogram_latencies=true" in on[0] and "--metrics-config=summary_latencies=true" in on[0]
    assert not [a for a in on[1] if a.startswith("--metrics-config")]
    assert not [a for a in ranks(1)[0] if a.startswith("--metrics-config")]
    assert LaunchConfig(model_repo=Path("/repo")).histogram_latencies is False


def test_config_splits_comma_list() -> None:
    cfg = LaunchConfig(model_repo=".", tensorrt_llm_model_name="a, b,,c")
    assert cfg.tensorrt_llm_model_name == ["a", "b", "c"]
    with pytest.raises(pydantic.ValidationError):
        LaunchConfig(model_repo=".", bogus=1)  # extra="forbid"


# ---------------------------------------------------------------- world size and plan


@pytest.fixture
def tiny(tmp_path: Path) -> Path:
    dst = tmp_path / "repo"
    shutil.copytree(FIXTURES / "tiny", dst)
    return dst


def write_lock(repo: Path, world_size: int, names: list[str] | None = None) -> None:
    launch: dict = {"world_size": world_size}
    if names is not None:
        launch["tensorrt_llm_model_names"] = names
    (repo / "repo-builder.lock.json").write_text(json.dumps({"tool": "repo-builder", "launch": launch}))


def plan(repo: Path, cpu: int = 2, mpirun: bool = True, **kw):
    return resolve_plan(LaunchConfig(model_repo=repo, **kw), scan_repository(repo), cpu_count=cpu, have_mpirun=mpirun)


def test_world_size_defaults_to_one(tiny: Path) -> None:
    p = plan(tiny)
    assert (p.world_size, p.world_size_origin, p.use_mpi, p.trtllm_models) == (1, "default", True, ["tensorrt_llm"])


def test_world_size_from_lock_file(tiny: Path) -> None:
    write_lock(tiny, 2, ["postprocessing"])
    p = plan(tiny)
    assert p.world_size == 2 and "lock" in p.world_size_origin
    assert p.trtllm_models == ["postprocessing"]
    assert plan(tiny, world_size=2).world_size == 2  # agreeing with the lock is fine


def test_world_size_contradicting_lock_is_refused(tiny: Path) -> None:
    write_lock(tiny, 2)
    with pytest.raises(LaunchError) as err:
        plan(tiny, world_size=1)
    assert err.value.key == "launch.world_size" and "2" in str(err.value) and "--world_size 1" in str(err.value)


def test_malformed_lock_is_refused(tiny: Path) -> None:
    write_lock(tiny, 0)
    with pytest.raises(LaunchError, match="world_size"):
        scan_repository(tiny)


@pytest.mark.parametrize(
    "text, key",
    [
        ('{"launch": {"world_size": true}}', "launch.world_size"),
        ('{"launch": {"world_size": 2, "tensorrt_llm_model_names": [""]}}', "launch.tensorrt_llm_model_names"),
        ('{"launch": {"world_size": 4, "tp_size": 2, "pp_size": 1}}', "launch.world_size"),
        ('{"launch": [1]}', "launch"),
        ("{not json", None),
        ("[]", None),
    ],
)
def test_bad_lock_file_is_refused_naming_the_file_and_key(tiny: Path, text: str, key: str | None) -> None:
    (tiny / "repo-builder.lock.json").write_text(text)
    with pytest.raises(LaunchError) as err:
        scan_repository(tiny)
    assert err.value.path == tiny / "repo-builder.lock.json" and err.value.key == key


def test_partial_hand_made_lock_file_is_read_leniently(tiny: Path) -> None:
    # no tool/version/files: the strict LockFile schema refuses it, the launcher's reader only checks `launch`
    (tiny / "repo-builder.lock.json").write_text('{"launch": {"world_size": 2, "note": "by hand"}}')
    info = scan_repository(tiny)
    assert (info.lock_world_size, info.lock_model_names) == (2, None)
    (tiny / "repo-builder.lock.json").write_text('{"tool": "repo-builder"}')
    assert scan_repository(tiny).lock_path is None


def test_oversubscribe_added_when_ranks_exceed_cores(tiny: Path) -> None:
    assert not plan(tiny, cpu=2, world_size=2).oversubscribe
    p = plan(tiny, cpu=2, world_size=3)
    assert p.oversubscribe and any("oversubscribe" in n for n in p.notes)
    assert plan(tiny, cpu=8, world_size=2, oversubscribe=True).oversubscribe


def test_no_mpi_needs_world_size_one(tiny: Path) -> None:
    assert not plan(tiny, no_mpi=True).use_mpi
    with pytest.raises(LaunchError, match="--no-mpi"):
        plan(tiny, no_mpi=True, world_size=2)
    write_lock(tiny, 2)
    with pytest.raises(LaunchError, match="--no-mpi"):
        plan(tiny, no_mpi=True)


def test_multi_model_needs_world_size_one(tiny: Path) -> None:
    with pytest.raises(LaunchError, match="--multi-model"):
        plan(tiny, multi_model=True, world_size=2)


def test_unknown_trtllm_model_name_is_refused(tiny: Path) -> None:
    with pytest.raises(LaunchError) as err:
        plan(tiny, world_size=2, tensorrt_llm_model_name="tensorrt_llm,missing_model")
    assert "missing_model" in str(err.value) and err.value.key == "--tensorrt_llm_model_name"


def test_missing_mpirun(tiny: Path) -> None:
    p = plan(tiny, mpirun=False)
    assert not p.use_mpi and any("mpirun not found" in n for n in p.notes)
    with pytest.raises(LaunchError, match="openmpi-bin"):
        plan(tiny, mpirun=False, world_size=2)


def test_repository_problems(tmp_path: Path) -> None:
    with pytest.raises(LaunchError, match="does not exist"):
        scan_repository(tmp_path / "nope")
    with pytest.raises(LaunchError, match="no <model>/config.pbtxt"):
        scan_repository(tmp_path)
    bad = tmp_path / "m"
    bad.mkdir()
    (bad / "config.pbtxt").write_text("max_batch_size: ${triton_max_batch_size}\n")
    with pytest.raises(LaunchError) as err:
        scan_repository(tmp_path)
    assert err.value.path == bad / "config.pbtxt"


# ---------------------------------------------------------------- preflight


def test_port_in_use_is_refused() -> None:
    http, grpc, metrics = free_ports(3)
    with socket.socket() as s:
        s.bind(("127.0.0.1", grpc))
        s.listen()
        with pytest.raises(LaunchError) as err:
            check_ports("127.0.0.1", {"--http_port": http, "--grpc_port": grpc, "--metrics_port": metrics})
    assert err.value.key == "--grpc_port" and str(grpc) in str(err.value)
    assert f"by pid {os.getpid()}" in str(err.value)  # names who listens
    check_ports("127.0.0.1", {"--http_port": http, "--grpc_port": grpc, "--metrics_port": metrics})


def test_closing_connection_on_the_port_is_not_a_server() -> None:
    """Issue 13 item 16: a socket that only closes (here CLOSE_WAIT, bound without SO_REUSEADDR, so a bind
    with SO_REUSEADDR still fails with EADDRINUSE) is not another server: no refusal, a note instead."""
    (port,) = free_ports(1)
    with socket.socket() as peer:
        peer.bind(("127.0.0.1", 0))
        peer.listen()
        with socket.socket() as closing:
            closing.bind(("127.0.0.1", port))
            closing.connect(peer.getsockname())
            accepted, _ = peer.accept()
            accepted.close()  # the other end closes first: `closing` sits in CLOSE_WAIT on `port`
            with socket.socket() as probe:
                probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                with pytest.raises(OSError):
                    probe.bind(("127.0.0.1", port))  # the condition the old check called "in use"
            assert port not in procs.listening_tcp_ports()
            notes = check_ports("127.0.0.1", {"--http_port": port})
    assert len(notes) == 1 and f"--http_port {port}: no process listens on it" in notes[0]


def test_same_port_twice_is_refused() -> None:
    (port,) = free_ports(1)
    with pytest.raises(LaunchError, match="both"):
        check_ports("127.0.0.1", {"--http_port": port, "--grpc_port": port})


def test_shm_requirement_counts_python_instances(tiny: Path) -> None:
    repo = scan_repository(tiny)
    assert {m.name: m.python_instances for m in repo.models} == {"ensemble": 0, "postprocessing": 1, "tensorrt_llm": 1}
    stubs1, need1 = shm_requirement(repo, ["tensorrt_llm"], 1)
    stubs3, need3 = shm_requirement(repo, ["tensorrt_llm"], 3)
    assert (stubs1, stubs3) == (2, 4) and need3 > need1
    cfg = tiny / "postprocessing" / "config.pbtxt"
    cfg.write_text(cfg.read_text().replace("count: 1", "count: 5"))
    assert shm_requirement(scan_repository(tiny), ["tensorrt_llm"], 1)[0] == 6


def test_shm_too_small_is_refused() -> None:
    free = os.statvfs("/dev/shm").f_bavail * os.statvfs("/dev/shm").f_frsize
    check_shm(2, 1 << 20)
    with pytest.raises(LaunchError) as err:
        check_shm(10**6, free + (1 << 30))
    assert "MiB free" in str(err.value) and "--shm-size" in str(err.value)


# ---------------------------------------------------------------- finding tritonserver


def test_explicit_binary_must_exist(tmp_path: Path) -> None:
    with pytest.raises(LaunchError) as err:
        find_tritonserver(str(tmp_path / "tritonserver"))
    assert err.value.key == "--tritonserver"


def test_env_binary_is_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    exe = tmp_path / "tritonserver"
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    monkeypatch.setenv("TRITONSERVER", str(exe))
    found = find_tritonserver()
    assert found.path == exe and found.source == "$TRITONSERVER" and found.server_args() == []


def test_pytriton_binary_is_prepared(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TRITONSERVER", raising=False)
    if binary_mod.OPT_TRITONSERVER.exists():
        pytest.skip("/opt/tritonserver takes precedence on this machine")
    found = find_tritonserver()
    root = found.path.parent.parent
    assert found.source == "nvidia-pytriton"
    assert (root / "backends" / "python" / "triton_python_backend_stub").is_file()
    assert found.server_args() == [f"--backend-directory={root / 'backends'}"]
    assert found.env["PATH"].split(os.pathsep)[0] == os.path.dirname(sys.executable)
    import sysconfig

    assert sysconfig.get_config_var("LIBDIR") in found.env["LD_LIBRARY_PATH"].split(os.pathsep)


def test_numpy_2_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """numpy 2 cannot be installed next to numpy 1 here, so the version lookup is what changes."""
    monkeypatch.delenv("TRITONSERVER", raising=False)
    monkeypatch.setattr(binary_mod, "_numpy_version", lambda: "2.1.0")
    root = binary_mod._pytriton_root()
    assert root is not None
    with pytest.raises(LaunchError) as err:
        binary_mod.prepare_pytriton(root, "nvidia-pytriton")
    assert "numpy 2.1.0" in str(err.value) and "numpy<2" in str(err.value)


# ---------------------------------------------------------------- CLI without a server


def run_cli(*args: str, script: bool = False, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    """``repo-builder ARGS``, or with ``script`` NVIDIA's ``launch_triton_server.py`` stand-in, run to its end."""
    if not script:
        return cli_support.run_cli(*args, **kwargs)
    cmd = [sys.executable, str(PROJECT / "scripts" / "launch_triton_server.py"), *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, **kwargs)


def test_cli_dry_run_uses_lock_world_size(tiny: Path) -> None:
    write_lock(tiny, 2)
    h, g, m = free_ports(3)
    out = run_cli(
        "launch", str(tiny), "--http_port", str(h), "--grpc_port", str(g), "--metrics_port", str(m), "--dry-run"
    )
    assert out.returncode == 0, out.stderr
    command = out.stdout.strip().splitlines()[-1].split()
    assert command[0] == "mpirun" and len(split_ranks(command)) == 2
    refused = run_cli("launch", str(tiny), "--world_size", "1", "--http_port", str(h), "--dry-run")
    assert_refused(refused, "launch.world_size")


def test_script_accepts_upstream_flags(tiny: Path) -> None:
    h, g, m = free_ports(3)
    out = run_cli(
        "--world_size",
        "3",
        "--model_repo",
        str(tiny),
        "--http_port",
        str(h),
        "--grpc_port",
        str(g),
        "--metrics_port",
        str(m),
        "--tensorrt_llm_model_name",
        "tensorrt_llm,postprocessing",
        "--log",
        "--dry-run",
        script=True,
    )
    assert out.returncode == 0, out.stderr
    assert "--oversubscribe" in out.stdout or (os.cpu_count() or 1) >= 3
    command = out.stdout.strip().splitlines()[-1].split()
    per_rank = split_ranks(command)
    assert len(per_rank) == 3
    assert [a for a in per_rank[2] if a.startswith("--load-model=")] == [
        "--load-model=tensorrt_llm",
        "--load-model=postprocessing",
    ]
    # every rank bounds how long a stop may take (tritonserver's own default is 30 s): in-flight requests
    # (--exit-timeout 5) plus the models' unloads (--unload-timeout 20), which tritonserver counts on one timer
    assert all("--exit-timeout-secs=25" in rank for rank in per_rank)


# ---------------------------------------------------------------- world size from the engine (case B12)


def add_trtllm_model(repo: Path, engine_dir: Path, name: str = "trtllm_cpp") -> None:
    model = repo / name
    (model / "1").mkdir(parents=True)
    (model / "config.pbtxt").write_text(
        f'name: "{name}"\nbackend: "tensorrtllm"\nmax_batch_size: 8\n'
        f'parameters {{ key: "engine_dir" value {{ string_value: "{engine_dir}" }} }}\n'
    )


def test_world_size_from_engine_tp(tiny: Path, engine_copy) -> None:
    add_trtllm_model(tiny, engine_copy("old-llama2-70b-tp2-int8wo"))
    p = plan(tiny)
    assert p.world_size == 2 and p.world_size_origin.startswith("engine ")
    assert p.trtllm_models == ["trtllm_cpp"]  # the tensorrtllm-backend model, not the default name


def test_world_size_contradicting_engine_is_refused(tiny: Path, engine_copy) -> None:
    engine = engine_copy("old-llama2-7b-tp4")
    add_trtllm_model(tiny, engine)
    with pytest.raises(LaunchError) as err:
        plan(tiny, world_size=1)
    assert "world size 4" in str(err.value) and err.value.path == engine / "config.json"
    write_lock(tiny, 2)  # a stale lock file disagreeing with the engine is refused too
    with pytest.raises(LaunchError, match="world size 4"):
        plan(tiny)


def test_engine_dir_missing_here_is_a_note(tiny: Path, tmp_path: Path) -> None:
    add_trtllm_model(tiny, tmp_path / "not-here")
    p = plan(tiny)
    assert p.world_size == 1 and any("not a directory here" in n for n in p.notes)


def test_launch_option_defaults_have_one_home() -> None:
    # server/options.DEFAULTS is read by LaunchConfig and by the typer options of `launch` (and `stop --timeout`)
    import inspect

    from repo_builder.commands import serve as commands
    from repo_builder.server.options import DEFAULTS

    fields = LaunchConfig.model_fields
    assert set(DEFAULTS) == set(fields) - {"model_repo", "server_args"}
    params = inspect.signature(commands.launch).parameters
    for name, value in DEFAULTS.items():
        assert fields[name].default == value, name
        assert params[name].default.default == value, name
    assert inspect.signature(commands.stop).parameters["timeout"].default.default == DEFAULTS["stop_timeout"]
    shown = run_cli("launch", "--help", env={**os.environ, "COLUMNS": "200"})
    assert f"[default: {DEFAULTS['http_port']}]" in shown.stdout and f"[default: {DEFAULTS['timeout']}]" in shown.stdout


# ---------------------------------------------------------------- what tritonserver logged when it would not start

#: A 2.51 log of a repository whose postprocessing config names another model, as mpirun --tag-output writes it
#: (tags split tritonserver's last line into pieces), with the errors every GPU-less start logs.
TAGGED_LOG = (
    '[1,0]<stderr>:E1203 08:23:17.873544 28951 server.cc:241] "CudaDriverHelper has not been initialized."'
    "[1,0]<stderr>:\n"
    '[1,0]<stderr>:E1203 08:23:17.875536 28951 model_repository_manager.cc:1460] "Poll failed for model directory '
    "'postprocessing': unexpected directory name 'postprocessing' for model 'postprocessing_x', directory name must "
    'equal model name"[1,0]<stderr>:\n'
    '[1,0]<stderr>:E1203 08:23:17.875785 28951 model_repository_manager.cc:703] "Invalid argument: ensemble ensemble '
    'contains models that are not available or ambiguous: postprocessing"[1,0]<stderr>:\n'
    "[1,0]<stderr>:I1203 08:23:18.709502 28951 model_lifecycle.cc:624] \"successfully unloaded 'ensemble' version 1\"\n"
    "[1,0]<stderr>:error: [1,0]<stderr>:creating server[1,0]<stderr>:: [1,0]<stderr>:Internal[1,0]<stderr>: - "
    "[1,0]<stderr>:failed to load all models[1,0]<stderr>:\n"
)


def test_the_causes_tritonserver_logged_are_read_from_a_tagged_log(tmp_path: Path) -> None:
    from repo_builder.server.server_log import ServerLog

    log = tmp_path / "ts.log"
    log.write_text(TAGGED_LOG + "\n".join(f"[1,0]<stderr>:I1203 teardown line {i}" for i in range(60)) + "\n")
    assert ServerLog(log).triton_errors() == [
        "Poll failed for model directory 'postprocessing': unexpected directory name 'postprocessing' for model "
        "'postprocessing_x', directory name must equal model name",
        "Invalid argument: ensemble ensemble contains models that are not available or ambiguous: postprocessing",
        "creating server: Internal - failed to load all models",
    ]
    assert "Poll failed" not in ServerLog(log).tail()  # the 40-line tail alone would not show the cause


def test_a_stray_folder_is_refused_before_anything_starts(tiny: Path) -> None:
    (tiny / "notes").mkdir()
    (tiny / "notes" / "todo.txt").write_text("x")
    h, g, m = free_ports(3)
    out = run_cli(
        "launch", str(tiny), "--http_port", str(h), "--grpc_port", str(g), "--metrics_port", str(m), "--dry-run"
    )
    assert_refused(out)
    assert (
        "model folder(s) notes hold no config.pbtxt" in out.stderr and "Poll failed for model directory" in out.stderr
    )
    assert "Traceback" not in out.stderr


@pytest.mark.server
def test_launch_of_a_repository_triton_cannot_load_prints_what_triton_logged(tiny: Path) -> None:
    """A config whose name differs from its folder passes the launcher's own checks; tritonserver refuses it and
    exits, and the launcher's error quotes tritonserver's reasons, not only that rank 0 exited."""
    config = tiny / "postprocessing" / "config.pbtxt"
    config.write_text(config.read_text().replace('name: "postprocessing"', 'name: "postprocessing_x"', 1))
    (tiny / "ensemble" / "1").mkdir(exist_ok=True)
    h, g, m = free_ports(3)
    out = run_cli(
        "launch", str(tiny), "--http_port", str(h), "--grpc_port", str(g), "--metrics_port", str(m), "--timeout", "110"
    )
    assert out.returncode == 2, out.stdout + out.stderr
    error = out.stderr[out.stderr.index("error: ") :]
    assert "exited" in error.splitlines()[0] and "before the server was ready" in error.splitlines()[0], error
    logged = error[error.index("tritonserver logged:") :]
    assert "Poll failed for model directory 'postprocessing': unexpected directory name 'postprocessing'" in logged
    assert "creating server: Internal - failed to load all models" in logged
