"""The size limits of the package (issue #40, point 9): no function over 60 lines, no module over 400
(but the few named in ONE_CONCEPT).

Measured with an ast walk (a function's end_lineno - lineno + 1, its decorators left out), so a split
that only moves lines around cannot hide a long function."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "evaluator"
MAX_FUNCTION = 60
MAX_MODULE = 400
# A module that is one concept may pass the budget (issue #47, point 5: modules are cut along a concept,
# not to a size); each one is named here with its own bound, and why it is one.
ONE_CONCEPT: dict[str, int] = {}  # study/sweep.py had 500 until it fit the budget


def _modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def long_functions(path: Path, root: Path = PACKAGE.parent) -> list[str]:
    """`path:line name (n lines)` for each function or method of the module over the limit."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            length = (node.end_lineno or node.lineno) - node.lineno + 1
            if length > MAX_FUNCTION:
                found.append(f"{path.relative_to(root)}:{node.lineno} {node.name} ({length} lines)")
    return found


def test_the_walk_sees_the_package() -> None:
    # a wrong path would make the two tests below pass on nothing
    assert len(_modules()) > 100
    assert (PACKAGE / "core" / "boundary.py") in _modules()


def test_no_function_over_60_lines() -> None:
    found = [line for path in _modules() for line in long_functions(path)]
    assert not found, "split these functions along their seams:\n" + "\n".join(found)


def test_no_module_over_400_lines() -> None:
    assert all((PACKAGE / name).is_file() for name in ONE_CONCEPT)  # an allowance outlives no module
    found = []
    for path in _modules():
        lines = len(path.read_text(encoding="utf-8").splitlines())
        if lines > ONE_CONCEPT.get(path.relative_to(PACKAGE).as_posix(), MAX_MODULE):
            found.append(f"{path.relative_to(PACKAGE.parent)} ({lines} lines)")
    assert not found, "split these modules along their seams:\n" + "\n".join(found)


def test_the_measure_counts_a_long_function(tmp_path: Path) -> None:
    # the measure itself: a 61-line function (a method too) is found, a 60-line one is not
    body = "\n".join(f"    x{i} = {i}" for i in range(58))
    method = body.replace("\n", "\n    ")
    src = (
        f"def short():\n{body}\n    return 0\n\n\n"
        f"def long():\n{body}\n    x = 1\n    return 0\n\n\n"
        f"class C:\n    def meth(self):\n    {method}\n        x = 1\n        return 0\n"
    )
    probe = tmp_path / "probe.py"
    probe.write_text(src, encoding="utf-8")
    assert [f.split()[1] for f in long_functions(probe, tmp_path)] == ["long", "meth"]


# Each file a run or sweep folder holds, by the name its one declaration gives it (issue #47, point 1)
FILE_NAMES = (
    "run_config.json",
    "manifest.jsonl",
    "responses.jsonl",
    "batches.json",
    "sweep.json",
    "sweep.toml",
    "summary.json",
    "summary.md",
    "per_question.csv",
    "report.html",
    "leaderboard.json",
    "leaderboard.md",
    "index.html",
)


def _constants(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    return [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)]


def test_each_file_name_is_declared_once() -> None:
    spelled = {name: [] for name in FILE_NAMES}
    for path in _modules():
        for value in _constants(path):
            if value in spelled:
                spelled[value].append(str(path.relative_to(PACKAGE.parent)))
    assert {k: v for k, v in spelled.items() if len(v) != 1} == {}


def test_no_cast_on_file_data() -> None:
    """`cast(` at most 3 in the package: a file's data is read through its type, not cast to it."""
    casts = [
        f"{path.relative_to(PACKAGE.parent)}:{node.lineno}"
        for path in _modules()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) == "cast"
    ]
    assert len(casts) <= 3, casts
