"""The one family of errors the served Python models raise (vendored; standard library only).

Apart from :class:`repo_builder.errors.RepoBuilderError`, which is the tool's (render, validate, launch):
these are raised inside tritonserver, and each model's ``model.py`` turns them into Triton errors.

* :class:`RequestError`: one request is bad; it fails alone (``TritonError`` with ``INVALID_ARG``, HTTP 400)
  and the message names the client-facing field (``max_tokens: must be > 0, got 0``).
* :class:`ModelLoadError`: a model cannot start (a parameter of its ``config.pbtxt``, a missing tokenizer or
  engine folder, a malformed ``wiring.json``); raised from ``initialize`` and shown as the model's load error.
  :class:`EngineLoadError` is the Python engines' kind of it (reference and synthetic engine).
* :class:`StepError`: a model the BLS calls answered with an error; the message starts with that model's name.
"""

from __future__ import annotations


class ServingError(Exception):
    """Base of every error of the vendored runtime."""


class RequestError(ServingError, ValueError):
    """A request that cannot be served; fails alone with a message naming the field.

    Args:
        field: the client-facing request field at fault (``text_input``, ``max_tokens``, ``stop_words``...).
        message: what is wrong, with the numbers involved.
        hint: how to fix it, if known.
    """

    def __init__(self, field: str, message: str, hint: str | None = None) -> None:
        self.field = field
        self.message = message
        self.hint = hint
        super().__init__(str(self))

    def __str__(self) -> str:
        text = f"{self.field}: {self.message}"
        if self.hint:
            text += f" (hint: {self.hint})"
        return text


class ModelLoadError(ServingError, RuntimeError):
    """A model cannot start; the message names the parameter key, file or path and how to fix it."""


class EngineLoadError(ModelLoadError):
    """The engine directory or a model parameter of a Python engine is unusable; raised from ``initialize``.

    The message names the path or parameter key and says how to fix it (Triton shows it as the model's
    load error).
    """


class StepError(ServingError, RuntimeError):
    """A step model failed; ``model`` is its name and the message starts with it.

    ``client`` is True when the step refused the request as the client's mistake (its error carried
    ``INVALID_ARG``, or a step run in-process raised :class:`RequestError`): the BLS then answers
    ``INVALID_ARG`` too (HTTP 400), else ``INTERNAL``.
    """

    def __init__(self, model: str, message: str, client: bool = False) -> None:
        self.model = model
        self.client = client
        super().__init__(f"{model}: {message}")
