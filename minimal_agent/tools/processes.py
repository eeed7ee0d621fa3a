"""Processes: run_shell's command in a process group of its own, with an environment that
keeps secrets out, killed with everything it started (also what left its group) at the time-out
or when the agent stops; its output read as it comes (shown live on a terminal) but only its two
ends kept; signals held while that is set up; the bubblewrap sandbox (--sandbox).

Nothing POSIX-only is touched at import, so the agent starts on Windows too; signal and
threading are imported where they are used, so `agent.py --help` starts without them.
"""

from __future__ import annotations

import codecs
import contextlib
import os
import re
import sys
import time
from collections.abc import Sequence

from minimal_agent.common import files
from minimal_agent.common.errors import AgentError, holds_key
from minimal_agent.common.text import visible

ON_WINDOWS = sys.platform == "win32"  # cmd.exe and taskkill there, /bin/sh and killpg elsewhere
ON_LINUX = sys.platform == "linux"  # /proc and a child subreaper: escaped children are found
SHELL_NAME = (  # run_shell's parameter description: the model should know which shell it gets
    "The command line, run by cmd.exe (Windows: dir, type, python; not ls, cat)."
    if ON_WINDOWS
    else "The command line, run by /bin/sh."
)
# A variable is kept from commands when its name (in any case) holds one of these, or its value
# is a URL with a password (postgres://user:pw@host/db); PAT only as a word (GH_PAT, not
# PYTHONPATH), AUTH not as in GIT_AUTHOR_NAME; the shell's own PWD and OLDPWD are no secrets.
SECRET_NAME = re.compile(
    r"KEY|SECRET|TOKEN|PASS|PWD|CRED|COOKIE|SESSION|AUTH(?!OR(?:S|_|$))|(?:^|_)PAT(?:_|$)"
)
NO_SECRETS = ("PWD", "OLDPWD")
PASSWORD_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^/?#@\s:]*:[^/?#@\s]+@")
SANDBOX_ENV = ("PATH", "HOME", "LANG", "TERM", "TZ", "USER")  # and LC_*: all a sandbox gets
SYSTEM_FOLDERS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc")


def run_command(command: str, ws) -> tuple[int | None, str]:
    """Run command in ws.folder (under bubblewrap with ws.sandbox) and return its exit code
    and output, or None and the output so far when it ran past ws.timeout. Everything it
    started is gone when this returns; the output says so when something could not be killed."""
    import threading  # imported here, not at the top, to keep --help's start-up fast

    # A Ctrl-C or SIGTERM acting between the start and the kill being in place would leave the
    # command running after the agent exits: signals wait, except while the command is awaited.
    with output_told(ws.events) as show, signals_held() as let_through:
        before = known_descendants() if ON_LINUX else set()  # the agent's, not the command's
        output = Output(files.keep(ws.max_result_chars) - 100, show)  # room for the status line
        proc = start_command(command, ws)
        try:
            reader = threading.Thread(target=output.read, args=(proc.stdout,), daemon=True)
            reader.start()
            with let_through():  # the pipe closes when the command and all it started end
                reader.join(ws.timeout)
            timed_out = reader.is_alive()
        finally:
            survivors = kill_everything(proc.pid, before)  # on time-out, on Ctrl-C, and leftovers
            reader.join(1)  # nothing holds the pipe any more: its end arrives at once
            proc.wait()
            if not reader.is_alive():  # else closing would wait for the blocked reader
                proc.stdout.close()
    text = output.text()
    if survivors:
        text += ("\n" if text and not text.endswith("\n") else "") + survivors
    return (None if timed_out else proc.returncode), text


@contextlib.contextmanager
def output_told(events):
    """A command's run told to events (minimal_agent/core/events.py): its start, its output as it
    arrives (from the thread reading it: the function yielded), its end."""
    events.emit("command_started")
    try:
        yield lambda piece: events.emit("command_output", text=piece)
    finally:
        events.emit("command_ended")


