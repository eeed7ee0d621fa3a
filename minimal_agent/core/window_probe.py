"""How large the server's context window is: LLM_CONTEXT_TOKENS, the table of known models, or
the server's own endpoints (llama.cpp, Ollama, vLLM, LM Studio), asked in a background thread
while the agent starts."""

from __future__ import annotations

import json
import re
import time
from urllib.parse import urlsplit

from minimal_agent.core import models
from minimal_agent.core.context_window import context_tokens_setting, whole

PROBE_SECONDS = 2.0  # asking a server for its context window, all endpoints together


def find_window(settings: dict, *, timeout: float = PROBE_SECONDS):  # -> () -> int | None
    """A function that returns the window in tokens, or None if unknown.

    settings: "context_tokens" (LLM_CONTEXT_TOKENS, text or number), "base_url", "model",
    "api_key". LLM_CONTEXT_TOKENS wins; DeepSeek's own API is not asked (its models are in the
    table); any other server is asked at once, in a background thread, and the function waits
    for the rest of the timeout at most, then falls back on the table. Raises only ValueError,
    at once, for an LLM_CONTEXT_TOKENS that is not a number.
    """
    tokens = context_tokens_setting(settings.get("context_tokens"))
    model = settings.get("model") or ""
    known = models.window(model)
    base_url = settings.get("base_url") or ""
    if tokens:
        return lambda: tokens
    if not base_url or is_deepseek(base_url):
        return lambda: known
    probe = start_probe(base_url, model, settings.get("api_key"), timeout=timeout)
    return lambda: probe() or known


def start_probe(
    base_url: str, model: str, api_key: str | None = None, *, timeout: float = PROBE_SECONDS
):  # -> () -> int | None
    """Ask the server for the window in a background thread; the function returned waits for
    its answer until timeout seconds after the start at most, then returns it (or None)."""
    import threading  # here, as in display.py and processes.py: --help starts without it

    deadline = time.monotonic() + timeout
    answer: list[int | None] = []

    def ask() -> None:
        answer.append(probe_window(base_url, model, api_key, timeout=timeout))

    thread = threading.Thread(target=ask, name="context window probe", daemon=True)
    thread.start()

    def collect() -> int | None:
        thread.join(max(0.0, deadline - time.monotonic()) + 0.05)
        return answer[0] if answer else None

    return collect


def probe_window(
    base_url: str, model: str, api_key: str | None = None, *, timeout: float = PROBE_SECONDS
) -> int | None:
    """The window the server reports, asking each kind of server's endpoint in turn until one
    answers, all within timeout seconds; None when none does. Never raises."""
    try:
        base = base_url.rstrip("/")
        root = api_root(base_url)
        probes = (  # the endpoint, what is sent, how the window is read from the answer
            (f"{root}/props", None, window_from_props),  # llama.cpp
            (f"{root}/api/show", {"model": model}, window_from_show),  # Ollama
            (f"{base}/models", None, window_from_models),  # vLLM
            (f"{root}/api/v0/models", None, window_from_lmstudio),  # LM Studio
        )
        deadline = time.monotonic() + timeout
        for url, body, read in probes:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            data = fetch_json(url, body, api_key, left)
            window = read(data, model) if data is not None else None
            if window:
                return window
    except Exception:  # never fail the run for a missing nicety
        return None
    return None


