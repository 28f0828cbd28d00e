"""score: full denominator, metrics checked against independent computations, determinism, bad input.

End-to-end runs use the real evaluator against the loopback TestServer; pure metric tests write the
run folder (run_config.json, manifest.jsonl, responses.partial.jsonl) by hand.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner, Result
from scipy.stats import binomtest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from support import launch
from support.datagen import countqa_rows, doccount_rows, sha, write_countqa, write_doccount  # noqa: E402
from support.openai_test_server import TestServer  # noqa: E402

from evaluator.cli.main import main  # noqa: E402
from evaluator.data.benchmarks.base import ManifestEntry  # noqa: E402
from evaluator.data.parquet import manifest_digest  # noqa: E402
from evaluator.scoring import ScoreError, merge_run, score_run  # noqa: E402

pytestmark = pytest.mark.timeout(120)

CLASSES = ("Brand Logo", "Photograph", "Table", "Chart / Graph")
CLI = [sys.executable, "-c", "from evaluator.cli import main; main()"]
TRUTHS = [3, 7, 12, 25, 1, 8, 15, 30, 2, 6, 11, 21, 5, 10, 20, 4]
# sample index -> what the server replies: ("tag", n) a valid answer, ("untagged", n) a parse failure,
# ("error",) an HTTP 400 (request error); indices in MISSING lose their record after the run.
PLAN: dict[int, tuple] = {
    1: ("tag", 8),  # over by one
    2: ("tag", 10),  # under by two
    5: ("untagged", 8),  # parse failure; the last-integer fallback would be right
    7: ("tag", 31),
    9: ("error",),
    11: ("untagged", 3),  # parse failure, fallback wrong too
    14: ("tag", 19),
}
MISSING = {4, 13}


def clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("MODEL_API")}


def run_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return launch.run([*CLI, *args], cwd=cwd, capture_output=True, text=True, env=clean_env(), timeout=120)


def run_cli_process(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *args], cwd=cwd, capture_output=True, text=True, env=clean_env(), timeout=120
    )


def evaluate(cwd: Path, data_glob: str, run_root: Path, config: dict[str, Any], *extra: str) -> None:
    """The real evaluator (in-process through click, to spare the interpreter start) against TestServer."""
    with TestServer(config) as srv:
        r = CliRunner().invoke(
            main,
            ["evaluate", "--model", "test-model", "--base-url", srv.base_url,
             "--data-files", str(cwd / data_glob), "--run-root", str(run_root), "--max-retries", "0", "--quiet",
             *extra],
            env={"MODEL_API_KEY": None, "MODEL_API_BASE_URL": None},
        )  # fmt: skip
    assert r.exit_code in (0, 3), r.output  # 3: some request errors, by design
    assert r.exception is None or isinstance(r.exception, SystemExit), r.exception


def score_in_process(run: Path) -> Result:
    """`score` through click in this process: exit code and separate stdout/stderr, like the shell sees."""
    return CliRunner().invoke(main, ["score", "--run-root", str(run)])


def doc_data() -> list[dict[str, Any]]:
    rows = doccount_rows(len(TRUTHS))
    for row, truth in zip(rows, TRUTHS, strict=True):
        row["answer"] = truth
    return rows


def predicted(i: int) -> int | None:
    """The parsed answer the plan leads to (None: no parsed answer)."""
    if i in MISSING:
        return None
    plan = PLAN.get(i, ("tag", TRUTHS[i]))
    return plan[1] if plan[0] == "tag" else None


@pytest.fixture(scope="module")
def doc_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("doc")
    rows = doc_data()
    write_doccount(base / "data" / "test-0.parquet", rows)
    answers, script = {}, {}
    for i, row in enumerate(rows):
        kind = PLAN.get(i, ("tag", TRUTHS[i]))
        h = row["image_sha256"]
        if kind[0] == "tag":
            answers[h] = (
                f"Counting carefully: {kind[1] + 100} candidates, {kind[1]} kept.\n<answer>{kind[1]}</answer>"
            )
        elif kind[0] == "untagged":
            answers[h] = f"There are {kind[1]} of them."
        else:
            script[h] = ["400"]
    run = base / "run"
    evaluate(base, "data/*.parquet", run, {"answers": answers, "script": script})
    partial = run / "responses.partial.jsonl"
    lost = {rows[i]["sample_id"] for i in MISSING}
    kept = [ln for ln in partial.read_text().splitlines() if json.loads(ln)["sample_id"] not in lost]
    partial.write_text("\n".join(kept) + "\n")
    return run


def fresh_copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("scores", "responses.jsonl", ".lock"))
    return dst


def test_full_denominator_and_numbers(doc_run: Path, tmp_path: Path) -> None:
    run = fresh_copy(doc_run, tmp_path / "run")
    result = score_run(run)
    s = result.summary
    n = len(TRUTHS)
    preds = [predicted(i) for i in range(n)]
    correct = [p is not None and p == t for p, t in zip(preds, TRUTHS, strict=True)]
    k = sum(correct)
    assert s["primary"]["questions"] == n
    assert s["primary"]["correct"] == k
    assert s["primary"]["accuracy"] == k / n
    ci = binomtest(k, n).proportion_ci(method="wilson")
    assert s["primary"]["ci95"] == pytest.approx([ci.low, ci.high], abs=1e-12)
    assert s["outcomes"] == {
        "ok": n - len(MISSING) - 3,
        "parse_failure": 2,
        "request_error": 1,
        "data_error": 0,
        "missing": len(MISSING),
    }

    # Per class: DocCount's four classes in the paper's order, each with a Wilson interval.
    g = s["groups"]["target_class"]
    assert g["order"] == list(CLASSES)
    for ci_index, cls in enumerate(CLASSES):
        idx = [i for i in range(n) if i % 4 == ci_index]
        kc = sum(correct[i] for i in idx)
        v = g["values"][cls]
        assert (v["questions"], v["correct"]) == (len(idx), kc)
        w = binomtest(kc, len(idx)).proportion_ci(method="wilson")
        assert v["ci95"] == pytest.approx([w.low, w.high], abs=1e-12)

    # Error anatomy over parsed answers only.
    errs = [p - t for p, t in zip(preds, TRUTHS, strict=True) if p is not None]
    e = s["error_anatomy"]
    assert e["parsed"] == len(errs)
    assert e["mean_absolute_error"] == pytest.approx(sum(abs(x) for x in errs) / len(errs))
    assert e["mean_signed_error"] == pytest.approx(sum(errs) / len(errs))
    assert e["over_count_rate"] == pytest.approx(sum(x > 0 for x in errs) / len(errs))
    assert e["under_count_rate"] == pytest.approx(sum(x < 0 for x in errs) / len(errs))
    assert e["off_by_one_rate"] == pytest.approx(sum(abs(x) == 1 for x in errs) / len(errs))

    # Buckets by true count (no zero counts in this DocCount data, so no "0" bucket).
    buckets = s["count_buckets"]
    assert buckets["order"] == ["1-5", "6-10", "11-20", "21+"]
    spans = {"1-5": (1, 5), "6-10": (6, 10), "11-20": (11, 20), "21+": (21, 10**9)}
    for name, (lo, hi) in spans.items():
        idx = [i for i in range(n) if lo <= TRUTHS[i] <= hi]
        assert buckets["values"][name]["questions"] == len(idx)
        assert buckets["values"][name]["correct"] == sum(correct[i] for i in idx)

    # Fallback: diagnostic, separate, and it rescues exactly the untagged reply with the right number.
    fb = s["diagnostic"]["last_integer_fallback"]
    assert "DIAGNOSTIC" in fb["label"]
    assert fb["correct"] == k + 1 and fb["correct_only_with_fallback"] == 1
    assert (s["primary"]["accuracy"], fb["accuracy"]) == (k / n, (k + 1) / n)

    # Usage and latency over the rows that report them: the numbers of the written rows, by numpy.
    merged = [json.loads(x) for x in (run / "responses.jsonl").read_text().splitlines()]
    latencies = [r["latency_s"] for r in merged if r.get("latency_s") is not None]
    tokens = [
        r["usage"]["total_tokens"] for r in merged if (r.get("usage") or {}).get("total_tokens") is not None
    ]
    assert len(latencies) == len(tokens) == n - len(MISSING) - 1
    assert s["usage"]["total_tokens"]["n"] == len(tokens) and s["usage"]["total_tokens"]["sum"] == sum(tokens)
    assert s["latency_s"]["n"] == len(latencies) and s["latency_s"]["max"] == max(latencies)
    for q in (50, 95):
        assert s["latency_s"][f"p{q}"] == pytest.approx(float(np.percentile(latencies, q)), abs=1e-12)

    md = result.markdown
    assert f"{k} / {n}" in md and "Diagnostic only" in md
    assert "![Accuracy by subgroup" in md and "per_class_accuracy.png" in md
    for name in ("per_class_accuracy.png", "predicted_vs_true.png"):
        assert (run / "scores" / name).read_bytes().startswith(b"\x89PNG")


def test_responses_jsonl_one_row_per_question_in_manifest_order(doc_run: Path, tmp_path: Path) -> None:
    run = fresh_copy(doc_run, tmp_path / "run")
    score_run(run)
    rows = [json.loads(ln) for ln in (run / "responses.jsonl").read_text().splitlines()]
    manifest = [json.loads(ln)["sample_id"] for ln in (run / "manifest.jsonl").read_text().splitlines()]
    assert [r["sample_id"] for r in rows] == manifest
    by_index = {int(r["sample_id"].split("-")[1]): r for r in rows}
    for i in MISSING:
        assert by_index[i]["status"] == "missing" and by_index[i]["correct"] is False
        assert by_index[i]["ground_truth"] == TRUTHS[i] and by_index[i]["target_class"] == CLASSES[i % 4]
    assert by_index[9]["status"] == "request_error" and by_index[9]["outcome"] == "request_error"
    assert by_index[5]["outcome"] == "parse_failure"
    merged = merge_run(run)
    assert [r.sample_id for r in merged.rows] == manifest and merged.summary["primary"]["questions"] == 16
    # the typed rows read what was written: each row's line is its responses.jsonl line
    assert [r.line for r in merged.rows] == rows
    assert [(r.outcome, r.correct) for r in merged.rows] == [(r["outcome"], r["correct"]) for r in rows]


def test_rescoring_is_byte_identical(doc_run: Path, tmp_path: Path) -> None:
    run = fresh_copy(doc_run, tmp_path / "run")
    names = ["responses.jsonl", "scores/summary.json", "scores/summary.md", "scores/per_class_accuracy.png",
             "scores/predicted_vs_true.png"]  # fmt: skip
    r1 = score_in_process(run)
    assert r1.exit_code == 0, r1.output
    first = {name: (run / name).read_bytes() for name in names}
    r2 = score_in_process(run)
    assert r2.exit_code == 0, r2.output
    assert {name: (run / name).read_bytes() for name in names} == first
    # The score command prints summary.md on stdout.
    assert r1.stdout.strip() == first["scores/summary.md"].decode().strip()
    # A copy of the folder elsewhere scores the same (no paths or times in summary.json).
    other = fresh_copy(doc_run, tmp_path / "elsewhere" / "run")
    score_run(other)
    assert (other / "scores/summary.json").read_bytes() == first["scores/summary.json"]


def test_torn_and_garbage_lines_warn_and_keep_the_denominator(doc_run: Path, tmp_path: Path) -> None:
    run = fresh_copy(doc_run, tmp_path / "run")
    partial = run / "responses.partial.jsonl"
    lines = partial.read_text().splitlines()
    lines.insert(3, "this is not json {")
    lines.insert(5, '["a list, not a record"]')
    lines.insert(6, json.dumps({"sample_id": "doc-0000", "status": "weird"}))
    partial.write_text("\n".join(lines) + "\n" + '{"sample_id": "doc-00')  # torn tail, no newline
    r = run_cli("score", "--run-root", str(run), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr
    assert (
        "torn" in r.stderr and "unparseable line(s)" in r.stderr and "not valid response records" in r.stderr
    )
    s = json.loads((run / "scores/summary.json").read_text())
    assert s["primary"]["questions"] == 16
    assert s["inputs"]["partial_torn_tail"] is True and s["inputs"]["partial_bad_lines"] == 2
    assert any("torn" in w for w in s["warnings"])
    assert "## Warnings" in r.stdout


@pytest.mark.parametrize(
    "case", ["no_folder", "a_file", "no_config", "bad_config", "no_manifest", "bad_manifest"]
)
def test_bad_run_folders_give_one_clear_error(doc_run: Path, tmp_path: Path, case: str) -> None:
    run = tmp_path / "run"
    expected = {
        "no_folder": "does not exist",
        "a_file": "is a file",
        "no_config": "has no run_config.json",
        "bad_config": "cannot be read as JSON",
        "no_manifest": "has no manifest.jsonl",
        "bad_manifest": "line 2 is not a valid manifest entry",
    }[case]
    if case == "a_file":
        run.write_text("x")
    elif case != "no_folder":
        fresh_copy(doc_run, run)
        if case == "no_config":
            (run / "run_config.json").unlink()
        elif case == "bad_config":
            (run / "run_config.json").write_text("{ not json")
        elif case == "no_manifest":
            (run / "manifest.jsonl").unlink()
        else:
            lines = (run / "manifest.jsonl").read_text().splitlines()
            lines[1] = '{"no_sample_id": 1}'
            (run / "manifest.jsonl").write_text("\n".join(lines) + "\n")
    if case == "no_folder":  # a real process: exit code and stderr as the shell sees them
        p = run_cli_process("score", "--run-root", str(run), cwd=tmp_path)
        code, err = p.returncode, p.stderr
    else:
        r = score_in_process(run)
        assert isinstance(r.exception, SystemExit), r.exception  # not an uncaught exception
        code, err = r.exit_code, r.stderr
    assert code == 2
    assert "Traceback" not in err
    assert err.startswith("error: ") and expected in err, err


def test_manifest_not_matching_run_config_digest_is_refused(doc_run: Path, tmp_path: Path) -> None:
    run = fresh_copy(doc_run, tmp_path / "run")
    lines = (run / "manifest.jsonl").read_text().splitlines()
    (run / "manifest.jsonl").write_text("\n".join(lines[:-1]) + "\n")  # one question dropped
    r = score_in_process(run)
    assert r.exit_code == 2 and isinstance(r.exception, SystemExit)
    assert "does not match the question set recorded in run_config.json" in r.stderr
    assert not (run / "scores" / "summary.json").exists()


def test_records_from_another_dataset_are_refused(doc_run: Path, tmp_path: Path) -> None:
    # Same sample ids, different images: run_config/manifest of a different release than the records.
    base = tmp_path / "other"
    rows = doccount_rows(len(TRUTHS), start=100)
    for i, row in enumerate(rows):
        row["sample_id"] = f"doc-{i:04d}"
    write_doccount(base / "data" / "test-0.parquet", rows)
    evaluate(base, "data/*.parquet", base / "run", {}, "--limit", "2")
    run = fresh_copy(doc_run, tmp_path / "run")
    for name in ("run_config.json", "manifest.jsonl"):
        shutil.copy(base / "run" / name, run / name)
    r = run_cli("score", "--run-root", str(run), cwd=tmp_path)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "do not match this run's run_config.json/manifest.jsonl" in r.stderr and "image hash" in r.stderr

    # Disjoint sample ids: none of the records belongs to the question set.
    (run / "responses.partial.jsonl").write_text(
        "".join(
            json.dumps({**json.loads(ln), "sample_id": "x-" + json.loads(ln)["sample_id"]}) + "\n"
            for ln in (doc_run / "responses.partial.jsonl").read_text().splitlines()
        )
    )
    r2 = score_in_process(run)
    assert r2.exit_code == 2 and isinstance(r2.exception, SystemExit)
    assert "belongs to this run's question set" in r2.stderr


# ----------------------------------------------------------------------------- hand-written run folders


def write_run(
    root: Path, benchmark: str, entries: list[ManifestEntry], records: list[dict[str, Any]]
) -> Path:
    root.mkdir(parents=True)
    config = {
        "benchmark": benchmark,
        "model": "m",
        "backend": "api",
        "data": {"selection": {"questions": len(entries), "manifest_sha256": manifest_digest(entries)}},
    }
    (root / "run_config.json").write_text(json.dumps(config))
    (root / "manifest.jsonl").write_text("".join(json.dumps(e.to_dict()) + "\n" for e in entries))
    (root / "responses.partial.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return root


def record(
    entry: ManifestEntry, benchmark: str, status: str = "ok", answer: int | None = None, **kw: Any
) -> dict:
    return {
        "sample_id": entry.sample_id,
        "benchmark": benchmark,
        "model": "m",
        "groups": entry.groups,
        "ground_truth": entry.ground_truth,
        "image_sha256": entry.image_sha256,
        "status": status,
        "parsed_answer": answer,
        "parse_status": "ok" if answer is not None else "no_tag",
        "response_text": None if answer is None else f"<answer>{answer}</answer>",
        "correct": answer == entry.ground_truth,
        **kw,
    }


def test_latest_record_wins_and_ground_truth_comes_from_the_manifest(tmp_path: Path) -> None:
    entries = [ManifestEntry(f"s{i}", sha(bytes([i])), t, {"target_class": c})
               for i, (t, c) in enumerate([(4, "Table"), (2, "Photograph"), (9, "Oddity")])]  # fmt: skip
    records = [
        record(entries[0], "doccount", "request_error"),
        record(entries[0], "doccount", answer=4),  # latest: right
        record(entries[1], "doccount", answer=2),
        record(entries[1], "doccount", answer=3),  # latest: wrong
        {**record(entries[2], "doccount", answer=5), "ground_truth": 5, "correct": True},  # stale truth
        record(ManifestEntry("not-in-run", None, 1, {}), "doccount", answer=1),
    ]
    bad = ManifestEntry("s3", None, None, {"target_class": "Table"}, "answer is None, expected an integer")
    entries.append(bad)
    records.append({**record(bad, "doccount", "data_error"), "data_error": bad.data_error})
    run = write_run(tmp_path / "run", "doccount", entries, records)
    s = score_run(run).summary
    assert (s["primary"]["correct"], s["primary"]["questions"]) == (1, 4)
    assert s["outcomes"] == {"ok": 3, "parse_failure": 0, "request_error": 0, "data_error": 1, "missing": 0}
    assert s["count_buckets"]["order"][-1] == "unknown"
    assert s["count_buckets"]["values"]["unknown"]["questions"] == 1
    assert any("ground truth different" in w for w in s["warnings"])
    assert any("not in this run's question set" in w for w in s["warnings"])
    assert s["groups"]["target_class"]["order"] == [*CLASSES, "Oddity"]
    assert s["groups"]["target_class"]["values"]["Brand Logo"]["questions"] == 0
    assert s["groups"]["target_class"]["values"]["Oddity"]["correct"] == 0
    rows = merge_run(run).rows
    assert rows[2].ground_truth == 9 and rows[2].record_ground_truth == 5 and rows[2].correct is False


def test_countqa_relaxed_accuracy_subgroups_and_zero_bucket(tmp_path: Path) -> None:
    rows = countqa_rows(6)  # truths 0,10,11,20,30,31,32,40,41,50,51,52 over 6 images
    write_countqa(tmp_path / "data" / "test-0.parquet", rows)
    # Every question of an image gets the same reply: the first question's truth + 1 (exact for none
    # except where the truth happens to equal it, relaxed within 5% for larger counts).
    answers = {sha(r["image"]["bytes"]): str(int(r["answers"][0]) + 1) for r in rows}
    evaluate(tmp_path, "data/*.parquet", tmp_path / "run", {"answers": answers}, "--benchmark", "countqa")
    s = score_run(tmp_path / "run").summary

    questions = []  # (truth, prediction, is_focused, categories), independently from the data
    for r in rows:
        pred = int(r["answers"][0]) + 1
        for a in r["answers"]:
            questions.append((int(a), pred, r["is_focused"], r["categories"]))

    def relaxed(sub: list[tuple]) -> float:
        return sum(abs(p - t) <= 0.05 * t for t, p, _, _ in sub) / len(sub)

    def exact(sub: list[tuple]) -> int:
        return sum(p == t for t, p, _, _ in sub)

    assert s["primary"]["questions"] == len(questions) == 12
    assert s["primary"]["correct"] == exact(questions)
    assert s["extra_metrics"]["relaxed_accuracy"] == pytest.approx(relaxed(questions))
    for focus in (False, True):
        sub = [q for q in questions if q[2] is focus]
        v = s["groups"]["is_focused"]["values"]["true" if focus else "false"]
        assert v["questions"] == len(sub) and v["correct"] == exact(sub)
        assert v["extra_metrics"]["relaxed_accuracy"] == pytest.approx(relaxed(sub))
    for cat in ("kitchen", "tools"):  # a question counts in each of its categories
        sub = [q for q in questions if cat in q[3]]
        v = s["groups"]["categories"]["values"][cat]
        assert v["questions"] == len(sub) and v["correct"] == exact(sub)
        assert v["extra_metrics"]["relaxed_accuracy"] == pytest.approx(relaxed(sub))
    b = s["count_buckets"]
    assert b["order"][0] == "0"
    assert b["values"]["0"]["questions"] == sum(1 for q in questions if q[0] == 0)
    assert b["values"]["21+"]["questions"] == sum(1 for q in questions if q[0] >= 21)


def test_score_error_is_raised_not_a_traceback_for_library_callers(tmp_path: Path) -> None:
    with pytest.raises(ScoreError, match="does not exist"):
        score_run(tmp_path / "nope")
    with pytest.raises(ScoreError, match="does not exist"):
        merge_run(tmp_path / "nope")


def _plot_children() -> list[int]:
    """Live child processes of this test process that run the plot worker."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            cmdline = (stat.parent / "cmdline").read_bytes()
        except OSError:
            continue
        if int(fields[1]) == os.getpid() and fields[0] != "Z" and b"plot_worker" in cmdline:
            found.append(int(stat.parent.name))
    return found


