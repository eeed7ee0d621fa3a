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

from minimal_agent import sessions
from minimal_agent.errors import AgentError, without_key

BASES = 3  # a request's base is one of the last few: a compaction's summary request, made
# between two requests of the conversation, does not make the next one start anew


class Recorder:
    """Keeps a conversation's requests and responses in path (appended to; made when the first
    one comes). Fed at one place, completions.recorded(): record() for a response, failed()
    for a request that got none. key: the API key, replaced wherever it would be written."""

    def __init__(self, path: str | os.PathLike, key: str = "") -> None:
        self.path = Path(path)
        self.key = key
        self.file = None
        self.number = 0  # the last exchange's
        self.recent: list[dict] = []  # the last BASES requests, rebuilt: number, messages, fields

    def record(self, body: dict, resp, started: float, seconds: float, streamed: bool,
               chunks: int | None) -> None:  # fmt: skip
        """A response: its JSON, the time it took, and for a stream how many chunks made it."""
        self.write(body, started, seconds, streamed, chunks, {"response": as_json(resp)})

    def failed(self, body: dict, error: BaseException, started: float, seconds: float) -> None:
        """A request that got no usable response: what went wrong instead."""
        said = f"{type(error).__name__}: {error}".strip().removesuffix(":")
        streamed = bool(body.get("stream"))
        self.write(body, started, seconds, streamed, None, {"error": said})

    def write(self, body, started, seconds, streamed, chunks, outcome: dict) -> None:
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
        self.file.write((text + "\n").encode("utf-8"))
        self.file.flush()

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
        self.file = sessions.open_for_append(self.path)
        if self.file.tell() and not ends_with_newline(self.path):
            self.file.write(b"\n")  # a line half written when the agent was stopped ends here

    def close(self) -> None:
        if self.file:
            self.file.close()


def shared_prefix(earlier: list[dict], messages: list[dict]) -> int:
    """How many leading messages the two lists have in common."""
    count = 0
    for old, new in zip(earlier, messages, strict=False):
        if old is not new and old != new:
            break
        count += 1
    return count


def as_json(resp) -> object:
    """A response as JSON: the fields the server sent (a ChatCompletion's, as the SDK read
    them; a stream's, as its chunks made them)."""
    if hasattr(resp, "model_dump"):
        return resp.model_dump(mode="json", exclude_unset=True, warnings=False)
    if isinstance(resp, dict | list | str | int | float | bool) or resp is None:
        return resp
    return repr(resp)


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


def rebuilt(entry: dict, recent: dict[int, dict]) -> dict:
    """An exchange as exchanges() gives it, its request rebuilt on one of recent's."""
    request = entry["request"]
    base = recent[request["base"]] if request["base"] is not None else None
    same, new = request["same"], request["messages"]
    fields = request["fields"] if "fields" in request else base["fields"]
    return {
        "number": entry["exchange"],
        "started": entry.get("started"),
        "seconds": entry.get("seconds"),
        "streamed": entry.get("streamed"),
        "chunks": entry.get("chunks"),
        "body": {"messages": (base["body"]["messages"][:same] if base else []) + new, **fields},
        "base": request["base"],
        "same": same,
        "new": new,
        "origins": (base["origins"][:same] if base else []) + [entry["exchange"]] * len(new),
        "fields": fields,
        "fields_changed": "fields" in request,
        "response": entry.get("response"),
        "error": entry.get("error"),
    }
