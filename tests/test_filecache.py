"""The on-disk cache of derived bytes (repo_builder.filecache) and its two users: YAML loading
(profile/yamlio.py) and config.pbtxt parsing (repository/pbtxt.py).

Every test points ``XDG_CACHE_HOME`` at its own temporary folder and reads real files from disk; the cache is
keyed by the text read, so an edited file (new size, or the same size with the old modification time put
back) must give the new data, and a damaged or unwritable cache must never change a result.
"""

from __future__ import annotations

import datetime
import os
from pathlib import Path

import pytest
import yaml

from repo_builder import filecache
from repo_builder.profile import yamlio
from repo_builder.repository import pbtxt
from repo_builder.repository.pbtxt import PbtxtParseError, load_model_config, parse_model_config


@pytest.fixture
def cache_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "cache-home"
    monkeypatch.setenv("XDG_CACHE_HOME", str(home))
    monkeypatch.delenv("REPO_BUILDER_NO_CACHE", raising=False)
    pbtxt._parsed_bytes.cache_clear()  # the per-process layer in front of the disk
    yield home
    pbtxt._parsed_bytes.cache_clear()


def _entries(home: Path, kind: str) -> list[Path]:
    folder = home / "repo-builder" / kind
    return sorted(p for p in folder.iterdir() if not p.name.startswith(".")) if folder.is_dir() else []


class _Counter:
    def __init__(self, result: bytes | None) -> None:
        self.calls, self.result = 0, result

    def __call__(self) -> bytes | None:
        self.calls += 1
        return self.result


def test_key_of_length_prefixes_its_parts() -> None:
    assert filecache.key_of("ab", "c") != filecache.key_of("a", "bc")
    assert filecache.key_of("x", b"y") == filecache.key_of(b"x", "y")
    assert len(filecache.key_of("x")) == 64


def test_second_lookup_reads_the_stored_entry(cache_home: Path) -> None:
    compute = _Counter(b"derived")
    key = filecache.key_of("some input")
    assert filecache.cached_bytes("k", key, compute) == b"derived"
    assert filecache.cached_bytes("k", key, compute) == b"derived"
    assert compute.calls == 1
    assert [p.name for p in _entries(cache_home, "k")] == [key]
    assert (cache_home / "repo-builder" / "k" / key).read_bytes() == b"derived"


def test_none_is_not_stored_and_errors_propagate(cache_home: Path) -> None:
    compute = _Counter(None)
    assert filecache.cached_bytes("k", "a" * 64, compute) is None
    assert filecache.cached_bytes("k", "a" * 64, compute) is None
    assert compute.calls == 2

    def fails() -> bytes:
        raise KeyError("boom")

    with pytest.raises(KeyError):
        filecache.cached_bytes("k", "b" * 64, fails)
    assert _entries(cache_home, "k") == []


def test_switched_off_by_environment(cache_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REPO_BUILDER_NO_CACHE", "1")
    compute = _Counter(b"x")
    filecache.cached_bytes("k", "c" * 64, compute)
    filecache.cached_bytes("k", "c" * 64, compute)
    assert compute.calls == 2
    assert not (cache_home / "repo-builder").exists()
    monkeypatch.setenv("REPO_BUILDER_NO_CACHE", "0")  # "0" means on
    assert filecache.cache_dir("k") == cache_home / "repo-builder" / "k"


def test_uncreatable_cache_folder_computes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))  # mkdir under a regular file fails even for root
    compute = _Counter(b"x")
    assert filecache.cache_dir("k") is None
    assert filecache.cached_bytes("k", "d" * 64, compute) == b"x"
    assert filecache.cached_bytes("k", "d" * 64, compute) == b"x"
    assert compute.calls == 2


