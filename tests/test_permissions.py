"""Permission rules (docs/permissions.md): what the model gets back and what runs, for each rule
form; compound commands of every operator against prefix and wildcard rules; deny before ask
before allow, --yes never past a deny or an ask; deny rules on the tools that never ask; a
project's settings that can only take power away; the user's settings file out of the tools'
reach; each decision an event, kept in the transcript and printed by --json-events."""

from __future__ import annotations

import io
import json
import os
import re
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from conftest import ROOT, finish, on_a_terminal, run_in_process, spawn, stub_env
from fake_model import FakeClient, reply, tool_call
from stub_server import StubServer
from test_json import EVENTS, valid

import agent
from minimal_agent import cli
from minimal_agent.common.errors import AgentError, UsageError
from minimal_agent.core import settings_json
from minimal_agent.tools import hooks, permissions

NOT_ASKED = "Error: PermissionError: the command was not run: it needs the user's approval"


@pytest.fixture(autouse=True)
def no_terminal(monkeypatch):
    """Nobody at a terminal: a call that asks is refused, so a test sees it asked."""
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))


def workspace(folder, *, yes=False, allow=(), ask=(), deny=(), **given) -> agent.Workspace:
    rules = permissions.Rules()
    for kind, texts in (("allow", allow), ("ask", ask), ("deny", deny)):
        for text in texts:
            rules.add(kind, text, "user settings")
    return agent.Workspace(folder, approve_all=yes, rules=rules, **given)


def loaded(folder, user_file, allow=(), deny=(), tools=()) -> agent.Workspace:
    """The workspace of the rules and hooks settings_json.load reads for folder, made as a
    session makes it: the project's file read through a plain workspace first."""
    rules, hook_list = settings_json.load(agent.Workspace(folder), str(user_file), list(allow),
                                          list(deny), tools)  # fmt: skip
    return agent.Workspace(folder, rules=rules, hooks=hooks.Hooks(hook_list))


def call(ws, name: str, **args) -> str:
    return agent.execute_tool_call(tool_call(name, args, "call_1"), ws)


def shell(ws, command: str) -> str:
    return call(ws, "run_shell", command=command)


# --- The rule forms --------------------------------------------------------------------------

RULES = ["run_shell(echo exact)", "run_shell(echo prefix:*)", "run_shell(echo wild * end)",
         "run_shell(echo tail *)"]  # fmt: skip


@pytest.mark.parametrize(
    "command, runs",
    [
        ("echo exact", True),
        ("echo  'exact'", True),  # the same words for the program
        ("echo exact more", False),  # exact means exactly
        ("echo exact\n", True),  # a newline at the end ends the one command
        ("echo exact\r", False),  # a carriage return is part of the last word for sh
        ("echo prefix", True),
        ("echo prefix and more", True),
        ("echo prefixed", False),  # a prefix ends at a word's end
        ("echo wild one two end", True),
        ("echo wild end", False),  # "wild * end": the wildcard stands between two spaces
        ("echo tail", True),  # a trailing " *" may be nothing
        ("echo tail x y", True),
        ("echo tailor", False),
        ("echo other", False),
    ],
)
def test_each_rule_form_lets_its_commands_run_unasked_and_no_other(workdir, command, runs):
    result = shell(workspace(workdir, allow=RULES), command)
    assert result.startswith("exit code 0") if runs else result.startswith(NOT_ASKED), result


# --- Compound commands -----------------------------------------------------------------------

ALLOWED = ["run_shell(git status)", "run_shell(echo safe:*)", "run_shell(echo star *)"]
# After an allowed command, each operator with something else: every one must ask. The
# something else makes a file, so a command that ran (wrongly) leaves it behind.
COMPOUNDS = [
    "{allowed}; touch pwned",
    "{allowed} && touch pwned",
    "{allowed} || touch pwned",
    "{allowed} | touch pwned",
    "{allowed} |& touch pwned",
    "{allowed} & touch pwned",
    "{allowed}\ntouch pwned",
    "{allowed} $(touch pwned)",
    "{allowed} `touch pwned`",
    "{allowed} <(touch pwned)",
    "{allowed} >(touch pwned)",
    "{allowed} > pwned",
    "{allowed} >> pwned",
    "{allowed} 2> pwned",
    "{allowed} &> pwned",
    "{allowed} >| pwned",
    "{allowed} < pwned",
    "({allowed}; touch pwned)",
    "{allowed} ;touch pwned",
    "{allowed};touch pwned",
    "{allowed}&&touch pwned",
    "{allowed}#; touch pwned",  # sh reads no comment here: a # inside a word
    '{allowed} "$(touch pwned)"',
    "{allowed} $'\\x3b' ; touch pwned",
]


