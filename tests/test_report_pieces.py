"""The pieces of the run's report (evaluator/report/pieces.py): a row's status cell (status_bits) badges an
answered row by its correctness, and says the request's status apart."""

from __future__ import annotations

from support.boards import row, typed

from evaluator.report.pieces import status_bits


def test_a_wrong_answer_has_no_green_ok_badge_beside_it() -> None:
    wrong, right = typed([row(0, False), row(1, True)])
    assert status_bits(wrong)[0] == ("badge st-wrong", "wrong")
    assert status_bits(right)[0] == ("badge st-right", "right")
    assert ("detail", "request ok, answer parsed") in status_bits(wrong)  # the request's status, apart
    failed = typed([row(2, False, status="request_error", parsed_answer=None)])[0]
    assert status_bits(failed)[0] == ("badge st-request_error", "request error")
