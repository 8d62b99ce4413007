"""The package's shape, read from its source with ``ast`` (nothing imported): no import circle between modules,
no import that runs back up the layer order of docs/design.md, and no module over 500 lines.

Layers, in the order data flows (a module imports only its own layer and those to its left):
``runtime -> base -> profile -> engine/tokenizer -> values -> repository -> render -> serving -> commands``.
Every import counts, also one inside a function or under ``TYPE_CHECKING`` (a type hint that runs back up is
still a dependency that runs back up). ``from pkg import name`` counts as an import of ``pkg.name`` when that is
a module; the implicit import of a package's ``__init__`` does not count.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "repo_builder"

#: (layer name, module name prefixes), left to right. A prefix matches the module and everything below it.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("runtime", ("runtime",)),  # vendored into every model: imports nothing else of repo-builder
    ("base", ("", "errors", "filecache", "cli_options")),  # "" is repo_builder/__init__.py (the version)
    ("profile", ("profile", "contract", "paths", "schema", "yamlio")),  # the top-level four: import shims
    ("engine/tokenizer", ("engine", "tokenizer", "testing", "testing_whisper", "testing_multimodal", "realmodel")),
    ("values", ("values", "resolve", "rules")),
    ("repository", ("repository", "lockfile", "pbtxt", "validate")),
    (
        "render",
        (
            "render",
            "render_options",
            "placement",
            "adopt",
            "adopt_values",
            "adoption",
            "semdiff",
            "semdiff_change",
            "upgrade",
        ),
    ),
    (
        "serving",
        (
            "server",
            "openai",
            "deploy",
            "client",
            "bench",
            "bench_prompts",
            "bench_report",
            "bench_settings",
            "bench_stats",
            "top",
        ),
    ),
    ("commands", ("commands", "cli", "__main__")),
)

#: Imports within one layer that must not exist (architecture.md: the front end's child start lives in
#: server/, so nothing in server/ imports openai/).
FORBIDDEN: tuple[tuple[str, str], ...] = (("server", "openai"),)

#: Imports allowed to run back up, each with its reason. Empty: there are none.
ALLOWED_BACK: frozenset[tuple[str, str]] = frozenset()

MAX_LINES = 500


def _modules(package: Path) -> dict[str, tuple[Path, bool]]:
    """{dotted name below the package ("" for its __init__): (file, is a package __init__)}."""
    out: dict[str, tuple[Path, bool]] = {}
    for path in sorted(package.rglob("*.py")):
        parts = list(path.relative_to(package).with_suffix("").parts)
        is_pkg = parts[-1] == "__init__"
        out[".".join(parts[:-1] if is_pkg else parts)] = (path, is_pkg)
    return out


def import_graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    """{module: the package's modules it imports}, names relative to the package ("" is its __init__)."""
    modules = _modules(package)
    top = package.name
    graph: dict[str, set[str]] = {}
    for name, (path, is_pkg) in modules.items():
        here = name.split(".") if name else []
        base = here if is_pkg else here[:-1]
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names if a.name == top or a.name.startswith(top + ".")]
                targets.update(n[len(top) + 1 :] for n in names)
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    parent = base[: len(base) - (node.level - 1)]
                    target = ".".join(parent + ([node.module] if node.module else []))
                elif node.module == top or (node.module or "").startswith(top + "."):
                    target = node.module[len(top) + 1 :] if node.module != top else ""
                else:
                    continue
                for alias in node.names:
                    sub = f"{target}.{alias.name}" if target else alias.name
                    targets.add(sub if sub in modules else target)
        graph[name] = {t for t in targets if t in modules and t != name}
    return graph


def layer_of(module: str) -> int:
    """The index in :data:`LAYERS` of ``module`` (longest matching prefix). Raises KeyError for a module no
    layer names (a new top-level module has to be given its place)."""
    best: tuple[int, int] | None = None
    for index, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if module == prefix or (prefix and module.startswith(prefix + ".")):
                if best is None or len(prefix) > best[1]:
                    best = (index, len(prefix))
    if best is None:
        raise KeyError(f"repo_builder.{module} is in no layer of tests/test_layering.py LAYERS")
    return best[0]


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def back_imports(graph: dict[str, set[str]]) -> list[str]:
    """``"a -> b (layer x -> layer y)"`` for every import of a module to the right of the importer's layer, and
    for every :data:`FORBIDDEN` pair."""
    out = []
    for src, targets in sorted(graph.items()):
        for dst in sorted(targets):
            if (src, dst) in ALLOWED_BACK:
                continue
            s, d = layer_of(src), layer_of(dst)
            if d > s:
                out.append(f"{src} -> {dst} ({LAYERS[s][0]} imports {LAYERS[d][0]})")
            for a, b in FORBIDDEN:
                if (src == a or src.startswith(a + ".")) and (dst == b or dst.startswith(b + ".")):
                    out.append(f"{src} -> {dst} ({a}/ must not import {b}/)")
    return out


def test_the_graph_sees_relative_absolute_and_function_level_imports() -> None:
    graph = import_graph()
    assert "values.rules" in graph["rules"]  # from .values.rules import ... (a shim)
    assert "profile.dtypes" in graph["values.findings"] or "profile.schema" in graph["values.findings"]
    assert "repository.validate" in graph["render.write"]  # imported inside a function
    assert "errors" in graph["commands.build"]


def test_every_module_has_a_layer() -> None:
    for module in import_graph():
        layer_of(module)


def test_no_import_circle() -> None:
    assert circles(import_graph()) == []


def test_the_circle_finder_finds_one() -> None:
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_runs_back_up_the_layers() -> None:
    assert back_imports(import_graph()) == []


def test_a_back_import_is_reported() -> None:
    assert back_imports({"runtime.text": {"engine.info"}, "server.run": {"openai.serve"}}) == [
        "runtime.text -> engine.info (runtime imports engine/tokenizer)",
        "server.run -> openai.serve (server/ must not import openai/)",
    ]


def test_no_module_over_500_lines() -> None:
    long = {
        str(path.relative_to(PACKAGE.parent)): n
        for path in sorted(PACKAGE.rglob("*.py"))
        if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    assert long == {}, f"modules over {MAX_LINES} lines (split them by topic): {long}"
