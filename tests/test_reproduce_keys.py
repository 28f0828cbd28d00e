"""Issue #39 points 1-2: the user names where a key goes. `doccount reproduce` sends a key only to an
endpoint named with --base-url (RUN=URL per run of a sweep archive) or confirmed at a prompt on a
terminal; without either it sends nothing and exits 2 in one line. A sweep archive's sweep.json is
checked against its archived sweep file. Real archives made by `doccount archive`, real loopback servers
that record the Authorization header each request carried, real processes (a pty for the prompt)."""

from __future__ import annotations

import hashlib
import json
import os
import pty
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest
from support.archives import no_terminal, repacked
from support.cli import REPO, clean_env, run_cli
from support.datagen import doccount_reply, doccount_rows, write_doccount
from support.openai_test_server import TestServer

from evaluator.archive import read_archive

pytestmark = pytest.mark.timeout(300)

KEY = "sk-reproduce-user-key-0123456789abcdefgh"
KEYS = {"A_KEY": "sk-run-a-key-0123456789abcdefghijk", "B_KEY": "sk-run-b-key-0123456789abcdefghijk"}
TOKEN = "ghp_crafted-archive-wants-this-0123456789"
FAST = ["--retry-backoff", "0.01", "--retry-max-wait", "0.05", "--max-retries", "1"]


def bearer(key: str) -> str:
    return hashlib.sha256(f"Bearer {key}".encode()).hexdigest()


def auths(server: TestServer, since: int = 0) -> set[str | None]:
    return {r["headers"]["authorization_sha256"] for r in server.requests()[since:]}


