"""The one line that says what an API error means and what to check (the status, what the
server said, the setting to look at)."""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from minimal_agent.common.errors import without_key
from minimal_agent.common.text import one_line
from minimal_agent.core.context_window import OVERFLOW
from minimal_agent.core.models import retirement


def describe_api_error(
    error: Exception,
    config: dict,
    *,
    model: str | None = None,
    timeout: float | None = None,
    save: str | None = None,
    sent: dict | None = None,
) -> str | None:
    """One line that says what went wrong and what to check; None if it is no API error.
    sent: what the request added to model, tools and messages (Session.limits)."""
    if type(error).__module__.split(".")[0] != "openai":
        return None  # and no need to import openai (it may be the missing package)
    import openai  # here: only an error of openai's own gets this far

    url = config.get("base_url", "the server")
    if isinstance(error, openai.APITimeoutError):  # a subclass of APIConnectionError
        silence = f"{timeout:g} s" if timeout else "the time-out"
        message = (
            f"the request to {url} timed out: the server sent nothing for {silence} in each of "
            "the SDK's attempts; check that it is running and not overloaded, or allow it longer "
            "with --request-timeout SECONDS"
        )
    elif isinstance(error, openai.APIConnectionError):
        message = f"could not connect to {url}: check LLM_BASE_URL and that the server is running"
    elif isinstance(error, openai.APIStatusError):
        said = server_says(error, config.get("api_key"))
        hint = status_hint(error.status_code, said, config, model, save, sent or {})
        message = f"the server answered {error.status_code} ({said}): {hint}"
    elif isinstance(error, openai.APIError):
        message = f"{type(error).__name__}: {error}"
    else:
        return None
    return without_key(message, config.get("api_key"))


THINKING_SETTINGS = {"reasoning_effort": "LLM_EFFORT (or --effort)",
                     "thinking": "LLM_THINKING (or --thinking)"}  # fmt: skip


def status_hint(
    status: int, said: str, config: dict, model: str | None, save: str | None, sent: dict
) -> str:
    """What to do about an error status, read from what the server said where it is telling;
    sent: the request's parameters beyond model, tools and messages (Session.limits)."""
    url = config.get("base_url", "the server")
    said = said.lower()
    transcript = f"the transcript is in {save}" if save else "--save FILE keeps a transcript"
    if re.search(OVERFLOW, said, re.IGNORECASE) or "context window" in said:
        return (
            "the conversation is longer than the model accepts even after compacting it: "
            f"{transcript}; go on with a model or server with a larger context, or start anew"
        )
    if re.search(r"reasoning_content|tool_call|tool call|role 'tool'|tool message", said):
        return (
            "the server rejects the conversation the agent built: this is a bug in the agent; "
            f"please report it on the project's issue tracker (see the README); {transcript}"
        )
    parameters = {**sent, **sent.get("extra_body", {})}
    for parameter, setting in THINKING_SETTINGS.items():
        if status in (400, 422) and parameter in parameters and parameter in said:
            return f"this server does not take {parameter}: remove {setting}"
    if re.search(r"model not exist|model_not_found|unknown model|model \S+ not found", said):
        retired = retirement(model or "")
        if retired:
            return retired
        return f"the server does not know the model {model or ''}: check --model or LLM_MODEL"
    if status == 404:
        return url_hint(url)
    if status >= 500 and status not in (502, 503, 504):
        return (
            "the server rejects this request: it failed the same way on each of the SDK's "
            "attempts, so trying again will not help; its log may say why"
        )
    hints = {
        400: "check the model name (LLM_MODEL or --model)"
        if "model" in said
        else "the server refused this request: what it said may tell why",
        401: "check LLM_API_KEY" + (f" ({config['key_origin']})" if "key_origin" in config else ""),
        402: "the account's balance is used up: top it up with the provider",
        403: "the key is not allowed to do this: check LLM_API_KEY and LLM_MODEL",
        422: "the server rejected a parameter: check LLM_MODEL",
        429: "rate limited, even after the SDK's retries: wait a little and try again",
    }
    return hints.get(status, "the server failed, even after the SDK's retries: try again later")


def url_hint(url: str) -> str:
    """A 404: a local server's URL without /v1, or one that already ends in the endpoint."""
    path = urlsplit(url).path.rstrip("/")
    if path.endswith("/chat/completions"):
        base = url.rstrip("/").removesuffix("/chat/completions")
        base += "" if base.endswith("/v1") else "/v1"  # what local servers need, DeepSeek too
        return (
            "LLM_BASE_URL ends in /chat/completions, which the SDK adds itself, so the path was "
            f"doubled: set LLM_BASE_URL={base}"
        )
    if not path.endswith("/v1"):
        return (
            f"LLM_BASE_URL ({url}) does not end in /v1, which local servers need: try "
            f"LLM_BASE_URL={url.rstrip('/')}/v1"
        )
    return f"check LLM_BASE_URL ({url}) and LLM_MODEL"


def server_says(error, key: str | None) -> str:
    """What the server said in an error's body (its message, where it has one), on one line,
    the key removed."""
    body = error.body
    if isinstance(body, dict):
        body = body.get("error", body)
        body = body.get("message", body) if isinstance(body, dict) else body
    return one_line(without_key(str(body if body is not None else error.message), key), 200)
