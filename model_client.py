"""Where the agent's model comes from: configuration, `create_client()`, `complete()` (one
request, streamed or not), and the replay client.

`openai` and `python-dotenv` are imported inside the functions that need them, so that
`python agent.py --help` starts without paying for them.
"""

from __future__ import annotations

import codecs
import json
import os
import sys
from types import SimpleNamespace

CONFIG_FILE = os.path.join(os.path.dirname(os.path.realpath(__file__)), "config.env")
DEFAULT_BASE_URL = "https://api.deepseek.com"
MODEL = "deepseek-flash"  # the lesson's model; LLM_MODEL overrides it
REQUEST_TIMEOUT = 120.0  # seconds without a byte from the server before an attempt gives up
SETTINGS = (  # every setting the agent reads, for the misspelling check
    "LLM_API_KEY", "LLM_BASE_URL", "LLM_MODEL", "LLM_MAX_TOKENS", "LLM_CURRENCY", "LLM_MAX_COST",
    "LLM_PRICE_INPUT", "LLM_PRICE_CACHED_INPUT", "LLM_PRICE_OUTPUT", "LLM_SESSIONS_DIR",
    "LLM_CONTEXT_TOKENS", "LLM_COMPACT_AT", "LLM_PASS_ENV",
)  # fmt: skip
CUT_OFF = ("length", "content_filter", "insufficient_system_resource")  # finish reasons
REASONING_FIELDS = ("reasoning_content", "reasoning")  # DeepSeek's name; vLLM's and Ollama's


class AgentError(Exception):
    """A problem the user can act on (a setting, a file, a reply); the message says what."""


def load_config() -> dict[str, str]:
    """Read config.env beside this file (real environment variables win) and return the settings."""
    file = config_file_settings()

    def setting(name: str) -> str:
        return (os.environ[name] if name in os.environ else file.get(name) or "").strip()

    return {
        **{name: setting(name) for name in SETTINGS[4:]},  # LLM_CURRENCY and on, by their names
        "api_key": setting("LLM_API_KEY"),
        "base_url": setting("LLM_BASE_URL") or DEFAULT_BASE_URL,
        "model": setting("LLM_MODEL") or MODEL,
        "max_tokens": setting("LLM_MAX_TOKENS"),
    }


def client_and_model(client=None, model: str | None = None) -> tuple:
    """The client and model given, and what is missing from config.env and the environment."""
    config = load_config()
    return client or create_client(config), model or config["model"]


def config_file_settings() -> dict[str, str | None]:
    """The variables config.env sets ({} if there is none); it must be UTF-8 text.

    Read, not loaded into os.environ, which run_shell's commands inherit (less the key and every
    secret-looking name: processes.command_environment).
    """
    try:
        with open(CONFIG_FILE, "rb") as file:
            data = file.read()
    except FileNotFoundError:
        return {}
    except OSError as error:
        raise AgentError(f"cannot read {CONFIG_FILE}: {error.strerror}") from None
    if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)) or b"\0" in data:
        raise AgentError(
            f'{CONFIG_FILE} is saved as UTF-16 (Notepad calls it "Unicode"): save it as UTF-8'
        )
    try:
        text = data.decode("utf-8-sig")  # Notepad's "UTF-8 with BOM" is fine too
    except UnicodeDecodeError as error:
        line = data[: error.start].count(b"\n") + 1
        raise AgentError(
            f"{CONFIG_FILE} is not UTF-8 text (byte 0x{data[error.start]:02x} on line {line}): "
            "save it as UTF-8"
        ) from None
    import io

    from dotenv import dotenv_values
    from dotenv.parser import parse_stream

    # A line dotenv cannot read would be skipped with a warning, and its setting lost.
    for binding in parse_stream(io.StringIO(text)):
        if binding.error or (binding.key and binding.value is None):
            raise AgentError(
                f"{CONFIG_FILE} line {binding.original.line} is not a setting: write each one as "
                "NAME=value on one line (such as LLM_API_KEY=sk-...), or start a comment with #"
            )
    return dotenv_values(stream=io.StringIO(text))


