"""Issue 33, the key points (1-4) and terminal escapes (8), played as an attacker: a hostile batch server
whose objects have wrong types, keys hidden in encodings the filter did not decode, a key too short to tell
apart from text, a key in the base URL's path, and a server that sends terminal control sequences."""

from __future__ import annotations

import html
import json
import re
import secrets
from pathlib import Path
from urllib.parse import unquote

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.adversarial_server import AdversarialServer, Placement
from support.batch_emulator import BatchEmulator
from support.cli import run_cli
from support.datagen import doccount_rows, write_doccount
from support.openai_test_server import TestServer

from evaluator.archive.base import secret_hits
from evaluator.core.boundary import KeyFilter, error_text, parse_json

pytestmark = pytest.mark.timeout(180)

LETTERS = "ghijkmnopqrstuvwxyzGHIJKLMNPQRSTUVWXYZ"  # no hex digits: no chance hit in a SHA-256
FAST = ["--retry-backoff", "0.01", "--retry-max-wait", "0.05", "--timeout", "10"]
BATCH = ["--batch", "--batch-poll-s", "0.05", *FAST]
# what a terminal acts on: ESC (CSI, OSC), BEL, the C1 controls (CSI 0x9b, OSC 0x9d), backspace, CR
CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def new_key() -> str:
    return "sk-trust-" + "".join(secrets.choice(LETTERS) for _ in range(30))


def pieces(key: str) -> list[str]:
    return [key[i : i + 8] for i in range(len(key) - 7)]


def leaked(key: str, *texts: str | bytes) -> list[str]:
    blob = "".join(t.decode("utf-8", "replace") if isinstance(t, bytes) else t for t in texts)
    return [p for p in pieces(key) if p in blob]


def folder_leaks(key: str, root: Path) -> list[str]:
    return [str(p) for p in root.rglob("*") if p.is_file() and leaked(key, p.read_bytes())]


@pytest.fixture
def data(tmp_path: Path) -> str:
    write_doccount(tmp_path / "data" / "test-0.parquet", doccount_rows(4))
    return str(tmp_path / "data" / "*.parquet")


def evaluate(base_url: str, data: str, root: Path, *extra: str, key: str | None = None):
    args = ["evaluate", "--model", "test-model", "--base-url", base_url, "--data-files", data]
    return run_cli(*args, "--run-root", str(root), *extra, env={"MODEL_API_KEY": key} if key else None)


# --- 1: a batch object of wrong types never makes a library print the key -------------------------------


def test_batch_objects_of_wrong_types_print_no_key(tmp_path: Path, data: str) -> None:
    key = new_key()
    hostile = {
        # the SDK's model says int here: pydantic's serializer warning would quote the value
        "errors": {"object": "list", "data": [{"code": "x", "line": "{key}", "message": "m", "param": None}]},
        "request_counts": {"total": "{key}", "completed": ["{key}"], "failed": {"n": "{key}"}},
        "created_at": "{key}",
        "metadata": ["{key}"],
    }
    with BatchEmulator({"step_s": 0.02, "api_key": key, "batch_fields": hostile}) as emu:
        res = evaluate(emu.base_url, data, tmp_path / "b", *BATCH, key=key)
    assert res.returncode in (0, 3), res.stderr
    assert "Traceback" not in res.stderr
    assert not leaked(key, res.stdout, res.stderr), res.stderr[-3000:]
    assert not folder_leaks(key, tmp_path / "b")


# --- 2: the key under \u escapes, percent-encoding, HTML entities, double escaping ------------------------


def _encode(ch: str, how: str) -> str:
    return {
        "plain": ch,
        "u": f"\\u{ord(ch):04x}",
        "U": f"\\u{ord(ch):04X}",
        "uu": f"\\\\u{ord(ch):04x}",  # a JSON string holding a \u escape: escaped twice
        "pct": f"%{ord(ch):02X}",
        "pct_lower": f"%{ord(ch):02x}",
        "pct_twice": f"%25{ord(ch):02X}",
        "html": f"&#{ord(ch)};",
        "html_hex": f"&#x{ord(ch):x};",
    }[how]


