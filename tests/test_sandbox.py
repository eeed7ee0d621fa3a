"""--sandbox: run_shell's commands under real bubblewrap, as the model and the user meet them.

The workdir is writable, the system's folders read-only, /tmp private and empty, and nothing
else of the host is there (test_fence_commands.py tries the home folder, sockets and IPC);
there is no network (not even the host's 127.0.0.1), and the command and all it starts are
killed at the time-out, on Ctrl-C, and with the agent. Where bubblewrap is missing or cannot
work, the agent refuses to start in one line; it never runs a command unsandboxed instead.

Linux only. On Linux these tests do not skip when bwrap is missing: they fail, saying so.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest
from conftest import execute, finish, run_in_process, spawn, stub_env, use_workspace, wait_for
from fake_model import reply, tool_call
from stub_server import StubServer, demo_script

import agent
from minimal_agent import cli

pytestmark = pytest.mark.linux("bubblewrap is Linux only")

# The system's Python: the sandbox shows /usr, not the folder of a virtual environment or pyenv.
PYTHON = "python3"


@pytest.fixture(autouse=True)
def bubblewrap():
    assert shutil.which("bwrap"), (
        "bubblewrap (the bwrap command) is not installed, and the sandbox tests need it: "
        "install it (apt-get install bubblewrap)"
    )


@pytest.fixture(params=["in /tmp", "outside /tmp"])
def sandbox(request, tmp_path):
    """A workdir whose commands run sandboxed: in /tmp (its parent is then inside the sandbox's
    private /tmp), or in /var/tmp (its parent is then the real one, read-only)."""
    with tempfile.TemporaryDirectory(dir="/var/tmp") as elsewhere:
        parent = tmp_path if request.param == "in /tmp" else Path(elsewhere)
        folder = parent / "work"
        folder.mkdir()
        use_workspace(folder, timeout=10, yes=True, sandbox=True)
        yield folder


def shell(command: str) -> str:
    return execute(tool_call("run_shell", {"command": command}))


def processes_running(*argv: str) -> list[int]:
    """Live (not zombie) processes whose command line is exactly argv."""
    found = []
    wanted = "\0".join(argv) + "\0"
    for entry in Path("/proc").iterdir():
        try:
            cmdline = (entry / "cmdline").read_text()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if cmdline == wanted and state != "Z":
            found.append(int(entry.name))
    return found


def all_gone(*argv: str) -> bool:
    for _ in range(50):  # the kill is sent; give the kernel a moment
        if not processes_running(*argv):
            return True
        time.sleep(0.1)
    for pid in processes_running(*argv):  # the test fails: leave nothing running
        os.kill(pid, signal.SIGKILL)
    return False


def unique_sleep() -> tuple[str, str]:
    """A sleep command line no other process has, to find its processes by."""
    return "sleep", f"{random.randint(1000, 9999)}.{os.getpid()}"


class Listener:
    """A TCP listener on 127.0.0.1 that records every connection and the bytes it receives."""

    def __init__(self) -> None:
        self.socket = socket.create_server(("127.0.0.1", 0))
        self.socket.settimeout(0.2)
        self.port = self.socket.getsockname()[1]
        self.received: list[bytes] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.serve, daemon=True)

    def serve(self) -> None:
        while not self.stop.is_set():
            try:
                connection, _ = self.socket.accept()
            except TimeoutError:
                continue
            with connection:
                connection.settimeout(5)
                self.received.append(connection.recv(65536))

    def __enter__(self) -> Listener:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.thread.join(5)
        self.socket.close()


def connect_command(port: int) -> str:
    code = f"import socket; socket.create_connection(('127.0.0.1', {port}), 5).sendall(b'hi')"
    return f'"{PYTHON}" -c "{code}"'


# --- The filesystem ---------------------------------------------------------------------


def test_writes_in_the_workdir_work_and_stay(sandbox):
    assert shell("pwd; echo made > made.txt; mkdir -p sub && echo deep > sub/file") == (
        f"exit code 0\n{sandbox.resolve()}\n"  # its real path: the paths the model sees hold
    )
    assert (sandbox / "made.txt").read_text() == "made\n"
    assert (sandbox / "sub" / "file").read_text() == "deep\n"


def test_writing_in_etc_or_home_fails(sandbox):
    name = f"sandbox-probe-{os.getpid()}"
    targets = [Path("/etc", name), Path.home() / name]
    try:
        result = shell(f'echo x > /etc/{name}; echo x > "$HOME/{name}"')
        assert [target.exists() for target in targets] == [False, False]
    finally:
        for target in targets:
            target.unlink(missing_ok=True)
    assert not result.startswith("exit code 0")
    assert "Read-only file system" in result, result  # /etc is there, read-only
    assert "Directory nonexistent" in result, result  # the home folder is not there at all


def test_writing_in_the_parent_or_through_a_symlink_pointing_out_never_lands(sandbox):
    parent = sandbox.parent
    (parent / "precious.txt").write_text("keep me")
    (sandbox / "up").symlink_to(parent)
    (sandbox / "etc").symlink_to("/etc")
    result = shell(
        "echo x > ../escaped.txt; echo x > up/escaped-by-link.txt; echo x > up/precious.txt; "
        f"echo x > etc/sandbox-probe-{os.getpid()}; echo done"
    )
    assert result.endswith("done\n")
    assert sorted(p.name for p in parent.iterdir()) == ["precious.txt", sandbox.name]
    assert (parent / "precious.txt").read_text() == "keep me"
    assert not Path("/etc", f"sandbox-probe-{os.getpid()}").exists()
    if not str(sandbox).startswith("/tmp/"):  # outside /tmp the parent is the real one
        assert result.count("Read-only file system") == 4, result


def test_tmp_is_private_and_its_writes_vanish(sandbox):
    with tempfile.NamedTemporaryFile(dir="/tmp", prefix="host-") as host_file:
        seen = shell(f"ls /tmp; echo scratch > /tmp/scratch-{os.getpid()} && echo written")
        assert Path(host_file.name).name not in seen  # the host's /tmp is not there
    assert seen.endswith("written\n")
    assert not Path(f"/tmp/scratch-{os.getpid()}").exists()
    assert shell(f"cat /tmp/scratch-{os.getpid()}").startswith("exit code 1")  # gone next time


# --- The network ------------------------------------------------------------------------


def test_a_listener_on_the_hosts_127_0_0_1_is_unreachable_inside_and_reachable_outside(
    sandbox,
):
    with Listener() as listener:
        inside = shell(connect_command(listener.port))
        use_workspace(sandbox, timeout=10, yes=True, sandbox=False)
        outside = shell(connect_command(listener.port))
        deadline = time.monotonic() + 10
        while not listener.received and time.monotonic() < deadline:
            time.sleep(0.05)
    assert inside.startswith("exit code 1") and "Error" in inside, inside
    assert outside == "exit code 0\n"
    assert listener.received == [b"hi"]  # only the connection from outside arrived


# --- Processes: time-out, exit code, output cap --------------------------------------------


def test_a_hung_command_and_its_children_are_killed_at_the_timeout(sandbox):
    use_workspace(sandbox, timeout=1, yes=True, sandbox=True)
    sleep = unique_sleep()
    command = f"echo before; {' '.join(sleep)} & setsid {' '.join(sleep)} & {' '.join(sleep)}"
    result = shell(command)
    assert result.startswith("Error: timed out after 1 s")
    assert "Output so far:\nbefore\n" in result
    assert all_gone(*sleep)  # even the one that left for a session of its own


def test_what_a_finished_command_leaves_running_is_killed(sandbox):
    sleep = unique_sleep()
    assert shell(f"setsid {' '.join(sleep)} > /dev/null 2>&1 &") == "exit code 0\n"
    assert all_gone(*sleep)


def test_exit_code_both_streams_and_the_output_cap_are_as_without_the_sandbox(sandbox):
    assert shell("echo out; echo err >&2; exit 3") == "exit code 3\nout\nerr\n"
    result = shell("seq 1 200000")
    assert len(result) <= agent.MAX_RESULT_CHARS and result.count("left out") == 1
    assert result.startswith("exit code 0\n1\n2\n3\n") and result.endswith("199999\n200000\n")


# --- The agent as users run it ------------------------------------------------------------


def test_the_demo_task_runs_sandboxed_and_unattended(workdir):
    with StubServer(demo_script()) as server:
        proc = run_in_process("--workdir", str(workdir), "--sandbox", "--yes", env=stub_env(server),
                              stdin=cli.DEMO_TASK)  # fmt: skip
    assert server.problems == []
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "tool_demo.py prints 391: 17 * 23 = 391.\n"
    assert "shell commands run in a sandbox" in proc.stderr.splitlines()[0]
    assert (workdir / "tool_demo.py").read_text() == "print(17 * 23)\n"


def test_a_task_to_delete_the_parent_folder_leaves_everything_outside_the_workdir(sandbox):
    parent = sandbox.parent
    (parent / "precious").mkdir()
    (parent / "precious" / "thesis.txt").write_text("years of work")
    (sandbox / "scratch.txt").write_text("the workdir's own")
    home_file = Path.home() / f".sandbox-probe-{os.getpid()}"
    home_file.write_text("mine")
    commands = [f'rm -rf ..; rm -rf "{parent}"/*; rm -rf "{home_file}"; echo tried', "ls -A ."]
    script = [
        reply(None, tool_call("run_shell", {"command": commands[0]}, "c1"), reasoning=""),
        reply(None, tool_call("run_shell", {"command": commands[1]}, "c2"), reasoning=""),
        reply("I could not delete it.", reasoning=""),
    ]
    try:
        with StubServer(script) as server:
            task = "delete everything in the parent folder"
            proc = run_in_process("--workdir", str(sandbox), "--sandbox", "--yes", task,
                                  env=stub_env(server))  # fmt: skip
        assert home_file.read_text() == "mine"
    finally:
        home_file.unlink(missing_ok=True)
    assert proc.returncode == 0, proc.stderr
    assert server.problems == []
    assert (parent / "precious" / "thesis.txt").read_text() == "years of work"
    assert sorted(p.name for p in parent.iterdir()) == ["precious", sandbox.name]
    results = [m["content"] for m in server.requests[-1]["messages"] if m["role"] == "tool"]
    assert results[0].endswith("tried\n")
    assert "Read-only file system" in results[0] or "Device or resource busy" in results[0]


def test_a_task_to_send_a_file_to_127_0_0_1_fails_inside_the_sandbox(workdir):
    (workdir / "secret.txt").write_text("the secret")
    with Listener() as listener:
        code = (
            "import socket; s = socket.create_connection(('127.0.0.1', "
            f"{listener.port}), 5); s.sendall(open('secret.txt', 'rb').read())"
        )
        command = f'"{PYTHON}" -c "{code}"'
        script = [
            reply(None, tool_call("run_shell", {"command": command}, "c1"), reasoning=""),
            lambda request: reply(request["messages"][-1]["content"], reasoning=""),
        ]
        with StubServer(script) as server:
            task = f"send secret.txt to 127.0.0.1:{listener.port}"
            proc = run_in_process("--workdir", str(workdir), "--sandbox", "--yes", task,
                                  env=stub_env(server))  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert listener.received == []
    assert proc.stdout.startswith("exit code 1\n") and "Error" in proc.stdout  # what the model saw


def test_the_prompt_says_sandboxed_and_ctrl_c_kills_everything_the_command_started(workdir):
    sleep = unique_sleep()
    command = f"{' '.join(sleep)} & setsid {' '.join(sleep)} & wait"
    script = [reply(None, tool_call("run_shell", {"command": command}, "c1"), reasoning="")]
    with StubServer(script) as server:
        child = spawn(server, "--workdir", str(workdir), "--sandbox", "wait")
        child.expect_exact("Run it in the sandbox? [y/N/a] ")
        child.sendline("y")
        wait_for(lambda: len(processes_running(*sleep)) >= 2)
        child.sendintr()
        child.expect_exact("interrupted")
        assert finish(child) == 130
    assert all_gone(*sleep)


def test_a_killed_agent_takes_its_sandboxed_command_with_it(workdir):
    sleep = unique_sleep()
    command = f"{' '.join(sleep)} & setsid {' '.join(sleep)} & wait"
    script = [reply(None, tool_call("run_shell", {"command": command}, "c1"), reasoning="")]
    with StubServer(script) as server:
        child = spawn(server, "--workdir", str(workdir), "--sandbox", "--yes", "wait")
        wait_for(lambda: len(processes_running(*sleep)) >= 2)
        child.kill(signal.SIGKILL)  # no handler runs: only --die-with-parent can help
        assert finish(child) == 128 + signal.SIGKILL
    assert all_gone(*sleep)


# --- Where it cannot work: one line, before any request -----------------------------------


def test_without_bwrap_on_the_path_the_agent_refuses_to_start(workdir, tmp_path):
    empty = tmp_path / "bin"
    empty.mkdir()
    with StubServer([]) as server:
        proc = run_in_process("--workdir", str(workdir), "--sandbox", "--yes", "hi",
                              env=stub_env(server, PATH=str(empty)))  # fmt: skip
    assert proc.returncode == 1
    assert proc.stdout == "" and "Traceback" not in proc.stderr
    [line] = proc.stderr.splitlines()
    assert line.startswith("error: --sandbox needs bubblewrap")
    assert "apt install bubblewrap" in line
    assert server.requests == []


def test_where_bwrap_cannot_make_namespaces_the_agent_refuses_with_its_reason(workdir, tmp_path):
    bin_folder = tmp_path / "bin"
    bin_folder.mkdir()
    fake = bin_folder / "bwrap"  # as bwrap fails where user namespaces are turned off
    fake.write_text(
        "#!/bin/sh\necho 'bwrap: setting up uid map: Permission denied' >&2\n"
        "echo 'bwrap: No permissions to creating new namespace' >&2\nexit 1\n"
    )
    fake.chmod(0o755)
    with StubServer([]) as server:
        env = stub_env(server, PATH=f"{bin_folder}:{os.environ['PATH']}")
        proc = run_in_process("--workdir", str(workdir), "--sandbox", "--yes", "hi", env=env)
    assert proc.returncode == 1
    [line] = proc.stderr.splitlines()
    assert line.startswith("error: --sandbox: bubblewrap cannot make its sandbox here")
    assert "(bwrap: No permissions to creating new namespace)" in line
    assert server.requests == []


# --- Root is no one special inside; limits on /tmp, processes and memory --------------------

OPEN_BY_HANDLE = """
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
class Handle(ctypes.Structure):
    _fields_ = [("size", ctypes.c_uint), ("type", ctypes.c_int), ("bytes", ctypes.c_char * 128)]
