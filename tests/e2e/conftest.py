"""Shared fixtures of the end-to-end serving tests: render a repository with repo_builder.render and serve
it with repo_builder.server on fresh ports. Generic on purpose: any engine dir + tokenizer dir + values.

Usage::

    def test_x(render_repo, serve):
        repo = render_repo(engine_dir, tokenizer_dir, streaming=True, values={"triton_max_batch_size": 4})
        with serve(repo) as server:        # a ready repo_builder.server.TritonServer
            ...server.http_hostport / server.grpc_url...

Module-scoped variants (``render_repo_module``, ``serve_module``) let one server serve a whole test module.
Test modules here get ``free_ports``/``asset`` from this file (``from conftest import`` resolves to it).
"""

from __future__ import annotations

import contextlib
import importlib.util
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest


def _root_conftest() -> Any:
    # tests/conftest.py by path: inside tests/e2e the module name "conftest" means this file.
    spec = importlib.util.spec_from_file_location("_repo_builder_tests_root", Path(__file__).parents[1] / "conftest.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


ROOT = _root_conftest()
free_ports = ROOT.free_ports
wait_for = ROOT.wait_for
asset = ROOT.asset
# pytest imports this file as module "conftest" too (no __init__.py) and it stays in sys.modules, so
# `from conftest import ...` in tests/*.py collected after tests/e2e resolves here: re-export the root
# conftest's plain names (not its fixtures, which pytest would register twice).
PROJECT, ASSETS, ENGINES, REPOS = ROOT.PROJECT, ROOT.ASSETS, ROOT.ENGINES, ROOT.REPOS
HF_TOKENIZERS = ROOT.HF_TOKENIZERS


def _renderer(base: Callable[[], Path]) -> Callable[..., Path]:
    def render(
        engine_dir: str | Path,
        tokenizer_dir: str | Path,
        *,
        profile: str = "trtllm-1.2",
        streaming: bool | None = True,
        values: dict[str, Any] | None = None,
        name: str = "repo",
    ) -> Path:
        from repo_builder.render import render_repository

        out = base() / name
        render_repository(
            engine_dir, tokenizer_dir, out, profile=profile, user_values=values or {}, streaming=streaming
        )
        return out

    return render


@contextlib.contextmanager
def _serve(repo: Path, timeout: float = 300.0, **options: Any) -> Iterator[Any]:
    """``options``: more LaunchConfig fields (e.g. ``histogram_latencies=True``)."""
    from repo_builder.server import LaunchConfig, TritonServer

    http, grpc, metrics = free_ports(3)
    config = LaunchConfig(
        model_repo=repo, http_port=http, grpc_port=grpc, metrics_port=metrics, no_mpi=True, timeout=timeout, **options
    )
    server = TritonServer(config)
    try:
        with server:
            yield server
    except Exception:
        print(server.log_tail(80))
        raise


@pytest.fixture
def render_repo(tmp_path) -> Callable[..., Path]:
    """``render_repo(engine_dir, tokenizer_dir, profile=, streaming=, values=, name=) -> Path``."""
    return _renderer(lambda: tmp_path)


@pytest.fixture(scope="module")
def render_repo_module(tmp_path_factory) -> Callable[..., Path]:
    """Module-scoped :func:`render_repo`."""
    return _renderer(lambda: tmp_path_factory.mktemp("repo"))


@pytest.fixture
def serve() -> Callable[..., contextlib.AbstractContextManager[Any]]:
    """``with serve(repo) as server:`` a ready ``repo_builder.server.TritonServer`` on free ports; stopped after."""
    return _serve


@pytest.fixture(scope="module")
def serve_module() -> Callable[..., contextlib.AbstractContextManager[Any]]:
    """Module-scoped :func:`serve`."""
    return _serve


@pytest.fixture(scope="module")
def served_openai(server, tmp_path_factory) -> Iterator[str]:
    """Base URL of ``repo-builder openai`` (no options) in front of the module's ``server`` fixture (a running
    ``TritonServer`` of :func:`serve_module`), on the repository it serves; its log in a fresh folder."""
    from e2e_support import openai_front_end

    logs = tmp_path_factory.mktemp("front")
    with openai_front_end(server.config.model_repo, server.grpc_url, log_dir=logs) as base:
        yield base
