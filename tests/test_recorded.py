"""What an archive records about its data (evaluator/archive/opened.py), as `verify` and `reproduce` meet it
(issue 46 points 8, 9 and 14): a hub revision or dataset id the Hub cannot hold and wrong types in
run_config.json `data` are refused when the archive is read; every command reproduce prints is shell-quoted
(pasted into a real bash with stand-in commands on PATH, only the stand-in it names runs); a recorded local
pattern outside the working folder is never read.

The archives are real (`doccount evaluate` against the loopback test server, `score`, `archive`); the crafted
ones are edited as an attacker would, run_config.json, dataset.json and SHA256SUMS kept consistent, so on
main they verify."""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.archives import members, no_terminal, repacked
from support.cli import REPO, clean_env, run_cli
from support.datagen import doccount_reply, doccount_rows, write_doccount
from support.openai_test_server import TestServer

from evaluator.archive.opened import is_hub_revision
from evaluator.archive.pack import dataset_record
from evaluator.runfolder.runconfig import RunConfig

pytestmark = pytest.mark.timeout(300)
CONFIG = "runs/orig/run_config.json"


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimpleNamespace]:
    base = tmp_path_factory.mktemp("recorded")
    rows = doccount_rows(3)
    write_doccount(base / "data" / "test-00000-of-00001.parquet", rows)
    with TestServer({"answers": doccount_reply(rows)}) as srv:
        run = base / "orig"
        res = run_cli(
            "evaluate", "--model", "test-model", "--base-url", srv.base_url, "--data-files",
            str(base / "data" / "*.parquet"), "--run-root", str(run), "--quiet",
        )  # fmt: skip
        assert res.returncode == 0, res.stderr
        assert run_cli("score", "--run-root", str(run)).returncode == 0
        res = run_cli("archive", "--run-root", str(run), "--output", str(base / "orig.tar.gz"))
        assert res.returncode == 0, res.stderr
        yield SimpleNamespace(base=base, archive=base / "orig.tar.gz", url=srv.base_url)


def crafted(made: SimpleNamespace, dest: Path, **data: Any) -> Path:
    """The archive with run_config.json `data` changed, dataset.json and the checksums made to agree (a
    change the summary does not show: scoring reads none of these fields)."""
    files = {n.split("/", 1)[1]: b for n, b in members(made.archive).items()}
    config = json.loads(files[CONFIG])
    config["data"].update(data)
    record = dataset_record(RunConfig.from_dict(config), files["runs/orig/manifest.jsonl"])
    change = {
        CONFIG: json.dumps(config, indent=2).encode(),
        "dataset.json": (json.dumps(record, indent=2, sort_keys=True) + "\n").encode(),
    }
    return repacked(made.archive, dest, change)


def archived_with(made: SimpleNamespace, tmp: Path, **data: Any) -> Path:
    """A copy of the run with run_config.json `data` changed, scored and archived by the real CLI: an archive
    that verifies (as a crafted one can: every digest in it is recomputed)."""
    run = tmp / "craft" / "orig"
    shutil.copytree(made.base / "orig", run)
    config = json.loads((run / "run_config.json").read_text())
    config["data"].update(data)
    (run / "run_config.json").write_text(json.dumps(config, indent=2))
    assert run_cli("score", "--run-root", str(run)).returncode == 0
    res = run_cli("archive", "--run-root", str(run), "--output", str(tmp / "c.tar.gz"))
    assert res.returncode == 0, res.stderr
    return tmp / "c.tar.gz"


def doccount(*args: str, cwd: Path = REPO, **env: str) -> subprocess.CompletedProcess[str]:
    """`doccount ARGS` with no terminal on stdin, in this process (support/archives.py) unless `env` sets
    what a library reads when imported (HF_*): then its own process, with this tree's package first on
    its path whatever `cwd` is."""
    extra = {"PYTHONPATH": str(REPO)} if any(k.startswith("HF_") for k in env) else {}
    return no_terminal(
        [sys.executable, "-m", "evaluator.cli", *args], env={**clean_env(**env), **extra}, cwd=cwd
    )


