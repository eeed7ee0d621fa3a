"""The loop and the session through their two doors: a scripted model and a scripted user in,
the list of events out. (What the terminal makes of the events is tested where the screen is
the point: test_terminal.py, test_fitted_prompts.py, test_stream.py.)"""

from __future__ import annotations

import pytest
from fake_model import FakeClient, completion, reply, tool_call

import agent
from minimal_agent.common.errors import AgentError
from minimal_agent.core import cost
from minimal_agent.core.events import Events
from minimal_agent.core.scripted import ScriptedClient, ScriptedUser
from minimal_agent.core.session import Session
from minimal_agent.core.settings import Settings
from minimal_agent.views import display


class Seen:
    """A reader that keeps every event."""

    def __init__(self) -> None:
        self.events: list[tuple[str, dict]] = []

    def __call__(self, kind: str, fields: dict) -> None:
        self.events.append((kind, fields))

    def kinds(self) -> list[str]:
        return [kind for kind, _ in self.events]

    def of(self, kind: str) -> list[dict]:
        return [fields for k, fields in self.events if k == kind]

    def notices(self) -> list[str]:
        return [fields["text"] for fields in self.of("notice")]


def session_for(workdir, user=None, seen=None, **options) -> Session:
    events = Events()
    events.subscribe(seen or Seen())
    workspace = agent.Workspace(workdir, user=user or ScriptedUser(), events=events,
                                confirm_writes=options.pop("confirm_writes", False))  # fmt: skip
    return Session(agent.SYSTEM_PROMPT, workspace, **options)


def test_a_command_the_user_refuses_is_not_run_and_the_model_is_told(workdir):
    user, seen = ScriptedUser(answers=["n"]), Seen()
    client = ScriptedClient([
        reply(None, tool_call("run_shell", {"command": "touch made"}, "c1")), reply("no"),
    ])  # fmt: skip
    agent.run("go", client, model="m", session=session_for(workdir, user, seen))
    assert user.asked == [("command", "touch made")]
    assert not (workdir / "made").exists()
    result = seen.of("tool_result")[0]
    assert result["call"]["id"] == "c1" and "did not approve" in result["result"]
    assert seen.of("answer") == [{"text": "no", "streamed": False}]


def test_a_approves_this_and_every_later_command_asking_once(workdir):
    user = ScriptedUser(answers=["a"])
    client = ScriptedClient([
        reply(None, tool_call("run_shell", {"command": "touch one"}, "c1")),
        reply(None, tool_call("run_shell", {"command": "touch two"}, "c2")),
        reply("done"),
    ])  # fmt: skip
    agent.run("go", client, model="m", session=session_for(workdir, user))
    assert user.asked == [("command", "touch one")]
    assert (workdir / "one").exists() and (workdir / "two").exists()


def test_a_write_the_user_refuses_is_not_made(workdir):
    user = ScriptedUser(answers=["no"])
    client = ScriptedClient([
        reply(None, tool_call("write_file", {"path": "a.txt", "content": "x"}, "c1")), reply("ok"),
    ])  # fmt: skip
    session = session_for(workdir, user, confirm_writes=True)
    agent.run("go", client, model="m", session=session)
    assert user.asked == [("write", "a.txt")]
    assert not (workdir / "a.txt").exists()


def test_a_write_tells_its_summary_and_its_diff(workdir):
    (workdir / "a.txt").write_text("one\n")
    seen = Seen()
    client = ScriptedClient([
        reply(None, tool_call("write_file", {"path": "a.txt", "content": "two\n"}, "c1")),
        reply("ok"),
    ])  # fmt: skip
    agent.run("go", client, model="m", session=session_for(workdir, seen=seen))
    assert "      +1 -1 lines" in seen.notices()
    diff = seen.of("diff")[0]
    assert diff["everywhere"] is False and "-one" in diff["lines"] and "+two" in diff["lines"]


def test_a_chat_takes_the_users_messages_and_commands_until_none_is_left(workdir):
    user, seen = ScriptedUser(messages=["/think off", "second"]), Seen()
    client = ScriptedClient([reply("first answer"), reply("second answer")])
    result = agent.chat("first", client, model="m", session=session_for(workdir, user, seen))
    assert [fields["task"] for fields in seen.of("turn")] == ["first", "second"]
    assert "thinking: off from the next message on" in seen.notices()
    assert client.requests[1]["extra_body"] == {"thinking": {"type": "disabled"}}
    assert [fields["text"] for fields in seen.of("answer")] == ["first answer", "second answer"]
    assert [fields["scope"] for fields in seen.of("usage")] == ["turn", "turn", "session"]
    assert seen.kinds()[0] == "chat"  # first: the terminal says how a chat goes on
    assert result["turns"] == 2


def test_an_empty_final_answer_is_warned_of_once(workdir):
    seen = Seen()
    result = agent.run("go", ScriptedClient([reply("")]), model="m",
                       session=session_for(workdir, seen=seen))  # fmt: skip
    warnings = [text for text in seen.notices() if "no answer text" in text]
    assert len(warnings) == 1 and result["stop_reason"] == "incomplete"


