"""Conversations that go on: --chat turns (piped and on a real terminal) and --resume FILE,
run as real processes against the stub server, which checks that every request begins with the
previous one byte for byte, across turns and across runs."""

from __future__ import annotations

import json
import os
import selectors
import subprocess
import sys
import threading
import time

import forked_agents
import pytest
from conftest import (
    ROOT,
    alive,
    clean_env,
    finish,
    on_a_terminal,
    run_agent,
    run_in_process,
    saved_messages,
    spawn,
    stub_env,
    wait_for,
)
from fake_model import reply, tool_call
from openai import OpenAI
from stub_server import StubServer

from minimal_agent.common import errors
from minimal_agent.core.session import NO_REPLY
from minimal_agent.stores.transcripts import check_conversation, transcript_lines


def answer(text: str) -> dict:
    return reply(text, reasoning="")


def call(name: str, arguments: dict, call_id: str) -> dict:
    return tool_call(name, arguments, call_id)


def lines_of(path) -> list[dict]:
    return saved_messages(path)


def write_lines(path, messages: list[dict]) -> None:
    path.write_text("".join(json.dumps(m) + "\n" for m in messages))


def read_line(stream, timeout: float = 30) -> str:
    """One line of a child's output, waiting at most timeout seconds for it."""
    selector = selectors.DefaultSelector()
    selector.register(stream, selectors.EVENT_READ)
    data, deadline = b"", time.monotonic() + timeout
    while not data.endswith(b"\n"):
        assert selector.select(max(0, deadline - time.monotonic())), f"no line yet: {data!r}"
        chunk = os.read(stream.fileno(), 1)
        assert chunk, f"the output ended: {data!r}"
        data += chunk
    return data.decode()


@pytest.mark.posix("select() on a pipe, which Windows allows only on sockets")
def test_piped_chat_answers_each_turn_as_it_ends_with_a_fresh_step_budget(workdir):
    (workdir / "notes.txt").write_text("a note")
    script = [
        answer("first answer"),
        reply(None, call("run_shell", {"command": "touch ran"}, "c1"), reasoning=""),
        answer("second answer"),
        reply(None, call("read_file", {"path": "notes.txt"}, "c2"), reasoning=""),
        answer("third answer"),
    ]
    with StubServer(script) as server:
        env = stub_env(server)
        env.pop("PYTHONUNBUFFERED", None)  # a pipe gets block-buffered output, as for users
        proc = forked_agents.Popen(
            [sys.executable, str(ROOT / "agent.py"), "--workdir", str(workdir), "--chat",
             "--max-steps", "2", "first question"],
            env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, cwd=ROOT / "tests",
        )  # fmt: skip
        try:
            assert read_line(proc.stdout) == "first answer\n"  # before any follow-up is sent
            proc.stdin.write(b"second question\n")
            proc.stdin.flush()
            assert read_line(proc.stdout) == "second answer\n"
            proc.stdin.write(b"third question\n\nnot sent\n")  # an empty line ends it
            proc.stdin.flush()
            assert read_line(proc.stdout) == "third answer\n"
            assert proc.wait(30) == 5  # turn 2's command was refused: no terminal to ask
        finally:
            proc.kill()
        err = proc.stderr.read().decode()
    assert proc.stdout.read() == b""
    assert server.problems == []
    assert len(server.requests) == 5
    users = [m["content"] for m in server.requests[-1]["messages"] if m["role"] == "user"]
    assert users == ["first question", "second question", "third question"]
    assert not (workdir / "ran").exists()  # without a terminal, commands still need --yes
    assert "start with --yes" in err and "step limit" not in err  # each turn had 2 steps
    summaries = [line for line in err.splitlines() if line.startswith("steps ")]
    assert [s.split(",")[0] for s in summaries] == ["steps 1", "steps 2", "steps 2"]
    assert err.splitlines()[-1].startswith("session: turns 3, steps 5, tool calls 2, ")
    assert "completion tokens 50" in err.splitlines()[-1]


