"""What the pages say about a run's settings (data source, question set, sampling, dates), read from
its typed RunConfig (evaluator.runfolder.runconfig)."""

from __future__ import annotations

import json
from typing import Any

from evaluator.core.values import is_int
from evaluator.report.base import _e
from evaluator.runfolder.runconfig import RunConfig


def _data_html(config: RunConfig, summary: dict[str, Any]) -> tuple[str, str]:
    """(source/revision, question set) descriptions."""
    data = config.data
    if data.get("source") == "hub":
        rev = data.get("revision")
        asked = data.get("requested_revision")
        text = f"Hugging Face <code>{_e(data.get('dataset'))}</code> revision <code>{_e(rev)}</code>"
        if asked and asked != rev:
            text += f" (requested <code>{_e(asked)}</code>)"
    elif data.get("source") == "local":
        text = f"local files <code>{_e(data.get('pattern'))}</code>"
    else:
        text = '<span class="none">not recorded</span>'
    files = data.get("files") if isinstance(data.get("files"), list) else []
    if files:
        text += (
            "; "
            + ", ".join(
                f"<code>{_e(f.get('name'))}</code> (sha256 <code>{_e(str(f.get('sha256'))[:12])}</code>…)"
                for f in files[:6]
                if isinstance(f, dict)
            )
            + (f" and {len(files) - 6} more" if len(files) > 6 else "")
        )
    sdata = summary.get("data") if isinstance(summary.get("data"), dict) else {}
    digest = sdata.get("manifest_sha256")
    verified = sdata.get("manifest_verified")
    qs = f"{_e(sdata.get('questions'))} questions"
    if digest:
        qs += f", manifest sha256 <code>{_e(str(digest)[:16])}</code>…"
        qs += " (verified against run_config.json)" if verified else " (not verified)"
    total = data.get("questions")
    if is_int(total) and is_int(sdata.get("questions")) and total != sdata.get("questions"):
        qs += f"; a selection of the {total} questions in the data"
    return text, qs


def _sampling_text(config: RunConfig) -> str:
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
    rpf = config.retry_parse_failures
    if rpf:
        parts.append(f"retry parse failures {rpf}")
    return _e(", ".join(parts) or "not recorded")


def _dates(config: RunConfig) -> str:
    a, b = config.created_at, config.updated_at
    if a and b and a != b:
        return f"{_e(a)} → {_e(b)}"
    return _e(a or b or "not recorded")
