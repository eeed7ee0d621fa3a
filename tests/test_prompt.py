"""The --chat prompt on a real terminal (pexpect): line editing and history with readline, kept
across sessions but never a line holding the key; /help, /exit and unknown /words answered
locally; a pasted block of lines sent as one message. And without readline (Windows has
none): on a real terminal with readline taken away, and under a simulated Windows."""

from __future__ import annotations

import io
import sys
import types
from pathlib import Path

import forked_agents
import pexpect
import pytest
from conftest import ROOT, finish, on_a_terminal, run_agent, stub_env
from fake_model import reply
from stub_server import StubServer

from minimal_agent.stores import conversations
from minimal_agent.views import prompt

UP = "\033[A"
PASTE = "\033[200~line one\rline two\033[201~"  # as a terminal sends a paste of two lines

# agent.py as the program on a system without readline (as on Windows).
WITHOUT_READLINE = """
import runpy, sys
sys.modules["readline"] = None
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def chat(server, workdir: Path, sessions_dir: Path, *, readline: bool = True) -> pexpect.spawn:
    program = [str(ROOT / "agent.py")]
    if not readline:
        program = ["-c", WITHOUT_READLINE, *program]
    child = forked_agents.spawn(
        sys.executable, [*program, "--workdir", str(workdir), "--chat"],
        env=stub_env(server, LLM_SESSIONS_DIR=str(sessions_dir)), cwd=str(ROOT / "tests"),
        encoding="utf-8", timeout=30, dimensions=(40, 200),
    )  # fmt: skip
    child.expect_exact("> ")
    return child


def users(request: dict) -> list[str]:
    return [m["content"] for m in request["messages"] if m["role"] == "user"]


@on_a_terminal
def test_the_up_arrow_recalls_a_line_of_an_earlier_session_but_never_one_with_the_key(
    workdir, tmp_path
):
    """The old prompt printed ^[[A for the Up arrow, and kept no history."""
    folder = tmp_path / "sessions"
    with StubServer([reply("one"), reply("two")]) as server:
        child = chat(server, workdir, folder)
        child.sendline("remember this line")
        child.expect_exact("one")
        child.expect_exact("> ")
        child.sendline(f"my key is {server.api_key}")
        child.expect_exact("two")
        child.expect_exact("> ")
        child.sendeof()
        assert finish(child) == 0
        history = conversations.history_file(folder)
        assert history.read_text().splitlines() == ["remember this line"]
        assert history.stat().st_mode & 0o777 == 0o600
    with StubServer([reply("three")]) as server:
        child = chat(server, workdir, folder)
        child.send(UP)  # the line with the key is not there: the one before it is
        child.send("\r")
        child.expect_exact("three")
        child.expect_exact("> ")
        child.sendeof()
        assert finish(child) == 0
    assert users(server.requests[-1]) == ["remember this line"]
    assert "^[[A" not in child.before


@on_a_terminal
def test_the_left_arrow_and_ctrl_r_edit_and_find_lines(workdir, tmp_path):
    """The old prompt printed ^[[D for the Left arrow; Ctrl-R found nothing."""
    with StubServer([reply("one"), reply("two")]) as server:
        child = chat(server, workdir, tmp_path / "sessions")
        child.send("wrld" + "\033[D" * 3 + "o\r")  # three to the left, and the missing o
        child.expect_exact("one")
        child.expect_exact("> ")
        for _ in range(5):  # sent before readline took the terminal, the terminal eats Ctrl-R
            child.send("\x12")  # Ctrl-R: search back
            if child.expect_exact(["(reverse-i-search)", pexpect.TIMEOUT], timeout=1) == 0:
                break
        child.send("wor")
        child.expect_exact("ld")  # "world" found, its "wor" highlighted
        child.send("\r")
        child.expect_exact("two")
        child.expect_exact("> ")
        child.sendeof()
        assert finish(child) == 0
    assert users(server.requests[-1]) == ["world", "world"]


@on_a_terminal
@pytest.mark.parametrize("readline", [True, False], ids=["readline", "without-readline"])
def test_help_and_unknown_words_are_answered_locally_and_exit_ends(workdir, tmp_path, readline):
    """The old prompt sent /help, /undoo and /exit to the model, and paid for each."""
    with StubServer([reply("never")]) as server:
        child = chat(server, workdir, tmp_path / "sessions", readline=readline)
        child.sendline("/help")
        child.expect_exact("the commands (at the '> ' prompt):")
        child.expect_exact("/compact")
        child.expect_exact("> ")
        child.sendline("/undoo")
        child.expect_exact("/undoo is not a command, so nothing was sent. The commands:")
        child.expect_exact("/redo")
        child.expect_exact("> ")
        child.sendline("/quit" if readline else "/exit")
        child.expect_exact("session: turns 0, steps 0")
        assert finish(child) == 0
    assert server.requests == []


@on_a_terminal
@pytest.mark.parametrize("readline", [True, False], ids=["readline", "without-readline"])
def test_a_pasted_block_of_two_lines_is_one_message(workdir, tmp_path, readline):
    """The old prompt made two turns of a pasted two-line message."""
    with StubServer([reply("got both lines"), reply("too many")]) as server:
        child = chat(server, workdir, tmp_path / "sessions", readline=readline)
        child.send(PASTE)
        child.send("\r")  # the Enter after the paste sends it
        child.expect_exact("got both lines")
        child.expect_exact("> ")
        child.sendeof()
        assert finish(child) == 0
    assert len(server.requests) == 1
    assert users(server.requests[0]) == ["line one\nline two"]


def test_a_piped_chat_ends_at_exit_and_never_sends_an_unknown_word(workdir):
    with StubServer([reply("first"), reply("second")]) as server:
        proc = run_agent(
            "--workdir", str(workdir), "--chat", "hello", env=stub_env(server),
            stdin="/frobnicate\nagain\n/exit\nnever sent\n",
        )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "first\nsecond\n"
    assert "/frobnicate is not a command, so nothing was sent" in proc.stderr
    assert [users(request) for request in server.requests] == [["hello"], ["hello", "again"]]


def test_a_path_is_a_message_not_a_command(workdir):
    with StubServer([reply("looked")]) as server:
        proc = run_agent(
            "--workdir", str(workdir), "--chat", env=stub_env(server), stdin="/usr/bin is odd\n"
        )
    assert proc.returncode == 0 and users(server.requests[0]) == ["/usr/bin is odd"]


class Console(io.StringIO):
    """A Windows console as stdin: a terminal whose pasted lines are all there at once."""

    def isatty(self) -> bool:
        return True


def test_without_readline_on_windows_lines_that_arrive_together_are_one_message(monkeypatch):
    """The Windows console sends no paste markers: a paste is the lines already waiting."""
    console = Console("line one\nline two\n/exit\n")
    waiting = types.SimpleNamespace(kbhit=lambda: console.tell() < len("line one\nline two\n"))
    monkeypatch.setattr(sys, "platform", "win32")
    monkeypatch.setitem(sys.modules, "readline", None)
    monkeypatch.setitem(sys.modules, "msvcrt", waiting)
    monkeypatch.setattr(sys, "stdin", console)
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    typed = prompt.Prompt()
    assert typed.next_message() == "line one\nline two"
    assert typed.next_message() == ""  # /exit
    assert sys.stderr.getvalue() == "> > "  # no paste-mode request a console would print


def test_without_readline_the_paste_markers_are_read_and_removed(monkeypatch):
    console = Console("\033[200~def f():\n    return 1\033[201~\n")
    monkeypatch.setitem(sys.modules, "readline", None)
    monkeypatch.setattr(sys, "stdin", console)
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    assert prompt.Prompt().next_message() == "def f():\n    return 1"
