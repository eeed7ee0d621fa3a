"""Issue 24, the terminal: a hostile model (or server) cannot hide a command from the approval
prompt, cannot answer the prompt with keys typed before it appeared, and cannot write escape
sequences to the user's terminal. The agent runs as a real process on a pseudo-terminal (pexpect)
against the stub server; what a person sees is read back through a terminal emulator (pyte)."""

from __future__ import annotations

import io
import json
import sys
import threading
import types

import forked_agents
import pexpect
import pyte
import pytest
from conftest import ROOT, clean_env, run_in_process, stub_env, wait_for
from fake_model import reply, tool_call
from stub_server import Fail, StubServer

from minimal_agent.views import display

on_a_terminal = pytest.mark.posix("a pseudo-terminal (pexpect.spawn) and /bin/sh")

PROMPT = b"Run it? [y/N/a] "
ROWS, COLUMNS = 24, 80

# What a steered model would write to take over a terminal: OSC 52 sets the clipboard, OSC 0 the
# window title, SGR 8 hides what follows, ESC[2K and a bare CR wipe the line, C1 CSI (U+009B)
# clears the screen, U+202E turns the text around.
HOSTILE = (
    "\x1b]52;c;cm0gLXJmIH4K\x07\x1b]0;pwned\x07\x1b[8mhidden\x1b[2K\rFAKE\x1b[1A\u009b2J\u202eRTL"
)
RAW = [b"\x1b]52;", b"\x1b]0;", b"\x1b[8m", b"\x07", b"\x1b[2K", b"\rFAKE", b"\x1b[1A",
       "\u009b".encode(), "\u202e".encode()]  # fmt: skip


def shell_call(call_id: str, command: str) -> dict:
    return reply(None, tool_call("run_shell", {"command": command}, call_id), reasoning="")


def agent_on_terminal(server, *args: str, redirect: str = "") -> pexpect.spawn:
    """agent.py ARGS on a ROWS x COLUMNS pseudo-terminal, every byte it writes there kept in
    child.logfile_read; redirect (a shell redirection such as "> out") takes stdout or stderr
    off the terminal."""
    program = [sys.executable, str(ROOT / "agent.py"), *args]
    if redirect:
        program = ["/bin/sh", "-c", f'exec "$0" "$@" {redirect}', *program]
    child = forked_agents.spawn(
        program[0], program[1:], env=stub_env(server), cwd=str(ROOT / "tests"), timeout=30,
        dimensions=(ROWS, COLUMNS),
    )  # fmt: skip
    child.logfile_read = io.BytesIO()
    return child


def written(child: pexpect.spawn) -> bytes:
    return child.logfile_read.getvalue()


def screen(output: bytes) -> str:
    """What a person sees on a ROWS x COLUMNS terminal once output has been written to it."""
    terminal = pyte.Screen(COLUMNS, ROWS)
    pyte.ByteStream(terminal).feed(output)
    return "\n".join(line.rstrip() for line in terminal.display)


def finish(child: pexpect.spawn) -> int:
    child.expect(pexpect.EOF)
    child.close()
    return child.exitstatus


def assert_nothing_raw(output: bytes) -> None:
    for sequence in RAW:
        assert sequence not in output, f"{sequence!r} reached the terminal raw"


# --- 1. The approval prompt shows what will run ------------------------------------------------


def approved_on_terminal(workdir, command: str) -> tuple[str, bytes, StubServer]:
    """The model proposes command and the user approves it, on the terminal: the screen at
    the prompt, everything written to the terminal, and the stub (what it was sent)."""
    with StubServer([shell_call("c1", command), reply("done")]) as server:
        child = agent_on_terminal(server, "--workdir", str(workdir), "go")
        child.expect_exact(PROMPT)
        shown = screen(written(child))
        child.sendline("y")
        child.expect_exact("done")
        assert finish(child) == 0
    return shown, written(child), server


MANY_LINES = "touch X" + "\n" * 120 + "echo all fine"
ONE_LONG_LINE = "touch X;" + " " * 19_979 + "echo all fine"


