from __future__ import annotations

import io
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import pexpect
import pytest
from hypothesis import strategies
from hypothesis.errors import HypothesisSideeffectWarning

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

import forked_agents  # noqa: E402
import rewritten_once  # noqa: E402

import agent  # noqa: E402
from minimal_agent import cli  # noqa: E402

# Every conversation is saved: the tests' go to a folder of their own, never the user's.
SESSIONS = tempfile.mkdtemp(prefix="agent-test-sessions-")
os.environ["LLM_SESSIONS_DIR"] = SESSIONS

# The agents the tests run talk to 127.0.0.1 over plain HTTP only, yet the SDK's HTTP client
# loads the system's certificate bundle for each client it makes (20 ms of CPU, in every run):
# given an empty folder of certificates instead (SSL_CERT_DIR, SSL_CERT_FILE unset, as httpx
# reads them), it loads nothing. Only the agents' environment gets it (clean_env).
NO_CERTIFICATES = tempfile.mkdtemp(prefix="agent-test-no-certificates-")
# Nor do they import trio, which only the browser tests' selenium brings into this environment
# and no user's install of the agent has: the SDK's HTTP stack imports it where it is installed
# (60 ms of CPU in every agent process). A module of that name that refuses to load, first on
# the agents' PYTHONPATH (clean_env), keeps them as a user's agent is.
WITHOUT_TRIO = tempfile.mkdtemp(prefix="agent-test-without-trio-")
Path(WITHOUT_TRIO, "trio.py").write_text('raise ImportError("not for the agents under test")\n')

# What a marked test needs, and the systems that lack it. A test marked posix or linux may give
# its own reason, @pytest.mark.posix("why"); the skip then names it.
NEEDS = {
    "posix": (
        sys.platform == "win32",
        "a POSIX system",
        "a POSIX shell, process groups, signals or a pseudo-terminal (pexpect.spawn)",
    ),
    "linux": (sys.platform != "linux", "Linux", "/proc, bubblewrap or Linux-only behaviour"),
}


def pytest_configure(config):
    """Run as a background job of a script (`pytest &`), pytest starts with Ctrl-C ignored;
    under nohup, with SIGHUP ignored. Every agent it starts would inherit that, and the tests
    that send those signals would wait for commands to time out. An ignored signal is inherited
    by a new program and a handled one is not (exec resets it to the default), so Ctrl-C gets
    Python's usual handler, and SIGHUP one that does nothing: pytest goes on ignoring it, as
    nohup asked, and the agents (and pytest-xdist's workers) get both as on a terminal."""
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    hangup = getattr(signal, "SIGHUP", None)  # none on Windows
    if hangup and signal.getsignal(hangup) == signal.SIG_IGN:
        signal.signal(hangup, lambda signum, frame: None)
    if getattr(config.option, "numprocesses", None) and not hasattr(config, "workerinput"):
        # Hypothesis's text strategy needs a table of what UTF-8 can encode: 1.5 s of CPU to
        # make, then kept in .hypothesis/. Made here once, before the workers start, a fresh
        # clone's workers read it instead of each making it again (hypothesis warns of slow
        # work while pytest starts: here it is the point).
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", HypothesisSideeffectWarning)
            strategies.text().validate()


REWRITTEN = pytest.StashKey[Path]()  # the controller's folder of rewritten test modules


def pytest_sessionstart(session):
    """The controller of pytest-xdist's workers rewrites the test modules' asserts before
    they start, and each worker reads them (rewritten_once.py)."""
    config = session.config
    if config.pluginmanager.has_plugin("dsession") and config.option.assertmode == "rewrite":
        config.stash[REWRITTEN] = Path(tempfile.mkdtemp(prefix="agent-test-rewritten-"))
        sources = rewritten_once.modules_given(config)
        rewritten_once.rewrite_into(config.stash[REWRITTEN], config, sources)
    elif "rewritten" in getattr(config, "workerinput", {}):
        rewritten_once.read_from(Path(config.workerinput["rewritten"]))


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's hook: unknown when it is not loaded
def pytest_configure_node(node):
    """A worker reads the test modules the controller rewrote (rewritten_once.py)."""
    if REWRITTEN in node.config.stash:
        node.workerinput["rewritten"] = str(node.config.stash[REWRITTEN])