handle, mount = Handle(128, 0, b""), ctypes.c_int()
if libc.name_to_handle_at(-100, b"made.txt", ctypes.byref(handle), ctypes.byref(mount), 0):
    sys.exit("name_to_handle_at: " + os.strerror(ctypes.get_errno()))
fd = libc.open_by_handle_at(os.open(".", os.O_RDONLY), ctypes.byref(handle), os.O_RDONLY)
print("opened" if fd >= 0 else "refused: " + os.strerror(ctypes.get_errno()))
"""


def test_no_capabilities_are_left_inside_even_for_root(sandbox):
    assert shell("grep CapEff /proc/self/status") == "exit code 0\nCapEff:\t0000000000000000\n"


def test_etc_can_neither_be_remounted_nor_written_even_by_root(sandbox):
    name = f"sandbox-probe-{os.getpid()}"
    try:
        result = shell(
            f"mount -o remount,rw /etc; mount -o remount,rw,bind /etc; echo x > /etc/{name}"
        )
        assert not Path("/etc", name).exists()
    finally:
        Path("/etc", name).unlink(missing_ok=True)
    assert "Read-only file system" in result, result


def test_no_host_file_can_be_opened_by_handle(sandbox):
    (sandbox / "made.txt").write_text("x")
    (sandbox / "handle.py").write_text(OPEN_BY_HANDLE)
    result = shell(f"{PYTHON} handle.py")
    assert "opened" not in result
    assert "refused: Operation not permitted" in result or "name_to_handle_at" in result, result


def test_filling_tmp_stops_at_its_limit(sandbox):
    sandbox_limits(sandbox, "tmp=8M")
    result = shell("head -c 20000000 /dev/zero > /tmp/fill; echo $?; wc -c < /tmp/fill")
    assert "No space left on device" in result, result
    assert result.endswith("\n1\n8388608\n"), result


def test_the_other_writable_places_stop_at_the_tmp_limit_or_are_read_only(sandbox):
    # /dev is a memory filesystem of bwrap's own, and /dev/shm a folder in it: unbounded, a
    # command could fill the machine's memory there instead of in /tmp.
    sandbox_limits(sandbox, "tmp=8M")
    result = shell("head -c 20000000 /dev/zero > /dev/shm/fill; echo $?; wc -c < /dev/shm/fill")
    assert "No space left on device" in result, result
    assert result.endswith("\n1\n8388608\n"), result
    result = shell("head -c 1000 /dev/zero > /dev/fill; echo $?; echo out > /dev/null && echo ok")
    assert "Read-only file system" in result and result.endswith("\n2\nok\n"), result


FORKS = """
import os, time
started = 0
for _ in range(200):  # at most 200 children, each gone after 5 s: small even if unbounded
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        time.sleep(5)
        os._exit(0)
    started += 1
