"""archive / verify / reproduce on a real run folder made by the evaluator against the loopback test server."""

from __future__ import annotations

import gzip
import io
import json
import shutil
import tarfile
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest
from click.testing import CliRunner
from support.archives import members, rewrite, sha
from support.cli import FAST_RETRIES, run_cli, run_cli_process
from support.datagen import doccount_reply, doccount_rows, write_doccount
from support.openai_test_server import TestServer

from evaluator.archive import ArchiveError, create_archive
from evaluator.cli.main import main

SECRET = "sk-test-archive-0123456789abcdef"
N = 8
WRONG = {"doc-0001", "doc-0005"}


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimpleNamespace]:
    """One evaluated, scored and archived run; the server stays up for the reproduce tests."""
    base = tmp_path_factory.mktemp("archive")
    rows = doccount_rows(N)
    write_doccount(base / "data" / "test-00000-of-00001.parquet", rows)
    data = str(base / "data" / "test-*.parquet")
    bundle = base / "bundle"  # Dockerfile.vllm(-cpu) and Makefile are absent on purpose
    bundle.mkdir()
    files = {
        "Dockerfile.eval": b"FROM scratch\n",
        "compose.yaml": b"services: {}\n",
        "requirements.lock": b"x==1\n",
    }
    for name, content in files.items():
        (bundle / name).write_bytes(content)
    containers = {
        "DOCCOUNT_DOCKERFILE_EVAL_SHA256": sha(files["Dockerfile.eval"]),
        "DOCCOUNT_LOCK_SHA256": sha(files["requirements.lock"]),
        "DOCCOUNT_IMAGE_EVAL": "sha256:" + "ab" * 32,
    }
    run = base / "orig"
    with TestServer() as srv:
        srv.set_config({"answers": doccount_reply(rows, wrong=WRONG)})
        res = run_cli(
            "evaluate", "--model", "test-model", "--base-url", srv.base_url, "--data-files", data,
            "--run-root", str(run), "--quiet", "--temperature", "0.7", "--extra-body-json", '{"top_k": 20}',
            *FAST_RETRIES, env={"MODEL_API_KEY": SECRET, **containers},
        )  # fmt: skip
        assert res.returncode == 0, res.stderr
        res = run_cli("score", "--run-root", str(run))
        assert res.returncode == 0, res.stderr
        archive = base / "orig.tar.gz"
        result = CliRunner().invoke(
            main, ["archive", "--run-root", str(run), "--output", str(archive), "--bundle-root", str(bundle)],
            env={"MODEL_API_KEY": SECRET},
        )  # fmt: skip
        assert result.exit_code == 0, result.output
        yield SimpleNamespace(
            base=base, rows=rows, data=data, bundle=bundle, run=run, archive=archive, server=srv
        )


def cli(*args: str) -> tuple[int, str, BaseException | None]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.output, result.exception


# ----------------------------------------------------------------------------- archive


def test_layout_contents_and_no_secret(made) -> None:
    files = members(made.archive)
    top = "orig.archive/"
    assert all(name.startswith(top) for name in files)
    rel = {name[len(top) :]: data for name, data in files.items()}
    for name in (
        "ARCHIVE.json", "REPRODUCE.md", "SHA256SUMS", "dataset.json", "environment.json",
        "Dockerfile.eval", "compose.yaml", "requirements.lock", "prompts/counting_protocol.md",
        "runs/orig/run_config.json", "runs/orig/manifest.jsonl", "runs/orig/responses.partial.jsonl",
        "runs/orig/responses.jsonl", "runs/orig/scores/summary.json", "runs/orig/scores/summary.md",
    ):  # fmt: skip
        assert name in rel, name
    assert not any(n.endswith(".lock") and n.startswith("runs/") for n in rel)
    # SHA256SUMS covers every other entry, in `sha256sum -c` format
    sums = dict(reversed(line.split("  ", 1)) for line in rel["SHA256SUMS"].decode().splitlines())
    assert set(sums) == set(rel) - {"SHA256SUMS"}
    assert all(sha(rel[n]) == h for n, h in sums.items())
    index = json.loads(rel["ARCHIVE.json"])
    assert index["run_name"] == "orig" and index["format"] == "doccount-archive"
    assert set(index["missing"]) == {"Dockerfile.vllm", "Dockerfile.vllm-cpu", "Makefile"}
    assert "recorded_in" in index["entries"]["Dockerfile.eval"]
    dataset = json.loads(rel["dataset.json"])
    assert [s["sample_id"] for s in dataset["samples"]] == [r["sample_id"] for r in made.rows]
    assert [s["image_sha256"] for s in dataset["samples"]] == [r["image_sha256"] for r in made.rows]
    assert dataset["files"][0]["sha256"] == sha(next((made.base / "data").glob("*.parquet")).read_bytes())
    assert not any(r["image"]["bytes"] in data for r in made.rows for data in rel.values())  # no images
    env = json.loads(rel["environment.json"])
    assert env["images"]["DOCCOUNT_IMAGE_EVAL"] == "sha256:" + "ab" * 32
    assert env["server"]["models"] == ["test-model"]
    md = rel["REPRODUCE.md"].decode()
    assert "doccount verify" in md and "doccount reproduce" in md and "--extra-body-json" in md
    raw = gzip.decompress(made.archive.read_bytes())
    assert SECRET.encode() not in raw


