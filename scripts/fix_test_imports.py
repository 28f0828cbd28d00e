"""Rewrite test files' imports to the tests/support/ layout (servers, emulators and shared helpers
moved out of tests/ and out of conftest.py and test modules).

    python scripts/fix_test_imports.py tests/test_new_thing.py ...   # rewrite in place
    python scripts/fix_test_imports.py --check tests/*.py            # list what would change, exit 1

Old import lines such as `from conftest import run_cli`, `from openai_test_server import TestServer`,
`import datagen` or `from test_sweep import processes_naming` become imports from `support.*`; the
files are then sorted and formatted by ruff when it is on PATH or in .venv/bin. A name the table below
does not know stops the script with its file and line: move that helper to tests/support/ first.
"""

from __future__ import annotations

import argparse
import ast
import shutil
import subprocess
import sys
from pathlib import Path

# modules moved whole from tests/ to tests/support/
MOVED = {
    "adversarial_server", "batch_emulator", "datagen", "hub_test_server", "openai_test_server",
    "pacing_sim", "provider_emulators", "ratelimit_server", "slurm_cluster", "standin_server",
}  # fmt: skip

# names that lived in conftest.py or in a test module, and their new home
NAMES: dict[str, dict[str, str]] = {
    "conftest": {
        **dict.fromkeys(
            [
                "REPO",
                "FAST_RETRIES",
                "EVALUATE",
                "SCORE",
                "clean_env",
                "run_cli",
                "fast_eval_cmd",
                "eval_args",
                "read_records",
            ],
            "support.cli",
        ),  # fmt: skip
        "TestServer": "support.openai_test_server",
        "BatchEmulator": "support.batch_emulator",
        "doccount_rows": "support.datagen",
        "write_doccount": "support.datagen",
        "complete_records": "support.datagen",
    },
    "test_hub": dict.fromkeys(["closed_port_url", "doccount", "hf"], "support.cli"),
    "test_scripts": {"run_script": "support.cli"},
    "test_sweep": dict.fromkeys(["processes_naming", "sweep_cli"], "support.cli"),
    "test_leaderboard": dict.fromkeys(["CLASSES", "board", "merged", "row", "typed"], "support.boards"),
    "test_archive": dict.fromkeys(["members", "rewrite", "sha"], "support.archives"),
    "test_trust_archive": dict.fromkeys(["repacked", "sums"], "support.archives"),
    "test_provider_recipes": dict.fromkeys(
        ["OPENAI_RECIPE", "ROWS", "assert_all_ok", "chat_bodies", "evaluate", "serve"], "support.recipes"
    )
    | {"read_records": "support.cli"},
    "test_report": dict.fromkeys(["make_run", "NEEDLE", "INJECTION"], "support.reports"),
    "test_report_browser": dict.fromkeys(["Browser", "find_chromium", "run_in_browser"], "support.browser"),
    "test_serve_sweep": dict.fromkeys(
        ["Study", "wait_until", "overlapping_gpu_sharing", "STANDIN"], "support.study"
    ),
    "test_vllm_sweep": dict.fromkeys(
        ["FLAGS", "marked", "tiny_model", "vllm_env", "vllm_python"], "support.vllm"
    ),
    "test_batch": dict.fromkeys(
        ["FAST", "evaluate", "interrupt_batch_run", "ledger", "records"], "support.batchrun"
    ),
}


class UnknownName(Exception):
    pass


def target(module: str, name: str, where: str) -> str:
    """The module `name` is imported from now."""
    if module in MOVED:
        return f"support.{module}"
    found = NAMES.get(module, {}).get(name)
    if found is None:
        raise UnknownName(f"{where}: `from {module} import {name}`: move {name} to tests/support/ first")
    return found


def rewritten(node: ast.stmt, where: str) -> list[str] | None:
    """The new import lines for one statement, or None when it stays as it is."""
    if isinstance(node, ast.ImportFrom) and not node.level and node.module:
        if node.module not in MOVED and node.module not in NAMES:
            return None
        groups: dict[str, list[str]] = {}
        for alias in node.names:
            spelled = alias.name + (f" as {alias.asname}" if alias.asname else "")
            groups.setdefault(target(node.module, alias.name, where), []).append(spelled)
        return [f"from {mod} import {', '.join(names)}" for mod, names in groups.items()]
    if isinstance(node, ast.Import) and any(a.name in MOVED for a in node.names):
        lines = []
        for alias in node.names:
            if alias.name in MOVED:
                lines.append(
                    f"from support import {alias.name}" + (f" as {alias.asname}" if alias.asname else "")
                )
            else:
                lines.append(f"import {alias.name}" + (f" as {alias.asname}" if alias.asname else ""))
        return lines
    return None


def rewrite(text: str, where: str) -> str:
    """The file's text with every old import replaced (statements at any depth, indentation kept)."""
    lines = text.splitlines(keepends=True)
    edits = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Import | ast.ImportFrom):
            new = rewritten(node, f"{where}:{node.lineno}")
            if new is not None:
                edits.append((node.lineno - 1, node.end_lineno or node.lineno, node.col_offset, new))
    for start, end, col, new in sorted(edits, reverse=True):
        old = "".join(lines[start:end])
        # a one-line import keeps its comment (`# noqa: F401  (the fixture)`); a longer one its E402 waiver
        comment = old[old.index("#") :].rstrip("\n") if end - start == 1 and "#" in old else ""
        comment = comment or ("# noqa: E402" if "E402" in old else "")
        lines[start:end] = [" " * col + line + (f"  {comment}" if comment else "") + "\n" for line in new]
    return "".join(lines)


def ruff() -> str | None:
    local = Path(__file__).resolve().parents[1] / ".venv" / "bin" / "ruff"
    return str(local) if local.exists() else shutil.which("ruff")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="+", type=Path)
    parser.add_argument("--check", action="store_true", help="only list the files that would change")
    args = parser.parse_args()
    changed = []
    for path in args.files:
        text = path.read_text()
        try:
            new = rewrite(text, str(path))
        except UnknownName as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        if new != text:
            changed.append(path)
            if not args.check:
                path.write_text(new)
    for path in changed:
        print(("would rewrite " if args.check else "rewrote ") + str(path))
    if changed and not args.check and (tool := ruff()):
        files = [str(p) for p in changed]
        subprocess.run([tool, "check", "--fix", "--select", "I001,F401", "--quiet", *files], check=False)
        subprocess.run([tool, "format", "--quiet", *files], check=False)
    return 1 if args.check and changed else 0


if __name__ == "__main__":
    sys.exit(main())
