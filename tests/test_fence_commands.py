"""The fence around run_shell's commands, tried as an attacker would: a prompt-injected model
that runs `env` to read secrets, connects to the host's sockets, reads the home folder, or
leaves a child behind that escaped its process group; and the live output a person sees while
a command runs (its control characters escaped). Real processes, real bubblewrap, a real
pseudo-terminal."""

from __future__ import annotations

import contextlib
import ctypes
import io
import os
import random
import signal
import socket
import sys
import tempfile
import time
from pathlib import Path

import pexpect
import pytest
from conftest import (
    alive,
    clean_env,
    execute,
    finish,
    run_in_process,
    spawn,
    stub_env,
    use_workspace,
    wait_for,
)
from fake_model import reply, tool_call
from stub_server import StubServer
from test_sandbox import all_gone, processes_running

import model_client

AGENT_KEY = "sk-agent-own-key-5f3a9c"
SECRETS = {  # names that look secret, in any case: kept from every command by default
    "OPENAI_API_KEY": "sk-openai-secret-1",
    "GITHUB_TOKEN": "ghp-secret-2",
    "AWS_SECRET_ACCESS_KEY": "aws-secret-3",
    "DB_PASSWORD": "db-secret-4",
    "my_api_key": "lower-case-secret-5",
    "Session_Token": "mixed-case-secret-6",
}
SANDBOX_ENV = {"PATH", "HOME", "LANG", "LC_ALL", "TERM", "TZ", "USER"}
SHELL_OWN = {"PWD", "OLDPWD", "SHLVL", "_"}  # what /bin/sh itself may add


def echoed(command: str) -> list:
    """A script: the model runs command, then answers with exactly what it got back."""
    call = tool_call("run_shell", {"command": command}, "c1")
    return [
        reply(None, call, reasoning=""),
        lambda request: reply(request["messages"][-1]["content"]),
    ]


def run_env(workdir: Path, *options: str, **settings: str):
    """`env` run by the agent (in this process); returns (the run, what the command printed)."""
    with StubServer(echoed("env"), api_key=AGENT_KEY) as server:
        env = stub_env(server, **SECRETS, ALIAS=AGENT_KEY, FAVOURITE="blue", **settings)
        proc = run_in_process("--workdir", str(workdir), "--yes", *options, "show env", env=env)
    assert server.problems == []
    return proc, proc.stdout


def names(env_output: str) -> set[str]:
    return {line.split("=", 1)[0] for line in env_output.splitlines()[1:] if "=" in line}


# --- Secrets stay out of commands ---------------------------------------------------------


@pytest.mark.posix("env and /bin/sh")
def test_the_agents_key_and_secret_looking_variables_never_reach_a_command(workdir):
    proc, seen = run_env(workdir)
    assert proc.returncode == 0, proc.stderr
    assert seen.startswith("exit code 0\n")
    assert AGENT_KEY not in seen  # not as LLM_API_KEY, nor under a harmless name (ALIAS)
    assert [value for value in SECRETS.values() if value in seen] == []
    assert "FAVOURITE=blue" in seen.splitlines()  # the rest is there, so commands still work
    assert {"PATH", "HOME"} <= names(seen)


@pytest.mark.posix("env and /bin/sh")
def test_llm_pass_env_passes_the_variables_it_names(workdir):
    proc, seen = run_env(workdir, LLM_PASS_ENV=" GITHUB_TOKEN,my_api_key ,")
    assert proc.returncode == 0, proc.stderr
    assert {"GITHUB_TOKEN=ghp-secret-2", "my_api_key=lower-case-secret-5"} <= set(seen.split("\n"))
    assert "aws-secret-3" not in seen and AGENT_KEY not in seen


@pytest.mark.parametrize("name", ["LLM_API_KEY", "ALIAS"])
def test_llm_pass_env_never_passes_the_agents_own_key(workdir, name):
    with StubServer([]) as server:
        env = stub_env(server, LLM_PASS_ENV=name, ALIAS=server.api_key)
        proc = run_in_process("--workdir", str(workdir), "--yes", "hi", env=env)
    assert proc.returncode == 1
    [line] = proc.stderr.splitlines()
    assert line.startswith(f"error: LLM_PASS_ENV names {name}, which holds the agent's own key")
    assert "remove it from LLM_PASS_ENV" in line
    assert server.requests == []


