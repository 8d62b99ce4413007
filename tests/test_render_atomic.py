"""Atomic write and dry run: a failure mid-render leaves nothing; --force swaps only after success."""

from __future__ import annotations

import os

import pytest
from conftest import asset
from test_render_errors import snapshot

from repo_builder.errors import RenderError
from repo_builder.render import render_repository
from repo_builder.repository.lockfile import LOCK_NAME

TOK = "mistral_v1_tokenizer"


@pytest.fixture
def engine(engine_copy):
    return engine_copy("v0.8-mistral-7b-dolphin")


@pytest.fixture
def work(tmp_path):
    d = tmp_path / "work"
    d.mkdir()
    return d


def _failing_place(monkeypatch):
    """Placement that writes one engine file and then fails, as a full disk would (in the copy thread)."""
    import repo_builder.placement as placement_mod

    def place(plan, root, **kwargs):
        first = plan.files[0]
        target = root / first.target
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(b"partial")
        raise RenderError("simulated failure while placing engine files", path=first.source)

    monkeypatch.setattr(placement_mod, "place", place)


def test_failure_mid_render_leaves_no_repository_and_no_temp_dir(work, engine, monkeypatch):
    _failing_place(monkeypatch)
    with pytest.raises(RenderError, match="simulated failure"):
        render_repository(engine, asset(TOK), work / "repo")
    assert list(work.iterdir()) == []


def test_failure_creating_nested_output_removes_the_parents_it_made(work, engine, monkeypatch):
    _failing_place(monkeypatch)
    with pytest.raises(RenderError):
        render_repository(engine, asset(TOK), work / "a" / "b" / "repo")
    assert list(work.iterdir()) == []


def test_failed_forced_render_keeps_the_old_repository(work, engine, monkeypatch):
    out = work / "repo"
    render_repository(engine, asset(TOK), out)
    before = snapshot(work)
    _failing_place(monkeypatch)
    with pytest.raises(RenderError):
        render_repository(engine, asset(TOK), out, force=True, user_values={"max_queue_size": "9"})
    assert snapshot(work) == before


