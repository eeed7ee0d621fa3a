"""Agent processes forked from forkserver.py, which has imported the model SDK once: the
tests' side. spawn() is pexpect.spawn, Popen subprocess.Popen and run() subprocess.run for
`python agent.py ...`, half a second of CPU cheaper each. What the server cannot reproduce
exactly goes the usual way: another program or script, other Python options, an environment
that differs in what Python or the SDK read as they start, options for the child (pexpect's
echo off or SIGHUP ignored, Popen's new session, user or umask, a preexec_fn), a system
without pidfd_open (Linux's, which the server waits on)."""

from __future__ import annotations

import json
import os
import selectors
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pexpect

try:
    import ptyprocess
except ImportError:  # Windows: no pseudo-terminal (the tests that need one skip there)
    ptyprocess = None

SERVER_PROGRAM = Path(__file__).with_name("forkserver.py")
# Read by Python or the SDK as they start, so the server's must be the agent's.
READ_AT_START = ("PYTHON", "OPENAI_", "LC_", "LANG")


class Server:
    """One server for each test process, started when first asked for."""

    def __init__(self, env: dict[str, str]):
        self.folder = tempfile.mkdtemp(prefix="agent-test-forkserver-")
        self.path = os.path.join(self.folder, "socket")
        self.process = subprocess.Popen(
            [sys.executable, str(SERVER_PROGRAM), self.path],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, cwd=self.folder,
        )  # fmt: skip
        if self.process.stdout.readline() != b"ready\n":
            raise RuntimeError(f"{SERVER_PROGRAM.name} did not start")

    def start(self, argv: list[str], env: dict, cwd: str, rows_columns, fds=()) -> Child:
        connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        connection.connect(self.path)
        request = {"argv": argv[1:], "env": env, "cwd": cwd, "rows_columns": rows_columns}
        socket.send_fds(connection, [json.dumps(request).encode() + b"\n"], list(fds))
        return Child(connection)

    def stop(self) -> None:
        self.process.stdin.close()
        self.process.wait()
        self.process.stdout.close()
        os.remove(self.path)
        os.rmdir(self.folder)


class Child:
    """An agent the server forked: its pid, its terminal's master side if it has one, and
    its wait status once the server reports it."""

    def __init__(self, connection: socket.socket):
        self.connection = connection
        self.lines, fds, _, _ = socket.recv_fds(connection, 4096, 1)
        self.pid = json.loads(self.next_line())["pid"]
        self.master = fds[0] if fds else None
        self.status = None

    def next_line(self) -> bytes:
        while b"\n" not in self.lines:
            more = self.connection.recv(4096)
            if not more:
                raise RuntimeError("the fork server stopped answering")
            self.lines += more
        line, self.lines = self.lines.split(b"\n", 1)
        return line

    def poll(self, timeout: float | None = 0) -> int | None:
        """The wait status, waiting up to timeout seconds (None: until it ends)."""
        if self.status is None:
            with selectors.DefaultSelector() as selector:
                selector.register(self.connection, selectors.EVENT_READ)
                if b"\n" in self.lines or selector.select(timeout):
                    self.status = json.loads(self.next_line())["status"]
                    self.connection.close()
        return self.status


if ptyprocess:  # a child on a terminal of its own: pexpect's spawn

    class ForkedPty(ptyprocess.PtyProcess):
        """ptyprocess's view of a forked child: the server, its parent, reports how it ended."""

        def __init__(self, child: Child, argv, env, cwd):
            super().__init__(child.pid, child.master)
            self.child = child
            self.argv, self.env, self.launch_dir = argv, env, cwd

        def isalive(self) -> bool:
            if self.terminated:
                return False
            status = self.child.poll(None if self.flag_eof else 0)
            if status is None:
                return True
            self.status = status
            self.exitstatus = os.WEXITSTATUS(status) if os.WIFEXITED(status) else None
            self.signalstatus = os.WTERMSIG(status) if os.WIFSIGNALED(status) else None
            self.terminated = True
            return False

        def wait(self) -> int | None:
            self.flag_eof = True  # poll until it ends
            self.isalive()
            return self.exitstatus

    class spawn(pexpect.spawn):
        """pexpect.spawn, with `python agent.py ...` forked from the server where it can be."""

        def _spawnpty(self, args, **kwargs):
            argv = [os.fsdecode(arg) for arg in args]
            env = dict(self.env if self.env is not None else os.environ)
            plain = (
                kwargs.get("echo", True) and not kwargs.get("preexec_fn") and not self.ignore_sighup
            )
            if not (plain and SERVER.takes(argv, env)):
                return super()._spawnpty(args, **kwargs)
            cwd = os.fspath(self.cwd) if self.cwd is not None else os.getcwd()
            rows_columns = list(kwargs.get("dimensions", (24, 80)))
            child = SERVER.start(argv, env, cwd, rows_columns)
            return ForkedPty(child, argv, env, cwd)


