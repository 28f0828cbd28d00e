"""--seed and --repeats: per-request seeds, one record per (question, repeat), resume per repeat.

Runs the real CLI against the loopback test server (`seeded_replies` answers by the request's seed,
like a sampler a seed makes repeatable). Seeds are checked against an independent SHA-256 here.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from support.cli import eval_args, read_records, run_cli
from support.datagen import CLASSES

from evaluator.core.records import derive_seed

K = 3
ROWS = 12


def expected_seed(base: int, sid: str, repeat: int) -> int:
    digest = hashlib.sha256(f"doccount-seed-v1:{base}:{repeat}:{sid}".encode()).digest()
    return int.from_bytes(digest[:8], "big") % 2**31


def test_derive_seed_is_stable_distinct_and_in_range() -> None:
    ids = [f"doc-{i:04d}" for i in range(200)]
    seeds = {(sid, r): derive_seed(7, sid, r) for sid in ids for r in range(5)}
    assert all(seeds[(sid, r)] == expected_seed(7, sid, r) for sid, r in seeds)
    assert len(set(seeds.values())) == len(seeds)  # different per question and per repeat
    assert all(0 <= s < 2**31 for s in seeds.values())
    assert derive_seed(7, "doc-0000", 0) != derive_seed(8, "doc-0000", 0)
    assert derive_seed(-3, "doc-0000", 0) == expected_seed(-3, "doc-0000", 0)


def _evaluate(server, doc_data: str, root: Path, *extra: str):
    return run_cli("evaluate", *eval_args(server.base_url, doc_data, root), "--quiet", *extra)


def test_no_seed_no_repeats_sends_and_writes_what_it_did_before(
    server, doc_data: str, tmp_path: Path
) -> None:
    root = tmp_path / "run"
    res = _evaluate(server, doc_data, root)
    assert res.returncode == 0, res.stderr
    assert all("seed" not in r["body"] for r in server.requests())
    records = read_records(root)
    assert len(records) == ROWS
    assert all("seed" not in r and "repeat" not in r for r in records)
    config = json.loads((root / "run_config.json").read_text())
    assert "seed" not in config and "repeats" not in config
    res = run_cli("score", "--run-root", str(root), "--no-report")
    assert res.returncode == 0, res.stderr
    summary = json.loads((root / "scores" / "summary.json").read_text())
    assert "repeats" not in summary and summary["primary"]["questions"] == ROWS


def test_seeded_repeats_records_resume_and_identity(server, doc_data: str, tmp_path: Path) -> None:
    server.set_config(seeded_replies=[f"<answer>{n}</answer>" for n in range(1, 10)])
    root = tmp_path / "run"
    res = _evaluate(server, doc_data, root, "--seed", "7", "--repeats", str(K))
    assert res.returncode == 0, res.stderr
    assert f"{ROWS} questions x {K} repeats, 0 already done, {ROWS * K} to evaluate" in res.stderr
    sent = Counter((r["body"]["seed"]) for r in server.requests())
    records = read_records(root)
    assert len(records) == ROWS * K
    keys = {(r["sample_id"], r["repeat"]) for r in records}
    assert keys == {(f"doc-{i:04d}", r) for i in range(ROWS) for r in range(K)}
    for rec in records:
        assert rec["seed"] == expected_seed(7, rec["sample_id"], rec["repeat"])
        assert rec["parsed_answer"] == rec["seed"] % 9 + 1  # the server's seeded reply
    assert sent == Counter(r["seed"] for r in records)  # one request per record, each with its seed
    config = json.loads((root / "run_config.json").read_text())
    assert config["seed"] == 7 and config["repeats"] == K

    # Resume per (question, repeat): drop the last 5 records; only those are sent again, same seeds.
    lines = (root / "responses.partial.jsonl").read_bytes().splitlines(keepends=True)
    dropped = [json.loads(line) for line in lines[-5:]]
    (root / "responses.partial.jsonl").write_bytes(b"".join(lines[:-5]))
    server.reset()
    res = _evaluate(server, doc_data, root, "--seed", "7", "--repeats", str(K))
    assert res.returncode == 0, res.stderr
    assert f"{ROWS * K - 5} already done, 5 to evaluate" in res.stderr
    assert sorted(r["body"]["seed"] for r in server.requests()) == sorted(r["seed"] for r in dropped)
    again = read_records(root)[-5:]
    assert sorted((r["sample_id"], r["repeat"], r["response_text"]) for r in again) == sorted(
        (r["sample_id"], r["repeat"], r["response_text"]) for r in dropped
    )


def test_seed_and_repeats_are_part_of_the_run_identity(server, doc_data: str, tmp_path: Path) -> None:
    root = tmp_path / "run"
    assert _evaluate(server, doc_data, root, "--limit", "2").returncode == 0
    res = _evaluate(server, doc_data, root, "--limit", "2", "--seed", "1")
    assert res.returncode == 2 and "different seed" in res.stderr, res.stderr
    # repeats may grow (a sweep's amended run): only the new repeat is sent; they may not shrink
    server.reset()
    res = _evaluate(server, doc_data, root, "--limit", "2", "--repeats", "2")
    assert res.returncode == 0 and "2 already done, 2 to evaluate" in res.stderr, res.stderr
    assert len(server.requests()) == 2
    assert sorted(r.get("repeat", 0) for r in read_records(root)) == [0, 0, 1, 1]
    res = _evaluate(server, doc_data, root, "--limit", "2")
    assert res.returncode == 2 and "different repeats" in res.stderr, res.stderr
    seeded = tmp_path / "seeded"
    assert _evaluate(server, doc_data, seeded, "--limit", "2", "--seed", "1").returncode == 0
    res = _evaluate(server, doc_data, seeded, "--limit", "2", "--seed", "2")
    assert res.returncode == 2 and "seed" in res.stderr, res.stderr
    res = _evaluate(server, doc_data, tmp_path / "x", "--seed", "1", "--extra-body-json", '{"seed": 3}')
    assert res.returncode == 2 and "--seed" in res.stderr, res.stderr


def _right(rec: dict) -> bool:
    return rec.get("status") == "ok" and rec.get("parsed_answer") == rec["ground_truth"]


def test_score_compare_and_report_with_repeats(server, doc_data: str, tmp_path: Path) -> None:
    """Scoring a repeated run: the headline is the mean of the per-repeat accuracies over every question;
    a missing (question, repeat) counts as wrong in its repeat; compare pairs questions by mean correctness."""
    server.set_config(seeded_replies=[f"<answer>{n}</answer>" for n in range(1, 10)])
    runs = {}
    for seed in (7, 8):
        root = tmp_path / f"run{seed}"
        assert _evaluate(server, doc_data, root, "--seed", str(seed), "--repeats", str(K)).returncode == 0
        runs[seed] = root
    # one (question, repeat) record lost: it must count as missing and wrong
    root = runs[7]
    lines = (root / "responses.partial.jsonl").read_bytes().splitlines(keepends=True)
    lost = json.loads(lines[4])
    (root / "responses.partial.jsonl").write_bytes(b"".join(lines[:4] + lines[5:]))
    res = run_cli("score", "--run-root", str(root))
    assert res.returncode == 0, res.stderr
    summary = json.loads((root / "scores" / "summary.json").read_text())
    records = {(r["sample_id"], r["repeat"]): r for r in read_records(root)}
    ids = [f"doc-{i:04d}" for i in range(ROWS)]
    matrix = np.array(
        [[_right(records[(s, r)]) if (s, r) in records else False for r in range(K)] for s in ids]
    )
    per_repeat = matrix.sum(axis=0) / ROWS
    rep = summary["repeats"]
    assert [p["accuracy"] for p in rep["per_repeat"]] == pytest.approx(per_repeat.tolist())
    assert summary["primary"]["accuracy"] == pytest.approx(per_repeat.mean())
    assert summary["primary"]["questions"] == ROWS and summary["primary"]["responses"] == ROWS * K
    assert rep["std_accuracy"] == pytest.approx(float(np.std(per_repeat, ddof=1)))
    assert summary["methods"]["interval"] == "question_cluster_bootstrap"
    assert summary["outcomes"]["missing"] == 1 and sum(summary["outcomes"].values()) == ROWS * K
    assert rep["agreement"]["always_right"] == int(matrix.all(axis=1).sum())
    # per-class tables: mean over repeats within the class
    for cls, v in summary["groups"]["target_class"]["values"].items():
        members = [i for i in range(ROWS) if CLASSES[i % 4] == cls]
        assert v["questions"] == len(members) and v["accuracy"] == pytest.approx(matrix[members].mean())
    merged = [json.loads(line) for line in (root / "responses.jsonl").read_text().splitlines()]
    assert [(r["sample_id"], r.get("repeat")) for r in merged] == [(s, r) for s in ids for r in range(K)]
    by_key = {(r["sample_id"], r["repeat"]): r for r in merged}
    assert by_key[(lost["sample_id"], lost["repeat"])]["status"] == "missing"
    assert [r["sample_id"] for r in merged if r["status"] == "missing"] == [lost["sample_id"]]
    md = (root / "scores" / "summary.md").read_text()
    assert "## Repeats (3 samples per question)" in md and "majority vote" in md
    html = (root / "scores" / "report.html").read_text()
    assert html.count('<tr class="q ') == ROWS and "repeat 2</span>" in html

    # compare: pairs by question on the mean correctness over repeats
    res = run_cli("compare", str(runs[7]), str(runs[8]), "--output", str(tmp_path / "c.json"))
    assert res.returncode == 0, res.stderr
    data = json.loads((tmp_path / "c.json").read_text())
    other = {(r["sample_id"], r["repeat"]): r for r in read_records(runs[8])}
    m8 = np.array([[_right(other[(s, r)]) for r in range(K)] for s in ids])
    pair = data["pairs"][0]
    assert pair["questions"] == ROWS and pair["mcnemar_exact_p"] is None
    assert pair["difference"] == pytest.approx(matrix.mean() - m8.mean())
    a, b = matrix.mean(axis=1), m8.mean(axis=1)
    assert pair["table"]["only_a"] == int((a > b).sum()) and pair["table"]["only_b"] == int((b > a).sum())
    assert "n/a (repeats)" in res.stdout


def test_reproduce_of_a_seeded_repeated_run_is_identical_response_for_response(
    server, doc_data: str, tmp_path: Path
) -> None:
    """archive + reproduce restore --seed and --repeats; responses pair by (question, repeat)."""
    server.set_config(seeded_replies=[f"I count.\n<answer>{n}</answer>" for n in range(1, 10)])
    root = tmp_path / "orig"
    assert _evaluate(server, doc_data, root, "--seed", "3", "--repeats", "2", "--limit", "4").returncode == 0
    assert run_cli("score", "--run-root", str(root), "--no-report").returncode == 0
    archive = tmp_path / "orig.tar.gz"
    res = run_cli("archive", "--run-root", str(root), "--output", str(archive))
    assert res.returncode == 0, res.stderr
    server.reset()
    new = tmp_path / "again"
    res = run_cli(
        "reproduce", str(archive), "--base-url", server.base_url, "--data-files", doc_data,
        "--run-root", str(new), "--quiet",
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert "--seed 3 --repeats 2" in res.stderr
    assert len(server.requests()) == 8
    assert "byte-identical requests (request_sha256): 8 / 8" in res.stdout
    assert (
        "Byte-identical responses (response_text and reasoning_text): 8 / 8; differing: 0 / 8" in res.stdout
    )


def test_compare_page_pairs_repeated_runs_response_by_response(server, doc_data: str, tmp_path: Path) -> None:
    """`compare --html` of two repeated runs: one row per (question, repeat), each repeat against its own."""
    server.set_config(seeded_replies=[f"<answer>{n}</answer>" for n in range(1, 10)])
    roots = [tmp_path / f"run{seed}" for seed in (7, 8)]
    for seed, root in zip((7, 8), roots, strict=True):
        assert _evaluate(server, doc_data, root, "--seed", str(seed), "--repeats", str(K)).returncode == 0
        assert run_cli("score", "--run-root", str(root), "--no-report").returncode == 0
    out = tmp_path / "c.html"
    res = run_cli("compare", *map(str, roots), "--html", str(out))
    assert res.returncode == 0, res.stderr
    html = out.read_text()
    assert html.count('<tr class="q ') == ROWS * K
    for s in (f"doc-{i:04d}" for i in range(ROWS)):
        for r in range(K):
            assert f'id="q-{s}-r{r}"' in html and f"{s} · repeat {r}" in html
