"""What the pages say about a run's settings (data source, question set, sampling, dates), read from
its typed RunConfig (evaluator.runfolder.runconfig). Text with code spans comes as (kind, text) parts."""

from __future__ import annotations

import json
from typing import Any

from evaluator.core.jsonl import is_int, object_at
from evaluator.runfolder.runconfig import RunConfig
from evaluator.scoring.summary_shape import Summary

Parts = list[tuple[str, str]]


def data_parts(config: RunConfig, summary: Summary) -> tuple[Parts, Parts]:
    """(source/revision, question set) descriptions."""
    data = config.data
    text: Parts
    if data.get("source") == "hub":
        rev = data.get("revision")
        asked = data.get("requested_revision")
        dataset = str(data.get("dataset"))
        text = [("", "Hugging Face "), ("code", dataset), ("", " revision "), ("code", str(rev))]
        if asked and asked != rev:
            text += [("", " (requested "), ("code", str(asked)), ("", ")")]
    elif data.get("source") == "local":
        text = [("", "local files "), ("code", str(data.get("pattern")))]
    else:
        text = [("none", "not recorded")]
    files = data.get("files") if isinstance(data.get("files"), list) else []
    if files:
        text.append(("", "; "))
        for j, f in enumerate(f for f in files[:6] if isinstance(f, dict)):
            text += [("", ", " if j else ""), ("code", str(f.get("name"))), ("", " (sha256 ")]
            text += [("code", str(f.get("sha256"))[:12]), ("", "…)")]
        if len(files) > 6:
            text.append(("", f" and {len(files) - 6} more"))
    return text, _question_set(config, summary)


def _question_set(config: RunConfig, summary: Summary) -> Parts:
    sdata = object_at(summary, "data")
    digest = sdata.get("manifest_sha256")
    qs: Parts = [("", f"{'' if sdata.get('questions') is None else sdata.get('questions')} questions")]
    if digest:
        qs += [("", ", manifest sha256 "), ("code", str(digest)[:16]), ("", "…")]
        verified = sdata.get("manifest_verified")
        qs.append(("", " (verified against run_config.json)" if verified else " (not verified)"))
    total = config.data.get("questions")
    if is_int(total) and is_int(sdata.get("questions")) and total != sdata.get("questions"):
        qs.append(("", f"; a selection of the {total} questions in the data"))
    return qs


def sampling_text(config: RunConfig) -> str:
    s = config.sampling
    parts = [
        f"{k} {'not sent' if s[k] is None else s[k]}"
        for k in ("temperature", "top_p", "max_tokens")
        if k in s
    ]
    if s.get("max_tokens_field", "max_tokens") != "max_tokens":
        parts.append(f"output limit sent as {s['max_tokens_field']}")
    if s.get("extra_body"):
        parts.append("extra body " + json.dumps(s["extra_body"], sort_keys=True))
    if rpf := config.retry_parse_failures:
        parts.append(f"retry parse failures {rpf}")
    if strip := config.strip_tokens:
        parts.append("stripped before parsing " + json.dumps(strip, ensure_ascii=False))
    return ", ".join(parts) or "not recorded"


def dates_text(config: RunConfig) -> str:
    a, b = config.created_at, config.updated_at
    if a and b and a != b:
        return f"{a} → {b}"
    return a or b or "not recorded"


def reasoning_text(block: Any) -> str:
    """summary.json `reasoning` in one line: the declared mode and what the answered responses showed."""
    if not isinstance(block, dict):
        return "not recorded"
    declared = block.get("declared")
    head = f"declared {declared}" if declared in ("on", "off") else "not declared"
    if block.get("observable") is False:
        return f"{head} (not observable: the provider returns no reasoning text or tokens)"
    answered, shown, share = block.get("answered"), block.get("with_reasoning"), block.get("observed_share")
    if not is_int(answered) or not is_int(shown):
        return head
    seen = f"{shown} of {answered} answered responses showed reasoning"
    return f"{head}; {seen}" + (f" ({100 * share:.1f}%)" if isinstance(share, (int, float)) else "")
