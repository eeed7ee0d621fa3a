"""The command line's modes (--show, --html, --sessions, --undo/--redo, --mcp, --replay and the
run): the options each takes, one usage-error line for any other, the parsed options never
changed, and each mode's function called with what it takes. In this process (cli.mode_of on a
parsed namespace, conftest.run_in_process): no process boundary is what these check."""

from __future__ import annotations

import argparse
import copy
import json

import pytest
from conftest import ROOT, clean_env, run_in_process, stub_env
from fake_model import reply
from stub_server import StubServer

import agent
import model_client
from minimal_agent import cli
from minimal_agent.common.errors import AgentError
from minimal_agent.core.events import Events

EXAMPLE = ROOT / "examples" / "tool_demo.jsonl"
ACTIONS = {
    action.dest: action
    for action in cli.build_parser(agent)._actions
    if action.dest not in ("help", "version")
}
MODE_ARGS = {  # each mode as typed, with what it needs and nothing else
    "show": ["--show", "ID"],
    "html": ["--html", "ID"],
    "sessions": ["--sessions"],
    "undo": ["--undo"],
    "redo": ["--redo"],
    "mcp": ["--mcp"],
    "replay": ["--replay", "run.jsonl"],
    "run": [],
}


def typed(dest: str) -> list[str]:
    """The option that sets dest as a user types it, with a value where it takes one."""
    action = ACTIONS[dest]
    if not action.option_strings:
        return ["some words"]
    if action.nargs == 0:
        return [action.option_strings[0]]
    return [action.option_strings[0], action.choices[0] if action.choices else "1"]


def mode_or_mistake(argv: list[str], capsys) -> str:
    """The mode argv chooses, or the line of its usage error (exit 2)."""
    parser = cli.build_parser(agent)
    args = parser.parse_args(argv)
    try:
        return cli.mode_of(parser, args)
    except SystemExit as end:
        assert end.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines[0].startswith("usage: agent.py") and len(lines) == 2, lines
    assert lines[1].startswith("agent.py: error: ")
    return lines[1].removeprefix("agent.py: error: ")


def test_the_table_names_every_option_once_a_mode_or_taken_by_one():
    modes = set(cli.MODE_OPTIONS) - {"run"}
    taken = set().union(*cli.MODE_OPTIONS.values())
    assert set(ACTIONS) == modes | taken and not modes & taken


@pytest.mark.parametrize("mode", list(MODE_ARGS))
def test_each_mode_takes_its_own_options(mode, capsys):
    assert mode_or_mistake(MODE_ARGS[mode], capsys) == mode
    for dest in cli.MODE_OPTIONS[mode]:
        assert mode_or_mistake(MODE_ARGS[mode] + typed(dest), capsys) == mode, dest


@pytest.mark.parametrize("mode", list(MODE_ARGS))
def test_any_other_option_is_one_usage_line_naming_it_and_the_mode(mode, capsys):
    refused = set(ACTIONS) - cli.MODE_OPTIONS[mode] - set(cli.MODE_OPTIONS) - {mode}
    assert refused >= {"wire", "force"} - cli.MODE_OPTIONS[mode]
    for dest in sorted(refused):
        line = mode_or_mistake(typed(dest) + MODE_ARGS[mode], capsys)  # before --html's nargs
        option = "/".join(ACTIONS[dest].option_strings) or "task"
        if dest in cli.RUN_OPTIONS:  # the run's option, given to another mode
            assert line.startswith(f"--{mode} takes no {option}: "), line
        else:  # another mode's own, given to the run or to a mode that does not take it
            owners = " or ".join(f"--{m}" for m, taken in cli.MODE_OPTIONS.items() if dest in taken)
            assert line == f"{option} goes with {owners}"


