"""No command outlives the agent: SIGTERM, SIGHUP or Ctrl-C reaching the agent while a command
runs, even at the worst moment (the command has started, its kill is not yet in place), ends
with the command and everything it started killed. Real processes, real signals."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import ROOT, alive, run_agent, stub_env, wait_for
from fake_model import reply, tool_call
from stub_server import StubServer

# The agent, with subprocess.Popen made to signal the agent itself as soon as the command has
# started: the signal is there before run_shell is back from starting it. (Other processes,
# such as the ones the SDK starts to learn the platform, start unsignalled.)
WORST_MOMENT = """
import os, signal, subprocess, sys
sys.path.insert(0, {root!r})
import agent


class SignalledAtTheWorstMoment(subprocess.Popen):
    def __init__(self, args, *more, **options):
        super().__init__(args, *more, **options)
        if {command!r} in str(args):
            with open({pid_file!r}, "w") as file:
                file.write(str(self.pid))
            os.kill(os.getpid(), signal.{signal_name})


subprocess.Popen = SignalledAtTheWorstMoment
sys.exit(agent.main())
"""


def group_members(group: int) -> list[int]:
    """The live (not zombie) processes in a process group, found in /proc."""
    members = []
    for entry in Path("/proc").iterdir():
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # not a process, or gone meanwhile
        if fields[0] != "Z" and int(fields[2]) == group:
            members.append(int(entry.name))
    return members


def group_is_gone(group: int) -> bool:
    for _ in range(50):  # the kill is sent; give the kernel a moment
        if not group_members(group):
            return True
        time.sleep(0.1)
    return False


@pytest.mark.linux("finds the process group in /proc; --sandbox needs bubblewrap")
@pytest.mark.parametrize(
    "signal_name, exit_code", [("SIGTERM", 143), ("SIGHUP", 129), ("SIGINT", 130)]
)
@pytest.mark.parametrize("sandbox", [False, True], ids=["plain", "sandbox"])
def test_a_signal_the_moment_the_command_starts_still_kills_it(
    workdir, tmp_path, signal_name, exit_code, sandbox
):
    pid_file = tmp_path / "command.pid"
    launcher = tmp_path / "agent_signalled.py"
    command = "sleep 60 & sleep 60; wait"
    launcher.write_text(
        WORST_MOMENT.format(
            root=str(ROOT), command=command, pid_file=str(pid_file), signal_name=signal_name
        )
    )
    script = [reply(None, tool_call("run_shell", {"command": command}, "c1"), reasoning="")]
    options = ["--sandbox"] if sandbox else []
    with StubServer(script) as server:
        proc = run_agent(
            "--workdir", str(workdir), "--yes", *options, "wait", env=stub_env(server),
            script=launcher,
        )  # fmt: skip
    group = int(pid_file.read_text())
    try:
        assert proc.returncode == exit_code, proc.stderr
        assert "Traceback" not in proc.stderr
        assert "[1] run_shell(command='sleep 60" in proc.stderr
        assert group_is_gone(group), "the command outlived the agent"
    finally:
        if group_members(group):  # the test failed: leave nothing running
            os.killpg(group, signal.SIGKILL)


@pytest.mark.posix("SIGTERM, and a command for /bin/sh")
def test_a_terminated_agent_kills_the_command_it_was_running(workdir):
    command = "sleep 60 & echo $! > child.pid; wait"
    script = [reply(None, tool_call("run_shell", {"command": command}, "c1"), reasoning="")]
    with StubServer(script) as server:
        agent_process = subprocess.Popen(
            [sys.executable, str(ROOT / "agent.py"), "--workdir", str(workdir), "--yes", "wait"],
            env=stub_env(server), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        pid_file = workdir / "child.pid"
        wait_for(lambda: pid_file.exists() and pid_file.read_text().strip())
        agent_process.send_signal(signal.SIGTERM)
        _, err = agent_process.communicate(timeout=10)
    assert agent_process.returncode == 128 + signal.SIGTERM
    assert "Traceback" not in err
    assert not alive(int(pid_file.read_text()))


@pytest.mark.long
@pytest.mark.linux("runs the worst-moment tests above, which need /proc")
def test_the_signal_tests_pass_when_pytest_is_started_with_signals_ignored():
    # `nohup pytest` starts pytest with SIGHUP ignored, and a script's background job
    # (`pytest &`) with Ctrl-C ignored; the agents it starts must still get both as from a
    # terminal (conftest.pytest_configure), from a pytest-xdist worker too. Here pytest is
    # started both ways at once, for the plain SIGHUP and SIGINT cases above.
    selected = "still_kills_it and plain and (SIGHUP or SIGINT)"
    pytest_command = (
        f"nohup {shlex.quote(sys.executable)} -m pytest -p no:cacheprovider -q -n 1 "
        f"-o timeout=30 {shlex.quote(__file__)} -k {shlex.quote(selected)} & wait $!"
    )
    proc = subprocess.run(
        ["sh", "-c", pytest_command], cwd=ROOT, stdin=subprocess.DEVNULL,
        capture_output=True, text=True, timeout=150,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "2 passed" in proc.stdout
