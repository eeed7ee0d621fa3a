"""What happens in a run, as one stream of events that readers subscribe to: the session, the
loop (agent.run) and the tools emit each event once, and every reader gets all of them. The
readers: the terminal view (minimal_agent/views/display.py), the wire's record, and the outputs for
scripts (minimal_agent/views/json_output.py: --json and --json-events). A new output is one more
reader.

The events, each a kind and its fields (KINDS; emit() refuses any other):

    turn         turn (its number in this session), task
    chat         (none): a --chat session begins
    waiting      step: a request goes out, its reply is awaited
    delta        step, kind ("thinking" or "text"), text: a piece of a streamed reply
    waited       step: the reply is in (or the request failed)
    request      step, body: the request as handed to the SDK (model, the messages as sent,
                 after any compaction, tools, every parameter; a streamed one also gets
                 stream and stream_options)
    response     step, body: the reply as received (a dict), started, seconds, streamed,
                 chunks (not counted yet: None), error (what failed instead, or None)
    reply        step (None for a compaction's summary), finish_reason, content, tool_calls (how
                 many), usage (prompt, cache-hit and completion tokens), cost, currency
    message      message: each one appended to the conversation (the tool calls and results);
                 refused: for a tool result, why its call was refused for want of an
                 approval nobody could give (no terminal, too small a one), else None
    tool_call    step, call: a call about to run
    tool_result  step, call, result: what the model gets back for it
    command_started, command_output (text: a piece as it arrives), command_ended: run_shell's
                 command, from start to end
    diff         lines, everywhere: a unified diff (a write's: shown on a terminal only)
    notice       text: one line for the user (a warning, a note, what a command did)
    compacted    record (the transcript's compaction record), text: its one line
    file_change  path, change: "created", "changed" or "deleted" (from the undo record)
    permission   tool, decision ("deny", "ask" or "allow"), rules (as written), sources: a
                 permission rule decided a call (minimal_agent/tools/permissions.py)
    hook         hook_event, tool (None for Stop), command, exit_code (None: timed out),
                 timed_out, outcome ("ok", "blocked", "feedback", "warning"), seconds
    mcp_server   name, file, project, status ("started", "failed", "skipped", "lost"), tools,
                 error: an MCP server as the session starts it, or lost while in use
    answer       text, streamed: the final answer of a turn
    usage        scope ("turn", "run" or "session"), totals (cost.Totals: steps, tool_calls,
                 usage, cost, unknown), turns, cancelled, failed, currency (None: no prices),
                 replayed
    turn_end     turn, status ("finished", "incomplete", "max_steps", "error", "interrupted"),
                 error (its one line, or None)
    error        error: the one line of what ended the run
    end          the end record (see end_record)
"""

from __future__ import annotations

from collections.abc import Callable

Reader = Callable[[str, dict], None]
KINDS: dict[str, tuple[str, ...] | None] = {  # each kind's fields (None: the end record's)
    "turn": ("turn", "task"),
    "chat": (),
    "waiting": ("step",),
    "delta": ("step", "kind", "text"),
    "waited": ("step",),
    "request": ("step", "body"),
    "response": ("step", "body", "started", "seconds", "streamed", "chunks", "error"),
    "reply": ("step", "finish_reason", "content", "tool_calls", "usage", "cost", "currency"),
    "message": ("message", "refused"),
    "tool_call": ("step", "call"),
    "tool_result": ("step", "call", "result"),
    "command_started": (),
    "command_output": ("text",),
    "command_ended": (),
    "diff": ("lines", "everywhere"),
    "notice": ("text",),
    "compacted": ("record", "text"),
    "file_change": ("path", "change"),
    "permission": ("tool", "decision", "rules", "sources"),
    "hook": ("hook_event", "tool", "command", "exit_code", "timed_out", "outcome", "seconds"),
    "mcp_server": ("name", "file", "project", "status", "tools", "error"),
    "answer": ("text", "streamed"),
    "usage": ("scope", "totals", "turns", "cancelled", "failed", "currency", "replayed"),
    "turn_end": ("turn", "status", "error"),
    "error": ("error",),
    "end": None,
}


class Events:
    """The stream: emit(kind, **fields) hands the event to every reader, in the order they
    subscribed; an event of no known kind, or with other fields, is a bug (TypeError).
    Without readers an event costs a check."""

    def __init__(self) -> None:
        self.readers: list[Reader] = []
        self.key = ""  # the API key, once the settings are read: kept out of what readers write

    def subscribe(self, reader: Reader) -> None:
        self.readers.append(reader)

    def emit(self, kind: str, /, **fields) -> None:
        expected = KINDS.get(kind, ())
        if kind not in KINDS or (expected is not None and fields.keys() != set(expected)):
            raise TypeError(f"no event {kind} with the fields {', '.join(fields)}")
        for reader in self.readers:
            reader(kind, fields)

    def notice(self, text: str) -> None:
        """A notice: one line for the user."""
        self.emit("notice", text=text)


def as_json(resp) -> object:
    """A response as JSON: the fields the server sent (a ChatCompletion's, as the SDK read
    them; a stream's, as its chunks made them)."""
    if hasattr(resp, "model_dump"):
        return resp.model_dump(mode="json", exclude_unset=True, warnings=False)
    if isinstance(resp, dict | list | str | int | float | bool) or resp is None:
        return resp
    return repr(resp)


class Exchanges:
    """What completions.recorded() hands over for each request that went out, told as a
    "request" and a "response" event; step is set by the session before each request."""

    def __init__(self, events: Events) -> None:
        self.events, self.step = events, None

    def record(self, body: dict, resp, started: float, seconds: float, streamed: bool,
               chunks: int | None) -> None:  # fmt: skip
        body = {**body, "messages": list(body.get("messages") or [])}  # as it was, not as it grows
        self.events.emit("request", step=self.step, body=body)
        self.events.emit("response", step=self.step, body=as_json(resp), started=started,
                         seconds=seconds, streamed=streamed, chunks=chunks, error=None)  # fmt: skip

    def failed(self, body: dict, error: BaseException, started: float, seconds: float) -> None:
        body = {**body, "messages": list(body.get("messages") or [])}
        self.events.emit("request", step=self.step, body=body)
        self.events.emit("response", step=self.step, body=None, started=started,
                         seconds=seconds, streamed=bool(body.get("stream")), chunks=None,
                         error=error)  # fmt: skip
