"""The terminal display: step lines, the waiting counter, streamed thinking and text, the final
answer, the approval prompt and the --chat prompt.

Everything but the final answer goes to stderr, so stdout stays clean for pipes.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time


def say(text: str) -> None:
    """One line on stderr (wiping the "waiting" counter first on a terminal)."""
    clear = "\r\033[K" if sys.stderr.isatty() else ""
    print(clear + text, file=sys.stderr, flush=True)


def show_call(step: int, call: dict) -> None:
    say(f"[{step}] {call['function']['name']}({short_arguments(call['function']['arguments'])})")


def show_result(result: str) -> None:
    say(f"      -> {one_line(result)}")


def show_answer(text: str, streamed: bool) -> None:
    """The final answer on stdout, exactly, for pipes and files (an empty one leaves stdout
    empty). On a terminal it is marked as the answer, and not printed a second time when it
    has just been streamed there."""
    on_terminal = sys.stdout.isatty() and sys.stderr.isatty()
    if text and on_terminal:
        say("^ the answer" if streamed else "answer:")
        if streamed:
            return
    print(text, end="\n" if text else "", flush=True)  # each answer as it comes, into a pipe too


def short_arguments(arguments: str) -> str:
    """A call's arguments as key=value pairs, each shortened; anything else shortened as it is."""
    try:
        args = json.loads(arguments or "{}")
    except json.JSONDecodeError:
        return one_line(arguments, 80)
    if not isinstance(args, dict):
        return one_line(arguments, 80)
    return ", ".join(f"{key}={one_line(repr(value), 60)}" for key, value in args.items())


def one_line(text: object, width: int = 100) -> str:
    """text on one line, shortened to width with "...", control characters as escapes."""
    flat = visible(" ".join(str(text).split()))
    return flat if len(flat) <= width else flat[: width - 3] + "..."


def visible(text: str) -> str:
    """Control characters as escapes (ESC as \\x1b): they would act on the terminal."""
    return "".join(c if c.isprintable() or c in "\n\t" else repr(c)[1:-1] for c in text)


def colour() -> bool:
    """Colour only on a terminal, and not when NO_COLOR is set (no-color.org)."""
    return sys.stderr.isatty() and not os.environ.get("NO_COLOR")


def approved(ws, command: str) -> bool:
    """Ask the user on the terminal: y runs it, a runs it and every later command of the
    session (ws.approve_all), anything else does not. Without a terminal nobody can answer."""
    if ws.approve_all:
        return True
    if not sys.stdin.isatty():
        say("  not run: stdin is not a terminal, so nobody can approve it (start with --yes)")
        raise PermissionError(
            "the command was not run: it needs the user's approval and nobody can give it "
            "here (the user can restart the agent with --yes)"
        )
    say(f"  $ {visible(command)}")  # escapes shown, so no command can disguise itself
    where = " in the sandbox" if ws.sandbox else ""
    sys.stderr.write(f"  Run it{where}? [y/N/a] (a: this and every later one this session) ")
    sys.stderr.flush()
    answer = sys.stdin.readline().strip().lower()  # "" at end of input: no
    if answer in ("a", "all", "always"):
        ws.approve_all = True
        say("  every later command of this session runs without asking")
    return ws.approve_all or answer in ("y", "yes")


def chat_hint() -> None:
    """How a --chat session goes on and ends, said once at its start on a terminal."""
    if sys.stdin.isatty():
        say(
            "chat: type a message after each '> ' (/compact shrinks the conversation); an empty "
            "line or Ctrl-D ends the session"
        )


def next_message() -> str:
    """The next --chat message: typed after a "> " prompt on a terminal, else the next line of
    stdin. An empty line or the end of input gives "", which ends the session."""
    if sys.stdin.isatty():
        sys.stderr.write("> ")
        sys.stderr.flush()
    return sys.stdin.readline().strip()


@contextlib.contextmanager
def waiting(step: int, stream: bool = False):
    """While a request runs: on a terminal, a line counting the seconds (never in a pipe, a
    log, or under a debugger, whose prompt it would overwrite). With stream, yields the function
    that shows the reply's thinking and text as they arrive, on stderr (the counting line gives
    way to them); without, yields None."""
    animate = sys.stderr.isatty() and not debugger_attached()
    stop_counting = count_seconds(step) if animate else lambda: None
    shown = {"kind": None}  # what the last piece shown was: "thinking", "text" or None

    def show(kind: str, text: str) -> None:
        stop_counting()
        if kind != shown["kind"]:
            end_piece(shown["kind"])
            begin_piece(kind, step)
            shown["kind"] = kind
        sys.stderr.write(visible(text))
        sys.stderr.flush()

    try:
        yield show if stream else None
    finally:
        stop_counting()
        end_piece(shown["kind"])


