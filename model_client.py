"""Where the agent's model comes from: configuration, `create_client()`, `complete()` (one
request, streamed or not), and the replay client.

`openai` and `python-dotenv` are imported inside the functions that need them, so that
`python agent.py --help` starts without paying for them.
"""

from __future__ import annotations

import codecs
import difflib
import io
import json
import os
import sys
import unicodedata
from types import SimpleNamespace
from urllib.parse import urlsplit

CONFIG_FILE = os.path.join(os.path.dirname(os.path.realpath(__file__)), "config.env")
DEFAULT_BASE_URL = "https://api.deepseek.com"
MODEL = "deepseek-flash"  # the lesson's model; LLM_MODEL overrides it
REQUEST_TIMEOUT = 120.0  # seconds without a byte from the server before an attempt gives up
SETTINGS = ("LLM_API_KEY", "LLM_BASE_URL", "LLM_MODEL", "LLM_MAX_TOKENS")
ROLES = ("system", "user", "assistant", "tool")


class AgentError(Exception):
    """A problem the user can act on (a setting, a file, a reply); the message says what."""


def load_config() -> dict[str, str]:
    """Read config.env beside this file (real environment variables win) and return the settings."""
    file = config_file_settings()

    def setting(name: str) -> str:
        return (os.environ[name] if name in os.environ else file.get(name) or "").strip()

    return {
        "api_key": setting("LLM_API_KEY"),
        "base_url": setting("LLM_BASE_URL") or DEFAULT_BASE_URL,
        "model": setting("LLM_MODEL") or MODEL,
        "max_tokens": setting("LLM_MAX_TOKENS"),
    }