def test_interrupt_mid_render_cleans_up(work, engine, monkeypatch):
    import repo_builder.placement as placement_mod

    def place(plan, root, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(placement_mod, "place", place)
    with pytest.raises(KeyboardInterrupt):
        render_repository(engine, asset(TOK), work / "repo")
    assert list(work.iterdir()) == []


def test_failed_validation_of_the_temp_dir_writes_nothing(work, engine, monkeypatch):
    import repo_builder.repository.validate as validate_mod
    from repo_builder.repository.validate import Problem

    monkeypatch.setattr(
        validate_mod,
        "validate_repository",
        lambda *a, **k: [Problem("tensorrt_llm/config.pbtxt", "simulated problem", 3)],
    )
    with pytest.raises(RenderError, match="tensorrt_llm/config.pbtxt:3: simulated problem"):
        render_repository(engine, asset(TOK), work / "repo")
    assert list(work.iterdir()) == []


def test_rename_failure_with_force_restores_the_old_repository(work, engine, monkeypatch):
    out = work / "repo"
    render_repository(engine, asset(TOK), out)
    before = snapshot(work)
    real_rename = os.rename

    def rename(src, dst):
        if "repo-builder-tmp" in str(src):
            raise OSError(28, "No space left on device")
        return real_rename(src, dst)

    monkeypatch.setattr(os, "rename", rename)
    with pytest.raises(RenderError, match="No space left"):
        render_repository(engine, asset(TOK), out, force=True, user_values={"max_queue_size": "9"})
    assert snapshot(work) == before


def test_force_replaces_a_rendered_repository(work, engine):
    out = work / "repo"
    render_repository(engine, asset(TOK), out)
    (out / "stray.txt").write_text("old")
    result = render_repository(
        engine, asset(TOK), out, force=True, user_values={"max_queue_size": "9"}, delete_unlisted=True
    )
    assert result.written and result.existed
    assert not (out / "stray.txt").exists()
    assert '"max_queue_size"' in (out / LOCK_NAME).read_text()
    assert "max_queue_size: 9" in (out / "tensorrt_llm" / "config.pbtxt").read_text()
    assert sorted(p.name for p in work.iterdir()) == ["repo"]  # old copy removed, no temp dirs


def test_dry_run_writes_nothing(work, engine):
    result = render_repository(engine, asset(TOK), work / "repo", dry_run=True)
    assert not result.written and result.diff == "" and not result.existed
    assert list(work.iterdir()) == []
    assert "tensorrt_llm/config.pbtxt" in result.plan.files and LOCK_NAME in result.plan.files
    assert [f.target for f in result.plan.placement.files] == [
        "tensorrt_llm/1/config.json",
        "tensorrt_llm/1/rank0.engine",
    ]


def test_dry_run_shows_a_diff_against_the_existing_repository(work, engine):
    out = work / "repo"
    render_repository(engine, asset(TOK), out)
    before = snapshot(work)
    same = render_repository(engine, asset(TOK), out, dry_run=True)
    assert same.diff == ""  # rendering is deterministic
    changed = render_repository(engine, asset(TOK), out, dry_run=True, user_values={"max_queue_size": "9"})
    assert snapshot(work) == before
    assert "--- a/tensorrt_llm/config.pbtxt\n+++ b/tensorrt_llm/config.pbtxt" in changed.diff
    assert "-  default_queue_policy: { max_queue_size: 0 }" in changed.diff
    assert "+  default_queue_policy: { max_queue_size: 9 }" in changed.diff
    assert "--- a/repo-builder.lock.json" in changed.diff


def test_dry_run_diff_lists_removed_files(work, engine):
    out = work / "repo"
    render_repository(engine, asset(TOK), out)
    (out / "extra.txt").write_text("hand-made\n")
    result = render_repository(engine, asset(TOK), out, dry_run=True)
    assert "--- a/extra.txt\n+++ /dev/null" in result.diff


def _placing_threads() -> list[str]:
    import threading

    return [t.name for t in threading.enumerate() if t.name == "repo-builder-placement"]


def test_engine_copy_runs_while_the_tokenizer_is_inspected(work, engine, monkeypatch):
    """The engine files are placed from a thread that starts before the slow part of the plan."""
    import threading

    import repo_builder.placement as placement_mod
    import repo_builder.tokenizer as tokenizer_mod

    started = threading.Event()
    real_place, real_inspect = placement_mod.place, tokenizer_mod.inspect_tokenizer

    def place(plan, root, **kwargs):
        assert threading.current_thread() is not threading.main_thread()
        started.set()
        return real_place(plan, root, **kwargs)

    def inspect_tokenizer(*args, **kwargs):
        assert started.wait(60), "the engine copy had not started when the tokenizer was inspected"
        return real_inspect(*args, **kwargs)

    monkeypatch.setattr(placement_mod, "place", place)
    monkeypatch.setattr(tokenizer_mod, "inspect_tokenizer", inspect_tokenizer)
    result = render_repository(engine, asset(TOK), work / "repo")
    assert result.written
    placed = work / "repo" / "tensorrt_llm" / "1" / "rank0.engine"
    assert placed.read_bytes() == (engine / "rank0.engine").read_bytes()
    assert _placing_threads() == []


def test_a_bad_value_found_while_copying_stops_the_copy_and_leaves_nothing(work, engine, monkeypatch):
    """resolve's cross-check fails in the main thread while the copy runs: the copy is cancelled (its thread
    ends), the temp dir is removed."""
    import threading

    import repo_builder.placement as placement_mod
    from repo_builder.errors import EngineError

    placing = threading.Event()
    stopped = []

    def place(plan, root, *, stop, **kwargs):
        first = plan.files[0]
        (root / first.target).parent.mkdir(parents=True, exist_ok=True)
        (root / first.target).write_bytes(b"partial")
        placing.set()
        stopped.append(stop.wait(60))  # a copy that only ends when cancelled
        raise placement_mod.PlacementCancelled("cancelled")

    monkeypatch.setattr(placement_mod, "place", place)
    with pytest.raises(EngineError, match="max_beam_width"):
        render_repository(engine, asset(TOK), work / "a" / "repo", user_values={"max_beam_width": "8"})
    assert placing.is_set() and stopped == [True]
    assert list(work.iterdir()) == []
    assert _placing_threads() == []
