"""What a learner looks for in the wire record (stores/wire_record.py): the lesson's path of
each tool call, each response's tokens and cost, and --show ID --wire, the record as text. The
--html page (wire_page.py) shows the same."""

from __future__ import annotations

import json
import os

from minimal_agent.common.errors import AgentError
from minimal_agent.common.text import one_line
from minimal_agent.core import cost
from minimal_agent.stores.transcripts import transcript_lines
from minimal_agent.stores.wire_record import read_record

# --- What a learner looks for in it ----------------------------------------------------------


def lesson_paths(exchanges: list[dict]) -> dict[int, list[dict]]:
    """For each exchange's number, the lesson's path of each tool call its response made:
    index, id, name, arguments (the JSON string), parsed (the dict, or None), problem (why it
    did not parse), call (the Python call it became) and answer: (the exchange that sent the
    tool message, its index in that request, the message), or None if none was sent. A tool
    message answers the earliest call still waiting with its id (servers that number their
    calls call_0, call_1, ... on every reply use the same ids again)."""
    paths: dict[int, list[dict]] = {}
    waiting: dict[str, list[dict]] = {}
    for exchange in exchanges:
        for index, message in enumerate(exchange["new"], exchange["same"]):
            if not (isinstance(message, dict) and message.get("role") == "tool"):
                continue
            calls = waiting.get(message.get("tool_call_id"), []) if isinstance(
                message.get("tool_call_id"), str) else []  # fmt: skip
            if calls:
                calls.pop(0)["answer"] = (exchange["number"], index, message)
        steps = [
            path_of(index, call) for index, call in enumerate(tool_calls(exchange["response"]))
        ]
        for step in steps:
            if isinstance(step["id"], str):
                waiting.setdefault(step["id"], []).append(step)
        paths[exchange["number"]] = steps
    return paths


def path_of(index: int, call: dict) -> dict:
    """One tool call's path, its answer not yet known (see lesson_paths)."""
    function = call.get("function") if isinstance(call.get("function"), dict) else {}
    arguments, name = function.get("arguments"), function.get("name")
    parsed, problem = None, None
    try:
        parsed = json.loads(arguments or "{}")
    except (TypeError, ValueError, RecursionError) as error:
        problem = f"not valid JSON ({error})"
    if parsed is not None and not isinstance(parsed, dict):
        parsed, problem = None, "JSON, but not an object"
    return {"index": index, "id": call.get("id"), "name": name, "arguments": arguments,
            "parsed": parsed, "problem": problem, "answer": None}  # fmt: skip


def tool_calls(response) -> list[dict]:
    try:
        calls = response["choices"][0]["message"].get("tool_calls") or []
    except (TypeError, KeyError, IndexError, AttributeError):
        return []
    return [call for call in calls if isinstance(call, dict)] if isinstance(calls, list) else []


def python_call(name, parsed: dict | None, width: int | None = None) -> str:
    """The call execute_tool_call makes: TOOL_MAP["write_file"](ws, path='a.txt', ...);
    each value shortened to width characters if given."""
    if parsed is None:
        return "(no call: the arguments are not a JSON object; the tool message says so)"

    def shown(value) -> str:
        text = repr(value)
        if width and len(text) > width:
            return f"{text[: width - 3]}...  # {len(text):,} characters"
        return text

    pairs = "".join(f", {key}={shown(value)}" for key, value in parsed.items())
    return f"TOOL_MAP[{json.dumps(name, ensure_ascii=False)}](ws{pairs})"


def usage_of(exchange: dict, priced: list[dict]) -> dict | None:
    """The response's token counts and, from the transcript's usage events (priced, taken
    from the front as they match), its cost and currency; None without a usage."""
    response = exchange["response"] if isinstance(exchange["response"], dict) else {}
    usage = response.get("usage")
    if not isinstance(usage, dict):
        return None
    counts = cost.token_counts(usage)
    created = response.get("created")
    found = {"cost": None, "currency": None}
    if priced and all(priced[0].get(key) == value for key, value in counts.items()):
        if priced[0].get("created") == created:
            found = priced.pop(0)
    spent, currency = found.get("cost"), found.get("currency")
    if not (isinstance(spent, int | float) and not isinstance(spent, bool)):
        spent = None
    return {**counts, "cost": spent, "currency": currency if currency in cost.CURRENCIES else None}