def no_traceback(res: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in res.stdout + res.stderr, res.stderr[-3000:]
    assert "evaluator error" not in res.stderr, res.stderr  # not the last-resort guard: refused where read


# ----------------------------------------------------------------------------- 8: revisions, quoting

STANDIN = '#!/bin/bash\nprintf "%s\\n" "${0##*/}" "$@" "--" >> "$STANDIN_LOG"\n'


def pasted(line: str, tmp: Path) -> list[list[str]]:
    """`line` run by a real bash whose PATH holds only stand-ins (doccount, make, touch, rm, curl, sh):
    each logs its name and arguments. The commands that ran, with their arguments."""
    bin_dir, log = tmp / "bin", tmp / "ran.log"
    bin_dir.mkdir(exist_ok=True)
    for name in ("doccount", "make", "touch", "rm", "curl", "sh", "id"):
        (bin_dir / name).write_text(STANDIN)
        (bin_dir / name).chmod(stat.S_IRWXU)
    log.write_text("")
    subprocess.run(
        ["/bin/bash", "-c", line], env={"PATH": str(bin_dir), "STANDIN_LOG": str(log)}, cwd=tmp,
        capture_output=True, timeout=30, check=False,
    )  # fmt: skip
    ran, current = [], []
    for word in log.read_text().splitlines():
        if word == "--":
            ran.append(current)
            current = []
        else:
            current.append(word)
    return ran


def commands_in(text: str) -> list[str]:
    return re.findall(r"`([^`]+)`", text)


def test_a_revision_holding_shell_syntax_is_refused_when_the_archive_is_read(
    made: SimpleNamespace, tmp_path: Path
) -> None:
    """The issue's case: on main the archive verified and reproduce printed
    `doccount data --benchmark doccount --revision main; touch /tmp/PWNED #`, which ran `touch` when pasted."""
    revision = "main; touch PWNED #"
    path = archived_with(made, tmp_path, source="hub", dataset="adopd/DocCount", revision=revision)
    res = doccount("verify", str(path))
    assert res.returncode == 1, res.stdout + res.stderr
    assert "MISMATCH runs/orig/run_config.json" in res.stdout and "not a Hugging Face revision" in res.stdout
    hub = tmp_path / "hub"
    hub.mkdir()
    res = doccount(
        "reproduce", str(path), "--base-url", made.url, "--run-root", str(tmp_path / "n"),
        HF_HUB_OFFLINE="1", HF_HUB_CACHE=str(hub),
    )  # fmt: skip
    no_traceback(res)
    assert res.returncode == 1 and "does not verify" in res.stderr, res.stdout + res.stderr
    for line in commands_in(res.stdout + res.stderr):
        assert all(cmd[0] != "touch" for cmd in pasted(line, tmp_path)), line


def test_every_printed_command_pastes_as_the_one_command_it_names(
    made: SimpleNamespace, tmp_path: Path
) -> None:
    """A revision git allows that is full of shell and Make syntax: the archive verifies, and the fetch
    commands reproduce prints run, pasted into bash, only the stand-in they name, with the revision whole."""
    revision = "v1;touch${IFS}PWNED&&$(id)|rm"
    assert is_hub_revision(revision)
    path = archived_with(made, tmp_path, source="hub", dataset="adopd/DocCount", revision=revision)
    assert doccount("verify", str(path)).returncode == 0
    hub = tmp_path / "hub"
    hub.mkdir()
    res = doccount(
        "reproduce", str(path), "--base-url", made.url, "--run-root", str(tmp_path / "n"),
        HF_HUB_OFFLINE="1", HF_HUB_CACHE=str(hub),
    )  # fmt: skip
    no_traceback(res)
    assert res.returncode == 2, res.stdout + res.stderr
    lines = commands_in(res.stderr)
    assert any(line.startswith("doccount data") for line in lines), res.stderr
    for line in lines:
        ran = pasted(line, tmp_path)
        assert len(ran) == 1, (line, ran)
        if ran[0][0] == "doccount":
            assert ran[0] == ["doccount", "data", "--benchmark", "doccount", "--revision", revision], line
        else:  # make un-doubles `$$` itself
            assert ran[0] == ["make", "data", f"DATASET_REVISION={revision.replace('$', '$$')}"], line


def git_accepts(value: str) -> bool:
    res = subprocess.run(
        ["git", "check-ref-format", "--allow-onelevel", value], capture_output=True, check=False
    )
    return res.returncode == 0


@settings(max_examples=150, deadline=None)
@given(st.text(alphabet=st.sampled_from("ab1/.-@{}~^:?*[\\ ;$lock\x7fü"), max_size=12))
def test_a_hub_revision_is_what_git_check_ref_format_accepts(value: str) -> None:
    """Random names against `git check-ref-format --allow-onelevel` itself (the empty name aside: git is not
    asked about it; no revision is empty)."""
    if value and "\0" not in value:
        assert is_hub_revision(value) == git_accepts(value), value


@pytest.mark.parametrize(
    "value",
    ["main", "v1.0", "refs/pr/1", "refs/convert/parquet", "a" * 40, "feature/x-y_z", "v1;x", "@", "a@{b",
     "a..b", "/a", "a/", "a.lock", "a/.b", "-a", "a b", "a:b", "a~1", "a//b", "a.", "ü"],
)  # fmt: skip
def test_hub_revisions_follow_git_check_ref_format(value: str) -> None:
    assert is_hub_revision(value) == git_accepts(value), value


# ----------------------------------------------------------------------------- 9: wrong types


@pytest.mark.parametrize(
    "data",
    [{"files": [1]}, {"files": [{"name": 1, "sha256": "x"}]}, {"selection": "x"}, {"questions": "3"},
     {"dataset": 7, "source": "hub"}, {"pattern": ["a"]}, {"manifest_sha256": {}}],
    ids=["files-1", "file-name-int", "selection-str", "questions-str", "dataset-int", "pattern-list", "digest-obj"],
)  # fmt: skip
def test_wrong_types_in_the_data_record_are_refused_when_the_archive_is_read(
    made: SimpleNamespace, tmp_path: Path, data: dict[str, Any]
) -> None:
    """On main `data.files = [1]` verified and reproduce died with an AttributeError traceback."""
    path = crafted(made, tmp_path / "c.tar.gz", **data)
    res = doccount("verify", str(path))
    no_traceback(res)
    assert res.returncode == 1 and "MISMATCH runs/orig/run_config.json" in res.stdout, res.stdout + res.stderr
    res = doccount("reproduce", str(path), "--base-url", made.url, "--run-root", str(tmp_path / "n"))
    no_traceback(res)
    assert res.returncode == 1 and "does not verify" in res.stderr, res.stdout + res.stderr
    assert not (tmp_path / "n").exists()


# ----------------------------------------------------------------------------- 14: the recorded pattern


@pytest.mark.parametrize("kind", ["absolute", "climbing", "home"])
def test_a_recorded_pattern_outside_the_folder_is_not_read(
    made: SimpleNamespace, tmp_path: Path, kind: str
) -> None:
    """The pattern names the real data files, so on main reproduce hashed them and re-ran from there (with
    /proc/self/pagemap: hundreds of GB hashed). Now it says how to pass --data-files and reads nothing."""
    data = made.base / "data"
    pattern = {
        "absolute": str(data / "*.parquet"),
        "climbing": os.path.relpath(data, tmp_path) + "/*.parquet",
        "home": "~/" + os.path.relpath(data, Path.home()) + "/*.parquet",
    }[kind]
    if kind == "climbing":
        assert pattern.startswith("..")
    path = archived_with(made, tmp_path, pattern=pattern)
    assert doccount("verify", str(path)).returncode == 0
    res = doccount(
        "reproduce", str(path), "--base-url", made.url, "--run-root", str(tmp_path / "n"), cwd=tmp_path
    )
    no_traceback(res)
    assert res.returncode == 2, res.stdout + res.stderr
    assert "pass --data-files GLOB" in res.stderr and "names no files under this folder" in res.stderr
    assert not (tmp_path / "n").exists()
    res = doccount(
        "reproduce", str(path), "--base-url", made.url, "--run-root", str(tmp_path / "n"),
        "--data-files", str(data / "*.parquet"), "--quiet", cwd=tmp_path,
    )  # fmt: skip
    assert res.returncode == 0, res.stdout + res.stderr


def test_a_recorded_pattern_matching_other_files_reads_none_of_them(
    made: SimpleNamespace, tmp_path: Path
) -> None:
    """A relative pattern that matches more files than the archive lists (`*`): refused before any is hashed,
    with how to pass --data-files (on main every match was hashed, however large, then called not archived)."""
    path = archived_with(made, tmp_path, pattern="*")
    work = tmp_path / "w"
    work.mkdir()
    for i in range(3):
        (work / f"f{i}").write_bytes(b"x")
    res = doccount(
        "reproduce", str(path), "--base-url", made.url, "--run-root", str(tmp_path / "n"), cwd=work
    )
    no_traceback(res)
    assert res.returncode == 2 and "pass --data-files GLOB" in res.stderr, res.stdout + res.stderr
