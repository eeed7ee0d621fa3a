"""Transcripts: every message of a conversation, one JSON object a line (JSON Lines), written
as it happens, so nothing is lost when the agent stops; read back to resume, replay or show.

A line with "role" is a message, exactly as the model was sent it. A line with "event" is the
agent's bookkeeping, never sent: "session" (first line: workdir, model, start time), "usage"
(each reply's tokens and cost), "compaction" (what is sent instead of the messages before it).
Transcripts written before events existed hold messages only, and read as before.
"""

from __future__ import annotations

import json
import os

from minimal_agent.common import files
from minimal_agent.common.errors import AgentError, without_key
from minimal_agent.common.messages import REASONING_FIELDS, json_kind
from minimal_agent.common.text import one_line
from minimal_agent.stores import conversations

ROLES = ("system", "user", "assistant", "tool")


APPEND_ONLY = (
    "the conversation is append-only (the transcript keeps every message, and a provider's "
    "prefix cache needs each request to begin with the last one): add messages with append(), "
    "extend() or +="
)


class Conversation(list):
    """The messages of a conversation: a list whose append, extend and += also write each
    message to the transcript, at once (see Transcript), and tell appended() of it; save()
    writes an event there. What
    would change or remove a message already there (insert, item or slice assignment, del,
    pop, remove, clear, sort, reverse, *=) raises TypeError: the history is append-only."""

    def __init__(self, messages=(), transcript: Transcript | None = None, appended=None) -> None:
        super().__init__(messages)
        self.transcript = transcript
        self.appended = appended  # told of each message appended (Session.appended), or None

    def append(self, message: dict) -> None:
        super().append(message)
        self.save(message)
        if self.appended:
            self.appended(message)

    def extend(self, messages) -> None:
        for message in messages:
            self.append(message)

    def __iadd__(self, messages):
        self.extend(messages)
        return self

    def refuse(self, *args, **kwargs):
        raise TypeError(APPEND_ONLY)

    insert = __setitem__ = __delitem__ = pop = remove = clear = sort = reverse = __imul__ = refuse

    def save(self, entry: dict) -> None:
        if self.transcript:
            self.transcript.write(entry)


class Transcript:
    """A transcript file open for appending, locked for as long as this agent writes it (one
    writer per transcript; the lock goes with the process, however it ends). key: the API key,
    replaced wherever it would be written (the user may type it, the model repeat it)."""

    def __init__(self, path: str | os.PathLike, file, new: bool, key: str = "", on_lost=None):
        self.path = path
        self.file = file
        self.new = new  # made by this agent: removed again if nothing is ever written to it
        self.key = key
        self.on_lost = on_lost  # on_lost(error): a line the disk refused; None: raised
        self.given_up = False

    @classmethod
    def open(cls, path: str | os.PathLike, key: str = "", on_lost=None) -> Transcript:
        new = not os.path.exists(path) or os.path.getsize(path) == 0
        return cls(path, conversations.open_for_append(path), new, key, on_lost)

    def write(self, entry: dict) -> None:
        """One message or event as one line, handed to the system at once, whole or not at
        all; a line the disk refuses (full, a quota, an I/O error) gives the transcript up:
        on_lost is told, and nothing more is written."""
        if self.given_up:
            return
        line = without_key(json.dumps(entry), self.key) + "\n"
        try:
            files.append_whole(self.file, line.encode("utf-8"))
        except OSError as error:
            if self.on_lost is None:
                raise
            self.given_up = True
            self.on_lost(error)

    def close(self) -> None:
        """Close (and unlock) the file; one this agent made and never wrote to is removed."""
        if self.file.closed:
            return
        if self.new and self.file.tell() == 0:
            os.unlink(self.path)
        self.file.close()


def open_calls(messages: list[dict]) -> list[str]:
    """The ids of the tool calls of the last assistant message still without their tool
    message (each tool message answers the first call still open)."""
    waiting: list[str] = []
    for message in messages:
        if message.get("role") == "tool":
            waiting = waiting[1:]
        else:
            calls = message.get("tool_calls") or []
            waiting = [call.get("id") for call in calls] if isinstance(calls, list) else []
    return waiting


def answers_to_open_calls(messages: list[dict], why: str) -> list[dict]:
    """A tool message for each call a cut-short turn (Ctrl-C, a crash) left without one, so
    the conversation can go on (a server wants every call answered before the next message)."""
    content = f"Error: {why} (it may have run in part, or not at all)"
    return [{"role": "tool", "tool_call_id": id, "content": content} for id in open_calls(messages)]


