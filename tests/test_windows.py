"""Windows (and macOS), tried here without such a machine.

The agent runs in a subprocess as Windows would run it, as far as agent.py can tell:
sys.platform is "win32" and the POSIX-only names (signal.SIGHUP, SIGKILL, os.killpg,
os.setsid, ...) are gone before agent.py is imported. --help, --show, --replay, the file tools
and the model loop must work so. The Windows branch of run_shell is checked by the exact
process it starts and the exact kill command it builds. On a real Windows machine these
simulations are pointless, so they skip there; the rest of the suite runs for real.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys

import pexpect
import pytest
from conftest import ROOT, WORKSPACE, clean_env, execute, finish, run_agent, stub_env, use_workspace
from fake_model import reply, tool_call
from stub_server import StubServer

from minimal_agent.tools import processes

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="simulates Windows elsewhere")

# The agent as it starts on another system. The SDK is imported first, as on this one: its own
# platform code is not under test (and would look for this system's files under that name).
AS_ON = """
import os, signal, sys
import dotenv, openai, openai.lib.streaming.chat
# The HTTP stack loads its connection pool with the first client, and that picks its locks by
# what is installed (trio, whose import on "win32" looks for kernel32.dll): load it here.
openai.OpenAI(api_key="-", base_url="http://127.0.0.1:9").close()
sys.platform = {platform!r}
for name in {posix_only!r}:
    for module in (os, signal):
        if hasattr(module, name):
            delattr(module, name)