def test_two_modes_are_one_usage_line_naming_both(capsys):
    modes = [mode for mode in MODE_ARGS if mode != "run"]
    for first in modes:
        for second in modes[modes.index(first) + 1 :]:
            line = mode_or_mistake(MODE_ARGS[first] + MODE_ARGS[second], capsys)
            named = line.removesuffix(": give one of them").split(" and ")
            assert sorted(named) == sorted([f"--{first}", f"--{second}"]), line


def test_the_messages_the_docs_and_scripts_know_are_kept(capsys):
    assert mode_or_mistake(["--undo", "a task"], capsys).startswith("--undo takes no task")
    assert mode_or_mistake(["--wire", "task"], capsys) == "--wire goes with --show"
    assert mode_or_mistake(["--force"], capsys) == "--force goes with --undo or --redo"
    assert mode_or_mistake(["--undo", "--redo"], capsys) == "--undo and --redo: give one of them"
    assert mode_or_mistake(["--show", "ID", "--no-stream"], capsys).startswith(
        "--show takes no --stream/--no-stream: "
    )  # an option given as its default's opposite is given
    assert mode_or_mistake(["--replay", "r.jsonl", "-r", "ID"], capsys) == (
        "--replay takes no -r/--resume: it asks no model and starts its own conversation from "
        "the transcript's replies"
    )


def test_a_mode_given_an_option_it_does_not_take_reads_nothing_and_says_so_in_json(tmp_path):
    # No key, no settings folder: the usage error comes before anything is read.
    proc = run_in_process("--sessions", "--json", env=clean_env(LLM_SESSIONS_DIR=str(tmp_path)))
    assert proc.returncode == 2
    record = json.loads(proc.stdout)
    assert record["status"] == "usage"
    assert record["error"] == "--sessions takes no --json: give it alone"
    assert list(tmp_path.iterdir()) == []


class ReadOnly(argparse.Namespace):
    def __setattr__(self, name, value):
        raise AttributeError(f"the parsed options were changed: {name} = {value!r}")


@pytest.fixture
def parsed_options(monkeypatch) -> list[tuple[argparse.Namespace, dict]]:
    """main()'s parsed options, made read-only, each with a copy of what they were."""
    seen = []
    parse = cli.Parser.parse_args

    def read_only(self, *args, **kwargs):
        options = parse(self, *args, **kwargs)
        seen.append((options, copy.deepcopy(vars(options))))
        options.__class__ = ReadOnly
        return options

    monkeypatch.setattr(cli.Parser, "parse_args", read_only)
    return seen


def test_each_mode_does_its_work_and_none_changes_the_parsed_options(
    parsed_options, workdir, tmp_path, monkeypatch
):
    monkeypatch.setattr(model_client, "CONFIG_FILE", tmp_path / "config.env")  # no mcp.json
    sessions = tmp_path / "sessions"
    offline = clean_env(LLM_SESSIONS_DIR=str(sessions))
    at = ["--workdir", str(workdir)]
    with StubServer([reply("ok")]) as server:
        ran = run_in_process(*at, "say ok", env=stub_env(server, LLM_SESSIONS_DIR=str(sessions)))
    (saved,) = sessions.glob("*.jsonl")
    page = tmp_path / "p.html"
    done = {
        "run": ran,
        "replay": run_in_process(*at, "--yes", "--replay", str(EXAMPLE), env=offline),
        "show": run_in_process(*at, "--show", saved.stem, env=offline),
        "html": run_in_process("--html", saved.stem, str(page), env=offline),
        "sessions": run_in_process(*at, "--sessions", env=offline),
        "undo": run_in_process(*at, "--undo", env=offline),
        "mcp": run_in_process(*at, "--mcp", env=offline),
    }
    codes = {mode: proc.returncode for mode, proc in done.items()}
    assert codes == {mode: 1 if mode == "undo" else 0 for mode in done}, done
    assert done["run"].stdout == "ok\n"
    assert "391" in done["replay"].stdout  # the demo's 17 * 23, run for real
    assert "say ok" in done["show"].stdout and page.is_file()
    assert done["sessions"].stdout.splitlines()[1].startswith(saved.stem)
    assert f"the conversation {saved.stem} changed no file" in done["undo"].stderr
    assert done["mcp"].stdout.startswith("no MCP server is configured")
    assert len(parsed_options) == len(done)
    for options, before in parsed_options:
        assert vars(options) == before


