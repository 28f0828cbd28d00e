"""The line and exit code for a run stopped by a refusal before any request succeeded (breaker's
EndpointRefused): a refusal that only a different setting can fix (a URL with no chat completions, a
model the server does not serve) is a configuration error, exit 2; any other stays exit 3."""

from __future__ import annotations

from evaluator.core.boundary import clip, one_line
from evaluator.core.exitcode import ExitCode
from evaluator.evaluation.reachability import answering_base_urls, served_models
from evaluator.request.breaker import EndpointRefused, wrong_path
from evaluator.request.endpoint import chat_url, not_found_hint

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
