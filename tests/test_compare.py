"""compare: paired table, exact McNemar, paired bootstrap, leaderboard; different question sets refused.

Runs are made by the real evaluator against the loopback TestServer, with chosen wrong answers.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from scipy.stats import binomtest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from support import launch
from support.datagen import doccount_reply, doccount_rows, write_doccount  # noqa: E402
from support.openai_test_server import TestServer  # noqa: E402

from evaluator.cli.main import main  # noqa: E402
from evaluator.scoring.compare import CompareError, compare_runs  # noqa: E402
from evaluator.scoring.stats import BOOTSTRAP_RESAMPLES, BOOTSTRAP_SEED  # noqa: E402

pytestmark = pytest.mark.timeout(120)

N = 24
CLASSES = ("Brand Logo", "Photograph", "Table", "Chart / Graph")
WRONG = {
    "alpha": {1, 5, 9},
    "beta": {1, 2, 3, 4, 6, 7, 13, 17, 22},
    "gamma": {0, 5, 10, 11, 14, 19},
}
CLI = [sys.executable, "-c", "from evaluator.cli import main; main()"]


def ids(indices: set[int]) -> set[str]:
    return {f"doc-{i:04d}" for i in indices}


def evaluate(data: Path, run: Path, answers: dict[str, str], *extra: str) -> None:
    with TestServer({"answers": answers}) as srv:
        r = CliRunner().invoke(
            main,
            ["evaluate", "--model", f"model-{run.name}", "--base-url", srv.base_url, "--data-files",
             str(data / "*.parquet"), "--run-root", str(run), "--quiet", *extra],
            env={"MODEL_API_KEY": None, "MODEL_API_BASE_URL": None},
        )  # fmt: skip
    assert r.exit_code == 0, r.output


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("cmp")
    rows = doccount_rows(N)
    write_doccount(base / "data" / "test-0.parquet", rows)
    out = {}
    for name, wrong in WRONG.items():
        evaluate(base / "data", base / name, doccount_reply(rows, ids(wrong)))
        out[name] = base / name
    evaluate(base / "data", base / "short", doccount_reply(rows), "--limit", "20")
    out["short"] = base / "short"
    return out


def correct_vector(name: str) -> list[bool]:
    return [i not in WRONG[name] for i in range(N)]


def run_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MODEL_API")}
    return launch.run([*CLI, *args], cwd=cwd, capture_output=True, text=True, env=env, timeout=120)


def test_two_runs_paired_table_mcnemar_and_bootstrap(runs: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "cmp.json"
    r = CliRunner().invoke(main, ["compare", str(runs["alpha"]), str(runs["beta"]), "--output", str(out)])
    assert r.exit_code == 0, r.output
    data = json.loads(out.read_text())
    (pair,) = data["pairs"]
    a, b = correct_vector("alpha"), correct_vector("beta")
    both = sum(x and y for x, y in zip(a, b, strict=True))
    only_a = sum(x and not y for x, y in zip(a, b, strict=True))
    only_b = sum(y and not x for x, y in zip(a, b, strict=True))
    neither = N - both - only_a - only_b
    assert (pair["a"], pair["b"], pair["questions"]) == ("alpha", "beta", N)
    assert pair["table"] == {"both_correct": both, "only_a": only_a, "only_b": only_b, "neither": neither}
    assert pair["difference"] == pytest.approx((sum(a) - sum(b)) / N)
    assert pair["mcnemar_exact_p"] == pytest.approx(binomtest(only_a, only_a + only_b, 0.5).pvalue, rel=1e-12)

    # The bootstrap interval, recomputed with numpy from the documented recipe.
    rng = np.random.default_rng(BOOTSTRAP_SEED)
    idx = rng.integers(0, N, size=(BOOTSTRAP_RESAMPLES, N))
    av, bv = np.array(a, dtype=float), np.array(b, dtype=float)
    diffs = av[idx].mean(axis=1) - bv[idx].mean(axis=1)
    assert pair["difference_ci95"] == pytest.approx(list(np.percentile(diffs, [2.5, 97.5])), abs=1e-9)
    assert data["methods"]["bootstrap_resamples"] == BOOTSTRAP_RESAMPLES

    # The leaderboard entries carry Wilson intervals; stdout shows the paired 2x2 table.
    for entry in data["leaderboard"]:
        k = entry["correct"]
        w = binomtest(k, N).proportion_ci(method="wilson")
        assert entry["ci95"] == pytest.approx([w.low, w.high], abs=1e-12)
    assert "| alpha right | " + f"{both} | {only_a} |" in r.stdout
    assert "| alpha wrong | " + f"{only_b} | {neither} |" in r.stdout

    # Same inputs, same bytes.
    again = compare_runs([runs["alpha"], runs["beta"]])
    assert json.dumps(again.data, sort_keys=True) == json.dumps(data, sort_keys=True)


def test_three_runs_leaderboard_like_table_5(runs: dict[str, Path]) -> None:
    result = compare_runs([runs["beta"], runs["alpha"], runs["gamma"]])
    board = result.data["leaderboard"]
    expected_order = sorted(WRONG, key=lambda n: (len(WRONG[n]), n))
    assert [e["run"] for e in board] == expected_order
    assert [e["rank"] for e in board] == [1, 2, 3]
    for e in board:
        vec = correct_vector(e["run"])
        assert e["correct"] == sum(vec) and e["questions"] == N
        for c_index, cls in enumerate(CLASSES):
            sub = [vec[i] for i in range(N) if i % 4 == c_index]
            cell = e["groups"]["target_class"][cls]
            assert (cell["questions"], cell["correct"]) == (len(sub), sum(sub))
            w = binomtest(sum(sub), len(sub)).proportion_ci(method="wilson")
            assert cell["ci95"] == pytest.approx([w.low, w.high], abs=1e-12)
    # Markdown: one header with the four classes then the total, one line per run in rank order.
    md = result.markdown.splitlines()
    header = next(line for line in md if line.startswith("| Rank"))
    assert header.index("Brand Logo") < header.index("Photograph") < header.index("Table")
    assert header.index("Chart / Graph") < header.index("Acc. [95% CI]")
    lines = [
        line
        for line in md
        if line.startswith("| 1 |") or line.startswith("| 2 |") or line.startswith("| 3 |")
    ]
    assert [line.split(" | ")[1] for line in lines] == expected_order
    leader = board[0]
    assert f"{100 * leader['accuracy']:.2f} [" in lines[0]
    # Pairwise against the leader for more than two runs.
    assert [(p["a"], p["b"]) for p in result.data["pairs"]] == [
        (expected_order[0], n) for n in expected_order[1:]
    ]


def test_different_question_sets_are_refused_unless_intersect(runs: dict[str, Path], tmp_path: Path) -> None:
    r = run_cli("compare", str(runs["alpha"]), str(runs["short"]), cwd=tmp_path)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "different question sets" in r.stderr and "--intersect" in r.stderr
    result = compare_runs([runs["alpha"], runs["short"]], intersect=True)
    assert result.data["questions"] == 20 and result.data["intersect"] is True
    alpha = next(e for e in result.data["leaderboard"] if e["run"] == "alpha")
    assert alpha["correct"] == sum(i not in WRONG["alpha"] for i in range(20))
    assert any("--intersect" in w for w in result.warnings)
    assert any("covers 20 of the 24 questions" in w for w in result.warnings)


def test_compare_reads_partial_records_without_a_scored_responses_file(runs: dict[str, Path]) -> None:
    # No run was scored: compare merges responses.partial.jsonl with the manifest itself.
    assert not (runs["gamma"] / "responses.jsonl").exists()
    stale = runs["alpha"] / "responses.jsonl"
    stale.write_text('{"stale": true}\n')
    try:
        result = compare_runs([runs["alpha"], runs["gamma"]])
    finally:
        stale.unlink()
    assert result.data["pairs"][0]["accuracy_a"] == sum(correct_vector("alpha")) / N


def test_compare_user_errors(runs: dict[str, Path], tmp_path: Path) -> None:
    with pytest.raises(CompareError, match="at least two"):
        compare_runs([runs["alpha"]])
    with pytest.raises(CompareError, match="twice"):
        compare_runs([runs["alpha"], runs["alpha"]])
    r = CliRunner().invoke(main, ["compare", str(runs["alpha"]), str(tmp_path / "missing")])
    assert r.exit_code == 2 and isinstance(r.exception, SystemExit)
    assert "does not exist" in r.stderr
    r = CliRunner().invoke(main, ["compare", str(runs["alpha"]), str(runs["beta"]), "--output",
                                  str(tmp_path / "no" / "dir" / "x.json")])  # fmt: skip
    assert r.exit_code == 2 and "cannot write" in r.stderr
