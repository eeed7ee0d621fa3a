"""The terminal display: step lines, the waiting counter, streamed thinking and text, the final
answer, the approval prompt and the --chat hint (minimal_agent/prompt.py reads the messages).

Everything but the final answer goes to stderr, so stdout stays clean for pipes.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time


def say(text: str, paint: str = "") -> None:
    """One line on stderr (wiping the "waiting" counter first on a terminal), every control
    character in it shown as an escape: what it says may quote the model or the server.
    paint: the agent's own colour for the whole line (an SGR sequence), or ""."""
    clear = "\r\033[K" if sys.stderr.isatty() else ""
    line = f"{paint}{visible(text)}\033[0m" if paint else visible(text)
    print(clear + line, file=sys.stderr, flush=True)


def show_call(step: int, call: dict) -> None:
    name = one_line(call["function"]["name"], 60)  # the model's: any length, any character
    say(f"[{step}] {name}({short_arguments(call['function']['arguments'])})")


def show_result(result: str) -> None:
    say(f"      -> {one_line(result)}")


def show_answer(text: str, streamed: bool) -> None:
    """The final answer on stdout, exactly, for pipes and files (an empty one leaves stdout
    empty). On a terminal it is marked as the answer, shown with its control characters as
    escapes (its lines and tabs as they are), and not printed a second time when it has just
    been streamed there."""
    on_terminal = sys.stdout.isatty() and sys.stderr.isatty()
    if text and on_terminal:
        say("^ the answer" if streamed else "answer:")
        if streamed:
            return
    shown = visible(text, keep=ANSWER_LAYOUT) if sys.stdout.isatty() else text
    print(shown, end="\n" if text else "", flush=True)  # each answer as it comes, into a pipe too


def short_arguments(arguments: str) -> str:
    """A call's arguments as key=value pairs, each shortened; anything else shortened as it is."""
    try:
        args = json.loads(arguments or "{}")
    except json.JSONDecodeError:
        return one_line(arguments, 80)
    if not isinstance(args, dict):
        return one_line(arguments, 80)
    pairs = (f"{one_line(key, 40)}={one_line(repr(value), 60)}" for key, value in args.items())
    return ", ".join(pairs)


def one_line(text: object, width: int = 100) -> str:
    """text on one line, shortened to width with "...", control characters as escapes."""
    flat = visible(" ".join(str(text).split()))
    return flat if len(flat) <= width else flat[: width - 3] + "..."


ANSWER_LAYOUT = "\n\t"  # what visible() keeps of the model's thinking and answers


def visible(text: str, keep: str = "") -> str:
    """text with every character that would act on a terminal or hide what follows shown as an
    escape (ESC as \\x1b, a carriage return as \\r, U+202E as \\u202e): control characters
    (C0, DEL, C1), format characters (bidi and invisible ones), line and paragraph separators,
    whatever str.isprintable() refuses. The characters in keep stay as they are."""
    return "".join(c if c.isprintable() or c in keep else repr(c)[1:-1] for c in text)


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
    for line in command_lines(command, *screen_size()):
        say(line)
    where = " in the sandbox" if ws.sandbox else ""
    sys.stderr.write(f"  Run it{where}? [y/N/a] (a: this and every later one this session) ")
    sys.stderr.flush()
    discard_typeahead()  # a key pressed before the question was asked is no answer to it
    answer = sys.stdin.readline().strip().lower()  # "" at end of input: no
    if answer in ("a", "all", "always"):
        ws.approve_all = True
        say("  every later command of this session runs without asking")
    return ws.approve_all or answer in ("y", "yes")


