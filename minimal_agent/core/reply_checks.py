"""The shapes of a server's reply that the agent relies on, checked before anything uses it.

The SDK hands on what the server sent without checking its kinds: a `tool_calls` that is an
object, a call without `function`, `content` as a number, `created` too large for a date. Each
would crash the loop, the display or the cost somewhere later. So every reply is checked once,
as soon as it is whole (completions.ask), and each chunk of a stream before the SDK's
accumulator takes it (completions.streamed): the first field of a wrong kind is named in one
line. Only the fields the agent reads are checked; anything else may be anything, of any kind,
but not of any depth: what nests deeper than MAX_DEPTH anywhere (the SDK's objects cannot be
turned back into JSON past about 250 levels, Python's reader past about 1,000) or holds an
integer too long for Python to read is refused as a whole (too_deep, unreadable).
"""

from __future__ import annotations

import json

from minimal_agent.common.errors import AgentError, without_key
from minimal_agent.common.text import one_line

LATEST_TIME = 32_503_680_000  # 3000-01-01 UTC in Unix seconds: every platform's gmtime takes it
MOST_TOKENS = 2**53  # a count beyond this is no count (and a float could not hold it exactly)
TEXT = "a string or null"
COUNT = "a whole number from 0, or null"
TIME = "a time in Unix seconds (from 0 up to the year 3000), or null"
ARGUMENTS = "a string, an object or null"  # some servers send an object: checked_arguments takes it
PLACE = "a place in the list (0, 1, ...), or null"
ONLY = "0 (one reply was asked for)"
MAX_DEPTH = 100  # levels of nesting a reply may have: its own fields use about 8


def obj(fields: dict, required: tuple[str, ...] = ()) -> tuple:
    return ("object", fields, required)


def array(item) -> tuple:
    return ("array", item)


USAGE = obj({
    "prompt_tokens": COUNT,
    "completion_tokens": COUNT,
    "prompt_cache_hit_tokens": COUNT,  # DeepSeek's
    "prompt_cache_miss_tokens": COUNT,
    "prompt_tokens_details": obj({"cached_tokens": COUNT}),  # OpenAI's, llama.cpp's
})  # fmt: skip
REASONING = {"reasoning_content": TEXT, "reasoning": TEXT}  # messages.REASONING_FIELDS
CALL = obj(
    {
        "id": TEXT,
        "type": TEXT,
        "function": obj({"name": TEXT, "arguments": ARGUMENTS}, ("name",)),
    },
    ("function",),
)
REPLY = obj(
    {
        "choices": array(
            obj(
                {
                    "message": obj({"content": TEXT, "tool_calls": array(CALL), **REASONING}),
                    "finish_reason": TEXT,
                },
                ("message",),
            )
        ),
        "created": TIME,
        "model": TEXT,
        "usage": USAGE,
    },  # no choices at all: Session.note_reply says so, with the error a proxy sent instead
)
FRAGMENT = obj(  # a piece of a tool call in a stream: only the first has id and name
    {
        "index": PLACE,
        "id": TEXT,
        "type": TEXT,
        "function": obj({"name": TEXT, "arguments": TEXT}),
    },
    ("function",),  # the SDK's accumulator asserts it
)
CHUNK = obj(
    {
        "choices": array(
            obj(
                {
                    "index": ONLY,
                    "delta": obj({"content": TEXT, "tool_calls": array(FRAGMENT), **REASONING}),
                    "finish_reason": TEXT,
                },
                ("index", "delta"),
            )
        ),
        "created": TIME,
        "model": TEXT,
        "usage": USAGE,
    }
)


def check_reply(resp, key: str | None) -> None:
    """Raise AgentError naming the first field of a chat completion the agent cannot use.
    (What is not a ChatCompletion, such as a test's own object, is taken at its word.)"""
    from openai.types.chat import ChatCompletion  # here, not at the top: --help starts without it

    if not isinstance(resp, ChatCompletion):
        return
    problem = document_problem(as_data(resp), REPLY, "the reply")
    if problem:
        raise AgentError(unusable("reply", problem, key))


def too_deep(resp) -> bool:
    """Whether anything in a reply or chunk the SDK made (its models, their extra fields, the
    lists and objects in them) nests deeper than MAX_DEPTH. Walked without recursion, and
    without model_dump, which is what fails on such a reply."""
    from pydantic import BaseModel  # here, not at the top: --help starts without it

    places = [(resp, 0)]
    while places:
        value, depth = places.pop()
        if depth > MAX_DEPTH:
            return True
        if isinstance(value, BaseModel):
            inner = [*value.__dict__.values(), *(value.__pydantic_extra__ or {}).values()]
        elif isinstance(value, dict):
            inner = value.values()
        elif isinstance(value, list | tuple):
            inner = value
        else:
            continue
        places += [(item, depth + 1) for item in inner]
    return False


