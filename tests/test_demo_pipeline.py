"""`doccount demo` end to end: sample pages, the reference model on loopback, evaluate, score."""

from __future__ import annotations

import json

from conftest import run_cli


def test_demo_runs_the_whole_pipeline(tmp_path) -> None:
    run = tmp_path / "demo"
    res = run_cli(
        "demo", "--pages", "8", "--run-root", str(run), "--data-root", str(tmp_path / "data"), timeout=600
    )
    assert res.returncode == 0, res.stderr[-3000:]
    summary = json.loads((run / "scores" / "summary.json").read_text())
    assert summary["primary"]["questions"] == 8  # the full denominator of the sample set
    merged = [json.loads(x) for x in (run / "responses.jsonl").read_text().splitlines()]
    assert len(merged) == 8 and all(r["status"] == "ok" for r in merged)
    # the reference model answers in the protocol's format, from the pixels
    assert all(
        r["parse_status"] == "ok" and r["response_text"].rstrip().endswith("</answer>") for r in merged
    )
    config = json.loads((run / "run_config.json").read_text())
    assert config["model"] == "reference-layout-cdla" and config["server"]["models"] == [
        "reference-layout-cdla"
    ]
    assert "Exact" in res.stdout or "exact" in res.stdout  # the summary is printed
    assert str(run) in res.stderr  # and the run folder's path