def config_file_settings() -> dict[str, str | None]:
    """The variables config.env sets ({} if there is none); it must be UTF-8 text.

    Read, not loaded into os.environ, so the commands run_shell runs never see the key.
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
        warn("note: this server rejects content null; sending \"\" instead from now on")
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
        said = " ".join(str(error.message).split())[:200]
        if len(client.api_key or "") >= 8:
            said = said.replace(client.api_key, "***")
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
    thinking = extra.get("reasoning_content") or extra.get("reasoning")
    if isinstance(thinking, str) and thinking:
        show("thinking", thinking)
    if delta.content:
        show("text", delta.content)


def read_transcript(path: str | os.PathLike, *, tolerant: bool = False) -> list[dict]:
    """The messages of a transcript saved with --save (JSON Lines, one message a line).

    A line that is not a message in the shape the agent writes is refused, naming the line.
    tolerant (for --show): a last line that is not JSON and has no line end, as a crash while
    writing it leaves one, becomes {"cut_off": its text, "line": its number} instead.
    """
    return [message for _, message in transcript_lines(path, tolerant)]


def transcript_lines(path: str | os.PathLike, tolerant: bool = False) -> list[tuple[int, dict]]:
    """(line number, message) for each message of a transcript; see read_transcript()."""
    try:
        with open(path, "rb") as file:
            lines = [(n, line) for n, line in enumerate(file, 1) if line.strip()]
    except OSError as error:
        raise AgentError(f"cannot read {path}: {error.strerror}") from None
    messages = []
    for number, line in lines:
        try:
            message = json.loads(line.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as error:
            half_written = number == lines[-1][0] and not line.endswith(b"\n")  # a crash
            if half_written and tolerant:
                messages.append(
                    (number, {"cut_off": line.decode("utf-8", "replace"), "line": number})
                )
                break
            if half_written:
                raise AgentError(
                    f"{path} line {number} was only partly written (is not JSON and has no line "
                    "end): --show shows the rest; delete that line to use the file"
                ) from None
            what = "not UTF-8 text" if isinstance(error, UnicodeDecodeError) else "not JSON"
            detail = f" ({error.msg}: column {error.colno})" if what == "not JSON" else ""
            raise AgentError(
                f"{path} line {number} is {what}{detail}: is it a transcript saved with --save?"
            ) from None
        problem = message_problem(message)
        if problem:
            raise AgentError(f"{path} line {number} {problem}")
        messages.append((number, message))
    return messages


def check_conversation(messages: list[dict], path: str | os.PathLike) -> None:
    """Raise AgentError, naming the line, at the first message a server would reject for where
    it stands: an unknown role, a system message after the first, a tool message that does not
    answer the next open call, a message before the open calls are answered. Calls still open at
    the end are allowed: that turn was cut short (Ctrl-C, a crash), and continuing answers them.
    """
    with open(path, "rb") as file:
        data = file.read()
    # One message per non-blank line, as read_transcript reads them.
    lines = [n for n, line in enumerate(data.split(b"\n"), 1) if line.strip()]
    if not messages:
        raise AgentError(f"{path} has no messages, so there is no conversation to continue")
    if not data.rstrip(b" \t").endswith(b"\n"):  # appending would join two lines into one
        raise AgentError(
            f"{path} line {lines[-1]} has no line end, so the file looks cut off: check its "
            "end (add the newline if that line is complete)"
        )
    open_calls: list = []
    for index, (number, message) in enumerate(zip(lines, messages, strict=False)):
        role, answers = message["role"], message.get("tool_call_id")
        calls = message.get("tool_calls") or [] if role == "assistant" else []
        listed = calls if isinstance(calls, list) else [None]  # not a list: no ids at all
        ids = [call.get("id") if isinstance(call, dict) else None for call in listed]
        if role not in ROLES:
            problem = f"has the role {role!r}; a transcript has only {', '.join(ROLES)}"
        elif role == "system" and index > 0:
            problem = "is a system message, but only the first message may be one"
        elif role == "tool" and not open_calls:
            problem = f"is a tool message answering {answers!r}, but no tool call waits for one"
        elif role == "tool" and answers != open_calls[0]:
            problem = f"is a tool message answering {answers!r}, but call {open_calls[0]!r} is next"
        elif role != "tool" and open_calls:
            problem = f"is a {role} message, but the tool calls {open_calls} have no answer yet"
        elif not all(isinstance(call_id, str) and call_id for call_id in ids):
            problem = "has tool calls without an id each"
        elif len(set(ids)) < len(ids):
            problem = f"has the same tool call id twice: {ids}"
        else:
            open_calls = open_calls[1:] if role == "tool" else ids
            continue
        raise AgentError(f"{path} line {number} {problem}")


def message_problem(message: object) -> str | None:
    """What keeps a parsed transcript line from being a message the agent can use, or None."""
    if not isinstance(message, dict):
        return f"is a JSON {json_kind(message)}, not a message object"
    role = message.get("role")
    if role not in ROLES:
        return f"has the role {json.dumps(role)}; a message's role is one of {', '.join(ROLES)}"
    text_fields = ["reasoning_content", "reasoning"] + (["content"] if role == "assistant" else [])
    for field in text_fields:
        if message.get(field) is not None and not isinstance(message[field], str):
            return f"has a {json_kind(message[field])} as its {field!r}, not a string"
    required = {"tool": ["content", "tool_call_id"], "assistant": []}.get(role, ["content"])
    for field in required:
        if not isinstance(message.get(field), str):
            return f"is a {role} message without a string {field!r}"
    calls = message.get("tool_calls")
    if calls is None:
        return None
    if role != "assistant":
        return f"is a {role} message with 'tool_calls'; only assistant messages have them"
    if not isinstance(calls, list):
        return f"has 'tool_calls' that are a JSON {json_kind(calls)}, not an array"
    for index, call in enumerate(calls, 1):
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict):
            return f"has tool call {index} without a 'function' object"
        if not isinstance(call.get("id"), str) or call.get("type") != "function":
            return f"has tool call {index} without a string 'id' and 'type' \"function\""
        for field in ("name", "arguments"):
            if not isinstance(function.get(field), str):
                return f"has tool call {index} without a string function {field!r}"
    return None


def json_kind(value: object) -> str:
    kinds = {dict: "object", list: "array", str: "string", bool: "boolean", type(None): "null"}
    return kinds.get(type(value), "number")


class ReplayClient:
    """Stands in for the OpenAI client: serves a transcript's assistant messages, in order.

    `client.chat.completions.create(...)` returns a real `ChatCompletion`, so the loop cannot
    tell the difference; no network, no key. When a tool result sent differs from the recorded
    one, notify is told once: the recorded replies that follow were written for another result.
    """

    def __init__(self, path: str | os.PathLike, notify=None) -> None:
        self.path = path
        lines = transcript_lines(path)
        self.messages = [message for _, message in lines]
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
        if sent != self.recorded_results[self.served - 1]:
            self.on_recorded_path = False
            self.notify(
                f"note: the run has left the recorded path: a tool result differs from the one "
                f"in {self.path}, so the recorded replies from here on may not fit"
            )