def transcript_lines(path: str | os.PathLike, tolerant: bool = False) -> list[tuple[int, dict]]:
    """(line number, message or event) for each line of a transcript.

    A line that is not a message in the shape the agent writes is refused, naming the line.
    tolerant (for --show): a last line that is not JSON and has no line end, as a crash while
    writing it leaves one, becomes {"cut_off": its text, "line": its number} instead.
    """
    try:
        with open(path, "rb") as file:
            lines = [(n, line) for n, line in enumerate(file, 1) if line.strip()]
    except OSError as error:
        raise AgentError(f"cannot read {path}: {error.strerror}") from None
    entries = []
    for number, line in lines:
        try:
            entry = json.loads(line.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as error:
            half_written = number == lines[-1][0] and not line.endswith(b"\n")  # a crash
            if half_written and tolerant:
                text = line.decode("utf-8", "replace")
                entries.append((number, {"cut_off": text, "line": number, "event": "cut off"}))
                break
            if half_written:
                raise AgentError(
                    f"{path} line {number} was only partly written (is not JSON and has no line "
                    "end): --show shows the rest; delete that line to use the file"
                ) from None
            what = "not UTF-8 text" if isinstance(error, UnicodeDecodeError) else "not JSON"
            detail = f" ({error.msg}: column {error.colno})" if what == "not JSON" else ""
            raise AgentError(
                f"{path} line {number} is {what}{detail}: is it a transcript saved by the agent?"
            ) from None
        problem = entry_problem(entry)
        if problem:
            raise AgentError(f"{path} line {number} {problem}")
        entries.append((number, entry))
    return entries


def check_conversation(path: str | os.PathLike, lines: list[tuple[int, dict]]) -> None:
    """Raise AgentError, naming the line, at the first message a server would reject for where
    it stands: a system message after the first, a tool message that does not answer the next
    open call, a message before the open calls are answered. Calls still open at the end are
    allowed: that turn was cut short (Ctrl-C, a crash), and continuing answers them."""
    messages = [(number, entry) for number, entry in lines if "event" not in entry]
    if not messages:
        raise AgentError(f"{path} has no messages, so there is no conversation to continue")
    with open(path, "rb") as file:
        data = file.read()
    if not data.rstrip(b" \t").endswith(b"\n"):  # appending would join two lines into one
        raise AgentError(
            f"{path} line {lines[-1][0]} has no line end, so the file looks cut off: check its "
            "end (add the newline if that line is complete)"
        )
    waiting: list = []
    for index, (number, message) in enumerate(messages):
        role, answers = message["role"], message.get("tool_call_id")
        ids = [call["id"] for call in message.get("tool_calls") or []]
        if role == "system" and index > 0:
            problem = "is a system message, but only the first message may be one"
        elif role == "tool" and not waiting:
            problem = f"is a tool message answering {answers!r}, but no tool call waits for one"
        elif role == "tool" and answers != waiting[0]:
            problem = f"is a tool message answering {answers!r}, but call {waiting[0]!r} is next"
        elif role != "tool" and waiting:
            problem = f"is a {role} message, but the tool calls {waiting} have no answer yet"
        elif not all(ids):
            problem = "has tool calls without an id each"
        elif len(set(ids)) < len(ids):
            problem = f"has the same tool call id twice: {ids}"
        else:
            waiting = waiting[1:] if role == "tool" else ids
            continue
        raise AgentError(f"{path} line {number} {problem}")


def entry_problem(entry: object) -> str | None:
    """What keeps a parsed transcript line from being a message or event the agent can use."""
    if isinstance(entry, dict) and "event" in entry and "role" not in entry:
        return None if isinstance(entry["event"], str) else "has an 'event' that is no string"
    return message_problem(entry)


def message_problem(message: object) -> str | None:
    """What keeps a parsed transcript line from being a message the agent can use, or None."""
    if not isinstance(message, dict):
        return f"is a JSON {json_kind(message)}, not a message object"
    role = message.get("role")
    if role not in ROLES:
        return f"has the role {json.dumps(role)}; a message's role is one of {', '.join(ROLES)}"
    text_fields = [*REASONING_FIELDS] + (["content"] if role == "assistant" else [])
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


def whole_arguments(arguments: str) -> str:
    """A call's arguments as key=value pairs, each value whole, as Python writes it (a
    command's spaces kept, its newlines as \\n); arguments that are no JSON object, as they
    are. The display escapes what would act on a terminal."""
    try:
        args = json.loads(arguments or "{}")
    except json.JSONDecodeError:
        return arguments
    if not isinstance(args, dict):
        return arguments
    return ", ".join(f"{key}={value!r}" for key, value in args.items())


def show_transcript(path: str, show, notice) -> int:
    """--show: a saved transcript as a readable timeline, handed to show line by line (which
    shows control characters as escapes: names, ids and texts are the model's, or whoever
    edited the file); notice(line) gets what goes wrong."""
    try:
        lines = transcript_lines(path, tolerant=True)
    except (AgentError, OSError) as error:
        notice(f"error: {error}")
        return 1
    if not lines:  # an empty file: say so rather than print nothing
        notice(f"{path} holds no messages")
    number = 0
    for _, entry in lines:
        event = entry.get("event")
        if event == "cut off":  # the last line, half written when the agent was stopped
            text = one_line(entry["cut_off"], 120)
            show(f"{number + 1:3} (cut off: line {entry['line']} was only partly written): {text}")
            continue
        if event == "compaction":
            before, after = entry.get("tokens_before"), entry.get("tokens_after")
            show(
                f"    --- compacted ({entry.get('kind', '?')}): the {entry.get('covers', '?')} "
                f"messages above are sent as {len(entry.get('messages', []))} from here on, "
                f"about {before} -> {after} tokens ---"
            )
            continue
        if event:
            continue  # the session line and usage lines: bookkeeping
        number += 1
        role = entry["role"]
        label = f"{number:3} {role}" + (f" [{entry['tool_call_id']}]" if role == "tool" else "")
        for field in REASONING_FIELDS:
            if entry.get(field):
                show(f"{label} (thinking): {one_line(entry[field], 160)}")
        if entry.get("content") or "tool_calls" not in entry:
            show(f"{label}: {one_line(entry.get('content') or '', 160)}")
        for call in entry.get("tool_calls") or []:
            function = call["function"]
            show(
                f"{label} calls {function['name']}({whole_arguments(function['arguments'])})"
                f" [{call['id']}]"
            )
    return 0
