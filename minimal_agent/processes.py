"""Processes: run_shell's command in a process group of its own, killed with everything it
started at the time-out or when the agent stops; its output read to the end but only its two
ends kept; signals held while that is set up; the bubblewrap sandbox (--sandbox).

Nothing POSIX-only is touched at import, so the agent starts on Windows too; signal and
threading are imported where they are used, so `agent.py --help` starts without them.
"""

from __future__ import annotations

import codecs
import contextlib
import os
import sys

from minimal_agent import files

ON_WINDOWS = sys.platform == "win32"  # cmd.exe and taskkill there, /bin/sh and killpg elsewhere
SHELL_NAME = (  # run_shell's parameter description: the model should know which shell it gets
    "The command line, run by cmd.exe (Windows: dir, type, python; not ls, cat)."
    if ON_WINDOWS
    else "The command line, run by /bin/sh."
)


def run_command(command: str, ws) -> tuple[int | None, str]:
    """Run command in ws.folder (under bubblewrap with ws.sandbox) and return its exit code
    and output, or None and the output so far when it ran past ws.timeout."""
    import threading  # imported here, not at the top, to keep --help's start-up fast

    captured: dict[str, str] = {}
    half = files.keep(ws.max_result_chars) - 100  # room for run_shell's status line
    # A Ctrl-C or SIGTERM acting between the start and the kill being in place would leave the
    # command running after the agent exits: signals wait, except while the command is awaited.
    with signals_held() as let_through:
        proc = start_command(command, ws.folder, ws.sandbox)
        try:
            reader = threading.Thread(
                target=keep_head_and_tail, args=(proc.stdout, captured, half), daemon=True
            )
            reader.start()
            with let_through():  # the pipe closes when the command and all it started end
                reader.join(ws.timeout)
            timed_out = reader.is_alive()
        finally:
            kill_process_group(proc.pid)  # on time-out, on Ctrl-C, and whatever it left running
            reader.join(5)
            proc.wait()
            proc.stdout.close()
    output = captured.get("text", "(output unavailable)")
    return (None if timed_out else proc.returncode), output


def start_command(command: str, folder: str, sandbox: bool):  # -> subprocess.Popen
    """Start command in folder in a process group of its own, so that one kill reaches all it
    starts; stdin closed, stdout and stderr into one pipe. With sandbox, under bwrap."""
    import subprocess

    streams = {"stdin": subprocess.DEVNULL, "stdout": subprocess.PIPE, "stderr": subprocess.STDOUT}
    if ON_WINDOWS:  # cmd.exe; a console's Ctrl-C then reaches only the agent, which kills the tree
        flags = subprocess.CREATE_NEW_PROCESS_GROUP
        return subprocess.Popen(command, shell=True, cwd=folder, creationflags=flags, **streams)
    if sandbox:
        argv = bwrap_command(folder, "/bin/sh", "-c", command)
        return subprocess.Popen(argv, cwd=folder, start_new_session=True, **streams)
    return subprocess.Popen(command, shell=True, cwd=folder, start_new_session=True, **streams)


def bwrap_command(folder: str, *command: str) -> list[str]:
    """command under bubblewrap: everything read-only but folder (at its real path, so paths
    look the same), a private empty /tmp, its own /dev and /proc, no network (its own network
    namespace: not even the host's 127.0.0.1), its own PID namespace, killed if the agent dies."""
    return [
        "bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp",
        "--bind", folder, folder,  # after --tmpfs /tmp, so a folder inside /tmp stays visible
        "--chdir", folder, "--unshare-net", "--unshare-pid", "--die-with-parent", "--", *command,
    ]  # fmt: skip


def kill_process_group(pid: int) -> None:
    """Kill the command and everything it started: its process group (start_new_session made
    the group id the pid), on Windows its process tree."""
    if ON_WINDOWS:
        import subprocess

        kill = ["taskkill", "/F", "/T", "/PID", str(pid)]
        subprocess.run(kill, stdin=subprocess.DEVNULL, capture_output=True)  # gone already: fine
        return
    import signal

    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)  # under bwrap, --die-with-parent takes its sandbox along


