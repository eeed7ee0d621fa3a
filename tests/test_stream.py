"""Streamed replies (--stream): a real process, the real SDK, and the stub server's
server-sent events. A streamed run must be indistinguishable from a plain one in what the model
is sent, what is saved and what is counted; quirky and broken streams; and what a person sees on
a real pseudo-terminal while the reply arrives."""

from __future__ import annotations

import io
import sys
import threading
import time

import forked_agents
import pexpect
import pytest
from conftest import (
    ROOT,
    clean_env,
    finish,
    on_a_terminal,
    run_in_process,
    saved_messages,
    stub_env,
)
from fake_model import reply, tool_call
from stub_server import Streamed, StubServer, demo_script

from minimal_agent.views import display


def write_and_read(step: int, text: str | None = "I will write it, then read it back.") -> dict:
    write = tool_call("write_file", {"path": f"out{step}.txt", "content": "x" * 50}, f"w{step}")
    read = tool_call("read_file", {"path": f"out{step}.txt"}, f"r{step}")
    return reply(text, write, read, reasoning="Two calls at once.")


def every_shape() -> list:
    """One session whose replies come in every quirky shape, with every reasoning field."""
    vllm = {"role": "assistant", "content": None, "reasoning": "vLLM names it reasoning."}
    vllm["tool_calls"] = [tool_call("read_file", {"path": "notes.txt"}, "v1")]
    plain = reply(None, tool_call("read_file", {"path": "notes.txt"}, "p1"))  # no reasoning
    return [
        Streamed(write_and_read(1), "no_index"),  # Gemini: whole calls, no index
        Streamed(write_and_read(2, ""), "fragments_no_index"),  # old Ollama; content ""
        Streamed(write_and_read(3), "repeated"),  # id and name on every delta
        Streamed(plain, "usage_on_finish", keepalive=True),
        vllm,
        reply("All done.", reasoning=""),
    ]


SCRIPTS = {"the lesson's demo": demo_script, "every shape and field": every_shape}
NAMES = [
    pytest.param("the lesson's demo", marks=pytest.mark.posix("the demo task runs python3")),
    "every shape and field",
]


def session(tmp_path, name: str, script: list, *options: str):
    """Run the agent once (in this process) against script; (result, server, transcript text)."""
    work = tmp_path / name
    work.mkdir()
    (work / "notes.txt").write_text("hi\n")
    saved = tmp_path / f"{name}.jsonl"
    with StubServer(script) as server:
        proc = run_in_process(
            "--workdir", str(work), "--yes", "--save", str(saved), *options, "do it",
            env=stub_env(server),
        )  # fmt: skip
    assert server.problems == [], server.problems
    return proc, server, saved.read_text()


def messages_in(transcript: str) -> list[str]:
    """A transcript's message lines, as written (the events hold the workdir and times)."""
    return [line for line in transcript.splitlines() if '"event":' not in line[:12]]


@pytest.mark.parametrize("name", NAMES)
def test_a_streamed_run_equals_a_plain_run(tmp_path, name):
    plain, plain_server, plain_saved = session(tmp_path, "plain", SCRIPTS[name](), "--no-stream")
    streamed, server, saved = session(tmp_path, "streamed", SCRIPTS[name](), "--stream")
    assert plain.returncode == streamed.returncode == 0, streamed.stderr
    assert messages_in(saved) == messages_in(plain_saved)  # the same messages, byte for byte
    assert streamed.stdout == plain.stdout  # exactly the answer, once
    totals = [p.stderr.strip().splitlines()[-1] for p in (plain, streamed)]
    assert totals[0] == totals[1] and totals[0].startswith("steps ")  # the same usage counted
    options = {"stream": True, "stream_options": {"include_usage": True}}
    assert [{**r, **options} for r in plain_server.requests] == server.requests
    assert all("stream" not in r for r in plain_server.requests)


def test_text_that_comes_with_tool_calls_and_thinking_are_shown_on_stderr(tmp_path):
    proc, _, _ = session(tmp_path, "s", [write_and_read(1), reply("Done.")], "--stream")
    shown = "[1] thinking: Two calls at once.\n[1] I will write it, then read it back.\n"
    assert shown in proc.stderr
    assert "[1] write_file(path='out1.txt'" in proc.stderr
    assert "\033" not in proc.stderr  # not a terminal: plain text, no colour, no waiting line
    assert proc.stdout == "Done.\n"