def setting_origin(name: str) -> str:
    """Where a setting's value came from, in words, for error messages."""
    if name in os.environ:
        return "set in the environment, which wins over config.env"
    return f"set in {CONFIG_FILE}"


def near_miss(setting: str, file_names: list[str]) -> str | None:
    """A name in config.env or the environment that looks like a misspelling of setting."""
    # OPENAI_API_KEY in the environment belongs to other tools; in config.env it is a mistake.
    names = file_names + [name for name in os.environ if not name.startswith("OPENAI_")]
    tail = setting.split("_", 1)[1]
    for name in dict.fromkeys(names):
        if name in SETTINGS:
            continue
        aliases = (f"DEEPSEEK_{tail}", f"OPENAI_{tail}")
        if squash(name) == squash(setting) or name.upper() in aliases:
            return name
        if squash(name).startswith("LLM") and closest_setting(name) == setting:
            return name
    return None


def squash(name: str) -> str:
    return "".join(c for c in name.upper() if c.isalnum())


def closest_setting(name: str) -> str | None:
    import difflib

    scores = {s: difflib.SequenceMatcher(None, squash(name), squash(s)).ratio() for s in SETTINGS}
    best = max(scores, key=scores.__getitem__)
    return best if scores[best] >= 0.75 else None


def check_settings(config: dict[str, str]) -> None:
    """Refuse settings that cannot work before any request; warn of likely misspellings."""
    file = config_file_settings()
    names = list(file)
    if not config["api_key"]:
        where = f"read {CONFIG_FILE}" if os.path.exists(CONFIG_FILE) else f"found no {CONFIG_FILE}"
        miss = near_miss("LLM_API_KEY", names)
        place = "in config.env" if miss in names else "in the environment"
        seen = f"; {miss} is set {place}, but the name is LLM_API_KEY" if miss else ""
        raise AgentError(
            f"LLM_API_KEY is not set ({where}{seen}): put your key after LLM_API_KEY= in "
            "config.env (copy config.example.env), or set it in the environment"
        )
    if config["api_key"].lower().startswith("bearer "):
        raise AgentError(
            'LLM_API_KEY starts with "Bearer": put only the key itself after LLM_API_KEY= '
            '(the agent adds "Bearer " when it sends it)'
        )
    for name, value in (("LLM_API_KEY", config["api_key"]), ("LLM_BASE_URL", config["base_url"])):
        problem = odd_character(value, ascii_only=name == "LLM_API_KEY")
        if problem:
            raise AgentError(
                f"{name} contains {problem}: paste it again without quotes or spaces "
                f"({setting_origin(name)})"
            )
    problem = odd_character(config["model"], invisible_only=True)
    if problem:  # it could not even be sent (a surrogate), or it hides what it is
        raise AgentError(f"LLM_MODEL contains {problem}: write the name the server knows")
    from urllib.parse import urlsplit

    url = config["base_url"]
    if not url.startswith(("http://", "https://")):
        raise AgentError(f"LLM_BASE_URL must start with http:// or https://, not {url!r}")
    try:
        valid = bool(urlsplit(url).hostname) and urlsplit(url).port != 0
    except ValueError:  # a port that is no number, a broken [IPv6] address
        valid = False
    if not valid:
        raise AgentError(f"LLM_BASE_URL {url!r} is not a URL like http://localhost:8080/v1")
    for setting, key in (("LLM_BASE_URL", "base_url"), ("LLM_MODEL", "model")):
        miss = near_miss(setting, names)
        if miss and setting not in os.environ and not file.get(setting):
            print(
                f"warning: {miss} is set but not read (the name is {setting}); using "
                f"{setting}={config[key]}",
                file=sys.stderr,
            )