def test_plots_drawn_by_the_child_are_the_in_process_bytes_and_a_dead_child_is_replaced(
    doc_run: Path, tmp_path: Path
) -> None:
    from evaluator.scoring import answer_pairs, plot_worker

    merged = merge_run(fresh_copy(doc_run, tmp_path / "run"))
    pairs, n = answer_pairs(merged.rows), len(merged.rows)
    outputs = {}
    for how in ("in-process", "child", "killed child"):
        out = tmp_path / how
        out.mkdir()
        if how == "in-process":
            written, problems = plot_worker.render_plots(merged.summary, pairs, n, out)
        else:
            worker = plot_worker.PlotWorker()
            assert worker.proc is not None
            if how == "killed child":
                worker.proc.kill()  # dies before it draws: the parent must draw instead
            worker.submit(merged.summary, pairs, n, out)
            written, problems = worker.result()
        assert problems == [] and sorted(written.values()) == sorted(
            [plot_worker.PLOT_GROUPS, plot_worker.PLOT_PRED_TRUE]
        )
        outputs[how] = {name: (out / name).read_bytes() for name in written.values()}
    assert outputs["child"] == outputs["in-process"] == outputs["killed child"]
    assert not _plot_children()


@pytest.fixture
def savefig_calls(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """Every figure matplotlib renders to a file from now on (its own savefig, wrapped, still drawing)."""
    from matplotlib.figure import Figure

    calls: list[object] = []
    real = Figure.savefig

    def counted(self: Figure, *args: Any, **kwargs: Any) -> None:
        calls.append(self)
        real(self, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", counted)
    return calls


PLOTS = ("scores/per_class_accuracy.png", "scores/predicted_vs_true.png")


def test_rescoring_the_same_folder_does_not_draw_the_plots_again(
    doc_run: Path, tmp_path: Path, savefig_calls: list[object]
) -> None:
    run = fresh_copy(doc_run, tmp_path / "run")
    score_run(run)  # may itself reuse the plots of an earlier test's copy of doc_run
    first = {name: (run / name).read_bytes() for name in PLOTS}
    for name in PLOTS:
        (run / name).unlink()  # written again, from the kept bytes
    savefig_calls.clear()
    score_run(run)
    assert savefig_calls == []
    assert {name: (run / name).read_bytes() for name in PLOTS} == first


def test_different_plot_inputs_still_give_different_plots(
    doc_run: Path, tmp_path: Path, savefig_calls: list[object]
) -> None:
    from evaluator.scoring import answer_pairs, plots

    run = fresh_copy(doc_run, tmp_path / "run")
    score_run(run)
    first = {name: (run / name).read_bytes() for name in PLOTS}
    partial = run / "responses.partial.jsonl"
    lines = partial.read_text().splitlines(keepends=True)
    # question 0's right answer lost (no other test here does that): accuracy, pairs and title all change
    kept = [ln for ln in lines if int(json.loads(ln)["sample_id"].split("-")[1]) != 0]
    assert len(kept) < len(lines)
    partial.write_text("".join(kept))
    savefig_calls.clear()
    score_run(run)
    assert len(savefig_calls) == 2
    for name in PLOTS:
        assert (run / name).read_bytes() != first[name], name
    # Only the model's name (in both titles) differs: drawn again, and not the same bytes.
    merged = merge_run(run)
    pairs, n = answer_pairs(merged.rows), len(merged.rows)
    renamed = {**merged.summary, "model": merged.summary["model"] + "-other"}
    savefig_calls.clear()
    plots.group_accuracy_png(tmp_path / "g.png", renamed)
    plots.predicted_vs_true_png(tmp_path / "p.png", pairs, n, renamed)
    assert len(savefig_calls) == 2
    assert (tmp_path / "g.png").read_bytes() != (run / PLOTS[0]).read_bytes()
    assert (tmp_path / "p.png").read_bytes() != (run / PLOTS[1]).read_bytes()


def test_a_run_that_cannot_be_scored_leaves_no_plot_process(doc_run: Path, tmp_path: Path) -> None:
    run = fresh_copy(doc_run, tmp_path / "run")
    (run / "manifest.jsonl").write_text("not json\n")
    with pytest.raises(ScoreError):
        score_run(run)
    assert not _plot_children()


def test_text_without_a_utf8_form_in_records_scores_and_is_kept(doc_run: Path, tmp_path: Path) -> None:
    """A lone surrogate (valid JSON, no UTF-8 form) in a record's finish reason and in an id outside the
    question set: summary.json keeps it as an escape, summary.md shows U+FFFD; once a UnicodeEncodeError."""
    run = fresh_copy(doc_run, tmp_path / "run")
    partial = run / "responses.partial.jsonl"
    last = json.loads(partial.read_text().splitlines()[-1])
    odd = {**last, "finish_reason": "stop\ud800"}
    stranger = {**last, "sample_id": "not-in-the-set-\udc00"}
    with open(partial, "a", encoding="ascii") as f:  # json.dumps escapes the surrogates
        f.write(json.dumps(odd) + "\n" + json.dumps(stranger) + "\n")
    r = score_in_process(run)
    assert r.exit_code == 0, r.output
    summary = json.loads((run / "scores" / "summary.json").read_bytes().decode("utf-8"))
    assert summary["finish_reasons"]["stop\ud800"] == 1
    assert any("not-in-the-set-\udc00" in w for w in summary["warnings"])
    md = (run / "scores" / "summary.md").read_bytes().decode("utf-8")
    assert "not-in-the-set-\ufffd" in md
    merged = [json.loads(line) for line in (run / "responses.jsonl").read_bytes().splitlines()]
    assert [m["finish_reason"] for m in merged if m["sample_id"] == last["sample_id"]] == ["stop\ud800"]


def test_runs_scored_at_once_in_threads_are_the_bytes_of_one_at_a_time(doc_run: Path, tmp_path: Path) -> None:
    """A sweep scores each run in a thread of its own as the run ends (study.sweep): runs ending together
    are scored at once in one process, and each gets the files a lone `score` writes, plots included."""
    import threading

    from evaluator.report.run_page import score_and_report

    names = ("summary.json", "summary.md", "per_class_accuracy.png", "predicted_vs_true.png")
    runs = []
    # four runs, each missing two questions no other test drops: plots no earlier test here has drawn
    for i, other in enumerate((8, 10, 12, 15)):
        run = fresh_copy(doc_run, tmp_path / "together" / f"run{i}")
        partial = run / "responses.partial.jsonl"
        lines = partial.read_text().splitlines(keepends=True)
        dropped = {f"doc-{i:04d}", f"doc-{other:04d}"}
        partial.write_text("".join(ln for ln in lines if json.loads(ln)["sample_id"] not in dropped))
        runs.append(run)
    alone = [fresh_copy(run, tmp_path / "alone" / run.name) for run in runs]  # the same names: run_name
    notes: list[str] = []
    threads = [
        threading.Thread(target=score_and_report, args=(run, notes.append, True, False)) for run in runs
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    one_at_a_time = (  # in a fresh interpreter: nothing drawn in it before
        "import sys\nfrom pathlib import Path\nfrom evaluator.report.run_page import score_and_report\n"
        "for run in sys.argv[1:]:\n    score_and_report(Path(run), print, True, False)\n"
    )
    res = subprocess.run([sys.executable, "-c", one_at_a_time, *map(str, alone)], capture_output=True,
                         text=True, env=clean_env(), timeout=120)  # fmt: skip
    assert res.returncode == 0, res.stderr
    expected = [{n: (run / "scores" / n).read_bytes() for n in names} for run in alone]
    assert [{n: (run / "scores" / n).read_bytes() for n in names} for run in runs] == expected
    assert len({e["predicted_vs_true.png"] for e in expected}) == 4
    assert sorted(n for n in notes if n.startswith("report: /")) == [
        f"report: {run / 'scores' / 'report.html'}" for run in runs
    ]
