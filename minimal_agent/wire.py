"""The wire: every request a saved conversation sent and every response it got, kept exactly,
beside the transcript (sessions.wire_file), so that any past run can be looked at as the
server saw it (--show ID --wire, --html ID).

The record is JSON Lines, one line per request ("exchange"), written when its response (or
its failure) has come:

    {"exchange": 3, "started": "2026-12-05T08:40:01.250Z", "seconds": 1.234,
     "streamed": true, "chunks": 57,
     "request": {"base": 2, "same": 5, "messages": [...], "fields": {...}},
     "response": {...}}                        (or "error": "what failed", for a failure)

A request is kept as what it adds to an earlier one (its base, one of the last few): the
number of leading messages it shares with it ("same") and the messages after those; its other
fields (model, tools, every parameter) only when they differ from the base's. So the record
grows with the conversation, not with its square, and each request is rebuilt exactly
(exchanges()). A response is its JSON as the SDK read it; a stream's is the reply its chunks
made. The API key is never written: no header is kept, and the key in any text is replaced.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

from minimal_agent import cost, files, sessions
from minimal_agent.errors import AgentError, without_key
from minimal_agent.text import one_line
from minimal_agent.transcripts import transcript_lines

BASES = 3  # a request's base is one of the last few: a compaction's summary request, made
# between two requests of the conversation, does not make the next one start anew


class Recorder:
    """Keeps a conversation's requests and responses in path (appended to; made when the first
    one comes). A reader of the session's events (fed at one place, completions.recorded(),
    through events.Exchanges): record() for a response, failed() for a request that got
    none. key: the API key, replaced wherever it would be written. on_lost(error): told once
    if the record cannot be written (a full disk, a quota, a link in its place); it is given
    up, never the conversation."""

    def __init__(self, path: str | os.PathLike, key: str, on_lost, notice) -> None:
        self.path = Path(path)
        self.key = key
        self.on_lost = on_lost
        self.notice = notice  # notice(line): where a record that cannot be read back is said
        self.file = None
        self.number = 0  # the last exchange's
        self.recent: list[dict] = []  # the last BASES requests, rebuilt: number, messages, fields
        self.given_up = False  # the record could not be written
        self.pending: dict = {}  # the request whose response is awaited

    def __call__(self, kind: str, fields: dict) -> None:
        """As a reader of the session's events (events.Exchanges): each response, or what
        failed, with the request it answers."""
        if kind == "request":
            self.pending = fields["body"]
        elif kind == "response" and fields["error"] is None:
            self.record(self.pending, fields["body"], fields["started"], fields["seconds"],
                        fields["streamed"], fields["chunks"])  # fmt: skip
        elif kind == "response":
            self.failed(self.pending, fields["error"], fields["started"], fields["seconds"])

    def record(self, body: dict, response: object, started: float, seconds: float,
               streamed: bool, chunks: int | None) -> None:  # fmt: skip
        """A response (as JSON: the event's body), the time it took, and for a stream how many
        chunks made it."""
        self.write(body, started, seconds, streamed, chunks, {"response": response})

    def failed(self, body: dict, error: BaseException, started: float, seconds: float) -> None:
        """A request that got no usable response: what went wrong instead."""
        said = f"{type(error).__name__}: {error}".strip().removesuffix(":")
        streamed = bool(body.get("stream"))
        self.write(body, started, seconds, streamed, None, {"error": said})

    def write(self, body, started, seconds, streamed, chunks, outcome: dict) -> None:
        """One exchange as one line; a record that cannot be written is given up with one
        line saying so, never the conversation."""
        if self.given_up:
            return
        try:
            self.write_line(body, started, seconds, streamed, chunks, outcome)
        except OSError as error:  # full, a quota, an I/O error, a link in its place
            self.given_up = True
            self.on_lost(error)
        except AgentError as error:  # the record there cannot be read back to go on with
            self.given_up = True
            self.notice(f"warning: the requests and responses are not kept from here on: {error}")

    def write_line(self, body, started, seconds, streamed, chunks, outcome: dict) -> None:
        if self.file is None:
            self.open()
        self.number += 1
        line = {
            "exchange": self.number,
            "started": datetime.fromtimestamp(started, UTC).isoformat(timespec="milliseconds"),
            "seconds": round(seconds, 3),
            "streamed": streamed,
            "chunks": chunks,
            "request": self.delta(body),
            **outcome,
        }
        text = json.dumps(line, default=str)
        if self.key:
            text = without_key(text, self.key)
        files.append_whole(self.file, (text + "\n").encode("utf-8"))

    def delta(self, body: dict) -> dict:
        """What body adds to the recent request it shares the most leading messages with."""
        messages = list(body.get("messages") or [])
        fields = {key: value for key, value in body.items() if key != "messages"}
        base, same = None, 0
        for earlier in self.recent:  # oldest first: a tie goes to the latest
            shared = shared_prefix(earlier["messages"], messages)
            if base is None or shared >= same:
                base, same = earlier, shared
        entry: dict = {"base": base and base["number"], "same": same, "messages": messages[same:]}
        if base is None or base["fields"] != fields:
            entry["fields"] = fields
        self.remember({"number": self.number, "messages": messages, "fields": fields})
        return entry

    def remember(self, request: dict) -> None:
        self.recent = [*self.recent, request][-BASES:]

    def open(self) -> None:
        """Open the record to append; a resumed conversation's goes on where it ended, its
        last requests rebuilt as bases."""
        if self.path.exists():
            for exchange in exchanges(self.path):
                self.number = exchange["number"]
                self.remember(
                    {"number": exchange["number"], "messages": exchange["body"]["messages"],
                     "fields": exchange["fields"]}
                )  # fmt: skip
        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)  # saved/ for --save FILE
        self.file = files.open_record(self.path)  # an OSError here gives the record up
        sessions.lock(self.file.fileno(), self.path)  # as the transcript's: one writer
        if self.file.tell() and not ends_with_newline(self.path):
            # a line half written when the agent was stopped ends here
            files.append_whole(self.file, b"\n")

    def close(self) -> None:
        if self.file:
            self.file.close()


def shared_prefix(earlier: list[dict], messages: list[dict]) -> int:
    """How many leading messages the two lists have in common."""
    shared = 0
    for old, new in zip(earlier, messages, strict=False):
        if old is not new and old != new:
            break
        shared += 1
    return shared


def ends_with_newline(path: Path) -> bool:
    with open(path, "rb") as file:
        file.seek(-1, os.SEEK_END)
        return file.read(1) == b"\n"


# --- Reading it back -------------------------------------------------------------------------


def exchanges(path: str | os.PathLike) -> Iterator[dict]:
    """Each exchange of a record with its request rebuilt: number, started, seconds, streamed,
    chunks; body (the request as sent), base, same (its leading messages as in base), new (the
    messages after those), origins (for each message, the exchange that sent it first), fields
    (the body but messages) and whether they changed; response (or None) and error (or None).
    A line that is not JSON (one the agent was stopped while writing) is left out; an exchange
    that cannot be rebuilt raises AgentError naming its line."""
    try:
        with open(path, "rb") as file:
            lines = file.read().split(b"\n")
    except OSError as error:
        raise AgentError(f"cannot read {path}: {error.strerror}") from None
    recent: dict[int, dict] = {}
    for index, line in enumerate(lines):
        try:
            entry = json.loads(line)
        except ValueError:  # empty, or cut off by a crash
            continue
        try:
            exchange = rebuilt(entry, recent)
        except (KeyError, TypeError, AttributeError):
            raise AgentError(
                f"{path} line {index + 1} is not an exchange as the agent writes them, or its "
                f"request refers to one that is not among the {BASES} before it"
            ) from None
        recent[exchange["number"]] = exchange
        recent.pop(exchange["number"] - BASES, None)
        yield exchange


def count(value: object) -> int | None:
    """value if it is a whole number (not a bool) of at least 0, else None."""
    return value if type(value) is int and value >= 0 else None


def rebuilt(entry: dict, recent: dict[int, dict]) -> dict:
    """An exchange as exchanges() gives it, its request rebuilt on one of recent's."""
    request = entry["request"]
    base = recent[request["base"]] if request["base"] is not None else None
    number, same, new = entry["exchange"], request["same"], request["messages"]
    fields = request["fields"] if "fields" in request else base["fields"]
    if not (count(number) and count(same) is not None and isinstance(new, list)
            and isinstance(fields, dict)):  # fmt: skip
        raise TypeError("not an exchange")  # (an edited record: its numbers name page parts)
    seconds, chunks = entry.get("seconds"), entry.get("chunks")
    return {
        "number": number,
        "started": entry.get("started") if isinstance(entry.get("started"), str) else None,
        "seconds": seconds if isinstance(seconds, float) or count(seconds) is not None else None,
        "streamed": entry.get("streamed") is True,
        "chunks": count(chunks),
        "body": {"messages": (base["body"]["messages"][:same] if base else []) + new, **fields},
        "base": request["base"],
        "same": same,
        "new": new,
        "origins": (base["origins"][:same] if base else []) + [number] * len(new),
        "fields": fields,
        "fields_changed": "fields" in request,
        "response": entry.get("response"),
        "error": entry.get("error"),
    }


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


def read_record(transcript: str | os.PathLike, folder: str | os.PathLike | None = None) -> list:
    """A conversation's exchanges, from its record in the sessions folder (folder), else the
    one beside the transcript (as the examples ship it); AgentError if it has none."""
    record = sessions.wire_file(transcript, folder)
    if not record.exists():
        record = sessions.wire_file(transcript)
    if not record.exists():
        raise AgentError(
            f"{transcript} has no record of its requests and responses ({record.name} beside "
            "it): only conversations saved by this version of the agent have one"
        )
    return list(exchanges(record))


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