class Output:
    """A command's output as it is read: only its two ends kept (half characters each), so
    endless output cannot fill memory, and each piece handed to show (the live display)."""

    def __init__(self, half: int, show=None) -> None:
        import threading

        self.half, self.show = half, show
        self.head, self.tail, self.total = "", "", 0
        self.lock = threading.Lock()  # text() may be called while the reader still reads

    def read(self, stream) -> None:
        """Read stream to its end (in a thread of its own)."""
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        while True:
            chunk = stream.read1(65536)
            piece = text = decoder.decode(chunk, final=not chunk)
            with self.lock:
                self.total += len(text)
                if len(self.head) < self.half:
                    room = self.half - len(self.head)
                    self.head, text = self.head + text[:room], text[room:]
                self.tail = (self.tail + text)[-self.half :]
            if self.show and piece:
                self.show(piece)
            if not chunk:
                return

    def text(self) -> str:
        with self.lock:
            left_out = self.total - len(self.head) - len(self.tail)
            return files.joined(self.head, self.tail, left_out, "characters")


def start_command(command: str, ws):  # -> subprocess.Popen
    """Start command in ws.folder in a process group of its own, so that one kill reaches all
    it starts; stdin closed, stdout and stderr into one pipe, secrets kept from its
    environment. With ws.sandbox, under bwrap."""
    import subprocess

    streams = {"stdin": subprocess.DEVNULL, "stdout": subprocess.PIPE, "stderr": subprocess.STDOUT}
    folder, sandbox, env = ws.folder, ws.sandbox, command_environment(ws)
    if ON_WINDOWS:  # cmd.exe; a console's Ctrl-C then reaches only the agent, which kills the tree
        flags = subprocess.CREATE_NEW_PROCESS_GROUP
        return subprocess.Popen(
            command, shell=True, cwd=folder, creationflags=flags, env=env, **streams
        )
    if ON_LINUX:
        become_subreaper()
    if sandbox:
        limits, hidden = ws.sandbox_limits, ws.private
        argv = bwrap_command(folder, "/bin/sh", "-c", command, limits=limits, hidden=hidden)
        return subprocess.Popen(argv, cwd=folder, start_new_session=True, env=env, **streams)
    return subprocess.Popen(
        command, shell=True, cwd=folder, start_new_session=True, env=env, **streams
    )


def command_environment(ws, sandboxed: bool | None = None) -> dict[str, str]:
    """The agent's environment less every variable that looks secret (secret_looking), as
    Codex keeps out names with KEY, SECRET or TOKEN; in the sandbox (sandboxed, by default
    ws.sandbox; a hook never is), only PATH, HOME, LANG, LC_*, TERM, TZ and USER.
    ws.pass_env's names (LLM_PASS_ENV) pass anyway; a value holding the agent's own key (ws.key,
    and LLM_API_KEY's value) never does, by any name."""
    keys = {ws.key, os.environ.get("LLM_API_KEY", "")} - {""}
    sandboxed = ws.sandbox if sandboxed is None else sandboxed

    def allowed(name: str, value: str) -> bool:
        if holds_key(value, keys):
            return False
        if name in ws.pass_env:
            return True
        if sandboxed:
            in_list = name in SANDBOX_ENV or name.startswith("LC_")
            return in_list and not PASSWORD_URL.search(value)
        return not secret_looking(name, value)

    return {name: value for name, value in os.environ.items() if allowed(name, value)}


def secret_looking(name: str, value: str) -> bool:
    """Whether a variable looks like a secret: its name holds KEY, SECRET, TOKEN, PASS, PWD,
    CRED, COOKIE, SESSION, AUTH or the word PAT (any case), or its value holds a URL with a
    password."""
    named = SECRET_NAME.search(name.upper()) and name.upper() not in NO_SECRETS
    return bool(named or PASSWORD_URL.search(value))


def pass_env_names(api_key: str, pass_env: str) -> frozenset[str]:
    """LLM_PASS_ENV's names (comma-separated), for a workspace's pass_env; a name that holds
    the agent's key (from config.env or the environment) is a mistake."""
    names = frozenset(name.strip() for name in pass_env.split(",") if name.strip())
    for name in sorted(names):
        if name == "LLM_API_KEY" or holds_key(os.environ.get(name, ""), {api_key} - {""}):
            raise AgentError(
                f"LLM_PASS_ENV names {name}, which holds the agent's own key, and that never "
                "reaches a command: remove it from LLM_PASS_ENV"
            )
    return names


SANDBOX_LIMITS = {"processes": 1024, "memory": 4 * 2**30, "tmp": 2**30}  # LLM_SANDBOX_LIMITS
SIZE_UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


