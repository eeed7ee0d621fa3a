"""The lesson's Workspace holds what the tools act on, made whole once: a run, its session and
its tools leave it as it was made. What only the session needs lives in the session: the cap
on a tool result that follows the context window, its own records (kept out of the tools'
reach by whoever makes the workspace), and its totals."""

from __future__ import annotations

import json
import re

import pytest
from conftest import ROOT
from fake_model import FakeClient, completion, reply, tool_call

import agent
from minimal_agent.common import files
from minimal_agent.common.errors import AgentError
from minimal_agent.core import context_window, cost
from minimal_agent.core.events import Events
from minimal_agent.core.scripted import ScriptedClient, ScriptedUser
from minimal_agent.core.session import Session, own_records
from minimal_agent.core.settings import Settings
from minimal_agent.tools import daily_tools, hooks, permissions

BIG = "a line of the big file, long enough to fill a small window\n" * 2_000  # 120 KB


def state(ws) -> dict:
    """Every attribute of ws, the containers as plain values, so that a change in place shows
    as well as a new value."""
    rules = {kind: [rule.text for rule in listed] for kind, listed in ws.rules.by_kind.items()}
    tools = {name: (json.dumps(t.schema), t.function) for name, t in ws.added_tools.items()}
    plain = {
        "private": list(ws.private),
        "added_tools": tools,
        "rules": rules,
        "hooks": (list(ws.hooks.hooks), ws.hooks.session_id, ws.hooks.transcript_path),
    }
    return {**vars(ws), **plain}


def read(number: int, path: str) -> dict:
    return reply(None, tool_call("read_file", {"path": path}, f"r{number}"))


def test_a_run_with_a_small_window_and_a_transcript_leaves_the_workspace_as_made(workdir, tmp_path):
    """The session used to append its records to workspace.private and shrink
    workspace.max_result_chars to the window after each reply: the workspace a learner made
    changed under them. Now the result is capped by the session, the workspace untouched."""
    (workdir / "big.txt").write_text(BIG)
    sessions = tmp_path / "sessions"
    save = sessions / "k7m2qa.jsonl"
    sessions.mkdir()
    ws = agent.Workspace(workdir, private=[str(sessions)], user=ScriptedUser(), events=Events())
    before = state(ws)
    window = context_window.Window(4_096)
    settings = Settings(sessions_folder=sessions)
    session = Session(agent.SYSTEM_PROMPT, ws, settings, save=save, window=window)
    client = ScriptedClient([read(1, "big.txt"), read(2, "big.txt"), reply("Read it twice.")])
    result = agent.run("Read big.txt twice.", client, model="m", session=session)
    session.close()

    assert result["text"] == "Read it twice."
    assert state(ws) == before
    cap = context_window.result_cap(4_096, agent.MAX_RESULT_CHARS)
    assert session.tools_workspace.max_result_chars == cap < 4_000
    assert session.tools_workspace is not ws and ws.max_result_chars == agent.MAX_RESULT_CHARS
    results = [m["content"] for m in client.requests[-1]["messages"] if m["role"] == "tool"]
    assert len(results) == 2 and all(len(r) <= cap for r in results)
    # Read with the cap, not cut again after: the model is told how much of the file it missed.
    left_out = [int(n) for r in results for n in re.findall(r"\[\.\.\. (\d+) bytes left out", r)]
    assert left_out == [len(BIG) - 2 * files.keep(cap)] * 2


def test_a_daily_session_with_rules_hooks_and_added_tools_leaves_the_workspace_as_made(
    workdir, tmp_path
):
    (workdir / "a.py").write_text("old = 1\n")
    save = tmp_path / "t.jsonl"
    ran = tmp_path / "stop.json"
    rules = permissions.Rules()
    rules.add("deny", "read_file(.env)", "user settings")
    rules.add("allow", "run_shell(echo:*)", "user settings")
    stop = hooks.read({"Stop": [{"hooks": [{"type": "command", "command": f"cat > {ran}"}]}]},
                      print)  # fmt: skip
    ws = agent.Workspace(
        workdir, private=own_records(str(workdir), None, save), user=ScriptedUser(),
        events=Events(), added_tools=daily_tools.tools(agent.TOOL_MAP), rules=rules,
        hooks=hooks.Hooks(stop, "t", str(save)),
    )  # fmt: skip
    before = state(ws)
    client = ScriptedClient([
        reply(None, tool_call("edit_file", {"path": "a.py", "old_string": "old = 1",
                                            "new_string": "new = 2"}, "c1"),
              tool_call("run_shell", {"command": "echo hi"}, "c2"),
              tool_call("read_file", {"path": ".env"}, "c3")),
        reply("Done."),
    ])  # fmt: skip
    agent.run("Edit it.", client, model="m", workspace=ws, save=save)

    assert state(ws) == before
    assert (workdir / "a.py").read_text() == "new = 2\n"
    answers = [m["content"] for m in client.requests[-1]["messages"] if m["role"] == "tool"]
    assert answers[1].startswith("exit code 0") and "denied by the rule" in answers[2]
    assert json.loads(ran.read_text())["transcript_path"] == str(save)  # told at the making


