"""The /models probes a refusal's error line relies on (evaluator/evaluation/reachability.py), each within a
whole-request deadline and the model list's size cap (trust3 #5)."""

from __future__ import annotations

import time

import pytest
from support.adversarial_server import RouteServer

from evaluator.evaluation.reachability import answering_base_urls, served_models


def test_served_models_lists_the_models() -> None:
    with RouteServer({}) as srv:
        assert served_models(srv.base_url, None) == ["m"]


@pytest.mark.parametrize("how", ["drip", "drip_headers"])
def test_a_dripping_models_list_ends_at_the_deadline(how: str) -> None:
    with RouteServer({"/v1/models": how}) as srv:
        t0 = time.monotonic()
        assert served_models(srv.base_url, None, timeout_s=1.0) is None
        took = time.monotonic() - t0
    assert took < 2.5, took


def test_answering_base_urls_asks_each_candidate_within_the_deadline() -> None:
    with RouteServer({"/v1/models": "drip"}) as srv:
        t0 = time.monotonic()
        answering = answering_base_urls(srv.base_url + "/x", None, timeout_s=1.0)
        took = time.monotonic() - t0
        hits = len(srv.hits)
    assert answering == []  # only /v1/models would answer, and it drips
    assert took < hits * 1.0 + 2.0, (took, hits)


def test_a_huge_models_list_is_not_a_list() -> None:
    with RouteServer({"/v1/models": "huge"}, huge_bytes=64 * 2**20) as srv:
        assert served_models(srv.base_url, None, timeout_s=20.0) is None
