"""Drawing the score plots in a child process, so that they cost the scorer no time of its own.

Importing matplotlib and drawing the two PNGs takes about half a second of CPU. For a large run the
scorer starts a child interpreter when it starts reading the run; the child imports matplotlib while the
parent merges the records, then draws while the parent writes responses.jsonl (on a second core).
The child runs the same `render_plots` as the in-process path, so the PNG bytes are the same; if the
child cannot be started or fails, the parent draws in-process. Nothing here imports matplotlib.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from evaluator.scoring.summary_shape import Summary

PLOT_GROUPS = "per_class_accuracy.png"
PLOT_PRED_TRUE = "predicted_vs_true.png"
CHILD_MIN_RECORDS_BYTES = 20 << 20  # ~10,000 records of ~2 KB
CHILD_TIMEOUT_S = 300  # a first matplotlib import in a fresh container builds its font cache
_PACKAGE_PARENT = str(Path(__file__).resolve().parents[2])  # the folder that holds evaluator/
_CHILD = "import sys; sys.path.insert(0, sys.argv[1]); from evaluator.scoring.plot_worker import child_main; child_main()"


def render_plots(
    summary: Summary, pairs: Counter[tuple[int, int]], questions: int, scores: Path
) -> tuple[dict[str, str], list[str]]:
    """Draw both plots into `scores`: ({plot key: file name}, [problems]). A failed plot is a problem."""
    from evaluator.scoring import plots

    written: dict[str, str] = {}
    problems: list[str] = []
    jobs = {
        "per_class_accuracy": (PLOT_GROUPS, lambda path: plots.group_accuracy_png(path, summary)),
        "predicted_vs_true": (
            PLOT_PRED_TRUE,
            lambda path: plots.predicted_vs_true_png(path, pairs, questions, summary),
        ),
    }
    for key, (name, render) in jobs.items():
        try:
            render(scores / name)
            written[key] = name
        except Exception as exc:  # a plot must never cost the scores themselves
            problems.append(f"plot {name} was not written ({type(exc).__name__}: {exc})")
    return written, problems


def child_pays_off(records_file: Path) -> bool:
    """Whether a child is worth starting: a large run, and matplotlib not already imported here.

    A child spends ~0.3 s starting and importing matplotlib; that is worth it when the merge it overlaps
    with is longer (about 10,000 records and more), not for a small run or in a process that has drawn
    before (tests, a notebook), where matplotlib is already in memory.
    """
    try:
        large = records_file.stat().st_size >= CHILD_MIN_RECORDS_BYTES
    except OSError:
        large = False
    return large and "matplotlib" not in sys.modules


class PlotWorker:
    """Draws the plots once it is given the summary: in a child interpreter, or in-process (module doc)."""

    def __init__(self, child: bool = True) -> None:
        self.proc: subprocess.Popen[bytes] | None = None
        self.payload: tuple[Summary, Counter[tuple[int, int]], int, Path] | None = None
        if not child:
            return
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", _CHILD, _PACKAGE_PARENT],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
        except OSError:
            self.proc = None  # drawn in-process by result()

    def submit(self, summary: Summary, pairs: Counter[tuple[int, int]], questions: int, scores: Path) -> None:
        """Hand over what to draw; the child draws while the caller goes on."""
        self.payload = (summary, pairs, questions, scores)
        if self.proc is None or self.proc.stdin is None:
            return
        message = {
            "summary": summary,
            "pairs": [[t, p, n] for (t, p), n in pairs.items()],
            "questions": questions,
            "scores": str(scores.resolve()),
        }
        try:
            self.proc.stdin.write(json.dumps(message).encode("ascii"))  # ensure_ascii: no surrogate trouble
            self.proc.stdin.close()  # the child reads to the end of its input
        except (OSError, ValueError):
            self.cancel()
        else:
            self.proc.stdin = None  # closed: communicate() must not touch it

    def result(self) -> tuple[dict[str, str], list[str]]:
        """Wait for the child's plots; draw them here instead if it could not."""
        assert self.payload is not None, "submit() first"
        if self.proc is not None:
            try:
                out, _err = self.proc.communicate(timeout=CHILD_TIMEOUT_S)
                if self.proc.returncode == 0:
                    done = json.loads(out)
                    return dict(done["written"]), list(done["problems"])
            except (subprocess.TimeoutExpired, ValueError, KeyError, TypeError):
                pass
            self.cancel()
        return render_plots(*self.payload)

    def cancel(self) -> None:
        """Stop the child (the scoring failed, or the child is of no use)."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        for pipe in (proc.stdin, proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()


def child_main() -> None:
    """The child's side: read what to draw from stdin, draw, print what was written as JSON."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=1) as reader:  # take the message whenever it comes (no full pipe)
        incoming = reader.submit(sys.stdin.buffer.read)
        import evaluator.scoring.plots  # noqa: F401  (the slow part, done before the summary arrives)

        message = json.loads(incoming.result())
    pairs = Counter({(t, p): n for t, p, n in message["pairs"]})
    written, problems = render_plots(message["summary"], pairs, message["questions"], Path(message["scores"]))
    sys.stdout.write(json.dumps({"written": written, "problems": problems}))
