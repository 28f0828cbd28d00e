"""A run folder's question set (manifest.jsonl): it only ever grows.

`--limit N` picks the first N questions of the data to evaluate this time; the folder's set stays the
union of every run's selection, in data order, so a later, smaller --limit never shrinks what score
counts. A question whose sent text changed since it was added is refused (see `changed_questions`).
"""

from __future__ import annotations

from evaluator.core.text import examples
from evaluator.data.benchmarks.base import ManifestEntry


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