@on_a_terminal
def test_ctrl_c_in_the_middle_turn_of_a_terminal_chat_cancels_that_turn_only(workdir, tmp_path):
    transcript = tmp_path / "chat.jsonl"
    command = "sleep 60 & echo $! > child.pid; wait"
    long_turn = reply(
        None,
        call("run_shell", {"command": command}, "c1"),
        call("read_file", {"path": "never.txt"}, "c2"),  # comes after the interrupted one
        reasoning="",
    )
    script = [answer("first answer"), long_turn, answer("third answer")]
    with StubServer(script) as server:
        child = spawn(
            server, "--workdir", str(workdir), "--chat", "--yes", "--save", str(transcript),
            "first question",
        )  # fmt: skip
        child.expect_exact("first answer")
        child.expect_exact("> ")
        child.sendline("run the long command")
        pid_file = workdir / "child.pid"
        wait_for(lambda: pid_file.exists() and pid_file.read_text().strip())
        child.sendintr()
        child.expect_exact("interrupted: the turn was cancelled")
        child.expect_exact("> ")
        assert not alive(int(pid_file.read_text()))  # the command's process group is killed
        child.sendline("third question")
        child.expect_exact("third answer")
        child.expect_exact("> ")
        child.sendeof()
        child.expect_exact("session: turns 2 (and 1 cancelled), ")
        assert finish(child) == 0
    assert server.problems == []
    third = server.requests[-1]["messages"]
    assert [m["role"] for m in third[-4:]] == ["assistant", "tool", "tool", "user"]
    for message, call_id in zip(third[-3:-1], ["c1", "c2"], strict=True):
        assert message["tool_call_id"] == call_id
        assert message["content"].startswith("Error: interrupted by the user (Ctrl-C)")
    assert third[-1]["content"] == "third question"
    assert lines_of(transcript) == [*third, {"role": "assistant", "content": "third answer",
                                              "reasoning_content": ""}]  # fmt: skip


@on_a_terminal
def test_ctrl_c_while_the_model_is_asked_cancels_the_turn_and_the_prompt_comes_back(workdir):
    released = threading.Event()

    def slow_reply(request):
        released.wait(30)  # the model is thinking...
        return {"role": "assistant", "content": "too late"}

    with StubServer([slow_reply, answer("second answer")]) as server:
        child = spawn(server, "--workdir", str(workdir), "--chat", "think hard")
        child.expect_exact("[1] waiting for the model...")
        wait_for(lambda: server.requests, "the request never arrived")
        child.sendintr()
        child.expect_exact("interrupted: the turn was cancelled")
        child.expect_exact("> ")
        released.set()
        child.sendline("never mind")
        child.expect_exact("second answer")
        child.expect_exact("> ")
        child.sendeof()
        assert finish(child) == 0
    assert server.problems == []
    assert [(m["role"], m["content"]) for m in server.requests[-1]["messages"][1:]] == [
        ("user", "think hard"),
        ("assistant", NO_REPLY),  # so that two user messages never follow each other
        ("user", "never mind"),
    ]  # nothing of the cancelled request's reply is kept


@on_a_terminal
def test_a_at_the_approval_prompt_approves_every_later_command_of_the_session(workdir):
    # "a" in the first turn of a terminal chat: the second turn's command runs unasked.
    script = [
        reply(None, call("run_shell", {"command": "echo one > one.txt"}, "c1"), reasoning=""),
        answer("turn one done"),
        reply(None, call("run_shell", {"command": "echo two > two.txt"}, "c2"), reasoning=""),
        answer("turn two done"),
    ]
    with StubServer(script) as server:
        child = spawn(server, "--workdir", str(workdir), "--chat", "make one.txt")
        child.expect_exact("$ echo one > one.txt")
        child.expect_exact("Run it? [y/N/a] (a: this and every later one this session) ")
        child.sendline("a")
        child.expect_exact("every later command of this session runs without asking")
        child.expect_exact("turn one done")
        child.expect_exact("> ")
        child.sendline("now make two.txt")
        child.expect_exact("[1] run_shell(command='echo two > two.txt')")
        child.expect_exact("turn two done")
        second_turn = child.before
        child.expect_exact("> ")
        child.sendline("")  # an empty line ends the session
        child.expect_exact("session: turns 2, ")
        assert finish(child) == 0
    assert "Run it?" not in second_turn and "$ echo two" not in second_turn
    assert (workdir / "one.txt").read_text() == "one\n"
    assert (workdir / "two.txt").read_text() == "two\n"
    results = [m["content"] for m in server.requests[-1]["messages"] if m["role"] == "tool"]
    assert results == ["exit code 0\n", "exit code 0\n"]
    assert server.problems == []


@on_a_terminal
def test_ctrl_c_at_the_chat_prompt_ends_the_session_with_130(workdir):
    with StubServer([answer("first answer")]) as server:
        child = spawn(server, "--workdir", str(workdir), "--chat", "first question")
        child.expect_exact("an empty line or Ctrl-D ends the session")
        child.expect_exact("first answer")
        child.expect_exact("> ")
        child.sendintr()
        child.expect_exact("interrupted")
        assert finish(child) == 130
    assert len(server.requests) == 1


