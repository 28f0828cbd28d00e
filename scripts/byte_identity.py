"""Check that two versions of the evaluator score the same run folders to the same bytes.

    python scripts/byte_identity.py OLD_TREE NEW_TREE RUNS_DIR
    # e.g. after `make test`: every run folder the tests left behind, old code against new
    git worktree add /tmp/old HEAD
    python scripts/byte_identity.py /tmp/old . /tmp/pytest-of-$USER/pytest-current

Each tree scores a copy of every run folder under RUNS_DIR (a folder with run_config.json and
manifest.jsonl) in its own process: `score_run`, then the HTML report (no thumbnails); then each run with
the next one: `compare_runs`, the leaderboard of the two and the compare page. The SHA-256 of every output
(responses.jsonl, scores/summary.{json,md}, scores/per_question.csv, the pages with their time stamp
blanked) or the error each raised is compared between the trees. Prints the differences; exit 1 if any.
For refactors that promise "no behaviour change" (issue 35); not run by `make test`.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

STAMP = re.compile(rb"\d{4}-\d\d-\d\d \d\d:\d\d UTC")  # the pages' "written at" line
OUTPUTS = ("responses.jsonl", "scores/summary.json", "scores/summary.md", "scores/per_question.csv")


def digest(data: bytes) -> str:
    return hashlib.sha256(STAMP.sub(b"STAMP", data)).hexdigest()


def failure(exc: BaseException, work: Path) -> str:
    return f"{type(exc).__name__}: {exc}".replace(str(work), "WORK")[:300]


def score_all(src: Path, work: Path) -> dict[str, Any]:
    """Run in a worker whose sys.path starts with one tree."""
    from evaluator.report import write_report
    from evaluator.scoring import score_run

    runs = sorted({p.parent for p in src.rglob("run_config.json") if (p.parent / "manifest.jsonl").is_file()})
    out: dict[str, Any] = {}
    scored: list[Path] = []
    for i, run in enumerate(runs):
        copy = work / f"{i:05d}"
        shutil.copytree(run, copy, symlinks=True, ignore=shutil.ignore_patterns("responses.jsonl", "scores"))
        name = str(run.relative_to(src))
        try:
            score_run(copy)
            write_report(copy, images=False, log=None)
            out[name] = {f: digest((copy / f).read_bytes()) for f in (*OUTPUTS, "scores/report.html")}
            scored.append(copy)
        except BaseException as exc:  # a refusal is an output too: both trees must refuse alike
            out[name] = failure(exc, work)
    for a, b in zip(scored, scored[1:], strict=False):
        out.update(pair_outputs(a, b, work))
    return out


def pair_outputs(a: Path, b: Path, work: Path) -> dict[str, str]:
    from evaluator.core.jsonl import utf8_json
    from evaluator.report import write_compare_report
    from evaluator.scoring import merge_run
    from evaluator.scoring.compare import compare_runs
    from evaluator.scoring.leaderboard import BoardRun, build_leaderboard

    steps = {
        "compare": lambda: utf8_json(
            compare_runs([a, b], intersect=True, resamples=200).data, sort_keys=True
        ),
        "leaderboard": lambda: utf8_json(
            build_leaderboard([BoardRun("a", merge_run(a)), BoardRun("b", merge_run(b))], resamples=200),
            sort_keys=True,
        ),
        "compare page": lambda: write_compare_report(
            a, b, work / "compare.html", images=False, log=None
        ).read_bytes(),
    }
    out = {}
    for step, make in steps.items():
        try:
            out[f"{a.name}+{b.name} {step}"] = digest(make())
        except BaseException as exc:
            out[f"{a.name}+{b.name} {step}"] = failure(exc, work)
    return out


def run_tree(tree: Path, src: Path, tmp: Path) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(tree.resolve())}
    env.pop("MODEL_API_KEY", None)
    result = tmp / f"{tree.resolve().name}-{os.urandom(4).hex()}.json"
    cmd = [sys.executable, __file__, "--worker", str(src), str(tmp / result.stem), str(result)]
    subprocess.run(cmd, env=env, check=True)
    return json.loads(result.read_text())


def main(argv: list[str]) -> int:
    if argv[:1] == ["--worker"]:
        src, work, result = map(Path, argv[1:4])
        work.mkdir(parents=True)
        result.write_text(json.dumps(score_all(src, work), sort_keys=True))
        return 0
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    old_tree, new_tree, src = map(Path, argv)
    with tempfile.TemporaryDirectory() as tmp:
        old, new = run_tree(old_tree, src, Path(tmp)), run_tree(new_tree, src, Path(tmp))
    differ = sorted(k for k in old.keys() | new.keys() if old.get(k) != new.get(k))
    for key in differ:
        print(f"{key}\n  old: {old.get(key)}\n  new: {new.get(key)}")
    runs = sum(1 for v in old.values() if isinstance(v, dict))
    refused = sum(1 for k, v in old.items() if isinstance(v, str) and " " not in k)
    pairs = sum(1 for k in old if k.endswith(" compare"))
    print(
        f"{runs} run folders scored, {refused} refused, {pairs} pairs compared: {len(differ)} difference(s)"
    )
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
