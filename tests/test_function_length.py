"""No function of repo_builder/, scripts/ or model_templates/ over 80 lines without a reason (issue 21).

Read with ``ast``, nothing imported. A function's length runs from its first decorator to its last line. A long
function passes when a comment that starts ``# Over 80 lines on purpose`` sits in the three lines above it and
says why. Otherwise it must be in :data:`TO_SPLIT`, the functions known to be too long. That list may only
shrink: the test fails when a function on it is short now, so a split function leaves the list in the same
change.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TREES = ("repo_builder", "scripts", "model_templates")
MAX_FUNCTION_LINES = 80
REASON = "# Over 80 lines on purpose"

#: (path from the project root, function name): too long, no reason given yet; to be split.
TO_SPLIT: frozenset[tuple[str, str]] = frozenset()


def _long_functions(root: Path = ROOT, trees: tuple[str, ...] = TREES) -> dict[tuple[str, str], tuple[int, bool]]:
    """{(path, name): (lines, has a reason)} of every function over :data:`MAX_FUNCTION_LINES` lines."""
    found: dict[tuple[str, str], tuple[int, bool]] = {}
    for tree in trees:
        for path in sorted((root / tree).rglob("*.py")):
            source = path.read_text(encoding="utf-8")
            lines = source.splitlines()
            for node in ast.walk(ast.parse(source, filename=str(path))):
                if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    continue
                start = min([d.lineno for d in node.decorator_list] + [node.lineno])
                length = (node.end_lineno or node.lineno) - start + 1
                if length <= MAX_FUNCTION_LINES:
                    continue
                above = lines[max(0, start - 4) : start - 1]
                reason = any(line.strip().startswith(REASON) for line in above)
                found[(path.relative_to(root).as_posix(), node.name)] = (length, reason)
    return found


def test_no_long_function_without_a_reason() -> None:
    unexplained = {key: n for key, (n, reason) in _long_functions().items() if not reason and key not in TO_SPLIT}
    assert not unexplained, (
        f"functions over {MAX_FUNCTION_LINES} lines with no '{REASON}' comment above them: "
        + ", ".join(f"{p}::{name} ({n} lines)" for (p, name), n in sorted(unexplained.items()))
    )


def test_the_to_split_list_only_names_long_functions() -> None:
    long = _long_functions()
    stale = sorted(key for key in TO_SPLIT if key not in long or long[key][1])
    assert not stale, f"no longer too long (or now explained): remove from TO_SPLIT: {stale}"


def test_the_scan_sees_long_functions_and_their_reasons(tmp_path: Path) -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION_LINES))
    short = "\n".join(f"    y{i} = {i}" for i in range(MAX_FUNCTION_LINES - 2))
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "m.py").write_text(
        f"@staticmethod\ndef long():\n{body}\n\n\n{REASON}: one table.\ndef explained():\n{body}\n\n\n"
        f"def fits():\n{short}\n",
        encoding="utf-8",
    )
    found = _long_functions(tmp_path, ("pkg",))
    assert found == {("pkg/m.py", "long"): (MAX_FUNCTION_LINES + 2, False), ("pkg/m.py", "explained"): (81, True)}
