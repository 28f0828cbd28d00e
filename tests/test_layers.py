"""The package layout's rules that import-linter cannot state (its contracts, in pyproject.toml, run in
`make lint`: the layers, "nothing imports cli or demo", no import cycle inside a package).

- No module takes a private (`_name`) from another module: a name another module needs is public in
  its home module. Every import counts: module level, inside functions, relative or absolute, and
  `module._name` through an imported module.
- Every package's docstring says what it owns and what it may import.
- Only cli/ and demo/ print: library code reports through evaluator.core.output (say, answer).
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parents[1] / "evaluator"


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported_module(node: ast.ImportFrom, importer: str, is_package: bool) -> str:
    """The absolute name of the module a `from ... import` reads from."""
    if not node.level:
        return node.module or ""
    base = importer.split(".") if is_package else importer.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def private_crossings(root: Path) -> list[str]:
    """Every `from other import _name` and `other._name` between two modules under `root`."""
    found = []
    for path in sorted(root.rglob("*.py")):
        me = module_name(path, root)
        tree = ast.parse(path.read_text(), filename=str(path))
        modules: set[str] = set()  # local names bound to another evaluator module
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                source = imported_module(node, me, path.name == "__init__.py")
                if source.split(".")[0] != root.name or source == me:
                    continue
                for alias in node.names:
                    if is_private(alias.name):
                        found.append(f"{me}:{node.lineno} takes {alias.name} from {source}")
                    modules.add(alias.asname or alias.name)
            elif isinstance(node, ast.Import):
                modules.update(a.asname for a in node.names if a.asname and a.name.startswith(root.name))
        found += [
            f"{me}:{node.lineno} uses {node.value.id}.{node.attr}"
            for node in ast.walk(tree)
            if isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in modules
            and is_private(node.attr)
        ]
    return found


def test_no_module_takes_a_private_name_from_another() -> None:
    assert private_crossings(PACKAGE_DIR) == []


def test_the_private_name_check_can_fail(tmp_path: Path) -> None:
    root = tmp_path / "evaluator"
    (root / "request").mkdir(parents=True)
    (root / "request" / "client.py").write_text("def _error_message():\n    pass\n")
    (root / "request" / "check.py").write_text(
        "def f():\n    from .client import _error_message\n"
        "from evaluator.request import client as c\nc._error_message()\n"
    )
    assert private_crossings(root) == [
        "evaluator.request.check:2 takes _error_message from evaluator.request.client",
        "evaluator.request.check:4 uses c._error_message",
    ]


# Writes to a stream outside cli/ and demo/ that are not a person's messages, or not yet moved: each with why.
PRINTS_ALLOWED = {
    "evaluator/scoring/plot_worker.py": "the plot child process hands its result to its parent on stdout",
    "evaluator/study/progress.py": "the sweep's live board, redrawn in place on the stream the cli hands it",
    "evaluator/study/sweep.py": "the sweep's status lines, on the stream the cli hands it",
    "evaluator/study/guard.py": "a program of its own (python -m evaluator.study.guard), its stderr a log",
}


def stream_writes(root: Path) -> list[str]:
    """print(), click.echo() and sys.stdout/sys.stderr writes in modules outside cli/ and demo/."""
    found = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root.parent).as_posix()
        if rel.split("/")[1] in ("cli", "demo") or rel in PRINTS_ALLOWED:
            continue
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Call):
                name = ast.unparse(node.func)
                if name in ("print", "click.echo", "sys.stdout.write", "sys.stderr.write"):
                    found.append(f"{rel}:{node.lineno} {name}")
    return found


def test_only_cli_and_demo_print() -> None:
    assert stream_writes(PACKAGE_DIR) == []
    assert len(PRINTS_ALLOWED) <= 4  # shrink it, do not grow it


def test_every_package_says_what_it_owns_and_what_it_may_import() -> None:
    for init in sorted(PACKAGE_DIR.glob("*/__init__.py")):
        doc = ast.get_docstring(ast.parse(init.read_text())) or ""
        assert "May import" in doc, f"{init} has no 'May import' line in its docstring"
