"""The package layout's rules, read from the source (AST), imports inside functions included.

evaluator/ is a stack of packages named for the stage of the flow they serve (README, developer
notes). A package imports only itself and packages lower in LAYERS; `cli` is the top and nothing
imports it (the `python -m evaluator` shim aside); the module import graph has no cycle; no module
takes a private (`_name`) from another package. Every import counts: module level, inside functions,
under TYPE_CHECKING, relative or absolute.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path

import pytest

PACKAGE_DIR = Path(__file__).resolve().parents[1] / "evaluator"

# Lowest first. Packages on the same layer do not import each other.
LAYERS: dict[str, int] = {
    "core": 0,
    "data": 1,
    "request": 2,
    "runfolder": 3,
    "scoring": 4,
    "report": 5,
    "evaluation": 6,
    "archive": 7,
    "demo": 7,
    "cli": 8,
}
# Modules directly under evaluator/: the version (imported by anyone) and the `python -m evaluator` shim.
ROOT_MODULES = {"evaluator": -1, "evaluator.__main__": 9}


@dataclass
class Use:
    """One import (or attribute use) of an evaluator module by another."""

    importer: str
    target: str
    line: int
    names: list[str] = field(default_factory=list)


def module_name(path: Path, root: Path) -> str:
    rel = path.relative_to(root.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def all_modules(root: Path) -> dict[str, Path]:
    return {module_name(p, root): p for p in sorted(root.rglob("*.py"))}


def _resolve_from(node: ast.ImportFrom, importer: str, is_package: bool) -> str:
    if not node.level:
        return node.module or ""
    base = importer.split(".") if is_package else importer.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _private_attribute_uses(tree: ast.AST, aliases: dict[str, str], importer: str) -> list[Use]:
    """`mod._name` where `mod` is a name bound to an evaluator module by an import."""
    out = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in aliases
            and node.attr.startswith("_")
            and not node.attr.startswith("__")
        ):
            out.append(Use(importer, aliases[node.value.id], node.lineno, [node.attr]))
    return out


def uses_of(path: Path, importer: str, modules: dict[str, Path]) -> tuple[list[Use], list[Use]]:
    """(imports of evaluator modules, private attribute uses) of one module."""
    tree = ast.parse(path.read_text(), filename=str(path))
    is_package = path.name == "__init__.py"
    uses: list[Use] = []
    aliases: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "evaluator":
                    uses.append(Use(importer, alias.name, node.lineno))
                    aliases[alias.asname or alias.name.split(".")[0]] = (
                        alias.asname and alias.name or "evaluator"
                    )
        elif isinstance(node, ast.ImportFrom):
            target = _resolve_from(node, importer, is_package)
            if target.split(".")[0] != "evaluator":
                continue
            plain = []
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                if sub in modules:  # `from package import module`
                    uses.append(Use(importer, sub, node.lineno))
                    aliases[alias.asname or alias.name] = sub
                else:
                    plain.append(alias.name)
            # `from package import module` names the module only (like `import package.module`); the
            # package's own __init__ is an edge when a name comes from it
            if plain or not node.names:
                uses.append(Use(importer, target, node.lineno, plain))
    return uses, _private_attribute_uses(tree, aliases, importer)


def package_of(module: str) -> str:
    """The layer key of a module: its first package under evaluator/, or the module itself at the root."""
    parts = module.split(".")
    return module if len(parts) < 2 or module in ROOT_MODULES else parts[1]


def layer_of(module: str) -> int | None:
    if module in ROOT_MODULES:
        return ROOT_MODULES[module]
    return LAYERS.get(package_of(module))


def import_graph(root: Path = PACKAGE_DIR) -> tuple[dict[str, Path], list[Use], list[Use]]:
    modules = all_modules(root)
    uses: list[Use] = []
    private: list[Use] = []
    for name, path in modules.items():
        u, p = uses_of(path, name, modules)
        uses += u
        private += p
    return modules, uses, private


def layer_violations(modules: dict[str, Path], uses: list[Use]) -> list[str]:
    bad = [f"{m}: its package {package_of(m)!r} is not in LAYERS" for m in modules if layer_of(m) is None]
    for use in uses:
        src, dst = package_of(use.importer), package_of(use.target)
        if src == dst or use.target == "evaluator":
            continue
        ls, ld = layer_of(use.importer), layer_of(use.target)
        if ls is None or ld is None or ld >= ls:
            bad.append(f"{use.importer}:{use.line} imports {use.target} (layer {ld} from layer {ls})")
    return bad


def cli_importers(uses: list[Use]) -> list[str]:
    return [
        f"{u.importer}:{u.line} imports {u.target}"
        for u in uses
        if package_of(u.target) == "cli"
        and package_of(u.importer) != "cli"
        and u.importer != "evaluator.__main__"
    ]


def private_crossings(uses: list[Use]) -> list[str]:
    return [
        f"{u.importer}:{u.line} takes {name} from {u.target}"
        for u in uses
        for name in u.names
        if name.startswith("_")
        and not name.startswith("__")
        and package_of(u.importer) != package_of(u.target)
    ]


def find_cycle(modules: dict[str, Path], uses: list[Use]) -> list[str] | None:
    """One cycle of the module graph (explicitly named modules only), or None; iterative DFS, three colours."""
    edges: dict[str, set[str]] = {m: set() for m in modules}
    for u in uses:
        if u.target in modules and u.target != u.importer:
            edges[u.importer].add(u.target)
    colour = dict.fromkeys(modules, 0)  # 0 new, 1 on the stack, 2 done
    for start in sorted(modules):
        if colour[start]:
            continue
        stack = [(start, iter(sorted(edges[start])))]
        path = [start]
        colour[start] = 1
        while stack:
            node, children = stack[-1]
            child = next(children, None)
            if child is None:
                colour[node] = 2
                stack.pop()
                path.pop()
            elif colour[child] == 1:
                return path[path.index(child) :] + [child]
            elif colour[child] == 0:
                colour[child] = 1
                path.append(child)
                stack.append((child, iter(sorted(edges[child]))))
    return None


GRAPH = import_graph()


def test_every_module_sits_in_a_layer_and_imports_only_lower_ones():
    modules, uses, _ = GRAPH
    assert len(modules) > 40
    assert layer_violations(modules, uses) == []


def test_nothing_imports_the_command_line():
    assert cli_importers(GRAPH[1]) == []


def test_no_import_cycle_counting_imports_inside_functions():
    modules, uses, _ = GRAPH
    assert find_cycle(modules, uses) is None


def test_no_private_name_is_taken_across_packages():
    _, uses, private = GRAPH
    crossings = private_crossings(uses) + [
        f"{u.importer}:{u.line} uses {u.target}.{u.names[0]}"
        for u in private
        if package_of(u.importer) != package_of(u.target)
    ]
    assert crossings == []


def test_every_package_says_what_it_owns_and_what_it_may_import():
    for init in sorted(PACKAGE_DIR.glob("*/__init__.py")):
        doc = ast.get_docstring(ast.parse(init.read_text())) or ""
        assert "May import" in doc, f"{init} has no 'May import' line in its docstring"


# ----------------------------------------------------------------------------- the checker can fail


def _write_tree(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "evaluator"
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


@pytest.mark.parametrize(
    "files, check",
    [
        # a function-level import of a higher layer (the old archive/reproduce -> cli)
        (
            {
                "__init__.py": "",
                "core/__init__.py": "",
                "cli/__init__.py": "",
                "core/a.py": "def f():\n    from evaluator.cli import main\n",
            },
            "layers",
        ),
        # a relative import of a higher layer
        (
            {
                "__init__.py": "",
                "data/__init__.py": "",
                "scoring/__init__.py": "",
                "scoring/x.py": "",
                "data/b.py": "def g():\n    from ..scoring import x\n",
            },
            "layers",
        ),
        (
            {
                "__init__.py": "",
                "archive/__init__.py": "",
                "cli/__init__.py": "",
                "archive/r.py": "import evaluator.cli\n",
            },
            "cli",
        ),
        # a cycle hidden inside functions, inside one package
        (
            {
                "__init__.py": "",
                "scoring/__init__.py": "",
                "scoring/a.py": "def f():\n    from evaluator.scoring.b import y\n",
                "scoring/b.py": "def g():\n    from evaluator.scoring import a\n",
            },
            "cycle",
        ),
        (
            {
                "__init__.py": "",
                "request/__init__.py": "",
                "evaluation/__init__.py": "",
                "request/client.py": "def _error_message():\n    pass\n",
                "evaluation/check.py": "from evaluator.request.client import _error_message\n",
            },
            "private",
        ),
        (
            {
                "__init__.py": "",
                "request/__init__.py": "",
                "evaluation/__init__.py": "",
                "request/client.py": "def _error_message():\n    pass\n",
                "evaluation/check.py": "from evaluator.request import client\nclient._error_message()\n",
            },
            "private",
        ),
    ],
)
def test_the_checks_catch_a_broken_tree(tmp_path, files, check):
    modules, uses, private = import_graph(_write_tree(tmp_path, files))
    found = {
        "layers": layer_violations(modules, uses),
        "cli": cli_importers(uses),
        "cycle": find_cycle(modules, uses),
        "private": private_crossings(uses) + [u.importer for u in private],
    }[check]
    assert found