def test_the_read_only_options_would_catch_a_change(parsed_options, monkeypatch):
    """The check above can fail: a mode that writes its workdir back into the options."""

    def writes_back(*args, **kwargs):
        parsed_options[-1][0].workdir = "elsewhere"

    monkeypatch.setattr(cli, "show_conversation", writes_back)
    with pytest.raises(AttributeError, match="the parsed options were changed: workdir"):
        run_in_process("--show", str(EXAMPLE), env=clean_env())


# --- Each mode's function, called with what it takes -------------------------------------------


@pytest.fixture
def said() -> tuple[Events, list]:
    stream, seen = Events(), []
    stream.subscribe(lambda kind, fields: seen.append((kind, fields)))
    return stream, seen


def notices(seen: list) -> list[str]:
    return [fields["text"] for kind, fields in seen if kind == "notice"]


def test_show_prints_the_timeline_and_html_writes_the_page(said, tmp_path, capsys):
    stream, seen = said
    settings = {"LLM_SESSIONS_DIR": str(tmp_path)}
    assert cli.show_conversation(str(EXAMPLE), False, lambda: settings, stream) == 0
    assert "17 * 23" in capsys.readouterr().out
    page = tmp_path / "page.html"
    assert cli.write_page(str(EXAMPLE), str(page), load_config=lambda: settings, stream=stream) == 0
    assert page.read_text().startswith("<!DOCTYPE html>")
    assert notices(seen) == [f"wrote {page}: open it in a browser"]
    assert cli.show_conversation(str(tmp_path / "gone.jsonl"), True, lambda: settings, stream) == 1
    assert notices(seen)[-1].startswith("error: ") and capsys.readouterr().out == ""


def test_sessions_lists_the_folder_named_by_the_settings(tmp_path, capsys):
    (tmp_path / "20260101-120000-abcd.jsonl").write_bytes(EXAMPLE.read_bytes())
    assert cli.list_sessions({"LLM_SESSIONS_DIR": str(tmp_path)}) == 0
    rows = capsys.readouterr().out.splitlines()
    assert rows[0].split()[0] == "ID" and rows[1].startswith("20260101-120000-abcd")


def test_undo_of_a_workdir_without_a_conversation_names_it(said, tmp_path, workdir):
    stream, _ = said
    config = {"LLM_SESSIONS_DIR": str(tmp_path / "sessions")}
    with pytest.raises(AgentError, match="there is no saved conversation of the workdir"):
        cli.take_back(config, "undo", None, False, str(workdir), stream)


def test_a_mode_that_fails_ends_in_one_line_and_its_exit_code(said):
    stream, seen = said

    def unreadable():
        raise AgentError("config.env is not UTF-8 text")

    assert cli.configured(stream, unreadable, cli.list_sessions) == 1
    assert notices(seen) == ["error: config.env is not UTF-8 text"]
    assert ("error", {"error": "config.env is not UTF-8 text"}) in seen


@pytest.mark.parametrize(
    "error, code, last",
    [
        (KeyboardInterrupt(), 130, "interrupted"),
        (PermissionError(13, "Permission denied", "sessions"), 1, "error: [Errno 13] Permission"),
        (ValueError("no user causes this"), 1, "this is a bug in the agent"),
    ],
)
def test_what_ends_a_mode_is_one_line_and_its_exit_code(said, error, code, last):
    stream, seen = said

    def fails(config):
        raise error

    assert cli.configured(stream, lambda: {"api_key": "sk-secret-key"}, fails) == code
    assert notices(seen)[-1].startswith(last)
    assert "sk-secret-key" not in repr(seen)
