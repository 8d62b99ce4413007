"""Reading model-config parameters inside a Python-backend model.

Triton hands ``initialize(args)`` the model config as JSON (``args["model_config"]``); every entry of
its ``parameters`` map is ``{"string_value": "..."}``. An empty string or a leftover ``${...}``
placeholder (a hand-filled repository) means "unset". Errors name the parameter key and the model.
"""

from __future__ import annotations

import builtins
import json
from collections.abc import Callable, Mapping
from typing import Any

from .errors import ModelLoadError

_TRUE = {"true", "1", "yes", "y", "t", "on"}
_FALSE = {"false", "0", "no", "n", "f", "off"}


class ParameterValueError(ModelLoadError, ValueError):
    """A config.pbtxt parameter holds a value of the wrong type; the message names the key."""


def parse_bool(text: str) -> bool:
    """Parse the boolean spellings Triton's TRT-LLM templates accept (true/false/1/0/yes/no/t/f/y/n)."""
    low = text.strip().lower()
    if low in _TRUE:
        return True
    if low in _FALSE:
        return False
    raise ValueError(f"not a boolean: {text!r}")


class ModelParams:
    """Typed access to one model's config.pbtxt ``parameters``.

    Args:
        model_config: the model config as a dict or the JSON string Triton passes to ``initialize``.
    """

    def __init__(self, model_config: Mapping[str, Any] | str) -> None:
        cfg = json.loads(model_config) if isinstance(model_config, str) else dict(model_config)
        self.model_name: str = cfg.get("name", "?")
        self.config = cfg
        raw = cfg.get("parameters", {}) or {}
        self._raw = {k: (v.get("string_value", "") if isinstance(v, Mapping) else str(v)) for k, v in raw.items()}
        #: Triton's ``initialize`` args ``model_instance_kind`` (``CPU``/``GPU``) and ``model_instance_device_id``
        #: of this instance (python_backend ``initialize`` docs); set by :meth:`with_instance`.
        self.instance_kind: builtins.str = "CPU"
        self.instance_device_id: builtins.int = 0

    def with_instance(self, args: Mapping[builtins.str, Any]) -> ModelParams:
        """Record the instance kind and device id Triton passes in ``initialize(args)``; returns self."""
        self.instance_kind = builtins.str(args.get("model_instance_kind") or "CPU").upper()
        try:
            self.instance_device_id = builtins.int(args.get("model_instance_device_id") or 0)
        except (TypeError, ValueError):
            self.instance_device_id = 0
        return self

    def raw(self, key: str) -> str | None:
        """The raw string of ``key``, or None when absent, empty or an unfilled ``${...}``."""
        value = self._raw.get(key)
        if value is None or value.strip() == "" or value.strip().startswith("${"):
            return None
        return value

    def _typed(self, key: str, default: Any, conv: Callable[[str], Any], kind: str) -> Any:
        value = self.raw(key)
        if value is None:
            return default
        try:
            return conv(value)
        except (TypeError, ValueError) as exc:
            raise ParameterValueError(
                f"model '{self.model_name}': parameter '{key}' = {value!r} is not {kind}"
            ) from exc

    def str(self, key: builtins.str, default: builtins.str | None = None) -> builtins.str | None:
        """String parameter ``key`` or ``default``."""
        return self._typed(key, default, str, "a string")

    def int(
        self, key: builtins.str, default: builtins.int | None = None, *, minimum: builtins.int | None = None
    ) -> builtins.int | None:
        """Integer parameter ``key`` or ``default``; raises ParameterValueError naming the key when the value is
        not an integer or is below ``minimum``."""
        value = self._typed(key, default, lambda s: int(s.strip()), "an integer")
        if minimum is not None and value is not None and value < minimum:
            raise ParameterValueError(f"model '{self.model_name}': parameter '{key}' = {value} must be >= {minimum}")
        return value

    def float(self, key: builtins.str, default: builtins.float | None = None) -> builtins.float | None:
        """Float parameter ``key`` or ``default``; raises ParameterValueError naming the key."""
        return self._typed(key, default, lambda s: float(s.strip()), "a number")

    def bool(self, key: builtins.str, default: builtins.bool | None = None) -> builtins.bool | None:
        """Boolean parameter ``key`` or ``default``; raises ParameterValueError naming the key."""
        return self._typed(key, default, parse_bool, "a boolean (true/false)")

    def choice(
        self, key: builtins.str, choices: tuple[builtins.str, ...], default: builtins.str | None = None
    ) -> builtins.str | None:
        """Parameter ``key`` (one of ``choices``, compared lower-case) or ``default``; raises ParameterValueError
        naming the key and the choices otherwise."""
        value = self.raw(key)
        if value is None:
            return default
        low = value.strip().lower()
        if low not in choices:
            raise ParameterValueError(
                f"model '{self.model_name}': parameter '{key}' = {value!r} is not one of {', '.join(choices)}"
            )
        return low

    def int_list(self, key: builtins.str, default: list[builtins.int] | None = None) -> list[builtins.int] | None:
        """Comma-separated integers (e.g. ``"2,32000"``) or ``default``."""
        return self._typed(
            key, default, lambda s: [int(x) for x in s.split(",") if x.strip()], "a comma-separated list of integers"
        )

    @property
    def decoupled(self) -> builtins.bool:
        """True when the model's transaction policy is decoupled (streaming)."""
        return bool(self.config.get("model_transaction_policy", {}).get("decoupled", False))

    @property
    def max_batch_size(self) -> builtins.int:
        """The model's Triton ``max_batch_size`` (0 = no batch dimension)."""
        return int(self.config.get("max_batch_size", 0))
