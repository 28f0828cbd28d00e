"""A run's `published` result in a sweep file, read and checked: the number the run reproduces.

    published = { correct = 322, questions = 442, source = "DocCount README", reasoning = "on",
                  per_class = { "Brand Logo" = [104, 163], ... }, note = "..." }

`correct` of `questions` (integers, 0 <= correct <= questions), `source` (where the number is from),
optional `reasoning` (the mode the source ran in, "on" or "off": a run that declares the other mode is
not comparable with it), `per_class` (class -> [correct, questions]) and `note` (e.g. where two sources
disagree). The leaderboard shows it beside the reproduced accuracy (evaluator.scoring.published); it
never reaches a request, so changing it changes no run.
"""

from __future__ import annotations

from typing import Any, Protocol

from evaluator.study.secrets import looks_like_secret

PUBLISHED_KEYS = ("correct", "questions", "source", "reasoning", "per_class", "note")
MODES = ("on", "off")


class _Where(Protocol):
    def fail(self, table: tuple[str, ...], key: str | None, message: str, index: int = 0) -> Exception: ...


def _count_pair(correct: Any, questions: Any) -> bool:
    ints = all(isinstance(x, int) and not isinstance(x, bool) for x in (correct, questions))
    return ints and 0 <= correct <= questions and questions > 0


def run_published(where: _Where, i: int, name: str, table: dict[str, Any]) -> dict[str, Any] | None:
    """The run's `published` table, checked (None when it has none)."""
    pub = table.get("published")
    if pub is None:
        return None
    here = ("runs",)

    def fail(message: str) -> Exception:
        return where.fail(here, "published", f"run {name}: `published` {message}", i)

    if not isinstance(pub, dict):
        raise fail('must be a table: { correct = 322, questions = 442, source = "..." }')
    unknown = [k for k in pub if k not in PUBLISHED_KEYS]
    if unknown:
        raise fail(f"has an unknown key `{unknown[0]}`; allowed: {', '.join(PUBLISHED_KEYS)}")
    if not _count_pair(pub.get("correct"), pub.get("questions")):
        raise fail("needs integers `correct` and `questions` with 0 <= correct <= questions")
    for key in ("source", "note"):
        if key in pub and (not isinstance(pub[key], str) or looks_like_secret(pub[key])):
            raise fail(f"`{key}` must be a short text")
    if "reasoning" in pub and not (isinstance(pub["reasoning"], str) and pub["reasoning"] in MODES):
        raise fail('`reasoning` must be "on" or "off": the mode the source ran in')
    per_class = pub.get("per_class", {})
    if not isinstance(per_class, dict):
        raise fail('`per_class` must be a table: { "<class>" = [correct, questions], ... }')
    for cls, pair in per_class.items():
        if not (isinstance(pair, list) and len(pair) == 2 and _count_pair(*pair)):
            raise fail(f'`per_class."{cls}"` must be [correct, questions] with 0 <= correct <= questions')
    return dict(pub)