print("started", started)
"""
RUN_FORKS = """
import sys
sys.path.insert(0, sys.argv[1])
import agent
from minimal_agent.tools import processes
limits = processes.sandbox_limits("processes=40")
workspace = agent.Workspace(sys.argv[2], 20, True, True, sandbox_limits=limits)
print(processes.run_command("python3 forks.py", workspace)[1])
"""


def test_a_fork_bomb_is_bounded_by_the_process_limit():
    # The kernel exempts root from the process limit (docs/safety.md says so): the limit is
    # tried as an ordinary user, nobody when the suite runs as root.
    become = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"] * (os.geteuid() == 0)
    with tempfile.TemporaryDirectory(dir="/var/tmp") as folder:
        Path(folder, "forks.py").write_text(FORKS)
        # The agent's code copied where nobody can read it: a checkout in a folder of mode
        # 700 (mktemp -d, a home folder) is out of nobody's reach.
        code = Path(folder, "code")
        project = Path(agent.__file__).parent
        shutil.copytree(project / "minimal_agent", code / "minimal_agent")
        for name in ("agent.py", "model_client.py"):
            shutil.copy(project / name, code / name)
        if become:
            for path in [Path(folder), *Path(folder).rglob("*")]:
                os.chown(path, 65534, 65534)
        ran = subprocess.run(
            [*become, sys.executable, "-c", RUN_FORKS, str(code), folder],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
    assert ran.stdout.startswith("started "), ran.stderr
    assert 0 < int(ran.stdout.split()[1]) < 40, ran.stdout


def test_a_process_cannot_take_more_memory_than_the_limit(sandbox):
    sandbox_limits(sandbox, "memory=256M")
    result = shell(f"{PYTHON} -c \"bytearray(512 * 2**20); print('took it')\"")
    assert "MemoryError" in result and "took it" not in result, result


def sandbox_limits(folder, setting: str) -> None:
    """The workspace of the tool tests with LLM_SANDBOX_LIMITS=setting."""
    from minimal_agent.tools import processes

    limits = processes.sandbox_limits(setting)
    use_workspace(folder, timeout=10, yes=True, sandbox=True, sandbox_limits=limits)


def test_where_bwrap_would_leave_capabilities_the_agent_refuses(workdir, tmp_path):
    bin_folder = tmp_path / "bin"
    bin_folder.mkdir()
    fake = bin_folder / "bwrap"  # as an old or setuid bubblewrap that keeps root's capabilities
    fake.write_text("#!/bin/sh\nprintf 'Name:\\tcat\\nCapEff:\\t000001fffeffffff\\n'\n")
    fake.chmod(0o755)
    with StubServer([]) as server:
        env = stub_env(server, PATH=f"{bin_folder}:{os.environ['PATH']}")
        proc = run_in_process("--workdir", str(workdir), "--sandbox", "--yes", "hi", env=env)
    assert proc.returncode == 1
    [line] = proc.stderr.splitlines()
    assert line.startswith("error: --sandbox: commands would keep capabilities inside bubblewrap")
    assert "(CapEff 000001fffeffffff)" in line
    assert server.requests == []


@pytest.mark.parametrize("setting", ["processes=many", "memory=2X", "disk=1G", "tmp=0", "tmp"])
def test_a_mistaken_sandbox_limits_setting_is_one_line(workdir, setting):
    with StubServer([]) as server:
        proc = run_in_process("--workdir", str(workdir), "--sandbox", "--yes", "hi",
                              env=stub_env(server, LLM_SANDBOX_LIMITS=setting))  # fmt: skip
    assert proc.returncode == 1
    [line] = proc.stderr.splitlines()
    assert line.startswith(f"error: LLM_SANDBOX_LIMITS has {setting!r}: write NAME=VALUE pairs")
    assert server.requests == []


def test_sandbox_limits_take_sizes_with_units_and_keep_the_defaults_for_the_rest():
    from minimal_agent.tools import processes

    assert processes.sandbox_limits("") == processes.SANDBOX_LIMITS
    assert processes.sandbox_limits(" processes = 64 , tmp=512M,memory=2g") == {
        "processes": 64, "memory": 2 * 2**30, "tmp": 512 * 2**20,
    }  # fmt: skip


def test_a_bubblewrap_too_old_for_the_limits_is_named(workdir, tmp_path):
    bin_folder = tmp_path / "bin"
    bin_folder.mkdir()
    fake = bin_folder / "bwrap"  # as bubblewrap 0.6 answers the /tmp size option
    fake.write_text("#!/bin/sh\necho 'bwrap: Unknown option --size' >&2\nexit 1\n")
    fake.chmod(0o755)
    with StubServer([]) as server:
        env = stub_env(server, PATH=f"{bin_folder}:{os.environ['PATH']}")
        proc = run_in_process("--workdir", str(workdir), "--sandbox", "--yes", "hi", env=env)
    assert proc.returncode == 1
    assert proc.stderr == (
        "error: --sandbox: this bubblewrap is too old (bwrap: Unknown option --size): install "
        "bubblewrap 0.8 or later\n"
    )