def reproduce(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`doccount reproduce` with no terminal on stdin (as in CI, a pipe or a cron job); in this process
    (support/archives.py): what is checked is what reaches the servers, and a sweep's runs still get
    processes of their own from reproduce itself."""
    return no_terminal(
        [sys.executable, "-m", "evaluator.cli", "reproduce", *args], env=clean_env(**(env or {})), cwd=REPO
    )


def one_error(res: subprocess.CompletedProcess[str]) -> str:
    assert res.returncode == 2, (res.returncode, res.stdout, res.stderr)
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and "Traceback" not in res.stderr, res.stderr
    return lines[0]


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimpleNamespace]:
    """A run archive and a sweep archive (runs a and b, keys A_KEY and B_KEY), both recorded against
    `recorded`, which stays up and shows whether a reproduction sent it anything."""
    base = tmp_path_factory.mktemp("repro")
    rows = doccount_rows(3)
    write_doccount(base / "data" / "test-00000-of-00001.parquet", rows)
    data = str(base / "data" / "*.parquet")
    with TestServer({"answers": doccount_reply(rows)}) as recorded:
        run = base / "orig"
        res = run_cli(
            "evaluate", "--model", "test-model", "--base-url", recorded.base_url, "--data-files", data,
            "--run-root", str(run), "--quiet", *FAST, env={"MODEL_API_KEY": KEY},
        )  # fmt: skip
        assert res.returncode == 0, res.stderr
        assert run_cli("score", "--run-root", str(run)).returncode == 0
        archive = base / "orig.tar.gz"
        res = run_cli("archive", "--run-root", str(run), "--output", str(archive), env={"MODEL_API_KEY": KEY})
        assert res.returncode == 0, res.stderr
        runs = "".join(
            f'\n[[runs]]\nname = "{n}"\nmodel = "test-model"\nbase_url = "{recorded.base_url}"\n'
            f'api_key_env = "{v}"\n'
            for n, v in (("a", "A_KEY"), ("b", "B_KEY"))
        )
        text = f'name = "sw"\ndata_files = "{data}"\n\n[defaults]\nconcurrency = 2\nmax_retries = 1\n{runs}'
        (base / "s.toml").write_text(text)
        res = run_cli("sweep", str(base / "s.toml"), "--run-root", str(base / "runs"), env=KEYS)
        assert res.returncode == 0, res.stderr
        sweep = base / "sw.tar.gz"
        res = run_cli("archive", "--run-root", str(base / "runs" / "sw"), "--output", str(sweep), env=KEYS)
        assert res.returncode == 0, res.stderr
        recorded.reset()
        yield SimpleNamespace(
            base=base, data=data, archive=archive, sweep=sweep, recorded=recorded, rows=rows
        )


# ----------------------------------------------------------------------------- a run archive


def test_a_key_goes_nowhere_without_a_named_endpoint(made: SimpleNamespace, tmp_path: Path) -> None:
    n = len(made.recorded.requests())
    res = reproduce(str(made.archive), "--data-files", made.data, "--run-root", str(tmp_path / "r"),
                    env={"MODEL_API_KEY": KEY})  # fmt: skip
    line = one_error(res)
    assert "--base-url" in line and "MODEL_API_KEY" in line and "127.0.0.1" in line and KEY not in line
    assert len(made.recorded.requests()) == n and not (tmp_path / "r").exists()
    # MODEL_API_BASE_URL is not the command line either: the same refusal, nothing sent there
    with TestServer({"answers": doccount_reply(made.rows)}) as other:
        env = {"MODEL_API_KEY": KEY, "MODEL_API_BASE_URL": other.base_url}
        one_error(
            reproduce(
                str(made.archive), "--data-files", made.data, "--run-root", str(tmp_path / "r"), env=env
            )
        )
        assert other.requests() == []


def test_a_key_goes_to_the_endpoint_named_with_base_url(made: SimpleNamespace, tmp_path: Path) -> None:
    n = len(made.recorded.requests())
    with TestServer({"answers": doccount_reply(made.rows)}) as named:
        res = reproduce(str(made.archive), "--base-url", named.base_url, "--data-files", made.data,
                        "--run-root", str(tmp_path / "r"), env={"MODEL_API_KEY": KEY})  # fmt: skip
        assert res.returncode == 0, res.stderr
        assert auths(named) == {bearer(KEY)} and len(named.requests()) == len(made.rows)
    assert len(made.recorded.requests()) == n


def test_without_a_key_the_recorded_endpoint_is_used_as_before(made: SimpleNamespace, tmp_path: Path) -> None:
    n = len(made.recorded.requests())
    res = reproduce(str(made.archive), "--data-files", made.data, "--run-root", str(tmp_path / "r"))
    assert res.returncode == 0, res.stderr
    assert auths(made.recorded, n) == {bearer("EMPTY")} or auths(made.recorded, n) == {None}


def prompt(args: list[str], answer: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """reproduce with a terminal (a pty) on stdin, answering the prompt."""
    master, slave = pty.openpty()
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "evaluator.cli", "reproduce", *args], stdin=slave, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True, env=clean_env(**env), cwd=str(REPO),
        )  # fmt: skip
        os.write(master, f"{answer}\n".encode())
        out, err = proc.communicate(timeout=240)
    finally:
        os.close(slave)
        os.close(master)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


@pytest.mark.parametrize("answer", ["n", "y"])
def test_a_terminal_prompt_names_run_variable_and_host(
    made: SimpleNamespace, tmp_path: Path, answer: str
) -> None:
    n = len(made.recorded.requests())
    args = [str(made.archive), "--data-files", made.data, "--run-root", str(tmp_path / "r")]
    res = prompt(args, answer, {"MODEL_API_KEY": KEY})
    port = made.recorded.base_url.split(":")[2].split("/")[0]
    asked = res.stderr.split("?")[0]
    assert "run orig" in asked and "MODEL_API_KEY" in asked and f"127.0.0.1:{port}" in asked, res.stderr
    if answer == "n":
        assert res.returncode == 2 and "not confirmed" in res.stderr and len(made.recorded.requests()) == n
    else:
        assert res.returncode == 0, res.stderr
        assert auths(made.recorded, n) == {bearer(KEY)}


# ----------------------------------------------------------------------------- a sweep archive


def test_a_sweep_archive_reads_no_key_variable_unconfirmed(made: SimpleNamespace, tmp_path: Path) -> None:
    n = len(made.recorded.requests())
    res = reproduce(str(made.sweep), "--data-files", made.data, "--run-root", str(tmp_path / "r"), env=KEYS)
    line = one_error(res)
    assert "--base-url a=URL" in line and "A_KEY" in line and not any(k in line for k in KEYS.values())
    assert len(made.recorded.requests()) == n and not (tmp_path / "r").exists()


def test_each_run_key_goes_to_the_endpoint_named_for_that_run(made: SimpleNamespace, tmp_path: Path) -> None:
    n = len(made.recorded.requests())
    answers = {"answers": doccount_reply(made.rows)}
    with TestServer(answers) as for_a, TestServer(answers) as for_b:
        res = reproduce(str(made.sweep), "--base-url", f"a={for_a.base_url}", "--base-url", f"b={for_b.base_url}",
                        "--data-files", made.data, "--run-root", str(tmp_path / "r"), env=KEYS)  # fmt: skip
        assert res.returncode == 0, res.stderr
        assert auths(for_a) == {bearer(KEYS["A_KEY"])} and auths(for_b) == {bearer(KEYS["B_KEY"])}
    assert len(made.recorded.requests()) == n


def test_a_sweep_json_naming_another_variable_is_refused(made: SimpleNamespace, tmp_path: Path) -> None:
    """The attack of #39: every run's api_key_env changed to GITHUB_TOKEN, the checksums recomputed."""
    archive = read_archive(made.sweep)
    state = json.loads(archive.files["sweep.json"])
    for run in state["runs"].values():
        run["api_key_env"] = "GITHUB_TOKEN"
    crafted = repacked(made.sweep, tmp_path / "crafted.tar.gz", {"sweep.json": json.dumps(state).encode()})
    assert run_cli("verify", str(crafted)).returncode == 0  # its checksums hold: only the check below sees it
    n = len(made.recorded.requests())
    for named in ([], ["--base-url", f"a={made.recorded.base_url}"]):
        res = reproduce(str(crafted), *named, "--only", "a", "--data-files", made.data,
                        "--run-root", str(tmp_path / "r"), env={"GITHUB_TOKEN": TOKEN, **KEYS})  # fmt: skip
        line = one_error(res)
        assert "GITHUB_TOKEN" in line and "sweep.toml" in line and TOKEN not in line
    assert len(made.recorded.requests()) == n and not (tmp_path / "r").exists()
