"""Import shim: this module moved to :mod:`repo_builder.values.resolve` (issue 21); import from there."""

from .profile.dtypes import ENGINE_TO_TRITON as TORCH_TO_TRITON  # noqa: F401
from .profile.dtypes import triton_dtype as triton_dtype  # noqa: F401
from .values.resolve import (  # noqa: F401
    Origin as Origin,
)
from .values.resolve import (
    Resolution as Resolution,
)
from .values.resolve import (
    ResolvedValue as ResolvedValue,
)
from .values.resolve import (
    resolve as resolve,
)
