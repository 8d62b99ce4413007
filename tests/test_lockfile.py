"""The lock file: format of docs/design.md, determinism, and validate's hash check."""

from __future__ import annotations

import json

import pytest
from conftest import asset

from repo_builder.engine import engine_fingerprint, inspect_engine
from repo_builder.render import render_repository
from repo_builder.repository.lockfile import LOCK_NAME, read_lock
from repo_builder.repository.validate import validate_repository

TOK = "sp_tiny_hf_tokenizer"


@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    import shutil

    from conftest import ENGINES

    base = tmp_path_factory.mktemp("lock")
    eng = base / "engine"
    shutil.copytree(ENGINES / "old-llama2-70b-tp2-int8wo", eng)
    for r in range(2):
        (eng / f"rank{r}.engine").write_bytes(b"")
    out = base / "repo"
    render_repository(eng, asset(TOK), out, engine_mode="symlink", user_values={"max_queue_size": "4"})
    return eng, out


def test_lock_format(rendered):
    eng, out = rendered
    lock = json.loads((out / LOCK_NAME).read_text())
    assert set(lock) == {
        "tool",
        "version",
        "profile",
        "engine",
        "tokenizer",
        "values",
        "launch",
        "serve_path",
        "files",
        "engine_files",
    }
    assert lock["engine_files"] == [
        "tensorrt_llm/1/config.json",
        "tensorrt_llm/1/rank0.engine",
        "tensorrt_llm/1/rank1.engine",
    ]
    assert lock["tool"] == "repo-builder" and lock["version"] == __import__("repo_builder").__version__
    assert lock["profile"] == "trtllm-1.2"
    assert lock["engine"]["dir"] == str(eng.resolve())
    assert lock["engine"]["kind"] == "trtllm" and lock["engine"]["placement"] == "symlink"
    assert lock["engine"]["fingerprint"] == engine_fingerprint(inspect_engine(eng))
    assert lock["tokenizer"] == {"dir": str(asset(TOK).resolve())}
    assert lock["launch"] == {
        "world_size": 2,
        "tensorrt_llm_model_names": ["tensorrt_llm"],
        "tp_size": 2,
        "pp_size": 1,
        "python_instances": {"postprocessing": 1, "preprocessing": 2, "tensorrt_llm_bls": 1},
    }
    assert lock["values"]["max_queue_size"] == {"value": 4, "origin": "user"}
    assert lock["values"]["triton_max_batch_size"] == {"value": 32, "origin": "engine"}
    assert lock["values"]["tokenizer_dir"]["origin"] == "tokenizer"
    assert lock["values"]["kv_cache_free_gpu_mem_fraction"]["origin"] == "default"
    assert {v["origin"] for v in lock["values"].values()} <= {"default", "engine", "tokenizer", "user"}
    from repo_builder.profile.schema import load_schema

    assert set(lock["values"]) == set(load_schema().for_profile("trtllm-1.2"))
    assert all(v.startswith("sha256:") for v in lock["files"].values())
    assert "tensorrt_llm/1/rank0.engine" not in lock["files"]


def test_same_inputs_give_the_same_lock_bytes(rendered, tmp_path):
    eng, out = rendered
    again = tmp_path / "again"
    render_repository(eng, asset(TOK), again, engine_mode="symlink", user_values={"max_queue_size": "4"})
    a = json.loads((out / LOCK_NAME).read_text())
    b = json.loads((again / LOCK_NAME).read_text())
    # paths inside differ (the repository's own path); everything else is identical
    a["values"]["engine_dir"] = b["values"]["engine_dir"] = None
    a["engine"]["engine_dir"] = b["engine"]["engine_dir"] = None
    a["files"]["tensorrt_llm/config.pbtxt"] = b["files"]["tensorrt_llm/config.pbtxt"] = None
    assert a == b