def odd_character(text: str, ascii_only: bool = False, invisible_only: bool = False) -> str | None:
    """The first space, quote or invisible character in a setting, described, or None."""
    import unicodedata

    for position, char in enumerate(text, 1):
        odd = not char.isprintable() and char != " "
        if not invisible_only:
            odd = (
                odd
                or char.isspace()
                or char in "\"'`"
                or unicodedata.category(char) in ("Pi", "Pf")
            )
            odd = odd or (ascii_only and char > "~")
        if odd:
            name = unicodedata.name(char, "a control character")
            return f"U+{ord(char):04X} ({name.lower()}) at character {position}"
    return None


def create_client(
    config: dict[str, str] | None = None, timeout: float = REQUEST_TIMEOUT
):  # -> openai.OpenAI
    """An OpenAI SDK client for the configured server (DeepSeek unless LLM_BASE_URL is set).

    timeout bounds each attempt's wait for the server (the SDK's own default is 600 s, far too
    long to sit in front of a silent server); the SDK makes up to three attempts.
    """
    config = config or load_config()
    check_settings(config)
    from openai import Omit, OpenAI

    # Key and URL are passed explicitly so the SDK never falls back to OPENAI_API_KEY or
    # OPENAI_BASE_URL: a user's OpenAI key must not be sent to another provider. For the same
    # reason the headers the SDK would fill from OPENAI_ORG_ID and OPENAI_PROJECT_ID are dropped.
    openai_only = {"OpenAI-Organization": Omit(), "OpenAI-Project": Omit()}
    return OpenAI(
        api_key=config["api_key"],
        base_url=config["base_url"],
        default_headers=openai_only,
        timeout=timeout,
    )


def ask(client, messages: list[dict], request: dict, quirks: set[str], warn=print, show=None):
    """One chat completion: request holds model, tools and limits; returns a ChatCompletion.

    quirks is what this server turned out to need, kept by the caller for its whole run:
    "empty content" once Ollama has rejected content null (it wants "" instead).
    show: None for a plain request, else the reply is streamed to it (see complete()).
    """
    sent = with_empty_content(messages) if "empty content" in quirks else messages
    try:
        resp = complete(client, show, messages=sent, **request)
    except Exception as error:
        if "empty content" in quirks or "invalid message content type" not in str(error):
            raise
        quirks.add("empty content")
        warn('note: this server rejects content null; sending "" instead from now on')
        resp = complete(client, show, messages=with_empty_content(messages), **request)
    served = getattr(resp, "model", None)
    if served and not served.startswith(request["model"]) and "model" not in quirks:
        quirks.add("model")  # llama.cpp and LM Studio in single-model mode ignore the name
        warn(f"note: asked for model {request['model']}, the server answered as {served}")
    return resp


def with_empty_content(messages: list[dict]) -> list[dict]:
    """The messages with assistant content null sent as "" (Ollama's /v1 rejects null)."""
    return [
        {**m, "content": ""} if m["role"] == "assistant" and m.get("content") is None else m
        for m in messages
    ]


