"""Import shim: this module moved to :mod:`repo_builder.repository.pbtxt` (issue 21); import from there."""

from .repository.pbtxt import (  # noqa: F401
    PLACEHOLDER_RE as PLACEHOLDER_RE,
)
from .repository.pbtxt import (
    PbtxtParseError as PbtxtParseError,
)
from .repository.pbtxt import (
    Placeholder as Placeholder,
)
from .repository.pbtxt import (
    backend_json as backend_json,
)
from .repository.pbtxt import (
    dtype_name as dtype_name,
)
from .repository.pbtxt import (
    find_placeholders as find_placeholders,
)
from .repository.pbtxt import (
    load_model_config as load_model_config,
)
from .repository.pbtxt import (
    model_config_pb2 as model_config_pb2,
)
from .repository.pbtxt import (
    parse_model_config as parse_model_config,
)
from .repository.pbtxt import (
    python_instances as python_instances,
)
from .repository.pbtxt import (
    quote as quote,
)
from .repository.pbtxt import (
    string_parameters as string_parameters,
)
