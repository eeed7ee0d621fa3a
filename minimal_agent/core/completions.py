"""One request to the model: `ask()` (what this server turned out to need, kept for the run)
and `complete()` (plain, or streamed and put back together as the same ChatCompletion), with
the repairs other servers' streams need."""

from __future__ import annotations

import json
import time
import warnings

from minimal_agent.common.errors import AgentError, without_key
from minimal_agent.common.messages import REASONING_FIELDS
from minimal_agent.common.text import one_line
from minimal_agent.core import reply_checks


def ask(
    client,
    messages: list[dict],
    request: dict,
    quirks: set[str],
    warn,
    show=None,
    wire=None,
):
    """One chat completion: request holds model, tools and limits; returns a ChatCompletion,
    its fields checked for the kinds the agent reads (reply_shapes: AgentError if not).

    quirks is what this server turned out to need, kept by the caller for its whole run:
    "empty content" once Ollama has rejected content null (it wants "" instead).
    show: None for a plain request, else the reply is streamed to it (see complete()).
    wire: what keeps every request and response (minimal_agent/stores/wire_record.py's Recorder), or
    None.
    """
    sent = with_empty_content(messages) if "empty content" in quirks else messages
    try:
        resp = complete(client, show, wire, messages=sent, **request)
    except Exception as error:
        if "empty content" in quirks or "invalid message content type" not in str(error):
            raise
        quirks.add("empty content")
        warn('note: this server rejects content null; sending "" instead from now on')
        resp = complete(client, show, wire, messages=with_empty_content(messages), **request)
    key = getattr(client, "api_key", None)
    reply_checks.check_reply(resp, key)  # before anything reads it
    served = getattr(resp, "model", None)
    if served and not served.startswith(request["model"]) and "model" not in quirks:
        quirks.add("model")  # llama.cpp and LM Studio in single-model mode ignore the name
        served = without_key(served, key)
        warn(f"note: asked for model {request['model']}, the server answered as {served}")
    return resp


EFFORTS = ("low", "high", "max")  # DeepSeek's reasoning_effort values (high is its default)


def thinking_options(thinking: str | None, effort: str | None) -> dict:
    """The request's parameters for DeepSeek's thinking switch ("on", "off") and effort, as its
    API documents them, and only those the user set: thinking {"type": ...} (sent by the SDK's
    extra_body) and reasoning_effort; none with thinking off, which has no effort."""
    options: dict = {}
    if thinking:
        switch = {"type": "enabled" if thinking == "on" else "disabled"}
        options["extra_body"] = {"thinking": switch}
    if effort and thinking != "off":
        options["reasoning_effort"] = effort
    return options


def with_empty_content(messages: list[dict]) -> list[dict]:
    """The messages with assistant content null sent as "" (Ollama's /v1 rejects null)."""
    return [
        {**m, "content": ""} if m["role"] == "assistant" and m.get("content") is None else m
        for m in messages
    ]


def complete(client, show=None, wire=None, **request):  # -> openai.types.chat.ChatCompletion
    """Ask the model once and return its ChatCompletion, streamed or not.

    Without show, a plain `client.chat.completions.create(**request)`. With show, the reply is
    streamed: show("thinking", text) and show("text", text) get the reasoning and the content
    as they arrive (show("note", text) a line between them), and the chunks are put together
    by the SDK's own accumulator into the ChatCompletion a plain request returns, so nothing
    after the request can tell the two apart.
    A stream that breaks off is asked for again once, as the SDK asks again after a failed
    request; nothing of the broken one is kept. A reply that does not arrive whole then, or
    a stream the server stopped sending, raises AgentError.
    Each attempt, its reply or its failure, is handed to wire (see recorded()).
    """
    if show is None:
        return recorded(wire, request, False, lambda: (plain(client, request), None))
    try:
        return recorded(wire, request, True, lambda: streamed(client, show, request))
    except BrokenStream as broken:
        show("note", f"{broken}; asking again (nothing of that one is kept)")
    try:
        return recorded(wire, request, True, lambda: streamed(client, show, request))
    except BrokenStream as broken:
        raise AgentError(
            f"{broken}, a second time: nothing of it was kept and none of its tool calls ran; "
            "try again later"
        ) from None


