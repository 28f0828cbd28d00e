"""A run's `published` result in a sweep file, declared: the number the run reproduces, e.g.
`published = { correct = 322, questions = 442, source = "...", reasoning = "on", per_class = { "Table" =
[44, 75] }, note = "..." }`. `reasoning` is the mode the source ran in (a run in the other mode is not
comparable); the leaderboard shows it beside the reproduced accuracy; it never reaches a request."""

from __future__ import annotations

from typing import Annotated

import msgspec
from msgspec import Meta

from evaluator.core.vocab import ReasoningMode

Count = Annotated[int, Meta(ge=0)]
Text = Annotated[str, Meta(max_length=2000, description="a short text")]
PAIR = "[correct, questions] with 0 <= correct <= questions"
PER_CLASS = f'a table: {{ "<class>" = {PAIR}, ... }}'


class Published(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    correct: Annotated[Count, Meta(description="an integer from 0 to `questions`")]
    questions: Annotated[int, Meta(ge=1, description="an integer >= 1")]
    source: Text = ""
    reasoning: ReasoningMode | None = None
    per_class: Annotated[dict[str, tuple[Count, Count]], Meta(description=PER_CLASS)] = {}
    note: Text = ""


PUBLISHED_TYPE = Annotated[Published, Meta(description="a table: { correct = 3, questions = 4, ... }")]


def published_problem(pub: Published) -> str | None:
    """What a schema cannot say: each count of correct answers is at most its count of questions."""
    if pub.correct > pub.questions:
        return "needs integers `correct` and `questions` with 0 <= correct <= questions"
    for cls, (correct, questions) in pub.per_class.items():
        if not questions > 0 or correct > questions:
            return f'`per_class."{cls}"` must be {PAIR}'
    return None