def pytest_xdist_auto_num_workers(config):
    """How many workers `-n auto` (pyproject.toml's addopts) starts: two a core, at most 8, as
    a test often waits for a server, a command or an agent process (on two cores, in a fresh
    clone, the suite took 123 s with 2 workers, 91 s with 3, 82 s with 4; on six of its files,
    run in turn on a busy machine, 2 workers took 0.85 times the CPU of 4 and 1.39 times as
    long, 3 workers the same CPU and 1.36 times as long); none (one process)
    for the real-server tests, whose servers every worker would start again.
    PYTEST_XDIST_AUTO_NUM_WORKERS, if set, decides."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None  # pytest-xdist reads it
    selected = config.option.markexpr or ""
    if "real_server" in selected and "not real_server" not in selected:
        return 0
    return min(2 * (os.cpu_count() or 1), 8)


def pytest_unconfigure(config):
    """The test process's folders go with it (in each pytest-xdist worker too)."""
    forked_agents.SERVER.stop()
    for folder in (SESSIONS, NO_CERTIFICATES, WITHOUT_TRIO, config.stash.get(REWRITTEN, None)):
        if folder:
            shutil.rmtree(folder, ignore_errors=True)


def pytest_collection_modifyitems(config, items):
    """Skip the tests marked posix on Windows and those marked linux elsewhere than Linux,
    saying what is missing. The tests marked long go first: pytest-xdist hands the tests out
    in this order, and one of them begun last would leave the other workers idle while it
    runs."""
    items.sort(key=lambda item: item.get_closest_marker("long") is None)  # stable
    for item in items:
        for name, (missing, system, default_reason) in NEEDS.items():
            marker = item.get_closest_marker(name)
            if marker and missing:
                why = marker.args[0] if marker.args else default_reason
                item.add_marker(pytest.mark.skip(reason=f"needs {system}: {why}"))
                break


on_a_terminal = pytest.mark.posix("a pseudo-terminal (pexpect.spawn)")


def clean_env(**settings: str) -> dict[str, str]:
    """The environment without any LLM_ or OPENAI_ variable of the user's, plus settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LLM_", "OPENAI_"))}
    env.pop("NO_COLOR", None)
    # The agents keep their compiled modules, as on a user's machine, where nobody sets this:
    # else every one of the suite's hundreds of agents compiles the agent's 4,000 lines again.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.pop("SSL_CERT_FILE", None)
    env["SSL_CERT_DIR"] = NO_CERTIFICATES
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [WITHOUT_TRIO, env.get("PYTHONPATH")]))
    env["LLM_SESSIONS_DIR"] = SESSIONS
    env.update(settings)
    return env


forked_agents.SERVER.env = clean_env()


def stub_env(server, **settings: str) -> dict[str, str]:
    """Settings that point the agent at a stub server (every LLM_ variable set, so a
    developer's own config.env cannot change what the test sees)."""
    defaults = {"LLM_API_KEY": server.api_key, "LLM_BASE_URL": server.url}
    return clean_env(**{**defaults, "LLM_MODEL": "deepseek-flash", **settings})


def run_agent(
    *args: str, env: dict, stdin: str | None = "", timeout: float = 60, script: Path | None = None,
    fork: bool = True,
) -> subprocess.CompletedProcess:  # fmt: skip
    """Run `python agent.py ARGS` as a user would, in a separate process: forked by the suite's
    fork server where that changes nothing the test sees (forked_agents.py); fork=False starts
    a new interpreter, for a test that times the process from its start (the SDK's import
    included, as a user waits for it)."""
    argv = [sys.executable, str(script or ROOT / "agent.py"), *args]
    where = ROOT / "tests"  # not the project folder: nothing may depend on the cwd
    if fork:
        return forked_agents.run(argv, input=stdin, env=env, timeout=timeout, cwd=where)
    return subprocess.run(argv, input=stdin, capture_output=True, text=True, env=env,
                          timeout=timeout, cwd=where)  # fmt: skip


def run_in_process(
    *args: str, env: dict, stdin: str | None = "", cwd: Path = ROOT / "tests",
    installed: bool = False,
) -> subprocess.CompletedProcess:  # fmt: skip
    """What run_agent returns, without starting a process: agent.main runs in this one,
    with env as the whole environment, stdin as its input (not a terminal), its stdout and
    stderr caught, in the folder cwd (run_agent's unless given). installed: the installed
    command (agent.command(), as test_command.run_command starts it) rather than agent.py.
    For the tests where the process boundary is not what they check: a new agent process
    spends half a second importing openai, and the suite starts hundreds. Everything the
    agent changes for its run is put back: the environment, the folder, the streams and the
    signal handlers. A hung run is ended by the suite's own time-out."""
    from minimal_agent.tools import processes

    saved_env, saved_cwd = dict(os.environ), os.getcwd()
    saved_streams = sys.stdin, sys.stdout, sys.stderr
    numbers = [signal.SIGINT, *processes.termination_signals()]  # the ones the agent handles
    saved_handlers = {number: signal.getsignal(number) for number in numbers}
    streams = [
        io.TextIOWrapper(io.BytesIO(text.encode()), encoding="utf-8", write_through=True)
        for text in (stdin or "", "", "")
    ]
    sys.stdin, sys.stdout, sys.stderr = streams
    os.environ.clear()
    os.environ.update(env)
    os.chdir(cwd)
    try:
        code = cli.main(agent, list(args), installed=True) if installed else agent.main(list(args))
    except SystemExit as end:  # argparse's usage errors, a termination signal's handler
        code = end.code if isinstance(end.code, int) else 0 if end.code is None else 1
        if isinstance(end.code, str):
            print(end.code, file=sys.stderr)
    finally:
        sys.stdin, sys.stdout, sys.stderr = saved_streams
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)
        for number, handler in saved_handlers.items():
            signal.signal(number, handler)
    out, err = (stream.buffer.getvalue().decode() for stream in streams[1:])
    program = ["minimal-agent"] if installed else ["agent.py"]
    return subprocess.CompletedProcess([*program, *args], code, out, err)


