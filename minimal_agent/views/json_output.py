"""The outputs for scripts, two readers of the events (minimal_agent/core/events.py): --json, one
object on stdout when the run ends, however it ends, and --json-events, one object a line as
the run goes (docs/json.md); and the end record both write, kept by Outcome."""

from __future__ import annotations

import contextlib
import json
import os
import sys
from typing import TextIO

from minimal_agent.common.errors import without_key
from minimal_agent.core.events import Events

VERSION = 1  # of the records --json and --json-events write; a reader can check it
MONEY_PLACES = 10  # a cost as --json and --json-events write it: rounded so, in plain notation
STATUSES = {0: "finished", 3: "max_steps", 4: "incomplete", 5: "refused", 130: "interrupted"}
EXIT_STATUSES = {1: "error", 2: "usage"}  # a run that ended without a result


class Outcome:
    """A reader that keeps what the end record needs to know: the files the run changed (the
    first state and the last of each path), the last error line; and, set by the command
    line, the session (once opened) and the run's result (once it returned)."""

    def __init__(self) -> None:
        self.files: dict[str, list[bool]] = {}  # path -> [existed before, exists now]
        self.error: str | None = None
        self.session = None
        self.result: dict | None = None

    def __call__(self, kind: str, fields: dict) -> None:
        if kind == "file_change":
            path, change = fields["path"], fields["change"]
            first = self.files.setdefault(path, [change != "created", True])
            first[1] = change != "deleted"
        elif kind in ("error", "turn_end") and fields.get("error"):
            self.error = fields["error"]

    def changed_files(self) -> dict[str, list[str]]:
        found: dict[str, list[str]] = {"created": [], "changed": [], "deleted": []}
        for path, (before, now) in sorted(self.files.items()):
            if before or now:  # made and removed again: no change
                found["changed" if before and now else "created" if now else "deleted"].append(path)
        return found


def end_record(outcome: Outcome, exit_code: int) -> dict:
    """How the run ended, for scripts: status and exit code, the answer, the session's id,
    workdir and model, its steps, tool calls, tokens and cost, the files it changed (None
    when nothing was recorded: --no-save, --replay), and an error's one line."""
    session, result = outcome.session, outcome.result
    status = STATUSES.get(exit_code) or EXIT_STATUSES.get(exit_code)
    if result and exit_code in (0, 3, 4):
        status = result["stop_reason"]
    elif exit_code == 3:
        status = "budget"
    status = status or "terminated"  # 143, 129: a signal
    record: dict = {"version": VERSION, "status": status, "exit_code": exit_code}
    record["answer"] = result["text"] if result else None
    record["error"] = outcome.error if status in ("error", "usage", "budget") else None
    transcript = session and session.transcript
    path = str(transcript.path) if transcript else None
    if path and not os.path.exists(path):  # a transcript nothing was written to is removed
        path = None
    record["session_id"] = path and os.path.basename(path).removesuffix(".jsonl")
    record["transcript"] = path
    record["workdir"] = session.workspace.folder if session else None
    record["model"] = session.model if session else None
    total = session.total if session else None
    record["turns"] = session.turns_begun if session else 0
    record["steps"] = total.steps if total else 0
    record["tool_calls"] = total.tool_calls if total else 0
    usage = total.usage._asdict() if total else {}
    record["usage"] = {
        name: usage.get(name, 0)
        for name in ("prompt_tokens", "cache_hit_tokens", "completion_tokens")
    }
    priced = bool(session and session.prices)
    record["cost"] = total.cost if priced and not total.unknown else None
    record["currency"] = session.prices.currency if priced else None
    record["refused"] = session.refused if session else []
    recorded = bool(session and session.changes)
    record["files"] = outcome.changed_files() if recorded else None
    return record


def write(out: TextIO, record: dict, key: str) -> None:
    """One JSON object on a line of its own, handed on at once (ASCII only: whatever the
    console's encoding, the line stays valid JSON), the API key replaced (the user may have
    typed it, and the model repeated it). Its cost, in every record a field of the top level,
    is written as money_json() writes it."""
    fields = (
        f"{json.dumps(name)}: {money_json(value) if name == 'cost' else json.dumps(value)}"
        for name, value in record.items()
    )
    with contextlib.suppress(BrokenPipeError, ValueError):  # the script stopped reading
        out.write(without_key("{" + ", ".join(fields) + "}", key) + "\n")
        out.flush()


def money_json(amount: float | None) -> str:
    """An amount as a JSON number rounded to MONEY_PLACES, in plain notation: 0.0000588, never
    5.88e-05 nor 0.00023753399999999997 (float noise)."""
    if amount is None:
        return "null"
    return f"{amount:.{MONEY_PLACES}f}".rstrip("0").rstrip(".")


class JsonResult:
    """--json: the end record, the only thing on stdout."""

    def __init__(self, out: TextIO, events: Events) -> None:
        self.out, self.events = out, events

    def __call__(self, kind: str, fields: dict) -> None:
        if kind == "end":
            write(self.out, fields, self.events.key)


class JsonLines:
    """--json-events: one object a line as the run goes, each with its version and type:
    turn_start, reply, tool_call, tool_result, file_change, permission, hook, mcp_server,
    turn_end, and last end (the record --json writes). The request and response bodies stay
    off it."""

    def __init__(self, out: TextIO, events: Events) -> None:
        self.out, self.events = out, events
        self.step: int | None = None

    def __call__(self, kind: str, fields: dict) -> None:
        for record in self.records(kind, fields):
            write(self.out, {"version": VERSION, **record}, self.events.key)

    def records(self, kind: str, fields: dict):
        if kind == "turn":
            yield {"type": "turn_start", **fields}
        elif kind == "reply":
            self.step = fields["step"] if fields["step"] is not None else self.step
            yield {"type": "reply", **fields}
        elif kind == "message" and fields["message"].get("tool_calls"):
            for call in fields["message"]["tool_calls"]:
                function = call.get("function", {})
                yield {
                    "type": "tool_call",
                    "step": self.step,
                    "id": call.get("id"),
                    "name": function.get("name"),
                    "arguments": function.get("arguments"),
                }
        elif kind == "message" and fields["message"].get("role") == "tool":
            message = fields["message"]
            content = message.get("content")
            failed = isinstance(content, str) and content.startswith("Error:")
            yield {"type": "tool_result", "id": message.get("tool_call_id"), "content": content,
                   "error": failed, "refused": fields.get("refused")}  # fmt: skip
        elif kind in ("file_change", "turn_end", "permission", "hook", "mcp_server"):
            yield {"type": kind, **fields}
        elif kind == "end":
            yield {"type": "end", **{k: v for k, v in fields.items() if k != "version"}}


def for_options(json_result: bool, json_lines: bool, out: TextIO) -> tuple[Events, Outcome]:
    """The stream of a command-line run and its outcome's keeper, with the reader that
    --json or --json-events asks for writing to out."""
    events, outcome = Events(), Outcome()
    events.subscribe(outcome)
    if json_result:  # with both (a usage error), --json's one object
        events.subscribe(JsonResult(out, events))
    elif json_lines:
        events.subscribe(JsonLines(out, events))
    return events, outcome


@contextlib.contextmanager
def answers_on_stderr(on: bool):
    """While a JSON mode owns stdout, what else would go there (the answer) goes to stderr."""
    if not on:
        yield
        return
    with contextlib.redirect_stdout(sys.stderr):
        yield