def test_a_workspace_that_leaves_the_transcript_within_the_tools_reach_is_refused(workdir):
    """A transcript saved in the workdir: the session no longer widens the workspace's private
    paths itself, so it refuses one that leaves them out, in one line; made with them, the
    tools cannot read or overwrite the record."""
    save = workdir / "run.jsonl"
    with pytest.raises(AgentError) as refused:
        Session(agent.SYSTEM_PROMPT, agent.Workspace(workdir, events=Events()), save=save)
    assert "within the tools' reach" in str(refused.value) and "\n" not in str(refused.value)
    assert not save.exists()  # nothing opened before the refusal

    ws = agent.Workspace(workdir, private=own_records(str(workdir), None, save),
                         user=ScriptedUser(), events=Events())  # fmt: skip
    client = ScriptedClient([
        read(1, "run.jsonl"),
        reply(None, tool_call("write_file", {"path": "run.jsonl", "content": "{}"}, "w1")),
        reply("Done."),
    ])  # fmt: skip
    agent.run("Go.", client, model="m", workspace=ws, save=save)
    answers = [m["content"] for m in client.requests[-1]["messages"] if m["role"] == "tool"]
    assert all("among the user's own files" in answer for answer in answers)
    assert "Done." in save.read_text()


def test_the_totals_are_typed_and_add_up_over_turns(workdir):
    usage = {"prompt_tokens": 1000, "prompt_cache_hit_tokens": 200, "completion_tokens": 10,
             "total_tokens": 1010}  # fmt: skip
    session = Session(agent.SYSTEM_PROMPT, agent.Workspace(workdir, events=Events()),
                      Settings(prices=cost.prices_for("deepseek-flash", {})))  # fmt: skip
    client = FakeClient(
        completion(reply(None, tool_call("read_file", {"path": "x"}, "c1")), usage=usage),
        completion(reply("First."), number=2),  # no usage: its cost is unknown
        completion(reply("Second."), usage=usage, number=3),
    )
    first = agent.run("One.", client, model="deepseek-flash", session=session)
    second = agent.run("Two.", client, model="deepseek-flash", session=session)

    assert isinstance(session.total, cost.Totals) and isinstance(session.turn, cost.Totals)
    assert session.total.usage == cost.Tokens(2000, 400, 20)
    assert (session.total.steps, session.total.tool_calls, session.total.unknown) == (3, 1, 1)
    assert session.total.cost == pytest.approx(first["cost"] + second["cost"])
    assert first["cost"] > 0
    assert session.turn == cost.Totals(1, 0, cost.Tokens(1000, 200, 10), second["cost"], 0)
    assert first["usage"] == {"prompt_tokens": 1000, "cache_hit_tokens": 200,
                              "completion_tokens": 10}  # the result: plain values  # fmt: skip
    assert (first["steps"], first["tool_calls"], first["unknown"]) == (2, 1, 1)


def test_no_module_changes_a_workspace_after_it_is_made():
    """The contract, read from the source: no attribute of a workspace is assigned, added to
    or filled in outside Workspace.__init__ (the user's "a" answer lives in the user)."""
    assigned = re.compile(
        r"\b(?:ws|workspace|self\.workspace|self\.ws)(?:\.\w+)+(?:\[[^\]]*\])?\s*[-+|]?=(?!=)"
        r"|\b(?:ws|workspace)\.(?:private|hooks\.hooks|rules\.by_kind\[[^\]]*\])"
        r"\.(?:append|extend|insert)\("
    )
    found = []
    for path in [ROOT / "agent.py", *sorted((ROOT / "minimal_agent").rglob("*.py"))]:
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if assigned.search(line):
                found.append(f"{path.name}:{number}: {line.strip()}")
    assert found == []