def spawn(server, *args: str) -> pexpect.spawn:
    return forked_agents.spawn(
        sys.executable,
        [str(ROOT / "agent.py"), *args],
        env=stub_env(server),
        cwd=str(ROOT / "tests"),
        encoding="utf-8",
        timeout=30,
        dimensions=(40, 200),
    )


def finish(child: pexpect.spawn) -> int:
    child.expect(pexpect.EOF)
    child.close()
    return child.exitstatus if child.exitstatus is not None else 128 + child.signalstatus


def wait_for(condition, failure: str = "the command never started", seconds: float = 30) -> None:
    """Wait until condition() is true; fail with failure after seconds, as long as pexpect
    waits for a child's next step."""
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, failure
        time.sleep(0.05)


def process_state(pid: int) -> str | None:
    """The state letter of a process (Z for a zombie), or None if there is no such process:
    from /proc on Linux, from ps where there is no /proc (macOS)."""
    if sys.platform == "linux":
        try:
            with open(f"/proc/{pid}/stat") as f:
                return f.read().split(")")[-1].split()[0]
        except FileNotFoundError:  # reaped
            return None
    ps = subprocess.run(["ps", "-o", "stat=", "-p", str(pid)], capture_output=True, text=True)
    return ps.stdout.strip()[:1] or None  # nothing printed (and exit 1): no such process


def alive(pid: int) -> bool:
    """Whether a process still runs (a zombie is dead already). POSIX only: on Windows,
    os.kill(pid, 0) would not probe but send a Ctrl-C."""
    deadline = time.monotonic() + 10  # the kill is sent; give a loaded machine time to reap
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        if process_state(pid) in (None, "Z"):
            return False
        time.sleep(0.1)
    return True


@pytest.fixture
def app(tmp_path: Path) -> Path:
    """agent.py and model_client.py in a folder of their own, so config.env is the test's."""
    folder = tmp_path / "app"
    folder.mkdir()
    for name in ("agent.py", "model_client.py"):
        shutil.copy(ROOT / name, folder / name)
    shutil.copytree(
        ROOT / "minimal_agent",
        folder / "minimal_agent",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    return folder


@pytest.fixture
def quick_retries(monkeypatch) -> None:
    """The SDK's back-off between its tries (0.5 s, then 1 s) made 10 ms, in this process: for
    the tests whose server fails every try, where the tries are checked, not the waits."""
    monkeypatch.setattr("openai._base_client.INITIAL_RETRY_DELAY", 0.01)


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    folder = tmp_path / "work"
    folder.mkdir()
    return folder


WORKSPACE: list = []  # the workspace of the tool tests: use_workspace() sets it


def use_workspace(folder, timeout: float = agent.SHELL_TIMEOUT, yes: bool = False,
                  sandbox: bool = False, **given) -> agent.Workspace:  # fmt: skip
    """A session's workspace for the tests that call tools directly, through execute(); given:
    the rest of Workspace's arguments (added_tools, private, ...)."""
    WORKSPACE[:] = [agent.Workspace(folder, timeout, yes, sandbox, **given)]
    return WORKSPACE[0]


def execute(call: dict) -> str:
    """execute_tool_call in the workspace of the last use_workspace()."""
    return agent.execute_tool_call(call, WORKSPACE[0])


def saved_messages(transcript) -> list[dict]:
    """The messages of a transcript (a path or its text), without the agent's event lines."""
    import json

    text = transcript if isinstance(transcript, str) else Path(transcript).read_text()
    lines = [json.loads(line) for line in text.splitlines() if line.strip()]
    return [line for line in lines if "event" not in line]
