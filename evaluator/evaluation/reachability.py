"""Is anything listening at the base URL, which base URL near a wrong one answers (GET <base>/models),
and the line and exit code of a run stopped by a refusal before any request succeeded: exit 2 when only
another setting can fix it (a URL with no chat completions, a model not served), else 3."""

from __future__ import annotations

from urllib.parse import urlsplit

from evaluator.core.boundary import clip, one_line
from evaluator.core.errors import ExitCode
from evaluator.core.jsonl import JSONObject
from evaluator.request.bounds import MAX_MODELS_BYTES, BoundedGets
from evaluator.request.breaker import EndpointRefused, wrong_path
from evaluator.request.endpoint import base_url_candidates, chat_url, not_found_hint, split_query

# server_info's record of a probe that never reached a server (nothing listening, no such host, a
# firewall that drops the connection)
UNREACHABLE = {"ConnectError", "ConnectTimeout"}


def host_port(url: str) -> str:
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return f"{parts.hostname}:{port}"


def unreachable(servers: dict[str, JSONObject]) -> list[str]:
    """The base URLs where neither of server_info's probes reached a server. Pure."""
    out = []
    for url, info in servers.items():
        errors = [
            (info.get(k) or {}).get("error") for k in ("models", "version") if isinstance(info.get(k), dict)
        ]
        if len(errors) == 2 and all(e in UNREACHABLE for e in errors):
            out.append(url)
    return out


def nothing_listening(urls: list[str]) -> str:
    where = ", ".join(host_port(u) for u in urls)
    return (
        f"nothing answered at {where} (no connection could be made): is the server running? Start it "
        "(`make serve`, or your provider's URL with --base-url) and re-run the same command; nothing was "
        "sent or recorded"
    )


def model_ids(http: BoundedGets, base_url: str) -> list[str] | None:
    """The model ids GET <base_url>/models lists (a 200 with a list), else None (also past the bounds)."""
    base, query = split_query(base_url)
    try:
        resp = http.get(f"{base}/models", params=query)
        data = resp.json() if resp.status_code == 200 else None
    except Exception:  # noqa: BLE001 - a URL that does not answer simply does not list models
        return None
    if not (isinstance(data, dict) and isinstance(data.get("data"), list)):
        return None
    return [str(m["id"]) for m in data["data"] if isinstance(m, dict) and isinstance(m.get("id"), str)]


def served_models(base_url: str, api_key: str | None, timeout_s: float = 5.0) -> list[str] | None:
    """The model ids the endpoint's /models lists, or None when it does not answer with a list."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    with BoundedGets(timeout_s, MAX_MODELS_BYTES, headers) as http:
        return model_ids(http, base_url)


def answering_base_urls(base_url: str, api_key: str | None, timeout_s: float = 5.0) -> list[str] | None:
    """The nearby base URLs (base_url_candidates) whose GET /models answers with a model list; None when
    base_url's own /models does (then a 404 on chat is not about the path)."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    with BoundedGets(timeout_s, MAX_MODELS_BYTES, headers) as http:
        if model_ids(http, base_url) is not None:
            return None
        return [c for c in base_url_candidates(base_url) if model_ids(http, c) is not None]


# Statuses of a server that answers but takes no POST there: it is not an OpenAI-compatible API (a
# static file server, `python3 -m http.server`, answers POST with 501).
NOT_AN_API = {405: "405 Method Not Allowed", 501: "501 Not Implemented"}
MAX_LISTED = 10  # served model ids shown in the line; the rest counted


def model_not_found(status: int, message: str) -> bool:
    """A 404 about the model: vLLM's "The model `x` does not exist." (NotFoundError), OpenAI's
    code `model_not_found`; OpenRouter's 404 about provider parameters is not one."""
    text = message.lower()
    return status == 404 and "model" in text and "parameters" not in text


def refusal_line(exc: EndpointRefused, base_url: str, model: str, api_key: str | None) -> tuple[int, str]:
    """(exit code, the `error:` line) for a refusal; asks the server's /models where that helps."""
    if model_not_found(exc.status, exc.message):
        return ExitCode.USAGE, unknown_model_line(model, base_url, served_models(base_url, api_key))
    if exc.status in NOT_AN_API:
        return ExitCode.USAGE, not_an_api_line(
            base_url, exc.status, answering_base_urls(base_url, api_key) or []
        )
    if wrong_path(exc.status, exc.message):
        # only a URL checked to answer is suggested; a base URL whose own /models answers is the right
        # one, so its 404 is about something else
        answering = answering_base_urls(base_url, api_key)
        if answering is not None:
            return ExitCode.USAGE, not_found_hint(base_url, answering)
    return ExitCode.INCOMPLETE, str(exc)


def unknown_model_line(model: str, base_url: str, served: list[str] | None) -> str:
    head = f"the endpoint at {base_url} does not serve --model {model!r} (HTTP 404, model not found)"
    if not served:
        return f"{head}; its /models lists none: check the model id against the provider's docs"
    listed = ", ".join(clip(one_line(m), 120) for m in served[:MAX_LISTED])
    more = f" and {len(served) - MAX_LISTED} more" if len(served) > MAX_LISTED else ""
    return f"{head}; it serves {listed}{more}: pass one of those with --model"


def not_an_api_line(base_url: str, status: int, answering: list[str]) -> str:
    fix = (
        f"--base-url {answering[0]} answers (checked: its /models lists models); use that"
        if answering
        else "pass the base URL of an OpenAI-compatible server (e.g. http://host:8000/v1) with --base-url"
    )
    return (
        f"{chat_url(base_url)} has no chat completions endpoint: the server answered POST with "
        f"{NOT_AN_API[status]} (it is not an OpenAI-compatible API); {fix}"
    )
