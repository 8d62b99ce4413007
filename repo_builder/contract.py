"""Import shim: this module moved to :mod:`repo_builder.profile.contract` (issue 21); import from there."""

from .profile.contract import (  # noqa: F401
    MODEL_NAMES as MODEL_NAMES,
)
from .profile.contract import (
    EnsembleStep as EnsembleStep,
)
from .profile.contract import (
    ModelContract as ModelContract,
)
from .profile.contract import (
    ProfileContract as ProfileContract,
)
from .profile.contract import (
    TensorSpec as TensorSpec,
)
from .profile.contract import (
    list_profiles as list_profiles,
)
from .profile.contract import (
    load_contract as load_contract,
)
from .profile.dtypes import TritonDType as TritonDType  # noqa: F401