def test_archive_is_deterministic(made, tmp_path) -> None:
    code, out, _ = cli("archive", "--run-root", str(made.run), "--output", str(tmp_path / "again.tar.gz"),
                       "--bundle-root", str(made.bundle))  # fmt: skip
    assert code == 0, out
    blob = made.archive.read_bytes()
    assert (tmp_path / "again.tar.gz").read_bytes() == blob
    assert blob[3] & 0x08 == 0 and blob[4:8] == b"\0\0\0\0"  # gzip: no file name, mtime 0
    with tarfile.open(made.archive, "r:gz") as tar:
        infos = tar.getmembers()
    assert [i.name for i in infos] == sorted(i.name for i in infos)
    assert {(i.mtime, i.uid, i.gid, i.uname, i.gname, i.mode) for i in infos} == {(0, 0, 0, "", "", 0o644)}


def test_archive_refuses_secret_stale_scores_and_changed_files(made, tmp_path) -> None:
    # the key's value anywhere in what would be packed
    bundle = tmp_path / "bundle"
    shutil.copytree(made.bundle, bundle)
    (bundle / "Makefile").write_text(f"KEY = {SECRET}\n")
    with pytest.raises(ArchiveError, match="MODEL_API_KEY occurs in Makefile") as exc:
        create_archive(made.run, tmp_path / "x.tar.gz", bundle_root=bundle, secret=SECRET)
    assert SECRET not in str(exc.value)
    assert not (tmp_path / "x.tar.gz").exists()
    # records appended after scoring
    run = tmp_path / "orig"
    shutil.copytree(made.run, run)
    with open(run / "responses.partial.jsonl", "a") as f:
        f.write((run / "responses.partial.jsonl").read_text().splitlines()[0] + "\n")
    with pytest.raises(ArchiveError, match="older than the records"):
        create_archive(run, tmp_path / "x.tar.gz", bundle_root=made.bundle)
    # a container file whose hash the run recorded has changed since
    (bundle / "Makefile").unlink()
    (bundle / "Dockerfile.eval").write_text("FROM other\n")
    with pytest.raises(ArchiveError, match="Dockerfile.eval has changed since the run"):
        create_archive(made.run, tmp_path / "x.tar.gz", bundle_root=bundle)
    # an unscored run
    shutil.rmtree(run / "scores")
    (run / "responses.jsonl").unlink()
    code, out, _ = cli("archive", "--run-root", str(run), "--output", str(tmp_path / "x.tar.gz"))
    assert code == 2 and "score it first" in out


# ----------------------------------------------------------------------------- verify


def test_verify_ok(made) -> None:
    res = run_cli("verify", str(made.archive))
    assert res.returncode == 0, res.stdout + res.stderr
    assert "re-score: summary.json matches (6 / 8 correct)" in res.stdout
    assert res.stdout.strip().endswith("verified")


