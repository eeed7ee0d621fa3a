"""The session: what lasts from the agent's start to its end, across every --chat turn, handed
to run() as one object: the tools' workspace, the conversation and its transcript, what the
server turned out to need, the totals, the budget, and the context window."""

from __future__ import annotations

import copy
import json
import os
import re

from minimal_agent.common import files
from minimal_agent.common.errors import AgentError, without_key
from minimal_agent.common.text import one_line
from minimal_agent.core import completions, cost
from minimal_agent.core.context_window import Window, describe, is_context_overflow, result_cap
from minimal_agent.core.events import Exchanges
from minimal_agent.core.replies import CUT_OFF, without_thinking
from minimal_agent.core.settings import DEFAULTS, Settings
from minimal_agent.stores import changes, conversations, wire_record
from minimal_agent.stores.transcripts import (
    Conversation,
    Transcript,
    answers_to_open_calls,
    open_calls,
)
from minimal_agent.tools import added_tools, hooks, permissions, processes

AGENTS_FILE = "AGENTS.md"  # the project's conventions for agents (agents.md), read from the workdir
AGENTS_LIMIT = 32 * 1024  # bytes of it that go into the system prompt, as Codex reads it
NO_REPLY = (  # what stands in for the reply of a turn that got none
    "[no reply: the turn ended before the model answered (its request failed or was cut short)]"
)


class BudgetReached(AgentError):
    """--max-cost: the session has spent its budget; no request is made."""


