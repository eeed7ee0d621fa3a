"""Issue 25 as a daily user meets it: session IDs short enough to type, `--sessions | head`
ending quietly, the totals line and the "go on" line however a run ends, and a broken stream
asked again once. Real agents (in this process, or as processes on a pseudo-terminal) against
the stub server on 127.0.0.1."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import forked_agents
import pexpect
import pytest
from conftest import ROOT, finish, on_a_terminal, run_in_process, stub_env, wait_for
from fake_model import reply, tool_call
from stub_server import Billed, Fail, Streamed, StubServer

OLD_ID = "20261204-113000-ab12"  # an ID as the agent gave them before this issue


def run(server, workdir: Path, sessions: Path, *args: str, stdin: str = "", **settings: str):
    env = stub_env(server, LLM_SESSIONS_DIR=str(sessions), **settings)
    return run_in_process("--workdir", str(workdir), *args, env=env, stdin=stdin)


@pytest.fixture
def sessions(tmp_path: Path) -> Path:
    return tmp_path / "sessions"


def listed_ids(proc) -> list[str]:
    rows = proc.stdout.splitlines()[1:]
    return [row.split()[0] for row in rows if not row.startswith(("...", "continue one"))]


# --- Short IDs --------------------------------------------------------------------------------


def test_the_listed_id_or_its_beginning_resumes_the_conversation(workdir, sessions):
    script = [reply("first"), reply("by the shown id"), reply("by its beginning")]
    with StubServer(script) as server:
        assert run(server, workdir, sessions, "say first").returncode == 0
        shutil.copy(ROOT / "examples" / "tool_demo.jsonl", sessions / f"{OLD_ID}.jsonl")
        listing = run(server, workdir, sessions, "--sessions")
        (shown,) = [i for i in listed_ids(listing) if i != OLD_ID]
        assert len(shown) <= 12, listing.stdout
        for typed, answer in ((shown, "by the shown id"), (shown[:3], "by its beginning")):
            proc = run(server, workdir, sessions, "-r", typed, "more")
            assert proc.returncode == 0, proc.stderr
            assert proc.stdout == f"{answer}\n"
    assert server.problems == []


def test_an_old_long_id_still_resumes_whole_or_by_its_beginning(workdir, sessions):
    sessions.mkdir()
    shutil.copy(ROOT / "examples" / "tool_demo.jsonl", sessions / f"{OLD_ID}.jsonl")
    for typed in (OLD_ID, OLD_ID[:10]):
        with StubServer([reply("the old one")]) as server:
            proc = run(server, workdir, sessions, "-r", typed, "and now?")
        assert proc.returncode == 0, proc.stderr
        assert f"continuing the conversation in {sessions / OLD_ID}.jsonl" in proc.stderr


def test_sessions_into_a_pipe_closed_early_ends_quietly(workdir, sessions):
    """`--sessions | head -1`: the reader is gone before the list is written; no "Broken pipe"
    error, exit 0. The read end is closed before the agent writes, so the test never races."""
    with StubServer([reply("one")]) as server:
        assert run(server, workdir, sessions, "one").returncode == 0
        env = stub_env(server, LLM_SESSIONS_DIR=str(sessions))
    for option in ("--sessions", "--show"):
        args = [option] + ([str(next(sessions.glob("*.jsonl")))] if option == "--show" else [])
        proc = forked_agents.Popen(
            [sys.executable, str(ROOT / "agent.py"), *args], env=env, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        proc.stdout.close()  # as head does once it has its line
        stderr = proc.stderr.read()
        assert proc.wait(timeout=30) == 0, stderr
        assert stderr == ""
    head = subprocess.run(
        f"'{sys.executable}' '{ROOT / 'agent.py'}' --sessions | head -1", shell=True, env=env,
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert head.stdout.split() == "ID last change turns cost workdir first task".split()
    assert head.stderr == ""


# --- The totals, however a run ends -----------------------------------------------------------

BROKEN = [Fail(500, "Internal error", {"retry-after-ms": "10"})] * 3  # each of the SDK's tries


def read(call_id: str) -> dict:
    return reply(None, tool_call("read_file", {"path": "notes.txt"}, call_id), reasoning="")


def spawn_in(server, sessions: Path, *args: str) -> pexpect.spawn:
    """The agent on a pseudo-terminal (so the "go on" line is said), its sessions folder given."""
    return forked_agents.spawn(
        sys.executable, [str(ROOT / "agent.py"), *args], cwd=str(ROOT / "tests"),
        env=stub_env(server, LLM_SESSIONS_DIR=str(sessions)), encoding="utf-8", timeout=30,
        dimensions=(40, 200),
    )  # fmt: skip


def saved_id(sessions: Path) -> str:
    (transcript,) = sessions.glob("*.jsonl")
    return transcript.stem


@pytest.fixture
def notes(workdir: Path) -> Path:
    (workdir / "notes.txt").write_text("a note")
    return workdir


def test_an_error_after_paid_replies_still_gives_the_totals(notes, sessions):
    with StubServer([read("c1"), read("c2"), *BROKEN]) as server:
        proc = run(server, notes, sessions, "read it twice")
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert lines[-2].startswith("error: the server answered 500 (Internal error)")
    assert lines[-1].startswith("steps 2, tool calls 2, prompt tokens ")


@on_a_terminal
def test_after_an_error_on_a_terminal_the_go_on_line_follows(notes, sessions):
    with StubServer([read("c1"), *BROKEN]) as server:
        child = spawn_in(server, sessions, "--workdir", str(notes), "read it")
        child.expect_exact("error: the server answered 500")
        child.expect_exact("steps 1, tool calls 1, prompt tokens ")
        child.expect(r"saved as (\w+): go on with -c \(the latest here\) or -r (\w+)")
        assert child.match.group(1) == child.match.group(2) == saved_id(sessions)
        assert finish(child) == 1


@on_a_terminal
def test_ctrl_c_during_a_command_gives_the_totals_with_the_running_call(notes, sessions):
    run_shell = tool_call("run_shell", {"command": "touch started; sleep 60"}, "c2")
    with StubServer([read("c1"), reply(None, run_shell, reasoning="")]) as server:
        child = spawn_in(server, sessions, "--workdir", str(notes), "--yes", "read, then wait")
        wait_for(lambda: (notes / "started").exists())
        child.sendintr()
        child.expect_exact("interrupted")
        child.expect_exact("steps 2, tool calls 2, prompt tokens ")
        child.expect_exact(f"saved as {saved_id(sessions)}: go on with -c")
        assert finish(child) == 130


@on_a_terminal
def test_ctrl_c_at_the_chat_prompt_gives_the_sessions_totals(notes, sessions):
    with StubServer([read("c1"), reply("first answer")]) as server:
        child = spawn_in(server, sessions, "--workdir", str(notes), "--chat", "read it")
        child.expect_exact("first answer")
        child.expect_exact("> ")
        child.sendintr()
        child.expect_exact("session: turns 1, steps 2, tool calls 1, prompt tokens ")
        child.expect_exact(f"saved as {saved_id(sessions)}: go on with -c")
        assert finish(child) == 130


def test_a_chat_turn_ended_by_an_error_is_counted(notes, sessions):
    script = [reply("one"), read("c1"), *BROKEN]
    with StubServer(script) as server:
        proc = run(server, notes, sessions, "--chat", "first", stdin="second\n")
    assert proc.returncode == 0 and proc.stdout == "one\n"  # the failed turn ended, not the chat
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("session: turns 1 (and 1 failed), steps 2, tool calls 1, ")


def test_the_budget_stop_counts_the_turns_tool_calls(notes, sessions):
    billed = [Billed(read(f"c{n}"), created=1_796_000_000, miss=200_000) for n in (1, 2)]
    with StubServer(billed) as server:
        proc = run(server, notes, sessions, "--max-cost", "0.01", "read it twice")
    assert proc.returncode == 3, proc.stderr
    assert len(server.requests) == 1
    assert proc.stderr.strip().splitlines()[-1].startswith("steps 1, tool calls 1, ")


def test_nothing_paid_for_no_totals(notes, sessions):
    with StubServer([Fail(401, "Authentication Fails")]) as server:
        proc = run(server, notes, sessions, "hi")
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines()[-1].startswith("error: the server answered 401")


# --- A broken stream is asked again once -------------------------------------------------------


@pytest.mark.parametrize("end", ["cut", "drop", "error"])
def test_a_broken_stream_is_asked_again_once_and_nothing_of_it_is_kept(notes, sessions, end):
    lost = tool_call("write_file", {"path": "lost.txt", "content": "no"}, "lost1")
    kept = tool_call("write_file", {"path": "kept.txt", "content": "yes"}, "kept1")
    script = [
        Streamed(reply("Lost words.", lost, reasoning="Lost thinking."), end=end),
        reply("Kept words.", kept, reasoning="Kept thinking."),
        reply("done"),
    ]
    with StubServer(script) as server:
        proc = run(server, notes, sessions, "--stream", "write it")
    assert proc.returncode == 0, proc.stderr
    assert server.problems == []
    assert server.requests[1]["messages"] == server.requests[0]["messages"]  # the same request
    assert len(server.requests) == 3
    said = [line for line in proc.stderr.splitlines() if "asking again" in line]
    assert len(said) == 1 and said[0].endswith("; asking again (nothing of that one is kept)")
    assert not (notes / "lost.txt").exists() and (notes / "kept.txt").read_text() == "yes"
    (transcript,) = sessions.glob("*.jsonl")
    text = transcript.read_text()
    assert "Lost" not in text and "lost1" not in text and "Kept thinking." in text
    assert "steps 2, tool calls 1, " in proc.stderr  # the broken attempt is no step


@on_a_terminal
def test_after_a_broken_stream_the_retrys_thinking_is_labelled_anew(notes, sessions):
    script = [
        Streamed(reply("Lost words.", reasoning="Lost thinking."), end="drop"),
        reply("Kept words.", reasoning="Kept thinking."),
    ]
    with StubServer(script) as server:
        child = spawn_in(server, sessions, "--workdir", str(notes), "--stream", "say it")
        child.expect_exact("asking again (nothing of that one is kept)")
        child.expect_exact("[1] thinking: ")  # a label of its own, not a continued line
        child.expect_exact("Kept thinking.")
        assert finish(child) == 0