def test_the_stub_sees_a_rewritten_history_that_dict_equality_would_miss():
    first = [{"role": "user", "content": "hi"}]
    reordered = [{"content": "hi", "role": "user"}, {"role": "user", "content": "again"}]
    with StubServer([answer("a"), answer("b")]) as server:
        client = OpenAI(api_key=server.api_key, base_url=server.url, max_retries=0)
        tools = [{"type": "function", "function": {"name": "f", "parameters": {}}}]
        client.chat.completions.create(model="m", messages=first, tools=tools)
        with pytest.raises(Exception, match="400"):
            client.chat.completions.create(model="m", messages=reordered, tools=tools)
    assert reordered[:1] == first  # equal as dicts, yet not the same bytes
    assert len(server.problems) == 1 and "byte for byte" in server.problems[0]


def test_continue_goes_on_with_the_saved_conversation_and_appends_to_it(workdir, tmp_path):
    transcript = tmp_path / "run.jsonl"
    (workdir / "notes.txt").write_text("héllo")
    script = [
        reply(None, call("read_file", {"path": "notes.txt"}, "c1"), reasoning="Read it."),
        answer("It says héllo."),
        answer("Five letters."),  # --resume with a task in words
        answer("Yes."),  # --resume --chat, first message from stdin
        answer("Bye."),
    ]
    with StubServer(script) as server:  # one server: it checks the prefix across the runs
        first = run_in_process(
            "--workdir", str(workdir), "--save", str(transcript), "read notes.txt",
            env=stub_env(server),
        )  # fmt: skip
        assert first.returncode == 0, first.stderr
        saved = transcript.read_bytes()
        second = run_in_process(
            "--workdir", str(workdir), "--resume", str(transcript), "how long is it?",
            env=stub_env(server),
        )  # fmt: skip
        assert second.returncode == 0, second.stderr
        assert second.stdout == "Five letters.\n"
        after_second = transcript.read_bytes()
        third = run_in_process(
            "--workdir", str(workdir), "--resume", str(transcript), "--chat",
            env=stub_env(server), stdin="sure?\nthanks\n",
        )  # fmt: skip
        assert third.returncode == 0, third.stderr
        assert third.stdout == "Yes.\nBye.\n"
    assert server.problems == []
    assert after_second.startswith(saved) and transcript.read_bytes().startswith(after_second)
    file_messages = saved_messages(saved.decode())
    continued = server.requests[2]["messages"]
    assert [list(m.items()) for m in continued[: len(file_messages)]] == [
        list(m.items()) for m in file_messages
    ]  # the file's messages exactly, key order included
    assert continued[len(file_messages) :] == [{"role": "user", "content": "how long is it?"}]
    assert [m["role"] for m in continued].count("system") == 1
    assert lines_of(transcript)[:-1] == server.requests[-1]["messages"]
    assert "continuing the conversation in" in second.stderr


def test_continue_answers_the_calls_a_cut_short_turn_left_open(workdir, tmp_path):
    transcript = tmp_path / "cut.jsonl"
    (workdir / "a.txt").write_text("A")
    two_calls = reply(
        None, call("read_file", {"path": "a.txt"}, "c1"), call("run_shell", {"command": "x"}, "c2")
    )
    write_lines(
        transcript,
        [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": "read a.txt and run x"},
            two_calls,
            {"role": "tool", "tool_call_id": "c1", "content": "A"},
        ],
    )  # the agent was stopped while c2 ran
    saved = transcript.read_bytes()
    with StubServer([answer("x was interrupted; a.txt says A.")]) as server:
        proc = run_in_process(
            "--workdir", str(workdir), "--resume", str(transcript), "what happened?",
            env=stub_env(server),
        )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert server.problems == []
    sent = server.requests[0]["messages"]
    assert sent[:4] == saved_messages(saved.decode())
    assert sent[4]["role"] == "tool" and sent[4]["tool_call_id"] == "c2"
    assert sent[4]["content"].startswith("Error: interrupted: the agent stopped")
    assert sent[5] == {"role": "user", "content": "what happened?"}
    assert transcript.read_bytes().startswith(saved)
    assert lines_of(transcript)[:-1] == sent


