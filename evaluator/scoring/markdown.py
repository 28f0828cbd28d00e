"""scores/summary.md: the summary dict rendered as Markdown, one function per section.

Text from the data, the server or the run folder (model, run name, group values, finish reasons, batch
ids, warnings) goes through core.text (md_text, md_code): it cannot break a table or make a link or HTML.
"""

from __future__ import annotations

from typing import Any

from evaluator.core.jsonl import is_int
from evaluator.core.text import md_code, md_text
from evaluator.core.usage import usage_markdown
from evaluator.data.benchmarks import title_of
from evaluator.request.ratelimit import rate_limit_markdown
from evaluator.runfolder.batches import batch_line
from evaluator.scoring.base import OUTCOME_LABELS, ci_text, num, pct_text
from evaluator.scoring.board import Timeouts
from evaluator.scoring.repeats import headline_markdown, repeats_markdown
from evaluator.scoring.stats import PERCENTILES
from evaluator.scoring.summary_shape import Summary


def render_markdown(summary: Summary) -> str:
    out: list[str] = []
    for section in (_headline, _outcomes, _groups, _errors, _usage, _diagnostic, _footer):
        out += section(summary)
    return "\n".join(out) + "\n"


def _headline(s: Summary) -> list[str]:
    p = s["primary"]
    n = p["questions"]
    title = md_text(title_of(s["benchmark"]))
    out = [f"# {title}: {md_text(s['model'])} (run {md_code(s['run_name'])})", ""]
    if "repeats" in s:
        out += headline_markdown(s)
    else:
        out += [
            f"**Exact-count accuracy: {p['correct']} / {n} = {pct_text(p['accuracy'])}** "
            f"(95% Wilson interval {ci_text(p['ci95'])}). Every question of the run's manifest is in the "
            "denominator; parse failures, request errors, data errors and missing rows count as wrong.",
            "",
        ]
    if s["extra_metrics"]:
        out += [", ".join(f"{k.replace('_', ' ')}: {pct_text(v)}" for k, v in s["extra_metrics"].items()), ""]
    if "repeats" in s:
        out += repeats_markdown(s)
    return out


def _outcomes(s: Summary) -> list[str]:
    repeated = "repeats" in s
    n = s["primary"]["responses"] if repeated else s["primary"]["questions"]  # outcomes count responses
    unit = "responses" if repeated else "questions"
    out = ["## Outcomes", "", f"| outcome | {unit} |", "| --- | ---: |"]
    out += [f"| {OUTCOME_LABELS[k]} | {v} |" for k, v in s["outcomes"].items()]
    return out + [f"| total | {n} |", ""]


def _groups(s: Summary) -> list[str]:
    out: list[str] = []
    for name, g in s["groups"].items():
        extra_keys = sorted({k for v in g["values"].values() for k in v["extra_metrics"]})
        label = "Class" if name == "target_class" else md_text(name)
        note = " (a question counts once in each of its values)" if g["multi_valued"] else ""
        out += [f"## Accuracy by {md_text(name)}{note}", ""]
        head = f"| {label} | questions | correct | accuracy | 95% CI | not answered |"
        head += "".join(f" {k.replace('_', ' ')} |" for k in extra_keys)
        out += [head, "| --- |" + " ---: |" * (5 + len(extra_keys))]
        for key in g["order"]:
            v = g["values"][key]
            unanswered = v.get("responses", v["questions"]) - v["outcomes"]["ok"]
            line = f"| {md_text(key)} | {v['questions']} | {v['correct']} | {pct_text(v['accuracy'])} | {ci_text(v['ci95'])} | {unanswered} |"
            line += "".join(f" {pct_text(v['extra_metrics'].get(k))} |" for k in extra_keys)
            out.append(line)
        out.append("")
    if "per_class_accuracy" in s["plots"]:
        out += [f"![Accuracy by subgroup with 95% intervals]({s['plots']['per_class_accuracy']})", ""]
    return out


