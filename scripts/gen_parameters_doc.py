#!/usr/bin/env python3
"""Write docs/parameters.md from the parameter schema (model_templates/parameters.yaml).

tests/test_parameters_doc.py fails when the committed file differs from what this writes.
"""

from pathlib import Path

from repo_builder.commands.build import params_markdown
from repo_builder.profile.contract import list_profiles
from repo_builder.profile.schema import load_schema

HEADER = """# Parameters

Generated from `model_templates/parameters.yaml` by `python scripts/gen_parameters_doc.py`; the same
table prints with `repo-builder params --profile P` (`--json`, `--markdown`). Do not edit by hand.

Where a value comes from, in order: the user (`--set KEY=VALUE`, then `--values FILE.yaml`), the engine's
`config.json` (`source: engine`), the tokenizer directory and its `generation_config.json`
(`source: tokenizer`), then the default below. `repo-builder.lock.json` records the origin of every value.
Kinds: `structural` values are written outside quotes in config.pbtxt and always have a value;
`runtime` values are `parameters { string_value }` entries, omitted when unset; `derived` values always
come from the engine; `build_time` keys are refused: they are fixed when the engine is built.

"""


def render() -> str:
    schema = load_schema()
    return HEADER + "\n".join(params_markdown(p, schema.table(p)) for p in reversed(list_profiles()))


def main() -> None:
    out = Path(__file__).resolve().parents[1] / "docs" / "parameters.md"
    out.write_text(render())
    print(out)


if __name__ == "__main__":
    main()