@on_a_terminal
@pytest.mark.parametrize(
    "command, counts",
    [(MANY_LINES, "121 lines, 140 characters"), (ONE_LONG_LINE, "1 line, 20,000 characters")],
    ids=["120 newlines", "20,000 characters"],
)
def test_a_long_commands_start_and_end_and_size_fit_on_the_screen_at_the_prompt(
    workdir, command, counts
):
    shown, _, server = approved_on_terminal(workdir, command)
    assert "$ touch X" in shown  # the dangerous start has not scrolled away
    assert "echo all fine" in shown
    assert counts in shown
    assert shown.rstrip().splitlines()[-1].strip().startswith("Run it?")
    assert (workdir / "X").exists()  # what ran is the command as the model wrote it
    assert server.requests[1]["messages"][-1]["content"] == "exit code 0\nall fine\n"
    assert server.problems == []


@on_a_terminal
def test_a_short_command_of_several_lines_is_shown_whole_line_by_line(workdir):
    command = "cat > notes.txt <<'EOF'\nfirst\n\tsecond\nEOF"
    shown, _, _ = approved_on_terminal(workdir, command)
    block = ["  $ cat > notes.txt <<'EOF'", "  > first", "  > \\tsecond", "  > EOF"]
    assert "\n".join(block) in shown
    assert "4 lines, 41 characters" in shown
    assert (workdir / "notes.txt").read_text() == "first\n\tsecond\n"


@on_a_terminal
def test_control_characters_in_a_command_are_shown_escaped_and_run_as_written(workdir):
    command = "echo 'looks safe\r\x1b[2K\x1b[8mhidden\u202etxt.exe' > f.txt"
    shown, output, _ = approved_on_terminal(workdir, command)
    assert r"$ echo 'looks safe\r\x1b[2K\x1b[8mhidden\u202etxt.exe' > f.txt" in shown
    assert "control characters are shown as escapes" in shown
    assert_nothing_raw(output)
    assert (workdir / "f.txt").read_bytes() == (command[6:-9] + "\n").encode()


# --- 2. Nothing typed before the prompt appeared answers it ------------------------------------


@on_a_terminal
def test_y_typed_while_the_model_thinks_does_not_approve_the_command(workdir):
    typed = threading.Event()

    def after_the_typing(request):
        typed.wait(20)
        return shell_call("c1", "touch X")

    with StubServer([after_the_typing, reply("done")]) as server:
        child = agent_on_terminal(server, "--workdir", str(workdir), "go")
        wait_for(lambda: server.requests, "the request never arrived")
        child.send("y\r")  # into the terminal's input queue, before any question was asked
        child.expect_exact("y")  # echoed: the terminal has it
        typed.set()
        child.expect_exact(PROMPT)
        with pytest.raises(pexpect.TIMEOUT):  # the prompt waits for a real answer
            child.expect_exact("done", timeout=1.5)
        assert not (workdir / "X").exists()
        child.sendline("n")
        child.expect_exact("done")
        assert finish(child) == 0
    assert not (workdir / "X").exists()
    refused = server.requests[1]["messages"][-1]["content"]
    assert refused.startswith("Error: PermissionError: the user did not approve")


def test_on_windows_the_keys_typed_before_the_prompt_are_drained(monkeypatch):
    waiting = list("y\r")
    msvcrt = types.SimpleNamespace(kbhit=lambda: bool(waiting), getwch=lambda: waiting.pop(0))
    monkeypatch.setattr(sys, "platform", "win32")
    monkeypatch.setitem(sys.modules, "msvcrt", msvcrt)
    display.discard_typeahead()
    assert waiting == []


def test_without_a_terminal_there_is_no_typeahead_to_discard(tmp_path, monkeypatch):
    with open(tmp_path / "input", "w+") as file:  # a file, not a terminal: tcflush fails
        monkeypatch.setattr(sys, "stdin", file)
        display.discard_typeahead()


# --- 3. Nothing the model wrote reaches the terminal raw ---------------------------------------


def hostile_script() -> list:
    """A tool name, an argument name, a call id, thinking and an answer, each hostile."""
    calls = [
        tool_call(f"run{HOSTILE}", {}, "c1"),
        tool_call("read_file", {f"path{HOSTILE}": "x"}, f"c2{HOSTILE}"),
    ]
    first = reply(None, *calls, reasoning=f"thinking {HOSTILE}")
    answer = reply(f"answer {HOSTILE}\nsecond line\n\tindented", reasoning=f"again {HOSTILE}")
    return [first, answer]


