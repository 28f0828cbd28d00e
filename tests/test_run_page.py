"""page_stamp (evaluator/report/run_page.py), which verify reads from an archived report.html: linear in the
page (trust3 #4: its footer pattern was quadratic, 40 s on a 256 KB page; an 8 MiB page never ended)."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.measure import measured

from evaluator.report.run_page import page_stamp

_FOOTER = re.compile(r"Written by doccount-eval (\S+) on ([^<>\n]+?)\. Self-contained page")  # the reference


def test_page_stamp_reads_the_footer() -> None:
    page = "<p>x</p><footer>Written by doccount-eval 0.4.1.dev3+g1a2b3c on 2026-12-07 04:55 UTC. Self-contained page"
    assert page_stamp(page) == ("0.4.1.dev3+g1a2b3c", "2026-12-07 04:55 UTC")
    assert page_stamp("no footer") is None


_PIECES = st.sampled_from(
    [
        "Written by doccount-eval ",
        "0.1",
        " on ",
        "2026-12-07 04:55 UTC",
        ". Self-contained page",
        ".",
        "<",
        "\n",
        " ",
    ]
)


@settings(max_examples=400, deadline=None)
@given(st.lists(_PIECES, max_size=10).map("".join))
def test_page_stamp_equals_the_pattern_on_stamps_of_usual_length(page: str) -> None:
    found = _FOOTER.search(page)
    assert page_stamp(page) == ((found.group(1), found.group(2)) if found else None)


@pytest.mark.parametrize(
    "unit", ["'Written by doccount-eval x on '", "'Written by doccount-eval x on ' + 'y' * 300"]
)
def test_page_stamp_is_linear_on_an_8_mib_page(unit: str) -> None:
    cost = measured(
        f"from evaluator.report.run_page import page_stamp\nunit = {unit}\npage = unit * (8 * 2**20 // len(unit))",
        "assert page_stamp(page) is None",
        deadline_s=30,
    )
    assert cost["cpu_s"] < 3.0, cost
