"""The commands the documents show: the README names `make demo` and `make test` (and stays short), every
`doccount` command and option in a fenced block of README.md or docs/*.md exists (checked against the
click commands of evaluator/cli/main.py), and docs/demo.md and docs/evaluate.md start with the README's
commands."""

from __future__ import annotations

import re

import click
from support.cli import REPO

from evaluator.cli.main import main


def test_the_readme_names_both_commands() -> None:
    readme = (REPO / "README.md").read_text()
    assert re.search(r"^make demo\b", readme, re.M) and re.search(r"^make test\b", readme, re.M)
    assert len(readme.splitlines()) < 250


def _doc_commands(text: str) -> list[tuple[str, list[str]]]:
    """Each `doccount ...` command in the fenced blocks (continuation lines joined, comments cut)."""
    out = []
    for block in re.findall(r"```[a-z]*\n(.*?)```", text, re.S):
        for line in re.sub(r"\\\n\s*", " ", block).splitlines():
            line = line.split(" #")[0]
            for m in re.finditer(r"(?:^|[;&|(]|\s)(doccount(?:-evaluate|-score)?)\s+([^;&|)]*)", line):
                out.append((m.group(1), m.group(2).split()))
    return out


def _command(prog: str, words: list[str]) -> tuple[click.Command | None, list[str]]:
    if prog != "doccount":
        return main.commands["evaluate" if prog.endswith("evaluate") else "score"], words
    cmd: click.Command | None = main
    while isinstance(cmd, click.Group) and words and not words[0].startswith("-"):
        cmd, words = cmd.commands.get(words[0]), words[1:]
    return cmd, words


def test_every_documented_command_and_option_exists() -> None:
    bad = []
    for page in [*sorted((REPO / "docs").glob("*.md")), REPO / "README.md"]:
        for prog, words in _doc_commands(page.read_text()):
            cmd, rest = _command(prog, words)
            if cmd is None:
                bad.append((page.name, prog, words))
                continue
            known = {o for p in cmd.params for o in (*p.opts, *p.secondary_opts)} | {"--help"}
            flags = [w.split("=")[0] for w in rest if re.fullmatch(r"--[a-z][a-z0-9-]*(=.*)?", w)]
            bad += [(page.name, prog, f) for f in flags if f not in known]
    assert bad == []


def test_the_demo_and_evaluate_docs_start_with_the_readmes_commands() -> None:
    demo = (REPO / "docs" / "demo.md").read_text()
    first = re.search(r"```[a-z]*\n(.*?)```", demo, re.S)
    assert first and first.group(1).startswith("doccount demo")
    assert "python -m evaluator.demo.reference_server" not in demo
    assert ("doccount", ["serve-reference", "--port", "0", "--port-file", "ref.port"]) in _doc_commands(demo)
    evaluate = (REPO / "docs" / "evaluate.md").read_text()
    quick = evaluate[evaluate.index("## A remote API") :].split("```")[1]
    assert "scripts/" not in quick and "doccount-score" not in quick
    assert "doccount evaluate --model" in quick and "doccount score runs/" in quick