def fetch_json(url: str, body: dict | None, api_key: str | None, timeout: float) -> object:
    """The JSON a GET (or, with a body, a POST) answers with status 200, or None."""
    headers = {"Accept": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    data = None
    if body is not None:
        data = json.dumps(body).encode("utf-8")
        headers["Content-Type"] = "application/json"
    import urllib.request  # here: its 40 ms of imports (http, email, ssl) would slow --help

    class SameOriginRedirects(urllib.request.HTTPRedirectHandler):
        """urllib's own handler copies every header, the key too, to wherever a redirect
        leads: one to another origin is not followed (the probe then has no answer)."""

        def redirect_request(self, request, fp, code, msg, headers, new_url):
            if origin(new_url) != origin(request.full_url):
                return None
            return super().redirect_request(request, fp, code, msg, headers, new_url)

    request = urllib.request.Request(url, data=data, headers=headers)
    host = urlsplit(url).hostname or ""
    handlers = [SameOriginRedirects()]
    if is_loopback(host):  # no proxy for this machine's own servers (the SDK's proxy settings
        handlers.append(urllib.request.ProxyHandler({}))  # need not be urllib's)
    try:
        with urllib.request.build_opener(*handlers).open(request, timeout=timeout) as response:
            if response.status != 200:
                return None
            return json.loads(response.read(8_000_000))
    except Exception:  # no such endpoint, no server, a time-out, not JSON: no answer
        return None


def window_from_props(data: object, model: str = "") -> int | None:
    """llama.cpp's GET /props: default_generation_settings.n_ctx (per slot)."""
    if not isinstance(data, dict):
        return None
    settings = data.get("default_generation_settings")
    found = settings.get("n_ctx") if isinstance(settings, dict) else None
    return whole(found if found is not None else data.get("n_ctx"))


def window_from_show(data: object, model: str = "") -> int | None:
    """Ollama's POST /api/show: num_ctx in its parameters text if the model sets one, else the
    trained length, model_info["<architecture>.context_length"]."""
    if not isinstance(data, dict):
        return None
    parameters = data.get("parameters")
    if isinstance(parameters, str):
        match = re.search(r"^\s*num_ctx\s+(\d+)\s*$", parameters, re.MULTILINE)
        if match:
            return whole(int(match.group(1)))
    info = data.get("model_info")
    if not isinstance(info, dict):
        return None
    architecture = info.get("general.architecture")
    if f"{architecture}.context_length" in info:
        return whole(info[f"{architecture}.context_length"])
    lengths = [value for key, value in info.items() if key.endswith(".context_length")]
    return whole(lengths[0]) if len(lengths) == 1 else None


def window_from_models(data: object, model: str = "") -> int | None:
    """vLLM's GET /v1/models: the model's max_model_len."""
    entry = model_entry(data, model)
    return whole(entry.get("max_model_len")) if entry else None


def window_from_lmstudio(data: object, model: str = "") -> int | None:
    """LM Studio's GET /api/v0/models: loaded_context_length of the model (what it was loaded
    with), else max_context_length."""
    entry = model_entry(data, model)
    if not entry:
        return None
    return whole(entry.get("loaded_context_length")) or whole(entry.get("max_context_length"))


def model_entry(data: object, model: str) -> dict | None:
    """The entry of a model list ({"data": [...]}) for model: the one with its id, else the
    only one (a server that serves one model under its own name)."""
    entries = data.get("data") if isinstance(data, dict) else None
    if not isinstance(entries, list):
        return None
    entries = [entry for entry in entries if isinstance(entry, dict)]
    named = [entry for entry in entries if entry.get("id") == model]
    if named:
        return named[0]
    return entries[0] if len(entries) == 1 else None


def api_root(base_url: str) -> str:
    """LLM_BASE_URL without a trailing slash and /v1: where a server's own endpoints are."""
    base = base_url.rstrip("/")
    return base.removesuffix("/v1")


def is_deepseek(base_url: str) -> bool:
    host = (urlsplit(base_url).hostname or "").lower()
    return host == "deepseek.com" or host.endswith(".deepseek.com")


def origin(url: str) -> tuple[str, str, int | None]:
    """A URL's scheme, host and port (the default port of its scheme if it names none)."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    port = parts.port or {"http": 80, "https": 443}.get(scheme)
    return scheme, (parts.hostname or "").lower(), port


def is_loopback(host: str) -> bool:
    return host in ("localhost", "::1") or host.startswith("127.")
