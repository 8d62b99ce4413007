"""runtime/request_failure.py: how both BLS models answer a failed request (log, then send the error once)."""

from __future__ import annotations

import pytest

from repo_builder.runtime.request_failure import fail_request, log_unexpected


class Logger:
    """Records what pb_utils.Logger would write (the server log cannot exist outside tritonserver)."""

    def __init__(self) -> None:
        self.lines: list[tuple[str, str]] = []

    def log_error(self, text: str) -> None:
        self.lines.append(("error", text))

    def log_warn(self, text: str) -> None:
        self.lines.append(("warn", text))


class Refused(Exception):
    pass


def test_unexpected_failures_are_logged_expected_ones_are_not() -> None:
    log = Logger()
    log_unexpected(Refused("max_tokens must be positive"), model="m", expected=(Refused,), logger=log)
    log_unexpected(KeyError("x"), model="m", expected=(Refused,), logger=log)
    assert log.lines == [("error", "m: KeyError: 'x'")]


@pytest.mark.parametrize("final_sent", [False, True])
def test_the_error_is_sent_unless_the_final_response_went_out(final_sent: bool) -> None:
    sent: list[BaseException] = []
    exc = Refused("bad")
    log = Logger()
    fail_request(exc, model="m", expected=(Refused,), logger=log, send_error=None if final_sent else sent.append)
    assert sent == ([] if final_sent else [exc]) and log.lines == []


def test_a_failed_send_is_a_warning_never_raised() -> None:
    def gone(_exc: BaseException) -> None:
        raise RuntimeError("stream closed")

    log = Logger()
    fail_request(ValueError("boom"), model="tensorrt_llm_bls", expected=(), logger=log, send_error=gone)
    assert log.lines == [
        ("error", "tensorrt_llm_bls: ValueError: boom"),
        ("warn", "tensorrt_llm_bls: could not send the error: stream closed"),
    ]