class Session:
    """Made once per session (main() or the first run()); run() and chat() pass it along.

    system_prompt starts a new conversation (with AGENTS.md from the workdir added); history is
    a conversation to go on with; save is the transcript's path (appended to, never rewritten).
    settings (minimal_agent.core.settings.Settings, whole) give the model, the sessions folder, what
    each request asks for (max_tokens, thinking, effort), the prices of each reply and the
    budget (max_cost), which stops the session before a request once it has spent that much.
    window (minimal_agent.core.context_window.Window or None) keeps
    the conversation inside the model's context window; describe(error) gives the one line
    for a failed request (api_errors.describe_api_error with the settings), or None. What happens
    goes to the workspace's events (minimal_agent.core.events.Events), for the readers subscribed
    to it; the workspace's user types --chat's messages. replayed: the replies come from a
    transcript (--replay), so no tokens are counted and nothing is spent.
    """

    def __init__(
        self,
        system_prompt: str,
        workspace,
        settings: Settings = DEFAULTS,
        *,
        history: list[dict] | None = None,
        save: str | os.PathLike | None = None,
        stream: bool = False,
        raw: bool = False,
        window=None,
        describe=None,
        replayed: bool = False,
    ) -> None:
        sessions_folder = settings.sessions_folder
        if save:  # before anything is opened
            refuse_within_reach(workspace, own_records(workspace.folder, sessions_folder, save))
        self.workspace = workspace
        self.events = workspace.events  # one stream: the tools' and the session's
        self.exchanges = Exchanges(self.events)  # what completions.ask hands over, as events
        self.user = workspace.user  # who types --chat's messages
        self.describe = describe  # an API error's one line (api_errors.describe_api_error), or None
        self.system_prompt, self.model = system_prompt, settings.model
        self.lost: list[str] = []  # the records given up (a full disk): each one's line
        self.transcript = (
            Transcript.open(save, workspace.key, self.transcript_lost) if save else None
        )
        self.messages = Conversation(history or [], self.transcript, self.appended)
        self.events.subscribe(self.keep_decisions)  # the rules' decisions, the hooks' runs
        # What each turn changes in the workdir, kept in the sessions folder for --undo, and,
        # as the transcript, out of the tools' reach.
        self.changes = self.wire = None
        if save:
            folder = sessions_folder or os.path.dirname(os.path.abspath(save))
            store = conversations.changes_folder(save, folder)
            # Every request as sent and every response as received (--show --wire), a reader
            # of the session's events, kept beside the store.
            self.wire = wire_record.Recorder(
                conversations.wire_file(save, folder),
                workspace.key,
                self.wire_lost,
                self.events.notice,
            )
            self.events.subscribe(self.wire)
            if sessions_folder:
                changes.clear_stale(sessions_folder)
            try:
                self.changes = changes.Recorder(
                    workspace.folder,
                    store,
                    workspace.private,
                    on_change=self.file_changed,
                    notice=self.events.notice,
                    on_lost=self.undo_lost,
                )
            except changes.BadStore as error:
                name = os.path.basename(save).removesuffix(conversations.SUFFIX)
                raise changes.BadStore(
                    f"the undo record of the conversation {name} does not check out ({error}): "
                    f"move {store} away to go on without it (its turns then cannot be undone)"
                ) from None
            if history:
                self.note_workdir(save)
        # A new conversation's system message, AGENTS.md read now: the line saying so comes
        # with the others at the start, before a --chat prompt asks for the first message.
        self.system_message = None if history else self.with_agents_file()
        self.stream, self.raw = stream, raw
        self.max_tokens = settings.max_tokens  # unset: the server's own limit
        # "on"/"off", EFFORTS; unset: the server's. /think and /effort change them.
        self.thinking, self.effort = settings.thinking, settings.effort
        self.quirks: set[str] = set()  # what this server turned out to need (completions.ask)
        self.prices, self.max_cost = settings.prices, settings.max_cost
        self.window = window
        self.replayed = replayed
        self.total = cost.Totals()  # the session's, over every turn that ran
        self.turn = cost.Totals()
        self.turns = self.cancelled = self.failed = 0  # turns: those that were answered
        self.turns_begun = 0  # and those cut short, by the budget or a signal too
        self.turn_start = 0  # where the current turn's messages begin
        self.in_turn = False  # a turn began and its tool calls are not counted yet
        self.servers = (
            None  # the MCP servers whose tools it has (minimal_agent/tools/mcp_servers.py)
        )
        self.refused: list[dict] = []  # the calls refused for want of approval: id, name, why

    def record_lost(self, what: str, error: OSError, step: int, then: str) -> None:
        """A record of the session could not be written (the disk full: ENOSPC, a quota:
        EDQUOT, an I/O error: EIO; or a link in its place): it is given up, said in one line
        (what is no longer kept from which step), and the run ends as an error (cli)."""
        line = f"{what} is not kept from step {step} on ({files.why(error)}): {then}"
        self.lost.append(line)
        self.events.notice(f"error: {line}")
        self.events.emit("error", error=line)

    def transcript_lost(self, error: OSError) -> None:
        step = self.turn.steps if self.in_turn and self.turn.steps else 1
        self.record_lost("the transcript", error, step, "-c and -r go on from before that step")

    def wire_lost(self, error: OSError) -> None:
        step = self.exchanges.step or 1
        what = "the record of requests and responses"
        self.record_lost(what, error, step, "--show --wire and --html end before it")

    def undo_lost(self, error: OSError, turn: int, step: int) -> None:
        self.record_lost(
            f"undo's record of turn {turn}", error, step,
            "--undo cannot take back what that step and later ones changed, and will say so",
        )  # fmt: skip

    def note_workdir(self, save: str | os.PathLike) -> None:
        """A resumed conversation going on in a workdir other than its last: said in its
        transcript, so that --undo knows where each turn ran."""
        recorded = conversations.recorded_workdirs(save)
        if not recorded or recorded[-1] != self.workspace.folder:
            self.messages.save({"event": "workdir", "workdir": self.workspace.folder})

    def keep_decisions(self, kind: str, fields: dict) -> None:
        if kind in ("permission", "hook"):
            self.messages.save({"event": kind, **fields})

    def tools(self, lesson_tools: list[dict]) -> list[dict]:
        """The tools' schemas each request sends: the lesson's, and those the session added to
        the workspace (minimal_agent/tools/added_tools.py), an added one in a lesson tool's place;
        not those a deny rule names whole (minimal_agent/tools/permissions.py)."""
        tools = added_tools.offered(lesson_tools, self.workspace.added_tools)
        return [t for t in tools if permissions.offered(self.workspace, t["function"]["name"])]

    @property
    def tools_workspace(self):
        """The workspace as the tools get it: the one made, or, once the context window is
        known to be small, a copy whose max_result_chars is the session's cap, so that one
        result never fills the window and each tool cuts its own result to fit (a file read:
        its two ends, and how much lies between). The cap is the session's, as the window:
        the workspace made is never changed."""
        made = self.workspace
        cap = result_cap(self.window and self.window.size, made.max_result_chars)
        if cap == made.max_result_chars:
            return made
        capped = copy.copy(made)
        capped.max_result_chars = cap  # the copy's own value: made keeps its own
        return capped

    @property
    def limits(self) -> dict:
        """What each request adds to model, tools and messages: max_tokens, and the thinking
        switch and effort (completions.thinking_options), each only when set."""
        limits = {"max_tokens": self.max_tokens} if self.max_tokens else {}
        return {**limits, **completions.thinking_options(self.thinking, self.effort)}

    def start(self, task: str) -> Conversation:
        """Begin a turn: the conversation (a new one: the system prompt first), any calls a
        cut-short turn left open answered, and task appended."""
        messages = self.messages
        if not messages:
            messages.save(conversations.session_event(self.workspace.folder, self.model))
            messages.append({"role": "system", "content": self.system_message})
        why = "interrupted: the agent stopped before this call had a result"
        for answer in answers_to_open_calls(messages, why):
            messages.append(answer)
        if messages[-1]["role"] == "user" and messages[-1]["content"] != task:
            # The last turn got no reply (refused, failed, Ctrl-C): a note in its place, as
            # some servers (Gemma's template) refuse two user messages in a row.
            messages.append({"role": "assistant", "content": NO_REPLY})
        # A turn the server refused (a full context, a wrong key), tried again with the same
        # words, is not added a second time.
        if not (messages[-1]["role"] == "user" and messages[-1]["content"] == task):
            # After /undo or /redo the model is told which files are back as they were.
            note = self.changes and self.changes.turn_begins(task)
            messages.append({"role": "user", "content": f"{note}\n\n{task}" if note else task})
        self.turn, self.turn_start = cost.Totals(), len(messages)
        self.in_turn = True
        self.turns_begun += 1
        self.events.emit("turn", turn=self.turn_number(), task=task)
        return messages

    def turn_number(self) -> int:
        """The number of the current turn in this session (cut-short ones count)."""
        return self.turns + self.cancelled + self.failed + 1

    def appended(self, message: dict) -> None:
        """Each message added to the conversation, told to the events' readers; a tool
        message with the reason its call was refused for want of approval, if it was."""
        refused = None
        if message.get("role") == "tool" and self.user.refused:
            refused = "; ".join(self.user.refused)
            self.user.refused.clear()
            call_id = message.get("tool_call_id")
            self.refused.append({"id": call_id, "name": self.tool_name(call_id), "why": refused})
        self.events.emit("message", message=message, refused=refused)

    def tool_name(self, call_id: str) -> str | None:
        """The name of the tool the conversation's last call with this id called."""
        for message in reversed(self.messages):
            for call in message.get("tool_calls") or []:
                if call.get("id") == call_id:
                    return call.get("function", {}).get("name")
        return None

    def file_changed(self, path: str, change: str) -> None:
        self.events.emit("file_change", path=path, change=change)

    def with_agents_file(self) -> str:
        """The system prompt, and the workdir's AGENTS.md (its first 32 KiB) after it. It is
        read through the fence, as read_file reads: a link leading outside the workdir, a
        folder, a FIFO or a device is skipped, with one line saying why."""
        try:
            path = self.workspace.path(AGENTS_FILE)
        except PermissionError:
            self.events.notice(f"skipped {AGENTS_FILE}: it is a link leading outside the workdir")
            return self.system_prompt
        try:
            with files.open_regular(self.workspace.folder, path) as file:
                data = file.read(AGENTS_LIMIT + 1)
        except FileNotFoundError:  # none: the prompt as it is
            return self.system_prompt
        except OSError as error:  # a folder, a FIFO, a device, unreadable
            self.events.notice(f"skipped {AGENTS_FILE}: {error.strerror or error}")
            return self.system_prompt
        text = data[:AGENTS_LIMIT].decode("utf-8", "ignore")  # a character cut in two: dropped
        cut = len(data) > AGENTS_LIMIT
        note = f" (only its first {AGENTS_LIMIT // 1024} KiB: it is longer)" if cut else ""
        self.events.notice(f"read {AGENTS_FILE} from the workdir into the system prompt{note}")
        cut_note = (
            "\n\n[AGENTS.md continues beyond this point; read it for the rest]" if cut else ""
        )
        return (
            f"{self.system_prompt}\n\nThe project's instructions for agents, from {AGENTS_FILE} "
            f"in the workdir:\n\n{text}{cut_note}"
        )

    def ask(self, client, request: dict, messages: list[dict], step: int):
        """One model request for step: client.chat.completions.create(**request, messages=...),
        made once the budget allows it, with the conversation as the context window allows;
        returns the ChatCompletion, its tokens and cost added up. Before its calls run, the
        workdir's state is recorded (minimal_agent/stores/changes.py), for --undo."""
        self.check_budget()
        sent = self.within_window(client, request, messages)
        if self.changes:  # the workdir stays as it is until the reply: walked meanwhile
            self.changes.walk_ahead()
        show = self.streamed_piece(step) if self.stream else None
        self.events.emit("waiting", step=step)
        try:
            try:
                resp = self.exchange(client, sent, request, step, show)
            except Exception as error:  # a full context: compacted and sent again, once
                if not self.compacted_after_overflow(client, request, messages, error):
                    raise
                sent = self.window.view(messages)
                resp = self.exchange(client, sent, request, step, show)
        finally:
            self.events.emit("waited", step=step)
        self.note_reply(resp, sent, getattr(client, "api_key", None))
        calls = resp.choices[0].message.tool_calls
        if self.changes and calls:
            self.changes.step_begins([call.function.name for call in calls], step)
        return resp

    def streamed_piece(self, step: int):
        """What completions.ask hands a streamed reply's pieces to: "thinking" and "text" as
        deltas, a "note" (a broken stream asked again) as a notice."""

        def show(kind: str, text: str) -> None:
            if kind == "note":
                self.events.notice(text)
            else:
                self.events.emit("delta", step=step, kind=kind, text=text)

        return show

    def exchange(self, client, sent: list[dict], request: dict, step: int | None, show=None):
        """completions.ask, the one place a request goes out: each attempt's body as sent and
        its response as received (or what failed) told to the events' readers, the wire's
        record among them (events.Exchanges)."""
        self.exchanges.step = step
        return completions.ask(
            client, sent, request, self.quirks, self.events.notice, show, self.exchanges
        )

    def end_step(self) -> None:
        """Record what the turn's last step changed in the workdir."""
        if self.changes:
            self.changes.step_ends()

    def command(self, message: str, client, model: str) -> bool:
        """--chat's commands: /compact, /undo, /redo (each may end with --force), /diff,
        /think on|off and /effort low|high|max (from the next turn on), and /help; any other
        "/word" is answered with the list, never sent. False for a message to be sent."""
        name, *rest = message.split() or [""]
        if name == "/compact" and not rest:
            self.compact_now(client, model)
        elif name in ("/undo", "/redo") and rest in ([], ["--force"]):
            if not self.changes:
                self.events.notice(
                    f"{name}: this conversation is not saved, so nothing was recorded"
                )
            else:
                save = self.transcript.path
                workdirs = conversations.recorded_workdirs(save)
                name_of = os.path.basename(save).removesuffix(conversations.SUFFIX)
                changes.take_back(self.changes.folder, name[1:], bool(rest), f"{name} --force",
                                  workdirs, name_of, self.events)  # fmt: skip
        elif name == "/diff" and not rest:
            try:
                changes.show_last_turn(self.changes.folder if self.changes else None, self.events)
            except changes.BadStore as error:
                self.events.notice(f"/diff: the undo record does not check out ({error})")
        elif name == "/think" and [word.lower() for word in rest] in (["on"], ["off"]):
            self.thinking = rest[0].lower()
            self.events.notice(f"thinking: {self.thinking} from the next message on")
        elif name == "/effort" and len(rest) == 1 and rest[0].lower() in completions.EFFORTS:
            self.effort = rest[0].lower()
            off = " (while thinking is off, it has none)" if self.thinking == "off" else ""
            self.events.notice(f"effort: {self.effort} from the next message on{off}")
        elif name in ("/think", "/effort"):
            takes = "on or off" if name == "/think" else ", ".join(completions.EFFORTS)
            self.events.notice(f"{name} takes {takes}; nothing was sent")
        elif name == "/help" and not rest:
            self.show_commands("the commands (at the '> ' prompt):")
        elif name in COMMANDS:
            self.show_commands(
                f"{name} takes no {' '.join(rest)!r}; nothing was sent. The commands:"
            )
        elif re.fullmatch(r"/[A-Za-z][\w-]*", name):  # a typo of a command, not a /path
            self.show_commands(f"{name} is not a command, so nothing was sent. The commands:")
        else:
            return False
        return True

    def show_commands(self, heading: str) -> None:
        self.events.notice(heading)
        for name, what in COMMANDS.items():
            self.events.notice(f"  {name:9} {what}")

    def within_window(self, client, request: dict, messages: list[dict]) -> list[dict]:
        """What to send: the conversation, compacted first if this request would pass the
        threshold of the context window (minimal_agent/core/context_window.py)."""
        if not self.window:
            return messages
        self.keep(self.window.before_request(messages, self.summarizer(client, request)))
        return self.window.view(messages)

    def compacted_after_overflow(self, client, request, messages, error) -> bool:
        """The server said the context is full: compact (the record kept), True; or False if
        this is no such error or nothing is left to compact."""
        if not (self.window and is_context_overflow(error)):
            return False
        self.events.notice("context: the server says the conversation does not fit; compacting it")
        record = self.window.on_overflow(error, messages, self.summarizer(client, request))
        if not self.keep(record):
            self.events.notice("context: nothing in the conversation can be compacted any further")
        return record is not None

    def compact_now(self, client, model: str) -> None:
        """/compact in --chat: compact everything said so far, now."""
        if not self.window:
            self.window = Window(None)
        request = {"model": model, **self.limits}
        record = self.window.compact(self.messages, self.summarizer(client, request))
        if not self.keep(record):
            self.events.notice("context: nothing to compact yet")

    def keep(self, record: dict | None) -> dict | None:
        """A compaction's record into the transcript, and its line for the user."""
        if record:
            self.messages.save(record)
            self.events.emit("compacted", record=record, text=describe(record, self.window.size))
        return record

    def summarizer(self, client, request: dict):
        """The function a compaction calls for a summary: one request without tools (its
        tokens and cost counted), the reply's text; None if it fails, so the compaction falls
        back on shortening old tool results."""

        def summarize(summary_messages: list[dict], max_tokens: int) -> str | None:
            self.events.notice("context: asking the model to summarize the earlier conversation")
            summary_request = {"model": request["model"], "max_tokens": max_tokens}
            try:
                resp = self.exchange(client, summary_messages, summary_request, None)
            except Exception as error:  # the summary is a nicety: never the end of the run
                said = without_key(str(error), getattr(client, "api_key", None))
                self.events.notice(f"context: no summary ({one_line(said, 160)})")
                return None
            self.add_up(resp)
            reply = resp.choices[0].message.content if resp.choices else None
            return without_thinking(reply or "")

        return summarize

    def check_budget(self) -> None:
        if self.max_cost is None or self.replayed:  # a replayed reply costs nothing
            return
        budget = cost.money(self.max_cost, self.prices.currency)
        if self.total.unknown:  # what it cost cannot be known, so neither what is left
            raise BudgetReached(
                "stopped: the server reports no usage (token counts) with its replies, so the "
                f"budget (--max-cost {budget}) cannot be kept; to go on with this server, run "
                "without --max-cost and LLM_MAX_COST"
            )
        if self.total.cost >= self.max_cost:
            spent = cost.money(self.total.cost, self.prices.currency)
            raise BudgetReached(
                f"stopped: the budget (--max-cost {budget}) is spent ({spent} so far); the "
                "conversation is saved: resume it (-c) to go on, with a budget of its own"
            )

    def note_reply(self, resp, sent: list[dict], key: str | None) -> None:
        """Print the raw response (--raw), warn of a cut-off reply or of a server that cut the
        conversation, add up tokens and cost. key: the client's, removed from what is quoted."""
        if self.raw:
            for line in without_key(resp.model_dump_json(indent=2, warnings=False), key).split(
                "\n"
            ):
                self.events.notice(line)
        if not resp.choices:  # some proxies answer 200 with an error body and no choices
            error = json.dumps((resp.model_extra or {}).get("error", ""))
            detail = one_line(without_key(error, key), 200)
            raise AgentError(f"the server's reply has no choices {detail}".rstrip())
        reason, message = resp.choices[0].finish_reason, resp.choices[0].message
        if reason in CUT_OFF:
            warning = f"warning: the reply was cut off (finish_reason {reason})"
            self.events.notice(f"{warning}; it may be incomplete")
        elif not message.tool_calls and not without_thinking(message.content or "").strip():
            self.events.notice(
                "warning: the model's final reply has no answer text (only its reasoning, or "
                "nothing)"
            )
        counts = self.add_up(resp, self.turn.steps + 1)
        self.turn = self.turn._replace(steps=self.turn.steps + 1)
        self.total = self.total._replace(steps=self.total.steps + 1)
        if self.window:
            warning = self.window.after_reply(sent, counts["prompt_tokens"] or None)
            if warning:  # it begins with "warning:" itself
                self.events.notice(warning)

    def add_up(self, resp, step: int | None = None) -> dict:
        """A reply's tokens and cost (of step; None: a summary's), added to the turn's and the
        session's totals and kept in the transcript; returns its token counts."""
        counts = cost.token_counts(resp.usage)
        known = cost.usage_known(resp.usage)
        spent = self.prices.cost(resp.usage, resp.created) if self.prices and known else None
        self.turn = self.turn.with_reply(counts, spent, known)
        self.total = self.total.with_reply(counts, spent, known)
        currency = self.prices.currency if self.prices else None
        event = {"event": "usage", "created": resp.created, **counts, "cost": spent}
        self.messages.save({**event, "currency": currency})
        message = resp.choices[0].message if resp.choices else None
        self.events.emit(
            "reply",
            step=step,
            finish_reason=resp.choices[0].finish_reason if resp.choices else None,
            content=message and message.content,
            tool_calls=len(message and message.tool_calls or []),
            usage=counts,
            cost=spent,
            currency=currency,
        )
        return counts

    def finish(self, stop_reason: str, text: str | None) -> dict:
        """The turn's result (see agent.run): its answer (None: it has none) and its totals
        told to the events' readers."""
        if text is not None:
            self.events.emit("answer", text=text, streamed=self.stream)
        self.end_step()
        self.count_tool_calls()
        hooks.at_stop(self.workspace)
        self.events.emit("turn_end", turn=self.turn_number(), status=stop_reason, error=None)
        self.turns += 1
        self.tell_usage("turn", self.turn)
        return {"text": text, "stop_reason": stop_reason, "messages": self.messages,
                **self.turn.fields()}  # fmt: skip

    def count_tool_calls(self) -> None:
        """The turn's tool calls added to its totals and the session's, once: each call whose
        result came back, and the one that was running when the turn was cut short."""
        if not self.in_turn:
            return
        self.in_turn = False
        turn_messages = self.messages[self.turn_start :]
        results = sum(1 for m in turn_messages if m["role"] == "tool")
        self.turn = self.turn._replace(tool_calls=results + (1 if open_calls(turn_messages) else 0))
        self.total = self.total._replace(tool_calls=self.total.tool_calls + self.turn.tool_calls)

    def stopped(self, chat: bool) -> bool:
        """A run or a --chat session cut short (Ctrl-C, an error, the budget): once a reply
        was paid for, its totals are said as at a normal end (True); else nothing (False)."""
        if self.in_turn and chat:
            self.cancelled += 1
        self.count_tool_calls()
        if not (any(self.total.usage) or self.total.unknown):
            return False  # no reply from a model yet
        self.tell_usage("session" if chat else "run", self.total)
        return True

    def tell_usage(self, scope: str, totals: cost.Totals) -> None:
        """The totals of a turn, a run or a --chat session (scope), for the events' readers."""
        self.events.emit(
            "usage", scope=scope, totals=totals, turns=self.turns, cancelled=self.cancelled,
            failed=self.failed, currency=self.prices.currency if self.prices else None,
            replayed=self.replayed,
        )  # fmt: skip

    def fail_turn(self, error: Exception) -> None:
        """A --chat turn whose request failed (refused, not answered, a reply that cannot be
        used): one line, and the turn ends; the next message goes on in the conversation. The
        budget, and what is no such failure (a bug), end the session: raised again."""
        said = None
        if isinstance(error, AgentError) and not isinstance(error, BudgetReached):
            said = str(error)
        elif self.describe:
            said = self.describe(error)
        if not said:
            raise error
        self.end_step()  # what the turn's tools changed so far can be undone
        self.count_tool_calls()
        said = without_key(said, self.workspace.key)  # it may quote what the server sent
        self.events.emit("turn_end", turn=self.turn_number(), status="error", error=said)
        self.failed += 1
        self.events.notice(f"error: {said}; the turn ended: type the next message, or Enter to end")

    def cancel_turn(self) -> None:
        """Ctrl-C during a --chat turn: the turn ends, its open calls answered."""
        self.end_step()
        self.count_tool_calls()
        for answer in answers_to_open_calls(self.messages, "interrupted by the user (Ctrl-C)"):
            self.messages.append(answer)
        self.events.emit("turn_end", turn=self.turn_number(), status="interrupted", error=None)
        self.cancelled += 1
        self.events.notice(
            "interrupted: the turn was cancelled; type the next message, or Enter to end"
        )
        processes.interrupt_handled()  # the session goes on: the next Ctrl-C acts again

    def end(self, result: dict) -> dict:
        """The end of a --chat session: its totals line; result with the session's totals."""
        self.tell_usage("session", self.total)
        counted = {"turns": self.turns, "cancelled": self.cancelled, "failed": self.failed}
        return {**result, "messages": self.messages, **self.total.fields(), **counted}

    def close(self) -> None:
        if self.servers:
            self.servers.close()
        if self.changes:
            self.changes.close()
        if self.wire:
            self.wire.close()
        if self.transcript:
            self.transcript.close()


