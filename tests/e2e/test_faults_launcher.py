"""Faults injected into a real foreground launch (``python -m repo_builder launch``), with real signals.

The repository holds the synthetic engine (20 ms per token, so a 1,500-token stream runs for 30 s) behind
the real preprocessing/postprocessing models and the packaged Mistral v1 tokenizer. Each test starts the
launcher as a subprocess on fresh loopback ports, opens a gRPC stream, injects one fault and checks
the exit code, what the launcher printed, what the stream got, and that no process and no ``/dev/shm``
region of the launch is left. Every wait is bounded; no test asserts a duration.

* SIGINT / SIGTERM with a stream in flight: exit 130 / 143 (128 + the signal), the stream ends with an
  error instead of running on, everything is gone (issue 13 item 14).
* SIGTERM while a model is still loading: exit 143, nothing left (item 14).
* ``kill -9`` of the engine's Python stub: the launcher names the model, stops the server with exit code
  ``MODEL_DIED_EXIT``, and the in-flight stream gets an error (item 15).
"""

from __future__ import annotations

import json
import os
import queue
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest
from cli_support import cli_argv
from conftest import PROJECT, free_ports, wait_for
from e2e_support import grpc_input

from repo_builder.server import procs
from repo_builder.server.preflight import servers_on_repository
from repo_builder.server.run import MODEL_DIED_EXIT

pytestmark = pytest.mark.server

grpcclient = pytest.importorskip("tritonclient.grpc")

LONG = 1500  # tokens of the stream in flight: 30 s at 20 ms per token, far longer than any stop here
FIXTURES = PROJECT / "tests" / "fixtures" / "launcher"
PREFIX_ARG = "--backend-config=python,shm-region-prefix-name="


@pytest.fixture(scope="module")
def repo(tmp_path_factory, render_repo_module) -> Path:
    from repo_builder.testing import packaged_tokenizer

    base = tmp_path_factory.mktemp("faults")
    tok = packaged_tokenizer("mistral-v1", base / "tokenizer")
    engine = base / "engine"
    engine.mkdir()
    (engine / "synthetic_engine.json").write_text(
        json.dumps({"vocab_size": 32000, "max_batch_size": 4, "max_input_len": 64, "max_seq_len": 4096})
    )
    return render_repo_module(engine, tok, streaming=True, values={"synthetic_token_delay_ms": 20}, name="faults")


class Launch:
    """``python -m repo_builder launch REPO --no-mpi -q`` on fresh ports; output in ``out``."""

    def __init__(self, repo: Path, tmp: Path, *extra: str) -> None:
        self.repo = repo
        self.http, self.grpc, self.metrics = free_ports(3)
        self.out = tmp / "launch.out"
        self.log = tmp / "ts.log"
        with open(self.out, "wb") as fh:
            self.proc = subprocess.Popen(
                cli_argv(
                    "launch",
                    str(repo),
                    "--no-mpi",
                    "-q",
                    "--log-file",
                    str(self.log),
                    "--http_port",
                    str(self.http),
                    "--grpc_port",
                    str(self.grpc),
                    "--metrics_port",
                    str(self.metrics),
                    *extra,
                ),
                stdout=fh,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )

    def text(self) -> str:
        return self.out.read_text()

    def wait_ready(self) -> None:
        wait_for(lambda: "ready in" in self.text() or self.proc.poll() is not None, 240, "the launcher to be ready")
        assert self.proc.poll() is None, self.text()

    def prefixes(self) -> list[str]:
        return [
            a[len(PREFIX_ARG) :]
            for pid in servers_on_repository(self.repo)
            for a in procs.cmdline(pid)
            if a.startswith(PREFIX_ARG)
        ]

    def wait(self, timeout: float = 120) -> int:
        try:
            return self.proc.wait(timeout=timeout)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=30)


def assert_all_gone(repo: Path, prefixes: list[str]) -> None:
    wait_for(lambda: not servers_on_repository(repo), 30, "tritonserver to exit")
    assert prefixes, "the launch's shm prefixes were never seen"
    for prefix in prefixes:
        assert procs.shm_files(prefix) == [], f"/dev/shm regions of {prefix} left behind"
    left = [pid for pid in procs.all_pids() if any(p in a for p in prefixes for a in procs.cmdline(pid))]
    assert left == [], f"processes of this launch left: {left}"