@contextlib.contextmanager
def signals_held():
    """Ctrl-C, SIGTERM and SIGHUP arriving in the block act only when it ends, or inside the
    `with let_through():` it yields. Only the main thread can set handlers; an ignored or
    default signal is left as it is."""
    import signal
    import threading

    arrived: list[int] = []
    handlers = {}
    if threading.current_thread() is threading.main_thread():
        handlers = {n: signal.getsignal(n) for n in (signal.SIGINT, *termination_signals())}
        handlers = {n: handler for n, handler in handlers.items() if callable(handler)}

    def hold() -> None:
        for number in handlers:
            signal.signal(number, lambda signum, frame: arrived.append(signum))

    def release() -> None:
        for number, handler in handlers.items():
            signal.signal(number, handler)
        while arrived:
            signal.raise_signal(arrived.pop(0))  # its handler runs here: KeyboardInterrupt, exit

    @contextlib.contextmanager
    def let_through():
        release()
        try:
            yield
        finally:
            hold()

    hold()
    try:
        yield let_through
    finally:
        release()


def termination_signals() -> list[int]:
    """SIGTERM, and SIGHUP where there is one (not on Windows)."""
    import signal

    return [getattr(signal, name) for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name)]


def exit_on_termination() -> None:
    """Terminated (kill, a closed terminal): unwind like Ctrl-C, so run_shell kills its
    command. A signal the user ignores (nohup) stays ignored."""
    import signal

    for number in termination_signals():
        if signal.getsignal(number) == signal.SIG_DFL:
            signal.signal(number, lambda signum, frame: sys.exit(128 + signum))


def keep_head_and_tail(stream, captured: dict, half: int) -> None:
    """Read a stream to its end keeping only its two ends (half characters each), so endless
    output cannot fill memory; captured["text"] is what was kept."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    head, tail, total = "", "", 0
    while True:
        chunk = stream.read1(65536)
        text = decoder.decode(chunk, final=not chunk)
        total += len(text)
        if len(head) < half:
            room = half - len(head)
            head, text = head + text[:room], text[room:]
        tail = (tail + text)[-half:]
        if not chunk:
            break
    captured["text"] = files.joined(head, tail, total - len(head) - len(tail), "characters")


def check_sandbox(folder: str) -> None:
    """--sandbox: refuse to start, in one line, where commands cannot run sandboxed; never run
    them unsandboxed instead."""
    import shutil
    import subprocess

    from model_client import AgentError

    if sys.platform == "darwin":
        raise AgentError(
            "--sandbox is not available on macOS yet (it needs Linux and bubblewrap; macOS would "
            "use Seatbelt, sandbox-exec): run without it and approve each command"
        )
    if ON_WINDOWS:
        raise AgentError(
            "--sandbox is not available on Windows yet (it needs Linux and bubblewrap): run "
            "without it and approve each command, or run the agent in WSL with --sandbox"
        )
    if not shutil.which("bwrap"):
        raise AgentError(
            "--sandbox needs bubblewrap (the bwrap command), which is not installed: install it "
            "(apt install bubblewrap, dnf install bubblewrap, pacman -S bubblewrap)"
        )
    folder = os.path.realpath(folder)
    probe = subprocess.run(
        bwrap_command(folder, "true"), stdin=subprocess.DEVNULL, capture_output=True, text=True
    )
    if probe.returncode != 0:
        said = (probe.stderr.strip().splitlines() or [f"exit code {probe.returncode}"])[-1]
        raise AgentError(
            f"--sandbox: bubblewrap cannot make its sandbox here ({said}): it needs unprivileged "
            "user namespaces, which some containers and systems turn off (on Ubuntu 23.10 and "
            "later: sudo sysctl kernel.apparmor_restrict_unprivileged_userns=0; see the README)"
        )
