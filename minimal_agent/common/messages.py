"""What every layer reads of the chat messages: the fields a reply's thinking comes in, and a
JSON value's kind as a message about it names it."""

from __future__ import annotations

REASONING_FIELDS = ("reasoning_content", "reasoning")  # DeepSeek's name; vLLM's and Ollama's


def json_kind(value: object) -> str:
    """The JSON type name of a value json.loads gave: object, array, string, ... number."""
    kinds = {dict: "object", list: "array", str: "string", bool: "boolean", type(None): "null"}
    return kinds.get(type(value), "number")
