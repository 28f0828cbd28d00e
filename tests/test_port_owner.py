"""Issue #46 point 6: a local process that binds a served run's announced port before the server does
(while vLLM loads) and answers /health, /v1/models and chat is not taken for the run's server: the run
fails with one line and the squatter never receives the run's token. The check (study.server) reads
the kernel's listening sockets and the server's own process tree."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from support.study import Study, wait_until

from evaluator.study.server import LISTEN, foreign_listener, listeners, port_sockets

pytestmark = pytest.mark.timeout(300)


class Squatter(ThreadingHTTPServer):
    """Another local user's server on the announced port: it answers as the run's server would and logs
    every request's path and whether it carried an Authorization header."""

    def __init__(self, port: int, served: str) -> None:
        self.seen: list[dict[str, Any]] = []
        self.served = served
        super().__init__(("127.0.0.1", port), _Handler)


class _Handler(BaseHTTPRequestHandler):
    server: Squatter

    def _reply(self, body: Any) -> None:
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _log(self) -> None:
        self.server.seen.append({"path": self.path, "authorization": self.headers.get("Authorization")})

    def do_GET(self) -> None:
        self._log()
        if self.path.endswith("/models"):
            self._reply({"object": "list", "data": [{"id": self.server.served, "object": "model"}]})
        else:
            self._reply({"status": "ok"})

    def do_POST(self) -> None:
        self._log()
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        message = {"role": "assistant", "content": "<answer>7</answer>"}
        self._reply({"id": "x", "object": "chat.completion", "model": self.server.served,
                     "choices": [{"index": 0, "message": message, "finish_reason": "stop"}]})  # fmt: skip

    def log_message(self, *args: Any) -> None:
        pass


def _announced_port(marker: str) -> int | None:
    """The --port on the command line of the process that names `marker` (what any local user can read)."""
    for proc in Path("/proc").iterdir():
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if marker.encode() in argv and b"--port" in argv:
            return int(argv[argv.index(b"--port") + 1])
    return None


def test_a_squatter_on_the_announced_port_gets_no_token_and_fails_the_run(tmp_path: Path) -> None:
    study = Study(tmp_path, rows=2)
    # the stand-in loads for a while before it binds, as vLLM does
    command = study.command("--startup-s", "6")
    text = study.header(1) + f'[serve]\nexecutor = "local"\ngpus = [0]\ncommand = {json.dumps(command)}\n'
    text += '\n[[runs]]\nname = "a"\nmodel = "org/a"\nserve = { gpus = 1 }\n'
    study.file.write_text(text)
    sweep = study.start(stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    box: list[int] = []
    wait_until(lambda: box.append(p) is None if (p := _announced_port(str(tmp_path / "cfg.json"))) else False,
               60, "the server's command line never showed its port")  # fmt: skip
    squatter = Squatter(box[0], "org/a")
    thread = threading.Thread(target=squatter.serve_forever, daemon=True)
    thread.start()
    try:
        out, err = sweep.communicate(timeout=240)
    finally:
        squatter.shutdown()
        squatter.server_close()
    assert sweep.returncode == 3, err
    assert any(s["path"] == "/health" for s in squatter.seen), squatter.seen  # the sweep did reach it
    assert [s for s in squatter.seen if s["authorization"]] == []  # the token never went there
    assert not [s for s in squatter.seen if s["path"].endswith("/chat/completions")]
    state = study.state()["a"]
    assert state["state"] == "failed", state
    assert re.search(rf"port {box[0]} is answered by a process the sweep did not start", state["message"])
    assert "token was not sent" in state["message"]


def test_the_servers_own_socket_passes_and_a_strangers_does_not() -> None:
    """The check itself: a socket held by the server's process tree is its own; one held elsewhere is not."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        assert [x.inode for x in port_sockets(port)] != []
        stranger = subprocess.Popen(["sleep", "30"], start_new_session=True)
        try:
            assert foreign_listener(port, stranger.pid, container=False) is not None
        finally:
            stranger.kill()
            stranger.wait()
        # this process's own session: a server started in it holds the socket (here: the test's tree)
        holder = subprocess.Popen(["sleep", "30"], start_new_session=True, pass_fds=(s.fileno(),))
        try:
            assert foreign_listener(port, holder.pid, container=False) is None
        finally:
            holder.kill()
            holder.wait()
    free = socket.socket()
    free.bind(("127.0.0.1", 0))
    port = free.getsockname()[1]
    free.close()
    assert foreign_listener(port, 1, container=False) == "no listening socket is on it"


HEADER = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode"
V4 = st.sampled_from(["0100007F", "00000000", "0101007F", "0A00020F"])
V6 = st.sampled_from(["0" * 32, "0000000000000000FFFF00000100007F", "00000000000000000000000001000000"])


def _line(address: str, port: int, state: str, uid: int, inode: int) -> str:
    return (f"   0: {address}:{port:04X} 00000000:0000 {state} 00000000:00000000 00:00000000 00000000 "
            f"{uid:5d}        0 {inode} 1 0000000000000000 100 0 0 10 0")  # fmt: skip


@given(st.lists(st.tuples(st.booleans(), st.integers(1, 65535), st.booleans(), st.integers(0, 70000),
                          st.integers(1, 2**40), st.data()), max_size=20), st.integers(1, 65535))  # fmt: skip
def test_listeners_finds_exactly_the_loopback_reachable_listening_sockets(rows: list, port: int) -> None:
    tables: dict[bool, list[str]] = {False: [HEADER], True: [HEADER]}
    expected: dict[bool, list[tuple[int, int]]] = {False: [], True: []}
    for v6, p, listening, uid, inode, data in rows:
        address = data.draw(V6 if v6 else V4)
        tables[v6].append(_line(address, p, LISTEN if listening else "01", uid, inode))
        reachable = address in ("0100007F", "00000000", "0" * 32, "0000000000000000FFFF00000100007F")
        if listening and p == port and reachable:
            expected[v6].append((inode, uid))
    for v6 in (False, True):
        found = listeners("\n".join([*tables[v6], "garbage line", ""]), port, v6)
        assert [(x.inode, x.uid) for x in found] == expected[v6]
