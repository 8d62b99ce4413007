"""Import shim: this module moved to :mod:`repo_builder.profile.schema` (issue 21); import from there."""

from .profile.dtypes import DTYPE_ALIASES as DTYPE_ALIASES  # noqa: F401
from .profile.schema import (
    ENGINE_KINDS as ENGINE_KINDS,
)
from .profile.schema import (
    FLOAT32_MAX as FLOAT32_MAX,
)
from .profile.schema import (
    INT32_MAX as INT32_MAX,
)
from .profile.schema import (
    Kind as Kind,
)
from .profile.schema import (
    Parameter as Parameter,
)
from .profile.schema import (  # noqa: F401
    ParamType as ParamType,
)
from .profile.schema import (
    Schema as Schema,
)
from .profile.schema import (
    check_text_value as check_text_value,
)
from .profile.schema import (
    load_schema as load_schema,
)
from .profile.schema import (
    problems_error as problems_error,
)
from .profile.schema import (
    validate_user_values as validate_user_values,
)