def own_records(workdir: str, sessions_folder, save) -> list[str]:
    """The real paths the tools must never touch (Workspace.private) for the conversation saved
    in save: the sessions folder (every conversation's transcript, store and record of
    requests), unless the workdir lies inside it, then this conversation's only; and a --save
    FILE transcript wherever it is. Known before the session's workspace is made."""
    folder = sessions_folder or os.path.dirname(os.path.abspath(save))
    store = conversations.changes_folder(save, folder)
    records = (save, store, conversations.wire_file(save, folder))
    paths = [os.path.realpath(path) for path in records]
    if sessions_folder:
        folder = os.path.realpath(sessions_folder)
        try:
            holds_workdir = os.path.commonpath([folder, workdir]) == folder
        except ValueError:  # Windows: another drive
            holds_workdir = False
        if not holds_workdir:
            paths.append(folder)
    return paths


def refuse_within_reach(workspace, records: list[str]) -> None:
    """AgentError if a tool could reach one of the session's records (own_records): one in the
    workdir, or (a sandbox hides only the private paths) any, that workspace.private leaves
    out. Its maker names them (private=...), so the workspace is whole before the session."""
    for path in records:
        reachable = workspace.sandbox or files.inside(workspace.folder, path)
        if reachable and not any(files.inside(mine, path) for mine in workspace.private):
            raise AgentError(
                f"{path} would be within the tools' reach: make the workspace with "
                "private=session.own_records(workdir, sessions_folder, save) among its paths"
            )


COMMANDS = {  # --chat's commands, as /help lists them
    "/help": "this list",
    "/compact": "compact the conversation now",
    "/diff": "show what the last turn changed",
    "/undo": "take the last turn's changes back (--force: over files changed since)",
    "/redo": "put back what /undo took away (--force as for /undo)",
    "/think": "on|off: DeepSeek's thinking, from the next message on",
    "/effort": "low|high|max: how hard DeepSeek thinks, from the next message on",
    "/exit": "end the session (so do /quit, an empty line and Ctrl-D)",
}
