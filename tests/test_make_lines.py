"""Issue #39 point 7: Make injection. A serving value read from an archive is checked before it goes into a
printed `make` line (a model is a hub repository id or a plain folder); the `$` of what is printed is
doubled for Make and each word shell-quoted; the Makefile hands MODEL, RUN and friends to its recipes
through the environment, so a quote or `$(shell ...)` in a value is never Make or shell syntax. Real
make in a copy of the bundle (with -n, and for real with stand-in docker/compose programs)."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from support.archives import rewrite
from support.cli import REPO, run_cli
from support.datagen import doccount_reply, doccount_rows, write_doccount
from support.openai_test_server import TestServer

from evaluator.archive.plan import make_command, serve_commands
from evaluator.runfolder.runconfig import RunConfig, Serving

pytestmark = [
    pytest.mark.timeout(240),
    pytest.mark.skipif(shutil.which("make") is None, reason="needs GNU make"),
]

NAMED = (
    "MODEL",
    "MODEL_REVISION",
    "SERVED_MODEL_NAME",
    "RUN",
    "DATA",
    "DATASET_REVISION",
    "ARCHIVE",
    "SWEEP",
)


def bundle(tmp: Path) -> Path:
    """A copy of the files the Makefile reads (its version from pyproject.toml, compose.yaml's hash)."""
    (tmp / "bundle").mkdir()
    for name in ("Makefile", "pyproject.toml", "compose.yaml"):
        shutil.copy(REPO / name, tmp / "bundle" / name)
    return tmp / "bundle"


def crafted(tmp: Path) -> tuple[str, list[Path]]:
    """A value that breaks out of single quotes and asks Make for $(shell): the files it would create."""
    files = [tmp / "quote-escaped", tmp / "make-shell-ran"]
    return f"org/x';touch {files[0]};'$(shell touch {files[1]})", files


def make(folder: Path, line: str, **env: str) -> subprocess.CompletedProcess[str]:
    """A printed make line, run by a shell as a user would paste it."""
    return subprocess.run(
        ["bash", "-c", line], cwd=folder, capture_output=True, text=True, timeout=120,
        env={"PATH": "/usr/bin:/bin", "HOME": str(folder), **env},
    )  # fmt: skip


def test_printed_make_lines_double_dollar_and_quote_every_word(tmp_path: Path) -> None:
    folder = bundle(tmp_path)
    value, files = crafted(tmp_path)
    for target in ("serve", "eval"):
        line = make_command(["make", "-n", target, f"MODEL={value}", f"RUN={value}", "SKIP_BUILD=1"])
        assert "$$(shell" in line and shlex.split(line)[3] == f"MODEL={value.replace('$', '$$')}"
        res = make(folder, line)
        assert res.returncode == 0, res.stderr
        assert [f for f in files if f.exists()] == []
        assert value not in res.stdout  # the recipes read "$MODEL" and "$RUN", the value stays out
    # VLLM_EXTRA_ARGS from an archive's server arguments is not checked but escaped the same way
    config = RunConfig(benchmark="doccount", model="tiny", serving=Serving(model="org/x", args=[value]))
    line = serve_commands(config.to_dict())[-1]
    assert make(folder, line.replace("make serve", "make -n serve SKIP_BUILD=1", 1)).returncode == 0
    assert [f for f in files if f.exists()] == []


@pytest.mark.parametrize(
    "serving",
    [
        {"model": "org/x$(shell touch F)"},
        {"model": "org/x'y"},
        {"model": "org/x", "revision": "main;rm -rf x"},
    ],
)
def test_serving_values_that_are_not_ids_print_no_make_line(serving: dict) -> None:
    from evaluator.archive.base import ArchiveError

    config = RunConfig(benchmark="doccount", model="tiny", serving=Serving(**serving))
    with pytest.raises(ArchiveError, match="refusing to print a make line"):
        serve_commands(config.to_dict())


def fake_program(tmp: Path) -> Path:
    """Stands in for docker and docker compose: records its arguments and the values it was given."""
    path = tmp / "fake-engine"
    keys = json.dumps(list(NAMED))
    path.write_text(
        f"#!{sys.executable}\nimport json, os, sys\n"
        f"with open(os.environ['FAKE_LOG'], 'a') as f:\n"
        f"    f.write(json.dumps({{'argv': sys.argv[1:], 'env': {{k: os.environ.get(k) for k in {keys}}}}}) + '\\n')\n"
    )
    path.chmod(0o755)
    return path


def test_the_makefile_hands_values_to_recipes_through_the_environment(tmp_path: Path) -> None:
    text = (REPO / "Makefile").read_text()
    names = "|".join(NAMED)
    pasted = re.findall(rf"'\$\((?:{names})\)'", text)
    assert pasted == []  # no recipe text holds '$(MODEL)' and the like
    folder = bundle(tmp_path)
    value, files = crafted(tmp_path)
    fake, log = fake_program(tmp_path), tmp_path / "calls.jsonl"
    common = [f"DOCKER={fake}", f"COMPOSE={fake}", f"HF_CACHE_DIR={tmp_path / 'hf'}", "SKIP_BUILD=1"]
    serve = make_command(["make", "serve", f"MODEL={value}", "VLLM_PORT=1", "HEALTH_TIMEOUT=0", *common])
    res = make(folder, serve, FAKE_LOG=str(log))
    assert "timed out waiting for vllm" in res.stderr, res.stderr  # it got as far as waiting for /health
    score = make_command(["make", "score", f"RUN={value}", *common])
    assert make(folder, score, FAKE_LOG=str(log)).returncode == 0
    calls = [json.loads(x) for x in log.read_text().splitlines()]
    up = next(c for c in calls if c["argv"][:1] == ["up"])
    assert up["env"]["MODEL"] == value and up["env"]["SERVED_MODEL_NAME"] == value  # compose reads them
    scored = next(c for c in calls if "score" in c["argv"])
    assert scored["argv"][-2:] == ["--run-root", f"runs/{value}"]  # one word, exactly the value
    assert [f for f in files if f.exists()] == []


def test_reproduce_refuses_an_archive_whose_serving_model_is_make_syntax(tmp_path: Path) -> None:
    rows = doccount_rows(2)
    write_doccount(tmp_path / "data" / "test-0.parquet", rows)
    data = str(tmp_path / "data" / "*.parquet")
    value, files = crafted(tmp_path)
    with TestServer({"answers": doccount_reply(rows)}) as srv:
        run = tmp_path / "orig"
        res = run_cli("evaluate", "--model", "test-model", "--base-url", srv.base_url, "--data-files", data,
                      "--run-root", str(run), "--quiet")  # fmt: skip
        assert res.returncode == 0, res.stderr
        assert run_cli("score", "--run-root", str(run)).returncode == 0
        archive = tmp_path / "orig.tar.gz"
        assert run_cli("archive", "--run-root", str(run), "--output", str(archive)).returncode == 0

        def serve_it(rel: dict[str, bytes]) -> None:
            name = "runs/orig/run_config.json"
            config = json.loads(rel[name])
            config["serving"] = {"model": value, "revision": "main"}
            rel[name] = json.dumps(config, indent=2).encode()

        bad = rewrite(archive, tmp_path / "crafted.tar.gz", serve_it, resum=True)
        assert run_cli("verify", str(bad)).returncode == 0  # checksums recomputed: it verifies
        srv.reset()
        res = run_cli("reproduce", str(bad), "--base-url", srv.base_url, "--data-files", data,
                      "--run-root", str(tmp_path / "again"))  # fmt: skip
        assert srv.requests() == []
    assert res.returncode == 2, res.stdout + res.stderr
    errors = [ln for ln in res.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and "serving" in errors[0] and "make line" in errors[0], res.stderr
    assert "$(shell" not in res.stderr.replace(errors[0], "") and [f for f in files if f.exists()] == []
