"""A wheel built from the repository works without the checkout (issue 24).

The wheel is built from a copy of the files a clone has (pyproject.toml, README.md, evaluator/) and
installed, not editable, into a fresh venv. That venv sees the third-party packages of the test
interpreter through a path line (so nothing is downloaded) but not the checkout: the editable install's
finder lives in a .pth file that a path line does not run. `doccount demo --pages 4` and a CountQA
evaluation then run from a folder without a checkout in it, with DOCCOUNT_PROMPTS_DIR and PYTHONPATH unset.

Also here: the prompt files exist once in the repository, in the top-level prompts/ (the folder people read
and edit); the package's evaluator/data/prompts is a link to it, which the wheel build turns into files.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from support.datagen import countqa_rows, write_countqa
from support.openai_test_server import TestServer

REPO = Path(__file__).resolve().parents[1]
PROMPTS = REPO / "prompts"
PACKAGE_PROMPTS = REPO / "evaluator" / "data" / "prompts"


def test_the_prompts_exist_once_in_the_repository():
    assert PACKAGE_PROMPTS.is_symlink() and PACKAGE_PROMPTS.resolve() == PROMPTS.resolve()
    tracked = subprocess.run(
        ["git", "ls-files", "-s", "evaluator/data/prompts"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert tracked[:1] == ["120000"], f"evaluator/data/prompts is tracked as {tracked}, not as one link"


def _run(
    cmd: list[str], cwd: Path, env: dict[str, str], timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> dict[str, object]:
    """A venv with the wheel installed; its bin folder, a clean environment and a work folder."""
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, src / name)
    # as a clone has them: prompts/ once, and the package's link to it
    shutil.copytree(REPO / "prompts", src / "prompts")
    skip = shutil.ignore_patterns("__pycache__")
    shutil.copytree(REPO / "evaluator", src / "evaluator", symlinks=True, ignore=skip)
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTHONPATH", "DOCCOUNT_PROMPTS_DIR", "MODEL_API_KEY")
    }
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    built = _run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "-w",
            str(tmp / "dist"),
            str(src),
        ],
        cwd=tmp,
        env=env,
    )
    assert built.returncode == 0, built.stderr[-3000:]
    (wheel,) = (tmp / "dist").glob("doccount_eval-*.whl")
    venv = tmp / "venv"
    made = _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], cwd=tmp, env=env)
    assert made.returncode == 0, made.stderr
    bin_dir = venv / "bin"
    purelib = _run(
        [str(bin_dir / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], tmp, env
    ).stdout.strip()
    pip = _run(  # the test interpreter's pip, run for the venv's python (console scripts point at it)
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(bin_dir / "python"),
            "install",
            "--no-deps",
            "--no-index",
            str(wheel),
        ],
        cwd=tmp,
        env=env,
    )
    assert pip.returncode == 0, pip.stderr[-3000:]
    # Only now, so that pip above did not see (and replace) the test interpreter's own install: its
    # third-party packages, as a plain path (the .pth files there, the editable finder among them, are
    # not run from a path line).
    (Path(purelib) / "test-deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    work = tmp / "work"
    work.mkdir()
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    env["VIRTUAL_ENV"] = str(venv)
    return {"bin": bin_dir, "env": env, "work": work, "venv": venv, "wheel": wheel}


def test_the_installed_package_is_the_wheel_not_the_checkout(installed):
    where = _run(
        [
            str(installed["bin"] / "python"),
            "-c",
            "import evaluator, evaluator.cli; print(evaluator.__file__)",
        ],
        installed["work"],
        installed["env"],
    )
    assert where.returncode == 0, where.stderr
    path = Path(where.stdout.strip()).resolve()
    assert path.is_relative_to(Path(installed["venv"]).resolve()), path
    assert not path.is_relative_to(REPO)
    # and installing it left the test interpreter's own install alone
    mine = _run(
        [sys.executable, "-c", "import evaluator; print(evaluator.__file__)"],
        installed["work"],
        installed["env"],
    )
    assert mine.returncode == 0 and not Path(mine.stdout.strip()).resolve().is_relative_to(installed["venv"])
    shipped = path.parent / "data" / "prompts"
    assert sorted(p.name for p in shipped.iterdir()) == sorted(p.name for p in PROMPTS.iterdir())


def test_the_demo_runs_from_the_wheel(installed):
    """`doccount demo --run-root demo` writes everything under demo/ (the sample pages included)."""
    work = Path(installed["work"]) / "demo-cwd"
    work.mkdir()
    res = _run(
        [str(installed["bin"] / "doccount"), "demo", "--pages", "4", "--run-root", "demo"],
        work,
        installed["env"],
    )
    assert res.returncode == 0, res.stderr[-3000:]
    assert sorted(p.name for p in work.iterdir()) == ["demo"]
    assert (work / "demo" / "demo-data" / "data").is_dir()
    summary = json.loads((work / "demo" / "scores" / "summary.json").read_text())
    assert summary["primary"]["questions"] == 4
    assert summary["outcomes"]["ok"] == 4
    config = json.loads((work / "demo" / "run_config.json").read_text())
    expected = hashlib.sha256((PROMPTS / "counting_protocol.md").read_bytes()).hexdigest()
    assert config["prompts"] == {"counting_protocol.md": expected}


DEMO_ONLY = ("rapid_layout", "onnxruntime", "skimage", "scikit_image")  # the demo extra's own packages


def test_the_demo_without_the_demo_extra_says_which_extra(installed, tmp_path):
    """A fresh venv with the wheel and the base install's packages but not the demo extra's: one line."""
    deps = tmp_path / "deps"  # the test interpreter's packages, the demo extra's left out
    deps.mkdir()
    for entry in Path(sysconfig.get_paths()["purelib"]).iterdir():
        if not entry.name.lower().startswith(DEMO_ONLY) and entry.suffix != ".pth":
            (deps / entry.name).symlink_to(entry)
    venv = tmp_path / "venv"
    env = dict(installed["env"])
    assert _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], tmp_path, env).returncode == 0
    py = venv / "bin" / "python"
    pip = _run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(py),
            "install",
            "--no-deps",
            "--no-index",
            str(installed["wheel"]),
        ],
        tmp_path,
        env,
    )
    assert pip.returncode == 0, pip.stderr[-3000:]
    purelib = _run(
        [str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], tmp_path, env
    )
    (Path(purelib.stdout.strip()) / "test-deps.pth").write_text(f"{deps}\n")
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    for command in (["demo", "--pages", "4"], ["serve-reference", "--port", "0"]):
        res = _run([str(venv / "bin" / "doccount"), *command], tmp_path, env, timeout=120)
        assert res.returncode == 2, res.stderr[-3000:]
        assert "Traceback" not in res.stderr
        [line] = res.stderr.strip().splitlines()
        assert line.startswith("error: ") and "doccount-eval[demo]" in line
        assert "rapid-layout" in line and "onnxruntime" in line
    assert not (tmp_path / "runs").exists()  # nothing was written


def test_a_countqa_evaluation_runs_from_the_wheel(installed, tmp_path):
    rows = countqa_rows(4)
    data = write_countqa(tmp_path / "cqa" / "test-00000.parquet", rows)
    questions = sum(len(r["questions"]) for r in rows)
    bin_dir, env, work = installed["bin"], installed["env"], installed["work"]
    with TestServer({"default_reply": "I count 7.\n<answer>7</answer>"}) as srv:
        res = _run(
            [
                str(bin_dir / "doccount"),
                "evaluate",
                "--benchmark",
                "countqa",
                "--model",
                "test-model",
                "--base-url",
                srv.base_url,
                "--data-files",
                str(data),
                "--run-root",
                "cqa",
                "--quiet",
            ],
            work,
            env,
        )
        assert res.returncode == 0, res.stderr[-3000:]
        sent = srv.state.requests()
    assert len(sent) == questions
    system = (PROMPTS / "countqa_system.txt").read_text(encoding="utf-8")
    assert all(r["body"]["messages"][0] == {"role": "system", "content": system} for r in sent)
    scored = _run([str(bin_dir / "doccount"), "score", "--run-root", "cqa"], work, env)
    assert scored.returncode == 0, scored.stderr[-3000:]
    summary = json.loads((work / "cqa" / "scores" / "summary.json").read_text())
    assert summary["primary"]["questions"] == questions
    assert summary["outcomes"]["ok"] == questions


def test_a_missing_prompt_file_is_one_error_line(installed, tmp_path):
    rows = countqa_rows(1)
    data = write_countqa(tmp_path / "cqa" / "test-00000.parquet", rows)
    empty = tmp_path / "no-prompts"
    empty.mkdir()
    env = {**installed["env"], "DOCCOUNT_PROMPTS_DIR": str(empty)}
    res = _run(
        [
            str(installed["bin"] / "doccount"),
            "evaluate",
            "--benchmark",
            "countqa",
            "--model",
            "m",
            "--base-url",
            "http://127.0.0.1:9/v1",
            "--data-files",
            str(data),
            "--run-root",
            "none",
            "--dry-run",
        ],
        installed["work"],
        env,
    )
    assert res.returncode == 2, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "countqa_system.txt" in lines[0], res.stderr
    assert "DOCCOUNT_PROMPTS_DIR" in lines[0] and "Traceback" not in res.stderr