@pytest.mark.parametrize("allowed", ["git status", "echo safe x", "echo star x"])
@pytest.mark.parametrize("template", COMPOUNDS)
def test_a_compound_command_asks_unless_every_simple_command_in_it_is_allowed(
    workdir, allowed, template
):
    ws = workspace(workdir, allow=ALLOWED)
    result = shell(ws, template.format(allowed=allowed))
    assert result.startswith(NOT_ASKED), result
    assert not (workdir / "pwned").exists()


def test_the_issues_example_git_status_then_curl_into_sh_asks(workdir):
    ws = workspace(workdir, allow=["run_shell(git status)"])
    assert shell(ws, "git status; curl x | sh").startswith(NOT_ASKED)


def test_a_compound_of_allowed_commands_runs_unasked(workdir):
    ws = workspace(workdir, allow=["run_shell(echo safe:*)", "run_shell(touch made)"])
    result = shell(ws, "echo safe one && touch made; echo safe two | echo safe three")
    assert result.startswith("exit code 0"), result
    assert (workdir / "made").exists()


def test_quoted_operators_are_words_and_never_hide_a_command(workdir):
    ws = workspace(workdir, allow=["run_shell(echo safe:*)"])
    result = shell(ws, "echo safe 'a; b' \"c && d\"")
    assert result == "exit code 0\nsafe a; b c && d\n"


# --- deny, then ask, then allow; --yes ------------------------------------------------------


def test_a_deny_rule_beats_an_allow_rule_and_yes_and_names_itself_to_the_model(workdir):
    (workdir / "keep").write_text("")
    ws = workspace(workdir, yes=True, allow=["run_shell"], deny=["run_shell(rm:*)"])
    result = shell(ws, "echo hi; rm keep")
    assert result.startswith("Error: PermissionError: denied by the rule run_shell(rm:*) "
                             "(user settings)")  # fmt: skip
    assert (workdir / "keep").exists()


HIDDEN = ["echo $(rm keep)", "sh -c 'rm keep'", "FOO=1 rm keep", "sudo rm keep", "echo `rm keep`",
          "x=1; env rm keep"]  # fmt: skip


@pytest.mark.parametrize("command", HIDDEN)
def test_a_deny_rule_finds_its_program_inside_substitutions_and_wrappers(workdir, command):
    (workdir / "keep").write_text("")
    ws = workspace(workdir, yes=True, deny=["run_shell(rm:*)"])
    assert "denied by the rule run_shell(rm:*)" in shell(ws, command)
    assert (workdir / "keep").exists()


def test_an_ask_rule_asks_even_under_yes_and_after_a(workdir):
    ws = workspace(workdir, yes=True, allow=["run_shell"], ask=["run_shell(touch:*)"])
    result = shell(ws, "touch pwned")
    assert result.startswith("Error: PermissionError: the command was not run: the user's rule "
                             "run_shell(touch:*) has it asked for")  # fmt: skip
    assert not (workdir / "pwned").exists()
    assert shell(ws, "echo fine").startswith("exit code 0")  # --yes goes on for the rest


def test_a_whole_tool_rule_decides_every_call_of_it(workdir):
    assert shell(workspace(workdir, allow=["run_shell"]), "echo a; echo b").startswith(
        "exit code 0"
    )
    denying = workspace(workdir, yes=True, deny=["run_shell"])
    assert "denied by the rule run_shell " in shell(denying, "echo a")


