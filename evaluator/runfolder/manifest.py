"""A run folder's question set (manifest.jsonl, the denominator of its scores): it only ever grows.

`--limit N` picks the first N questions this time; the folder's set stays the union of every run's, in
data order, so a later, smaller --limit never shrinks what score counts. A question whose sent text
changed since it was added is refused (`changed_questions`).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from evaluator.core.errors import UserError
from evaluator.core.jsonl import decode_line, decode_strict_lines, is_int, split_lines
from evaluator.core.text import examples
from evaluator.data.benchmarks.base import ManifestEntry
from evaluator.runfolder.files import MANIFEST


class ManifestError(UserError):
    """manifest.jsonl is missing, unreadable or damaged (a one-line message)."""


def load_manifest(run_root: Path, lenient: set[str] | None = None) -> list[ManifestEntry]:
    """The run's question list; adds to `lenient` the ids whose line only json.loads could read."""
    path = run_root / MANIFEST
    if not path.exists():
        raise ManifestError(
            f"{run_root} has no {MANIFEST} (the run's question list), so the denominator is unknown; re-run "
            "doccount-evaluate with the same options to rewrite it (finished rows are not sent again)"
        )
    entries: list[ManifestEntry] = []
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ManifestError(f"cannot read {path} ({exc.strerror})") from None
    lines = split_lines(raw)
    if not lines[-1]:
        lines.pop()  # after the last newline
    strict = decode_strict_lines(lines)  # every line at once when the file is clean (the usual case)
    for number, view in enumerate(lines, start=1):
        if strict is None and not view.tobytes().strip():
            continue
        try:
            d, loose = (strict[number - 1], False) if strict is not None else decode_line(view.tobytes())
            sid = d["sample_id"]
            groups = d.get("groups") or {}
            truth = d.get("ground_truth")
            if (
                not isinstance(sid, str)
                or not isinstance(groups, dict)
                or not (truth is None or is_int(truth))
            ):
                raise TypeError
        except (ValueError, KeyError, TypeError, AttributeError):
            raise ManifestError(
                f"{path} line {number} is not a valid manifest entry; the run folder is damaged. Re-run "
                "doccount-evaluate with the same options to rewrite it"
            ) from None
        entries.append(
            ManifestEntry(
                sid, d.get("image_sha256"), truth, groups, d.get("data_error"), d.get("messages_sha256")
            )
        )
        if loose and lenient is not None:
            lenient.add(sid)
    if not entries:
        raise ManifestError(f"{path} lists no questions; re-run doccount-evaluate to rewrite it")
    counts = Counter(e.sample_id for e in entries)
    dups = sorted(s for s, c in counts.items() if c > 1)
    if dups:
        raise ManifestError(
            f"{path} lists {len(dups)} sample id(s) twice ({examples(dups)}); the run folder is damaged"
        )
    return entries


def folder_question_set(
    data: list[ManifestEntry], selection: list[ManifestEntry], existing: list[ManifestEntry]
) -> list[ManifestEntry]:
    """The folder's questions after this run: the existing ones and this selection, in data order."""
    wanted = {e.sample_id for e in existing} | {e.sample_id for e in selection}
    return [e for e in data if e.sample_id in wanted]


def changed_questions(existing: list[ManifestEntry], data: list[ManifestEntry]) -> list[str]:
    """Ids of the folder's questions whose messages digest differs from the data's now (both known)."""
    now = {e.sample_id: e.messages_sha256 for e in data}
    return [
        e.sample_id
        for e in existing
        if e.messages_sha256 and now.get(e.sample_id) and now[e.sample_id] != e.messages_sha256
    ]


def changed_text_message(root: object, changed: list[str]) -> str:
    return (
        f"{len(changed)} question(s) in {root} now send other text than when they were evaluated "
        f"({examples(changed)}): the data's prompt, question or class definition changed. Finished rows "
        "answer the old text, so they are not mixed with new ones: use a new --run-name (or --run-root)"
    )