@on_a_terminal
def test_a_run_interrupted_during_a_command_continues_with_its_call_answered(workdir, tmp_path):
    transcript = tmp_path / "run.jsonl"
    command = "sleep 60 & echo $! > child.pid; wait"
    script = [reply(None, call("run_shell", {"command": command}, "c1"), reasoning=""),
              answer("It was interrupted.")]  # fmt: skip
    with StubServer(script) as server:  # one server: it checks the prefix across both runs
        child = spawn(server, "--workdir", str(workdir), "--yes", "--save", str(transcript), "go")
        pid_file = workdir / "child.pid"
        wait_for(lambda: pid_file.exists() and pid_file.read_text().strip())
        child.sendintr()
        assert finish(child) == 130  # without --chat, Ctrl-C ends the run as always
        saved = transcript.read_bytes()
        proc = run_in_process(
            "--workdir", str(workdir), "--resume", str(transcript), "what happened?",
            env=stub_env(server),
        )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "It was interrupted.\n"
    assert server.problems == []
    sent = server.requests[-1]["messages"]
    assert [m["role"] for m in sent] == ["system", "user", "assistant", "tool", "user"]
    assert sent[3]["tool_call_id"] == "c1" and "interrupted" in sent[3]["content"]
    assert transcript.read_bytes().startswith(saved)
    assert lines_of(transcript)[:-1] == sent


GOOD = [
    {"role": "system", "content": "be brief"},
    {"role": "user", "content": "read a.txt"},
    reply(None, call("read_file", {"path": "a.txt"}, "c1")),
    {"role": "tool", "tool_call_id": "c1", "content": "A"},
    {"role": "assistant", "content": "It says A."},
]


def jsonl(messages: list[dict]) -> str:
    return "".join(json.dumps(m) + "\n" for m in messages)


@pytest.mark.parametrize(
    "text, phrase",
    [
        (jsonl(GOOD)[:-25], "line 5 was only partly written"),  # cut off in the middle of a line
        (jsonl(GOOD)[:-1], "line 5 has no line end"),  # cut off just before the newline
        (jsonl([*GOOD[:3], {**GOOD[3], "tool_call_id": "c9"}]), "line 4 is a tool message"),
    ],
)
def test_continue_refuses_a_broken_file_in_one_line_and_leaves_it_alone(tmp_path, text, phrase):
    transcript = tmp_path / "broken.jsonl"
    transcript.write_text(text)
    with StubServer([answer("never")]) as server:
        proc = run_in_process(
            "--workdir", str(tmp_path), "--resume", str(transcript), "go on",
            env=stub_env(server),
        )  # fmt: skip
    assert proc.returncode == 1, proc.stderr
    assert proc.stdout == "" and "Traceback" not in proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith(f"error: {transcript} {phrase}"), last
    assert server.requests == []
    assert transcript.read_text() == text  # not modified


@pytest.mark.parametrize(
    "messages, phrase",
    [
        ([], "has no messages"),
        ([GOOD[0], {"role": "bot", "content": "hi"}], 'line 2 has the role "bot"'),
        ([GOOD[1], GOOD[0]], "line 2 is a system message"),
        ([*GOOD[:3], GOOD[1]], "line 4 is a user message, but the tool calls ['c1']"),
        ([GOOD[1], GOOD[3]], "line 2 is a tool message answering 'c1', but no tool call"),
        (
            [GOOD[1], reply(None, call("read_file", {}, "c1"), call("read_file", {}, "c1"))],
            "line 2 has the same tool call id twice",
        ),  # fmt: skip
        # Shapes a transcript line cannot have are refused by read_transcript, naming the line.
        ([GOOD[1], reply(None, {"type": "function"})], "line 2 has tool call 1 without a"),
        ([GOOD[1], {"role": "assistant", "content": None, "tool_calls": 5}], "not an array"),
    ],
)
def test_check_conversation_names_the_line_of_the_first_misplaced_message(
    tmp_path, messages, phrase
):
    transcript = tmp_path / "t.jsonl"
    transcript.write_text(jsonl(messages).replace("\n", "\n\n", 1))  # a blank line is skipped
    with pytest.raises(errors.AgentError) as error:
        check_conversation(transcript, transcript_lines(transcript))
    assert phrase.replace("line 2", "line 3").replace("line 4", "line 5") in str(error.value)


def test_a_conversation_left_mid_turn_is_accepted_as_it_is(tmp_path):
    transcript = tmp_path / "t.jsonl"
    transcript.write_text(jsonl(GOOD[:3]))
    check_conversation(transcript, transcript_lines(transcript))


def test_save_beside_resume_is_a_usage_error(tmp_path):
    transcript = tmp_path / "t.jsonl"
    transcript.write_text(jsonl(GOOD))
    proc = run_agent(
        "--resume", str(transcript), "--save", str(tmp_path / "new.jsonl"), "go on",
        env=clean_env(LLM_API_KEY="k", LLM_BASE_URL="http://127.0.0.1:9"),
    )  # fmt: skip
    assert proc.returncode == 2
    assert "a resumed conversation is saved where it was: drop --save" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert transcript.read_text() == jsonl(GOOD)
    assert not (tmp_path / "new.jsonl").exists()