def command_lines(command: str, rows: int, columns: int) -> list[str]:
    """The approval prompt's view of command, made to fit rows x columns with the question, so
    that no part of it can scroll out of sight: each of its lines on a line of its own ("$ "
    before the first, "> " before the others), control characters as escapes; of a command
    too long for that, its first and last lines, of a line too long, its start and end, each
    with how much is left out; and, unless the command is one plain line shown whole, its size
    and what is escaped. The command itself is not changed: it runs as the model wrote it."""
    lines = command.split("\n")
    room = max(rows - 5, 3)  # left for the step line above (two rows at most), two notes and
    # the question below
    head, tail = (room // 2, room - 1 - room // 2) if len(lines) > room else (len(lines), 0)
    width = max(columns - 5, 30)  # "  $ " before, and the last column left free
    shown, cut = [], tail > 0
    for number, line in enumerate(lines[:head] + lines[len(lines) - tail :]):
        if tail and number == head:
            shown.append(f"  [... {len(lines) - head - tail:,} lines left out ...]")
        text, left_out = clipped(line, width)
        cut = cut or left_out > 0
        shown.append(("  $ " if number == 0 else "  > ") + text)
    if len(lines) > 1 or cut:
        count = f"{len(lines):,} line{'s' if len(lines) > 1 else ''}"
        part = "; only its start and end are shown" if cut else ""
        shown.append(f"  ({count}, {len(command):,} characters{part})")
    if any(not c.isprintable() for c in command if c != "\n"):
        shown.append("  (control characters are shown as escapes: \\x1b is ESC, \\r a return)")
    return shown


def clipped(line: str, width: int) -> tuple[str, int]:
    """line with its control characters as escapes, in at most width columns (a longer one as
    its start and its end around the number of characters left out), and that number."""
    start = [visible(c) for c in line[:width]]  # no character takes less than a column
    if len(line) <= width and sum(map(columns_taken, start)) <= width:
        return "".join(start), 0
    end = [visible(c) for c in line[-width:]]
    half = (width - len(f"[... {len(line):,} characters left out ...]")) // 2
    head, tail = fitting(start, half), fitting(end[::-1], half)[::-1]
    left_out = len(line) - len(head) - len(tail)
    marker = f"[... {left_out:,} characters left out ...]"
    return "".join(head) + marker + "".join(tail), left_out


def fitting(pieces: list[str], width: int) -> list[str]:
    """The first pieces that fit in width columns together."""
    taken, used = [], 0
    for piece in pieces:
        used += columns_taken(piece)
        if used > width:
            break
        taken.append(piece)
    return taken


def columns_taken(piece: str) -> int:
    """The columns a character (or its escape) takes: two for a wide one (CJK, most emoji)."""
    import unicodedata  # here, not at the top, to keep --help's start-up fast

    wide = len(piece) == 1 and unicodedata.east_asian_width(piece) in ("W", "F")
    return 2 if wide else len(piece)


def screen_size() -> tuple[int, int]:
    """The rows and columns of the terminal the prompt is on (stderr's); 24 x 80 if unknown."""
    try:
        size = os.get_terminal_size(sys.stderr.fileno())
    except (AttributeError, ValueError, OSError):
        return 24, 80
    return size.lines or 24, size.columns or 80


def discard_typeahead() -> None:
    """Drop what was typed on the terminal but not yet read: a y typed while the model was
    still thinking must not approve the command shown after it. Not on a terminal (a file, a
    pipe, a stdin put in place by an IDE or a test, without a descriptor) nothing is dropped."""
    if sys.platform == "win32":
        import msvcrt

        while msvcrt.kbhit():
            msvcrt.getwch()
        return
    import termios

    with contextlib.suppress(termios.error, OSError, ValueError, AttributeError):
        termios.tcflush(sys.stdin.fileno(), termios.TCIFLUSH)


def chat_hint() -> None:
    """How a --chat session goes on and ends, said once at its start on a terminal."""
    if sys.stdin.isatty():
        say(
            "chat: type a message after each '> ' (a pasted block of lines is one message; "
            "/help lists the commands); /exit, an empty line or Ctrl-D ends the session"
        )


@contextlib.contextmanager
def waiting(step: int, stream: bool = False):
    """While a request runs: on a terminal, a line counting the seconds (never in a pipe, a
    log, or under a debugger, whose prompt it would overwrite). With stream, yields the function
    that shows the reply's thinking and text as they arrive, on stderr (the counting line gives
    way to them), or a note between them; without, yields None."""
    animate = sys.stderr.isatty() and not debugger_attached()
    stop_counting = count_seconds(step) if animate else lambda: None
    shown = {"kind": None}  # what the last piece shown was: "thinking", "text" or None

    def show(kind: str, text: str) -> None:
        stop_counting()
        if kind == "note":  # a line of its own (a broken stream asked again): what comes next
            end_piece(shown["kind"])  # is labelled anew
            shown["kind"] = None
            say(text)
            return
        if kind != shown["kind"]:
            end_piece(shown["kind"])
            begin_piece(kind, step)
            shown["kind"] = kind
        sys.stderr.write(visible(text, keep=ANSWER_LAYOUT))
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


def show_change(summary: str, diff: list[str]) -> None:
    """What a write changes: its summary line, and on a terminal the diff after it."""
    say(f"      {summary}")
    if sys.stderr.isatty():
        show_diff(diff)


def show_diff(diff: list[str]) -> None:
    """A unified diff on stderr, coloured on a colour terminal; past a screenful, its first
    lines and how many more there are (on a terminal: a pipe or a log gets all of it)."""
    room = terminal_rows() - 4 if sys.stderr.isatty() else len(diff)
    shown = diff if len(diff) <= room else diff[: max(room - 1, 1)]
    paint = {"+": "\033[32m", "-": "\033[31m", "@": "\033[36m"} if colour() else {}
    for line in shown:
        start = paint.get(line[:1], "") if not line.startswith(("+++", "---")) else ""
        say(f"      {line}", paint=start)
    if len(shown) < len(diff):
        say(f"      ... {len(diff) - len(shown)} more lines of the diff")


def terminal_rows() -> int:
    try:
        return os.get_terminal_size(sys.stderr.fileno()).lines or 24
    except (AttributeError, ValueError, OSError):
        return 24


def write_approved(ws, path: str, summary: str, diff: list[str]) -> bool:
    """--confirm-writes: the change and a [y/N/a] prompt, as for a command; a approves this
    and every later write of the session. Without a terminal nobody can answer."""
    if not sys.stdin.isatty():
        say(
            "  not written: stdin is not a terminal, so nobody can approve it (start without "
            "--confirm-writes)"
        )
        raise PermissionError(
            "the file was not written: the user asked to approve each write and nobody can "
            "approve it here (the user can restart the agent without --confirm-writes)"
        )
    say(f"  write {visible(path)}: {summary}")
    show_diff(diff)
    sys.stderr.write("  Write it? [y/N/a] (a: this and every later write this session) ")
    sys.stderr.flush()
    answer = sys.stdin.readline().strip().lower()  # "" at end of input: no
    if answer in ("a", "all", "always"):
        ws.confirm_writes = False
        say("  every later write of this session is made without asking")
        return True
    return answer in ("y", "yes")


def show_restored(action: str, turn: int, task: str, lines: list[str]) -> None:
    """--undo, --redo, /undo, /redo: which turn, then one line per file."""
    say(f"{action} turn {turn} ({one_line(task, 60)}):")
    for line in lines:
        say(f"  {visible(line)}")


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
