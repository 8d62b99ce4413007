"""Finding the ``tritonserver`` binary and the environment it needs.

Search order (first hit wins): ``--tritonserver``, ``$TRITONSERVER``, ``/opt/tritonserver/bin/tritonserver``
(NVIDIA's containers), then the binary nvidia-pytriton installs in
``site-packages/pytriton/tritonserver/bin``. The nvidia-pytriton layout needs preparing before its
Python backend works (facts observed with nvidia-pytriton 0.7.0 = tritonserver 2.51.0 and its 3.11 stub, which
starts Python isolated):

* the stub for this interpreter (``python_backend_stubs/3.<minor>/triton_python_backend_stub``) must sit next
  to ``backends/python/libtriton_python.so`` (its RPATH then resolves);
* ``--backend-directory=<ts>/backends``;
* the stub ignores ``PYTHONPATH`` and finds ``python3`` on ``PATH``: the current interpreter's directory
  (``sys.executable``'s, i.e. the venv's ``bin``) goes first on ``PATH``;
* ``LD_LIBRARY_PATH`` must include the interpreter's ``sysconfig`` ``LIBDIR`` (else a system libpython is
  picked and ``_ssl`` fails to import);
* numpy must be < 2 in that environment (numpy 2 silently corrupts tensors in the stub).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import shutil
import sys
import sysconfig
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import LaunchError

OPT_TRITONSERVER = Path("/opt/tritonserver/bin/tritonserver")
STUB_NAME = "triton_python_backend_stub"


@dataclass(frozen=True)
class TritonBinary:
    """A ``tritonserver`` executable and what it needs to run.

    Attributes:
        path: the executable.
        source: where it was found: ``--tritonserver``, ``$TRITONSERVER``, ``/opt/tritonserver`` or
            ``nvidia-pytriton``.
        backend_directory: value for ``--backend-directory``, or ``None`` for the binary's built-in default.
        env: environment variables to set (complete values, already merged with the current ones).
    """

    path: Path
    source: str
    backend_directory: Path | None = None
    env: dict[str, str] = field(default_factory=dict)

    def environ(self, base: dict[str, str] | None = None) -> dict[str, str]:
        """``base`` (default ``os.environ``) with :attr:`env` applied: the environment to start the server in."""
        merged = dict(os.environ if base is None else base)
        merged.update(self.env)
        return merged

    def server_args(self) -> list[str]:
        """Arguments every rank needs because of where this binary lives (``--backend-directory``)."""
        return [f"--backend-directory={self.backend_directory}"] if self.backend_directory else []


def _check_executable(path: Path, key: str) -> Path:
    if not path.is_file():
        raise LaunchError(
            f"tritonserver binary {path} does not exist",
            key=key,
            hint="point it at an existing tritonserver executable, or pip install nvidia-pytriton==0.7.0",
        )
    if not os.access(path, os.X_OK):
        raise LaunchError(f"tritonserver binary {path} is not executable", key=key, hint=f"chmod +x {path}")
    return path


def _pytriton_root() -> Path | None:
    """``site-packages/pytriton/tritonserver`` of the installed nvidia-pytriton (without importing pytriton)."""
    spec = importlib.util.find_spec("pytriton")
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        root = Path(location) / "tritonserver"
        if (root / "bin" / "tritonserver").is_file():
            return root
    return None


def _is_pytriton_layout(binary: Path) -> Path | None:
    """The tritonserver root when ``binary`` is ``<root>/bin/tritonserver`` of a nvidia-pytriton layout."""
    root = binary.resolve().parent.parent
    if (root / "python_backend_stubs").is_dir() and (root / "backends" / "python").is_dir():
        return root
    return None


def _numpy_version() -> str | None:
    try:
        return importlib.metadata.version("numpy")
    except importlib.metadata.PackageNotFoundError:
        return None


def _install_stub(root: Path) -> None:
    """Copy the stub for this interpreter next to ``libtriton_python.so`` if it is not there yet.

    The copy goes to a temporary file in the same folder and is renamed into place, so concurrent launches
    never see a half-written stub.
    """
    target = root / "backends" / "python" / STUB_NAME
    if target.is_file() and os.access(target, os.X_OK):
        return
    minor = f"3.{sys.version_info.minor}"
    source = root / "python_backend_stubs" / minor / STUB_NAME
    if not source.is_file():
        available = sorted(p.name for p in (root / "python_backend_stubs").iterdir())
        raise LaunchError(
            f"nvidia-pytriton has no Python backend stub for Python {minor} (has {', '.join(available)})",
            path=source,
            hint="run repo-builder from a Python version nvidia-pytriton ships a stub for",
        )
    try:
        fd, tmp = tempfile.mkstemp(prefix=".stub-", dir=target.parent)
        os.close(fd)
        shutil.copy2(source, tmp)
        os.chmod(tmp, 0o755)
        os.replace(tmp, target)
    except OSError as exc:
        raise LaunchError(
            f"cannot install the Python backend stub: {exc}", path=target, hint=f"copy {source} to {target} by hand"
        ) from exc


def _prepend(value: str, current: str | None) -> str:
    parts = [value] + [p for p in (current or "").split(os.pathsep) if p and p != value]
    return os.pathsep.join(parts)


def prepare_pytriton(root: Path, source: str) -> TritonBinary:
    """Make the nvidia-pytriton tritonserver under ``root`` runnable and describe it.

    Raises:
        LaunchError: numpy >= 2 is installed in this interpreter's environment (the one the stub will use),
            the stub for this Python version is missing, or it cannot be copied into place.
    """
    numpy_version = _numpy_version()
    if numpy_version is None:
        raise LaunchError(
            f"numpy is not installed in {sys.prefix}; the Python backend stub needs numpy<2 there",
            key="numpy",
            hint='pip install "numpy<2"',
        )
    if int(numpy_version.split(".")[0]) >= 2:
        raise LaunchError(
            f"numpy {numpy_version} is installed in {sys.prefix}; the nvidia-pytriton Python backend "
            "stub is built against numpy 1.x and corrupts tensors with numpy 2",
            key="numpy",
            hint='pip install "numpy<2" in this environment',
        )
    _install_stub(root)
    bin_dir = os.path.dirname(sys.executable)  # not resolved: a venv's bin holds its pyvenv.cfg
    env = {"PATH": _prepend(bin_dir, os.environ.get("PATH", "/usr/bin:/bin"))}
    libdir = sysconfig.get_config_var("LIBDIR")
    if libdir:
        env["LD_LIBRARY_PATH"] = _prepend(libdir, os.environ.get("LD_LIBRARY_PATH"))
    return TritonBinary(path=root / "bin" / "tritonserver", source=source, backend_directory=root / "backends", env=env)


def find_tritonserver(explicit: str | os.PathLike[str] | None = None) -> TritonBinary:
    """Find ``tritonserver`` and prepare its environment.

    Order: ``explicit`` (the ``--tritonserver`` flag), ``$TRITONSERVER``, ``/opt/tritonserver/bin/tritonserver``,
    nvidia-pytriton's bundled binary. A binary inside a nvidia-pytriton layout is prepared the same way
    whichever way it was named (see :func:`prepare_pytriton`).

    Raises:
        LaunchError: a named binary does not exist or is not executable, none was found at all, or the
            nvidia-pytriton environment cannot be prepared (numpy >= 2, no stub for this Python).
    """
    candidates: list[tuple[Path, str]] = []
    if explicit:
        candidates.append((_check_executable(Path(explicit).expanduser(), "--tritonserver"), "--tritonserver"))
    elif os.environ.get("TRITONSERVER"):
        candidates.append(
            (_check_executable(Path(os.environ["TRITONSERVER"]).expanduser(), "TRITONSERVER"), "$TRITONSERVER")
        )
    elif OPT_TRITONSERVER.is_file() and os.access(OPT_TRITONSERVER, os.X_OK):
        candidates.append((OPT_TRITONSERVER, "/opt/tritonserver"))
    else:
        root = _pytriton_root()
        if root is None:
            raise LaunchError(
                "no tritonserver found (not given by --tritonserver or $TRITONSERVER, not in "
                "/opt/tritonserver/bin, and nvidia-pytriton is not installed)",
                key="--tritonserver",
                hint='pip install "nvidia-pytriton==0.7.0" or pass --tritonserver PATH',
            )
        return prepare_pytriton(root, "nvidia-pytriton")
    path, source = candidates[0]
    root = _is_pytriton_layout(path)
    if root is not None:
        return prepare_pytriton(root, source)
    return TritonBinary(path=path, source=source)