def complete(client, show=None, **request):  # -> openai.types.chat.ChatCompletion
    """Ask the model once and return its ChatCompletion, streamed or not.

    Without show, a plain `client.chat.completions.create(**request)`. With show, the reply is
    streamed: show("thinking", text) and show("text", text) get the reasoning and the content
    as they arrive, and the chunks are put together by the SDK's own accumulator into the
    ChatCompletion a plain request returns, so nothing after the request can tell the two apart.
    A reply that does not arrive whole raises AgentError: nothing of it is kept.
    """
    if show is None:
        return client.chat.completions.create(**request)
    import openai
    from openai.lib.streaming.chat import ChatCompletionStreamState
    from openai.types.chat import ChatCompletion

    state = ChatCompletionStreamState()
    calls: dict[int, list[dict]] = {}  # what each choice's tool calls have sent so far
    usage = None
    started = False
    stream = client.chat.completions.create(
        **request, stream=True, stream_options={"include_usage": True}
    )
    try:
        with stream:
            for chunk in stream:
                usage = chunk.usage or usage  # on the finish chunk, or in a chunk of its own
                if not chunk.choices:  # the usage-only last chunk, a content-filter note
                    continue
                mend(chunk, calls)
                show_delta(chunk.choices[0].delta, show)
                state.handle_chunk(chunk)
                started = True
    except openai.APITimeoutError:
        seconds = client.timeout if isinstance(client.timeout, (int, float)) else None
        after = f" for {seconds:g} s" if seconds else ""
        raise AgentError(
            f"the server sent nothing{after} in the middle of the reply, so it was given up "
            "(nothing of it was kept): try again, or raise --request-timeout"
        ) from None
    except openai.APIConnectionError:
        raise AgentError(BROKEN_STREAM.format(how="the connection broke")) from None
    except openai.APIStatusError:
        raise
    except openai.APIError as error:  # an {"error": ...} event in the stream
        said = without_key(" ".join(str(error.message).split())[:200], client.api_key)
        raise AgentError(
            f"the server reported an error in the middle of the reply ({said}); nothing of "
            "it was kept: try again later"
        ) from None
    snapshot = state.current_completion_snapshot if started else None
    if not snapshot or not snapshot.choices or not snapshot.choices[0].finish_reason:
        raise AgentError(BROKEN_STREAM.format(how="the stream ended"))
    # A plain ChatCompletion, without the SDK's parsed-output fields, as a plain request gives.
    parsed = {"parsed": True, "tool_calls": {"__all__": {"function": {"parsed_arguments"}}}}
    data = snapshot.model_dump(exclude={"choices": {"__all__": {"message": parsed}}})
    data["usage"] = usage and usage.model_dump()
    return ChatCompletion.construct(**data)


BROKEN_STREAM = (
    "the reply was cut off: {how} before the server finished it, so nothing of it was kept "
    "and none of its tool calls ran; try again"
)


def mend(chunk, calls: dict[int, list[dict]]) -> None:
    """Set a chunk's tool-call deltas right, in place, for the SDK's accumulator.

    Every fragment gets the index of its call: one without an index continues the current call
    unless it brings a new id (Gemini sends whole calls that way, old Ollama fragments). An id or
    name repeated on every fragment (some proxies) is passed on once, so it is not concatenated.
    calls holds each choice's calls so far ({"id", "name"} by index).
    """
    for choice in chunk.choices:
        known = calls.setdefault(choice.index, [])
        for fragment in choice.delta.tool_calls or []:
            new_id = fragment.id
            if not isinstance(getattr(fragment, "index", None), int):
                starts = not known or (new_id and new_id != known[-1]["id"])
                fragment.index = len(known) if starts else len(known) - 1
            while len(known) <= fragment.index:
                known.append({"id": None, "name": ""})
            call = known[fragment.index]
            if new_id and new_id == call["id"]:
                fragment.id = None  # None adds nothing to what the accumulator has
            elif new_id:
                call["id"] = new_id
            name = fragment.function and fragment.function.name
            if name and name == call["name"]:
                fragment.function.name = None
            elif name:
                call["name"] += name


def show_delta(delta, show) -> None:
    """Pass a delta's thinking and text on to show (reasoning_content, or vLLM's reasoning)."""
    extra = delta.model_extra or {}
    thinking = next((extra[field] for field in REASONING_FIELDS if extra.get(field)), None)
    if isinstance(thinking, str) and thinking:
        show("thinking", thinking)
    if delta.content:
        show("text", delta.content)


# --- Replies: what goes back in the history, whatever the server's habits ------------------


