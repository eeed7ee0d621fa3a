"""No command outlives the agent: SIGTERM, SIGHUP or Ctrl-C reaching the agent while a command
runs, even at the worst moment (the command has started, its kill is not yet in place), ends
with the command and everything it started killed. Real processes, real signals."""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess
import sys
import time
import weakref
from pathlib import Path

import forked_agents
import pytest
from conftest import ROOT, alive, run_agent, stub_env, wait_for
from fake_model import reply, tool_call
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from stub_server import StubServer
from test_json import the_events

from minimal_agent.tools import processes

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


def launcher_in(tmp_path: Path, text: str) -> Path:
    """The launcher, as agent.py in a folder of its own: the suite's fork server runs it as it
    runs agent.py (forked_agents.Lazy.takes), as what it changes (subprocess.Popen, Events.emit)
    is looked up as the agent runs, which the SDK it has imported beforehand does not hold."""
    launcher = tmp_path / "launcher" / "agent.py"
    launcher.parent.mkdir()
    launcher.write_text(text)
    return launcher


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
    command = "sleep 60 & sleep 60; wait"
    launcher = launcher_in(tmp_path, WORST_MOMENT.format(
        root=str(ROOT), command=command, pid_file=str(pid_file), signal_name=signal_name
    ))  # fmt: skip
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
        agent_process = forked_agents.Popen(
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


# The agent, with a signal sent from a weakref's callback as its first request is told: the
# signal's handler runs there, inside the callback, where Python prints an exception and goes on
# ("Exception ignored in ..."), as in a __del__ or in the callback of an import's lock (where
# the property test below once caught a Ctrl-C lost: the run went on to exit 0).
IN_A_CALLBACK = """
import os, signal, sys, weakref
sys.path.insert(0, {root!r})
import agent
from minimal_agent.core.events import Events


class Thing:
    pass


def signalled(reference):
    os.kill(os.getpid(), signal.{signal_name})
    for _ in range(1000):  # a loop, where Python runs the handler
        pass


def emit(self, kind, /, **fields):
    if kind == "request" and not hasattr(Events, "signalled"):
        Events.signalled = True
        thing = Thing()
        reference = weakref.ref(thing, signalled)
        del thing
    told(self, kind, **fields)


told, Events.emit = Events.emit, emit
sys.exit(agent.main())
"""


@pytest.mark.posix("signals to a process")
@pytest.mark.parametrize("signal_name, exit_code", [("SIGINT", 130), ("SIGTERM", 143)])
def test_a_signal_handled_where_python_cannot_raise_still_ends_the_run(
    workdir, tmp_path, signal_name, exit_code
):
    command = "sleep 2; touch finished"
    launcher = launcher_in(
        tmp_path, IN_A_CALLBACK.format(root=str(ROOT), command=command, signal_name=signal_name)
    )
    script = [reply(None, tool_call("run_shell", {"command": command}, "c1"), reasoning="")]
    with StubServer(script) as server:
        proc = run_agent("--workdir", str(workdir), "--yes", "wait", env=stub_env(server),
                         script=launcher)  # fmt: skip
    assert proc.returncode == exit_code, proc.stderr
    assert "Traceback" not in proc.stderr and "Exception ignored" not in proc.stderr, proc.stderr
    assert not (workdir / "finished").exists(), "the command ran to its end"


@pytest.fixture
def handlers_put_back(monkeypatch):
    """The signals' handlers and sys.unraisablehook as they were, after a test that sets a
    run's (processes.exit_on_termination) in this process."""
    numbers = (signal.SIGINT, *processes.termination_signals())
    handlers = {number: signal.getsignal(number) for number in numbers}
    monkeypatch.setattr(sys, "unraisablehook", sys.unraisablehook)
    yield
    for number, handler in handlers.items():
        signal.signal(number, handler)


def lost_in_a_callback(signum: int) -> None:
    """A signal's handler run inside a weakref's callback, where Python cannot raise."""

    class Thing:
        pass

    thing = Thing()
    reference = weakref.ref(thing, lambda _: signal.getsignal(signum)(signum, None))  # noqa: F841
    del thing


@pytest.mark.posix("SIGTERM's handler; Windows has the branch without pthread_kill")
@pytest.mark.parametrize("thread_signals", [True, False], ids=["pthread_kill", "windows"])
@pytest.mark.parametrize("signum, raised", [(signal.SIGINT, KeyboardInterrupt),
                                            (signal.SIGTERM, processes.Terminated)],
                         ids=["SIGINT", "SIGTERM"])  # fmt: skip
def test_a_signal_lost_in_a_callback_is_raised_once_it_has_returned(
    handlers_put_back, monkeypatch, capfd, signum, raised, thread_signals
):
    if not thread_signals:  # as on Windows, which has no pthread_kill
        monkeypatch.delattr(signal, "pthread_kill")
    processes.exit_on_termination()
    try:
        with pytest.raises(raised):
            lost_in_a_callback(signum)
            for _ in range(1000):  # a loaded machine may take a while to run the thread
                time.sleep(0.01)
        assert processes.ENDING == [signum] and not processes.SENT_AGAIN
    finally:
        processes.ctrl_c_given_back()
    assert "Exception ignored" not in capfd.readouterr().err


def test_other_lost_exceptions_still_reach_the_hook_before_and_it_is_given_back(
    handlers_put_back,
):
    seen = []
    sys.unraisablehook = seen.append
    processes.exit_on_termination()
    try:

        class Thing:
            def __del__(self):
                raise ValueError("in a __del__")

        Thing()
        assert [type(lost.exc_value) for lost in seen] == [ValueError]
    finally:
        processes.ctrl_c_given_back()
    assert sys.unraisablehook == seen.append


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


# --- Bursts of signals at any moment (issue 35) -----------------------------------------------


def many_files(workdir: Path, count: int = 3000) -> None:
    """Enough files that the undo walk, which ends the step on the way out, takes a while."""
    for folder in range(count // 100):
        (workdir / f"d{folder}").mkdir()
        for number in range(100):
            (workdir / f"d{folder}" / f"f{number}.txt").write_text("x")


def events_agent(server, workdir: Path, task: str = "wait") -> subprocess.Popen:
    return forked_agents.Popen(
        [sys.executable, str(ROOT / "agent.py"), "--workdir", str(workdir), "--yes",
         "--json-events", task],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=stub_env(server),
    )  # fmt: skip


def ended_cleanly(proc: subprocess.Popen, out: str, err: str, codes: set[int]) -> None:
    """Exit 130 or 143 (or 0 for a run that ended before the signals), no traceback, the
    event stream valid with its end record last, saying the same exit code."""
    assert proc.returncode in codes, err
    assert "Traceback" not in err, err
    assert the_events(out)[-1]["exit_code"] == proc.returncode


@pytest.mark.posix("SIGINT to a process")
def test_a_burst_of_ctrl_c_during_the_command_ends_with_130_and_the_end_record_last(workdir):
    many_files(workdir)
    command = "touch started; sleep 60"
    script = [reply(None, tool_call("run_shell", {"command": command}, "c1"))]
    with StubServer(script) as server:
        proc = events_agent(server, workdir)
        try:
            wait_for(lambda: (workdir / "started").exists())
            for _ in range(4):  # Ctrl-C, then three more 5 ms apart
                proc.send_signal(signal.SIGINT)
                time.sleep(0.005)
            out, err = proc.communicate(timeout=60)
        finally:
            proc.kill()
    ended_cleanly(proc, out, err, {130})


@pytest.mark.long
@pytest.mark.posix("signals to a process")
@settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    delay=st.floats(0, 1.2),
    burst=st.lists(
        st.tuples(st.sampled_from(["SIGINT", "SIGTERM"]), st.floats(0, 0.02)),
        min_size=1, max_size=5,
    ),
)  # fmt: skip
def test_signals_at_any_moment_end_in_130_or_143_with_the_stream_whole(
    tmp_path_factory, delay, burst
):
    """From the agent's first line on (start-up, the request, the command, the undo walk, the
    close), a burst of SIGINT and SIGTERM: the run ends as the first one says. The moments are
    counted from what the agent has said, not from the clock alone, so a loaded machine only
    shifts them."""
    workdir = tmp_path_factory.mktemp("burst")
    many_files(workdir, 1000)
    steps = [
        reply(None, tool_call("run_shell", {"command": "sleep 0.3; echo a > a.txt"}, "c1")),
        reply(None, tool_call("write_file", {"path": "b.txt", "content": "b"}, "c2")),
        reply("done"),
    ]
    with StubServer(steps) as server:
        proc = events_agent(server, workdir)
        try:
            proc.stderr.readline()  # the first line: the settings are read, the session opens
            time.sleep(delay)
            for name, gap in burst:
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(getattr(signal, name))
                time.sleep(gap)
            out, err = proc.communicate(timeout=60)
        finally:
            proc.kill()
    # The first signal the agent gets decides. Signals pending together are taken lowest number
    # first (the kernel's order, and Python's when it runs their handlers), so a SIGINT sent
    # just after a SIGTERM may arrive first: a burst that begins with SIGTERM may end in 130
    # when it holds a SIGINT, one that begins with SIGINT never in 143.
    first = (
        {130} if burst[0][0] == "SIGINT" else {143} | {130 for name, _ in burst if name == "SIGINT"}
    )
    ended_cleanly(proc, out, err, {0, *first} if proc.returncode == 0 else first)
