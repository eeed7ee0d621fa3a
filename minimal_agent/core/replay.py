"""--replay: a client that serves a transcript's assistant messages in order, so a recorded run
is played again with no model, no network and no key (the tools run for real)."""

from __future__ import annotations

import os

from minimal_agent.common.errors import AgentError
from minimal_agent.core.context_window import ELIDED, SUMMARY_HEADING
from minimal_agent.core.scripted import ScriptedClient, completion
from minimal_agent.stores.transcripts import transcript_lines
from minimal_agent.tools import daily_tools


def recorded_summary(entry: dict) -> str | None:
    """The model's summary a transcript's compaction record was made with, or None (no such
    record, or one that shortened tool results only)."""
    if entry.get("event") != "compaction" or entry.get("kind") != "summary":
        return None
    for message in entry.get("messages") or []:
        if not isinstance(message, dict) or message.get("role") != "user":
            continue
        content = message.get("content")
        if isinstance(content, str) and content.startswith(SUMMARY_HEADING):
            return content.split(":\n\n", 1)[-1]  # after the heading's own line
    return None


class ReplayClient(ScriptedClient):
    """The scripted client of a transcript: serves its assistant messages, in order (see
    minimal_agent/core/scripted.py), and a compaction's summary request the summary the run got.
    When a tool result sent differs from the recorded one, notify is told once: the recorded
    replies that follow were written for another result."""

    def __init__(self, path: str | os.PathLike, notify) -> None:
        self.path = path
        entries = transcript_lines(path)
        lines = [(n, entry) for n, entry in entries if "event" not in entry]
        self.messages = [message for _, message in lines]
        # A compaction's summary request (no tools) gets the summary the run got, never the
        # next recorded reply, which belongs to the conversation.
        self.summaries = [
            text for _, entry in entries if (text := recorded_summary(entry)) is not None
        ]
        replies = [(n, m) for n, m in lines if m["role"] == "assistant"]
        if not replies:
            raise AgentError(f"{path} has no assistant messages to replay")
        super().__init__([message for _, message in replies])
        self.line_numbers = [n for n, _ in replies]  # in the transcript, for its errors
        # The tool results recorded after each reply, to compare with the ones the run sends.
        self.recorded_results: list[list[str]] = []
        for message in self.messages:
            if message["role"] == "assistant":
                self.recorded_results.append([])
            elif message["role"] == "tool" and self.recorded_results:
                self.recorded_results[-1].append(message["content"])
        self.notify = notify
        self.on_recorded_path = True

    def task(self) -> str | None:
        """The transcript's first user message: the task it was recorded with."""
        return next((m["content"] for m in self.messages if m["role"] == "user"), None)

    def create(self, **request):  # -> openai.types.chat.ChatCompletion
        from pydantic import ValidationError  # here: --help starts without pydantic

        model = request.get("model", "replay")
        if not request.get("tools"):  # a compaction's summary
            if not self.summaries:
                raise AgentError("the transcript has no more summaries of the conversation")
            summary = {"role": "assistant", "content": self.summaries.pop(0)}
            return completion(summary, "replay-summary", model)
        if self.served == len(self.replies):
            raise AgentError(
                f"the transcript has no more replies after its {self.served} assistant messages"
            )
        if not self.served:
            self.check_tools(request["tools"])
        self.check_path(request.get("messages") or [])
        try:
            return super().create(**request)
        except ValidationError as error:  # a field the agent does not write, hand-edited
            problem = error.errors()[0]
            field = ".".join(str(part) for part in problem["loc"][3:]) or "message"
            raise AgentError(
                f"{self.path} line {self.line_numbers[self.served - 1]} cannot be replayed: "
                f"{field}: {problem['msg']}"
            ) from None

    def check_tools(self, offered: list[dict]) -> None:
        """Say which tools the transcript calls that this run does not offer (the daily tools
        of a run of minimal-agent, replayed by python agent.py), before the first reply."""
        names = {tool["function"]["name"] for tool in offered}
        called = [
            call["function"]["name"]
            for message in self.replies
            for call in message.get("tool_calls") or []
            if isinstance(call, dict)
            and isinstance(call.get("function"), dict)
            and isinstance(call["function"].get("name"), str)  # a hand-edited line: no name
        ]
        missing = [name for name in dict.fromkeys(called) if name not in names]
        if not missing:
            return
        daily = set(missing) & set(daily_tools.FUNCTIONS)
        hint = f" ({', '.join(sorted(daily))}: set LLM_DAILY_TOOLS=1)" if daily else ""
        self.notify(
            f"note: the transcript calls {', '.join(missing)}, which this run does not offer"
            f"{hint}, so the replay will leave the recorded path there"
        )

    def check_path(self, messages: list[dict]) -> None:
        """Say once when the tool results sent are not the ones recorded after the last reply."""
        if not (self.on_recorded_path and self.served):
            return
        sent = []
        for message in reversed(messages):
            if message.get("role") != "tool":
                break
            sent.insert(0, message.get("content"))
        recorded = self.recorded_results[self.served - 1]
        # A result the replay's own compaction turned into a note is no difference in the run.
        if len(sent) != len(recorded) or any(
            now != then and not str(now).startswith(ELIDED)
            for now, then in zip(sent, recorded, strict=True)
        ):
            self.on_recorded_path = False
            self.notify(
                f"note: the run has left the recorded path: a tool result differs from the one "
                f"in {self.path}, so the recorded replies from here on may not fit"
            )