def assistant_message(msg, finish_reason: str | None, position: int) -> tuple[dict, dict]:
    """The assistant message to send back, built field by field (see docs/servers.md for why),
    and the calls that must not run: {call id: the tool message that says why}."""
    message: dict = {"role": "assistant", "content": msg.content or None}
    not_run: dict[str, str] = {}
    if msg.tool_calls:
        message["tool_calls"] = []
        for index, call in enumerate(msg.tool_calls):
            # Some servers send no id, or one id twice; every call needs its own for its answer.
            # Nine letters and digits: llama.cpp's Mistral templates accept no other shape.
            taken = {c["id"] for c in message["tool_calls"]}
            call_id = call.id if call.id and call.id not in taken else f"c{position:05}{index:03}"
            # Servers parse the history's arguments: anything but a JSON object is rejected
            # there (llama.cpp: 500 for that request and every later one), so it gets "{}".
            arguments, problem = checked_arguments(call.function.name, call.function.arguments)
            if finish_reason in CUT_OFF:  # quoted, so the model sees where it was cut off
                sent = short(repr(call.function.arguments), 120)
                problem = (
                    f"Error: your reply was cut off (finish_reason {finish_reason}) before this "
                    f"call was complete; you sent {sent}, so nothing was run; send the call again"
                )
            if problem:
                not_run[call_id] = problem
            function = {"name": call.function.name, "arguments": arguments}
            message["tool_calls"].append({"id": call_id, "type": "function", "function": function})
    # DeepSeek's thinking mode rejects a history whose tool-calling turns lost this, even "".
    # vLLM, Ollama and OpenRouter call it "reasoning": it goes back under the name it came with.
    for field in REASONING_FIELDS:
        if field in (msg.model_extra or {}):
            message[field] = msg.model_extra[field]
    return message, not_run


def checked_arguments(name: str, received: object) -> tuple[str, str | None]:
    """The arguments as valid JSON object text for the history, and why the call cannot run."""
    if isinstance(received, dict):  # some servers send an object instead of a string
        return json.dumps(received), None
    if not received:  # an empty string means {}
        return "{}", None
    try:
        parsed = json.loads(received)
    except (json.JSONDecodeError, TypeError) as error:
        problem = f"the arguments are not valid JSON ({error})"
    else:
        if isinstance(parsed, dict):
            return received, None  # exactly as received
        problem = f"{name} takes a JSON object of its arguments, not a JSON {json_kind(parsed)}"
    sent = short(repr(received), 120)
    return "{}", f"Error: {problem}; you sent {sent}, so nothing was run; send one JSON object"


def json_kind(value: object) -> str:
    kinds = {dict: "object", list: "array", str: "string", bool: "boolean", type(None): "null"}
    return kinds.get(type(value), "number")


def final_answer(msg, finish_reason: str | None) -> tuple[str, bool]:
    """The answer to print (without <think> blocks) and whether it is complete."""
    text = without_thinking(msg.content or "")
    if finish_reason in CUT_OFF:
        return text, False  # the cut-off warning is out already
    if not text.strip():
        print(
            "warning: the model's final reply has no answer text (only its reasoning, or nothing)",
            file=sys.stderr,
            flush=True,
        )
        return text, False
    return text, True


def without_thinking(text: str) -> str:
    """Content with <think>...</think> left out (some servers put the reasoning there; the
    opening tag may be missing). The history keeps the content exactly as received."""
    if "</think>" in text:
        return text.rsplit("</think>", 1)[1].lstrip()
    if text.lstrip().startswith("<think>"):
        return ""  # the reasoning never ended: there is no answer yet
    return text


def usage_counts(resp) -> dict[str, int]:
    """A reply's prompt, cache-hit and completion tokens; cache hits are DeepSeek's
    prompt_cache_hit_tokens, or the OpenAI-style cached_tokens where a server sends that."""
    usage = resp.usage
    if not usage:
        return {"prompt_tokens": 0, "cache_hit_tokens": 0, "completion_tokens": 0}
    extra = usage.model_extra or {}
    details = usage.prompt_tokens_details
    cached = extra.get("prompt_cache_hit_tokens", details and details.cached_tokens)
    return {
        "prompt_tokens": usage.prompt_tokens or 0,
        "cache_hit_tokens": cached or 0,
        "completion_tokens": usage.completion_tokens or 0,
    }