@pytest.mark.posix("env and /bin/sh")
def test_a_key_from_config_env_never_reaches_a_command_under_another_name(
    workdir, tmp_path, monkeypatch
):
    monkeypatch.setattr(model_client, "CONFIG_FILE", tmp_path / "config.env")  # the lesson's
    with StubServer(echoed("env"), api_key=AGENT_KEY) as server:
        (tmp_path / "config.env").write_text(
            f"LLM_API_KEY={AGENT_KEY}\nLLM_BASE_URL={server.url}\nLLM_MODEL=deepseek-flash\n"
        )
        env = clean_env(DEEPSEEK=AGENT_KEY, FAVOURITE="blue")
        proc = run_in_process("--workdir", str(workdir), "--yes", "show env", env=env)
    assert proc.returncode == 0, proc.stderr
    assert "FAVOURITE=blue" in proc.stdout.splitlines()
    assert AGENT_KEY not in proc.stdout


MORE_SECRETS = {  # the attack: each reached commands when only KEY/SECRET/TOKEN counted
    "MYSQL_PWD": "mysql-secret-7",
    "GH_PAT": "pat-secret-8",
    "gitlab_pat_readonly": "pat-secret-9",
    "PGPASSFILE": "/home/someone/pass-secret-10",
    "GOOGLE_APPLICATION_CREDENTIALS": "/home/someone/cred-secret-11.json",
    "BASIC_AUTH": "user:auth-secret-12",
    "CURL_COOKIE": "sid=cookie-secret-13",
    "APP_SESSION_ID": "session-secret-14",
    "DATABASE_URL": "postgres://u:pw-secret-15@db/x",
    "PIP_EXTRA_INDEX_URL": "https://example.org/simple https://:pw-secret-16@pkgs.example/simple",
    "ADV_AUTH": f"Bearer {AGENT_KEY}",  # a secret name, and the agent's key inside a value
    "CURL_HEADER": f"Authorization: Bearer {AGENT_KEY}",  # a harmless name, the key inside
}
ORDINARY = {  # what must still reach commands, though some of it looks a little like the above
    "GIT_AUTHOR_NAME": "Ada",  # AUTH, but the author's name
    "PYTHONPATH": "/nowhere-on-purpose",  # PAT, but inside PATH
    "PROJECT_URL": "https://user@example.org/repo.git",  # a user but no password
    "DOCS_URL": "https://example.org:8443/a:b",
    "LANG": "C.UTF-8",
}


@pytest.mark.posix("env and /bin/sh")
def test_more_secret_looking_names_and_values_never_reach_a_command(workdir):
    proc, seen = run_env(workdir, **MORE_SECRETS, **ORDINARY)
    assert proc.returncode == 0, proc.stderr
    assert [name for name in MORE_SECRETS if name in names(seen)] == []
    assert [value for value in MORE_SECRETS.values() if value in seen] == []
    assert AGENT_KEY not in seen
    assert {f"{name}={value}" for name, value in ORDINARY.items()} <= set(seen.splitlines())
    assert {"PATH", "HOME", "PWD"} <= names(seen)


@pytest.mark.posix("env and /bin/sh")
def test_llm_pass_env_passes_such_names_but_never_a_value_holding_the_key(workdir):
    proc, seen = run_env(workdir, **MORE_SECRETS, LLM_PASS_ENV="MYSQL_PWD,DATABASE_URL,GH_PAT")
    assert proc.returncode == 0, proc.stderr
    passed = {"MYSQL_PWD=mysql-secret-7", "DATABASE_URL=postgres://u:pw-secret-15@db/x"}
    assert passed | {"GH_PAT=pat-secret-8"} <= set(seen.splitlines())
    assert names(seen) & {"ADV_AUTH", "CURL_HEADER", "CURL_COOKIE"} == set()
    assert AGENT_KEY not in seen


def test_llm_pass_env_naming_a_value_that_holds_the_key_is_refused_at_start_up(workdir):
    with StubServer([]) as server:
        env = stub_env(server, LLM_PASS_ENV="ADV_AUTH", ADV_AUTH=f"Bearer {server.api_key}")
        proc = run_in_process("--workdir", str(workdir), "--yes", "hi", env=env)
    assert proc.returncode == 1
    [line] = proc.stderr.splitlines()
    assert line.startswith("error: LLM_PASS_ENV names ADV_AUTH, which holds the agent's own key")
    assert server.requests == []


