"""The lock file of the checkpoint layouts whisper and multimodal (repo_builder/render/whisper.py
``checkpoint_lock``): it is the project's ``repo-builder.lock.json``, so ``validate`` checks the file hashes,
``inspect`` shows the layout and its facts, ``launch`` takes world size and models from it, ``render --force``
replaces the repository (and refuses unlisted files and old repositories), and the OpenAI front end picks its
routes from its ``layout`` key, or from the file name these layouts wrote before."""

from __future__ import annotations

import json
import shutil

import pytest
from typer.testing import CliRunner

from repo_builder.cli import app
from repo_builder.errors import RenderError
from repo_builder.render import RenderOptions
from repo_builder.render.multimodal import render_multimodal_repository
from repo_builder.render.whisper import render_whisper_repository
from repo_builder.repository.lockfile import (
    LEGACY_LAYOUT_FILES,
    LOCK_NAME,
    read_launch,
    read_lock,
    repository_layout,
    unlisted_files,
)
from repo_builder.repository.validate import validate_repository

LAYOUTS = {
    "whisper": (render_whisper_repository, "tiny_whisper", ["tensorrt_llm", "whisper_bls"]),
    "multimodal": (render_multimodal_repository, "tiny_llava", ["tensorrt_llm", "multimodal_encoders"]),
}


@pytest.fixture(params=sorted(LAYOUTS))
def rendered(request, tmp_path):
    render, fixture, names = LAYOUTS[request.param]
    checkpoint = request.getfixturevalue(fixture)
    out = tmp_path / "repo"
    render(checkpoint, out)
    return request.param, render, checkpoint, out, names


def test_the_lock_file_is_the_projects_and_lists_every_file(rendered):
    layout, _, checkpoint, out, names = rendered
    lock = read_lock(out)  # the strict reader: LockFile checks every known key
    assert lock is not None and not any((out / n).exists() for n in LEGACY_LAYOUT_FILES)
    assert lock.data["layout"] == layout and repository_layout(out) == layout
    assert (lock.engine.dir, lock.engine.kind, lock.engine.placement) == (str(checkpoint), "hf", "copy")
    launch = read_launch(lock)
    assert (launch.world_size, launch.tensorrt_llm_model_names, launch.tp_size) == (1, names, 1)
    assert launch.python_instances is not None and set(launch.python_instances) == set(lock.models) - {"ensemble"}
    assert "tensorrt_llm/1/engine/model.safetensors" in (lock.engine_files or [])
    assert unlisted_files(out, lock) == []  # every file is rendered, an engine file, or the lock file
    assert all(entry.origin in ("default", "checkpoint", "user") for entry in lock.values.values())


def test_validate_reports_an_edited_and_a_missing_file(rendered):
    _, _, _, out, _ = rendered
    assert validate_repository(out) == []
    config = sorted(p for p in read_lock(out).files if p.endswith("/config.pbtxt"))[0]  # type: ignore[union-attr]
    (out / config).write_text((out / config).read_text() + "# edited\n")
    model_py = next(p for p in read_lock(out).files if p.endswith("/1/model.py"))  # type: ignore[union-attr]
    (out / model_py).unlink()
    found = {(p.file, "changed" in p.message or "missing" in p.message) for p in validate_repository(out)}
    assert {(config, True), (model_py, True)} <= found


def test_render_force_replaces_it_and_refuses_unlisted_files(rendered):
    layout, render, checkpoint, out, _ = rendered
    with pytest.raises(RenderError, match="already exists") as err:
        render(checkpoint, out)
    assert err.value.key == "--output"
    stale = out / "tensorrt_llm" / "config.pbtxt"
    stale.write_text("edited")
    result = render(checkpoint, out, RenderOptions(force=True))
    assert result.existed and validate_repository(out) == [] and stale.read_text() != "edited"
    (out / "notes.txt").write_text("mine")
    with pytest.raises(RenderError, match="notes.txt") as unlisted:
        render(checkpoint, out, RenderOptions(force=True))
    assert unlisted.value.key == "--output" and (out / "notes.txt").read_text() == "mine"
    render(checkpoint, out, RenderOptions(force=True, delete_unlisted=True))
    assert not (out / "notes.txt").exists() and read_lock(out) is not None
    assert not list(out.parent.glob(".repo.*")), "no temp or old folder is left beside the repository"


def test_a_repository_of_the_old_file_name_keeps_its_front_end_and_is_not_replaced(rendered):
    layout, render, checkpoint, out, _ = rendered
    lock = json.loads((out / LOCK_NAME).read_text())
    (out / LOCK_NAME).unlink()
    legacy = next(name for name, lay in LEGACY_LAYOUT_FILES.items() if lay == layout)
    (out / legacy).write_text(json.dumps({"repo_builder_layout": layout, "values": lock["values"]}))
    assert repository_layout(out) == layout and read_lock(out) is None
    with pytest.raises(RenderError, match=f"older repo-builder.*{legacy}") as err:
        render(checkpoint, out, RenderOptions(force=True))
    assert err.value.key == "--output" and (out / legacy).is_file()


def test_inspect_and_launch_read_it(rendered):
    layout, _, _, out, names = rendered
    runner = CliRunner()
    shown = runner.invoke(app, ["inspect", str(out)])
    assert shown.exit_code == 0, shown.output
    assert f"layout {layout}" in shown.output and "facts of the" in shown.output and "engine:" not in shown.output
    as_json = json.loads(runner.invoke(app, ["inspect", str(out), "--json"]).output)
    assert as_json["lock"]["layout"] == layout and "engine_error" not in as_json
    dry = runner.invoke(app, ["launch", str(out), "--dry-run"])
    assert dry.exit_code == 0, dry.output
    assert "-n 1 " in dry.output and "problem" not in dry.output
    two = runner.invoke(app, ["launch", str(out), "--dry-run", "--world_size", "2"])
    assert two.exit_code != 0 and "launch.world_size" in two.output and "Traceback" not in two.output


def test_the_cli_replaces_with_force(tiny_llava, tmp_path):
    out = tmp_path / "cli"
    args = ["render", "--layout", "multimodal", "--engine-dir", str(tiny_llava), "-o", str(out)]
    assert CliRunner().invoke(app, args).exit_code == 0
    again = CliRunner().invoke(app, [*args, "--force"])
    assert again.exit_code == 0, again.output
    assert again.output.startswith("replaced ")
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    same = CliRunner().invoke(app, ["diff", str(out), str(copy)])
    assert same.exit_code == 0 and "0 change(s)" in same.output
