"""The default data path (no --data-files): the real huggingface_hub client against a loopback hub
(tests/support/hub_test_server.py) for the online path, and the cache that client lays out for the offline
path. Every command runs in its own process: huggingface_hub reads HF_ENDPOINT, HF_HUB_CACHE and
HF_HUB_OFFLINE once, at import."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.cli import REPO, closed_port_url, doccount, eval_args, hf
from support.datagen import countqa_rows, doccount_reply, doccount_rows, write_countqa, write_doccount
from support.hub_test_server import HubRepo, HubTestServer
from support.openai_test_server import TestServer

DOC = "adopd/DocCount"
CQA = "Jayant-Sravan/CountQA"
OLD = hashlib.sha1(b"doccount v1").hexdigest()  # tag v1
NEW = hashlib.sha1(b"doccount v2").hexdigest()  # main
CQA_MAIN = hashlib.sha1(b"countqa").hexdigest()
CARD = b"---\nlicense: cc-by-4.0\n---\n# test card\n"


def parquet_bytes(tmp: Path, name: str, write, rows) -> bytes:
    return write(tmp / name, rows).read_bytes()


@pytest.fixture(scope="module")
def repos(tmp_path_factory: pytest.TempPathFactory) -> list[HubRepo]:
    tmp = tmp_path_factory.mktemp("hubdata")
    rows = doccount_rows(10)
    old = {
        "README.md": CARD,
        "data/test-00000-of-00001.parquet": parquet_bytes(tmp, "old.parquet", write_doccount, rows[:6]),
    }
    new = {
        "README.md": CARD,
        ".gitattributes": b"*.parquet filter=lfs diff=lfs merge=lfs -text\n",
        "data/test-00000-of-00002.parquet": parquet_bytes(tmp, "n0.parquet", write_doccount, rows[:5]),
        "data/test-00001-of-00002.parquet": parquet_bytes(tmp, "n1.parquet", write_doccount, rows[5:]),
    }
    cqa = {
        "data/test-00000-of-00001.parquet": parquet_bytes(tmp, "c.parquet", write_countqa, countqa_rows(4))
    }
    return [
        HubRepo(DOC, {OLD: old, NEW: new}, {"main": NEW, "v1": OLD}),
        HubRepo(CQA, {CQA_MAIN: cqa}, {"main": CQA_MAIN}),
    ]


@pytest.fixture
def hub(repos: list[HubRepo]) -> Iterator[HubTestServer]:
    with HubTestServer(repos) as srv:
        yield srv


def fetch(hub: HubTestServer, cache: Path, *args: str) -> str:
    r = hf(doccount("data", *args), hub.url, cache)
    assert r.returncode == 0, r.stderr
    return r.stdout


def evaluate(endpoint: str, cache: Path, model_url: str, run: Path, *args: str, offline: bool = False):
    cmd = doccount("evaluate", *eval_args(model_url, "unused", run), *args)
    cmd.remove("--data-files")
    cmd.remove("unused")
    return hf(cmd, endpoint, cache, offline=offline)


def data_of(run: Path) -> dict:
    return json.loads((run / "run_config.json").read_text())["data"]


@pytest.fixture
def model(repos: list[HubRepo]) -> Iterator[TestServer]:
    with TestServer({"answers": doccount_reply(doccount_rows(10))}) as srv:
        yield srv


def test_fetch_lays_out_the_hf_cache_and_prints_the_commit(hub: HubTestServer, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    out = fetch(hub, cache)
    assert out.splitlines()[0] == f"commit {NEW}"
    assert f"HF_HUB_OFFLINE=1 doccount-evaluate --benchmark doccount --revision {NEW}" in out
    folder = cache / "datasets--adopd--DocCount"
    assert (folder / "refs" / "main").read_text() == NEW
    snap = folder / "snapshots" / NEW / "data"
    files = sorted(snap.iterdir())
    assert [f.name for f in files] == ["test-00000-of-00002.parquet", "test-00001-of-00002.parquet"]
    for f in files:  # a symlink into blobs/, named by the file's SHA-256 (the LFS ETag)
        assert f.is_symlink() and f.resolve().parent == (folder / "blobs").resolve()
        assert f.resolve().name == hashlib.sha256(f.read_bytes()).hexdigest()
    assert not (folder / "snapshots" / NEW / "README.md").exists()  # only the benchmark's files
    paths = [p for _, p in hub.requests()]
    assert f"/api/datasets/{DOC}" in paths and any(p.startswith("/cdn/") for p in paths)


def test_online_run_records_requested_and_resolved_revision(
    hub: HubTestServer, model: TestServer, tmp_path: Path
) -> None:
    cache = tmp_path / "cache"
    r = evaluate(hub.url, cache, model.base_url, tmp_path / "tag", "--revision", "v1")
    assert r.returncode == 0, r.stderr
    d = data_of(tmp_path / "tag")
    assert (d["source"], d["dataset"], d["requested_revision"], d["revision"]) == ("hub", DOC, "v1", OLD)
    assert d["questions"] == 6
    r = evaluate(hub.url, cache, model.base_url, tmp_path / "main")
    assert r.returncode == 0, r.stderr
    d = data_of(tmp_path / "main")
    assert (d["requested_revision"], d["revision"], d["questions"]) == (None, NEW, 10)
    assert f"/api/datasets/{DOC}/revision/v1" in [p for _, p in hub.requests()]


def test_offline_branch_and_tag_come_from_the_cache_without_a_request(
    hub: HubTestServer, model: TestServer, tmp_path: Path
) -> None:
    cache = tmp_path / "cache"
    fetch(hub, cache)
    fetch(hub, cache, "--revision", "v1")
    hub.reset()
    r = evaluate(hub.url, cache, model.base_url, tmp_path / "main", offline=True)
    assert r.returncode == 0, r.stderr
    assert (data_of(tmp_path / "main")["revision"], data_of(tmp_path / "main")["questions"]) == (NEW, 10)
    r = evaluate(hub.url, cache, model.base_url, tmp_path / "v1", "--revision", "v1", offline=True)
    assert r.returncode == 0, r.stderr
    d = data_of(tmp_path / "v1")
    assert (d["requested_revision"], d["revision"], d["questions"]) == ("v1", OLD, 6)
    assert hub.requests() == []


def test_offline_commit_sha_revision(hub: HubTestServer, model: TestServer, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    out = fetch(hub, cache, "--revision", OLD)
    assert out.splitlines()[0] == f"commit {OLD}"
    assert not (cache / "datasets--adopd--DocCount" / "refs" / "main").exists()
    r = evaluate(hub.url, cache, model.base_url, tmp_path / "r", "--revision", OLD, offline=True)
    assert r.returncode == 0, r.stderr
    d = data_of(tmp_path / "r")
    assert (d["requested_revision"], d["revision"], d["questions"]) == (OLD, OLD, 6)
    # main was never fetched: the one-line message names the cached commit to pass instead
    r = evaluate(hub.url, cache, model.base_url, tmp_path / "m", offline=True)
    assert r.returncode == 2
    assert (
        r.stderr.count("\n") == 1 and f"the cache holds commit(s) {OLD}: pass one as --revision" in r.stderr
    )


@pytest.mark.parametrize("offline", [True, False], ids=["HF_HUB_OFFLINE", "no-route"])
def test_neither_cache_nor_network_prints_one_line(offline: bool, tmp_path: Path) -> None:
    r = hf(doccount("evaluate", "--model", "m", "--dry-run"), closed_port_url(), tmp_path / "cache", offline)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.count("\n") == 1, r.stderr
    assert r.stderr.startswith(f"error: {DOC} at revision main is not in the Hugging Face cache")
    assert "run `doccount data --benchmark doccount` (or `make data`)" in r.stderr
    assert ("HF_HUB_OFFLINE is set" in r.stderr) is offline


def test_no_route_to_the_hub_uses_the_cache(hub: HubTestServer, model: TestServer, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    fetch(hub, cache)
    r = evaluate(closed_port_url(), cache, model.base_url, tmp_path / "r")  # HF_HUB_OFFLINE unset
    assert r.returncode == 0, r.stderr
    assert data_of(tmp_path / "r")["revision"] == NEW


LIST_FILES = (
    "import json; from evaluator.data.benchmarks import get_benchmark; from evaluator.data.parquet import resolve_hub; "
    "s = resolve_hub(get_benchmark('doccount'), None, None); print(json.dumps([str(p) for p in s.files]))"
)


def test_files_are_read_in_place_not_copied(hub: HubTestServer, model: TestServer, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    fetch(hub, cache)
    blobs = cache / "datasets--adopd--DocCount" / "blobs"
    before = {p.name: p.stat().st_ino for p in blobs.iterdir()}
    r = hf([sys.executable, "-c", LIST_FILES], hub.url, cache, offline=True)
    assert r.returncode == 0, r.stderr
    files = [Path(p) for p in json.loads(r.stdout)]
    snap = cache / "datasets--adopd--DocCount" / "snapshots" / NEW
    assert files and all(f.parent.parent == snap for f in files)
    assert {f.stat().st_ino for f in files} == set(before.values())  # the blobs themselves
    r = evaluate(hub.url, cache, model.base_url, tmp_path / "run", offline=True)
    assert r.returncode == 0, r.stderr
    assert {p.name: p.stat().st_ino for p in blobs.iterdir()} == before
    parquet_anywhere = [p for p in tmp_path.rglob("*.parquet") if not p.is_symlink()]
    assert parquet_anywhere == []


def test_countqa_fetch_and_offline_validate(hub: HubTestServer, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    assert fetch(hub, cache, "--benchmark", "countqa").splitlines()[0] == f"commit {CQA_MAIN}"
    assert (cache / "datasets--Jayant-Sravan--CountQA" / "refs" / "main").read_text() == CQA_MAIN
    hub.reset()
    r = hf(doccount("evaluate", "--model", "m", "--dry-run", "--benchmark", "countqa"), hub.url, cache, True)
    assert r.returncode == 0, r.stderr
    assert f"data: {CQA} at commit {CQA_MAIN} (revision main)" in r.stdout
    assert hub.requests() == []
    r = hf(
        doccount("evaluate", "--model", "m", "--dry-run", "--benchmark", "countqa"),
        hub.url,
        tmp_path / "e",
        True,
    )
    assert r.returncode == 2
    assert "run `doccount data --benchmark countqa` (or `make data BENCHMARK=countqa`)" in r.stderr


def test_a_glob_into_the_cache_snapshot_works_as_data_files(hub: HubTestServer, tmp_path: Path) -> None:
    """Files that `datasets.load_dataset` (or `hf download`) left in the HF hub cache."""
    cache = tmp_path / "cache"
    fetch(hub, cache)
    glob = str(cache / "datasets--adopd--DocCount" / "snapshots" / "*" / "data" / "test-*.parquet")
    r = hf(doccount("evaluate", "--model", "m", "--dry-run", "--data-files", glob), hub.url, cache, True)
    assert r.returncode == 0, r.stderr
    assert "questions: 10 in the data" in r.stdout and "data: local files" in r.stdout
    fetch(hub, cache, "--revision", "v1")  # a second release in the cache: the * glob now mixes them
    r = hf(doccount("evaluate", "--model", "m", "--dry-run", "--data-files", glob), hub.url, cache, True)
    # a dry run reports integrity failures on stdout and exits 1 (see test_reliability_badinput)
    assert r.returncode == 1 and "duplicate sample id" in r.stdout, (r.stdout, r.stderr)
    pinned = glob.replace("/*/", f"/{NEW}/")  # the documented form: the commit named in the glob
    r = hf(doccount("evaluate", "--model", "m", "--dry-run", "--data-files", pinned), hub.url, cache, True)
    assert r.returncode == 0 and "questions: 10 in the data" in r.stdout, r.stderr


def test_unknown_revision_and_repo_are_one_line_errors(hub: HubTestServer, tmp_path: Path) -> None:
    r = hf(doccount("data", "--revision", "nope"), hub.url, tmp_path / "c")
    assert r.returncode == 2 and r.stderr.count("\n") == 1
    assert f"{DOC} has no revision 'nope'" in r.stderr
    r = hf(doccount("data", "--dataset", "someone/missing"), hub.url, tmp_path / "c")
    assert r.returncode == 2 and r.stderr.count("\n") == 1
    assert "someone/missing is not a dataset you can read" in r.stderr


def test_make_data_then_make_validate(hub: HubTestServer, tmp_path: Path) -> None:
    """The Makefile targets as documented: fetch once (prints the commit), then validate offline."""
    prefix = Path(sys.prefix)
    make = [
        "make",
        "-s",
        "-o",
        str(prefix / ".doccount-installed"),
        f"VENV={prefix}",
        f"HF_CACHE_DIR={tmp_path}",
    ]
    r = hf([*make, "data"], hub.url, tmp_path / "hub")
    assert r.returncode == 0, r.stderr
    assert f"commit {NEW}" in r.stdout
    hub.reset()
    r = hf([*make, "validate"], hub.url, tmp_path / "hub", offline=None)  # the Makefile sets it
    assert r.returncode == 0, r.stderr
    assert f"data: {DOC} at commit {NEW} (revision main)" in r.stdout
    assert hub.requests() == []
    r = hf([*make, "validate", "DATASET_REVISION=v1"], hub.url, tmp_path / "hub", offline=None)
    assert r.returncode != 0 and "(or `make data DATASET_REVISION=v1`)" in r.stderr


def test_an_incomplete_cached_snapshot_is_named_offline(hub: HubTestServer, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    fetch(hub, cache)
    (
        cache / "datasets--adopd--DocCount" / "snapshots" / NEW / "data" / "test-00001-of-00002.parquet"
    ).unlink()
    r = hf(doccount("evaluate", "--model", "m", "--dry-run"), hub.url, cache, offline=True)
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert f"the cached copy of {DOC} at commit {NEW} is incomplete" in r.stderr
    assert "run `doccount data --benchmark doccount` where the hub is reachable" in r.stderr


def test_skip_build_uses_loaded_images_for_air_gapped_hosts(tmp_path: Path) -> None:
    """make serve / make eval on a host that cannot build: SKIP_BUILD=1 checks the images instead."""
    for target in ("image-eval", "image-vllm"):
        run = {"capture_output": True, "text": True, "cwd": REPO}
        r = subprocess.run(["make", "-s", target, "SKIP_BUILD=1", "DOCKER=true"], **run)
        assert r.returncode == 0 and r.stdout == "", r.stderr  # the image is there: nothing built
        r = subprocess.run(["make", "-s", target, "SKIP_BUILD=1", "DOCKER=false"], **run)
        assert r.returncode == 2 and "SKIP_BUILD=1 but there is no image" in r.stderr
        r = subprocess.run(["make", "-n", target, "DOCKER=docker"], **run)
        assert "docker build" in r.stdout


def test_fetch_into_a_local_dir_for_data_files(hub: HubTestServer, tmp_path: Path) -> None:
    out = fetch(hub, tmp_path / "cache", "--revision", "v1", "--local-dir", str(tmp_path / "data"))
    assert out.splitlines()[0] == f"commit {OLD}"
    glob = str(tmp_path / "data" / "data" / "test-*.parquet")
    assert f"--data-files '{glob}'" in out
    r = hf(
        doccount("evaluate", "--model", "m", "--dry-run", "--data-files", glob), hub.url, tmp_path / "c", True
    )
    assert r.returncode == 0 and "questions: 6 in the data" in r.stdout, r.stderr
