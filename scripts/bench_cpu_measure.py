"""What scripts/bench_server_cpu.py measures, apart from driving the load: the processes of one tritonserver
(``/proc``: the server, each Python stub by model, MPI ranks), their CPU seconds, the CPU per generated token
by path, GPU utilisation sampling (:class:`GpuBusy`), the hottest frames of a py-spy/perf collapsed profile
(:func:`top_frames`), and the synthetic-engine repository the runs serve. bench_server_cpu.py re-exports these.
"""

from __future__ import annotations

import json
import re
import time
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench_common import proc_cpu_s  # noqa: E402

if TYPE_CHECKING:
    from repo_builder.bench import BenchSettings


ENGINE_MODEL = "tensorrt_llm"

SERVER = "tritonserver"

SYNTHETIC_SPEC = {"vocab_size": 32000, "max_batch_size": 64, "max_input_len": 1024, "max_seq_len": 2048}


# ------------------------------------------------------------------------------------------- pure parts
def stub_model(argv: list[str]) -> str | None:
    """The model a Python-backend stub serves, from its argv (``.../<model>/<version>/model.py``), else None."""
    if not argv or "triton_python_backend_stub" not in Path(argv[0]).name:
        return None
    for arg in argv[1:]:
        p = Path(arg)
        if p.name == "model.py" and len(p.parts) >= 3:
            return p.parent.parent.name
    return None


def cpu_delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """Per-process CPU seconds spent between two samples ``{name: cumulative seconds}`` (names in both)."""
    return {k: after[k] - before[k] for k in after if k in before}


#: Processes on each request path besides the engine stub (a stub of a model the path does not call is idle,
#: and left out of ``around_engine``; it still appears in ``total``).
PATH_PROCESSES = {
    "ensemble": (SERVER, "preprocessing", "postprocessing"),
    "tensorrt_llm_bls": (SERVER, "preprocessing", "postprocessing", "tensorrt_llm_bls"),
    ENGINE_MODEL: (SERVER,),
}


def per_token(
    delta: dict[str, float], tokens: int, path: tuple[str, ...] | None = None, engine: str = ENGINE_MODEL
) -> dict[str, float | None]:
    """ms of CPU per token for each process, ``total`` (every process) and ``around_engine``: the processes
    of ``path`` (default: every process but ``engine``; instances ``name#2`` count with ``name``) without the
    engine stub. None everywhere when ``tokens`` is 0."""
    if tokens <= 0:
        return {k: None for k in [*delta, "total", "around_engine"]}
    out: dict[str, float | None] = {k: v * 1000 / tokens for k, v in delta.items()}
    out["total"] = sum(delta.values()) * 1000 / tokens
    around = sum(v for k, v in delta.items() if k.split("#")[0] != engine and (path is None or k.split("#")[0] in path))
    out["around_engine"] = around * 1000 / tokens
    return out


def frame_key(frame: str, lines: bool = False) -> str:
    """A py-spy frame ``func (file.py:123)`` as ``func (file.py)`` (``lines=False``: one entry per function)."""
    if lines or not frame.endswith(")") or "(" not in frame:
        return frame
    head, _, loc = frame.rpartition("(")
    file, sep, line = loc[:-1].rpartition(":")
    return f"{head}({file})" if sep and line.isdigit() else frame


_PSEUDO_FRAME = re.compile(r"^(thread \(0?x?[0-9a-f]+\)|process \d+:)")