def _flip_first_wrong(rel: dict[str, bytes]) -> None:
    """Make a wrong record look right (the kind of edit a re-score must catch)."""
    name = "runs/orig/responses.partial.jsonl"
    lines = rel[name].decode().splitlines()
    for i, line in enumerate(lines):
        rec = json.loads(line)
        if not rec["correct"]:
            rec["parsed_answer"], rec["correct"] = rec["ground_truth"], True
            lines[i] = json.dumps(rec, sort_keys=True)
            break
    rel[name] = ("\n".join(lines) + "\n").encode()


def test_verify_tampered_record(made, tmp_path) -> None:
    bad = rewrite(made.archive, tmp_path / "a.tar.gz", _flip_first_wrong)
    code, out, _ = cli("verify", str(bad))
    assert code == 1
    assert "MISMATCH runs/orig/responses.partial.jsonl: SHA-256 does not match SHA256SUMS" in out
    assert "MISMATCH runs/orig/scores/summary.json: does not match a re-score" in out
    # the checksum updated too: the re-score still catches it
    bad = rewrite(made.archive, tmp_path / "b.tar.gz", _flip_first_wrong, resum=True)
    code, out, _ = cli("verify", str(bad))
    assert code == 1
    assert "SHA256SUMS" not in out.split("FAILED")[0].replace("match SHA256SUMS", "")
    assert (
        "runs/orig/scores/summary.json: does not match a re-score of runs/orig/responses.partial.jsonl" in out
    )
    assert "primary" in out and out.splitlines()[-1].startswith("FAILED:")


def test_verify_tampered_checksum(made, tmp_path) -> None:
    def change(rel: dict[str, bytes]) -> None:
        lines = rel["SHA256SUMS"].decode().splitlines()
        i = next(i for i, line in enumerate(lines) if line.endswith("  dataset.json"))
        lines[i] = ("0" if lines[i][0] != "0" else "1") + lines[i][1:]
        rel["SHA256SUMS"] = ("\n".join(lines) + "\n").encode()

    code, out, _ = cli("verify", str(rewrite(made.archive, tmp_path / "a.tar.gz", change)))
    assert code == 1
    assert "MISMATCH dataset.json: SHA-256 does not match SHA256SUMS" in out
    assert "FAILED: 1 file(s) do not match: dataset.json" in out


def test_verify_recorded_hashes(made, tmp_path) -> None:
    """Checksums consistent, but prompt / container files differ from what run_config.json recorded."""

    def change(rel: dict[str, bytes]) -> None:
        rel["prompts/counting_protocol.md"] += b"\nanother instruction\n"
        rel["Dockerfile.eval"] = b"FROM elsewhere\n"
        del rel["requirements.lock"]

    code, out, _ = cli("verify", str(rewrite(made.archive, tmp_path / "a.tar.gz", change, resum=True)))
    assert code == 1
    assert (
        "MISMATCH prompts/counting_protocol.md: does not match the SHA-256 recorded in run_config.json" in out
    )
    assert "MISMATCH Dockerfile.eval: does not match the SHA-256 recorded in run_config.json" in out
    assert "MISMATCH requirements.lock: run_config.json records its SHA-256" in out