def short(text: object, width: int = 100) -> str:
    """text on one line, shortened to width with "..." (the display's one_line, which also
    shows control characters as escapes)."""
    from minimal_agent.display import one_line

    return one_line(text, width)


# --- Errors: one line that says what went wrong and what to check ---------------------------


def describe_api_error(
    error: Exception,
    config: dict,
    *,
    model: str | None = None,
    timeout: float | None = None,
    save: str | None = None,
) -> str | None:
    """One line that says what went wrong and what to check; None if it is no API error."""
    if type(error).__module__.split(".")[0] != "openai":
        return None  # and no need to import openai (it may be the missing package)
    import openai

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
        said = server_says(error)
        hint = status_hint(error.status_code, said, url, model, save)
        message = f"the server answered {error.status_code} ({said}): {hint}"
    elif isinstance(error, openai.APIError):
        message = f"{type(error).__name__}: {error}"
    else:
        return None
    return without_key(message, config.get("api_key"))


def without_key(text: str, key: str | None) -> str:
    """text with the API key replaced by ***; a short one ("x", "ollama") is no secret and
    replacing it would mangle words."""
    return text.replace(key, "***") if key and len(key) >= 8 else text


def status_hint(status: int, said: str, url: str, model: str | None, save: str | None) -> str:
    """What to do about an error status, read from what the server said where it is telling."""
    import re

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
    if re.search(r"model not exist|model_not_found|unknown model|model \S+ not found", said):
        return f"the server does not know the model {model or ''}: check --model or LLM_MODEL"
    if status == 404:
        return url_hint(url)
    if status >= 500 and status not in (502, 503, 504):
        return (
            "the server rejects this request: it failed the same way on each of the SDK's "
            "attempts, so trying again will not help; its log may say why"
        )
    hints = {
        400: "check the model name (LLM_MODEL or --model)",
        401: f"check LLM_API_KEY ({setting_origin('LLM_API_KEY')})",
        402: "the account's balance is used up: top it up with the provider",
        403: "the key is not allowed to do this: check LLM_API_KEY and LLM_MODEL",
        422: "the server rejected a parameter: check LLM_MODEL",
        429: "rate limited, even after the SDK's retries: wait a little and try again",
    }
    return hints.get(status, "the server failed, even after the SDK's retries: try again later")


def url_hint(url: str) -> str:
    """A 404: a local server's URL without /v1, or one that already ends in the endpoint."""
    from urllib.parse import urlsplit

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


def server_says(error) -> str:
    body = error.body
    if isinstance(body, dict):
        body = body.get("error", body)
        body = body.get("message", body) if isinstance(body, dict) else body
    return short(str(body if body is not None else error.message), 200)


KNOWN_WINDOWS = {  # tokens; DeepSeek's API docs, "Models & Pricing"
    "deepseek-flash": 1_048_576,
    "deepseek-v4-pro": 1_048_576,
    "deepseek-v4-flash": 1_048_576,
}
PROBE_SECONDS = 2.0  # asking a server for its context window, all endpoints together


# --- The context window: how large the server's is, and whether it said it is full ---------


