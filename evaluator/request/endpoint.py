"""Endpoint URL handling. Pure.

The base URL follows the openai client's `base_url`: requests go to `<base>/chat/completions`.
"""

from __future__ import annotations

import re
from urllib.parse import parse_qsl, unquote, urlsplit, urlunsplit

from evaluator.core.boundary import KeyFilter
from evaluator.core.errors import UserError

VLLM_DEFAULT_BASE_URL = "http://localhost:8000/v1"
CHAT_PATH = "/chat/completions"


# Query parameters that carry a credential (Gemini's native `key`, gateways' `api_key` / `token`, Azure SAS
# `sig`, Azure Functions' `code`): their values are never written anywhere, so such a URL is refused.
SECRET_PARAM = re.compile(
    r"(?:^|[-_.])(?:key|apikey|token|secret|sig|signature|password|passwd|pwd|auth|authorization|"
    r"credentials?|code|session)$",
    re.IGNORECASE,
)
# A path segment in a provider's key format (OpenAI-style sk-/sk_, Google AIza, Hugging Face hf_, GitHub gh*_,
# Groq gsk_, xAI xai-, ...): some proxies take the key in the path, which would put it in every log line.
KEY_SEGMENT = re.compile(
    r"^(?:sk-|sk_|AIza|fw_|hf_|gh[pousr]_|gsk_|xai-|r8_|pplx-|nvapi-|xox[abp]-)[A-Za-z0-9_\-]{12,}$"
)
USE_THE_ENV = "put the key in MODEL_API_KEY (it is sent in the Authorization header)"


class EndpointError(UserError):
    pass


def secret_params(query: str, api_key: str | None = None) -> list[str]:
    """The names of a query string's parameters that look like, or hold, a credential. Pure."""
    keys = KeyFilter(api_key)
    return [
        name
        for name, value in parse_qsl(query, keep_blank_values=True)
        if SECRET_PARAM.search(name) or (keys.secret and keys(value) != value)
    ]


def path_carries_key(path: str, api_key: str | None) -> bool:
    """Whether a URL path holds the API key (in any encoding) or a segment in a provider's key format."""
    if KeyFilter(api_key).found_in(path, pieces=False):
        return True
    return any(KEY_SEGMENT.match(unquote(seg)) for seg in unquote(path).split("/"))


def refuse_credentials(parts, api_key: str | None) -> None:  # noqa: ANN001 - urlsplit's result
    """One line naming what is wrong, never a value of it."""
    if parts.username or parts.password:
        raise EndpointError(f"base URL must not contain credentials (user:password@); {USE_THE_ENV}")
    if path_carries_key(parts.path, api_key):
        raise EndpointError(
            f"base URL carries a credential in its path (a segment holds MODEL_API_KEY or looks like a key); "
            f"{USE_THE_ENV}, and give the URL without it"
        )
    named = secret_params(parts.query, api_key)
    if named:
        raise EndpointError(
            f"base URL carries a credential in its query ({', '.join(f'{n}=...' for n in named)}); "
            f"{USE_THE_ENV}. Other query parameters, such as api-version, are kept and sent"
        )


def normalize_base_url(url: str, api_key: str | None = None) -> str:
    """The base URL for any of the spellings users paste.

    - no path: `/v1` is added (http://h:8000 and http://h:8000/ become http://h:8000/v1);
    - a path is used as given, like the openai client's base_url: the trailing slash is dropped, the
      path's case and the query string are kept, nothing is added (.../v1beta/openai/, .../api/paas/v4);
    - a full .../chat/completions URL is the endpoint itself: its base is what precedes that suffix.
    The host is lower-cased. Credentials in the URL are refused (keys belong in MODEL_API_KEY):
    userinfo, a query parameter named like a credential, or one holding the API key itself.
    """
    raw = url.strip()
    parts = urlsplit(raw)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise EndpointError(
            f"base URL {raw!r} is not an http(s) URL; expected e.g. https://api.example.com/v1"
        )
    refuse_credentials(parts, api_key)
    path = parts.path.rstrip("/")
    if not path:
        path = "/v1"
    for suffix in (CHAT_PATH, "/completions"):
        if path.endswith(suffix):
            path = path[: -len(suffix)].rstrip("/")
            break
    return urlunsplit((parts.scheme, parts.netloc.lower(), path, parts.query, ""))


def split_query(base_url: str) -> tuple[str, dict[str, str]]:
    """The base URL without its query string, and the query's parameters: the openai client appends
    `/chat/completions` to the whole base URL, so the query travels separately (its `default_query`)."""
    parts = urlsplit(base_url)
    base = urlunsplit((parts.scheme, parts.netloc, parts.path, "", ""))
    return base, dict(parse_qsl(parts.query, keep_blank_values=True))


def chat_url(base_url: str) -> str:
    """The URL a chat request goes to (for messages)."""
    parts = urlsplit(base_url)
    return urlunsplit((parts.scheme, parts.netloc, parts.path + CHAT_PATH, parts.query, ""))


def server_root(base_url: str) -> str:
    """The server root (without /v1 and the query), where vLLM serves /health and /version."""
    base, _ = split_query(base_url)
    return base[: -len("/v1")] if base.endswith("/v1") else base


def not_found_hint(base_url: str, answering: list[str] | None = None) -> str:
    """One line for a 404 on the first request: the URL that answered 404 and, when a nearby base URL
    was checked and answers (`answering`, see base_url_candidates), that one; never an unchecked guess."""
    called = chat_url(base_url)
    if answering is None:  # not checked, or the base URL's own /models answers: the path may be right
        fix = "check the base URL and --model against the provider's docs (GET <base URL>/models lists its models)"
    elif answering:
        fix = f"--base-url {answering[0]} answers (checked: its /models lists models); use that"
    else:
        fix = "no base URL near it answers either: pass the URL exactly as the provider documents it"
    return f"the endpoint answered 404 Not Found for {called}: {fix}"


def base_url_candidates(base_url: str) -> list[str]:
    """Base URLs near a wrong one, closest first: with /v1 added, then each shorter path with and without
    /v1 (http://h:8000/api/v1 -> .../api/v1/v1, .../api, http://h:8000/v1, http://h:8000). Pure."""
    parts = urlsplit(base_url)
    path = parts.path.rstrip("/")
    segments = [s for s in path.split("/") if s]
    paths = [f"{path}/v1"]
    for n in range(len(segments) - 1, -1, -1):
        prefix = "/" + "/".join(segments[:n]) if n else ""
        paths += [f"{prefix}/v1", prefix]
    out = []
    for p in dict.fromkeys(paths):
        if p != path:
            out.append(urlunsplit((parts.scheme, parts.netloc, p, parts.query, "")))
    return out
