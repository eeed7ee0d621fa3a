"""A scripted stand-in for the OpenAI client, and helpers to write model replies.

The fake returns real `openai.types.chat.ChatCompletion` objects, so the loop reads them exactly
as it reads the SDK's, and it keeps a deep copy of every request so tests can assert on what the
model was sent.
"""

from __future__ import annotations

import copy
import json
from types import SimpleNamespace

from openai.types.chat import ChatCompletion


def tool_call(name: str, arguments: object = None, call_id: str | None = None) -> dict:
    """A tool call as a model sends it; arguments that are not a str are JSON-encoded."""
    if not isinstance(arguments, str):
        arguments = json.dumps(arguments if arguments is not None else {})
    return {
        "id": call_id or f"call_{name}_{abs(hash(arguments)) % 10**8}",
        "type": "function",
        "function": {"name": name, "arguments": arguments},
    }


def reply(content: str | None = None, *calls: dict, reasoning: str | None = None) -> dict:
    """An assistant message; reasoning=None leaves reasoning_content out entirely."""
    message: dict = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = list(calls)
    if reasoning is not None:
        message["reasoning_content"] = reasoning
    return message


def completion(
    message: dict,
    finish_reason: str | None = None,
    usage: dict | None = None,
    number: int = 1,
    model: str = "deepseek-flash",
) -> ChatCompletion:
    return ChatCompletion.model_validate(
        {
            "id": f"chatcmpl-fake-{number}",
            "object": "chat.completion",
            "created": 1_700_000_000,
            "model": model,
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "finish_reason": finish_reason
                    or ("tool_calls" if message.get("tool_calls") else "stop"),
                    "logprobs": None,
                }
            ],
            "usage": usage,
        }
    )


class FakeClient:
    """`client.chat.completions.create(...)` serves the scripted replies in order.

    A script item is an assistant message dict, a ChatCompletion, a function of the request's
    messages returning either, or an exception to raise.
    """

    def __init__(self, *script) -> None:
        self.script = list(script)
        self.requests: list[dict] = []
        self.chat = SimpleNamespace(completions=SimpleNamespace(create=self.create))

    @property
    def sent(self) -> list[list[dict]]:
        """The messages of every request, as they were when it was made."""
        return [request["messages"] for request in self.requests]

    def create(self, **request) -> ChatCompletion:
        # A copy of what was sent then, as plain lists and dicts (the agent's list of messages
        # also writes the transcript).
        self.requests.append(copy.deepcopy({**request, "messages": list(request["messages"])}))
        if not self.script:
            raise AssertionError(f"the model was asked {len(self.requests)} times; too often")
        item = self.script.pop(0)
        if callable(item):
            item = item(request["messages"])
        if isinstance(item, BaseException):
            raise item
        if isinstance(item, ChatCompletion):
            return item
        # Answered as the model asked for, as a real server does: no server note in a test.
        return completion(item, number=len(self.requests), model=request.get("model") or "fake")
