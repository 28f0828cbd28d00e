"""A hostile server puts the API key into every field a reply or an error can carry, in any encoding,
whole or in pieces, straddling every clip length the evaluator uses (tests/support/adversarial_server.py).

Real evaluations end to end (evaluate, score, archive, check-endpoint as subprocesses): no 8-character
piece of the key appears in any file of the run folder, the scores, the archive, stdout or stderr, and no
traceback is printed. Hypothesis picks the fields, the clip, the offset, the encoding and the piece; the
explicit examples cover every field at least once.
"""

from __future__ import annotations

import secrets
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support import launch
from support.cli import EVALUATE, SCORE, clean_env, eval_args

sys.path.insert(0, str(Path(__file__).resolve().parent))
from support import datagen  # noqa: E402
from support.adversarial_server import CLIPS, ENCODINGS, FIELDS, AdversarialServer, Placement  # noqa: E402

DOCCOUNT = [sys.executable, "-c", "from evaluator.cli import entry; entry()"]
ROWS = 8
KEY_LETTERS = "ghijkmnopqrstuvwxyzGHIJKLMNPQRSTUVWXYZ"
pytestmark = pytest.mark.timeout(900)


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory):
    base = tmp_path_factory.mktemp("adversarial")
    rows = datagen.doccount_rows(ROWS)
    datagen.write_doccount(base / "data" / "test-0.parquet", rows)
    with AdversarialServer() as srv:
        yield srv, base, [r["image_sha256"] for r in rows]


def pieces(key: str) -> list[bytes]:
    return [key[i : i + 8].encode() for i in range(len(key) - 7)]


def leaks(needles: list[bytes], blob: bytes) -> list[bytes]:
    return [n for n in needles if n in blob]


placements = st.builds(
    Placement,
    field=st.sampled_from(FIELDS),
    clip=st.sampled_from(CLIPS),
    shift=st.integers(-45, 5),
    encoding=st.sampled_from(ENCODINGS),
    piece=st.none() | st.tuples(st.integers(0, 20), st.integers(28, 42)),
)


def explicit(fields: tuple[str, ...], clip: int, encoding: str) -> list[Placement]:
    return [Placement(f, clip, -17, encoding) for f in fields]


# every field at least once, in every encoding, around several clips (ROWS fields per run)
EXPLICIT = [
    explicit(FIELDS[i : i + ROWS], CLIPS[(i // ROWS) % len(CLIPS)], ENCODINGS[(i // ROWS) % len(ENCODINGS)])
    for i in range(0, len(FIELDS), ROWS)
]


def run(cmd: list[str], key: str) -> subprocess.CompletedProcess:
    return launch.run(cmd, capture_output=True, env=clean_env(MODEL_API_KEY=key), timeout=180)


def one_run(srv: AdversarialServer, base: Path, shas: list[str], chosen: list[Placement]) -> None:
    # letters that are not hex digits: an 8-character piece of a hex key turns up by chance in the run's
    # SHA-256 hex strings (about once in 60 runs); these cannot
    key = "sk-adv-" + "".join(secrets.choice(KEY_LETTERS) for _ in range(32))
    needles = pieces(key)
    srv.place(dict(zip(shas, chosen, strict=False)))
    work = base / secrets.token_hex(4)
    root = work / "run"
    data = str(base / "data" / "*.parquet")
    cmd = [*EVALUATE, *eval_args(srv.base_url, data, root, model="test-model")]
    cmd += ["--max-retries", "2", "--timeout", "10", "--concurrency", "4"]
    procs = [run(cmd, key)]
    procs.append(run([*SCORE, "--run-root", str(root)], key))
    procs.append(
        run([*DOCCOUNT, "archive", "--run-root", str(root), "--output", str(work / "a.tar.gz")], key)
    )
    procs.append(
        run([*DOCCOUNT, "check-endpoint", *eval_args(srv.base_url, data, work / "c", "test-model")], key)
    )
    assert srv.auth_seen == {__import__("hashlib").sha256(f"Bearer {key}".encode()).hexdigest()}
    assert srv.served, "the server never placed the key: nothing was tested"
    assert procs[0].returncode in (0, 3), procs[0].stderr.decode()[-3000:]
    for proc in procs:
        out = proc.stdout + proc.stderr
        assert b"Traceback" not in out, out.decode()[-3000:]
        assert not leaks(needles, out), (proc.args[-6:], out.decode()[-2000:])
    files = [p for p in work.rglob("*") if p.is_file()]
    assert any(p.name == "run_config.json" for p in files)
    for path in files:
        blob = path.read_bytes()
        assert not leaks(needles, blob), f"the key leaked into {path.relative_to(work)}"
    archive = work / "a.tar.gz"
    if archive.exists():
        with tarfile.open(archive) as tar:
            for member in tar.getmembers():
                blob = tar.extractfile(member).read() if member.isfile() else b""  # type: ignore[union-attr]
                assert not leaks(needles, blob), f"the key leaked into the archive's {member.name}"


def test_every_field_is_explicitly_covered() -> None:
    assert {p.field for ps in EXPLICIT for p in ps} == set(FIELDS)
    assert all(len(ps) <= ROWS for ps in EXPLICIT)


# The explicit examples and the drawn ones are separate test items (the drawn ones in SHARDS parts of equal
# size) so that pytest-xdist can run them on several workers: each example is four CLI processes.
SHARDS = 4


@pytest.mark.parametrize("chosen", EXPLICIT, ids=[f"fields{i * ROWS}" for i in range(len(EXPLICIT))])
def test_every_field_explicitly_carries_the_key_and_nothing_leaks(setup, chosen: list[Placement]) -> None:
    srv, base, shas = setup
    one_run(srv, base, shas, chosen)


@pytest.mark.parametrize("shard", range(SHARDS))
@settings(
    max_examples=24 // SHARDS,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(chosen=st.lists(placements, min_size=1, max_size=ROWS))
def test_a_hostile_server_cannot_get_the_key_into_anything(
    setup, shard: int, chosen: list[Placement]
) -> None:
    srv, base, shas = setup
    one_run(srv, base, shas, chosen)
