"""Import shim: this module moved to :mod:`repo_builder.profile.yamlio` (issue 21); import from there."""

from .profile.yamlio import (  # noqa: F401
    safe_load as safe_load,
)
