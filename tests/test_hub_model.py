"""Pinned weights: `doccount model` / `make model` with the real huggingface_hub client against a loopback
hub (tests/support/hub_test_server.py, model repos), the cache layout it leaves, offline use of that cache, and
what a run records about the weights that answered (run_config.json `serving`). Every command runs in
its own process: huggingface_hub reads HF_ENDPOINT, HF_HUB_CACHE and HF_HUB_OFFLINE once, at import."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.cli import REPO, closed_port_url, doccount, hf
from support.datagen import doccount_reply, doccount_rows, write_doccount
from support.hub_test_server import HubRepo, HubTestServer, git_blob_id
from support.openai_test_server import TestServer

MODEL = "acme/tiny-vlm"
V1 = hashlib.sha1(b"tiny-vlm v1").hexdigest()  # tag v1
V2 = hashlib.sha1(b"tiny-vlm v2").hexdigest()  # main
CONFIG = b'{"architectures": ["Qwen2VLForConditionalGeneration"]}\n'


def weights(version: int) -> dict[str, bytes]:
    return {
        "config.json": CONFIG,
        "tokenizer.json": b'{"version": "1.0"}\n',
        "model.safetensors": hashlib.sha256(b"weights %d" % version).digest() * 64,
        "original/consolidated.pth": b"not needed by vLLM",
    }


@pytest.fixture
def hub() -> Iterator[HubTestServer]:
    repo = HubRepo(MODEL, {V1: weights(1), V2: weights(2)}, {"main": V2, "v1": V1}, repo_type="model")
    with HubTestServer([repo]) as srv:
        yield srv


def model_cmd(hub_url: str, cache: Path, *args: str, offline: bool = False):
    return hf(doccount("model", *args), hub_url, cache, offline=offline)


def test_fetch_prints_the_commit_and_lays_out_the_hf_cache(hub: HubTestServer, tmp_path: Path) -> None:
    cache = tmp_path / "hub"
    r = model_cmd(hub.url, cache, MODEL, "--exclude", "original/*")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == f"commit {V2}"
    assert lines[-1] == f"serve: HF_HUB_OFFLINE=1 make serve MODEL={MODEL} MODEL_REVISION={V2}"
    folder = cache / "models--acme--tiny-vlm"
    assert (folder / "refs" / "main").read_text() == V2
    snap = folder / "snapshots" / V2
    assert sorted(p.name for p in snap.iterdir()) == ["config.json", "model.safetensors", "tokenizer.json"]
    blobs = (folder / "blobs").resolve()
    for f in snap.iterdir():  # symlinks into blobs/: LFS files by SHA-256, git files by git blob id
        assert f.is_symlink() and f.resolve().parent == blobs
        data = f.read_bytes()
        assert data == weights(2)[f.name]
        want = hashlib.sha256(data).hexdigest() if f.suffix == ".safetensors" else git_blob_id(data)
        assert f.resolve().name == want
    paths = [p for _, p in hub.requests()]
    assert f"/api/models/{MODEL}" in paths
    assert any(p.startswith(f"/{MODEL}/resolve/{V2}/") for p in paths)
    assert any(p.startswith("/cdn/") for p in paths) or hub.state.cdn_base is None


def test_a_tag_resolves_to_its_commit_then_offline_needs_no_request(
    hub: HubTestServer, tmp_path: Path
) -> None:
    cache = tmp_path / "hub"
    r = model_cmd(hub.url, cache, MODEL, "--revision", "v1")
    assert r.returncode == 0 and r.stdout.splitlines()[0] == f"commit {V1}", r.stderr
    assert (cache / "models--acme--tiny-vlm" / "refs" / "v1").read_text() == V1
    hub.reset()
    for rev in ("v1", V1):  # offline: the tag through refs/, the commit directly
        r = model_cmd(hub.url, cache, MODEL, "--revision", rev, offline=True)
        assert r.returncode == 0 and r.stdout.splitlines()[0] == f"commit {V1}", r.stderr
    assert hub.requests() == []
    # The same cache serves the files offline to any huggingface_hub user (vLLM loads through it).
    code = (
        "from huggingface_hub import hf_hub_download as d; "
        f"print(open(d({MODEL!r}, 'config.json', revision={V1!r}), 'rb').read().decode(), end='')"
    )
    r = hf([sys.executable, "-c", code], closed_port_url(), cache, offline=True)
    assert r.returncode == 0 and r.stdout.encode() == CONFIG, r.stderr


def test_errors_are_one_line_with_the_fix(hub: HubTestServer, tmp_path: Path) -> None:
    r = model_cmd(hub.url, tmp_path / "c", MODEL, "--revision", "nope")
    assert r.returncode == 2 and r.stderr.count("\n") == 1
    assert f"error: {MODEL} has no revision 'nope'" in r.stderr
    r = model_cmd(hub.url, tmp_path / "c", "acme/missing")
    assert r.returncode == 2 and r.stderr.count("\n") == 1
    assert "acme/missing is not a model you can read on the hub" in r.stderr
    r = model_cmd(closed_port_url(), tmp_path / "empty", MODEL, "--revision", "v1", offline=True)
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert "HF_HUB_OFFLINE is set: run `doccount model acme/tiny-vlm --revision v1` where the hub" in r.stderr


def test_make_model_fetches_into_the_cache_the_containers_mount(hub: HubTestServer, tmp_path: Path) -> None:
    prefix = Path(sys.prefix)
    make = [
        "make",
        "-s",
        "-o",
        str(prefix / ".doccount-installed"),
        f"VENV={prefix}",
        f"HF_CACHE_DIR={tmp_path}",
    ]
    r = hf([*make, "model", f"MODEL={MODEL}", "MODEL_REVISION=v1"], hub.url, tmp_path / "hub")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[0] == f"commit {V1}"
    assert (tmp_path / "hub" / "models--acme--tiny-vlm" / "snapshots" / V1 / "config.json").is_file()
    r = hf([*make, "model"], hub.url, tmp_path / "hub")
    assert r.returncode == 2 and "set MODEL=" in r.stderr


def test_a_run_records_the_commit_of_the_weights_that_served_it(hub: HubTestServer, tmp_path: Path) -> None:
    """As `make eval` runs it: the serving variables in the environment, the commit read from the cache."""
    cache = tmp_path / "hub"
    assert model_cmd(hub.url, cache, MODEL, "--revision", "v1").returncode == 0
    rows = doccount_rows(4)
    data = write_doccount(tmp_path / "data" / "test.parquet", rows)
    gpus = "NVIDIA H100 80GB HBM3, 81559 MiB, 550.54.15\nNVIDIA H100 80GB HBM3, 81559 MiB, 550.54.15\n"
    env = {
        "DOCCOUNT_SERVED_MODEL": MODEL,
        "DOCCOUNT_MODEL_REVISION": "v1",
        "DOCCOUNT_VLLM_ARGS": json.dumps(["--tensor-parallel-size", "2", "--hf-overrides", '{"a": 1}']),
        "DOCCOUNT_GPUS": gpus,
        "DOCCOUNT_IMAGE_VLLM": "sha256:" + "ab" * 32,
    }
    with TestServer({"answers": doccount_reply(rows), "served_model": "tiny"}) as srv:
        run = tmp_path / "run"
        cmd = doccount(
            "evaluate", "--backend", "vllm", "--base-url", srv.base_url, "--model", "tiny",
            "--data-files", str(data), "--run-root", str(run), "--quiet",
        )  # fmt: skip
        r = hf(cmd, closed_port_url(), cache, offline=True, extra_env=env)
        assert r.returncode == 0, r.stderr
        # The archive's REPRODUCE.md and `doccount reproduce` name the make lines that serve these weights.
        assert hf(doccount("score", "--run-root", str(run), "--no-report"), "", cache).returncode == 0
        archive = tmp_path / "run.tar.gz"
        r = hf(doccount("archive", "--run-root", str(run), "--output", str(archive)), "", cache)
        assert r.returncode == 0, r.stderr
        repro = ["reproduce", str(archive), "--base-url", srv.base_url, "--data-files", str(data)]
        r = hf(
            doccount(*repro, "--run-root", str(tmp_path / "again")), closed_port_url(), cache, offline=True
        )
        assert r.returncode == 0, r.stderr
    fetch = f"make model MODEL={MODEL} MODEL_REVISION={V1}"
    serve = (
        f"make serve MODEL={MODEL} MODEL_REVISION={V1} SERVED_MODEL_NAME=tiny TENSOR_PARALLEL_SIZE=2 "
        "'VLLM_EXTRA_ARGS=--hf-overrides '\"'\"'{\"a\": 1}'\"'\"''"
    )
    assert f"[reproduce] serve the run's weights with: {fetch}\n" in r.stderr
    assert f"[reproduce] serve the run's weights with: {serve}\n" in r.stderr
    with tarfile.open(archive) as tar:
        member = next(m for m in tar.getmembers() if m.name.endswith("/REPRODUCE.md"))
        text = tar.extractfile(member).read().decode()  # type: ignore[union-attr]
    assert f"{fetch}\n{serve}\n" in text
    serving = json.loads((run / "run_config.json").read_text())["serving"]
    assert serving == {
        "model": MODEL,
        "revision": "v1",
        "commit": V1,
        "server_version": serving["server_version"],
        "image": "sha256:" + "ab" * 32,
        "args": ["--tensor-parallel-size", "2", "--hf-overrides", '{"a": 1}'],
        "gpus": [
            {"name": "NVIDIA H100 80GB HBM3", "memory_total": "81559 MiB", "driver_version": "550.54.15"}
        ]
        * 2,
    }
    assert isinstance(serving["server_version"], str) and serving["server_version"]


def test_eval_batch_pins_the_weights_run_batch_loads_and_records_them(tmp_path: Path) -> None:
    """make eval-batch: MODEL_REVISION reaches `vllm run-batch` (weights and tokenizer) and the prepare
    step's environment, so run_config.json `serving` says which weights answered. Real make, with a
    stand-in container program that records what it was asked to run (the Makefile passes the values
    through the environment, so `make -n` cannot show them)."""
    calls = tmp_path / "calls.jsonl"
    stub = tmp_path / "docker"
    stub.write_text(
        "#!/usr/bin/env python3\nimport json, sys\n"
        f"open({str(calls)!r}, 'a').write(json.dumps(sys.argv[1:]) + '\\n')\n"
        "if 'prepare' in sys.argv: print('runs/batch-0.jsonl')\n"
    )
    stub.chmod(0o755)
    for name in ("Makefile", "pyproject.toml", "compose.yaml"):
        (tmp_path / name).write_bytes((REPO / name).read_bytes())
    r = subprocess.run(
        ["make", "eval-batch", f"MODEL={MODEL}", "MODEL_REVISION=v1", "SKIP_BUILD=1", f"DOCKER={stub}",
         f"HF_CACHE_DIR={tmp_path / 'hf'}"],
        capture_output=True, text=True, cwd=tmp_path, timeout=120,
    )  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    runs = [json.loads(line) for line in calls.read_text().splitlines()]
    run_batch = next(argv for argv in runs if "run-batch" in argv)
    assert run_batch[run_batch.index("--revision") + 1] == "v1", run_batch
    assert run_batch[run_batch.index("--tokenizer-revision") + 1] == "v1", run_batch
    prepare = next(argv for argv in runs if "prepare" in argv)
    assert f"DOCCOUNT_SERVED_MODEL={MODEL}" in prepare and "DOCCOUNT_MODEL_REVISION=v1" in prepare, prepare
