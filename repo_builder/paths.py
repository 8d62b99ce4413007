"""Import shim: this module moved to :mod:`repo_builder.profile.paths` (issue 21); import from there."""

from .profile.paths import (
    runtime_dir as runtime_dir,
)
from .profile.paths import (  # noqa: F401
    templates_dir as templates_dir,
)