@pytest.mark.linux("bubblewrap")
def test_a_sandboxed_command_starts_from_a_short_allow_list_and_still_works(workdir):
    settings = {"LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "TZ": "UTC", "TERM": "xterm",
                "USER": "someone", "LLM_PASS_ENV": "GITHUB_TOKEN"}  # fmt: skip
    proc, seen = run_env(workdir, "--sandbox", **settings)
    assert proc.returncode == 0, proc.stderr
    assert names(seen) - SHELL_OWN == SANDBOX_ENV | {"GITHUB_TOKEN"}
    assert "GITHUB_TOKEN=ghp-secret-2" in seen.splitlines()  # what the user named passes
    assert "TZ=UTC" in seen.splitlines()
    use_workspace(workdir, timeout=10, yes=True, sandbox=True)
    works = shell("ls / > /dev/null && cat /etc/passwd > /dev/null && python3 -c 'print(6 * 7)'")
    assert works == "exit code 0\n42\n"


# --- The sandbox's walls ------------------------------------------------------------------


def shell(command: str) -> str:
    return execute(tool_call("run_shell", {"command": command}))


@pytest.fixture
def outside():
    """A folder outside /tmp (so the old sandbox, which hid only /tmp, would show it)."""
    with tempfile.TemporaryDirectory(dir="/var/tmp") as folder:
        yield Path(folder)


@pytest.fixture(params=["in /tmp", "outside /tmp"])
def sandboxed(request, tmp_path, outside):
    folder = (tmp_path if request.param == "in /tmp" else outside) / "work"
    folder.mkdir()
    use_workspace(folder, timeout=10, yes=True, sandbox=True)
    return folder


@pytest.mark.linux("bubblewrap")
def test_only_the_systems_folders_the_workdir_and_a_private_tmp_are_there(sandboxed):
    listed = shell("ls -A /")
    assert listed.startswith("exit code 0\n")
    system = {"usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32", "etc", "dev", "proc", "tmp"}
    top = sandboxed.resolve().parts[1]  # the workdir's own first folder
    assert set(listed.splitlines()[1:]) <= system | {top}, listed
    assert shell("ls -d /run /var/run /home /root 2>&1 | grep -vc 'No such file'") == (
        "exit code 1\n0\n"
    )


@pytest.mark.linux("bubblewrap")
def test_no_home_folder_is_there(sandboxed, outside, monkeypatch):
    import pwd  # POSIX only

    home = outside / "home"
    home.mkdir()
    (home / ".netrc").write_text("HOME-SECRET")
    monkeypatch.setenv("HOME", str(home))
    own = Path(pwd.getpwuid(os.getuid()).pw_dir) / f".fence-probe-{os.getpid()}"
    own.write_text("OWN-HOME-SECRET")
    try:
        seen = shell(f'cat "$HOME/.netrc" "{own}"; ls -A "$HOME" "{own.parent}"; echo "$HOME"')
    finally:
        own.unlink()
    assert "SECRET" not in seen, seen
    assert seen.count("No such file or directory") == 4, seen
    assert seen.endswith(f"{home}\n")  # HOME is set, and names nothing there


@pytest.mark.linux("bubblewrap")
def test_a_workdir_inside_the_home_folder_is_there_and_nothing_else_of_it(outside, monkeypatch):
    home = outside / "home"
    (home / "project").mkdir(parents=True)
    (home / ".ssh").mkdir()
    (home / ".ssh" / "id_ed25519").write_text("PRIVATE-KEY")
    monkeypatch.setenv("HOME", str(home))
    use_workspace(home / "project", timeout=10, yes=True, sandbox=True)
    seen = shell('ls -A "$HOME"; cat "$HOME/.ssh/id_ed25519"; echo made > made.txt && cat made.txt')
    assert "PRIVATE-KEY" not in seen
    assert seen.startswith("exit code 0\nproject\n")  # all there is of the home folder
    assert seen.endswith("\nmade\n")
    assert (home / "project" / "made.txt").read_text() == "made\n"


@pytest.mark.linux("bubblewrap, AF_UNIX")
def test_no_unix_socket_of_the_host_can_be_reached(sandboxed, outside):
    path = outside / "run" / "bus"  # as /run/user/UID/bus or /var/run/docker.sock
    path.parent.mkdir()
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(path))
    listener.listen()
    connect = f"python3 -c \"import socket; socket.socket(socket.AF_UNIX).connect('{path}')\""
    try:
        inside = shell(f"{connect} && echo connected")
        use_workspace(sandboxed, timeout=10, yes=True, sandbox=False)
        assert shell(f"{connect} && echo connected") == "exit code 0\nconnected\n"  # it listens
    finally:
        listener.close()
    assert "connected" not in inside and not inside.startswith("exit code 0"), inside


