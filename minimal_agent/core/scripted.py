"""Scripted stand-ins for both sides of a session, for tests and for scripts: a model client
that serves given replies (as mini-swe-agent's DeterministicModel; --replay's client is one
made from a transcript), and a user who answers the approval questions and types --chat's
messages from lists. Each is handed over where the real one would be: the client to run() or
chat(), the user to the Workspace."""

from __future__ import annotations

from types import SimpleNamespace

from minimal_agent.common.errors import AgentError

APPROVALS = {"y": "yes", "yes": "yes", "a": "all", "all": "all"}  # anything else: no


def completion(message: dict, reply_id: str, model: str):  # -> ChatCompletion
    """A real ChatCompletion holding message (an assistant message as a dict), finished as a
    server finishes it: "tool_calls" when it calls tools, else "stop". pydantic's
    ValidationError if a field is of a kind no server sends."""
    from openai.types.chat import ChatCompletion  # here: --help starts without openai

    finish_reason = "tool_calls" if message.get("tool_calls") else "stop"
    choice = {"index": 0, "message": message, "finish_reason": finish_reason}
    return ChatCompletion.model_validate(
        {"id": reply_id, "object": "chat.completion", "created": 0, "model": model,
         "choices": [choice]}
    )  # fmt: skip


class ScriptedClient:
    """Stands in for the OpenAI client: `client.chat.completions.create(...)` serves replies
    (assistant messages, as dicts) in order as real ChatCompletions, so the loop cannot tell
    the difference; no network, no key. requests keeps each request's arguments as sent, its
    messages as they were then. One more request than there are replies: AgentError."""

    def __init__(self, replies: list[dict]) -> None:
        self.replies = list(replies)
        self.requests: list[dict] = []
        self.served = 0
        self.chat = SimpleNamespace(completions=SimpleNamespace(create=self.create))

    def create(self, **request):  # -> openai.types.chat.ChatCompletion
        if request.get("stream"):
            raise AgentError("a scripted model does not stream: run without --stream")
        self.requests.append({**request, "messages": list(request.get("messages") or [])})
        if self.served == len(self.replies):
            raise AgentError(f"the script has no more replies after its {self.served}")
        message = self.replies[self.served]
        self.served += 1
        return completion(message, f"scripted-{self.served}", request.get("model") or "scripted")


class ScriptedUser:
    """Stands in for the user at the terminal (display.TerminalUser): answers are the answers
    to the approval questions, in order ("y", "a" for this and every later one of its kind,
    anything else no; none left: no, as when nobody is there), messages the --chat messages
    (none left: the session ends). asked keeps each question: ("command", command) or
    ("write", path) or ("servers", a workdir .mcp.json's text)."""

    def __init__(self, answers: list[str] = (), messages: list[str] = ()) -> None:
        self.answers, self.messages = list(answers), list(messages)
        self.asked: list[tuple[str, str]] = []
        self.approved_all: set[str] = set()  # the kinds answered with a
        self.refused: list[str] = []  # a scripted user is always there to answer

    def approves_command(self, command: str, sandboxed: bool, rule: str | None = None) -> bool:
        return self.approves("command", command, asked_anyway=bool(rule))  # a rule's: after a too

    def approves_write(self, path: str, summary: str, diff: list[str]) -> bool:
        return self.approves("write", path)

    def approves_servers(self, text: str, sandboxed: bool) -> bool:
        return self.approves("servers", text)

    def approves(self, kind: str, what: str, asked_anyway: bool = False) -> bool:
        if kind in self.approved_all and not asked_anyway:
            return True
        self.asked.append((kind, what))
        answer = APPROVALS.get(self.answers.pop(0).lower() if self.answers else "", "no")
        if answer == "all":
            self.approved_all.add(kind)
        return answer != "no"

    def next_message(self) -> str:
        return self.messages.pop(0) if self.messages else ""
