#!/usr/bin/env python3
"""Fill the generated tables of docs/metrics.md: the metric families (repo_builder/runtime/metrics.py
``FAMILIES``, then the OpenAI front end's, repo_builder/openai/metrics.py ``FAMILIES``) and the dashboard
panels (repo_builder/deploy/monitoring.py ``PANELS``).

The text between ``<!-- BEGIN families -->`` / ``<!-- END families -->`` (and ``panels``) is replaced; the
prose around it is hand-written. tests/test_metrics_doc.py fails when the committed file differs.
"""

from pathlib import Path

from repo_builder.deploy.monitoring import PANELS
from repo_builder.openai.metrics import FAMILIES as FRONT_FAMILIES
from repo_builder.runtime.metrics import FAMILIES

DOC = Path(__file__).resolve().parents[1] / "docs" / "metrics.md"


def families_table() -> str:
    rows = ["| family | kind | exported by | category label: values | meaning |", "|---|---|---|---|---|"]
    for f in (*FAMILIES, *FRONT_FAMILIES):
        cats = f"`{f.label}`: " + ", ".join(f"`{v}`" for v in f.values) if f.label else ""
        unit = f" ({f.unit})" if f.unit else ""
        rows.append(f"| `{f.name}` | {f.kind} | {', '.join(f.roles)} | {cats} | {f.description}{unit} |")
    return "\n".join(rows)


def panels_table() -> str:
    rows = ["| key | row | panel | query (`{window}`, `{job}`, `{front}` filled in) |", "|---|---|---|---|"]
    for p in PANELS:
        queries = "<br>".join(f"`{q.expr.replace('|', '&#124;')}`" for q in p.queries)
        rows.append(f"| `{p.key}` | {p.row} | {p.title} | {queries} |")
    return "\n".join(rows)


def render(text: str) -> str:
    for name, table in (("families", families_table()), ("panels", panels_table())):
        begin, end = f"<!-- BEGIN {name} -->", f"<!-- END {name} -->"
        head, rest = text.split(begin, 1)
        _old, tail = rest.split(end, 1)
        text = f"{head}{begin}\n{table}\n{end}{tail}"
    return text


def main() -> None:
    DOC.write_text(render(DOC.read_text()))
    print(DOC)


if __name__ == "__main__":
    main()
