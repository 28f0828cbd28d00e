"""Pixel analysis of a page for the reference model: ink masks, XY cuts along blank gutters, the
statistics that tell photographs, charts, logos and text apart, and box overlap. Pure (numpy)."""

from __future__ import annotations

import numpy as np


def ink_mask(rgb: np.ndarray) -> np.ndarray:
    """Pixels that are not near-white paper."""
    return rgb.min(axis=2) < 225


def _trim(ink: np.ndarray) -> tuple[int, int, int, int] | None:
    rows = np.flatnonzero(ink.any(axis=1))
    cols = np.flatnonzero(ink.any(axis=0))
    if rows.size == 0:
        return None
    return int(cols[0]), int(rows[0]), int(cols[-1]) + 1, int(rows[-1]) + 1


def _gaps(profile: np.ndarray, min_gap: int) -> list[tuple[int, int]]:
    """Interior runs of empty entries (``profile`` False) at least ``min_gap`` long."""
    edges = np.flatnonzero(np.diff(np.concatenate(([0], ~profile, [0])).astype(np.int8)))
    runs = zip(edges[::2].tolist(), edges[1::2].tolist(), strict=True)
    return [(i, j) for i, j in runs if i > 0 and j < profile.size and j - i >= min_gap]


def _merge_slivers(edges: list[int], ratio: float = 0.2) -> list[tuple[int, int]]:
    """Segments from gap edges, with slivers (< ``ratio`` of the longest) joined to a neighbour.

    A gutter inside one chart (say between the tick labels and the plot) would otherwise cut the
    chart into pieces; gutters between whole figures give segments of similar length.
    """
    segs = [(a, b) for a, b in zip(edges[::2], edges[1::2], strict=True)]
    while len(segs) > 1:
        longest = max(b - a for a, b in segs)
        i = min(range(len(segs)), key=lambda k: segs[k][1] - segs[k][0])
        if segs[i][1] - segs[i][0] >= ratio * longest:
            break
        if i == 0:
            j = 1
        elif i == len(segs) - 1:
            j = i - 1
        else:  # join the neighbour across the narrower gap
            j = i - 1 if segs[i][0] - segs[i - 1][1] <= segs[i + 1][0] - segs[i][1] else i + 1
        a, b = min(i, j), max(i, j)
        segs[a : b + 1] = [(segs[a][0], segs[b][1])]
    return segs


def xy_cut(
    ink: np.ndarray, min_gap: int, axes: str = "xy", depth: int = 0
) -> list[tuple[int, int, int, int]]:
    """Recursively split an ink mask along blank gutters; boxes are relative to ``ink``."""
    box = _trim(ink)
    if box is None:
        return []
    x0, y0, x1, y1 = box
    sub = ink[y0:y1, x0:x1]
    if depth < 6:
        for axis in axes:
            # A column (row) is blank when at most 1 pixel of it is ink (JPEG speckle).
            counts = sub.sum(axis=0) if axis == "x" else sub.sum(axis=1)
            gaps = _gaps(counts > 1, min_gap)
            if not gaps:
                continue
            segments = _merge_slivers([0, *[g for gap in gaps for g in gap], counts.size])
            if len(segments) < 2:
                continue
            parts = []
            for a, b in segments:
                piece = sub[:, a:b] if axis == "x" else sub[a:b, :]
                for px0, py0, px1, py1 in xy_cut(piece, min_gap, axes, depth + 1):
                    if axis == "x":
                        parts.append((x0 + a + px0, y0 + py0, x0 + a + px1, y0 + py1))
                    else:
                        parts.append((x0 + px0, y0 + a + py0, x0 + px1, y0 + a + py1))
            return parts
    return [(x0, y0, x1, y1)]


def _longest_run(mask: np.ndarray, axis: int) -> int:
    """Longest run of True along ``axis`` (1: within rows, 0: within columns)."""
    m = mask if axis == 1 else mask.T
    if m.size == 0:
        return 0
    best = 0
    # Only rows with enough ink can hold a long run; checking those keeps this cheap.
    for row in m[m.sum(axis=1) > m.shape[1] // 3]:
        padded = np.concatenate(([0], row.view(np.int8), [0]))
        d = np.diff(padded)
        starts, ends = np.flatnonzero(d == 1), np.flatnonzero(d == -1)
        if starts.size:
            best = max(best, int((ends - starts).max()))
    return best


def part_stats(crop: np.ndarray, page_w: int, page_h: int) -> dict[str, float]:
    """Pixel statistics of an RGB crop used to tell photographs, charts, logos and text apart."""
    h, w = crop.shape[:2]
    f = crop.astype(np.int16)
    mx, mn = f.max(axis=2), f.min(axis=2)
    chroma = mx - mn
    ink = mn < 225
    n_ink = max(1, int(ink.sum()))
    gray = f.mean(axis=2)
    gx = np.abs(np.diff(gray, axis=1))
    # "Soft" gradients (small but non-zero steps) are typical of continuous-tone photographs;
    # flat-colour graphics and text are mostly zero steps plus a few hard edges.
    soft = float(((gx > 2) & (gx < 24)).mean()) if gx.size else 0.0
    # Longest straight ink run along a row or a column (axes, grid lines, frames), relative to
    # the crop size: charts have them, paragraphs of text do not.
    line = max(_longest_run(ink, axis=1) / max(1, w), _longest_run(ink, axis=0) / max(1, h))
    return {
        "w_rel": w / page_w,
        "h_rel": h / page_w,  # relative to the page width, so portrait/landscape pages agree
        "area_rel": (w * h) / (page_w * page_h),
        "white": float(1.0 - ink.mean()),
        "colour": float((chroma[ink] > 40).sum() / n_ink),
        "dark": float((mx[ink] < 110).sum() / n_ink),
        "soft": soft,
        "line": float(line),
    }


def classify_part(source: str, stats: dict[str, float]) -> str | None:
    """The DocCount class of a detector part, or None when it should not be counted."""
    small = stats["h_rel"] < 0.095 and stats["area_rel"] < 0.03
    coloured_mark = stats["colour"] > 0.25
    if source == "table":
        # A table part needs rules/cell fills or some height; a lone caption line does not count.
        return "Table" if stats["line"] > 0.5 or stats["h_rel"] > 0.06 else None
    if source == "figure":
        if stats["white"] < 0.3 and not small:
            return "Photograph"
        if stats["area_rel"] < 0.004 or (stats["w_rel"] < 0.05 and stats["h_rel"] < 0.05):
            return None  # a speck split off a larger region
        if small:
            return "Brand Logo" if coloured_mark else None
        if stats["soft"] > 0.25 and stats["white"] < 0.5:
            return "Photograph"
        if stats["colour"] > 0.05 or stats["line"] > 0.5:
            return "Chart / Graph"
        return None  # black-on-white text that the detector called a figure
    # Other labels: only small coloured marks (logos the detector called header/title/text).
    if small and coloured_mark and stats["area_rel"] > 0.0008:
        return "Brand Logo"
    return None


def overlap(a: tuple[int, int, int, int], b: tuple[int, int, int, int]) -> float:
    """Intersection over the smaller box."""
    ix = min(a[2], b[2]) - max(a[0], b[0])
    iy = min(a[3], b[3]) - max(a[1], b[1])
    if ix <= 0 or iy <= 0:
        return 0.0
    area = min((a[2] - a[0]) * (a[3] - a[1]), (b[2] - b[0]) * (b[3] - b[1]))
    return ix * iy / max(1, area)
