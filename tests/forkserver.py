"""A Python that has imported the model SDK once and forks an agent for each test that asks.

Every agent the suite starts spends half a second of CPU importing openai, and the suite starts
hundreds, most of them on a terminal, where the process is the point. This server imports the
SDK once (and nothing of the agent's), then for each request forks a child that is the agent:
its own process, with the test's arguments, environment, folder and streams, on a new
pseudo-terminal of its own (session leader, controlling terminal) or on the test's pipes; it
runs agent.py as `python agent.py ARGS` would, and ends as that would (the exit code, a signal,
Python's own shutdown). forked_agents.py is the tests' side, and sends here only what this
child reproduces exactly; test_forked_agents.py compares such a child with a fresh process.

Run as `python forkserver.py SOCKET`: it prints "ready" when it listens, and ends when its
standard input closes (the pytest worker that started it is gone).

The protocol, over a Unix socket, one connection for each agent: the test sends one JSON line
{"argv": [script, *args], "env": {...}, "cwd": "...", "rows_columns": [24, 80] or null} with
the three file descriptors of its pipes (stdin, stdout, stderr) unless a terminal is asked for.
The server answers {"pid": N} (with the terminal's master side), then {"status": S}, the
child's wait status, when it has ended.
"""

import fcntl
import gc
import io
import json
import os
import pty
import runpy
import selectors
import socket
import struct
import sys
import termios

# What an agent imports of the SDK when it makes its client and reads a reply.
import openai  # noqa: F401
import openai.lib.streaming.chat  # noqa: F401
import openai.types.chat  # noqa: F401

CHILD = 0
# Whether Python started with its standard streams unbuffered (-u, PYTHONUNBUFFERED), as every
# child does: the server's environment is theirs in what Python reads as it starts.
UNBUFFERED = sys.stdout.write_through


class Server:
    def __init__(self, path: str):
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(path)
        self.listener.listen(16)
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.listener, selectors.EVENT_READ, "accept")
        self.selector.register(sys.stdin, selectors.EVENT_READ, "parent")
        self.children: dict[int, tuple[int, socket.socket]] = {}  # pidfd: (pid, connection)

    def serve(self) -> None:
        print("ready", flush=True)
        while True:
            for key, _ in self.selector.select():
                if key.data == "parent":
                    if not os.read(sys.stdin.fileno(), 1):
                        return
                elif key.data == "accept":
                    connection, _ = self.listener.accept()
                    self.start(connection)
                else:
                    self.report(key.fd)

    def start(self, connection: socket.socket) -> None:
        data, fds, _, _ = socket.recv_fds(connection, 1 << 20, 3)
        while not data.endswith(b"\n"):
            data += connection.recv(1 << 20)
        request = json.loads(data)
        rows_columns = request["rows_columns"]
        if rows_columns:
            pid, master = pty.fork()
        else:
            pid, master = os.fork(), None
        if pid == CHILD:
            self.close_all(connection)
            if rows_columns:
                set_window_size(0, rows_columns)
            else:
                for number, fd in enumerate(fds):
                    os.dup2(fd, number)
            for fd in fds:
                os.close(fd)
            run_agent(request["argv"], request["env"], request["cwd"])  # never returns
        for fd in fds:
            os.close(fd)
        answer = json.dumps({"pid": pid}).encode() + b"\n"
        if master is None:
            socket.send_fds(connection, [answer], [])
        else:  # the size set, as pexpect sets it, before the test has the terminal
            set_window_size(master, rows_columns)
            socket.send_fds(connection, [answer], [master])
            os.close(master)
        pidfd = os.pidfd_open(pid)
        self.children[pidfd] = (pid, connection)
        self.selector.register(pidfd, selectors.EVENT_READ, "child")

    def report(self, pidfd: int) -> None:
        pid, connection = self.children.pop(pidfd)
        self.selector.unregister(pidfd)
        os.close(pidfd)
        _, status = os.waitpid(pid, 0)
        try:
            connection.sendall(json.dumps({"status": status}).encode() + b"\n")
        except OSError:
            pass  # the test stopped listening: the child is reaped all the same
        connection.close()

    def close_all(self, connection: socket.socket) -> None:
        """In a child: what a new process would not have (exec closes these)."""
        for pidfd, (_, other) in self.children.items():
            os.close(pidfd)
            other.close()
        self.selector.close()
        self.listener.close()
        connection.close()


def set_window_size(fd: int, rows_columns: list[int]) -> None:
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", *rows_columns, 0, 0))


def run_agent(argv: list[str], env: dict[str, str], cwd: str) -> None:
    """Become `python SCRIPT ARGS` started with env in cwd; exit as that would."""
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    script = argv[0]
    sys.argv = list(argv)
    sys.path[0] = os.path.dirname(os.path.abspath(script))
    sys.stdin, sys.stdout, sys.stderr = (
        standard_stream(0, "<stdin>", "r", sys.stdin),
        standard_stream(1, "<stdout>", "w", sys.stdout),
        standard_stream(2, "<stderr>", "w", sys.stderr),
    )
    sys.__stdin__, sys.__stdout__, sys.__stderr__ = sys.stdin, sys.stdout, sys.stderr
    runpy.run_path(script, run_name="__main__")
    sys.exit(0)  # the script ended without sys.exit: as python does then


def standard_stream(fd: int, name: str, mode: str, like: io.TextIOWrapper) -> io.TextIOWrapper:
    """The stream Python makes for fd at start-up (Python/pylifecycle.c, create_stdio): stdin
    always buffered, stdout and stderr unbuffered under PYTHONUNBUFFERED; when buffered,
    line-buffered on a terminal (stderr always); the same environment's encoding and errors."""
    buffered = not UNBUFFERED
    binary = open(fd, mode + "b", buffering=-1 if buffered or mode == "r" else 0, closefd=False)
    raw = getattr(binary, "raw", binary)
    raw.name = name
    stream = io.TextIOWrapper(
        binary,
        encoding=like.encoding,
        errors=like.errors,
        newline="\n",
        line_buffering=buffered and (fd == 2 or raw.isatty()),
        write_through=not buffered,
    )
    stream.mode = mode
    return stream


if __name__ == "__main__":
    gc.freeze()  # the SDK's objects stay shared with each child, not copied by its collector
    Server(sys.argv[1]).serve()