def unreadable(error: Exception, what: str) -> AgentError | None:
    """The one line for a reply (what: "reply" or "stream") that Python's JSON reader gave up
    on as too deep or for an integer too long (the SDK reads it before the agent sees it);
    None for any other error."""
    if isinstance(error, RecursionError):
        why = "it nests deeper than can be read"
    elif isinstance(error, ValueError) and "integer string conversion" in str(error):
        why = "it holds an integer of thousands of digits"
    else:
        return None
    return AgentError(refused(what, why))


def check_depth(resp, what: str) -> None:
    """AgentError if a reply or chunk nests deeper than MAX_DEPTH (see too_deep)."""
    if too_deep(resp):
        raise AgentError(refused(what, f"it nests deeper than {MAX_DEPTH} levels"))


def refused(what: str, why: str) -> str:
    return (
        f"the server's {what} cannot be used: {why}; nothing of it was kept. The server does "
        "not answer in the OpenAI API's shape: check LLM_BASE_URL and LLM_MODEL"
    )


def check_chunk(chunk, key: str | None, calls: int) -> None:
    """check_reply for one chunk of a stream; calls: the tool calls begun so far, since a
    fragment may continue one of them or begin the next, never leave a gap."""
    data = as_data(chunk)
    problem = document_problem(data, CHUNK, "a chunk")
    for number, choice in enumerate(data.get("choices") or [] if not problem else []):
        for place, fragment in enumerate((choice.get("delta") or {}).get("tool_calls") or []):
            index = fragment.get("index")
            if index is not None and index > calls:
                path = f"choices[{number}].delta.tool_calls[{place}].index"
                problem = (path, f"a call's place: at most {calls}", index)
                break
            calls = max(calls, (index if index is not None else calls) + 1)
    if problem:
        raise AgentError(unusable("stream", problem, key))


def as_data(model) -> object:
    """What the server sent, as JSON values: the SDK's object keeps them, whatever their kind
    (and what is no object at all, such as a chunk that is null, the SDK hands on as it is)."""
    dump = getattr(model, "model_dump", None)
    return dump(warnings=False, exclude_unset=True) if dump else model


def unusable(what: str, problem: tuple, key: str | None) -> str:
    path, expected, value = problem
    sent = one_line(without_key(json_text(value), key), 80)
    return (
        f"the server's {what} cannot be used: {path} is {sent}, not {expected}; nothing of "
        "it was kept. The server does not answer in the OpenAI API's shape: check LLM_BASE_URL "
        "and LLM_MODEL"
    )


def json_text(value: object) -> str:
    try:
        return json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        return repr(value)


def document_problem(data: object, shape: tuple, name: str) -> tuple | None:
    """shape_problem for a whole reply or chunk (name: how to call it), which is an object."""
    if not isinstance(data, dict):
        return (name, "an object", data)
    return shape_problem(data, shape, "")


def shape_problem(value: object, shape, path: str) -> tuple | None:
    """(path, what it should be, what it is) for the first field of value that does not fit
    shape, or None. A shape is a description (a leaf: TEXT, COUNT, TIME, ...), obj() or array();
    only obj()'s required fields may not be null."""
    if value is None:
        return None
    if isinstance(shape, str):
        return None if fits(value, shape) else (path, shape, value)
    if shape[0] == "array":
        if not isinstance(value, list):
            return (path, "an array or null", value)
        for number, item in enumerate(value):
            if item is None:  # no item of a list the agent reads may be null
                return (f"{path}[{number}]", shape_name(shape[1]), item)
            problem = shape_problem(item, shape[1], f"{path}[{number}]")
            if problem:
                return problem
        return None
    _, fields, required = shape
    if not isinstance(value, dict):
        return (path, "an object or null", value)
    for name, inner in fields.items():
        where = f"{path}.{name}" if path else name
        if name in required and value.get(name) is None:
            return (where, shape_name(inner), value.get(name))
        problem = shape_problem(value.get(name), inner, where)
        if problem:
            return problem
    return None


def shape_name(shape) -> str:
    """What a value of shape is, in words, when it may not be null."""
    if isinstance(shape, str):
        return shape.removesuffix(", or null").removesuffix(" or null")
    return "an object" if shape[0] == "object" else "an array"


def fits(value: object, kind: str) -> bool:
    """Whether a leaf value is of kind (one of the descriptions above; null is taken already)."""
    number = isinstance(value, int | float) and not isinstance(value, bool)
    if kind == TEXT:
        return isinstance(value, str)
    # Compared before anything converts it: NaN fits no range, and 10**400 no float.
    if kind == COUNT:
        return number and 0 <= value <= MOST_TOKENS and value == int(value)
    if kind == TIME:
        return number and 0 <= value <= LATEST_TIME
    if kind == PLACE:
        return type(value) is int and value >= 0  # the SDK's accumulator indexes lists with it
    if kind == ONLY:
        return type(value) is int and value == 0
    if kind == ARGUMENTS:
        return isinstance(value, str | dict)
    raise ValueError(f"no such kind: {kind}")