STREAM = {"stream": True, "stream_options": {"include_usage": True}}  # what a stream adds


def recorded(wire, request: dict, stream: bool, attempt):  # -> ChatCompletion
    """attempt() -> (ChatCompletion, chunks or None), timed, and handed to wire with the body
    as the SDK sends it: the one place where every request and its response (or what failed,
    the key left out) are kept."""
    started, clock = time.time(), time.monotonic()
    try:
        resp, chunks = attempt()
    except BaseException as error:  # Ctrl-C during the wait too: the request was sent
        if wire:
            wire.failed(sent_body(request, stream), error, started, time.monotonic() - clock)
        raise
    if wire:
        wire.record(
            sent_body(request, stream), resp, started, time.monotonic() - clock, stream, chunks
        )
    return resp


def sent_body(request: dict, stream: bool) -> dict:
    """The JSON body the SDK makes of a request: extra_body's fields merged in."""
    body = {key: value for key, value in request.items() if key != "extra_body"}
    body.update(request.get("extra_body") or {})
    return {**body, **STREAM} if stream else body


def plain(client, request: dict):  # -> openai.types.chat.ChatCompletion
    """One request that is not streamed; AgentError if what came back is no chat completion."""
    try:
        resp = client.chat.completions.create(**request)
    except json.JSONDecodeError as error:  # the SDK reads a JSON body it cannot parse
        raise AgentError(not_a_completion(client, error.doc, "JSON that is cut off")) from None
    except (RecursionError, ValueError) as error:
        refusal = reply_checks.unreadable(error, "reply")
        if refusal is None:
            raise
        raise refusal from None
    reply_checks.check_depth(resp, "reply")  # before the wire record turns it into JSON
    if not_a_chat_completion(resp):  # the SDK hands on a text body, or other JSON, as is
        body = resp if isinstance(resp, str) else json.dumps(resp, default=dumped)
        raise AgentError(not_a_completion(client, body))
    return resp


class BrokenStream(Exception):
    """A stream that ended before its reply was whole; the message says how."""


def streamed(client, show, request: dict) -> tuple:  # (ChatCompletion, chunks)
    """One streamed request (see complete()): the reply and how many chunks made it;
    BrokenStream if the reply does not arrive whole."""
    import openai  # here, not at the top: --help starts without it
    from openai.lib.streaming.chat import ChatCompletionStreamState
    from openai.types.chat import ChatCompletion

    state = ChatCompletionStreamState()
    key = getattr(client, "api_key", None)  # removed from whatever of the server's is quoted
    calls: dict[int, list[dict]] = {}  # what each choice's tool calls have sent so far
    usage = None
    started = False
    chunks = 0
    stream = client.chat.completions.create(**request, **STREAM)
    response = getattr(stream, "response", None)  # the SDK's stream has its HTTP response
    kind = response.headers.get("content-type", "") if response is not None else ""
    if kind and "event-stream" not in kind:  # a page or a JSON body: no event would come
        body = next(response.iter_bytes(), b"")[:1_000].decode("utf-8", "replace")
        response.close()
        raise AgentError(not_a_completion(client, body, streamed=True))
    try:
        with stream:
            for chunk in stream:
                reply_checks.check_depth(chunk, "stream")
                reply_checks.check_chunk(chunk, key, len(calls.get(0, [])))
                chunks += 1
                usage = chunk.usage or usage  # on the finish chunk, or in a chunk of its own
                if not chunk.choices:  # the usage-only last chunk, a content-filter note
                    continue
                mend(chunk, calls)
                show_delta(chunk.choices[0].delta, show)
                put_together(state, chunk, key)
                started = True
    except openai.APITimeoutError:  # not asked again: that would double a long wait
        seconds = client.timeout if isinstance(client.timeout, (int, float)) else None
        after = f" for {seconds:g} s" if seconds else ""
        raise AgentError(
            f"the server sent nothing{after} in the middle of the reply, so it was given up "
            "(nothing of it was kept): try again, or raise --request-timeout"
        ) from None
    except openai.APIConnectionError:
        raise BrokenStream("the connection broke before the server finished the reply") from None
    except openai.APIStatusError:
        raise
    except (RecursionError, ValueError) as error:  # an event's JSON, read by the SDK
        refusal = reply_checks.unreadable(error, "stream")
        if refusal is None:
            raise
        raise refusal from None
    except openai.APIError as error:  # an {"error": ...} event in the stream
        said = " ".join(without_key(str(error.message), key).split())[:200]
        reported = f"the server reported an error in the middle of the reply ({said})"
        raise BrokenStream(reported) from None
    snapshot = state.current_completion_snapshot if started else None
    if not snapshot or not snapshot.choices or not snapshot.choices[0].finish_reason:
        raise BrokenStream("the stream ended before the server finished the reply")
    # A plain ChatCompletion, without the SDK's parsed-output fields, as a plain request gives.
    parsed = {"parsed": True, "tool_calls": {"__all__": {"function": {"parsed_arguments"}}}}
    data = snapshot.model_dump(
        exclude={"choices": {"__all__": {"message": parsed}}}, warnings=False
    )
    data["usage"] = usage and usage.model_dump(warnings=False)
    return ChatCompletion.construct(**data), chunks