HOWS = ("plain", "u", "U", "uu", "pct", "pct_lower", "pct_twice", "html", "html_hex")


def decoded_fully(text: str) -> str:
    """What a reader gets back after undoing every encoding above, as often as it takes."""
    for _ in range(4):
        text = re.sub(r"\\+u([0-9a-fA-F]{4})", lambda m: chr(int(m.group(1), 16)), text)
        text = html.unescape(unquote(text))
    return text


@settings(max_examples=300, deadline=None)
@given(
    key=st.text(st.sampled_from(LETTERS + "0123456789-_"), min_size=20, max_size=48),
    hows=st.lists(st.sampled_from(HOWS), min_size=1, max_size=48),
    before=st.text(max_size=40),
    after=st.text(max_size=40),
)
def test_an_encoded_key_is_removed_and_found(key: str, hows: list[str], before: str, after: str) -> None:
    """Each character of the key in its own encoding (mixed, as a hostile server may mix them)."""
    encoded = "".join(_encode(ch, hows[i % len(hows)]) for i, ch in enumerate(key))
    text = f"{before}{encoded}{after}"
    kf = KeyFilter(key)
    assert not leaked(key, decoded_fully(kf(text)))
    # the archive's secret check looks for the same forms
    assert secret_hits({"f": text.encode()}, key) == ["f"]
    # a text/plain error body; a JSON error whose message holds the encoded key (escaped once more)
    message, _ = error_text(text.encode(), kf)
    assert not leaked(key, decoded_fully(message))
    body = json.dumps({"error": {"message": text}, "data": [{"id": text}]})
    message, parsed = error_text(body.encode(), kf)
    assert not leaked(key, decoded_fully(message), decoded_fully(json.dumps(parsed)))
    assert not leaked(key, decoded_fully(json.dumps(parse_json(body, kf))))


def test_encoded_keys_from_a_hostile_server_reach_no_file(tmp_path: Path, data: str) -> None:
    key = new_key()
    shas = [r["image_sha256"] for r in doccount_rows(4)]
    placed = [
        Placement("error.text_400", 120, -10, "u_all"),
        Placement("error.json_503", 300, -10, "uu_all"),
        Placement("error.html_500", 500, -10, "pct_all"),
        Placement("content", 120, -10, "u_all"),
    ]
    with AdversarialServer() as srv:
        srv.place(dict(zip(shas, placed, strict=True)), models_encoding="u_all")
        res = evaluate(srv.base_url, data, tmp_path / "r", *FAST, "--max-retries", "1", key=key)
        assert set(srv.served) == {p.field for p in placed}
    assert res.returncode in (0, 3), res.stderr
    out = decoded_fully(res.stdout + res.stderr)
    assert not leaked(key, out), res.stderr[-2000:]
    for path in (tmp_path / "r").rglob("*"):
        if path.is_file():
            assert not leaked(key, decoded_fully(path.read_text("utf-8", "replace"))), path


# --- 3: a key too short to tell apart from text ---------------------------------------------------------


@pytest.mark.parametrize("key", ["null", "0", "true", "EMPTI"])  # EMPTY itself means no key (vLLM)
def test_a_key_too_short_to_redact_is_refused_before_anything_is_sent(
    tmp_path: Path, data: str, key: str
) -> None:
    with TestServer() as srv:
        res = evaluate(srv.base_url, data, tmp_path / "s", *FAST, key=key)
        assert srv.requests() == []
    assert res.returncode == 2, res.stderr
    errors = [x for x in res.stderr.splitlines() if x.startswith("error:")]
    assert len(errors) == 1 and "too short" in errors[0] and "MODEL_API_KEY" in errors[0]
    assert "Traceback" not in res.stderr


