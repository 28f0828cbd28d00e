"""A scored run with a report, made by the real CLI: twelve DocCount pages with every outcome, and what
each row of the report should show (test_report.py reads the HTML, test_report_browser.py drives it)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from support.cli import eval_args, run_cli
from support.datagen import doccount_rows, image_bytes, sha, write_doccount

NEEDLE = "needle-phrase"
INJECTION = "<script>window.__pwned = 1</script>"


def make_run(tmp: Path, server, variant: bool = False) -> tuple[Path, list[dict], dict]:
    """A scored run of 12 DocCount pages with every outcome, and what each row should show.

    0 right | 1 over by 2 | 2 under by 1 | 3 parse failure (says the needle) | 4 request error |
    5 missing (its record removed) | 6 data error (released hash wrong) | 7 image replaced in the data
    after evaluation (its thumbnail must be refused) | 8 right, reply with HTML in it | rest right.
    `variant` swaps rows 0 and 1 (0 wrong by +1, 1 right) for the comparison page.
    """
    tmp.mkdir(parents=True, exist_ok=True)
    rows = doccount_rows(12)
    bad = image_bytes(999)
    rows[6]["image_sha256"] = sha(bad)  # well-formed but not the hash of the bytes: a data error
    data = tmp / "data" / "test-00000-of-00001.parquet"
    write_doccount(data, rows)
    answers: dict[str, str] = {}
    offsets = {1: 2, 2: -1} if not variant else {0: 1}
    expected: dict[str, dict[str, Any]] = {}
    for i, r in enumerate(rows):
        sid, truth = r["sample_id"], r["answer"]
        n = truth + offsets.get(i, 0)
        reply = f"I see {n} regions.\n<answer>{n}</answer>"
        if i == 3:
            reply = f"Perhaps {n} of them, a {NEEDLE} in a haystack."
        if i == 8:
            reply = f"Counting {INJECTION} <b>bold</b> {n}.\n<answer>{n}</answer>"
        answers[r["image_sha256"]] = reply
        outcome = {3: "parse_failure", 4: "request_error", 5: "missing", 6: "data_error"}.get(i, "ok")
        error = n - truth if outcome == "ok" else None
        expected[sid] = {
            "outcome": outcome,
            "error": error,
            "correct": error == 0,
            "needle": i == 3,
            "no_thumb": i in (6, 7),
        }
    server.set_config(
        {
            "answers": answers,
            "reasoning": "Let me count the regions one by one.",
            "script": {rows[4]["image_sha256"]: ["500"] * 20},
        }
    )
    run = tmp / "run"
    res = run_cli(
        "evaluate",
        *eval_args(
            server.base_url, str(tmp / "data" / "*.parquet"), run, model="model-b" if variant else "model-a"
        ),
        "--max-retries",
        "0",
        "--quiet",
    )
    assert res.returncode == 3, res.stderr  # the request error
    partial = run / "responses.partial.jsonl"
    kept = [
        line
        for line in partial.read_text().splitlines()
        if json.loads(line)["sample_id"] != rows[5]["sample_id"]
    ]
    partial.write_text("".join(line + "\n" for line in kept))
    # Replace row 7's image after the run (a self-consistent but different data file).
    other = image_bytes(777)
    rows7 = [dict(r) for r in rows]
    rows7[7] = {**rows7[7], "image": {"bytes": other, "path": "x.jpg"}, "image_sha256": sha(other)}
    write_doccount(data, rows7)
    res = run_cli("score", "--run-root", str(run))
    assert res.returncode == 0, res.stderr
    # absolute data paths are not recorded in run_config.json, so the data is named here
    res = run_cli("report", "--run-root", str(run), "--data-files", str(tmp / "data" / "*.parquet"))
    assert res.returncode == 0, res.stderr
    assert rows[7]["sample_id"] in res.stderr  # the refused image is reported
    return run, rows, expected