def sandbox_limits(setting: str) -> dict[str, int]:
    """LLM_SANDBOX_LIMITS (such as `processes=256,memory=2G,tmp=512M`) over SANDBOX_LIMITS:
    how many processes a sandboxed command may have at once, how much memory each may write to
    (bytes; K, M, G, T), and how large its /tmp may grow."""
    limits = dict(SANDBOX_LIMITS)
    for part in filter(None, (part.strip() for part in setting.split(","))):
        name, _, value = (text.strip() for text in part.partition("="))
        number, unit = value.rstrip("kKmMgGtT"), value[len(value.rstrip("kKmMgGtT")) :].upper()
        if name not in limits or not number.isdigit() or int(number) == 0 or len(unit) > 1:
            raise AgentError(
                f"LLM_SANDBOX_LIMITS has {part!r}: write NAME=VALUE pairs, comma-separated, the "
                "names processes, memory and tmp, the sizes in bytes or with K, M, G (such as "
                "processes=256,memory=2G,tmp=512M)"
            )
        limits[name] = int(number) * (1 if name == "processes" else SIZE_UNITS[unit])
    return limits


def bwrap_command(
    folder: str, *command: str, limits: dict = SANDBOX_LIMITS, hidden: Sequence[str] = ()
) -> list[str]:
    """command under bubblewrap, in a world of its own: the system's folders that programs need
    (read-only), folder (writable, at its real path, so paths look the same), a private /tmp of
    limits["tmp"] bytes, its own /dev (read-only but for a /dev/shm of limits["tmp"] bytes too)
    and /proc; nothing else of the host (no home folder, no /run, none of its unix sockets),
    the rest read-only, and the paths of hidden that lie in folder (the user's own:
    Workspace.private) covered by an empty read-only folder or file (a missing one, its nearest
    folder that exists, so that no command plants it; not folder).
    Its own user namespace with no capabilities, even for root (the same uid and gid inside),
    its own network (not even the host's 127.0.0.1), PID and IPC namespaces, a session of its
    own (no terminal to type into), killed if the agent dies; at most limits["processes"]
    processes, each writing to at most limits["memory"] bytes (prlimit, inside, so the count
    is of the sandbox's own processes)."""
    system = []
    for path in SYSTEM_FOLDERS:
        if os.path.islink(path):  # /bin -> usr/bin where /usr is merged
            system += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            system += ["--ro-bind", path, path]
    covered, paths = [], set()
    for path in hidden:
        while not os.path.lexists(path):  # not made yet: none may make it, so cover its folder
            path = os.path.dirname(path)
        if files.inside(folder, path) and path != folder:
            paths.add(path)
    for path in sorted(paths):
        if not any(files.inside(other, path) and other != path for other in paths):
            # one inside another (a transcript in the sessions folder) is covered with it
            cover = ["--tmpfs", path] if os.path.isdir(path) else ["--ro-bind", "/dev/null", path]
            covered += [*cover, "--remount-ro", path]
    user = ["--unshare-user", "--uid", str(os.getuid()), "--gid", str(os.getgid())]
    limited = ["prlimit", f"--nproc={limits['processes']}", f"--data={limits['memory']}", "--"]
    return [
        "bwrap", *user, "--cap-drop", "ALL", *system, "--dev", "/dev", "--proc", "/proc",
        "--size", str(limits["tmp"]), "--tmpfs", "/tmp",
        # /dev is a memory filesystem without a limit: its shm bounded as /tmp, the rest
        # read-only (writing to a device, /dev/null say, still works)
        "--size", str(limits["tmp"]), "--tmpfs", "/dev/shm", "--remount-ro", "/dev",
        "--bind", folder, folder,  # after --tmpfs /tmp, so a folder inside /tmp stays visible
        *covered,  # after the folder's bind, over it
        "--remount-ro", "/",  # the bare root: writes beside the folder fail instead of vanishing
        "--chdir", folder, "--unshare-net", "--unshare-pid", "--unshare-ipc", "--new-session",
        "--die-with-parent", "--", *limited, *command,
    ]  # fmt: skip