def test_the_step_limit_is_a_notice_and_no_answer(workdir):
    seen = Seen()
    client = ScriptedClient([reply(None, tool_call("read_file", {"path": "x"}, "c1"))])
    result = agent.run("go", client, model="m", max_steps=1,
                       session=session_for(workdir, seen=seen))  # fmt: skip
    assert result["stop_reason"] == "max_steps"
    assert any("step limit (1 requests)" in text for text in seen.notices())
    assert seen.of("answer") == []


def test_a_scripted_model_says_when_its_script_is_out():
    client = ScriptedClient([reply("only")])
    client.chat.completions.create(model="m", messages=[])
    with pytest.raises(AgentError, match="no more replies after its 1"):
        client.chat.completions.create(model="m", messages=[])


def test_an_event_of_no_known_kind_or_with_other_fields_is_a_bug():
    events = Events()
    with pytest.raises(TypeError):
        events.emit("noticed", text="x")
    with pytest.raises(TypeError):
        events.emit("notice", line="x")


def test_the_terminal_shows_the_totals_of_a_turn_and_of_a_session(capsys):
    totals = cost.Totals(steps=2, tool_calls=1, usage=cost.Tokens(10, 2, 3), cost=0.5, unknown=1)
    terminal = display.Terminal()
    terminal("usage", {"scope": "turn", "totals": totals, "turns": 1, "cancelled": 0,
                       "failed": 0, "currency": "USD", "replayed": False})  # fmt: skip
    terminal("usage", {"scope": "session", "totals": totals, "turns": 3, "cancelled": 1,
                       "failed": 0, "currency": None, "replayed": False})  # fmt: skip
    lines = capsys.readouterr().err.splitlines()
    assert lines[0].startswith("steps 2, tool calls 1, prompt tokens 10, cache-hit tokens 2, ")
    assert lines[0].endswith("+ unknown (no usage reported for 1 reply)")
    assert lines[1] == (
        "session: turns 3 (and 1 cancelled), steps 2, tool calls 1, prompt tokens 10, "
        "cache-hit tokens 2, completion tokens 3"
    )


def test_compact_in_a_chat_is_told_as_a_compacted_event(workdir):
    user, seen = ScriptedUser(messages=["second", "/compact"]), Seen()
    long = "a long answer, " * 200  # longer than the summary that replaces it
    client = ScriptedClient([reply(long), reply(long), reply("a summary")])
    agent.chat("first", client, model="m", session=session_for(workdir, user, seen))
    (compacted,) = seen.of("compacted")
    assert compacted["record"]["event"] == "compaction" and compacted["text"].startswith("context:")
    assert "context: asking the model to summarize the earlier conversation" in seen.notices()
    summary = seen.of("reply")[-1]
    assert summary["step"] is None and summary["content"] == "a summary"  # counted, no step


def test_each_reply_is_priced_and_the_turn_totals_add_up(workdir):
    usage = {"prompt_tokens": 1000, "completion_tokens": 100, "total_tokens": 1100}
    client = FakeClient(
        completion(reply(None, tool_call("read_file", {"path": "x"}, "c1")), usage=usage),
        completion(reply("done"), usage=usage, number=2),
    )
    seen = Seen()
    prices = cost.prices_for("deepseek-flash", {})
    session = session_for(workdir, seen=seen, settings=Settings(prices=prices))
    agent.run("go", client, model="deepseek-flash", session=session)
    costs = [fields["cost"] for fields in seen.of("reply")]
    assert len(costs) == 2 and costs[0] > 0 and costs[0] == costs[1]
    (totals,) = seen.of("usage")
    assert totals["scope"] == "turn" and totals["currency"] == "USD"
    assert totals["totals"].cost == pytest.approx(sum(costs))
    assert totals["totals"].usage.prompt_tokens == 2000


def test_a_turns_file_changes_are_told_and_undo_takes_them_back(workdir, tmp_path):
    user, seen = ScriptedUser(messages=["/undo"]), Seen()
    client = ScriptedClient([
        reply(None, tool_call("write_file", {"path": "a.txt", "content": "x"}, "c1")), reply("ok"),
    ])  # fmt: skip
    folder = tmp_path / "sessions"
    folder.mkdir()
    settings = Settings(sessions_folder=folder)
    session = session_for(workdir, user, seen, settings=settings, save=folder / "t.jsonl")
    try:
        agent.chat("make a.txt", client, model="m", session=session)
    finally:
        session.close()
    assert seen.of("file_change") == [{"path": "a.txt", "change": "created"}]
    assert any(text.startswith("undid turn 1 (make a.txt)") for text in seen.notices())
    assert not (workdir / "a.txt").exists()


def test_a_path_outside_the_workdir_is_refused_in_the_tool_result(workdir, tmp_path):
    (tmp_path / "secret.txt").write_text("key")
    (workdir / "AGENTS.md").symlink_to(tmp_path / "secret.txt")  # a link leading outside
    seen = Seen()
    client = ScriptedClient([
        reply(None, tool_call("read_file", {"path": "../secret.txt"}, "c1")), reply("ok"),
    ])  # fmt: skip
    agent.run("go", client, model="m", session=session_for(workdir, seen=seen))
    assert "skipped AGENTS.md: it is a link leading outside the workdir" in seen.notices()
    (result,) = seen.of("tool_result")
    assert result["result"].startswith("Error: PermissionError: ../secret.txt is outside")
    assert "key" not in str(client.requests)
