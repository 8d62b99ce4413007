"""Import shim: the launcher's front-end child moved to :mod:`repo_builder.server.frontend` (issue 21)."""

from ..server.frontend import (  # noqa: F401
    FrontEnd as FrontEnd,
)
from ..server.frontend import (
    check_installed as check_installed,
)
from ..server.frontend import (
    served_name as served_name,
)
from ..server.frontend import (
    start_beside as start_beside,
)
from ..server.frontend import (
    wait_either as wait_either,
)