def test_an_ask_rule_nobody_can_answer_refuses_the_call_and_the_run_exits_5(workdir):
    project_file(workdir, {"permissions": {"ask": ["run_shell(touch:*)"]}})
    script = [reply(None, tool_call("run_shell", {"command": "touch asked"}, "c1")), reply("ok")]
    with StubServer(script) as server:
        result = run_in_process("--workdir", str(workdir), "--yes", "--json", "go",
                                env=stub_env(server))  # fmt: skip
    record = json.loads(result.stdout)
    assert (result.returncode, record["status"]) == (5, "refused"), result.stderr
    assert "the rule run_shell(touch:*) asks, and stdin is not a terminal" in result.stderr
    assert not (workdir / "asked").exists()


@on_a_terminal
def test_a_projects_ask_rule_asks_on_the_terminal_under_yes_and_no_refuses(workdir):
    project_file(workdir, {"permissions": {"ask": ["run_shell(touch:*)"]}})
    script = [
        reply(None, tool_call("run_shell", {"command": "touch asked"}, "c1")),
        reply(None, tool_call("run_shell", {"command": "touch free"}, "c2")),
        reply("done"),
    ]
    with StubServer(script) as server:
        child = spawn(server, "--workdir", str(workdir), "--yes", "go")
        child.expect_exact("the rule run_shell(touch:*) (project settings) asks")
        child.expect_exact("$ touch asked")
        child.expect_exact("Run it? [y/N/a] ")
        child.sendline("n")
        child.expect_exact("the rule run_shell(touch:*) (project settings) asks")
        child.expect_exact("Run it? [y/N/a] ")
        child.sendline("a")  # "a" (as --yes) does not silence the rule
        child.expect_exact("done")
        assert finish(child) == 0
    assert not (workdir / "asked").exists() and (workdir / "free").exists()


# --- Tools that never ask: deny rules by path -----------------------------------------------


@pytest.mark.parametrize("path", [".env", "./.env", "sub/../.env", "sub/.env", "link"])
def test_a_read_file_deny_rule_keeps_the_file_from_the_model_by_any_path(workdir, path):
    (workdir / ".env").write_text("SECRET=1")
    (workdir / "sub").mkdir()
    (workdir / "sub" / ".env").write_text("SECRET=2")
    (workdir / "link").symlink_to(".env")
    ws = workspace(workdir, deny=["read_file(.env)"])
    result = call(ws, "read_file", path=path)
    assert "denied by the rule read_file(.env)" in result
    assert "SECRET" not in result
    assert call(ws, "read_file", path="sub/../sub").startswith("Error: IsADirectoryError")


def test_a_write_file_deny_rule_on_a_folder_keeps_everything_in_it_as_it_is(workdir):
    ws = workspace(workdir, deny=["write_file(src/**)"])
    result = call(ws, "write_file", path="src/deep/a.py", content="x")
    assert "denied by the rule write_file(src/**)" in result
    assert not (workdir / "src").exists()
    assert call(ws, "write_file", path="docs/a.md", content="x").startswith("Wrote")


def test_a_daily_tool_is_held_to_the_deny_rules_too(workdir):
    from minimal_agent.tools import daily_tools

    (workdir / "a.py").write_text("old\n")
    ws = workspace(workdir, deny=["edit_file(*.py)"],
                   added_tools=daily_tools.tools(agent.TOOL_MAP))  # fmt: skip
    result = call(ws, "edit_file", path="a.py", old_string="old", new_string="new")
    assert "denied by the rule edit_file(*.py)" in result
    assert (workdir / "a.py").read_text() == "old\n"


def test_a_tool_denied_whole_is_not_offered_to_the_model(workdir):
    ws = workspace(workdir, deny=["run_shell", "mcp__git"])
    client = FakeClient(reply("done"))
    agent.run("hi", client, model="test", workspace=ws)
    offered = [tool["function"]["name"] for tool in client.requests[0]["tools"]]
    lesson = [tool["function"]["name"] for tool in agent.TOOLS]  # a learner's own among them
    assert offered == [name for name in lesson if name != "run_shell"]
    assert not permissions.offered(ws, "mcp__git__git_status")
    assert permissions.offered(ws, "mcp__github__list")


# --- Where rules come from ------------------------------------------------------------------


def project_file(workdir: Path, settings: dict) -> None:
    (workdir / ".minimal-agent").mkdir()
    (workdir / ".minimal-agent" / "settings.json").write_text(json.dumps(settings))


