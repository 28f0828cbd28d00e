"""A sweep's archive (evaluator/archive/sweep.py): its key variables read as the sweep read them, and one
unpack budget across the run archives nested in it and the copies verify makes (issue 46 points 2, 10)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest
from support.archives import members, no_terminal, repacked, rewrite
from support.cli import REPO, clean_env, run_cli
from support.datagen import doccount_reply, doccount_rows, write_doccount
from support.openai_test_server import TestServer

from evaluator.archive import read_archive
from evaluator.archive.read import ArchiveLimitError, Limits
from evaluator.archive.sweep import verify_sweep

pytestmark = pytest.mark.timeout(300)
KEY = "sk-defaults-key-0123456789abcdefghijk"
TOKEN = "ghp_crafted-archive-wants-this-0123456789"
MiB = 1 << 20


def bearer(key: str) -> str:
    return hashlib.sha256(f"Bearer {key}".encode()).hexdigest()


def reproduce(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """`doccount reproduce` with no terminal on stdin, in this process (support/archives.py): the keys are
    checked where they arrive (the servers); each run is still re-run by a child reproduce starts itself."""
    return no_terminal(
        [sys.executable, "-m", "evaluator.cli", "reproduce", *args], env=clean_env(**env), cwd=REPO
    )


@pytest.fixture(scope="module")
def swept(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimpleNamespace]:
    """A sweep of three runs whose endpoint and key variable are [defaults]' (D_KEY), run and archived by the
    real CLI."""
    base = tmp_path_factory.mktemp("swept")
    rows = doccount_rows(3)
    write_doccount(base / "data" / "test-0.parquet", rows)
    data = str(base / "data" / "*.parquet")
    with TestServer({"answers": doccount_reply(rows)}) as recorded:
        runs = "".join(f'\n[[runs]]\nname = "{n}"\nmodel = "test-model"\n' for n in "abc")
        defaults = f'[defaults]\nbase_url = "{recorded.base_url}"\napi_key_env = "D_KEY"\nmax_retries = 1\n'
        (base / "s.toml").write_text(f'name = "sw"\ndata_files = "{data}"\n\n{defaults}{runs}')
        res = run_cli("sweep", str(base / "s.toml"), "--run-root", str(base / "runs"), env={"D_KEY": KEY})
        assert res.returncode == 0, res.stderr
        sweep = base / "sw.tar.gz"
        res = run_cli("archive", str(base / "runs" / "sw"), "--output", str(sweep), env={"D_KEY": KEY})
        assert res.returncode == 0, res.stderr
    yield SimpleNamespace(sweep=sweep, data=data, rows=rows)


def test_a_sweep_whose_key_variable_comes_from_defaults_reproduces(
    swept: SimpleNamespace, tmp_path: Path
) -> None:
    """[defaults] api_key_env beside [defaults] base_url, runs naming neither: on main `reproduce --base-url a=URL` refused the
    legitimate archive as crafted ("sweep.toml names None"). Now the key goes to the named endpoint; a
    sweep.json naming another variable is still refused."""
    sweep = swept.sweep
    assert json.loads(read_archive(sweep).files["sweep.json"])["runs"]["a"]["api_key_env"] == "D_KEY"
    with TestServer({"answers": doccount_reply(swept.rows)}) as named:
        res = reproduce(str(sweep), "--only", "a", "--base-url", f"a={named.base_url}", "--data-files",
                        swept.data, "--run-root", str(tmp_path / "r"), env={"D_KEY": KEY})  # fmt: skip
        assert res.returncode == 0, res.stdout + res.stderr
        assert {r["headers"]["authorization_sha256"] for r in named.requests()} == {bearer(KEY)}
    state = json.loads(read_archive(sweep).files["sweep.json"])
    state["runs"]["a"]["api_key_env"] = "GITHUB_TOKEN"
    crafted = repacked(sweep, tmp_path / "crafted.tar.gz", {"sweep.json": json.dumps(state).encode()})
    res = reproduce(str(crafted), "--only", "a", "--base-url", f"a={named.base_url}", "--data-files", swept.data,
                    "--run-root", str(tmp_path / "r2"), env={"GITHUB_TOKEN": TOKEN, "D_KEY": KEY})  # fmt: skip
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert res.returncode == 2 and len(lines) == 1 and "GITHUB_TOKEN" in lines[0] and "D_KEY" in lines[0], (
        res.stderr
    )
    assert TOKEN not in res.stderr and not (tmp_path / "r2").exists()


# ----------------------------------------------------------------------------- 2: one unpack budget

PAD = 24 * MiB  # zeros added to each run's folder: gzip makes them ~24 KB, verify copies them twice more


def nested_bombs(swept: SimpleNamespace, tmp: Path) -> Path:
    """The sweep archive with every run archive holding PAD bytes of zeros in its run folder (each inner
    SHA256SUMS, the outer index's run hashes and SHA256SUMS recomputed, as someone crafting it would)."""
    outer = members(swept.sweep)
    change = {}
    for name in "abc":
        inner_path = tmp / f"{name}.tar.gz"
        inner_path.write_bytes(next(b for n, b in outer.items() if n.endswith(f"runs/{name}.tar.gz")))
        padded = rewrite(
            inner_path, tmp / f"{name}-padded.tar.gz", lambda rel, n=name: rel.update({f"runs/{n}/pad.bin": bytes(PAD)}),
            resum=True,
        )  # fmt: skip
        change[f"runs/{name}.tar.gz"] = padded.read_bytes()
    return repacked(swept.sweep, tmp / "bombs.tar.gz", change)


@pytest.fixture(scope="module")
def bombs(swept: SimpleNamespace, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """nested_bombs, made once for the two budget tests (each only reads it)."""
    return nested_bombs(swept, tmp_path_factory.mktemp("bombs"))


class Peak:
    """The largest number of bytes held in files under a folder, sampled every millisecond."""

    def __init__(self, folder: Path) -> None:
        self.folder, self.peak, self._stop = folder, 0, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            total = 0
            for root, _, files in os.walk(self.folder):
                for f in files:
                    with contextlib.suppress(OSError):
                        total += os.lstat(os.path.join(root, f)).st_size
            self.peak = max(self.peak, total)
            time.sleep(0.001)

    def __enter__(self) -> Peak:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


@pytest.fixture
def tmpdir_measured(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """TMPDIR for the code under test: a folder of its own, whose peak the test measures."""
    folder = tmp_path / "TMPDIR"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    return folder


def test_nested_archives_and_verifys_copies_share_one_budget(bombs: Path, tmpdir_measured: Path) -> None:
    """Three run archives each unpacking to 24 MiB more, verified under a 100 MiB budget (the default is
    8 GiB; the code is the same): on main each nested archive had a budget of its own and each run's members
    were copied twice more and kept to the end (peak of TMPDIR over 150 MiB, verified OK). Now the nested
    archives and every copy are charged to the one budget, and the archive is refused once it is spent."""
    archive = read_archive(bombs, Limits(total_bytes=100 * MiB))
    with Peak(tmpdir_measured) as peak, pytest.raises(ArchiveLimitError) as refused:
        verify_sweep(archive, tmpdir_measured)
    print(f"budget 100 MiB: refused; TMPDIR peak {peak.peak / MiB:.1f} MiB")
    assert "unpacks to more than 100 MiB" in str(refused.value) and "one budget" in str(refused.value)
    assert peak.peak <= 100 * MiB, peak.peak


def test_verifys_copies_are_removed_as_soon_as_used(bombs: Path, tmpdir_measured: Path) -> None:
    """With a budget that fits (400 MiB), the same archive verifies; each run's copies are gone before the
    next run is read, so TMPDIR never holds more than about one run's (3 x 24 MiB), where main kept every
    run's re-scored and report copies to the end."""
    archive = read_archive(bombs, Limits(total_bytes=400 * MiB))
    with Peak(tmpdir_measured) as peak:
        result = verify_sweep(archive, tmpdir_measured)
    print(f"budget 400 MiB: verified {result.ok}; TMPDIR peak {peak.peak / MiB:.1f} MiB")
    assert result.ok, result.problems
    assert peak.peak < 3 * PAD + 8 * MiB, peak.peak
    assert archive.budget is not None and archive.budget.used > 6 * PAD  # every copy was charged
