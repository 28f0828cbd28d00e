"""Before and after the first requests: is anything listening at the base URL, and which base URL near a
wrong one does answer. The only network calls here are the checks (GET <base>/models)."""

from __future__ import annotations

from urllib.parse import urlsplit

from evaluator.core.jsonl import JSONObject
from evaluator.request.bounds import MAX_MODELS_BYTES, BoundedGets
from evaluator.request.endpoint import base_url_candidates, split_query

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
    """The model ids GET <base_url>/models lists (200 with a model list), else None (also when the answer
    drips past the deadline or runs past the cap)."""
    base, query = split_query(base_url)
    try:
        resp = http.get(f"{base}/models", params=query)
        data = resp.json() if resp.status_code == 200 else None
    except Exception:  # noqa: BLE001 - a URL that does not answer simply does not list models
        return None
    if not (isinstance(data, dict) and isinstance(data.get("data"), list)):
        return None
    return [str(m["id"]) for m in data["data"] if isinstance(m, dict) and isinstance(m.get("id"), str)]


def lists_models(http: BoundedGets, base_url: str) -> bool:
    """Whether GET <base_url>/models answers 200 with a model list."""
    return model_ids(http, base_url) is not None


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
        if lists_models(http, base_url):
            return None
        return [c for c in base_url_candidates(base_url) if lists_models(http, c)]
