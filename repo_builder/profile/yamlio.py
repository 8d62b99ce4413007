"""Reading YAML: the one place that picks PyYAML's loader.

PyYAML's pure-Python ``SafeLoader`` takes ~90 ms for each of ``parameters.yaml`` and a profile's
``contract.yaml``; the libyaml-backed ``CSafeLoader`` (present in PyYAML's manylinux wheels) builds the same
data in ~13 ms (measured with PyYAML 6.0.4, this machine). Both accept the same safe subset of YAML and raise
``yaml.YAMLError`` subclasses with a line/column mark, so callers catch ``yaml.YAMLError`` either way.

Even with libyaml, PyYAML's Python constructor costs ~40 ms for ``parameters.yaml`` on every command start, so
the loaded data is also kept on disk (:mod:`repo_builder.filecache`, kind ``yaml``) as a ``marshal`` dump
keyed by the text (texts of at least 4,096 characters), the PyYAML version, the loader and the Python version;
data ``marshal`` cannot hold (timestamps) is never cached.
"""

from __future__ import annotations

import marshal
import sys
from typing import Any

import yaml

from ..filecache import cached_bytes, key_of

_LOADER: type = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
#: Shorter texts (a values file) are parsed every time: a cache look-up would cost about as much.
_CACHE_MIN_CHARS = 4096


def safe_load(text: str) -> Any:
    """Parse one YAML document with the fastest safe loader installed.

    Raises:
        yaml.YAMLError: the text is not valid YAML (the message carries the line and column).
    """
    if len(text) < _CACHE_MIN_CHARS:
        return yaml.load(text, Loader=_LOADER)  # a SafeLoader (C or Python), never the full loader
    loaded: list[Any] = []

    def compute() -> bytes | None:
        loaded.append(yaml.load(text, Loader=_LOADER))  # a SafeLoader (C or Python), never the full loader
        try:
            return marshal.dumps(loaded[0])
        except ValueError:  # e.g. a datetime: not cached
            return None

    key = key_of("yaml", yaml.__version__, _LOADER.__name__, sys.version, text)
    data = cached_bytes("yaml", key, compute)
    if loaded:
        return loaded[0]
    try:
        return marshal.loads(data)  # type: ignore[arg-type]
    except (EOFError, ValueError, TypeError):  # a damaged entry: parse again
        return yaml.load(text, Loader=_LOADER)