def test_validate_reports_each_changed_file(rendered, tmp_path):
    import shutil

    _, out = rendered
    repo = tmp_path / "copy"
    shutil.copytree(out, repo, symlinks=True)
    cfg = repo / "postprocessing" / "config.pbtxt"
    cfg.write_text(cfg.read_text().replace('"skip_special_tokens"', '"skip_special_tokens" ', 1))
    (repo / "preprocessing" / "1" / "model.py").write_text("# edited\n")
    (repo / "tensorrt_llm_bls" / "1" / "wiring.json").unlink()
    got = [str(p) for p in validate_repository(repo, served_at=out)]
    assert (
        "postprocessing/config.pbtxt: changed since it was rendered (sha256 differs from the lock file; "
        "re-render with `repo-builder render --force` or keep your edit knowingly)" in got
    )
    assert any(g.startswith("preprocessing/1/model.py: changed since it was rendered") for g in got)
    assert "tensorrt_llm_bls/1/wiring.json: listed in the lock file but missing" in got
    assert len(got) == 3
    # render's check of the files it has just written from the hashed bytes: presence only, nothing read back
    quick = [str(p) for p in validate_repository(repo, served_at=out, file_hashes=False)]
    assert quick == ["tensorrt_llm_bls/1/wiring.json: listed in the lock file but missing"]


def test_malformed_lock_is_reported(rendered, tmp_path):
    import shutil

    _, out = rendered
    repo = tmp_path / "copy"
    shutil.copytree(out, repo, symlinks=True)
    (repo / LOCK_NAME).write_text("{not json")
    got = [str(p) for p in validate_repository(repo, served_at=out)]
    assert len(got) == 1 and got[0].startswith(f"{LOCK_NAME}: unreadable lock file")


def test_read_lock_absent(tmp_path):
    assert read_lock(tmp_path) is None


def test_read_lock_gives_the_lock_file_every_consumer_reads(rendered):
    """read_lock returns a LockFile: its JSON object as read, ``llms`` always a list (one unnamed entry for a
    single-LLM repository) and ``models`` from the files' <model>/config.pbtxt."""
    eng, out = rendered
    lock = read_lock(out)
    assert lock is not None
    assert lock.data == json.loads((out / LOCK_NAME).read_text())
    assert lock.engine.dir == str(eng.resolve()) and lock.launch.world_size == 2
    assert lock.models == ("ensemble", "postprocessing", "preprocessing", "tensorrt_llm", "tensorrt_llm_bls")
    (llm,) = lock.llms
    assert llm.name is None and llm.engine == lock.data["engine"]
    assert llm.tokenizer == {"dir": str(asset(TOK).resolve())}
    assert llm.models == {m: m for m in lock.models}
    assert llm.resolved["max_queue_size"] == 4


@pytest.mark.parametrize(
    "launch, key",
    [
        (None, "launch"),
        ({"world_size": 0, "tensorrt_llm_model_names": ["tensorrt_llm"]}, "launch.world_size"),
        ({"world_size": 2, "tensorrt_llm_model_names": []}, "launch.tensorrt_llm_model_names"),
        ({"world_size": 4, "tensorrt_llm_model_names": ["t"], "tp_size": 2, "pp_size": 1}, "launch.world_size"),
        (
            {"world_size": 1, "tensorrt_llm_model_names": ["t"], "python_instances": {"p": -1}},
            "launch.python_instances",
        ),
    ],
)
def test_read_launch_names_the_bad_field(launch, key):
    from repo_builder.errors import RenderError
    from repo_builder.repository.lockfile import read_launch

    with pytest.raises(RenderError) as err:
        read_launch({"launch": launch} if launch is not None else {}, path="x/repo-builder.lock.json")
    assert err.value.key == key


def test_read_launch_of_an_old_lock_file_has_no_tp_pp():
    from repo_builder.repository.lockfile import read_launch

    facts = read_launch({"launch": {"world_size": 2, "tensorrt_llm_model_names": ["tensorrt_llm"]}})
    assert (facts.world_size, facts.tp_size, facts.pp_size, facts.python_instances) == (2, None, None, None)
