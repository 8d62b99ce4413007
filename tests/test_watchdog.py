"""The BLS deadlock watchdog (repo_builder/runtime/watchdog.py) in real subprocesses: a process where no
Python thread can run (a C call that keeps the GIL, as the python_backend deadlock does) exits with code 1
and every thread's traceback; a busy or idle but healthy process keeps running; stop() disarms it."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from repo_builder.runtime.watchdog import StubWatchdog


def run(body: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    code = "from repo_builder.runtime.watchdog import StubWatchdog\n" + textwrap.dedent(body)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout)


def test_a_process_where_python_cannot_run_exits_with_its_tracebacks() -> None:
    out = run(
        """
        import ctypes
        StubWatchdog(1.0).start()
        def stuck_holding_the_gil():
            ctypes.PyDLL(None).sleep(30)  # libc sleep() called WITH the GIL held: no Python thread can run
        stuck_holding_the_gil()
        print("not reached")
        """
    )
    assert out.returncode == 1, out
    assert "not reached" not in out.stdout
    assert "Timeout" in out.stderr and "stuck_holding_the_gil" in out.stderr  # the frame that held it


def test_a_healthy_process_is_left_alone_and_stop_disarms() -> None:
    out = run(
        """
        import time
        dog = StubWatchdog(0.5).start()
        end = time.monotonic() + 2.0
        n = 0
        while time.monotonic() < end:  # busy Python: the heartbeat still gets the GIL
            n += 1
        time.sleep(1.5)  # idle
        dog.stop()
        time.sleep(1.0)  # disarmed: nothing fires after stop()
        print("alive")
        """
    )
    assert out.returncode == 0 and out.stdout.strip() == "alive", out


def test_timeout_must_be_positive() -> None:
    with pytest.raises(ValueError, match="> 0"):
        StubWatchdog(0)


def test_a_negative_timeout_in_the_config_fails_naming_the_parameter() -> None:
    """What the BLS reads (``params.int(..., minimum=0)``): a hand-edited negative value is refused by name."""
    from repo_builder.runtime.params import ModelParams, ParameterValueError

    params = ModelParams({"name": "tensorrt_llm_bls", "parameters": {"bls_deadlock_timeout_s": {"string_value": "-5"}}})
    with pytest.raises(ParameterValueError, match="'bls_deadlock_timeout_s' = -5 must be >= 0"):
        params.int("bls_deadlock_timeout_s", 60, minimum=0)
    assert ModelParams({"name": "m"}).int("bls_deadlock_timeout_s", 60, minimum=0) == 60