@on_a_terminal
@pytest.mark.parametrize("stream", ["--stream", "--no-stream"])
def test_nothing_the_model_wrote_reaches_the_terminal_raw(workdir, tmp_path, stream):
    transcript = tmp_path / "run.jsonl"
    with StubServer(hostile_script()) as server:
        child = agent_on_terminal(
            server, "--workdir", str(workdir), "--save", str(transcript), stream, "go"
        )
        assert finish(child) == 0
        output = written(child)
    assert_nothing_raw(output)
    assert rb"answer \x1b]52;c;cm0gLXJmIH4K\x07\x1b]0;pwned\x07\x1b[8mhidden" in output
    assert b"second line\r\n\tindented" in output  # an answer's lines and tabs stay readable
    assert rb"[1] run\x1b]52;c;" in output  # the tool name, shown escaped
    assert rb"path\x1b]52;c;" in output  # the argument name
    assert server.problems == []
    shown = run_in_process("--show", str(transcript), env=stub_env(server))
    assert shown.returncode == 0
    assert_nothing_raw((shown.stdout + shown.stderr).encode())
    assert r"calls run\x1b]52;c;" in shown.stdout


def test_show_prints_a_transcripts_names_ids_and_texts_escaped(tmp_path):
    [first, answer] = hostile_script()
    messages = [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "go"},
        first,
        {"role": "tool", "tool_call_id": "c1", "content": f"Error: {HOSTILE}"},
        {"role": "tool", "tool_call_id": f"c2{HOSTILE}", "content": "x"},
        {"event": "compaction", "kind": f"summary{HOSTILE}", "covers": 5, "messages": []},
        answer,
    ]
    transcript = tmp_path / "hostile.jsonl"
    transcript.write_text("".join(json.dumps(message) + "\n" for message in messages))
    shown = run_in_process("--show", str(transcript), env=clean_env())
    assert shown.returncode == 0
    assert_nothing_raw((shown.stdout + shown.stderr).encode())
    for escaped in ["calls run", "[c2", "(path", "compacted (summary", "(thinking): thinking "]:
        assert escaped + r"\x1b]52;c;" in shown.stdout


@on_a_terminal
@pytest.mark.parametrize("stream", ["--stream", "--no-stream"])
def test_an_answer_redirected_to_a_file_is_exactly_what_the_model_wrote(workdir, tmp_path, stream):
    answer = f"answer {HOSTILE}\nsecond line\n\tindented\r\n"
    out = tmp_path / "answer.txt"
    with StubServer([reply(answer, reasoning=f"thinking {HOSTILE}")]) as server:
        child = agent_on_terminal(
            server, "--workdir", str(workdir), stream, "go", redirect=f"> '{out}'"
        )
        assert finish(child) == 0
        output = written(child)  # stderr: the streamed answer, the step lines
    assert out.read_bytes() == (answer + "\n").encode()
    assert_nothing_raw(output)


@on_a_terminal
def test_an_answer_on_a_terminal_is_escaped_when_stderr_is_redirected(workdir, tmp_path):
    with StubServer([reply(f"answer {HOSTILE}")]) as server:
        child = agent_on_terminal(
            server, "--workdir", str(workdir), "go", redirect=f"2> '{tmp_path / 'err.log'}'"
        )
        assert finish(child) == 0
        output = written(child)
    assert_nothing_raw(output)
    assert rb"answer \x1b]52;c;" in output


@on_a_terminal
def test_an_error_quoting_the_server_reaches_the_terminal_escaped(workdir):
    with StubServer([Fail(400, f"bad request {HOSTILE}")]) as server:
        child = agent_on_terminal(server, "--workdir", str(workdir), "go")
        assert finish(child) == 1
        output = written(child)
    assert_nothing_raw(output)
    assert rb"bad request \x1b]52;c;" in output


def test_a_bugs_traceback_is_shown_escaped(workdir, monkeypatch):
    # A bug's exception may quote the model's words: its traceback goes through the escaping
    # too. The bug is made by breaking the request function from outside.
    def broken(*args, **kwargs):
        raise RuntimeError("boom \x1b]0;pwned\x07 \x1b[8mhidden")

    monkeypatch.setattr("minimal_agent.core.completions.complete", broken)
    with StubServer([reply("never")]) as server:
        proc = run_in_process("--workdir", str(workdir), "hi", env=stub_env(server))
    assert proc.returncode == 1
    assert "Traceback" in proc.stderr and "this is a bug in the agent" in proc.stderr
    assert "boom \\x1b]0;pwned\\x07 \\x1b[8mhidden" in proc.stderr
    assert "\x1b]" not in proc.stderr and "\x1b[8m" not in proc.stderr
