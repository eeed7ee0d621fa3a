"""One request to the model: `ask()` (what this server turned out to need, kept for the run)
and `complete()` (plain, or streamed and put back together as the same ChatCompletion), with
the repairs other servers' streams need."""

from __future__ import annotations

from minimal_agent.display import say
from minimal_agent.errors import AgentError, without_key
from minimal_agent.replies import REASONING_FIELDS


def ask(client, messages: list[dict], request: dict, quirks: set[str], warn=say, show=None):
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
    import openai  # here, not at the top: --help starts without it
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