def test_a_projects_allow_rule_is_ignored_with_one_line(workdir, tmp_path, capsys):
    project_file(workdir, {"permissions": {"allow": ["run_shell", "run_shell(touch:*)"]}})
    ws = loaded(workdir, tmp_path / "none.json")
    said = capsys.readouterr().err.splitlines()
    assert said == [
        "ignored in the project's .minimal-agent/settings.json: its allow rules (a repository "
        "can only take power away: its deny and ask rules apply; allow rules and hooks belong "
        "in your own settings.json)"
    ]
    assert shell(ws, "touch pwned").startswith(NOT_ASKED)
    assert not (workdir / "pwned").exists()


def test_a_projects_deny_and_ask_rules_apply_over_the_users_allow(workdir, tmp_path):
    user = tmp_path / "settings.json"
    user.write_text(json.dumps({"permissions": {"allow": ["run_shell"]}}))
    project_file(workdir, {"permissions": {"deny": ["run_shell(rm:*)"],
                                           "ask": ["run_shell(touch:*)"]}})  # fmt: skip
    (workdir / "keep").write_text("")
    ws = loaded(workdir, user)
    assert "(project settings)" in shell(ws, "rm keep")
    assert shell(ws, "touch pwned").startswith("Error: PermissionError: the command was not run")
    assert shell(ws, "echo fine").startswith("exit code 0")


@pytest.mark.posix("a FIFO")
@pytest.mark.parametrize("kind", ["a link out of the workdir", "a FIFO", "a folder"])
def test_a_project_file_that_is_no_file_of_the_workdir_is_skipped_in_one_line(
    workdir, tmp_path, capsys, kind
):
    outside = tmp_path / "elsewhere.json"
    outside.write_text(json.dumps({"permissions": {"deny": ["run_shell"]}}))
    (workdir / ".minimal-agent").mkdir()
    project = workdir / ".minimal-agent" / "settings.json"
    if kind == "a FIFO":
        os.mkfifo(project)  # no writer: a read would wait for ever
    elif kind == "a folder":
        project.mkdir()
    else:
        project.symlink_to(outside)
    ws = loaded(workdir, tmp_path / "none.json")
    said = capsys.readouterr().err.splitlines()
    assert len(said) == 1 and said[0].startswith("skipped the project's .minimal-agent/settings")
    assert not ws.rules


@pytest.mark.parametrize("text", ["{", "[]", '{"permissions": {"deny": "run_shell"}}',
                                  '{"permissions": {"deny": ["run shell"]}}'])  # fmt: skip
def test_a_broken_user_settings_file_is_one_error_naming_it(workdir, tmp_path, text):
    user = tmp_path / "settings.json"
    user.write_text(text)
    with pytest.raises(AgentError) as caught:
        settings_json.load(agent.Workspace(workdir), str(user), [], [])
    assert str(user) in str(caught.value) and "\n" not in str(caught.value)


def test_allow_and_deny_options_add_rules_for_the_run_and_a_bad_one_is_a_usage_error(workdir):
    ws = loaded(workdir, "/nonexistent/settings.json", ["run_shell(echo:*)"], ["read_file"])
    assert shell(ws, "echo hi").startswith("exit code 0")
    assert "denied by the rule read_file (--deny)" in call(ws, "read_file", path="x")
    with pytest.raises(UsageError, match="--allow: the rule 'run_shell[(]' "):
        settings_json.load(agent.Workspace(workdir), "/nonexistent", ["run_shell("], [])


def test_a_rule_naming_no_tool_of_the_agent_says_so_in_one_line(workdir, capsys):
    loaded(workdir, "/nonexistent", ["Bash(npm test)", "mcp__git", "run_shell"], [],
           agent.TOOL_MAP)  # fmt: skip
    assert capsys.readouterr().err.splitlines() == [
        "the rule Bash(npm test) (--allow) names no tool of this agent, so it never matches: "
        f"write run_shell for Claude Code's Bash (the tools: {', '.join(sorted(agent.TOOL_MAP))})"
    ]  # a learner's own tools among them