def debugger_attached() -> bool:
    """A debugger is attached: a trace function is set (pdb, and IDE debuggers up to Python
    3.11), or a tool holds sys.monitoring's debugger slot (debugpy from Python 3.12)."""
    monitoring = getattr(sys, "monitoring", None)  # Python 3.12 and later
    in_slot = monitoring is not None and monitoring.get_tool(monitoring.DEBUGGER_ID) is not None
    return sys.gettrace() is not None or in_slot


def count_seconds(step: int):  # -> a function that stops the count and wipes its line
    """Write "[step] waiting for the model... N s" on stderr, updated every second."""
    import threading  # here, not at the top, to keep --help's start-up fast

    started, done, lock = time.monotonic(), threading.Event(), threading.Lock()

    def write(text: str) -> None:
        sys.stderr.write(text)
        sys.stderr.flush()

    def tick() -> None:
        while not done.wait(1):
            with lock:  # never a tick after the line is wiped
                if not done.is_set():
                    write(f"\r[{step}] waiting for the model... {time.monotonic() - started:.0f} s")

    def stop() -> None:
        with lock:
            if not done.is_set():
                done.set()
                write("\r\033[K")

    write(f"[{step}] waiting for the model...")
    threading.Thread(target=tick, daemon=True).start()
    return stop


def begin_piece(kind: str, step: int) -> None:
    """The label of streamed thinking (dimmed on a colour terminal) or text."""
    label = f"[{step}] thinking: " if kind == "thinking" else f"[{step}] "
    sys.stderr.write(("\033[2m" if kind == "thinking" and colour() else "") + label)


def end_piece(kind: str | None) -> None:
    if kind:
        sys.stderr.write(("\033[0m" if kind == "thinking" and colour() else "") + "\n")
        sys.stderr.flush()


@contextlib.contextmanager
def command_output(lines: int = 5):
    """While a command runs: on a terminal, the last lines of its output (dimmed, control
    characters escaped) and the seconds it has run, redrawn in place on stderr at most ten
    times a second and wiped when it ends, so the step lines stay as they were. Yields the
    function that takes the output as it arrives (from the thread reading it), or None where
    nothing is drawn (a pipe, a log, a debugger's prompt)."""
    if not sys.stderr.isatty() or debugger_attached():
        yield None
        return
    import threading  # here, not at the top, to keep --help's start-up fast

    started, done, lock = time.monotonic(), threading.Event(), threading.Lock()
    recent: list[str] = []  # the latest pieces of output, joined only to be drawn
    seen = {"drawn": 0, "second": -1, "changed": False}
    dim, plain = ("\033[2m", "\033[0m") if colour() else ("", "")

    def take(text: str) -> None:  # called for every piece: it must cost next to nothing
        recent.append(text)
        if len(recent) > 512:
            recent[:] = ["".join(recent)[-8192:]]
        seen["changed"] = True

    def back() -> str:  # to the start of the first line drawn, wiping it and all below
        return (f"\033[{seen['drawn'] - 1}F" if seen["drawn"] > 1 else "\r") + "\033[J"

    def draw() -> None:
        try:  # stderr's own width: stdout may be a file
            columns = os.get_terminal_size(sys.stderr.fileno()).columns
        except (OSError, ValueError):
            columns = 80
        width = max(columns - 9, 20)  # a line never wraps: the lines drawn are counted
        text = "".join(recent[-512:])[-8192:]
        tail = [line.rsplit("\r", 1)[-1] for line in text.rstrip("\n").split("\n")]
        shown = [f"      | {one_line(line, width)}" for line in tail[-lines:] if line.strip()]
        shown.append(f"      running {seen['second']} s")
        sys.stderr.write(back() + dim + "\n".join(shown) + plain)
        sys.stderr.flush()
        seen["drawn"] = len(shown)

    def redraw() -> None:
        while not done.wait(0.1):
            with lock:  # never a drawing after the wipe
                second = int(time.monotonic() - started)
                if not done.is_set() and (seen["changed"] or second != seen["second"]):
                    seen["changed"], seen["second"] = False, second
                    draw()

    threading.Thread(target=redraw, daemon=True).start()
    try:
        yield take
    finally:
        with lock:
            done.set()
            if seen["drawn"]:
                sys.stderr.write(back())
                sys.stderr.flush()
