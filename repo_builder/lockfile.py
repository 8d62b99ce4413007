"""Import shim: this module moved to :mod:`repo_builder.repository.lockfile` (issue 21); import from there."""

from .errors import (
    field_problems_text as validation_text,  # noqa: F401
)
from .repository.lockfile import (  # noqa: F401
    LOCK_NAME as LOCK_NAME,
)
from .repository.lockfile import (
    LaunchBlock as LaunchBlock,
)
from .repository.lockfile import (
    LockEngine as LockEngine,
)
from .repository.lockfile import (
    LockFile as LockFile,
)
from .repository.lockfile import (
    LockLaunch as LockLaunch,
)
from .repository.lockfile import (
    LockValue as LockValue,
)
from .repository.lockfile import (
    ServingInfo as ServingInfo,
)
from .repository.lockfile import (
    build_lock as build_lock,
)
from .repository.lockfile import (
    build_multi_lock as build_multi_lock,
)
from .repository.lockfile import (
    changed_files as changed_files,
)
from .repository.lockfile import (
    dumps as dumps,
)
from .repository.lockfile import (
    engine_file_patterns as engine_file_patterns,
)
from .repository.lockfile import (
    lock_llms as lock_llms,
)
from .repository.lockfile import (
    read_launch as read_launch,
)
from .repository.lockfile import (
    read_launch_block as read_launch_block,
)
from .repository.lockfile import (
    read_lock as read_lock,
)
from .repository.lockfile import (
    read_serving_info as read_serving_info,
)
from .repository.lockfile import (
    require_lock as require_lock,
)
from .repository.lockfile import (
    sha256_bytes as sha256_bytes,
)
from .repository.lockfile import (
    sha256_file as sha256_file,
)
from .repository.lockfile import (
    unlisted_files as unlisted_files,
)