class LongStream:
    """One gRPC stream with a ``LONG``-token ensemble request in flight."""

    def __init__(self, launch: Launch, model: str = "ensemble") -> None:
        self.events: queue.Queue[tuple[object, object]] = queue.Queue()
        self.client = grpcclient.InferenceServerClient(f"127.0.0.1:{launch.grpc}")
        self.client.start_stream(callback=lambda result, error: self.events.put((result, error)))
        inputs = [
            grpc_input("text_input", np.array([[b"Tell me a long story"]], dtype=object)),
            grpc_input("max_tokens", np.array([[LONG]], np.int32)),
            grpc_input("stream", np.array([[True]], bool)),
        ]
        self.client.async_stream_infer(model, inputs, request_id="long-1", enable_empty_final_response=True)
        result, error = self.events.get(timeout=120)  # the first token: the request is in flight
        assert error is None, error
        self.responses = 1

    def outcome(self, timeout: float = 90) -> str:
        """``"error: ..."``, ``"final"`` (all tokens), or ``"hung"`` when nothing ended it within ``timeout``."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                result, error = self.events.get(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                break
            if error is not None:
                return f"error: {error}"
            self.responses += 1
            if result.get_response().parameters["triton_final_response"].bool_param:
                return "final"
        return "hung"

    def close(self) -> None:
        try:
            self.client.stop_stream(cancel_requests=True)
        except Exception:  # noqa: BLE001 - the server is gone
            pass
        self.client.close()


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_signal_with_a_stream_in_flight(repo, tmp_path, sig):
    # --stop-timeout 600: only the exit timeout (5 s) may end the stop within the test's bounded waits
    launch = Launch(repo, tmp_path, "--stop-timeout", "600")
    stream = None
    try:
        launch.wait_ready()
        prefixes = launch.prefixes()
        stream = LongStream(launch)
        launch.proc.send_signal(sig)
        code = launch.wait()
        outcome = stream.outcome()
    finally:
        if stream is not None:
            stream.close()
        launch.kill()
    assert code == 128 + sig, launch.text()
    assert f"signal {int(sig)}: stopping tritonserver" in launch.text()
    assert "in-flight requests did not finish within --exit-timeout 5 s" in launch.text()
    # the stream was cut by the stop (exit timeout), it neither ran to its end nor hung
    assert outcome.startswith("error"), outcome
    assert stream.responses < LONG
    assert_all_gone(repo, prefixes)


def test_stop_with_an_ensemble_request_whose_client_left(repo, tmp_path):
    """Issue 28: the client of a 1,500-token ensemble stream goes away (cancels its gRPC stream). Triton 2.51
    does not pass that on to the engine step (tests/e2e/test_cancel.py pins it), so the engine generates on
    and tritonserver counts the ensemble request in flight: the stop must still end within --exit-timeout
    (then tritonserver is killed and says so), exit 143, and leave no process, /dev/shm region or stream
    ledger behind (the killed server's models could not remove theirs)."""
    from repo_builder.runtime.stream_ledger import stale_ledgers

    launch = Launch(repo, tmp_path, "--stop-timeout", "600")
    try:
        launch.wait_ready()
        prefixes = launch.prefixes()
        servers = servers_on_repository(repo)
        stream = LongStream(launch)
        stream.close()  # the client leaves; the engine does not hear of it
        time.sleep(0.5)
        assert stale_ledgers(servers[0]), "the ensemble's stream ledger should exist while the server runs"
        launch.proc.send_signal(signal.SIGTERM)
        code = launch.wait()
    finally:
        launch.kill()
    assert code == 128 + signal.SIGTERM, launch.text()
    assert "in-flight requests did not finish within --exit-timeout 5 s" in launch.text()
    assert_all_gone(repo, prefixes)
    assert [p for pid in servers for p in stale_ledgers(pid)] == []


def test_sigterm_while_a_model_loads(tmp_path):
    repo = tmp_path / "slow_load"
    shutil.copytree(FIXTURES / "slow_load", repo)
    launch = Launch(repo, tmp_path)
    try:
        # the model's stub runs initialize() (a 10-minute sleep): the server is loading
        stub = wait_for(
            lambda: [
                p
                for p in procs.all_pids()
                if str(repo / "slow") in " ".join(procs.cmdline(p)) and procs.comm(p).startswith("triton_python")
            ],
            120,
            "the model to start loading",
        )
        prefixes = launch.prefixes()
        launch.proc.send_signal(signal.SIGTERM)
        code = launch.wait()
    finally:
        launch.kill()
    assert stub
    assert code == 128 + signal.SIGTERM, launch.text()
    assert "interrupted by signal 15 before the server was ready" in launch.text()
    assert_all_gone(repo, prefixes)


def test_stop_with_nothing_in_flight_waits_for_a_slow_unload(tmp_path):
    """Nothing in flight, a model whose finalize() takes 8 s (> --exit-timeout 5 s): tritonserver 2.51 counts
    unloads against the exit timeout, so this stop used to end as a kill reported as requests that did not
    finish. The unload phase now has its own bound: the server stops by itself and the stop says so."""
    repo = tmp_path / "slow_unload"
    shutil.copytree(FIXTURES / "slow_unload", repo)
    launch = Launch(repo, tmp_path, "--stop-timeout", "600")
    try:
        launch.wait_ready()
        prefixes = launch.prefixes()
        launch.proc.send_signal(signal.SIGTERM)
        code = launch.wait()
    finally:
        launch.kill()
    text = launch.text()
    assert code == 128 + signal.SIGTERM, text
    assert "did not finish within --exit-timeout" not in text and "killed" not in text, text
    waited = re.search(r"stop: waited ([\d.]+) s for in-flight requests, ([\d.]+) s for models to unload", text)
    assert waited is not None, text
    assert float(waited.group(1)) < 5 and float(waited.group(2)) >= 7, text
    assert_all_gone(repo, prefixes)


def test_killed_model_process_stops_the_launch(repo, tmp_path):
    launch = Launch(repo, tmp_path, "--stop-timeout", "600")
    stream = None
    try:
        launch.wait_ready()
        prefixes = launch.prefixes()
        (rank0,) = servers_on_repository(repo)
        stubs = {
            procs.cmdline(info.pid)[1]: info.pid
            for info in procs.children(rank0)
            if procs.comm(info.pid).startswith("triton_python")
        }
        engine_stub = stubs[str(repo / "tensorrt_llm" / "1" / "model.py")]
        stream = LongStream(launch)
        os.kill(engine_stub, signal.SIGKILL)
        code = launch.wait()
        outcome = stream.outcome()
    finally:
        if stream is not None:
            stream.close()
        launch.kill()
    text = launch.text()
    assert code == MODEL_DIED_EXIT, text
    assert f"model 'tensorrt_llm': its Python backend process (pid {engine_stub}) died" in text
    assert outcome.startswith("error"), outcome  # the stream is failed by the stop, not left to the client timeout
    assert_all_gone(repo, prefixes)