def plain_session() -> list:
    return [reply(None, tool_call("read_file", {"path": "notes.txt"}, "c1")), reply("ok")]


def test_in_a_pipe_it_does_not_stream_unless_asked_and_replay_ignores_stream(tmp_path):
    proc, server, saved = session(tmp_path, "s", plain_session())
    assert proc.returncode == 0 and proc.stdout == "ok\n"
    assert all("stream" not in r for r in server.requests)
    (tmp_path / "r.jsonl").write_text(saved)
    work = tmp_path / "replay"
    work.mkdir()
    (work / "notes.txt").write_text("hi\n")
    proc = run_in_process(
        "--workdir", str(work), "--replay", str(tmp_path / "r.jsonl"), "--stream",
        env=clean_env(),  # no key, no server
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "ok\n"


def broken(end: str, times: int = 1) -> list:
    """A reply whose tool call must never run, because its stream does not end well."""
    call = tool_call("write_file", {"path": "never.txt", "content": "no"}, "c1")
    return [Streamed(reply("Writing.", call, reasoning="Let me write it."), end=end)] * times


@pytest.mark.parametrize(
    "end, phrase",
    [
        ("cut", "the stream ended before the server finished the reply, a second time"),
        ("drop", "the connection broke before the server finished the reply, a second time"),
        ("error", "the server reported an error in the middle of the reply (upstream model"),
    ],
)
def test_a_stream_that_does_not_finish_twice_is_an_error_and_nothing_of_it_is_kept(
    tmp_path, end, phrase
):
    proc, server, saved = session(tmp_path, "s", broken(end, times=2), "--stream")
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr and proc.stdout == ""
    assert proc.stderr.strip().splitlines()[-1].startswith(f"error: {phrase}")
    assert [m["role"] for m in saved_messages(saved)] == ["system", "user"]
    assert not (tmp_path / "s" / "never.txt").exists()  # its tool call did not run
    assert len(server.requests) == 2  # asked again once (see test_daily_driver.py)


def test_a_stalled_stream_is_given_up_at_the_request_timeout(tmp_path):
    started = time.monotonic()
    proc, server, saved = session(
        tmp_path, "s", broken("stall"), "--stream", "--request-timeout", "1"
    )
    assert time.monotonic() - started < 40  # given up; not the stub's 60 s stall, the SDK's 600 s
    assert proc.returncode == 1, proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("error: the server sent nothing for 1 s in the middle of the reply")
    assert "--request-timeout" in last and "Traceback" not in proc.stderr
    assert [m["role"] for m in saved_messages(saved)] == ["system", "user"]
    assert not (tmp_path / "s" / "never.txt").exists()
    assert len(server.requests) == 1  # a broken stream is not sent again


# --- On a real pseudo-terminal -----------------------------------------------------------


def spawn(server, *args: str, **settings: str) -> pexpect.spawn:
    return forked_agents.spawn(
        sys.executable,
        [str(ROOT / "agent.py"), *args],
        env=stub_env(server, **settings),
        cwd=str(ROOT / "tests"),
        encoding="utf-8",
        timeout=30,
        dimensions=(40, 200),
    )


@on_a_terminal
@pytest.mark.parametrize("no_color", [False, True])
def test_thinking_appears_before_the_reply_finishes(workdir, no_color):
    hold = threading.Event()
    script = [Streamed(reply("The answer is 42.", reasoning="Thinking it over."), hold=hold)]
    with StubServer(script) as server:
        settings = {"NO_COLOR": "1"} if no_color else {}
        child = spawn(server, "--workdir", str(workdir), "think", **settings)
        child.expect_exact("Thinking it ")  # the first piece, while the server holds the rest
        shown = child.before
        assert not hold.is_set()
        hold.set()
        child.expect_exact("The answer is 42.")
        rest = child.before
        child.expect_exact("^ the answer")
        output = shown + rest + child.before
        assert finish(child) == 0
        output += child.before
    assert "[1] thinking: " in shown
    assert ("\033[2m" in shown) is not no_color  # dim on a colour terminal, plain with NO_COLOR
    assert "The answer is 42." not in output  # shown once: not printed again on stdout
    assert server.problems == []


@on_a_terminal
def test_the_approval_prompt_works_while_streaming(workdir, tmp_path):
    command = "echo hi > hi.txt"
    call = tool_call("run_shell", {"command": command}, "c1")
    script = [reply("Running it.", call, reasoning="A command."), reply("Done.", reasoning="")]
    with StubServer(script) as server:
        child = spawn(server, "--workdir", str(workdir), "--save", str(tmp_path / "t.jsonl"), "x")
        child.expect_exact("[1] thinking: ")
        child.expect_exact("[1] Running it.")
        child.expect_exact(f"$ {command}")
        child.expect_exact("Run it? [y/N/a] ")
        child.sendline("y")
        child.expect_exact("Done.")
        assert finish(child) == 0
    assert (workdir / "hi.txt").read_text() == "hi\n"
    assert server.requests[0]["stream"] is True  # a terminal streams by default
    assert server.requests[1]["messages"][-1]["content"] == "exit code 0\n"
    assert server.problems == []


@on_a_terminal
def test_ctrl_c_while_streaming_exits_130_and_keeps_nothing_partial(workdir, tmp_path):
    hold = threading.Event()
    transcript = tmp_path / "t.jsonl"
    script = [Streamed(reply("never", reasoning="Thinking for a long time."), hold=hold)]
    with StubServer(script) as server:
        child = spawn(server, "--workdir", str(workdir), "--save", str(transcript), "x")
        child.expect_exact("Thinking for")  # the first piece; the server holds the rest
        child.sendintr()
        child.expect_exact("interrupted")
        assert "\033[0m" in child.before  # the terminal is not left dimmed
        assert finish(child) == 130
    assert [m["role"] for m in saved_messages(transcript)] == [
        "system",
        "user",
    ]


@on_a_terminal
def test_the_waiting_line_counts_seconds_and_a_plain_answer_is_marked(workdir):
    released = threading.Event()

    def slow(request):
        released.wait(30)
        return reply("Slow but sure.")

    with StubServer([slow]) as server:
        child = spawn(server, "--workdir", str(workdir), "--no-stream", "x")
        child.expect_exact("[1] waiting for the model... 1 s")  # alive, and counting
        released.set()
        child.expect_exact("answer:")
        child.expect_exact("Slow but sure.")
        assert finish(child) == 0


class TerminalStream(io.StringIO):
    """stderr as a terminal, keeping what is written to it."""

    def isatty(self) -> bool:
        return True


def attach(debugger: str):
    """Attach a stand-in debugger as pdb does (a trace function) or as debugpy does from
    Python 3.12 (sys.monitoring's debugger slot); returns what detaches it."""
    if debugger == "trace function":
        sys.settrace(lambda frame, event, arg: None)
        return lambda: sys.settrace(None)
    if debugger == "sys.monitoring":
        monitoring = sys.monitoring
        monitoring.use_tool_id(monitoring.DEBUGGER_ID, "a debugger")
        return lambda: monitoring.free_tool_id(monitoring.DEBUGGER_ID)
    return lambda: None


@pytest.mark.parametrize(
    "debugger",
    [
        None,
        "trace function",
        pytest.param(
            "sys.monitoring",
            marks=pytest.mark.skipif(not hasattr(sys, "monitoring"), reason="Python 3.12+"),
        ),
    ],
)
def test_nothing_animates_on_the_terminal_while_a_debugger_is_attached(monkeypatch, debugger):
    # The counting line would overwrite the debugger's prompt: a breakpoint inside the request
    # (completions.ask) stops the agent while the count goes on in its thread.
    if sys.gettrace() is not None:
        pytest.skip("the tests run under a trace function already (coverage or a debugger)")
    stderr = TerminalStream()
    monkeypatch.setattr(sys, "stderr", stderr)
    detach = attach(debugger)
    try:
        with display.waiting(1):
            time.sleep(1.3)  # the count ticks after a second
    finally:
        detach()
    if debugger is None:  # the control: on a terminal, it counts
        assert stderr.getvalue().startswith("[1] waiting for the model...\r[1] waiting")
        assert "waiting for the model... 1 s" in stderr.getvalue()
    else:
        assert stderr.getvalue() == ""