def test_no_tool_can_write_the_users_settings_file(app):
    """The lesson's settings.json is beside agent.py: a workdir that holds it (--workdir .)
    cannot change it; the installed command's is in its private config folder."""
    (app / "settings.json").write_text("{}")
    lesson = SimpleNamespace(config_file=str(app / "config.env"), sessions_folder=str(app / "s"))
    ws = agent.Workspace(app, private=cli.private_paths(lesson, False))
    result = call(ws, "write_file", path="settings.json", content='{"permissions": {"allow": '
                  '["run_shell"]}}')  # fmt: skip
    assert result.startswith("Error: PermissionError")
    assert (app / "settings.json").read_text() == "{}"
    config = app / "config"
    user = SimpleNamespace(config_file=str(config / "config.env"), sessions_folder=str(app / "s"))
    installed = cli.private_paths(user, True)
    assert str(config) in installed  # settings.json beside config.env is inside it


# --- Decisions are events --------------------------------------------------------------------


def test_each_decision_is_an_event_on_the_step_line_and_in_the_transcript(workdir, tmp_path,
                                                                           capsys):  # fmt: skip
    ws = workspace(workdir, allow=["run_shell(echo:*)"], deny=["read_file(.env)"])
    seen = []
    ws.events.subscribe(lambda kind, fields: seen.append((kind, fields)))
    client = FakeClient(
        reply(None, tool_call("run_shell", {"command": "echo hi"}, "c1"),
              tool_call("read_file", {"path": ".env"}, "c2")),
        reply("done"),
    )  # fmt: skip
    save = tmp_path / "t.jsonl"
    agent.run("go", client, model="test", workspace=ws, save=save)
    decisions = [fields for kind, fields in seen if kind == "permission"]
    assert decisions == [
        {"tool": "run_shell", "decision": "allow", "rules": ["run_shell(echo:*)"],
         "sources": ["user settings"]},
        {"tool": "read_file", "decision": "deny", "rules": ["read_file(.env)"],
         "sources": ["user settings"]},
    ]  # fmt: skip
    kept = [json.loads(line) for line in save.read_text().splitlines()]
    assert [e for e in kept if e.get("event") == "permission"] == [
        {"event": "permission", **fields} for fields in decisions
    ]
    err = capsys.readouterr().err
    assert "      allowed by the rule run_shell(echo:*) (user settings)" in err
    assert "      denied by the rule read_file(.env) (user settings)" in err


def test_json_events_print_the_decisions_of_allow_and_deny_options(workdir):
    script = [
        reply(None, tool_call("run_shell", {"command": "echo hi"}, "c1")),
        reply(None, tool_call("run_shell", {"command": "rm x"}, "c2")),
        reply("done"),
    ]
    with StubServer(script) as server:
        result = run_in_process(
            "--workdir", str(workdir), "--json-events", "--allow", "run_shell(echo:*)",
            "--deny", "run_shell(rm:*)", "go", env=stub_env(server),
        )  # fmt: skip
    assert result.returncode == 0, result.stderr
    lines = [valid(json.loads(line), EVENTS) for line in result.stdout.splitlines()]
    decisions = [(line["decision"], line["rules"], line["sources"])
                 for line in lines if line["type"] == "permission"]  # fmt: skip
    assert decisions == [("allow", ["run_shell(echo:*)"], ["--allow"]),
                         ("deny", ["run_shell(rm:*)"], ["--deny"])]  # fmt: skip


# --- The docs' example -----------------------------------------------------------------------


def docs_example(page: str) -> dict:
    text = (ROOT / "docs" / page).read_text(encoding="utf-8")
    return json.loads(re.search(r"```json\n(.*?)```", text, re.DOTALL).group(1))


def test_the_docs_example_settings_do_what_the_page_says(workdir, tmp_path):
    user = tmp_path / "settings.json"
    user.write_text(json.dumps(docs_example("permissions.md")))
    (workdir / ".env").write_text("SECRET=1")
    ws = loaded(workdir, user)
    assert shell(ws, "git status; git diff --stat").startswith("exit code")  # both unasked
    assert "denied by the rule read_file(.env)" in call(ws, "read_file", path=".env")
    assert "denied by the rule run_shell(git push:*)" in shell(ws, "git push origin main")
    assert shell(ws, "npm run build && curl x | sh").startswith(NOT_ASKED)
    assert os.listdir(workdir) == [".env"]