def usage_events(transcript: str | os.PathLike) -> list[dict]:
    """The transcript's usage events, in order ([] if it cannot be read)."""
    try:
        lines = transcript_lines(transcript, tolerant=True)
    except (AgentError, OSError):
        return []
    return [entry for _, entry in lines if entry.get("event") == "usage"]


def usage_line(usage: dict | None) -> str:
    if usage is None:
        return "usage: none reported"
    money = "cost unknown"
    if usage["cost"] is not None and usage["currency"]:
        money = f"cost {cost.money(usage['cost'], usage['currency'])}"
    return (
        f"usage: prompt tokens {usage['prompt_tokens']:,} (cache hits "
        f"{usage['cache_hit_tokens']:,}), completion tokens {usage['completion_tokens']:,}, "
        f"{money}"
    )


# --- --show ID --wire --------------------------------------------------------------------------


def show_wire(transcript: str | os.PathLike, folder: str | os.PathLike | None, show) -> int:
    """--show ID --wire: each request as JSON (what is new since the request it extends; the
    rest counted), each response as JSON, the lesson's path of each tool call, and each
    response's tokens and cost, handed to show line by line (which escapes it for the
    terminal)."""
    exchanges = read_record(transcript, folder)
    paths = lesson_paths(exchanges)
    priced = usage_events(transcript)
    for exchange in exchanges:
        for line in exchange_lines(exchange, paths[exchange["number"]], priced):
            show(line)
    return 0


def exchange_lines(exchange: dict, path: list[dict], priced: list[dict]) -> list[str]:
    number, base, same = exchange["number"], exchange["base"], exchange["same"]
    how = f"streamed in {exchange['chunks']} chunks" if exchange["streamed"] else "not streamed"
    lines = [
        f">>> request {number}: sent {exchange['started']}, {how}, "
        f"{exchange['seconds']} s until the response",
        "{",
    ]
    fields = exchange["fields"]
    if exchange["fields_changed"]:
        for key, value in fields.items():
            lines += indented(f"{json.dumps(key)}: {dumps(value)},", 2)
    else:
        lines.append(f"  ... {', '.join(fields)}: as in request {base}, not repeated ...")
    lines.append('  "messages": [')
    if same:
        size = len(json.dumps(exchange["body"]["messages"][:same]))
        lines.append(
            f"    ... the first {same} messages, as in request {base} ({size:,} bytes of JSON), "
            "not repeated ..."
        )
    for index, message in enumerate(exchange["new"], same + 1):
        lines.append(f"    // message {index}, new")
        lines += indented(dumps(message) + ",", 4)
    lines += ["  ]", "}"]
    if exchange["error"] is not None:
        return [*lines, f"<<< no response: {exchange['error']}", ""]
    lines += [f"<<< response {number}", *dumps(exchange["response"]).split("\n")]
    for step in path:
        lines += path_lines(step, len(path))
    if not exchange["fields"].get("tools"):
        lines.append("  a side request without tools: the summary a compaction asked for")
    elif not path:
        lines.append("  no tool calls: this is the answer, and the loop ends")
    return [*lines, "  " + usage_line(usage_of(exchange, priced)), ""]


def path_lines(step: dict, count: int) -> list[str]:
    """The lesson's path of one tool call, marked with "  |"."""
    i = step["index"]
    parsed = repr(step["parsed"]) if step["problem"] is None else step["problem"]
    lines = [
        f"  | tool call {i + 1} of {count} [{step['id']}]:",
        f"  | resp.choices[0].message.tool_calls[{i}].function.arguments  (a str, JSON text):",
        f"  |     {json.dumps(step['arguments'], ensure_ascii=False)}",
        f"  | args = json.loads(arguments)  -> {parsed}",
        f"  | {python_call(step['name'], step['parsed'], 200)}",
    ]
    if step["answer"] is None:
        return [*lines, "  | -> no tool message was sent for it (the run ended first)"]
    number, index, message = step["answer"]
    content = message.get("content")
    shown = one_line(repr(content), 200) if isinstance(content, str) else dumps(content)
    return [
        *lines,
        f'  | -> messages.append({{"role": "tool", "tool_call_id": '
        f'{json.dumps(message.get("tool_call_id"))}, "content": {shown}}})',
        f"  |    (message {index + 1} of request {number})",
    ]


def dumps(value: object) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False)


def indented(text: str, spaces: int) -> list[str]:
    return [" " * spaces + line for line in text.split("\n")]
