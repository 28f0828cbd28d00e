"""compare: paired comparison of runs over the same questions, and a leaderboard with intervals.

Each run is merged with `scoring.merge_run` (from responses.partial.jsonl + manifest.jsonl, the same
code `score` uses), so a stale or missing responses.jsonl never matters. Questions are matched by
(sample_id, image_sha256). Runs over different question sets are refused unless `intersect=True`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evaluator.core.jsonl import utf8_json
from evaluator.scoring import (
    MergedRun,
    ScoreError,
    accuracy_block,
    extra_metrics_of,
    group_keys,
    merge_run,
    ordered_values,
    outcome_counts,
)
from evaluator.scoring.board import AccuracyBlock, CompareData, CompareEntry, PairedComparison
from evaluator.scoring.repeats import compare_block, paired_mean_table
from evaluator.scoring.row import ScoredQuestion, question_rows, responses_of
from evaluator.scoring.stats import (
    BOOTSTRAP_RESAMPLES,
    BOOTSTRAP_SEED,
    CONFIDENCE,
    mcnemar_exact,
    paired_bootstrap_diff,
)

COMPARE_SCHEMA_VERSION = 1
MAX_LEADERBOARD_VALUES = 8  # a group field with more values gets no per-value columns


class CompareError(ScoreError):
    """Runs that cannot be compared (a user error)."""


@dataclass
class CompareResult:
    data: CompareData
    markdown: str
    warnings: list[str] = field(default_factory=list)


Key = tuple[str, str | None]


def competition_ranks(scores: Sequence[object]) -> list[int]:
    """Standard competition ranking ("1, 1, 3") of scores sorted best first: an equal score shares the
    better rank, the next one skips the places they take."""
    ranks: list[int] = []
    for place, score in enumerate(scores, start=1):
        ranks.append(ranks[-1] if place > 1 and score == scores[place - 2] else place)
    return ranks


def _key(q: ScoredQuestion) -> Key:
    return (q.sample_id, q.image_sha256)


def paired_table(a: Sequence[float], b: Sequence[float]) -> dict[str, int]:
    """McNemar's table of right (1) / wrong (0) pairs."""
    return {
        "both_correct": sum(1 for x, y in zip(a, b, strict=True) if x and y),
        "only_a": sum(1 for x, y in zip(a, b, strict=True) if x and not y),
        "only_b": sum(1 for x, y in zip(a, b, strict=True) if y and not x),
        "neither": sum(1 for x, y in zip(a, b, strict=True) if not x and not y),
    }


def paired_comparison(
    label_a: str, a: Sequence[float], label_b: str, b: Sequence[float], resamples: int, seed: int
) -> PairedComparison:
    n = len(a)
    binary = all(isinstance(x, bool) for x in (*a, *b))  # else per-question means (--repeats)
    table = paired_table(a, b) if binary else paired_mean_table(a, b)
    acc_a = sum(a) / n
    acc_b = sum(b) / n
    ci = paired_bootstrap_diff(a, b, resamples=resamples, seed=seed)
    return {
        "a": label_a,
        "b": label_b,
        "questions": n,
        "table": table,
        "accuracy_a": acc_a,
        "accuracy_b": acc_b,
        "difference": acc_a - acc_b,
        "difference_ci95": list(ci) if ci else None,
        # McNemar needs one right/wrong outcome per question; with repeats the bootstrap interval stands alone
        "mcnemar_exact_p": mcnemar_exact(table["only_a"], table["only_b"]) if binary else None,
    }


def _question_sets(
    rows_by_run: list[list[ScoredQuestion]], labels: list[str], intersect: bool, warnings: list[str]
) -> list[Key]:
    keys = [[_key(r) for r in rows] for rows in rows_by_run]
    sets = [set(k) for k in keys]
    common = set.intersection(*sets)
    if any(s != sets[0] for s in sets):
        detail = "; ".join(f"{lab}: {len(s)} questions" for lab, s in zip(labels, sets, strict=True))
        if not intersect:
            raise CompareError(
                f"the runs are over different question sets ({detail}; {len(common)} shared, matched by sample id "
                "and image hash). Accuracies over different questions are not comparable; pass --intersect to "
                "compare on the shared questions only"
            )
        if not common:
            raise CompareError(f"the runs share no question ({detail}); there is nothing to compare")
        warnings.append(
            f"--intersect: comparing on the {len(common)} question(s) all runs share ({detail}); the numbers "
            "differ from each run's own score"
        )
    return [k for k in keys[0] if k in common]


def group_columns(bench: Any, rows_by_run: list[list[ScoredQuestion]]) -> list[tuple[str, str]]:
    """(field, value) columns: every value of each group field seen in any run, in the benchmark's order;
    a field with more than MAX_LEADERBOARD_VALUES values gets none. Shared by compare and the leaderboard."""
    cols: list[tuple[str, str]] = []
    for name in bench.group_fields:
        seen = {k for rows in rows_by_run for q in rows for k in group_keys(q.groups, name)}
        values = ordered_values(bench, name, seen)
        if len(values) <= MAX_LEADERBOARD_VALUES:
            cols += [(name, v) for v in values]
    return cols


