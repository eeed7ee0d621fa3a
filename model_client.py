"""Where the agent's model comes from: configuration, `create_client()`, `complete()` (one
request, streamed or not), and the replay client.

`openai` and `python-dotenv` are imported inside the functions that need them, so that
`python agent.py --help` starts without paying for them.
"""

import json
import os
from types import SimpleNamespace

CONFIG_FILE = os.path.join(os.path.dirname(os.path.realpath(__file__)), "config.env")
DEFAULT_BASE_URL = "https://api.deepseek.com"
MODEL = "deepseek-flash"  # the lesson's model; LLM_MODEL overrides it
REQUEST_TIMEOUT = 120.0  # seconds without a byte from the server before an attempt gives up


class AgentError(Exception):
    """A problem the user can act on (a setting, a file, a reply); the message says what."""


def load_config() -> dict[str, str]:
    """Read config.env beside this file (real environment variables win) and return the settings."""
    from dotenv import load_dotenv

    load_dotenv(CONFIG_FILE, override=False)
    return {
        "api_key": os.environ.get("LLM_API_KEY", "").strip(),
        "base_url": os.environ.get("LLM_BASE_URL", "").strip() or DEFAULT_BASE_URL,
        "model": os.environ.get("LLM_MODEL", "").strip() or MODEL,
        "max_tokens": os.environ.get("LLM_MAX_TOKENS", "").strip(),
    }


def create_client(
    config: dict[str, str] | None = None, timeout: float = REQUEST_TIMEOUT
):  # -> openai.OpenAI
    """An OpenAI SDK client for the configured server (DeepSeek unless LLM_BASE_URL is set).

    timeout bounds each attempt's wait for the server (the SDK's own default is 600 s, far too
    long to sit in front of a silent server); the SDK makes up to three attempts.
    """
    config = config or load_config()
    if not config["api_key"]:
        raise AgentError(
            "LLM_API_KEY is not set: put it in config.env (copy config.example.env) "
            "or in the environment"
        )
    if not config["base_url"].startswith(("http://", "https://")):
        raise AgentError(
            f"LLM_BASE_URL must start with http:// or https://, not {config['base_url']!r}"
        )
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


def read_transcript(path: str | os.PathLike) -> list[dict]:
    """The messages of a transcript saved with --save (JSON Lines, one message a line)."""
    messages = []
    with open(path, encoding="utf-8") as file:
        for number, line in enumerate(file, 1):
            if not line.strip():
                continue
            try:
                message = json.loads(line)
            except json.JSONDecodeError as error:
                raise AgentError(f"{path} line {number} is not JSON: {error}") from None
            if not isinstance(message, dict) or "role" not in message:
                raise AgentError(f"{path} line {number} is not a message (no 'role')")
            messages.append(message)
    return messages


ROLES = ("system", "user", "assistant", "tool")


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


class ReplayClient:
    """Stands in for the OpenAI client: serves a transcript's assistant messages, in order.

    `client.chat.completions.create(...)` returns a real `ChatCompletion`, so the loop cannot
    tell the difference; no network, no key.
    """

    def __init__(self, path: str | os.PathLike) -> None:
        self.messages = read_transcript(path)
        self.replies = [m for m in self.messages if m["role"] == "assistant"]
        if not self.replies:
            raise AgentError(f"{path} has no assistant messages to replay")
        self.served = 0
        self.chat = SimpleNamespace(completions=SimpleNamespace(create=self.create))

    def task(self) -> str | None:
        """The transcript's first user message: the task it was recorded with."""
        return next((m["content"] for m in self.messages if m["role"] == "user"), None)

    def create(self, **request):  # -> openai.types.chat.ChatCompletion
        from openai.types.chat import ChatCompletion

        if self.served == len(self.replies):
            raise AgentError(
                f"the transcript has no more replies after its {self.served} assistant messages"
            )
        message = self.replies[self.served]
        self.served += 1
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
