"""docs/parameters.md is generated from the parameter schema and must not drift from it."""

import importlib.util

from conftest import PROJECT


def test_parameters_doc_matches_the_schema():
    spec = importlib.util.spec_from_file_location("gen_parameters_doc", PROJECT / "scripts" / "gen_parameters_doc.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    committed = (PROJECT / "docs" / "parameters.md").read_text()
    assert committed == module.render(), "docs/parameters.md is stale: run python scripts/gen_parameters_doc.py"


def test_every_parameter_of_every_profile_is_documented():
    from repo_builder.profile.contract import list_profiles
    from repo_builder.profile.schema import load_schema

    text = (PROJECT / "docs" / "parameters.md").read_text()
    for profile in list_profiles():
        for row in load_schema().table(profile):
            assert f"`{row['name']}`" in text, (profile, row["name"])