def test_oldest_half_dropped_past_max_entries(cache_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(filecache, "MAX_ENTRIES", 4)
    keys = [filecache.key_of(str(i)) for i in range(4)]
    for age, key in enumerate(keys):
        filecache.cached_bytes("k", key, lambda: b"v")
        os.utime(cache_home / "repo-builder" / "k" / key, (1_000_000 + age, 1_000_000 + age))
    assert len(_entries(cache_home, "k")) == 4  # at the limit: nothing dropped
    newest = filecache.key_of("new")
    filecache.cached_bytes("k", newest, lambda: b"v")  # 5 > 4: the oldest two go
    assert {p.name for p in _entries(cache_home, "k")} == {keys[2], keys[3], newest}


# --- yamlio: a file edited between two loads ------------------------------------------------------------


def _yaml_text(value: int, width: int = 6) -> str:
    body = "".join(f"key_{i:04d}: {{default: {i}, help: some text to make it long}}\n" for i in range(120))
    return f"marker: {value:0{width}d}\n" + body


def _count_yaml_parses(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    real = yaml.load

    def counting(*args: object, **kwargs: object) -> object:
        calls.append(1)
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(yamlio.yaml, "load", counting)
    return calls


def test_yaml_file_edits_are_seen(cache_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _count_yaml_parses(monkeypatch)
    path = tmp_path / "parameters.yaml"
    path.write_text(_yaml_text(1))
    assert len(path.read_text()) >= yamlio._CACHE_MIN_CHARS  # long enough to be cached
    first = yamlio.safe_load(path.read_text())
    assert first["marker"] == 1 and calls == [1]
    assert yamlio.safe_load(path.read_text()) == first and calls == [1]  # a hit: not parsed again
    assert len(_entries(cache_home, "yaml")) == 1

    # size changes
    path.write_text(_yaml_text(2, width=8))
    assert yamlio.safe_load(path.read_text())["marker"] == 2 and calls == [1, 1]

    # same size, old modification time put back: still the new text's data
    stat = path.stat()
    path.write_text(_yaml_text(3, width=8))
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert path.stat().st_size == stat.st_size and path.stat().st_mtime_ns == stat.st_mtime_ns
    assert yamlio.safe_load(path.read_text())["marker"] == 3 and calls == [1, 1, 1]

    # back to the first text: its entry is still there
    path.write_text(_yaml_text(1))
    assert yamlio.safe_load(path.read_text()) == first and calls == [1, 1, 1]


def test_yaml_damaged_entry_parses_again(cache_home: Path) -> None:
    text = _yaml_text(7)
    expected = yamlio.safe_load(text)
    (entry,) = _entries(cache_home, "yaml")
    entry.write_bytes(b"\x00garbage")
    assert yamlio.safe_load(text) == expected


def test_yaml_short_texts_and_timestamps_not_cached(cache_home: Path) -> None:
    assert yamlio.safe_load("a: 1\n") == {"a": 1}
    long_with_date = _yaml_text(1) + "when: 2026-12-03 12:00:00\n"
    assert isinstance(yamlio.safe_load(long_with_date)["when"], datetime.datetime)
    assert isinstance(yamlio.safe_load(long_with_date)["when"], datetime.datetime)
    assert _entries(cache_home, "yaml") == []


def test_yaml_errors_still_raised_and_not_cached(cache_home: Path) -> None:
    bad = _yaml_text(1) + "broken: [unclosed\n"
    for _ in range(2):
        with pytest.raises(yaml.YAMLError) as info:
            yamlio.safe_load(bad)
        assert info.value.problem_mark is not None  # type: ignore[attr-defined]
    assert _entries(cache_home, "yaml") == []


def test_yaml_cache_off_gives_same_data(cache_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    text = _yaml_text(5)
    cached = yamlio.safe_load(text)
    again = yamlio.safe_load(text)
    monkeypatch.setenv("REPO_BUILDER_NO_CACHE", "1")
    assert yamlio.safe_load(text) == cached == again


# --- pbtxt: config.pbtxt edited between two loads --------------------------------------------------------

_CONFIG = """name: "{name}"
backend: "python"
max_batch_size: {batch}
input [ {{ name: "IN" data_type: TYPE_INT32 dims: [ -1 ] }} ]
output [ {{ name: "OUT" data_type: TYPE_INT32 dims: [ -1 ] }} ]
"""


def test_pbtxt_file_edits_are_seen(cache_home: Path, tmp_path: Path) -> None:
    path = tmp_path / "config.pbtxt"
    path.write_text(_CONFIG.format(name="model_a", batch=8))
    assert load_model_config(path).max_batch_size == 8
    assert len(_entries(cache_home, "pbtxt")) == 1

    pbtxt._parsed_bytes.cache_clear()  # as a new process would start
    path.write_text(_CONFIG.format(name="model_a", batch=16))  # one character longer
    assert load_model_config(path).max_batch_size == 16

    pbtxt._parsed_bytes.cache_clear()
    stat = path.stat()
    path.write_text(_CONFIG.format(name="model_b", batch=32))  # same size as the previous text
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert path.stat().st_size == stat.st_size and path.stat().st_mtime_ns == stat.st_mtime_ns
    config = load_model_config(path)
    assert (config.name, config.max_batch_size) == ("model_b", 32)
    assert len(_entries(cache_home, "pbtxt")) == 3


def test_pbtxt_hit_returns_a_fresh_message(cache_home: Path) -> None:
    text = _CONFIG.format(name="m", batch=4)
    first = parse_model_config(text)
    first.max_batch_size = 99  # callers may change what they get
    pbtxt._parsed_bytes.cache_clear()
    second = parse_model_config(text)  # from disk
    assert second.max_batch_size == 4
    assert parse_model_config(text).max_batch_size == 4  # from the process cache


def test_pbtxt_damaged_entry_parses_the_text(cache_home: Path) -> None:
    text = _CONFIG.format(name="m", batch=4)
    parse_model_config(text)
    (entry,) = _entries(cache_home, "pbtxt")
    entry.write_bytes(b"\xff\xff\xff\xff not a message")
    pbtxt._parsed_bytes.cache_clear()
    assert parse_model_config(text).name == "m"


def test_pbtxt_errors_keep_line_and_column_and_are_not_cached(cache_home: Path) -> None:
    text = _CONFIG.format(name="m", batch=4) + "no_such_field: 1\n"
    for _ in range(2):
        pbtxt._parsed_bytes.cache_clear()
        with pytest.raises(PbtxtParseError) as info:
            parse_model_config(text, path="m/config.pbtxt")
        assert info.value.line == 6
        assert "no_such_field" in str(info.value) and "m/config.pbtxt" in str(info.value)
    assert _entries(cache_home, "pbtxt") == []
