"""A fast stand-in for `vllm serve`, plugged into a sweep through `[serve] command`.

    python tests/support/standin_server.py MODEL --host H --port P --served-model-name NAME [--revision REV]
        [--config C.json] [--startup-s S] [--fail-starts N --state DIR] [--serve-as OTHER]
        [--die-after N] [--ignore-term] [--record FILE] [--hold-s S]

It takes the contract's arguments (the sweep's process launcher passes them) and serves the test server
(openai_test_server) with /v1/models listing NAME. The rest tells it how to misbehave:
--fail-starts N   the first N starts print a vLLM-like error and exit 1 (counted in --state DIR);
--serve-as OTHER  list another model in /v1/models (another server on the port, the wrong weights);
--die-after N     exit abruptly (code 1) once N chat requests have arrived;
--ignore-term     ignore SIGTERM (the SIGKILL path of a stop);
--record FILE     append {"name","gpus","pid","start","end"} JSON lines: once listening, and at exit;
--hold-s S        sleep S seconds before answering each request (a run that takes time);
--request-log F   append each chat request to F (openai_test_server's request log);
--env-log F       at start, write its environment as one JSON object to F (what a server inherits);
--access-log F    at exit, append one JSON line per request received (path, Authorization SHA-256,
                  allowed), with the server's token and command line (a test reads what it was sent).

A server's key comes only from its environment, as vLLM's does: with VLLM_API_KEY set, every model route
(/v1/...) answers 401 unless the request carries `Authorization: Bearer <VLLM_API_KEY>`, while /health
(and /version) stay open. That is vLLM's own rule: vllm/entrypoints/openai/api_server.py (build_app)
adds AuthenticationMiddleware when `args.api_key or envs.VLLM_API_KEY` is set, and that middleware
(vllm/entrypoints/openai/server_utils.py, AuthenticationMiddleware.__call__) answers 401 to a request
whose path starts with /v1 and whose Bearer token matches none of the keys; other paths pass.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, for `support.*` when run as a script


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    p.add_argument("model")
    p.add_argument("--host", required=True)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--served-model-name", required=True)
    p.add_argument("--revision")
    p.add_argument("--config")
    p.add_argument("--startup-s", type=float, default=0.0)
    p.add_argument("--fail-starts", type=int, default=0)
    p.add_argument("--state")
    p.add_argument("--serve-as")
    p.add_argument("--die-after", type=int, default=0)
    p.add_argument("--ignore-term", action="store_true")
    p.add_argument("--record")
    p.add_argument("--hold-s", type=float, default=0.0)
    p.add_argument("--request-log")
    p.add_argument("--access-log")
    p.add_argument("--env-log")
    return p.parse_args(argv)


def record(path: str | None, **fields: object) -> None:
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps(fields) + "\n")


def failed_start(ns: argparse.Namespace) -> bool:
    """This start is one of the first --fail-starts (the count kept in --state)."""
    if not ns.fail_starts:
        return False
    counter = Path(ns.state) / f"{ns.served_model_name.replace('/', '_')}.starts"
    n = int(counter.read_text()) if counter.exists() else 0
    counter.write_text(str(n + 1))
    return n < ns.fail_starts


def main(argv: list[str] | None = None) -> int:
    ns = parse(sys.argv[1:] if argv is None else argv)
    print(f"INFO standin: serving {ns.model} as {ns.served_model_name} revision={ns.revision}", flush=True)
    if ns.env_log:
        Path(ns.env_log).write_text(json.dumps(dict(os.environ)), encoding="utf-8")
    time.sleep(ns.startup_s)
    if failed_start(ns):
        print("ValueError: torch.OutOfMemoryError: CUDA out of memory (stand-in)", flush=True)
        return 1
    # imported only by a start that serves: aiohttp's import is most of a stand-in's CPU (~0.5 s), and a
    # sweep's failing starts (--fail-starts) need none of it
    from support.openai_test_server import TestServer

    config = json.loads(Path(ns.config).read_text()) if ns.config else {}
    config["served_model"] = ns.serve_as or ns.served_model_name
    if ns.hold_s:
        config["latency_s"] = ns.hold_s
    stop = threading.Event()
    signal.signal(signal.SIGTERM, signal.SIG_IGN if ns.ignore_term else (lambda *_: stop.set()))
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    gpus = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    token = os.environ.get("VLLM_API_KEY") or None  # as vLLM: from the environment (or --api-key)
    srv = TestServer(config, host=ns.host, port=ns.port, request_log=ns.request_log, api_key=token)
    with srv:
        start = time.time()
        record(ns.record, name=ns.served_model_name, gpus=gpus, pid=os.getpid(), start=start, end=None)
        try:
            while not stop.wait(0.05):
                if not ns.die_after:
                    continue  # requests() deep-copies every record: only a --die-after stand-in counts them
                chats = [r for r in srv.requests() if r["path"].endswith("/chat/completions")]
                if len(chats) >= ns.die_after:
                    print("RuntimeError: EngineCore died unexpectedly (stand-in)", flush=True)
                    os._exit(1)
        finally:
            record(
                ns.record, name=ns.served_model_name, gpus=gpus, pid=os.getpid(), start=start, end=time.time()
            )
            for seen in srv.state.access:
                record(ns.access_log, token=token, argv=sys.argv, request=seen)
    return 0


if __name__ == "__main__":
    sys.exit(main())
