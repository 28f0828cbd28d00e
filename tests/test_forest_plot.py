"""The leaderboard page's forest plot (evaluator/report/leaderboard_page.py): a long run name is shortened
to LABEL_CHARS left of the axis, and shown whole in its tooltip."""

from __future__ import annotations

import re

from support.boards import board, row

from evaluator.report.leaderboard_page import LABEL_CHARS

LONG = "anthropic-claude-sonnet-4.5-reasoning-high-temperature-1-top-p-none-repeat-3"


def test_a_long_run_name_is_shortened_in_the_forest_plot_and_whole_in_its_tooltip() -> None:
    from evaluator.report.leaderboard_page import render_page

    out = board((LONG, [row(i, True) for i in range(4)]), ("b", [row(i, False) for i in range(4)]))
    out["title"] = "t"
    page = render_page(out)
    labels = re.findall(r'<text class="label"[^>]*>([^<]*)</text>', page)
    assert len(labels) == 2 and all(len(label) <= LABEL_CHARS for label in labels), labels
    assert labels[0].endswith("…") and labels[1] == "2. b"
    assert f"<title>1. {LONG}</title>" in page
