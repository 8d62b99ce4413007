"""Helpers shared by scripts/bench_render.py, bench_launch.py and bench_server_cpu.py.

Pure parts (tested in tests/test_bench_scripts.py): :func:`summary` (median and spread of repeated
measurements), :func:`ratio`, :func:`parse_size`, :func:`parse_proc_stat` (utime + stime of one
``/proc/<pid>/stat`` line). The rest reads the machine (load average, CPU model, clock ticks) or
``/proc`` and is used by the scripts only.
"""

from __future__ import annotations

import os
import platform
import re
import statistics
import time
from collections.abc import Sequence
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[1]

_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?i?B?)?\s*$", re.IGNORECASE)
_UNITS = {
    "": 1,
    "b": 1,
    "k": 1 << 10,
    "kb": 1 << 10,
    "kib": 1 << 10,
    "m": 1 << 20,
    "mb": 1 << 20,
    "mib": 1 << 20,
    "g": 1 << 30,
    "gb": 1 << 30,
    "gib": 1 << 30,
    "t": 1 << 40,
    "tb": 1 << 40,
    "tib": 1 << 40,
}


def parse_size(text: str) -> int:
    """``"4GiB"`` / ``"4G"`` / ``"4096"`` -> bytes. Units are binary (K = KiB = 1024 bytes).

    Raises:
        ValueError: not a number with an optional B/K/M/G/T unit.
    """
    match = _SIZE_RE.match(text)
    if not match:
        raise ValueError(f"not a size: {text!r} (e.g. 4GiB, 4KiB, 4096)")
    number, unit = match.groups()
    unit = (unit or "").lower()
    if unit not in _UNITS:
        raise ValueError(f"unknown size unit in {text!r}")
    return int(float(number) * _UNITS[unit])


def format_size(n: int) -> str:
    """Bytes as the largest binary unit that divides them evenly-ish: 4294967296 -> ``"4 GiB"``."""
    for unit, factor in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= factor:
            value = n / factor
            return f"{value:g} {unit}"
    return f"{n} B"


def summary(values: Sequence[float]) -> dict[str, float | int | None]:
    """Median and spread of repeated measurements.

    Returns ``{"n", "median", "min", "max", "spread"}`` where ``spread`` is (max - min) / median (a
    fraction; None when the median is 0). Empty input gives ``n`` = 0 and None everywhere else.
    """
    vals = [float(v) for v in values]
    if not vals:
        return {"n": 0, "median": None, "min": None, "max": None, "spread": None}
    med = statistics.median(vals)
    lo, hi = min(vals), max(vals)
    return {"n": len(vals), "median": med, "min": lo, "max": hi, "spread": (hi - lo) / med if med else None}


def ratio(a: float | None, b: float | None) -> float | None:
    """``a / b``, or None when either is missing or ``b`` is 0."""
    if a is None or b is None or b == 0:
        return None
    return a / b


def parse_proc_stat(line: str) -> tuple[int, int]:
    """(utime, stime) in clock ticks from one ``/proc/<pid>/stat`` line.

    The command name (field 2) is in parentheses and may itself hold spaces or parentheses, so fields are
    counted after the LAST ``)``: utime and stime are fields 14 and 15 of proc(5), i.e. the 12th and 13th
    after the name.

    Raises:
        ValueError: the line has no ``)`` or too few fields.
    """
    end = line.rfind(")")
    if end < 0:
        raise ValueError("not a /proc/<pid>/stat line (no ')')")
    rest = line[end + 1 :].split()
    if len(rest) < 13:
        raise ValueError("not a /proc/<pid>/stat line (too few fields)")
    return int(rest[11]), int(rest[12])


CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def proc_cpu_s(pid: int) -> float | None:
    """utime + stime of ``pid`` in seconds (None if the process is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            u, s = parse_proc_stat(fh.read())
    except (OSError, ValueError):
        return None
    return (u + s) / CLK_TCK


def load_average() -> str:
    """``"1.23 0.98 0.75"`` (1/5/15 minutes)."""
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def wait_for_load(max_load: float, timeout_s: float, log=print) -> float:
    """Sleep (up to ``timeout_s``) until the 1-minute load average is below ``max_load``; returns the last load."""
    deadline = time.monotonic() + timeout_s
    load = os.getloadavg()[0]
    while load >= max_load and time.monotonic() < deadline:
        log(f"load average {load:.2f} >= {max_load}; waiting")
        time.sleep(min(15.0, max(0.0, deadline - time.monotonic())))
        load = os.getloadavg()[0]
    return load


def source_revision() -> str:
    """``git describe --always --dirty`` of the project the scripts run from (the rendered runtime comes from
    its working tree), or a note when it is not a git checkout (e.g. a ``git archive`` export)."""
    import subprocess

    if not (PROJECT / ".git").exists():
        return f"{PROJECT} (not a git checkout)"
    try:
        out = subprocess.run(
            ["git", "-C", str(PROJECT), "describe", "--always", "--dirty"], capture_output=True, text=True, timeout=10
        )
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    return out.stdout.strip() or "unknown"


def machine() -> dict[str, str]:
    """CPU model, core count, kernel, Python version, load average now, date (UTC), source revision."""
    cpu = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "cpu": cpu,
        "cores": str(os.cpu_count()),
        "gpu": "none",
        "kernel": platform.release(),
        "python": platform.python_version(),
        "source": source_revision(),
        "load_average_start": load_average(),
    }


def fmt(v: float | None, digits: int = 3) -> str:
    """A number for a table; ``-`` for None."""
    return "-" if v is None else f"{v:.{digits}f}"


#: The tokenizer the benchmarks render with when ``--tokenizer-dir`` is not given: Mistral-7B v0.1's
#: SentencePiece model (32000 pieces, the size of LLaMA-2's and of the benchmarks' synthetic engines), shipped
#: in the ``mistral-common`` PyPI package (``repo_builder.testing.PACKAGED_TOKENIZERS``).
DEFAULT_TOKENIZER = "mistral-v1"
TOKENIZER_HELP = "Hugging Face tokenizer directory (default: Mistral-7B v0.1's, from the mistral-common package)"


def tokenizer_dir_or_default(given: str | None, work: Path) -> str:
    """``given`` (``--tokenizer-dir``), or the packaged :data:`DEFAULT_TOKENIZER` written to ``work/tokenizer``.

    Raises:
        repo_builder.errors.RepoBuilderError: no ``--tokenizer-dir`` and ``mistral-common`` is not installed
            (the hint names the pip requirement).
    """
    if given:
        return given
    from repo_builder.testing import packaged_tokenizer

    return str(packaged_tokenizer(DEFAULT_TOKENIZER, work / "tokenizer"))
