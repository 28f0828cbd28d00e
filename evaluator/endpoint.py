"""Endpoint URL normalisation. Pure."""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

VLLM_DEFAULT_BASE_URL = "http://localhost:8000/v1"


class EndpointError(ValueError):
    pass


def normalize_base_url(url: str) -> str:
    """The OpenAI-style base URL ending in /v1 for any of the spellings users paste.

    http://h:8000, http://h:8000/, http://h:8000/v1/, http://h:8000/v1/chat/completions
    all become http://h:8000/v1. Credentials in the URL are refused (keys belong in MODEL_API_KEY).
    """
    raw = url.strip()
    parts = urlsplit(raw)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise EndpointError(
            f"base URL {raw!r} is not an http(s) URL; expected e.g. https://api.example.com/v1"
        )
    if parts.username or parts.password:
        raise EndpointError("base URL must not contain credentials; put the key in MODEL_API_KEY")
    path = parts.path.rstrip("/")
    for suffix in ("/chat/completions", "/completions"):
        if path.endswith(suffix):
            path = path[: -len(suffix)].rstrip("/")
    if not path.endswith("/v1"):
        path = f"{path}/v1"
    return urlunsplit((parts.scheme, parts.netloc.lower(), path, "", ""))


def server_root(base_url: str) -> str:
    """The server root (without /v1), where vLLM serves /health and /version."""
    return base_url[: -len("/v1")] if base_url.endswith("/v1") else base_url
