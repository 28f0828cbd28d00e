"""An unexpected exception in the send path costs one row, never the run, and says what the server
answered: one redacted line on stderr (no traceback, no key), and a retry error that keeps the status
and the attempt. The exception is raised by hand: the boundary leaves no server reply that raises one."""

from __future__ import annotations

import logging

import pytest

from evaluator.core.boundary import KeyFilter
from evaluator.request.client import ChatSender, Endpoint, EndpointPool, SendOutcome, make_client
from evaluator.request.ratelimit import RetryPolicy

KEY = "sk-proj-test-KEY-0123456789abcdefXYZ"


@pytest.mark.parametrize("status", [200, None])
def test_an_evaluator_error_keeps_the_status_and_prints_one_redacted_line(
    status: int | None, caplog: pytest.LogCaptureFixture
) -> None:
    url = "http://127.0.0.1:9/v1"
    endpoint = Endpoint(url=url, client=make_client(url, KEY, 5.0, 1))
    sender = ChatSender(EndpointPool([endpoint]), RetryPolicy(), KeyFilter(KEY))
    outcome = SendOutcome(completion=None, attempts=2, last_status=status)
    with caplog.at_level(logging.ERROR):
        sender._unexpected(outcome, endpoint, ValueError(f"total_tokens {KEY[:20]}|{KEY[12:]}\nsecond line"))
    (err,) = outcome.retry_errors
    assert (err.kind, err.attempt, err.status_code) == ("evaluator_error", 2, status)
    assert (f"the server answered HTTP {status}" in err.message) == (status is not None)
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and "\n" not in lines[0] and "Traceback" not in lines[0]
    for text in (*lines, err.message, outcome.error or ""):
        assert not any(KEY[i : i + 8] in text for i in range(len(KEY) - 7))