def test_a_key_that_is_json_syntax_does_not_corrupt_replies(tmp_path: Path, data: str) -> None:
    """The key `"choices"` is in the raw text of every reply: redacting raw JSON text broke every row."""
    key = '"choices"'
    with TestServer() as srv:
        res = evaluate(srv.base_url, data, tmp_path / "j", *FAST, key=key)
    assert res.returncode == 0, res.stderr
    recs = [json.loads(x) for x in (tmp_path / "j" / "responses.partial.jsonl").read_text().splitlines()]
    assert len(recs) == 4 and {r["status"] for r in recs} == {"ok"}


# --- 4: a key in the base URL's path ---------------------------------------------------------------------


@pytest.mark.parametrize("where", ["{key}/v1", "proxy/{key}/v1", "v1/{key}", "x%2F{key}/v1"])
def test_a_key_in_the_base_url_path_is_refused_without_repeating_it(
    tmp_path: Path, data: str, where: str
) -> None:
    key = new_key()
    with TestServer() as srv:
        root_url = srv.base_url.removesuffix("/v1")
        for env_key in (key, None):  # the key as MODEL_API_KEY too, or only in the URL
            res = evaluate(f"{root_url}/{where.format(key=key)}", data, tmp_path / "u", *FAST, key=env_key)
            assert res.returncode == 2, res.stderr
            errors = [x for x in res.stderr.splitlines() if x.startswith("error:")]
            assert len(errors) == 1 and "base URL" in errors[0], res.stderr
            assert not leaked(key, res.stdout, res.stderr)
        assert srv.requests() == []
    assert not (tmp_path / "u").exists() or not folder_leaks(key, tmp_path / "u")


# --- 8: terminal control sequences from the server -------------------------------------------------------

OSC = "\x1b]0;pwned\x07"
CSI = "\x1b[2J\x1b[H"
C1 = "\x9b31m\x9d0;x\x9c"


def test_server_strings_reach_the_terminal_without_control_sequences(tmp_path: Path, data: str) -> None:
    suffix = {"validating": OSC, "in_progress": CSI + C1}
    with BatchEmulator({"step_s": 0.05, "status_suffix": suffix}) as emu:
        emu.update_config(validation_error=f"bad{OSC}{CSI}{C1}")
        res = evaluate(emu.base_url, data, tmp_path / "b", *BATCH, "--max-retries", "0")
    assert not CONTROL.findall(res.stdout + res.stderr), repr(res.stderr[-2000:])
    assert "\x1b" not in res.stdout + res.stderr
    # online: a refusal quoted in the stop line; check-endpoint prints the reply itself
    with TestServer({"refuse_fields": {"max_tokens": f"no{OSC}{CSI}{C1}\rfake: ok"}}) as srv:
        res = evaluate(srv.base_url, data, tmp_path / "o", *FAST, "--concurrency", "1")
        assert res.returncode == 3 and "no" in res.stderr
        assert not CONTROL.findall(res.stdout + res.stderr), repr(res.stderr[-2000:])
        srv.update_config(refuse_fields={}, default_reply=f"{OSC}{CSI}{C1} <answer>2</answer>")
        args = ["check-endpoint", "--model", "test-model", "--base-url", srv.base_url, "--data-files", data]
        res = run_cli(*args, "--run-root", str(tmp_path / "c"))
        assert res.returncode == 0, res.stderr
        assert "<answer>2</answer>" in res.stdout + res.stderr
        assert not CONTROL.findall(res.stdout + res.stderr), repr(res.stdout[-2000:])


@pytest.mark.parametrize("before", ["%", "a%", "\\u00", "%%"])
def test_an_escape_that_swallows_the_keys_first_characters_still_finds_it(before: str) -> None:
    """Hypothesis found it: "%" then a key beginning "00" decodes as NUL and the key's rest, so the
    archive's secret check (whole key, no pieces) missed a key whose every other character was encoded."""
    key = "0" * 20
    encoded = "".join(_encode(ch, ("plain", "plain", "u")[i % 3]) for i, ch in enumerate(key))
    assert secret_hits({"f": (before + encoded).encode()}, key) == ["f"]
