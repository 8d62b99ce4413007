#!/usr/bin/env python3
"""Drop-in for NVIDIA's ``scripts/launch_triton_server.py``: same flags, but waits until ready and stays attached.

Thin wrapper over ``repo-builder launch`` (repo_builder/server); ``--help`` lists every option, e.g.::

    python scripts/launch_triton_server.py --world_size 2 --model_repo /path/to/repo --http_port 8000
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

import typer  # noqa: E402

from repo_builder.cli import report_errors  # noqa: E402
from repo_builder.commands.serve import launch  # noqa: E402


def main() -> None:
    """Run the ``launch`` command as this script's only command."""
    script = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
    script.command()(report_errors(launch))
    script()


if __name__ == "__main__":
    main()
