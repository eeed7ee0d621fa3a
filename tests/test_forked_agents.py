"""An agent forked from the suite's fork server (forked_agents.py, forkserver.py) is what a new
`python agent.py` process would be: a probe named agent.py reports how it started, and ends in
each way a program ends, once started each way, on pipes and on a terminal; the two reports
must be the same."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import forked_agents
import pexpect
import pytest
from conftest import clean_env

PROBE = r"""
import atexit, json, os, signal, stat, sys, threading

def handler(number):
    found = signal.getsignal(number)
    if found in (None, signal.SIG_DFL, signal.SIG_IGN):
        return found
    return getattr(found, "__name__", "?")

def stream(s):
    return {
        "type": type(s).__name__, "buffer": type(s.buffer).__name__,
        "raw": type(getattr(s.buffer, "raw", s.buffer)).__name__,
        "name": getattr(s.buffer, "name", None), "mode": s.mode, "fileno": s.fileno(),
        "encoding": s.encoding, "errors": s.errors, "newlines": s.newlines,
        "line_buffering": s.line_buffering, "write_through": s.write_through,
        "isatty": s.isatty(),
    }

def report():
    on_terminal = os.isatty(0)
    return {
        "argv": sys.argv, "path0": sys.path[0], "cwd": os.getcwd(), "env": dict(os.environ),
        "name": __name__, "file": __file__, "flags": list(sys.flags),
        "own modules": sorted(m for m in sys.modules
                              if m.split(".")[0] in ("agent", "model_client", "minimal_agent")),
        "handlers": {int(n): handler(n) for n in signal.valid_signals()
                     if n not in (signal.SIGKILL, signal.SIGSTOP)},
        "blocked": sorted(int(n) for n in signal.pthread_sigmask(signal.SIG_BLOCK, [])),
        "streams": [stream(s) for s in (sys.stdin, sys.stdout, sys.stderr)],
        "same streams": [sys.stdin is sys.__stdin__, sys.stdout is sys.__stdout__,
                         sys.stderr is sys.__stderr__],
        "fds": sorted(os.listdir("/proc/self/fd")),
        "fd kinds": [stat.S_IFMT(os.fstat(fd).st_mode) for fd in (0, 1, 2)],
        "group leader": os.getpgrp() == os.getpid(),
        "session leader": os.getsid(0) == os.getpid(),
        "foreground": on_terminal and os.tcgetpgrp(0) == os.getpgrp(),
        "threads": threading.active_count(),
        "umask": os.umask(0o22),
        "stdin": sys.stdin.read() if not on_terminal else None,
    }

how = sys.argv[1]
atexit.register(print, "atexit ran")
print("buffered ", end="")
if how == "report":
    print(json.dumps(report()))
elif how == "exit":
    sys.exit(int(sys.argv[2]))
elif how == "exit text":
    sys.exit("gone")
elif how == "raise":
    raise ValueError("from the probe")
elif how == "interrupt":
    raise KeyboardInterrupt
elif how == "terminated":
    os.kill(os.getpid(), signal.SIGTERM)
elif how == "sleep":
    __import__("time").sleep(60)
elif how == "thread":
    threading.Thread(target=lambda: (__import__("time").sleep(0.1), print("thread done"))).start()
