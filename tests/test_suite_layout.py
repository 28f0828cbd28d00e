"""The test suite's own layout: no test module imports another test module or conftest.py (shared code
lives in tests/support/, fixtures in conftest.py), so one broken import cannot stop another module from
being collected; and scripts/fix_test_imports.py turns old-style imports into the new ones."""

from __future__ import annotations

import ast
import importlib.util
import sys
from pathlib import Path

from support.cli import REPO

TESTS = REPO / "tests"


def imported_names(path: Path) -> list[tuple[int, str]]:
    """(line, top-level module) of every import in the file, at any depth."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name.split(".")[0]) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            found.append((node.lineno, node.module.split(".")[0]))
    return found


def cross_imports(tests: Path) -> list[str]:
    """Every import of conftest or of a test module by a test module, conftest or a support module, and
    every support module imported by its bare name (`import datagen`: it only works from tests/support/)."""
    files = [*sorted(tests.glob("test_*.py")), tests / "conftest.py", *sorted(tests.glob("support/*.py"))]
    bare = {p.stem for p in tests.glob("support/*.py")} - {"__init__"}
    return [
        f"{path.relative_to(tests)}:{line} imports {name}"
        for path in files
        if path.exists()
        for line, name in imported_names(path)
        if name == "conftest" or name.startswith("test_") or name in bare
    ]


def test_no_test_module_imports_another_or_conftest() -> None:
    assert cross_imports(TESTS) == []


def test_the_cross_import_check_can_fail(tmp_path: Path) -> None:
    (tmp_path / "support").mkdir()
    (tmp_path / "test_a.py").write_text("def f():\n    from test_b import helper\n")
    (tmp_path / "test_b.py").write_text("import conftest\nfrom support.cli import run_cli\n")
    (tmp_path / "support" / "x.py").write_text("from test_a import f\n")
    (tmp_path / "support" / "datagen.py").write_text("import x\n")
    (tmp_path / "test_c.py").write_text("import datagen\nfrom support import datagen as d\n")
    assert cross_imports(tmp_path) == [
        "test_a.py:2 imports test_b",
        "test_b.py:1 imports conftest",
        "test_c.py:1 imports datagen",
        "support/datagen.py:1 imports x",
        "support/x.py:1 imports test_a",
    ]


def fixer():
    spec = importlib.util.spec_from_file_location(
        "fix_test_imports", REPO / "scripts" / "fix_test_imports.py"
    )
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("fix_test_imports", module)
    spec.loader.exec_module(module)
    return module


def test_old_imports_are_rewritten_to_support() -> None:
    old = (
        "import pytest\n"
        "from conftest import REPO, TestServer, run_cli as cli\n"
        "from openai_test_server import TestServer as TS\n"
        "import datagen  # noqa: E402\n"
        "from test_sweep import processes_naming\n"
        "from test_provider_recipes import (\n    ROWS,\n    read_records,\n)\n\n\n"
        "def f():\n    from datagen import sha\n"
    )
    assert fixer().rewrite(old, "t.py") == (
        "import pytest\n"
        "from support.cli import REPO, run_cli as cli\n"
        "from support.openai_test_server import TestServer\n"
        "from support.openai_test_server import TestServer as TS\n"
        "from support import datagen  # noqa: E402\n"
        "from support.cli import processes_naming\n"
        "from support.recipes import ROWS\n"
        "from support.cli import read_records\n\n\n"
        "def f():\n    from support.datagen import sha\n"
    )


def test_the_rewrite_names_what_it_does_not_know() -> None:
    fix = fixer()
    try:
        fix.rewrite("from test_sweep import something_new\n", "t.py")
    except fix.UnknownName as e:
        assert "t.py:1" in str(e) and "something_new" in str(e)
    else:
        raise AssertionError("an unknown name was rewritten")


def xdist_overrides(text: str) -> list[str]:
    """The pytest-xdist hooks and private classes a conftest reaches into (a scheduler of its own breaks
    with each xdist release; `make test` uses a public --dist mode instead)."""
    names = ("pytest_xdist_make_scheduler", "_split_scope", "xdist.scheduler", "loadscopereorder")
    return [name for name in names if name in text]


def test_the_suite_is_scheduled_by_a_public_xdist_mode() -> None:
    assert xdist_overrides((TESTS / "conftest.py").read_text()) == []
    assert xdist_overrides("from xdist.scheduler import LoadScopeScheduling") == ["xdist.scheduler"]
    target = (REPO / "Makefile").read_text().split("\ntest:", 1)[1].split("\n\n", 1)[0]
    assert "--dist loadfile" in target  # a module's module-scoped setup stays on one worker
