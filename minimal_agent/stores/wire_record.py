"""The wire: every request a saved conversation sent and every response it got, kept exactly,
beside the transcript (conversations.wire_file), so that any past run can be looked at as the
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

from minimal_agent.common import files
from minimal_agent.common.errors import AgentError, without_key
from minimal_agent.stores import conversations

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
        conversations.lock(self.file.fileno(), self.path)  # as the transcript's: one writer
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


def read_record(transcript: str | os.PathLike, folder: str | os.PathLike | None = None) -> list:
    """A conversation's exchanges, from its record in the sessions folder (folder), else the
    one beside the transcript (as the examples ship it); AgentError if it has none."""
    record = conversations.wire_file(transcript, folder)
    if not record.exists():
        record = conversations.wire_file(transcript)
    if not record.exists():
        raise AgentError(
            f"{transcript} has no record of its requests and responses ({record.name} beside "
            "it): only conversations saved by this version of the agent have one"
        )
    return list(exchanges(record))
