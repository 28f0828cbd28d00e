"""server_info (evaluator/runfolder/provenance.py): what the endpoint says about itself (GET /v1/models and
/version), each within a whole-request deadline and a size cap (trust3 #5). Before, a dripping route held
`evaluate --timeout 5` for good, and a 2 GiB /v1/models took 8.5 GB of memory."""

from __future__ import annotations

import contextlib
import json
import socket
import time
from pathlib import Path

import pytest
from support.adversarial_server import RouteServer
from support.cli import fast_eval_cmd
from support.datagen import doccount_rows, write_doccount
from support.measure import run_measured

from evaluator.runfolder.provenance import server_info

MiB = 2**20


@pytest.mark.parametrize(
    "routes",
    [
        {"/v1/models": "drip"},
        {"/version": "drip"},
        {"/v1/models": "drip_headers", "/version": "drip_headers"},
    ],
)
def test_a_dripping_route_is_recorded_as_an_error_at_the_deadline(routes: dict[str, str]) -> None:
    with RouteServer(routes) as srv:
        t0 = time.monotonic()
        info = server_info(srv.base_url, None, timeout_s=1.0)
        took = time.monotonic() - t0
    assert took < 2 * 1.0 + 1.5, took  # two asks of at most 1 s each (the drip alone: minutes)
    for route, key in (("/v1/models", "models"), ("/version", "version")):
        if route in routes:
            assert info[key] == {"error": "TimeoutError"}, info
    if "/v1/models" not in routes:
        assert info["models"] == ["m"], info


def test_a_huge_models_list_is_cut_at_the_cap() -> None:
    with RouteServer({"/v1/models": "huge"}, huge_bytes=64 * MiB) as srv:
        info = server_info(srv.base_url, None, timeout_s=20.0)
    assert info["models"] == {"error": "ReplyTooLarge"}, info
    assert info["version"] == {"version": "0.0-test"}, info


def _data(tmp_path: Path) -> Path:
    write_doccount(tmp_path / "data" / "test-00000-of-00001.parquet", doccount_rows(2))
    return tmp_path / "data"


def _server_record(root: Path) -> str:
    config = json.loads((root / "run_config.json").read_text())
    return json.dumps(config)


def test_evaluate_with_a_dripping_models_and_version_ends_within_its_timeout(tmp_path: Path) -> None:
    root = tmp_path / "run"
    with RouteServer({"/v1/models": "drip", "/version": "drip"}) as srv:
        cmd = fast_eval_cmd(srv.base_url, _data(tmp_path), root, timeout=5, max_retries=0)
        code, err, elapsed, _ = run_measured(cmd, timeout=90)
    assert code == 0, err[-2000:]
    # each ask ends at --timeout 5 (two asks), then the two rows answer at once
    assert elapsed < 2 * 5 + 25, (elapsed, err[-2000:])
    assert "Traceback" not in err
    assert '"TimeoutError"' in _server_record(root)
    print(f"dripping /v1/models and /version: evaluate --timeout 5 ended after {elapsed:.1f} s")


def test_evaluate_with_a_2_gib_models_list_keeps_memory_bounded(tmp_path: Path) -> None:
    root = tmp_path / "run"
    with RouteServer({"/v1/models": "huge"}, huge_bytes=2 * 2**30) as srv:
        cmd = fast_eval_cmd(srv.base_url, _data(tmp_path), root, timeout=60, max_retries=0)
        code, err, elapsed, peak = run_measured(cmd, timeout=120)
    assert code == 0, err[-2000:]
    assert "Traceback" not in err
    assert '"ReplyTooLarge"' in _server_record(root)
    assert peak < 400 * MiB, peak / MiB
    print(f"2 GiB /v1/models: evaluate peak RSS {peak / MiB:.0f} MiB, {elapsed:.1f} s")


def test_a_connect_that_never_completes_is_still_unreachable() -> None:
    """The whole-request deadline must not hide a dropped connect: it stays ConnectTimeout, which evaluate
    reads as "nothing answered" (evaluation.reachability.unreachable)."""
    from evaluator.evaluation.reachability import unreachable

    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(0)
        port = listener.getsockname()[1]
        backlog = [socket.socket() for _ in range(3)]  # the accept queue full: later connects are dropped
        for c in backlog:
            c.setblocking(False)
            with contextlib.suppress(BlockingIOError):
                c.connect(("127.0.0.1", port))
        try:
            url = f"http://127.0.0.1:{port}/v1"
            info = server_info(url, None, timeout_s=1.0)
        finally:
            for c in backlog:
                c.close()
    assert info["models"] == {"error": "ConnectTimeout"}, info
    assert unreachable({url: info}) == [url]