def compare_runs(
    roots: Sequence[Path],
    intersect: bool = False,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
) -> CompareResult:
    roots = [Path(r) for r in roots]
    runs = _merge_runs(roots)
    names = [r.run_root.resolve().name for r in runs]
    labels = [n if names.count(n) == 1 else str(root) for n, root in zip(names, roots, strict=True)]
    if len({r.benchmark.name for r in runs}) > 1:
        detail = ", ".join(f"{lab}: {r.benchmark.name}" for lab, r in zip(labels, runs, strict=True))
        raise CompareError(f"the runs are on different benchmarks ({detail}); compare runs of one benchmark")
    warnings: list[str] = []
    for lab, run in zip(labels, runs, strict=True):
        warnings += [f"{lab}: {w}" for w in run.warnings]
    ks = [run.run_config.repeat_count for run in runs]
    qrows = [question_rows(run.rows, k) for run, k in zip(runs, ks, strict=True)]  # one row per question
    common = _question_sets(qrows, labels, intersect, warnings)
    indexes = [{_key(r): r for r in rows} for rows in qrows]
    rows_by_run = [[index[k] for k in common] for index in indexes]  # the compared questions, in one order
    _warn_truth_differences(rows_by_run, common, warnings)
    columns = group_columns(runs[0].benchmark, rows_by_run)
    entries = [
        _leaderboard_entry(lab, run, rows, k, columns, warnings)
        for lab, run, rows, k in zip(labels, runs, rows_by_run, ks, strict=True)
    ]
    # compared runs share at least one question, so each has an accuracy
    ranked = sorted(entries, key=lambda e: (-(e["accuracy"] or 0.0), e["run"]))
    for e, rank in zip(ranked, competition_ranks([e["accuracy"] for e in ranked]), strict=True):
        e["rank"] = rank
    pairs = _pairs(labels, rows_by_run, ranked, resamples, seed)
    data: CompareData = {
        "schema_version": COMPARE_SCHEMA_VERSION,
        "benchmark": runs[0].benchmark.name,
        "questions": len(common),
        "intersect": intersect,
        "methods": _methods(resamples, seed, ks),
        "leaderboard": ranked,
        "pairs": pairs,
        "warnings": warnings,
    }
    return CompareResult(data, render_compare_markdown(data, columns), warnings)


def _merge_runs(roots: list[Path]) -> list[MergedRun]:
    """Each run folder merged as `score` merges it; two distinct folders at least."""
    if len(roots) < 2:
        raise CompareError("compare needs at least two run folders")
    resolved = [r.resolve() for r in roots]
    if len(set(resolved)) != len(resolved):
        raise CompareError("the same run folder is given twice; pass distinct run folders")
    runs = []
    for root in roots:
        try:
            runs.append(merge_run(root))
        except ScoreError as exc:
            raise CompareError(f"cannot read run {root}: {exc}") from None
    return runs


def _warn_truth_differences(
    rows_by_run: list[list[ScoredQuestion]], common: list[Key], warnings: list[str]
) -> None:
    truth_diff = [
        k[0] for i, k in enumerate(common) if len({rows[i].ground_truth for rows in rows_by_run}) > 1
    ]
    if truth_diff:
        warnings.append(
            f"{len(truth_diff)} shared question(s) have different ground truths in different runs "
            f"(e.g. {', '.join(truth_diff[:5])}); each run is scored against its own manifest"
        )


def _leaderboard_entry(
    lab: str,
    run: MergedRun,
    rows: list[ScoredQuestion],
    k: int,
    columns: list[tuple[str, str]],
    warnings: list[str],
) -> CompareEntry:
    """One run's leaderboard row over the compared questions (a warning when some have no record)."""
    groups: dict[str, dict[str, AccuracyBlock]] = {}
    for name, value in columns:
        sub = [q for q in rows if value in group_keys(q.groups, name)]
        groups.setdefault(name, {})[value] = compare_block(sub, k, accuracy_block)
    responses = responses_of(rows)  # with repeats, every response to the compared questions
    entry: CompareEntry = {
        "run": lab,
        "model": run.run_config.model,
        **compare_block(rows, k, accuracy_block),
        **({"repeats": k} if k > 1 else {}),
        "outcomes": outcome_counts(responses),
        "groups": groups,
        "extra_metrics": extra_metrics_of(run.benchmark, responses),
        "partial_sha256": run.summary["inputs"]["partial_sha256"],
    }
    missing = entry["outcomes"]["missing"]
    if missing:
        warnings.append(
            f"{lab}: {missing} of {len(responses)} compared response(s) have no record and count as wrong"
            if k > 1
            else f"{lab}: {missing} of {len(rows)} compared question(s) have no record and count as wrong"
        )
    return entry


