"""Replies: the assistant message that goes back in the history, whatever the server's habits
(docs/servers.md says why each field is built as it is), and the answer to show."""

from __future__ import annotations

import json

from minimal_agent.common.messages import REASONING_FIELDS, json_kind
from minimal_agent.common.text import one_line

CUT_OFF = ("length", "content_filter", "insufficient_system_resource")  # finish reasons


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
                sent = one_line(repr(call.function.arguments), 120)
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
    except (ValueError, TypeError, RecursionError) as error:  # too deep, a 5,000-digit number
        problem = f"the arguments are not valid JSON ({error})"
    else:
        if isinstance(parsed, dict):
            return received, None  # exactly as received
        problem = f"{name} takes a JSON object of its arguments, not a JSON {json_kind(parsed)}"
    sent = one_line(repr(received), 120)
    return "{}", f"Error: {problem}; you sent {sent}, so nothing was run; send one JSON object"


def final_answer(msg, finish_reason: str | None) -> tuple[str, bool]:
    """The answer to print (without <think> blocks) and whether it is complete (not cut off,
    not empty: the session has warned of either)."""
    text = without_thinking(msg.content or "")
    return text, finish_reason not in CUT_OFF and bool(text.strip())


def without_thinking(text: str) -> str:
    """Content with <think>...</think> left out (some servers put the reasoning there; the
    opening tag may be missing). The history keeps the content exactly as received."""
    if "</think>" in text:
        return text.rsplit("</think>", 1)[1].lstrip()
    if text.lstrip().startswith("<think>"):
        return ""  # the reasoning never ended: there is no answer yet
    return text
