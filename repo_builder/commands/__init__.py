"""Command groups of the CLI; each module registers its commands on ``repo_builder.cli.app``."""
