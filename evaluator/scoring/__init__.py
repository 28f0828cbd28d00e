"""score: merge the latest record per question over the full denominator, then compute the metrics.

`merge_run(run_root)` is the one merge: it reads run_config.json, manifest.jsonl (the run's question
set) and responses.partial.jsonl, checks that they belong together, and returns one row per question
in manifest order plus the summary dict. It writes nothing; `score_run` writes responses.jsonl,
scores/summary.json, scores/summary.md and the plots. `compare` and the report reuse `merge_run`.

The package, by concern: `base` (outcomes, result types, shared helpers), `load` (run_config.json and
manifest.jsonl), `select` (which records count), `row` (the typed row scoring reads), `merge` (one row per
question), `metrics` (the summary dict), `markdown` (summary.md), `write` (score_run and the files it writes).

The summary.json schema is documented in docs/scoring.md (bump SUMMARY_SCHEMA_VERSION on changes).

Also here: the statistics (stats), the spread over repeats (repeats, repeat_scoring), the paired
comparison of runs (compare), response identity (identity) and the plots score_run draws into scores/
(plots, plot_worker). The plots sit here rather than in report (plan/LAYOUT.md puts them there)
because score_run draws them into scores/, and scoring may not import the report layer above it.

May import: core, data, request, runfolder.
"""

from evaluator.scoring.base import (
    BUCKETS,
    SCORES_DIR,
    SUMMARY_JSON,
    SUMMARY_MD,
    ZERO_BUCKET,
    MergedRun,
    ScoreError,
    bucket_of,
    group_keys,
    group_value_key,
    ordered_values,
    outcome_of,
)
from evaluator.scoring.merge import merge_run
from evaluator.scoring.metrics import accuracy_block, error_anatomy, extra_metrics_of, outcome_counts
from evaluator.scoring.write import answer_pairs, merged_jsonl, score_run

__all__ = [
    "BUCKETS",
    "SCORES_DIR",
    "SUMMARY_JSON",
    "SUMMARY_MD",
    "ZERO_BUCKET",
    "MergedRun",
    "ScoreError",
    "accuracy_block",
    "answer_pairs",
    "bucket_of",
    "error_anatomy",
    "extra_metrics_of",
    "group_keys",
    "group_value_key",
    "merge_run",
    "merged_jsonl",
    "ordered_values",
    "outcome_counts",
    "outcome_of",
    "score_run",
]