def kill_everything(pid: int, before: set) -> str:
    """Kill the command and everything it started: its process group (start_new_session made
    the group id the pid), on Windows its process tree; on Linux also whatever left the group
    or its session (the agent is their subreaper, so they stay its descendants). "" when all is
    gone, else a line saying what could not be killed."""
    if ON_WINDOWS:
        import subprocess

        kill = ["taskkill", "/F", "/T", "/PID", str(pid)]
        subprocess.run(kill, stdin=subprocess.DEVNULL, capture_output=True)  # gone already: fine
        return ""
    import signal

    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)  # under bwrap, --die-with-parent takes its sandbox along
    if not ON_LINUX:
        return ""
    deadline = time.monotonic() + 0.5  # each round kills what forked meanwhile
    while True:
        found = {p: f for p, f in descendants().items() if (p, f.started) not in before}
        alive = [p for p, f in found.items() if f.state != "Z"]
        for child, facts in found.items():  # the ones that became the agent's: reap them
            if facts.state == "Z" and facts.parent == os.getpid() and child != pid:
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(child, os.WNOHANG)
        if not alive or time.monotonic() > deadline:
            break
        for child in alive:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(child, signal.SIGKILL)
        time.sleep(0.005)
    if not alive:
        return ""
    named = ", ".join(f"{found[p].name} (pid {p})" for p in alive[:5])
    return f"[{len(alive)} process(es) it started could not be killed and may still run: {named}]\n"


class Process:
    """What /proc/PID/stat says of a process: its parent, state, start time and name."""

    def __init__(self, stat: bytes) -> None:
        name, rest = stat.rsplit(b")", 1)
        fields = rest.split()
        self.name = visible(name.split(b"(", 1)[1].decode(errors="replace"))
        self.state, self.parent, self.started = fields[0].decode(), int(fields[1]), fields[19]


def descendants() -> dict:  # -> {pid: Process}
    """The agent's descendants, found in /proc (Linux)."""
    children: dict[int, list[int]] = {}
    facts = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as file:
                process = Process(file.read())
        except (OSError, IndexError, ValueError):  # gone meanwhile
            continue
        facts[int(entry.name)] = process
        children.setdefault(process.parent, []).append(int(entry.name))
    found, waiting = {}, list(children.get(os.getpid(), []))
    while waiting:
        pid = waiting.pop()
        found[pid] = facts[pid]
        waiting += children.get(pid, [])
    return found


def known_descendants() -> set[tuple[int, bytes]]:
    """The agent's descendants as (pid, start time): a pid used again is another process."""
    return {(pid, process.started) for pid, process in descendants().items()}


def become_subreaper() -> None:
    """Linux: the command's orphans become the agent's children instead of init's, so that
    descendants() finds a child that left its group or session (prctl PR_SET_CHILD_SUBREAPER)."""
    import ctypes

    ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)


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


class Terminated(SystemExit):
    """The agent's exit on SIGTERM or SIGHUP; a tool's own sys.exit() is not one."""


ENDING: list[int] = []  # the signal that is ending the run, once one is
SENT_AGAIN: list[int] = []  # that signal, while it is sent again (see send_again_if_lost)
UNRAISABLE_HOOKS: list = []  # sys.unraisablehook as it was before the run
hook_running = False  # send_again_if_lost has not returned yet


def interrupted(signum, frame) -> None:
    """Ctrl-C's handler during a run: the first one raises KeyboardInterrupt (see
    exit_on_termination)."""
    if ends_the_run(signum):
        raise KeyboardInterrupt


def terminated(signum, frame) -> None:
    if ends_the_run(signum):
        raise Terminated(128 + signum)


def ends_the_run(signum: int) -> bool:
    """Whether a signal is the first of the run, or that first one sent again."""
    if ENDING and SENT_AGAIN != [signum]:
        return False
    ENDING[:] = [signum]
    SENT_AGAIN.clear()
    return True


def send_again_if_lost(unraisable) -> None:
    """sys.unraisablehook during a run. Python runs a signal's handler wherever it is, and where
    that is a weakref's callback or a __del__ (an import lock's, the garbage collector's), it
    prints the exception the handler raised ("Exception ignored in ...") and goes on: the
    Ctrl-C or SIGTERM ending the run would be lost, and a traceback shown. Its signal is sent
    again instead, by a thread, once this has returned: its handler then runs where it can
    raise. Any other exception goes to the hook before."""
    global hook_running
    import _thread  # threading's Thread.start waits for the thread: the signal would come here
    import threading

    if not (isinstance(unraisable.exc_value, (KeyboardInterrupt, Terminated)) and ENDING):
        return UNRAISABLE_HOOKS[-1](unraisable)
    hook_running = True
    try:
        _thread.start_new_thread(send_when_returned, (threading.main_thread().ident, ENDING[0]))
    except RuntimeError:  # no new thread while Python shuts down
        hook_running = False
        return UNRAISABLE_HOOKS[-1](unraisable)
    hook_running = False  # last: Python handles no signal between this and the return