def _bad_inputs(made, d: Path) -> dict[str, Path]:
    blob = made.archive.read_bytes()
    (d / "plain.txt").write_text("not an archive\n")
    (d / "empty.tar.gz").write_bytes(b"")
    (d / "half.tar.gz").write_bytes(blob[: len(blob) // 2])
    (d / "trailer.tar.gz").write_bytes(blob[:-4])  # only the gzip size field is cut
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        info = tarfile.TarInfo("something/readme.txt")
        info.size = 5
        tar.addfile(info, io.BytesIO(b"hello"))
    (d / "foreign.tar.gz").write_bytes(buf.getvalue())
    (d / "gzip-not-tar.gz").write_bytes(gzip.compress(b"just text, no tar" * 100))
    return {
        "plain.txt": "not a gzip file",
        "empty.tar.gz": "not a gzip file",
        "half.tar.gz": "truncated or damaged",
        "trailer.tar.gz": "truncated or damaged",
        "foreign.tar.gz": "not a doccount archive",
        "gzip-not-tar.gz": "not a readable tar archive",
        "missing.tar.gz": "does not exist",
    }


@pytest.mark.parametrize("command", ["verify", "reproduce"])
def test_bad_archives_get_one_line_errors(made, tmp_path, command) -> None:
    for name, message in _bad_inputs(made, tmp_path).items():
        code, out, exc = cli(command, str(tmp_path / name))
        assert code == 2 and isinstance(exc, SystemExit), (name, out, exc)
        assert out.startswith("error: ") and message in out and len(out.strip().splitlines()) == 1, (
            name,
            out,
        )
    if command == "verify":  # and once as a real process
        res = run_cli_process(command, str(tmp_path / "half.tar.gz"))
        assert res.returncode == 2 and "Traceback" not in res.stderr
        assert res.stderr.startswith("error: ") and "truncated" in res.stderr


# ----------------------------------------------------------------------------- reproduce


def test_reproduce_against_test_server(made) -> None:
    made.server.reset()
    new = made.base / "repro"
    res = run_cli(
        "reproduce", str(made.archive), "--base-url", made.server.base_url, "--data-files", made.data,
        "--run-root", str(new), "--quiet",
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert f"byte-identical requests (request_sha256): {N} / {N}" in res.stdout
    assert f"Same parsed answer: {N} / {N}" in res.stdout
    assert "McNemar" in res.stdout
    assert f"Byte-identical responses (response_text and reasoning_text): {N} / {N}; differing: 0 / {N}" in (
        res.stdout
    )
    assert len(made.server.requests()) == N
    body = made.server.requests()[0]["body"]
    assert body["temperature"] == 0.7 and body["top_k"] == 20  # sampling and extra body restored
    old_cfg = json.loads((made.run / "run_config.json").read_text())
    new_cfg = json.loads((new / "run_config.json").read_text())
    for key in ("benchmark", "model", "sampling", "retry_parse_failures", "prompts"):
        assert new_cfg[key] == old_cfg[key], key
    assert new_cfg["data"]["manifest_sha256"] == old_cfg["data"]["manifest_sha256"]
    new_summary = json.loads((new / "scores" / "summary.json").read_text())
    assert new_summary["primary"]["correct"] == N - len(WRONG)


def test_reproduce_names_the_first_differing_token(made) -> None:
    """A server that answers one question differently: 1 response differs, at the token that changed."""
    replies = doccount_reply(made.rows, wrong=WRONG)
    target = made.rows[2]
    n = target["answer"]
    replies[target["image_sha256"]] = f"I see {n} areas of the class.\n<answer>{n}</answer>"
    made.server.set_config({"answers": replies})
    try:
        res = run_cli(
            "reproduce", str(made.archive), "--base-url", made.server.base_url, "--data-files", made.data,
            "--run-root", str(made.base / "repro-differs"), "--quiet",
        )  # fmt: skip
    finally:
        made.server.set_config({"answers": doccount_reply(made.rows, wrong=WRONG)})
    assert res.returncode == 0, res.stderr
    assert f"{N - 1} / {N}; differing: 1 / {N}" in res.stdout
    # "I", " ", "see", " ", "<n>", " ", "areas": token 6, at character 7 + len(str(n))
    assert f"| {target['sample_id']} | 0 | response_text | 6 | {7 + len(str(n))} |" in res.stdout
    assert f"Same parsed answer: {N} / {N}" in res.stdout  # the accuracy comparison stays


def test_reproduce_refuses_other_data_and_tampered_archives(made, tmp_path) -> None:
    other = [dict(r) for r in made.rows]
    other[0]["answer"] += 1
    write_doccount(tmp_path / "other" / "test-00000-of-00001.parquet", other)
    code, out, _ = cli("reproduce", str(made.archive), "--base-url", made.server.base_url,
                       "--data-files", str(tmp_path / "other" / "*.parquet"))  # fmt: skip
    assert code == 2 and "data files do not match the archive" in out and "test-00000-of-00001.parquet" in out
    bad = rewrite(made.archive, tmp_path / "t.tar.gz", _flip_first_wrong, resum=True)
    code, out, _ = cli("reproduce", str(bad), "--base-url", made.server.base_url, "--data-files", made.data)
    assert code == 1 and "does not verify" in out