"""

ENDINGS = [["report"], ["exit", "3"], ["exit text"], ["raise"], ["interrupt"], ["terminated"],
           ["thread"], ["returns"]]  # fmt: skip


@pytest.fixture(scope="module", params=["PYTHONUNBUFFERED=1", "buffered"])
def env(request):
    """The agents' environment, with the streams unbuffered as here or buffered (Python makes
    them otherwise), and a fork server of that environment."""
    env = clean_env(LLM_MODEL="probe")
    if request.param == "buffered":
        env.pop("PYTHONUNBUFFERED", None)
    else:
        env["PYTHONUNBUFFERED"] = "1"
    server = forked_agents.Lazy()
    server.env = env
    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.setattr(forked_agents, "SERVER", server)
        yield env
    server.stop()


@pytest.fixture
def probe(tmp_path):
    folder = tmp_path / "app"
    folder.mkdir()
    (folder / "agent.py").write_text(PROBE, encoding="utf-8")
    return folder / "agent.py"


def test_the_server_serves_agent_py_and_nothing_else(probe):
    env = clean_env()
    assert forked_agents.SERVER.takes([sys.executable, str(probe)], env)
    refused = {
        "python -m pdb": [sys.executable, "-m", "pdb", str(probe)],
        "another script": [sys.executable, str(probe.with_name("agent_on_win32.py"))],
        "python -X utf8": [sys.executable, "-X", "utf8", str(probe)],
        "another python": ["/usr/bin/python3", str(probe)],
    }
    if os.path.realpath(sys.executable) != sys.executable:  # a venv: its python is a link
        refused["the python a venv links to"] = [os.path.realpath(sys.executable), str(probe)]
    for why, argv in refused.items():
        assert not forked_agents.SERVER.takes(argv, env), why
    for key, value in [("PYTHONIOENCODING", "latin-1"), ("LANG", "C"), ("LC_ALL", "C"),
                       ("PYTHONPATH", "/nowhere"), ("OPENAI_LOG", "debug")]:  # fmt: skip
        assert not forked_agents.SERVER.takes([sys.executable, str(probe)], {**env, key: value})
    without = {key: value for key, value in env.items() if key != "PYTHONPATH"}
    assert not forked_agents.SERVER.takes([sys.executable, str(probe)], without)


@pytest.mark.linux("pidfd_open and /proc")
@pytest.mark.parametrize("ending", ENDINGS, ids=" ".join)
def test_on_pipes_a_forked_agent_is_a_new_process(probe, tmp_path, ending, env):
    argv = [sys.executable, str(probe), *ending]
    forked = forked_agents.run(argv, input="typed\r\nin", env=env, timeout=30, cwd=tmp_path)
    new = subprocess.run(argv, input="typed\r\nin", capture_output=True, text=True, env=env,
                         timeout=30, cwd=tmp_path)  # fmt: skip
    assert forked_agents.SERVER.takes(argv, env)
    assert forked.returncode == new.returncode
    assert forked.stdout == new.stdout
    assert forked.stderr.replace(str(forked_agents.SERVER_PROGRAM), "") == new.stderr or (
        ending in (["raise"], ["interrupt"]) and tracebacks_end_alike(forked.stderr, new.stderr)
    )
    if ending == ["report"]:
        report = json.loads(forked.stdout.removeprefix("buffered ").splitlines()[0])
        assert report["stdin"] == "typed\r\nin"  # no newline translated, on POSIX
        assert report["streams"][1]["write_through"] == ("PYTHONUNBUFFERED" in env)


def tracebacks_end_alike(forked: str, new: str) -> bool:
    """A traceback through the server shows its frames above the script's; the rest is alike."""
    return "Traceback" in forked and forked.splitlines()[-3:] == new.splitlines()[-3:]


@pytest.mark.linux("pidfd_open and /proc")
@pytest.mark.parametrize("ending", ENDINGS, ids=" ".join)
def test_on_a_terminal_a_forked_agent_is_a_new_process(probe, tmp_path, ending, env):
    assert forked_agents.SERVER.takes([sys.executable, str(probe)], env)
    runs = []
    for starts in (forked_agents.spawn, pexpect.spawn):
        child = starts(sys.executable, [str(probe), *ending], env=env, cwd=str(tmp_path),
                       encoding="utf-8", timeout=30, dimensions=(30, 90))  # fmt: skip
        assert child.getwinsize() == (30, 90)
        child.expect(pexpect.EOF)
        child.close()
        runs.append((child.exitstatus, child.signalstatus, child.before))
    (forked_code, forked_signal, forked_out), (new_code, new_signal, new_out) = runs
    assert (forked_code, forked_signal) == (new_code, new_signal)
    if ending in (["raise"], ["interrupt"]):
        assert tracebacks_end_alike(forked_out, new_out)
    else:
        assert forked_out == new_out


@pytest.mark.linux("pidfd_open")
def test_a_forked_agent_can_be_signalled_and_waited_for(probe, tmp_path):
    child = forked_agents.spawn(sys.executable, [str(probe), "thread"], env=clean_env(),
                                cwd=str(tmp_path), encoding="utf-8", timeout=30)  # fmt: skip
    assert child.isalive()
    child.kill(signal.SIGTERM)
    child.expect(pexpect.EOF)
    child.close()
    assert (child.exitstatus, child.signalstatus) == (None, signal.SIGTERM)
    with pytest.raises(subprocess.TimeoutExpired):
        forked_agents.run([sys.executable, str(probe), "sleep"], input="", env=clean_env(),
                          timeout=0.5, cwd=tmp_path)  # fmt: skip


@pytest.mark.linux("pidfd_open")
@pytest.mark.parametrize("number", [signal.SIGINT, signal.SIGTERM])
def test_a_forked_agent_on_pipes_ends_by_a_signal_as_a_new_one(probe, tmp_path, number):
    codes = []
    for starts in (forked_agents.Popen, subprocess.Popen):
        with starts([sys.executable, str(probe), "sleep"], stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=clean_env(),
                    cwd=tmp_path) as process:  # fmt: skip
            assert process.stdout.read(9) == b"buffered "  # it runs, Python's handlers set
            process.send_signal(number)
            codes.append((process.wait(30), process.stdout.read()))
    assert codes[0] == codes[1] and codes[0][0] == -number