class Popen(subprocess.Popen):
    """subprocess.Popen, with `python agent.py ...` forked from the server where it can be
    (started with none of Popen's options for the child: no new session, user or umask)."""

    forked: Child | None = None

    def _execute_child(self, args, executable, preexec_fn, close_fds, pass_fds, cwd, env,
                       startupinfo, creationflags, shell, p2cread, p2cwrite, c2pread, c2pwrite,
                       errread, errwrite, restore_signals, gid, gids, uid, umask,
                       start_new_session, process_group):  # fmt: skip
        argv = None if isinstance(args, (str, bytes, os.PathLike)) else list(map(os.fsdecode, args))
        options = (executable, preexec_fn, pass_fds, shell, gid, gids, uid, start_new_session)
        plain = not any(options) and close_fds and restore_signals and umask < 0
        plain = plain and process_group in (None, -1)
        if not (argv and plain and SERVER.takes(argv, dict(os.environ if env is None else env))):
            return super()._execute_child(
                args, executable, preexec_fn, close_fds, pass_fds, cwd, env, startupinfo,
                creationflags, shell, p2cread, p2cwrite, c2pread, c2pwrite, errread, errwrite,
                restore_signals, gid, gids, uid, umask, start_new_session, process_group,
            )  # fmt: skip
        given = [
            number if fd == -1 else fd for number, fd in enumerate((p2cread, c2pwrite, errwrite))
        ]
        try:
            where = os.getcwd() if cwd is None else os.fspath(cwd)
            self.forked = SERVER.start(
                argv, dict(os.environ if env is None else env), where, None, given
            )
            self.pid = self.forked.pid
            self._child_created = True
        finally:
            self._close_pipe_fds(p2cread, p2cwrite, c2pread, c2pwrite, errread, errwrite)

    def _try_wait(self, wait_flags):
        if self.forked is None:
            return super()._try_wait(wait_flags)
        status = self.forked.poll(0 if wait_flags & os.WNOHANG else None)
        return (0, 0) if status is None else (self.pid, status)

    def _internal_poll(self, _deadstate=None, **ignored):
        if self.forked is None:
            return super()._internal_poll(_deadstate)
        if self.returncode is None:
            status = self.forked.poll(0)
            if status is not None:
                self._handle_exitstatus(status)
        return self.returncode


def run(
    argv: list[str], *, input: str | None, env: dict, timeout: float, cwd
) -> subprocess.CompletedProcess:
    """subprocess.run(argv, input=input, capture_output=True, text=True, env=env,
    timeout=timeout, cwd=cwd), the agent forked from the server where it can be."""
    stdin = None if input is None else subprocess.PIPE
    pipe = subprocess.PIPE
    with Popen(argv, stdin=stdin, stdout=pipe, stderr=pipe, text=True, env=env, cwd=cwd) as process:
        try:
            out, err = process.communicate(input, timeout=timeout)
        except subprocess.TimeoutExpired:  # as subprocess.run does
            process.kill()
            process.wait()
            raise
    return subprocess.CompletedProcess(argv, process.returncode, out, err)


class Lazy:
    """The server, started at the first agent it can fork (its environment is given by
    conftest, as the agents' own)."""

    def __init__(self):
        self.server: Server | None = None
        self.env: dict[str, str] | None = None

    def takes(self, argv: list[str], env: dict[str, str]) -> bool:
        """Whether a child of the server is exactly what argv started with env would be; the
        server starts at the first such agent."""
        if not hasattr(os, "pidfd_open") or self.env is None:
            return False
        python, *rest = argv
        if not rest or Path(rest[0]).name != "agent.py":
            return False
        if os.path.abspath(python) != os.path.abspath(sys.executable):
            return False  # a venv's python links to another, which has not the venv's packages
        keys = {key for key in {*env, *self.env} if key.startswith(READ_AT_START)}
        if any(env.get(key) != self.env.get(key) for key in keys):
            return False
        if self.server is None:
            self.server = Server(self.env)
        return True

    def start(self, *args, **kwargs) -> Child:
        return self.server.start(*args, **kwargs)

    def stop(self) -> None:
        if self.server:
            self.server.stop()
            self.server = None


SERVER = Lazy()
