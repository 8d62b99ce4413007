"""Import shim: this module moved to :mod:`repo_builder.repository.validate` (issue 21); import from there."""

from .repository.validate import (  # noqa: F401
    ENGINE_PATH_KEYS as ENGINE_PATH_KEYS,
)
from .repository.validate import (
    Problem as Problem,
)
from .repository.validate import (
    check_against_engine as check_against_engine,
)
from .repository.validate import (
    repository_values as repository_values,
)
from .repository.validate import (
    validate_repository as validate_repository,
)