# Windows' msvcrt, for the transcript's lock: here a stand-in that locks nothing.
import types
sys.modules["msvcrt"] = types.SimpleNamespace(LK_NBLCK=2, locking=lambda fd, mode, size: None)
sys.path.insert(0, {root!r})
import agent
sys.exit(agent.main())
"""
POSIX_ONLY = ["SIGHUP", "SIGKILL", "SIGQUIT", "SIGALRM", "SIGCHLD", "SIGPIPE", "SIGUSR1",
              "SIGUSR2", "pthread_sigmask", "pthread_kill", "sigwait", "setitimer", "alarm",
              "pause", "siginterrupt", "killpg", "setsid", "getpgid", "setpgid", "getpgrp",
              "fork"]  # fmt: skip


@pytest.fixture
def as_on(tmp_path):
    def launcher(platform: str):
        script = tmp_path / f"agent_on_{platform}.py"
        script.write_text(AS_ON.format(platform=platform, posix_only=POSIX_ONLY, root=str(ROOT)))
        return script

    return launcher


def transcript(tmp_path, *messages: dict):
    path = tmp_path / "run.jsonl"
    path.write_text("".join(json.dumps(message) + "\n" for message in messages))
    return path


FILE_TOOLS_RUN = [
    {"role": "system", "content": "be brief"},
    {"role": "user", "content": "write hi.txt and read it back"},
    reply(None, tool_call("write_file", {"path": "hi.txt", "content": "hi"}, "c1"), reasoning=""),
    {"role": "tool", "tool_call_id": "c1", "content": "Wrote 2 characters (2 bytes) to hi.txt"},
    reply(None, tool_call("read_file", {"path": "hi.txt"}, "c2"), reasoning=""),
    {"role": "tool", "tool_call_id": "c2", "content": "hi"},
    reply("hi.txt says hi", reasoning=""),
]


# --- Start-up, --help, --show, --replay, the file tools and the loop on "Windows" -----------


def test_help_and_show_work_without_the_posix_names(as_on, tmp_path):
    proc = run_agent("--help", env=clean_env(), script=as_on("win32"))
    assert proc.returncode == 0, proc.stderr
    assert "--sandbox" in proc.stdout
    saved = transcript(tmp_path, *FILE_TOOLS_RUN)
    proc = run_agent("--show", str(saved), env=clean_env(), script=as_on("win32"))
    assert proc.returncode == 0, proc.stderr
    assert "  7 assistant: hi.txt says hi" in proc.stdout


def test_replay_and_the_file_tools_work_without_the_posix_names(as_on, workdir, tmp_path):
    saved = transcript(tmp_path, *FILE_TOOLS_RUN)
    offline = clean_env(LLM_API_KEY="")
    proc = run_agent("--workdir", str(workdir), "--replay", str(saved), env=offline,
                     script=as_on("win32"))  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "hi.txt says hi\n"
    assert (workdir / "hi.txt").read_text() == "hi"
    assert "left the recorded path" not in proc.stderr  # the tools gave the recorded results


def test_the_model_is_told_of_cmd_exe_and_the_demo_task_says_python(as_on, workdir):
    script = FILE_TOOLS_RUN[2::2]  # the three replies
    with StubServer(script) as server:
        child = pexpect.spawn(sys.executable, [str(as_on("win32")), "--workdir", str(workdir)],
                              env=stub_env(server), encoding="utf-8", timeout=30)  # fmt: skip
        child.expect_exact("hi.txt says hi")  # no task on a terminal: the demo task
        assert finish(child) == 0
    assert server.problems == []
    request = server.requests[0]
    assert request["messages"][1]["content"].endswith(
        "read it back, run it with python, and tell me the real output."
    )
    [shell] = [t["function"] for t in request["tools"] if t["function"]["name"] == "run_shell"]
    assert "cmd.exe" in shell["parameters"]["properties"]["command"]["description"]
    assert (workdir / "hi.txt").read_text() == "hi"


@pytest.mark.parametrize(
    "platform, says", [("win32", "not available on Windows"), ("darwin", "sandbox-exec")]
)
def test_sandbox_is_refused_in_one_line_on_windows_and_macos(as_on, workdir, platform, says):
    with StubServer([]) as server:
        proc = run_agent("--workdir", str(workdir), "--sandbox", "--yes", "hi",
                         env=stub_env(server), script=as_on(platform))  # fmt: skip
    assert proc.returncode == 1
    [line] = proc.stderr.splitlines()
    assert line.startswith("error: --sandbox is not available on ") and says in line
    assert server.requests == []


# --- run_shell's Windows branch: the process it starts, the kill it sends ------------------


@pytest.fixture
def windows_branch(monkeypatch, workdir):
    """run_shell takes its Windows branch; the processes it would start and the taskkill it
    would run are recorded, and stood in for by a shell and a process-group kill here."""
    started, kills = [], []
    real_popen = subprocess.Popen

    def popen(args, **options):
        started.append((args, options))
        streams = {key: options[key] for key in ("stdin", "stdout", "stderr")}
        return real_popen(args, shell=True, cwd=options["cwd"], start_new_session=True, **streams)

    def run(argv, **options):
        kills.append((argv, options))
        with contextlib.suppress(ProcessLookupError):
            os.killpg(int(argv[-1]), signal.SIGKILL)
        return subprocess.CompletedProcess(argv, 0, b"", b"")

    monkeypatch.setattr(processes, "ON_WINDOWS", True)
    monkeypatch.setattr(subprocess, "CREATE_NEW_PROCESS_GROUP", 0x200, raising=False)
    monkeypatch.setattr(subprocess, "Popen", popen)
    monkeypatch.setattr(subprocess, "run", run)
    use_workspace(workdir, timeout=5, yes=True)
    return started, kills


def shell(command: str) -> str:
    return execute(tool_call("run_shell", {"command": command}))


def test_on_windows_the_command_runs_through_cmd_exe_in_a_new_process_group(windows_branch):
    started, kills = windows_branch
    assert shell("echo out && echo err 1>&2") == "exit code 0\nout\nerr\n"
    [(args, options)] = started
    assert args == "echo out && echo err 1>&2"
    assert options.pop("env") == processes.command_environment(WORKSPACE[0])
    assert options == {
        "shell": True,  # cmd.exe, as COMSPEC names it
        "cwd": WORKSPACE[0].folder,
        "creationflags": 0x200,  # CREATE_NEW_PROCESS_GROUP: Ctrl-C reaches only the agent
        "stdin": subprocess.DEVNULL,
        "stdout": subprocess.PIPE,
        "stderr": subprocess.STDOUT,
    }
    [(kill, kill_options)] = kills  # whatever the command left running goes too
    pid = int(kill[-1])
    assert kill == ["taskkill", "/F", "/T", "/PID", str(pid)]
    assert kill_options["stdin"] == subprocess.DEVNULL and kill_options["capture_output"]


def test_on_windows_the_whole_tree_is_killed_at_the_timeout(windows_branch):
    started, kills = windows_branch
    use_workspace(WORKSPACE[0].folder, timeout=1, yes=True)
    result = shell("echo before; sleep 30")  # as it runs here; "ping -n 30 ..." in cmd.exe
    assert result.startswith("Error: timed out after 1 s")
    assert "Output so far:\nbefore\n" in result
    assert [argv[:4] for argv, _ in kills] == [["taskkill", "/F", "/T", "/PID"]]


def test_on_windows_no_signal_mask_is_touched(windows_branch, monkeypatch):
    def refuse(*args):
        raise AssertionError("pthread_sigmask does not exist on Windows")

    monkeypatch.setattr(signal, "pthread_sigmask", refuse, raising=False)
    assert shell("echo fine") == "exit code 0\nfine\n"