@pytest.mark.linux("bubblewrap, System V shared memory")
def test_no_ipc_is_shared_with_the_host(sandboxed):
    libc = ctypes.CDLL(None, use_errno=True)
    key = random.randint(1 << 20, 1 << 30)
    segment = libc.shmget(key, 4096, 0o1000 | 0o600)  # IPC_CREAT, as a host program would
    assert segment >= 0, os.strerror(ctypes.get_errno())
    find = f'python3 -c "import ctypes; print(ctypes.CDLL(None).shmget({key}, 0, 0))"'
    try:
        inside = shell(find)
        use_workspace(sandboxed, timeout=10, yes=True, sandbox=False)
        assert shell(find) == f"exit code 0\n{segment}\n"  # the test's segment is there
    finally:
        libc.shmctl(segment, 0, None)  # IPC_RMID
    assert inside == "exit code 0\n-1\n"


# --- Nothing outlives a command -----------------------------------------------------------


def unique_sleep(seconds: int = 40) -> tuple[str, str]:
    """A sleep of about seconds whose command line no other process has."""
    return "sleep", f"{seconds}.{random.randint(1000, 9999)}{os.getpid()}"


def assert_killed(pid: int) -> None:
    """On Linux the escaped child is gone; elsewhere (only the process group is killed) the
    test kills it."""
    if sys.platform == "linux":
        assert not alive(pid)
    else:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


sandbox_or_not = pytest.mark.parametrize(
    "sandbox",
    [False, pytest.param(True, marks=pytest.mark.linux("bubblewrap"))],
    ids=["plain", "sandbox"],
)


@pytest.mark.posix("setsid, & and /bin/sh")
@sandbox_or_not
def test_a_child_that_left_its_group_holding_the_output_ends_at_the_time_out(workdir, sandbox):
    use_workspace(workdir, timeout=2, yes=True, sandbox=sandbox)
    sleep = " ".join(unique_sleep())
    started = time.monotonic()
    result = shell(f"echo before; setsid {sleep} & echo $! > child.pid")
    assert time.monotonic() - started < 6  # not the child's own 40 s
    if sandbox:  # the PID namespace ends, and the child with it, when the shell ends
        assert result == "exit code 0\nbefore\n"
    else:
        assert result.startswith("Error: timed out after 2 s")
        assert "Output so far:\nbefore\n" in result
        assert_killed(int((workdir / "child.pid").read_text()))


@pytest.mark.linux("finds processes in /proc")
@sandbox_or_not
def test_a_child_that_left_its_session_a_moment_later_is_gone_when_the_result_returns(
    workdir, sandbox
):
    use_workspace(workdir, timeout=10, yes=True, sandbox=sandbox)
    escapee = ("sh", "-c", f"sleep 0.5; exec {' '.join(unique_sleep())}")
    command = f"setsid sh -c '{escapee[2]}' > /dev/null 2>&1 & echo started"
    assert shell(command) == "exit code 0\nstarted\n"
    assert processes_running(*escapee) == []  # gone before the result came back
    time.sleep(1)  # had it survived, it would be the sleep by now
    assert all_gone("sleep", escapee[2].split()[-1])


@pytest.mark.linux("finds processes in /proc")
def test_what_could_not_be_killed_is_named_in_the_result(workdir, monkeypatch):
    use_workspace(workdir, timeout=10, yes=True)
    sleep = unique_sleep()
    real_kill = os.kill

    def refused(pid: int, number: int) -> None:  # as for a process of another user
        if pid in processes_running(*sleep):
            raise PermissionError(1, "Operation not permitted")
        real_kill(pid, number)

    monkeypatch.setattr(os, "kill", refused)
    try:
        started = 'until [ "$(cat /proc/$!/comm)" = sleep ]; do sleep 0.01; done'  # not still sh
        result = shell(f"setsid {' '.join(sleep)} > /dev/null 2>&1 & echo $!; {started}")
    finally:
        monkeypatch.undo()
        pids = processes_running(*sleep)
        for pid in pids:
            os.kill(pid, signal.SIGKILL)
    assert pids and result == (
        f"exit code 0\n{pids[0]}\n[1 process(es) it started could not be killed and may still "
        f"run: sleep (pid {pids[0]})]\n"
    )


