"""docs/metrics.md's tables are generated from the families table and the panel table and must not drift."""

import importlib.util

from conftest import PROJECT


def test_metrics_doc_matches_the_tables():
    spec = importlib.util.spec_from_file_location("gen_metrics_doc", PROJECT / "scripts" / "gen_metrics_doc.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    committed = (PROJECT / "docs" / "metrics.md").read_text()
    assert committed == module.render(committed), "docs/metrics.md is stale: run python scripts/gen_metrics_doc.py"
