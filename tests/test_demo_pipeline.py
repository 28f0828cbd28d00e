"""`doccount demo` end to end: sample pages, the reference model on loopback, evaluate, score."""

from __future__ import annotations

import json
import re

import pytest

PAGES = 40  # the demo's default


@pytest.mark.timeout(900)
def test_demo_runs_the_whole_pipeline(demo_run) -> None:
    res, run = demo_run  # `doccount demo` with its defaults (conftest.py), as test_readme reads it too
    assert res.returncode == 0, res.stderr[-3000:]
    summary = json.loads((run / "scores" / "summary.json").read_text())
    assert summary["primary"]["questions"] == PAGES  # the full denominator of the sample set
    merged = [json.loads(x) for x in (run / "responses.jsonl").read_text().splitlines()]
    assert len(merged) == PAGES and all(r["status"] == "ok" for r in merged)
    # the reference model answers in the protocol's format, from the pixels; each record is scored by
    # its own answer tag against the page's truth, and the summary counts exactly those
    for r in merged:
        tag = re.fullmatch(r"(?s).*<answer>(\d+)</answer>\s*", r["response_text"])
        assert r["parse_status"] == "ok" and tag, r["response_text"]
        assert r["parsed_answer"] == int(tag.group(1))
        assert r["correct"] is (r["parsed_answer"] == r["ground_truth"])
    correct = sum(r["correct"] for r in merged)
    assert summary["primary"]["correct"] == correct
    assert summary["primary"]["accuracy"] == correct / PAGES
    config = json.loads((run / "run_config.json").read_text())
    assert config["model"] == "reference-layout-cdla" and config["server"]["models"] == [
        "reference-layout-cdla"
    ]
    assert (run / "scores" / "summary.md").read_text() in res.stdout  # the summary is printed, whole
    assert str(run) in res.stderr  # and the run folder's path