@pytest.mark.posix("a pseudo-terminal (pexpect.spawn), setsid, signals")
@pytest.mark.parametrize("how, exit_code", [("Ctrl-C", 130), ("SIGTERM", 143)])
def test_ctrl_c_and_sigterm_act_at_once_while_an_escaped_child_holds_the_output(
    workdir, how, exit_code
):
    sleep = " ".join(unique_sleep())
    command = f"setsid {sleep} & echo $! > child.pid"
    script = [reply(None, tool_call("run_shell", {"command": command}, "c1"), reasoning="")]
    with StubServer(script) as server:
        child = spawn(server, "--workdir", str(workdir), "--yes", "--timeout", "60", "wait")
        pid_file = workdir / "child.pid"
        wait_for(lambda: pid_file.exists() and pid_file.read_text().strip())
        time.sleep(0.3)  # the shell has ended; only the escaped child holds the output
        sent = time.monotonic()
        child.sendintr() if how == "Ctrl-C" else child.kill(signal.SIGTERM)
        child.expect(pexpect.EOF, timeout=10)
        acted_within = time.monotonic() - sent
        assert finish(child) == exit_code
    assert acted_within < 1.5
    assert_killed(int(pid_file.read_text()))


# --- Live output ----------------------------------------------------------------------------


LIVE = (
    r"echo first-line; printf 'title \033]0;OWNED\007 end\n'; "
    "while [ ! -e go ]; do sleep 0.05; done; echo last-line"
)
LIVE_RESULT = "exit code 0\nfirst-line\ntitle \x1b]0;OWNED\x07 end\nlast-line\n"


@pytest.mark.posix("a pseudo-terminal (pexpect.spawn) and /bin/sh")
def test_a_running_commands_output_shows_live_escaped_and_the_model_gets_all_of_it(workdir):
    script = [
        reply(None, tool_call("run_shell", {"command": LIVE}, "c1"), reasoning=""),
        reply("done"),
    ]
    with StubServer(script) as server:
        child = spawn(server, "--workdir", str(workdir), "--yes", "--no-stream", "live")
        child.logfile_read = screen = io.StringIO()
        child.expect_exact("first-line", timeout=10)  # while the command still runs
        child.expect(r"title \\x1b\]0;OWNED\\x07 end", timeout=5)  # escaped: no title set
        child.expect(r"running \d+ s", timeout=5)
        assert "last-line" not in screen.getvalue()
        (workdir / "go").touch()
        child.expect_exact("-> exit code 0 first-line", timeout=10)
        assert finish(child) == 0
    assert "\x1b]0;OWNED" not in screen.getvalue()
    assert server.problems == []
    assert server.requests[-1]["messages"][-1]["content"] == LIVE_RESULT


@pytest.mark.posix("/bin/sh")
def test_piped_nothing_shows_while_a_command_runs(workdir):
    (workdir / "go").touch()
    with StubServer(echoed(LIVE)) as server:
        proc = run_in_process("--workdir", str(workdir), "--yes", "live", env=stub_env(server))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == LIVE_RESULT + "\n"
    lines = proc.stderr.splitlines()  # where it started, the call, its result, the totals
    assert [line.split()[0] for line in lines] == ["model", "[1]", "->", "steps"], lines


@pytest.mark.posix("a pseudo-terminal (pexpect.spawn) and /bin/sh")
def test_the_live_lines_are_wiped_and_the_step_lines_stay_as_they_were(workdir):
    import pyte

    command = "for i in 1 2 3 4 5 6 7 8; do echo line-$i; sleep 0.15; done"
    script = [reply(None, tool_call("run_shell", {"command": command}, "c1")), reply("done")]
    with StubServer(script) as server:
        child = spawn(server, "--workdir", str(workdir), "--yes", "--no-stream", "lines")
        child.logfile_read = written = io.StringIO()
        child.expect_exact("| line-3", timeout=10)  # drawn while it runs
        assert finish(child) == 0
    terminal = pyte.Screen(200, 40)  # spawn's dimensions
    pyte.Stream(terminal).feed(written.getvalue())
    rows = [row.rstrip() for row in terminal.display if row.strip()]
    [call] = [number for number, row in enumerate(rows) if row.startswith("[1] run_shell(")]
    assert rows[call + 1].startswith("      -> exit code 0 line-1 line-2")  # right below it
    assert not [row for row in rows if "running" in row or row.startswith("      | ")]