def send_when_returned(main_thread: int, signum: int) -> None:
    import signal

    while hook_running:
        time.sleep(0.001)
    SENT_AGAIN.append(signum)  # only now may its handler act again: not inside the hook
    if hasattr(signal, "pthread_kill"):  # to the main thread: a wait it is in is cut short
        signal.pthread_kill(main_thread, signum)
    else:  # Windows: Ctrl-C's event wakes the main thread's waits
        signal.raise_signal(signum)


def exit_on_termination() -> None:
    """Terminated (kill, a closed terminal): unwind like Ctrl-C, so run_shell kills its
    command. A signal the user ignores (nohup) stays ignored. The first signal, Ctrl-C's too,
    ends the run; the ones that follow it (a burst of Ctrl-C, a SIGTERM after it) are let go,
    so that the unwinding it began (the command killed, the undo walk, the records closed, the
    end record) runs to its end and the exit code is the first one's."""
    import signal

    ENDING.clear()
    SENT_AGAIN.clear()
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, interrupted)
    for number in termination_signals():
        if signal.getsignal(number) == signal.SIG_DFL:
            signal.signal(number, terminated)
    if sys.unraisablehook is not send_again_if_lost:
        UNRAISABLE_HOOKS.append(sys.unraisablehook)
        sys.unraisablehook = send_again_if_lost


def ignore_late_signals() -> None:
    """The run is over: a signal now would find Python giving its handlers up on the way out
    and kill the process by the signal, with no exit code and the end record perhaps unsaid."""
    import signal

    for number in (signal.SIGINT, *termination_signals()):
        if signal.getsignal(number) != signal.SIG_IGN:
            signal.signal(number, signal.SIG_IGN)


def ctrl_c_given_back() -> None:
    """The run is over, and the agent was called from a console, a debugger or a test that
    goes on: Ctrl-C raises KeyboardInterrupt there again."""
    import signal

    if signal.getsignal(signal.SIGINT) is interrupted:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if sys.unraisablehook is send_again_if_lost:
        sys.unraisablehook = UNRAISABLE_HOOKS.pop()
    ENDING.clear()
    SENT_AGAIN.clear()


def interrupt_handled() -> None:
    """A Ctrl-C that ended a --chat turn only: the next one acts again."""
    ENDING.clear()


def check_sandbox(folder: str, limits: dict = SANDBOX_LIMITS, hidden: Sequence[str] = ()) -> None:
    """--sandbox: refuse to start, in one line, where commands cannot run sandboxed, or would
    keep a capability there (root's, where bubblewrap cannot drop them); never run them
    unsandboxed instead. A probe runs with the options commands get (see bwrap_command)."""
    import shutil
    import subprocess

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
    if not shutil.which("prlimit"):
        raise AgentError(
            "--sandbox needs the prlimit command (of util-linux) to limit processes and memory, "
            "and it is not installed: install util-linux"
        )
    folder = os.path.realpath(folder)
    probe = subprocess.run(
        bwrap_command(folder, "cat", "/proc/self/status", limits=limits, hidden=hidden),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
    )
    if probe.returncode != 0:
        said = (probe.stderr.strip().splitlines() or [f"exit code {probe.returncode}"])[-1]
        if "Unknown option" in said:  # --size came with bubblewrap 0.8
            raise AgentError(
                f"--sandbox: this bubblewrap is too old ({said}): install bubblewrap 0.8 or later"
            )
        raise AgentError(
            f"--sandbox: bubblewrap cannot make its sandbox here ({said}): it needs unprivileged "
            "user namespaces, which some containers and systems turn off (on Ubuntu 23.10 and "
            "later: sudo sysctl kernel.apparmor_restrict_unprivileged_userns=0; see the README)"
        )
    status = probe.stdout.splitlines()
    capabilities = [line.split()[-1] for line in status if line.startswith("CapEff:")]
    if capabilities != ["0000000000000000"]:
        raise AgentError(
            f"--sandbox: commands would keep capabilities inside bubblewrap (CapEff "
            f"{' '.join(capabilities) or 'not shown'}), so the sandbox would not hold: update "
            "bubblewrap, or run the agent as an ordinary user"
        )
