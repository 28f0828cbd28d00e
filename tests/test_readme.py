"""What README.md promises a user: the demo prints what the README quotes, the command list is every
command there is, and every document it links exists."""

from __future__ import annotations

import re

import pytest
from support.cli import REPO, run_cli

README = (REPO / "README.md").read_text()


def _block_after(heading: str) -> list[str]:
    """The non-empty lines of the first fenced block with no language tag after a heading."""
    lines = README[README.index(heading) :].splitlines()
    block, lang = None, None
    for line in lines:
        if line.startswith("```"):
            if block is None:
                block, lang = [], line[3:].strip()
            elif lang == "":
                return [x for x in block if x.strip()]
            else:
                block = None
        elif block is not None:
            block.append(line)
    raise AssertionError(f"no plain code block under {heading}")


def test_the_readme_is_short() -> None:
    assert len(README.splitlines()) <= 250


@pytest.mark.timeout(900)
def test_the_demo_prints_what_the_readme_quotes(demo_run) -> None:
    quoted = _block_after("## Try it: the demo")
    res, _ = demo_run
    assert res.returncode == 0, res.stderr[-3000:]
    printed = set(res.stdout.splitlines())
    # the README's class table leaves out the Markdown alignment row; every line it shows is printed
    missing = [line for line in quoted if line not in printed]
    assert missing == [], missing


def test_every_command_is_in_the_readme_list() -> None:
    res = run_cli("--help")
    assert res.returncode == 0
    commands = set(re.findall(r"^  ([a-z][a-z-]+)\s", res.stdout.split("Commands:")[1], re.M))
    table = README[README.index("## Every command") :]
    listed = set(re.findall(r"^\| `doccount ([a-z-]+)", table, re.M))
    assert listed == commands
    batch = run_cli("batch", "--help").stdout
    subcommands = set(re.findall(r"^  ([a-z]+)\s", batch.split("Commands:")[1], re.M))
    assert (
        "doccount batch " + "\\|".join(sorted(subcommands, key=["prepare", "collect", "cancel"].index))
        in table
    )


def test_every_linked_document_exists() -> None:
    for text, base in ((README, REPO), ((REPO / "CONTRIBUTING.md").read_text(), REPO)):
        for link in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text):
            if not link.startswith("http"):
                assert (base / link).is_file(), link