def find_window(settings: dict, *, timeout: float = PROBE_SECONDS):  # -> () -> int | None
    """A function that returns the window in tokens, or None if unknown.

    settings: "context_tokens" (LLM_CONTEXT_TOKENS, text or number), "base_url", "model",
    "api_key". LLM_CONTEXT_TOKENS wins; DeepSeek's own API is not asked (its models are in the
    table); any other server is asked at once, in a background thread, and the function waits
    for the rest of the timeout at most, then falls back on the table. Raises only ValueError,
    at once, for an LLM_CONTEXT_TOKENS that is not a number.
    """
    from minimal_agent.context_window import context_tokens_setting

    tokens = context_tokens_setting(settings.get("context_tokens"))
    model = settings.get("model") or ""
    known = KNOWN_WINDOWS.get(model)
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
    import threading
    import time

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
    import time

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
    import urllib.request
    from urllib.parse import urlsplit

    headers = {"Accept": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    data = None
    if body is not None:
        data = json.dumps(body).encode("utf-8")
        headers["Content-Type"] = "application/json"
    request = urllib.request.Request(url, data=data, headers=headers)
    host = urlsplit(url).hostname or ""
    # No proxy for this machine's own servers (the SDK's proxy settings need not be urllib's).
    handlers = [urllib.request.ProxyHandler({})] if is_loopback(host) else []
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
        import re

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


def whole(value: object) -> int | None:
    """value if it is a whole number of tokens above 0, else None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return int(value) if value >= 1 and value == int(value) else None


def api_root(base_url: str) -> str:
    """LLM_BASE_URL without a trailing slash and /v1: where a server's own endpoints are."""
    base = base_url.rstrip("/")
    return base.removesuffix("/v1")


def is_deepseek(base_url: str) -> bool:
    from urllib.parse import urlsplit

    host = (urlsplit(base_url).hostname or "").lower()
    return host == "deepseek.com" or host.endswith(".deepseek.com")


def is_loopback(host: str) -> bool:
    return host in ("localhost", "::1") or host.startswith("127.")


# --- A full context ---------------------------------------------------------------------------

OVERFLOW = (  # what a server says when the conversation does not fit its context window
    r"maximum context length is"  # DeepSeek, vLLM (and OpenAI)
    r"|exceed_context_size_error|exceeds the available context size"  # llama.cpp
    r"|prompt is longer than the context length"  # Ollama with context shift off
    r"|context_length_exceeded"  # OpenAI's code
)


def is_context_overflow(error: object) -> bool:
    """Whether an API error (openai.APIStatusError, or anything with status_code, body or
    message) says the conversation does not fit the model's context window."""
    status = getattr(error, "status_code", None)
    if isinstance(status, int) and status < 400:
        return False
    import re

    return re.search(OVERFLOW, error_text(error), re.IGNORECASE) is not None


def window_in_error(error: object) -> int | None:
    """The window an overflow error names (DeepSeek, vLLM: "maximum context length is N";
    llama.cpp: n_ctx), or None (Ollama names none)."""
    body = getattr(error, "body", None)
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and whole(inner.get("n_ctx")):
            return whole(inner["n_ctx"])
    import re

    text = error_text(error)
    match = re.search(r"maximum context length is (\d+)|context size \((\d+) tokens\)", text)
    return whole(int(match.group(1) or match.group(2))) if match else None


def error_text(error: object) -> str:
    parts = [str(getattr(error, "message", "") or "")]
    body = getattr(error, "body", None)
    if body is not None:
        parts.append(body if isinstance(body, str) else json.dumps(body, default=str))
    parts.append(str(error))
    return "\n".join(parts)


def recorded_summary(entry: dict) -> str | None:
    """The model's summary a transcript's compaction record was made with, or None (no such
    record, or one that shortened tool results only)."""
    from minimal_agent.context_window import SUMMARY_HEADING

    if entry.get("event") != "compaction" or entry.get("kind") != "summary":
        return None
    for message in entry.get("messages") or []:
        if not isinstance(message, dict) or message.get("role") != "user":
            continue
        content = message.get("content")
        if isinstance(content, str) and content.startswith(SUMMARY_HEADING):
            return content.split(":\n\n", 1)[-1]  # after the heading's own line
    return None


class ReplayClient:
    """Stands in for the OpenAI client: serves a transcript's assistant messages, in order.

    `client.chat.completions.create(...)` returns a real `ChatCompletion`, so the loop cannot
    tell the difference; no network, no key. When a tool result sent differs from the recorded
    one, notify is told once: the recorded replies that follow were written for another result.
    """

    def __init__(self, path: str | os.PathLike, notify=None) -> None:
        self.path = path
        from minimal_agent.transcripts import transcript_lines

        entries = transcript_lines(path)
        lines = [(n, entry) for n, entry in entries if "event" not in entry]
        self.messages = [message for _, message in lines]
        # A compaction's summary request (no tools) gets the summary the run got, never the
        # next recorded reply, which belongs to the conversation.
        self.summaries = [
            text for _, entry in entries if (text := recorded_summary(entry)) is not None
        ]
        self.replies = [(n, m) for n, m in lines if m["role"] == "assistant"]
        if not self.replies:
            raise AgentError(f"{path} has no assistant messages to replay")
        # The tool results recorded after each reply, to compare with the ones the run sends.
        self.recorded_results: list[list[str]] = []
        for message in self.messages:
            if message["role"] == "assistant":
                self.recorded_results.append([])
            elif message["role"] == "tool" and self.recorded_results:
                self.recorded_results[-1].append(message["content"])
        self.notify = notify or (lambda text: print(text, file=sys.stderr, flush=True))
        self.on_recorded_path = True
        self.served = 0
        self.chat = SimpleNamespace(completions=SimpleNamespace(create=self.create))

    def task(self) -> str | None:
        """The transcript's first user message: the task it was recorded with."""
        return next((m["content"] for m in self.messages if m["role"] == "user"), None)

    def create(self, **request):  # -> openai.types.chat.ChatCompletion
        from openai.types.chat import ChatCompletion
        from pydantic import ValidationError

        if not request.get("tools"):  # a compaction's summary
            if not self.summaries:
                raise AgentError("the transcript has no more summaries of the conversation")
            summary = {"role": "assistant", "content": self.summaries.pop(0)}
            choice = {"index": 0, "message": summary, "finish_reason": "stop"}
            return ChatCompletion.model_validate(
                {"id": "replay-summary", "object": "chat.completion", "created": 0,
                 "model": request.get("model", "replay"), "choices": [choice]}
            )  # fmt: skip
        if self.served == len(self.replies):
            raise AgentError(
                f"the transcript has no more replies after its {self.served} assistant messages"
            )
        self.check_path(request.get("messages") or [])
        number, message = self.replies[self.served]
        self.served += 1
        try:
            return ChatCompletion.model_validate(
                {
                    "id": f"replay-{self.served}",
                    "object": "chat.completion",
                    "created": 0,
                    "model": request.get("model", "replay"),
                    "choices": [
                        {
                            "index": 0,
                            "message": message,
                            "finish_reason": "tool_calls" if message.get("tool_calls") else "stop",
                        }
                    ],
                }
            )
        except ValidationError as error:  # a field the agent does not write, hand-edited
            problem = error.errors()[0]
            field = ".".join(str(part) for part in problem["loc"][3:]) or "message"
            raise AgentError(
                f"{self.path} line {number} cannot be replayed: {field}: {problem['msg']}"
            ) from None

    def check_path(self, messages: list[dict]) -> None:
        """Say once when the tool results sent are not the ones recorded after the last reply."""
        if not (self.on_recorded_path and self.served):
            return
        sent = []
        for message in reversed(messages):
            if message.get("role") != "tool":
                break
            sent.insert(0, message.get("content"))
        recorded = self.recorded_results[self.served - 1]
        # A result the replay's own compaction turned into a note is no difference in the run.
        from minimal_agent.context_window import ELIDED

        if len(sent) != len(recorded) or any(
            now != then and not str(now).startswith(ELIDED)
            for now, then in zip(sent, recorded, strict=True)
        ):
            self.on_recorded_path = False
            self.notify(
                f"note: the run has left the recorded path: a tool result differs from the one "
                f"in {self.path}, so the recorded replies from here on may not fit"
            )