def put_together(state, chunk, key: str | None) -> None:
    """The chunk added to the SDK's accumulator. The chunk's fields the agent reads are checked
    already (reply_checks.check_chunk); the accumulator relies on more of them (logprobs, the
    kinds of fields it does not know, which it concatenates), and what it cannot take is the
    server's mistake, said in one line like any other. (The accumulator's copies of a chunk
    would warn, unescaped, of every field of an unexpected kind: not for the user's eyes.)"""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            state.handle_chunk(chunk)
    except (AssertionError, AttributeError, IndexError, KeyError, TypeError, ValueError) as error:
        said = one_line(without_key(f"{type(error).__name__}: {error}", key), 120)
        raise AgentError(
            f"the server's stream cannot be put together into a reply (the openai SDK said "
            f"{said}); nothing of it was kept: check LLM_BASE_URL, or try --no-stream"
        ) from None


def not_a_chat_completion(resp) -> bool:
    """Whether what the SDK returned is no chat completion: a text body (an HTML page), other
    JSON, or a ChatCompletion the SDK made from JSON without choices it could read. (A client
    of other objects, such as a test's, is taken at its word.)"""
    from openai.types.chat import ChatCompletion, ChatCompletionMessage
    from openai.types.chat.chat_completion import Choice

    if isinstance(resp, str | list | dict | int | float) or resp is None:
        return True
    if not isinstance(resp, ChatCompletion):
        return False
    if resp.choices is None and "error" in (resp.model_extra or {}):
        return False  # an error said with status 200: the caller says what the server said
    return not isinstance(resp.choices, list) or not all(
        isinstance(choice, Choice) and isinstance(choice.message, ChatCompletionMessage)
        for choice in resp.choices
    )


def dumped(resp) -> object:
    """The JSON of a ChatCompletion the SDK made from what the server sent."""
    return resp.model_dump(exclude_unset=True, warnings=False)


def not_a_completion(client, body: str, what: str | None = None, streamed: bool = False) -> str:
    """One line: the URL, what came back (an HTML page, JSON, text) and its first characters,
    escaped, and what to check."""
    url = f"{str(getattr(client, 'base_url', '')).rstrip('/')}/chat/completions"
    body = without_key(body, getattr(client, "api_key", None))  # an echo of the request's headers
    if what is None:
        start = body.lstrip()[:200].lower()
        if start.startswith(("<!doctype html", "<html")) or "<html" in start:
            what = "an HTML page"
        elif start.startswith(("{", "[")):
            what = "JSON"
        else:
            what = "text" if body.strip() else "nothing"
    sample = repr(body[:120]) + ("..." if len(body) > 120 else "")
    expected = "a stream of chat completion chunks" if streamed else "a chat completion"
    return (
        f"{url} answered with {what}, not {expected}: {sample}; check LLM_BASE_URL (a server's "
        "OpenAI-compatible API, usually ending in /v1)"
        + (", or try --no-stream if the server does not stream" if streamed else "")
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
