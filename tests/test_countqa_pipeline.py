"""CountQA on the same path as DocCount: evaluate, score, compare and archive/verify end to end."""

from __future__ import annotations

import json

from support.cli import FAST_RETRIES, eval_args, run_cli
from support.datagen import countqa_rows, sha, write_countqa


def test_countqa_evaluate_score_compare_archive(tmp_path, server) -> None:
    rows = countqa_rows(5)
    write_countqa(tmp_path / "data" / "test-00000.parquet", rows)
    data = str(tmp_path / "data" / "*.parquet")
    runs = {}
    # model A answers every question of an image with its first truth; model B always says 10
    for name, answers in (
        ("a", {sha(r["image"]["bytes"]): f"**{int(r['answers'][0])}**" for r in rows}),
        ("b", {sha(r["image"]["bytes"]): "There are 10 of them." for r in rows}),
    ):
        server.set_config({"answers": answers})
        run = tmp_path / name
        res = run_cli(
            "evaluate",
            "--benchmark",
            "countqa",
            *eval_args(server.base_url, data, run, model=f"model-{name}"),
            *FAST_RETRIES,
        )
        assert res.returncode == 0, res.stderr
        res = run_cli("score", "--run-root", str(run), "--no-report")
        assert res.returncode == 0, res.stderr
        runs[name] = json.loads((run / "scores" / "summary.json").read_text())
    truths = [(int(a), int(r["answers"][0])) for r in rows for a in r["answers"]]
    assert runs["a"]["primary"]["correct"] == sum(t == first for t, first in truths)
    assert runs["b"]["primary"]["correct"] == sum(t == 10 for t, _ in truths)
    assert runs["a"]["primary"]["questions"] == len(truths) == 1 + 2 + 3 + 1 + 2
    assert "relaxed_accuracy" in runs["a"]["extra_metrics"]

    res = run_cli(
        "compare",
        str(tmp_path / "a"),
        str(tmp_path / "b"),
        "--output",
        str(tmp_path / "cmp.json"),
        "--html",
        str(tmp_path / "cmp.html"),
        "--data-files",
        data,
    )
    assert res.returncode == 0, res.stderr
    page = (tmp_path / "cmp.html").read_text()
    assert "model-a" in page and "model-b" in page and "data:image/" in page
    cmp = json.loads((tmp_path / "cmp.json").read_text())
    text = json.dumps(cmp)
    assert "mcnemar" in text.lower()

    archive = tmp_path / "a.tar.gz"
    res = run_cli("archive", "--run-root", str(tmp_path / "a"), "--output", str(archive))
    assert res.returncode == 0, res.stderr
    res = run_cli("verify", str(archive))
    assert res.returncode == 0, res.stdout + res.stderr
