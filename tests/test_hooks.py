"""Hooks (docs/hooks.md), run for real as the user's commands: what they get on stdin and in
their environment (no key), exit 2 blocking a call with stderr for the model or speaking after
it, other exits and time-outs one warning line, a hook that hangs or forks killed with all it
started, a project's hooks never run, each run an event; and the docs' example."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from conftest import ROOT, alive
from fake_model import FakeClient, reply, tool_call
from test_json import EVENTS, valid
from test_permissions import loaded

import agent
from minimal_agent.common.errors import AgentError
from minimal_agent.core import settings_json
from minimal_agent.tools import hooks
from minimal_agent.views import display

KEY = "sk-test-hooks-0123456789abcdef"


def with_hooks(folder, settings: dict, *session, **given) -> tuple[agent.Workspace, list]:
    """A workspace with the hooks of a settings.json's "hooks" (and session: the session_id
    and transcript_path they are told), and the events they emit."""
    events = display.terminal_events()
    found = hooks.Hooks(hooks.read(settings, events.notice), *session)
    ws = agent.Workspace(folder, key=KEY, hooks=found, events=events, **given)
    seen: list = []
    ws.events.subscribe(lambda kind, fields: seen.append(fields) if kind == "hook" else None)
    return ws, seen


def hook(event: str, command: str, matcher: str = "", timeout: float | None = None) -> dict:
    entry = {"type": "command", "command": command}
    if timeout:
        entry["timeout"] = timeout
    return {event: [{"matcher": matcher, "hooks": [entry]}]}


def write(ws, path: str = "a.txt") -> str:
    call = tool_call("write_file", {"path": path, "content": "hi"}, "c1")
    return agent.execute_tool_call(call, ws)


def test_exit_2_before_a_call_blocks_it_and_its_stderr_is_the_models_error(workdir):
    ws, seen = with_hooks(workdir, hook("PreToolUse", "echo 'not in this repo' >&2; exit 2",
                                        "write_file|edit_file"))  # fmt: skip
    result = write(ws)
    assert result == (
        "Error: PermissionError: a PreToolUse hook of the user blocked this call: not in this repo"
    )
    assert not (workdir / "a.txt").exists()
    assert [(e["hook_event"], e["tool"], e["exit_code"], e["outcome"]) for e in seen] == [
        ("PreToolUse", "write_file", 2, "blocked")
    ]
    valid({"version": 1, "type": "hook", **seen[0]}, EVENTS)  # as --json-events prints it


def test_a_hook_gets_the_call_as_json_in_the_workdir_with_the_commands_environment(
    workdir, tmp_path, monkeypatch
):
    monkeypatch.setenv("LLM_API_KEY", KEY)
    monkeypatch.setenv("GITHUB_TOKEN", "ghp-secret")
    monkeypatch.setenv("HOOK_SEES", "yes")
    out = tmp_path / "hook"
    command = f"cat > {out}.json; env > {out}.env; pwd > {out}.cwd"
    ws, _ = with_hooks(workdir, hook("PreToolUse", command), "k7m2qa", "/some/where/k7m2qa.jsonl")
    assert write(ws).startswith("Wrote")
    assert json.loads(Path(f"{out}.json").read_text()) == {
        "session_id": "k7m2qa",
        "transcript_path": "/some/where/k7m2qa.jsonl",
        "cwd": str(workdir),
        "hook_event_name": "PreToolUse",
        "tool_name": "write_file",
        "tool_input": {"path": "a.txt", "content": "hi"},
    }
    environment = Path(f"{out}.env").read_text()
    assert "HOOK_SEES=yes" in environment
    assert KEY not in environment and "ghp-secret" not in environment
    assert Path(f"{out}.cwd").read_text().strip() == str(workdir)


def test_exit_2_after_a_call_adds_its_stderr_after_the_result(workdir, tmp_path):
    out = tmp_path / "after.json"
    ws, seen = with_hooks(workdir, hook("PostToolUse", f"cat > {out}; echo 'run the tests' >&2; "
                                        "exit 2"))  # fmt: skip
    result = write(ws)
    note = "[a PostToolUse hook of the user says: run the tests]"
    assert result == f"Wrote 2 characters (2 bytes) to a.txt\n{note}"
    assert json.loads(out.read_text())["tool_response"] == "Wrote 2 characters (2 bytes) to a.txt"
    assert seen[0]["outcome"] == "feedback"


@pytest.mark.parametrize("event", ["PreToolUse", "PostToolUse"])
def test_any_other_exit_is_one_warning_line_and_the_call_goes_on(workdir, capsys, event):
    ws, seen = with_hooks(workdir, hook(event, "echo broken >&2; exit 1"))
    assert write(ws) == "Wrote 2 characters (2 bytes) to a.txt"
    warnings = [line for line in capsys.readouterr().err.splitlines() if "warning" in line]
    assert warnings == [
        f"warning: the {event} hook echo broken >&2; exit 1 exited with 1: broken; going on"
    ]
    assert seen[0]["outcome"] == "warning"


DENY = {"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "deny",
                               "permissionDecisionReason": "no writes on Fridays"}}  # fmt: skip
BLOCK = {"decision": "block", "reason": "format it first"}


@pytest.mark.parametrize(
    "event, answer, expected",
    [
        ("PreToolUse", DENY, "Error: PermissionError: a PreToolUse hook of the user blocked this "
                             "call: no writes on Fridays"),
        ("PreToolUse", BLOCK, "Error: PermissionError: a PreToolUse hook of the user blocked "
                              "this call: format it first"),
        ("PostToolUse", BLOCK, "Wrote 2 characters (2 bytes) to a.txt\n[a PostToolUse hook of "
                               "the user says: format it first]"),
        ("PreToolUse", {"hookSpecificOutput": {"permissionDecision": "allow"}},
         "Wrote 2 characters (2 bytes) to a.txt"),
        ("PreToolUse", {"decision": "approve"}, "Wrote 2 characters (2 bytes) to a.txt"),
    ],
)  # fmt: skip
def test_claude_codes_json_answers_that_take_power_away_are_followed(workdir, event, answer,
                                                                     expected):  # fmt: skip
    command = f"echo '{json.dumps(answer)}'"
    ws, seen = with_hooks(workdir, hook(event, command))
    assert write(ws) == expected
    blocked = expected.startswith("Error")
    assert (workdir / "a.txt").exists() is not blocked
    assert seen[0]["exit_code"] == 0


def test_a_hook_that_prints_a_lot_and_reads_nothing_never_blocks(workdir):
    ws, seen = with_hooks(workdir, hook("PreToolUse", "head -c 3000000 /dev/zero; head -c "
                                        "3000000 /dev/zero >&2; exit 2"))  # fmt: skip
    call = tool_call("write_file", {"path": "a.txt", "content": "x" * 1_000_000}, "c1")
    result = agent.execute_tool_call(call, ws)  # a stdin of 1 MB the hook never reads
    assert result.startswith("Error: PermissionError: a PreToolUse hook of the user blocked")
    assert len(result) < 10_000  # the two ends of its stderr
    assert seen[0]["outcome"] == "blocked"


def test_a_matcher_picks_the_tools_a_hook_runs_for(workdir, tmp_path):
    ran = tmp_path / "ran"
    ws, _ = with_hooks(workdir, hook("PreToolUse", f"echo x >> {ran}", "run_shell"),
                       approve_all=True)  # fmt: skip
    write(ws)
    assert not ran.exists()
    agent.execute_tool_call(tool_call("run_shell", {"command": "true"}, "c2"), ws)
    assert ran.read_text() == "x\n"


def test_a_matcher_naming_no_tool_of_the_agent_says_so_in_one_line(workdir, tmp_path, capsys):
    user = tmp_path / "settings.json"
    user.write_text(json.dumps({"hooks": hook("PreToolUse", "true", "Bash|write_file")}))
    settings_json.load(agent.Workspace(workdir), str(user), [], [], agent.TOOL_MAP)
    tools = ", ".join(sorted(agent.TOOL_MAP))  # a learner's own tools among them
    assert capsys.readouterr().err.splitlines() == [
        "the PreToolUse hook's matcher 'Bash|write_file' names no tool of this agent, so it never "
        f"matches: write run_shell for Claude Code's Bash (the tools: {tools})"
    ]


@pytest.mark.linux
def test_a_hook_that_hangs_is_killed_with_all_it_started_at_its_time_out(workdir, capsys):
    command = "sleep 300 & echo $! > bg.pid; setsid sleep 300 & echo $! > away.pid; sleep 300"
    ws, seen = with_hooks(workdir, hook("PreToolUse", command, timeout=1))
    assert write(ws) == "Wrote 2 characters (2 bytes) to a.txt"  # it goes on
    assert (
        "ran past its time-out (1 s) and was killed with all it started" in capsys.readouterr().err
    )
    assert seen[0]["timed_out"] and seen[0]["exit_code"] is None
    valid({"version": 1, "type": "hook", **seen[0]}, EVENTS)
    for name in ("bg.pid", "away.pid"):
        assert not alive(int((workdir / name).read_text())), name


@pytest.mark.linux
def test_what_a_hook_leaves_running_is_killed_when_it_exits(workdir):
    command = "setsid sleep 300 > /dev/null 2>&1 & echo $! > away.pid"
    ws, seen = with_hooks(workdir, hook("PostToolUse", command))
    assert write(ws) == "Wrote 2 characters (2 bytes) to a.txt"
    assert seen[0]["outcome"] == "ok"
    assert not alive(int((workdir / "away.pid").read_text()))


def test_a_projects_hooks_never_run_and_are_ignored_with_one_line(workdir, tmp_path, capsys):
    ran = tmp_path / "ran"
    (workdir / ".minimal-agent").mkdir()
    (workdir / ".minimal-agent" / "settings.json").write_text(
        json.dumps({"hooks": hook("PreToolUse", f"touch {ran}"), "permissions": {}})
    )
    ws = loaded(workdir, tmp_path / "none.json")
    assert capsys.readouterr().err.splitlines() == [
        'ignored in the project\'s .minimal-agent/settings.json: "hooks" (a repository can only '
        "take power away: its deny and ask rules apply; allow rules and hooks belong in your own "
        "settings.json)"
    ]
    assert not ws.hooks
    write(ws)
    assert not ran.exists()


def test_stop_hooks_run_when_a_turn_ends_and_each_run_is_kept_in_the_transcript(workdir, tmp_path):
    ran = tmp_path / "stop.json"
    ws, _ = with_hooks(workdir, hook("Stop", f"cat > {ran}"))
    save = tmp_path / "t.jsonl"
    agent.run("hi", FakeClient(reply("done")), model="test", workspace=ws, save=save)
    assert json.loads(ran.read_text())["hook_event_name"] == "Stop"
    kept = [json.loads(line) for line in save.read_text().splitlines()]
    runs = [entry for entry in kept if entry.get("event") == "hook"]
    assert [(r["hook_event"], r["outcome"]) for r in runs] == [("Stop", "ok")]


@pytest.mark.parametrize(
    "settings",
    [
        {"hooks": []},
        {"hooks": {"PreToolUse": {}}},
        {"hooks": {"PreToolUse": [{"matcher": "(", "hooks": []}]}},
        {"hooks": hook("PreToolUse", "")},
        {"hooks": hook("PreToolUse", "true", timeout=-1)},
        {"hooks": {"PreToolUse": [{"hooks": [{"type": "prompt", "prompt": "x"}]}]}},
    ],
)
def test_a_broken_hook_in_the_users_settings_is_one_error_naming_the_file(
    workdir, tmp_path, settings
):
    user = tmp_path / "settings.json"
    user.write_text(json.dumps(settings))
    with pytest.raises(AgentError) as caught:
        settings_json.load(agent.Workspace(workdir), str(user), [], [])
    assert str(user) in str(caught.value) and "\n" not in str(caught.value)


def test_the_docs_example_hook_keeps_lock_files_from_the_model(workdir, tmp_path, monkeypatch):
    text = (ROOT / "docs" / "hooks.md").read_text(encoding="utf-8")
    script = re.search(r"```python\n(.*?)```", text, re.DOTALL).group(1)
    settings = re.search(r"```json\n(.*?)```", text, re.DOTALL).group(1)
    monkeypatch.setenv("HOME", str(tmp_path))
    folder = tmp_path / ".config" / "minimal-agent"
    folder.mkdir(parents=True)
    (folder / "no_lock_files.py").write_text(script)
    (folder / "settings.json").write_text(settings)
    ws = loaded(workdir, folder / "settings.json")
    blocked = write(ws, "poetry.lock")
    assert blocked.startswith("Error: PermissionError: a PreToolUse hook of the user blocked this")
    assert "poetry.lock is made by the package manager" in blocked
    assert not (workdir / "poetry.lock").exists()
    assert write(ws, "pyproject.toml").startswith("Wrote")