def _errors(s: Summary) -> list[str]:
    e = s["error_anatomy"]
    out = [
        f"## Error anatomy (over the {e['parsed']} parsed answers)",
        "",
        "| MAE | median abs. error | mean signed error | exact | over-count | under-count | off by one |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
        f"| {num(e['mean_absolute_error'])} | {num(e['median_absolute_error'])} | {num(e['mean_signed_error'])} "
        f"| {pct_text(e['exact_rate'])} | {pct_text(e['over_count_rate'])} | {pct_text(e['under_count_rate'])} "
        f"| {pct_text(e['off_by_one_rate'])} |",
        "",
        "### Accuracy by ground-truth count",
        "",
        "| true count | questions | correct | accuracy | 95% CI | MAE (parsed) |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for key in s["count_buckets"]["order"]:
        v = s["count_buckets"]["values"][key]
        out.append(
            f"| {key} | {v['questions']} | {v['correct']} | {pct_text(v['accuracy'])} | {ci_text(v['ci95'])} "
            f"| {num(v['mean_absolute_error'])} |"
        )
    out.append("")
    if "predicted_vs_true" in s["plots"]:
        out += [f"![Predicted vs true count]({s['plots']['predicted_vs_true']})", ""]
    return out


def _usage(s: Summary) -> list[str]:
    pts = [f"p{q}" for q in PERCENTILES]
    out = [
        "## Token usage and latency",
        "",
        "| | n | sum | mean | " + " | ".join(pts) + " | max |",
        "| --- |" + " ---: |" * (4 + len(pts)),
    ]
    for key in ("prompt_tokens", "completion_tokens", "total_tokens"):
        d = s["usage"][key]
        out.append(
            f"| {key.replace('_', ' ')} | {d['n']} | {d['sum']} | {num(d['mean'], 1)} | "
            + " | ".join(num(d[q], 1) for q in pts)
            + f" | {num(d['max'], 0)} |"
        )
    lat = s["latency_s"]
    out.append(
        f"| latency (s) | {lat['n']} | | {num(lat['mean'])} | "
        + " | ".join(num(lat[q]) for q in pts)
        + f" | {num(lat['max'])} |"
    )
    ea = s["usage"]["earlier_attempts"]
    out += [
        "",
        f"Earlier (parse-retried) responses: {ea['responses']}, {ea['total_tokens']} total tokens. "
        f"HTTP attempts: {s['http_attempts']['sum']}, rows that needed a retry: {s['http_attempts']['rows_retried']}.",
        "",
        *([timeouts_text(s["timeouts"]), ""] if "timeouts" in s else []),
        *([md_text(batch_line(s["batch"])), ""] if s.get("batch") else []),
        *rate_limit_markdown(s.get("rate_limits", {})),
        *usage_markdown(s["usage"]),
    ]
    for label, counts in (("Parse status", s["parse_status"]), ("Finish reasons", s["finish_reasons"])):
        if counts:
            out += [f"{label}: " + ", ".join(f"{md_text(k)} {v}" for k, v in counts.items()) + ".", ""]
    return out


def timeouts_text(block: Timeouts | Any) -> str:
    """summary.json `timeouts` in one sentence (summary.md and the report); a block read from a file that
    is not one says so."""
    last = block.get("last_attempt_timed_out") if isinstance(block, dict) else None
    after = block.get("answered_after_timeout") if isinstance(block, dict) else None
    if not is_int(last) or not is_int(after):
        return "Timeouts: not recorded."
    return (
        f"Timeouts: {last} row(s) whose last attempt timed out (request errors), {after} row(s) answered "
        "only after a timed-out attempt (a new sample)."
    )


def _diagnostic(s: Summary) -> list[str]:
    fb = s["diagnostic"]["last_integer_fallback"]
    return [
        "## Diagnostic only: last-integer fallback (not the primary score)",
        "",
        f"Taking the last integer of the visible text instead of the answer contract would give "
        f"{fb['correct']} / {fb['questions']} = {pct_text(fb['accuracy'])} ({ci_text(fb['ci95'])}); "
        f"{fb['correct_only_with_fallback']} question(s) are right only under the fallback and "
        f"{fb['correct_only_with_primary_parser']} only under the primary parser. Do not report this number "
        "as the benchmark score.",
        "",
    ]


def _footer(s: Summary) -> list[str]:
    out: list[str] = []
    if s["warnings"]:
        out += ["## Warnings", ""] + [f"- {md_text(w)}" for w in s["warnings"]] + [""]
    d = s["data"]
    out += [
        f"Questions: {d['questions']}; manifest SHA-256 `{d['manifest_sha256']}` "
        f"({'verified against run_config.json' if d['manifest_verified'] else 'NOT verified'}).",
    ]
    return out
