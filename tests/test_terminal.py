"""The agent on a real pseudo-terminal (pexpect), the way a person uses it: approval prompts,
the demo task when no task is given, and Ctrl-C during a long command."""

from __future__ import annotations

import json
import sys
import threading
import time

import pexpect
import pytest
from conftest import ROOT, alive, finish, spawn, stub_env, wait_for
from fake_model import reply, tool_call
from stub_server import StubServer, demo_script

pytestmark = pytest.mark.posix("a pseudo-terminal (pexpect.spawn), Ctrl-C and /bin/sh")


def shell_call(call_id: str, command: str) -> dict:
    return reply(None, tool_call("run_shell", {"command": command}, call_id), reasoning="")


def test_y_runs_n_refuses_a_approves_the_rest(workdir):
    script = [
        shell_call("c1", "echo one > one.txt"),
        shell_call("c2", "echo two > two.txt"),
        shell_call("c3", "echo three > three.txt"),
        shell_call("c4", "echo four > four.txt"),
        {"role": "assistant", "content": "All done."},
    ]
    with StubServer(script) as server:
        child = spawn(server, "--workdir", str(workdir), "make files")
        for command, answer in [("one", "y"), ("two", "n"), ("three", "a")]:
            child.expect_exact(f"$ echo {command} > {command}.txt")
            child.expect_exact("Run it? [y/N/a] ")
            child.sendline(answer)
        child.expect_exact("All done.")
        transcript = child.before
        assert finish(child) == 0
    assert "$ echo four" not in transcript  # "a" approved it without asking
    assert [(workdir / f"{n}.txt").exists() for n in ("one", "two", "three", "four")] == [
        True,
        False,
        True,
        True,
    ]
    refused = server.requests[2]["messages"][-1]["content"]
    assert refused.startswith("Error: PermissionError: the user did not approve")
    assert server.problems == []


def test_no_task_on_a_terminal_runs_the_lessons_demo(workdir):
    with StubServer(demo_script()) as server:
        child = spawn(server, "--workdir", str(workdir))
        child.expect_exact("running the demo task")
        child.expect_exact("$ python3 tool_demo.py")
        child.expect_exact("Run it? [y/N/a] ")
        child.sendline("y")
        child.expect_exact("tool_demo.py prints 391")
        assert finish(child) == 0
    assert "17 * 23" in server.requests[0]["messages"][1]["content"]
    assert server.problems == []


def test_shell_commands_get_no_stdin_while_the_agents_stdin_is_a_terminal(workdir):
    command = 'read line; echo "read exit $?: $line"'  # see test_cli.py's pipe variant
    script = [shell_call("c1", command), {"role": "assistant", "content": "done"}]
    with StubServer(script) as server:
        child = spawn(server, "--workdir", str(workdir), "--yes", "--timeout", "20", "read")
        child.sendline("typed on the terminal")  # waits in the terminal for whoever reads
        child.expect_exact("done")
        assert finish(child) == 0
    assert server.problems == []
    assert server.requests[1]["messages"][-1]["content"] == "exit code 0\nread exit 1: \n"


@pytest.mark.parametrize("approve", ["prompt", "--yes"])
def test_ctrl_c_during_a_command_kills_it_and_keeps_the_transcript(workdir, tmp_path, approve):
    transcript = tmp_path / "run.jsonl"
    command = "sleep 60 & echo $! > child.pid; wait"
    with StubServer([shell_call("c1", command)]) as server:
        options = ["--yes"] if approve == "--yes" else []
        child = spawn(
            server, "--workdir", str(workdir), "--save", str(transcript), *options, "wait"
        )
        if approve == "prompt":
            child.expect_exact("Run it? [y/N/a] ")
            child.sendline("y")
        pid_file = workdir / "child.pid"
        wait_for(lambda: pid_file.exists() and pid_file.read_text().strip())
        child.sendintr()
        child.expect_exact("interrupted", timeout=20)  # not after the command's own 60 s
        assert finish(child) == 130
    assert not alive(int(pid_file.read_text()))
    lines = [line for line in transcript.read_text().splitlines() if '"role"' in line]
    assert [json.loads(line)["role"] for line in lines] == ["system", "user", "assistant"]
    assert json.loads(lines[-1])["tool_calls"][0]["function"]["arguments"] == json.dumps(
        {"command": command}
    )
    assert transcript.read_text().endswith("}\n")  # whole lines only


def test_ctrl_c_while_waiting_for_the_model_exits_130(workdir, tmp_path):
    released = threading.Event()

    def slow_reply(request):
        released.wait(30)  # the model is thinking...
        return {"role": "assistant", "content": "too late"}

    with StubServer([slow_reply]) as server:
        child = spawn(server, "--workdir", str(workdir), "think hard")
        child.expect_exact("[1] waiting for the model...")  # shown on a terminal
        wait_for(lambda: server.requests, "the request never arrived")
        child.sendintr()
        child.expect_exact("interrupted")
        assert finish(child) == 130
        released.set()


def test_pdb_stopped_while_the_model_is_asked_keeps_its_prompt(workdir):
    # A breakpoint inside the request (completions.ask runs in the waiting line's block): the
    # counting line would write over pdb's prompt every second, and over what the user types.
    def held(request):
        time.sleep(2.5)  # the model takes its time; a count would show 1 s, 2 s
        return reply("Held, then answered.")

    with StubServer([held]) as server:
        child = pexpect.spawn(
            sys.executable, ["-m", "pdb", str(ROOT / "agent.py"), "--workdir", str(workdir), "hi"],
            env=stub_env(server), cwd=str(workdir), encoding="utf-8", timeout=60,
            dimensions=(40, 200),
        )  # fmt: skip
        try:
            child.expect_exact("(Pdb) ")
            child.sendline("import minimal_agent.core.completions")  # a name pdb can break on
            child.expect_exact("(Pdb) ")
            child.sendline("b minimal_agent.core.completions.ask")
            child.expect_exact("(Pdb) ")
            child.sendline("c")
            child.expect_exact("(Pdb) ")
            stopped = child.before
            assert "completions.py(" in stopped and ")ask()" in stopped  # in the request
            with pytest.raises(pexpect.TIMEOUT):  # at the prompt, nothing more is written
                child.expect(r"\S", timeout=1.5)
            child.sendline("c")
            child.expect_exact("Held, then answered.")
            answering = child.before
            child.expect_exact("(Pdb) ")  # the agent has ended; pdb would start it again
            child.sendline("q")
            child.expect(pexpect.EOF)
        finally:
            child.close(force=True)
    assert "waiting for the model" not in stopped + answering
    assert len(server.requests) == 1 and server.problems == []