def top_frames(collapsed: str, n: int = 12, lines: bool = False) -> dict[str, list[tuple[str, int, float]]]:
    """Top functions of a py-spy ``--format raw`` profile (collapsed stacks: ``f1;f2;...;fN count`` per line).

    Thread pseudo-frames (``thread (123): name``, from ``--threads``) and ``process ...`` frames are dropped; a
    stack left without frames counts as ``<no Python frame>``. Frames are grouped per function
    (:func:`frame_key`) unless ``lines``.

    Returns ``{"self": [(frame, samples, share)...], "inclusive": [...], "total": [("samples", N, 1.0)]}``:
    ``self`` counts the innermost frame of each stack, ``inclusive`` every distinct frame of a stack once.
    Shares are fractions of all samples.
    """
    self_c: Counter[str] = Counter()
    incl: Counter[str] = Counter()
    total = 0
    for line in collapsed.splitlines():
        line = line.strip()
        if not line or " " not in line:
            continue
        stack, _, count_text = line.rpartition(" ")
        try:
            count = int(count_text)
        except ValueError:
            continue
        frames = [frame_key(f, lines) for f in stack.split(";") if f and not _PSEUDO_FRAME.match(f)]
        if not frames:
            frames = ["<no Python frame>"]
        total += count
        self_c[frames[-1]] += count
        for f in set(frames):
            incl[f] += count
    if not total:
        return {"self": [], "inclusive": [], "total": [("samples", 0, 1.0)]}
    return {
        "self": [(f, c, c / total) for f, c in self_c.most_common(n)],
        "inclusive": [(f, c, c / total) for f, c in incl.most_common(n)],
        "total": [("samples", total, 1.0)],
    }


# ------------------------------------------------------------------------------------------- machine parts
def server_processes(server_pid: int) -> dict[str, int]:
    """``{"tritonserver": pid, <model>: stub pid, ...}`` (one instance per model expected; extra instances get
    ``<model>#2`` ...)."""
    import repo_builder.server.procs as P

    found = {SERVER: server_pid}
    for child in P.children(server_pid):
        model = stub_model(P.cmdline(child.pid))
        if model is None:
            continue
        name, i = model, 1
        while name in found:
            i += 1
            name = f"{model}#{i}"
        found[name] = child.pid
    return found


def sample(pids: dict[str, int]) -> dict[str, float]:
    """Cumulative CPU seconds of each process (missing processes left out)."""
    out = {}
    for name, pid in pids.items():
        v = proc_cpu_s(pid)
        if v is not None:
            out[name] = v
    return out


def measured_level(settings: BenchSettings, pids: dict[str, int]) -> tuple[dict, float, dict[str, float]]:
    """Run one ``repo-builder bench`` level (``settings``: a ``BenchSettings`` of one concurrency) between two
    CPU samples of ``pids``; returns (the report's level, wall seconds, per-process CPU seconds spent)."""
    from repo_builder.bench import run_bench

    before = sample(pids)
    t0 = time.perf_counter()
    report = run_bench(settings, progress=False)
    wall = time.perf_counter() - t0
    return report["levels"][0], wall, cpu_delta(before, sample(pids))


def render_repo(work: Path, tokenizer_dir: str, extra: dict) -> Path:
    from repo_builder.render import render_repository

    engine = work / "synthetic-engine"
    engine.mkdir(parents=True, exist_ok=True)
    (engine / "synthetic_engine.json").write_text(json.dumps(SYNTHETIC_SPEC) + "\n")
    values = {"synthetic_token_delay_ms": 0, **extra}
    return render_repository(engine, tokenizer_dir, work / "repo", user_values=values, streaming=True).output


class GpuBusy:
    """Mean GPU utilization (%) of GPU 0 while the ``with`` block runs: NVML's ``utilization.gpu`` (share of
    the last sample period in which a kernel ran) polled every 100 ms in a thread. ``mean`` is None where
    NVML (``nvidia-ml-py``) or a GPU is absent."""

    def __init__(self) -> None:
        self.mean: float | None = None
        self._samples: list[int] = []
        self._stop = False
        self._thread: Any = None
        self._handle: Any = None

    def __enter__(self) -> GpuBusy:
        import threading

        try:
            import pynvml

            pynvml.nvmlInit()
            self._handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        except Exception:  # noqa: BLE001 - no NVML / no GPU: nothing to sample
            return self

        def poll() -> None:
            while not self._stop:
                self._samples.append(int(pynvml.nvmlDeviceGetUtilizationRates(self._handle).gpu))
                time.sleep(0.1)

        self._thread = threading.Thread(target=poll, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop = True
        if self._thread is not None:
            self._thread.join()
        if self._samples:
            self.mean = sum(self._samples) / len(self._samples)
