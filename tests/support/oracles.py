"""Reference implementations the tests compare against, wrapped so they cost what the arithmetic costs."""

from __future__ import annotations

import gc
from collections.abc import Sequence

from statsmodels.stats.multitest import multipletests


def holm_adjusted(pvalues: Sequence[float]) -> list[float]:
    """statsmodels' multipletests(method="holm")[1], unchanged.

    Its Holm branch ends in a full gc.collect(), which in a test process that has imported scipy,
    statsmodels and pandas walks every live object: about 0.5 s a call on 2 busy cores, so a property test
    of 200 examples took minutes for arithmetic that takes microseconds. gc.freeze() moves the objects that
    already exist out of the collector's sight for the call (the objects it makes are still collected);
    the values are the same."""
    gc.freeze()
    try:
        return [float(p) for p in multipletests(list(pvalues), method="holm")[1]]
    finally:
        gc.unfreeze()
