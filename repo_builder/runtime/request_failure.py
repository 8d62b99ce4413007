"""What a BLS model does when one request fails: log what the client did not cause, then answer the request with
its error unless its final response already went out. Shared by ``tensorrt_llm_bls`` and
``disaggregated_serving_bls`` (``model_templates/python_models/<model>/1/model.py``).

Vendored into rendered repositories and importing no Triton: the model passes ``pb_utils.Logger`` (anything with
``log_error`` and ``log_warn`` taking one string) and the call that sends the error response.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def log_unexpected(exc: BaseException, *, model: str, expected: tuple[type[BaseException], ...], logger: Any) -> None:
    """``logger.log_error("<model>: <type>: <message>")`` unless ``exc`` is one of ``expected`` (a refused request
    or a failed step, already answered with a message naming the field: not the server's fault)."""
    if not isinstance(exc, expected):
        logger.log_error(f"{model}: {type(exc).__name__}: {exc}")


def fail_request(
    exc: BaseException,
    *,
    model: str,
    expected: tuple[type[BaseException], ...],
    logger: Any,
    send_error: Callable[[BaseException], object] | None,
) -> None:
    """Log ``exc`` (:func:`log_unexpected`), then ``send_error(exc)`` (sends the request's final error response; None
    when the final response was already sent). A failure to send (the client is gone) is logged as a warning,
    never raised: the next request must not see it."""
    log_unexpected(exc, model=model, expected=expected, logger=logger)
    if send_error is None:
        return
    try:
        send_error(exc)
    except Exception as send_exc:  # noqa: BLE001 - the client may be gone
        logger.log_warn(f"{model}: could not send the error: {send_exc}")