def _pairs(
    labels: list[str],
    rows_by_run: list[list[ScoredQuestion]],
    ranked: list[CompareEntry],
    resamples: int,
    seed: int,
) -> list[PairedComparison]:
    """The paired comparisons: the two runs, or the leader against each other run."""
    correct = {lab: [q.correct for q in rows] for lab, rows in zip(labels, rows_by_run, strict=True)}
    if len(labels) == 2:
        pair_list = [(labels[0], labels[1])]
    else:
        leader = ranked[0]["run"]
        pair_list = [(leader, e["run"]) for e in ranked[1:]]
    return [paired_comparison(a, correct[a], b, correct[b], resamples, seed) for a, b in pair_list]


def _methods(resamples: int, seed: int, ks: list[int]) -> dict[str, str | int | float]:
    return {
        "accuracy_interval": "wilson",
        "confidence": CONFIDENCE,
        "difference_interval": "paired bootstrap over questions, percentile method",
        "bootstrap_resamples": resamples,
        "bootstrap_seed": seed,
        "mcnemar": "exact two-sided binomial test on the discordant pairs",
        **(
            {
                "repeats": "a run with --repeats K > 1 enters per question as its mean correctness over "
                "the K repeats; its accuracy interval is a question-cluster bootstrap, pairs with it "
                "compare those means (no McNemar test)"
            }
            if any(k > 1 for k in ks)
            else {}
        ),
    }


def _cell(block: AccuracyBlock) -> str:
    if not block["questions"]:
        return "n/a"
    # a block over at least one question has an accuracy and an interval
    lo, hi = block["ci95"] or (0.0, 0.0)
    return f"{100 * (block['accuracy'] or 0.0):.2f} [{100 * lo:.1f}, {100 * hi:.1f}]"


def render_compare_markdown(data: CompareData, columns: list[tuple[str, str]]) -> str:
    board = data["leaderboard"]
    extra = sorted({k for e in board for k in e["extra_metrics"]})
    fields = {name for name, _ in columns}
    head = ["Rank", "Run", "Model"] + [v if len(fields) == 1 else f"{n}={v}" for n, v in columns]
    head += [k.replace("_", " ") for k in extra] + ["Acc. [95% CI]", "Correct", "Not answered"]
    out = [
        f"# Leaderboard: {data['benchmark']}, {data['questions']} questions"
        + (" (shared questions only)" if data["intersect"] else ""),
        "",
        "Exact-count accuracy in % with 95% Wilson intervals; unanswered questions count as wrong.",
        "",
        "| " + " | ".join(head) + " |",
        "| ---: | --- | --- |" + " ---: |" * (len(head) - 3),
    ]
    for e in board:
        cells = [str(e["rank"]), e["run"], str(e["model"])]
        cells += [_cell(e["groups"][n][v]) for n, v in columns]
        cells += [f"{100 * e['extra_metrics'][k]:.2f}" if k in e["extra_metrics"] else "n/a" for k in extra]
        responses = e.get("responses", e["questions"])  # questions x repeats with --repeats
        unanswered = responses - e["outcomes"]["ok"]
        cells += [_cell(e), f"{e['correct']} / {responses}", str(unanswered)]
        out.append("| " + " | ".join(cells) + " |")
    out.append("")
    m = data["methods"]
    if data["pairs"]:
        out += [
            "## Paired comparison" + ("" if len(board) == 2 else "s against the leader (unadjusted)"),
            "",
            f"Difference = accuracy(A) - accuracy(B) in points; interval: paired bootstrap, "
            f"{m['bootstrap_resamples']} resamples, seed {m['bootstrap_seed']}; p: exact McNemar (two-sided).",
            "",
            "| A | B | both right | only A | only B | neither | difference [95% CI] | McNemar p |",
            "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |",
        ]
        for p in data["pairs"]:
            t = p["table"]
            lo, hi = p["difference_ci95"] or (0.0, 0.0)  # every pair shares a question: there is one
            out.append(
                f"| {p['a']} | {p['b']} | {t['both_correct']} | {t['only_a']} | {t['only_b']} | {t['neither']} "
                f"| {100 * p['difference']:+.2f} [{100 * lo:+.1f}, {100 * hi:+.1f}] | "
                + ("n/a (repeats)" if p["mcnemar_exact_p"] is None else f"{p['mcnemar_exact_p']:.4g}")
                + " |"
            )
        out.append("")
    if len(board) == 2 and data["pairs"]:
        p = data["pairs"][0]
        t = p["table"]
        out += [
            f"### Paired table ({p['questions']} questions)",
            "",
            f"| | {p['b']} right | {p['b']} wrong |",
            "| --- | ---: | ---: |",
            f"| {p['a']} right | {t['both_correct']} | {t['only_a']} |",
            f"| {p['a']} wrong | {t['only_b']} | {t['neither']} |",
            "",
        ]
    if data["warnings"]:
        out += ["## Warnings", ""] + [f"- {w}" for w in data["warnings"]] + [""]
    return "\n".join(out)


def compare_json(data: CompareData) -> bytes:
    return utf8_json(data, indent=2, sort_keys=True) + b"\n"
