"""The terminal view: one reader of the session's events (Terminal) that shows them as step
lines, the waiting counter, streamed thinking and text, diffs, a command's output as it runs,
the totals and the final answer; and the terminal's side of the user (TerminalUser): the
approval prompts, and the --chat prompt (minimal_agent/views/prompt.py reads the messages).

Everything but the final answer goes to stderr, so stdout stays clean for pipes.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import sys
import time
from typing import NoReturn

from minimal_agent.common.text import (
    columns_of,
    columns_taken,
    fitting,
    one_line,
    short_arguments,
    visible,
)
from minimal_agent.core.cost import Totals, money
from minimal_agent.core.events import Events
from minimal_agent.views.prompt import Prompt


def say(text: str, paint: str = "") -> None:
    """One line on stderr (wiping the "waiting" counter first on a terminal), every control
    character in it shown as an escape: what it says may quote the model or the server.
    paint: the agent's own colour for the whole line (an SGR sequence), or ""."""
    on_terminal = sys.stderr.isatty()
    shown = visible(text)
    line = f"{paint}{shown}\033[0m" if paint else shown
    print(("\r\033[K" if on_terminal else "") + line, file=sys.stderr, flush=True)
    if on_terminal:
        # (of a huge line, its first 65,536 characters: more than a screenful anyway)
        said_since_step["rows"] += rows_taken(shown[:65536], screen_size()[1])


class Terminal:
    """The terminal's reader of the session's events (minimal_agent/core/events.py): each kind it
    shows has its method, on_<kind>, called with the event's fields; the rest it ignores."""

    def __init__(self) -> None:
        self.request = contextlib.ExitStack()  # the waiting counter while a request runs
        self.show = None  # what shows the streamed pieces of the reply awaited
        self.streamed = False  # a piece of it is on the screen
        self.command = contextlib.ExitStack()  # a running command's last lines
        self.take = None  # what takes its output, where it is drawn

    def __call__(self, kind: str, fields: dict) -> None:
        shown = getattr(self, f"on_{kind}", None)
        if shown:
            shown(**fields)

    def on_notice(self, text: str) -> None:
        if self.streamed:  # a line of its own between streamed pieces: what comes next is
            self.show("note", text)  # labelled anew
            self.streamed = False
        else:
            say(text)

    def on_chat(self) -> None:
        """How a --chat session goes on and ends, said once at its start on a terminal."""
        if sys.stdin.isatty():
            say(
                "chat: type a message after each '> ' (a pasted block of lines is one message; "
                "/help lists the commands); /exit, an empty line or Ctrl-D ends the session"
            )

    def on_waiting(self, step: int) -> None:
        self.show = self.request.enter_context(waiting(step, stream=True))

    def on_delta(self, step: int, kind: str, text: str) -> None:
        self.show(kind, text)
        self.streamed = True

    def on_waited(self, step: int) -> None:
        self.request.close()
        self.show, self.streamed = None, False

    def on_tool_call(self, step: int, call: dict) -> None:
        name = one_line(call["function"]["name"], 60)  # the model's: any length, any character
        said_since_step["rows"] = 0
        say(f"[{step}] {name}({short_arguments(call['function']['arguments'])})")

    def on_tool_result(self, step: int, call: dict, result: str) -> None:
        say(f"      -> {one_line(result)}")

    def on_command_started(self) -> None:
        self.take = self.command.enter_context(command_output())

    def on_command_output(self, text: str) -> None:
        if self.take:
            self.take(text)

    def on_command_ended(self) -> None:
        self.command.close()
        self.take = None

    def on_diff(self, lines: list[str], everywhere: bool) -> None:
        """A unified diff: a write's on a terminal only, /diff's everywhere."""
        if everywhere or sys.stderr.isatty():
            show_diff(lines)

    def on_compacted(self, record: dict, text: str) -> None:
        say(text)

    def on_usage(self, scope: str, totals: Totals, turns: int, cancelled: int, failed: int,
                 currency: str | None, replayed: bool) -> None:  # fmt: skip
        """The totals line of a turn or a run, or of a --chat session (scope "session")."""
        line = counts(totals, currency, replayed)
        if scope == "session":
            ended_early = ((cancelled, "cancelled"), (failed, "failed"))
            others = [f"{number} {how}" for number, how in ended_early if number]
            ended = f" (and {', '.join(others)})" if others else ""
            line = f"session: turns {turns}{ended}, {line}"
        say(line)

    def on_answer(self, text: str, streamed: bool) -> None:
        """The final answer on stdout, exactly, for pipes and files (an empty one leaves stdout
        empty). On a terminal it is marked as the answer, shown with its control characters as
        escapes (its lines and tabs as they are), and not printed a second time when it has
        just been streamed there."""
        on_terminal = sys.stdout.isatty() and sys.stderr.isatty()
        if text and on_terminal:
            say("^ the answer" if streamed else "answer:")
            if streamed:
                return
        shown = visible(text, keep=ANSWER_LAYOUT) if sys.stdout.isatty() else text
        print(shown, end="\n" if text else "", flush=True)  # each answer as it comes


def print_line(line: str) -> None:
    """A line of --show's or --sessions' output on stdout, its control characters as escapes."""
    print(visible(line))


def until_the_reader_stops(show, *args) -> int:
    """show(*args), printing on stdout; a reader that has had enough (`--sessions | head -1`)
    ends it quietly, with exit code 0, as it ends `ls | head -1`."""
    try:
        code = show(*args)
        sys.stdout.flush()
        return code
    except BrokenPipeError:
        # Else Python's exit flushes the rest into the closed pipe again, and says so.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


def terminal_events() -> Events:
    """A stream of events that the terminal shows (and no other reader yet)."""
    events = Events()
    events.subscribe(Terminal())
    return events


def counts(totals: Totals, currency: str | None, replayed: bool) -> str:
    """A totals line: steps, tool calls, tokens, and the cost in currency (None: unpriced)."""
    steps = f"steps {totals.steps}, tool calls {totals.tool_calls}"
    if replayed:  # no server counted tokens, and nothing was paid
        return f"{steps}; the replies were replayed: no tokens, no cost"
    usage = totals.usage
    spent = f", cost {money(totals.cost, currency)}" if currency else ""
    if currency and totals.unknown:  # never $0.0000 for replies of unknown cost
        replies = f"{totals.unknown} repl{'y' if totals.unknown == 1 else 'ies'}"
        known = f"{spent} + unknown" if totals.cost else ", cost unknown"
        spent = f"{known} (no usage reported for {replies})"
    return (
        f"{steps}, prompt tokens {usage.prompt_tokens}, "
        f"cache-hit tokens {usage.cache_hit_tokens}, "
        f"completion tokens {usage.completion_tokens}{spent}"
    )


ANSWER_LAYOUT = "\n\t"  # what visible() keeps of the model's thinking and answers


def colour() -> bool:
    """Colour only on a terminal, and not when NO_COLOR is set (no-color.org)."""
    return sys.stderr.isatty() and not os.environ.get("NO_COLOR")


class TerminalUser:
    """The user, asked on the terminal: whether a command runs, whether a write is made, and
    --chat's next message (prompt: where it is typed). An answer of a approves this and every
    later command (or write) of the session: remembered here; so is why a call was refused
    for want of an approval nobody could give (refused, taken by the session)."""

    def __init__(self, prompt: Prompt | None = None) -> None:
        self.prompt = prompt or Prompt()
        self.all_commands = self.all_writes = False
        self.refused: list[str] = []  # why calls were refused: an approval nobody could give

    def approves_command(self, command: str, sandboxed: bool, rule: str | None = None) -> bool:
        """rule: the ask rule that has the command asked for, which an earlier a does not
        answer (minimal_agent/tools/permissions.py)."""
        if self.all_commands and not rule:
            return True
        answer = approved(command, sandboxed, self.refused, rule)
        self.all_commands = self.all_commands or answer == "all"
        return answer != "no"

    def approves_write(self, path: str, summary: str, diff: list[str]) -> bool:
        if self.all_writes:
            return True
        answer = write_approved(path, summary, diff, self.refused)
        self.all_writes = answer == "all"
        return answer != "no"

    def approves_servers(self, text: str, sandboxed: bool) -> bool:
        return servers_approved(text, sandboxed)

    def next_message(self) -> str:
        return self.prompt.next_message()


def approved(command: str, sandboxed: bool, refused: list[str], rule: str | None = None) -> str:
    """Ask the user on the terminal: y runs it ("yes"), a runs it and every later command of
    the session ("all"), v shows it whole in a pager and asks again, anything else does not
    ("no"). Without a terminal, or on one too small to show it, nobody can answer (why: kept
    in refused). rule: the ask rule it is asked for by, which --yes does not answer."""
    if not sys.stdin.isatty() and rule:
        nobody_can_approve(
            refused,
            "  not run",
            f"the rule {rule} asks, and stdin is not a terminal",
            f"the command was not run: the user's rule {rule} has it asked for, and nobody "
            "can answer here",
        )
    if not sys.stdin.isatty():
        nobody_can_approve(
            refused,
            "  not run",
            "stdin is not a terminal, so nobody can approve it (start with --yes)",
            "the command was not run: it needs the user's approval and nobody can give it "
            "here (the user can restart the agent with --yes)",
        )
    refuse_a_small_screen(refused, "the command was not run", "  not run")
    where = " in the sandbox" if sandboxed else ""
    question = f"  Run it{where}? [y/N/a] (a: this and every later one this session) "
    answer = shown_and_answered(command, question)
    if answer in ("a", "all", "always"):
        say("  every later command of this session runs without asking")
        return "all"
    return "yes" if answer in ("y", "yes") else "no"


def servers_approved(text: str, sandboxed: bool) -> bool:
    """Ask the user on the terminal whether the workdir's .mcp.json (text, shown whole) may
    start its servers: y yes, v shows it in a pager and asks again, anything else no. Without
    a terminal, or on one too small to show it: no, with one line."""
    said = "skipped the MCP servers of the workdir's .mcp.json"
    if not sys.stdin.isatty():
        say(f"{said}: they start only once you approve the file, and stdin is not a terminal "
            "(run minimal-agent --mcp there on one)")  # fmt: skip
        return False
    rows, columns = screen_size()
    if rows < MIN_ROWS or columns < MIN_COLUMNS:
        say(f"{said}: the terminal is {columns}x{rows}, too small to show it (make it at least "
            f"{MIN_COLUMNS}x{MIN_ROWS})")  # fmt: skip
        return False
    where = " (inside the sandbox)" if sandboxed else " with your rights"
    say(f"the workdir's .mcp.json asks to start programs (MCP servers){where}:")
    question = "  Start them? [y/N/v] (remembered until the file changes; v: view it whole) "
    answer = shown_and_answered(text.rstrip("\n"), question)
    if answer not in ("y", "yes"):
        say("  not started: the servers of .mcp.json (it asks again next time)")
    return answer in ("y", "yes")


def shown_and_answered(text: str, question: str) -> str:
    """text fitted to the rows above question, and the user's answer; v shows it whole in the
    pager and asks again."""
    while True:
        rows, columns = screen_size()
        room = rows - rows_above(rows) - rows_taken(question + "y", columns)
        for line in command_lines(text, room, columns):
            say(line)
        answer = answered(question)
        if answer != "v":
            return answer
        page(command_page(text))
        said_since_step["rows"] = 0  # the pager's screen is gone: what is above is unknown

def answered(question: str) -> str:
    """The user's answer to question, lower-cased; what was typed before it is no answer."""
    sys.stderr.write(question)
    sys.stderr.flush()
    discard_typeahead()  # a key pressed before the question was asked is no answer to it
    return sys.stdin.readline().strip().lower()  # "" at end of input: no


MIN_ROWS, MIN_COLUMNS = 24, 60  # the smallest terminal a prompt is fitted to


def refuse_a_small_screen(refused: list[str], what_happened: str, said: str) -> None:
    """One line and a PermissionError for the model when the terminal is smaller than
    MIN_COLUMNS x MIN_ROWS: there a prompt could not show what it asks about."""
    rows, columns = screen_size()
    if rows >= MIN_ROWS and columns >= MIN_COLUMNS:
        return
    nobody_can_approve(
        refused,
        said,
        f"the terminal is {columns}x{rows}, too small to show what it asks about "
        f"(make it at least {MIN_COLUMNS}x{MIN_ROWS})",
        f"{what_happened}: the user's terminal is too small to show it for approval "
        f"({columns}x{rows}; at least {MIN_COLUMNS}x{MIN_ROWS} is needed)",
    )


def nobody_can_approve(refused: list[str], said: str, why: str, told: str) -> NoReturn:
    """Refuse a call that needs an approval nobody can give: said and why on stderr, why kept
    in refused (the run's result names the call and why: --json), told to the model."""
    say(f"{said}: {why}")
    refused.append(why)
    raise PermissionError(told)


def command_lines(command: str, rows: int, columns: int) -> list[str]:
    """The approval prompt's view of command in at most rows rows of a terminal columns wide,
    its notes included, so that no part of it can scroll out of sight: each of its lines on
    rows of its own ("$ " before the first, "> " before the others, "~ " before each row that
    continues a line too wide for one), built from the escaped text (control characters as
    escapes) so that each row's columns are the ones counted; of a command too large for that,
    its start and its end around what is left out; and, unless the command is one plain line
    that fits on a row, its size and what is escaped. The command itself is not changed: it
    runs as the model wrote it."""
    width = columns - 5  # "  $ " before, and the last column left free
    whole = list(itertools.islice(command_rows(command, width), rows + 1))
    wrapped = len(whole) > command.count("\n") + 1
    notes = note_rows(command_notes(command, cut=False, wrapped=wrapped), columns)
    if len(whole) + len(notes) <= rows:
        return [f"  {mark} {text}" for mark, text, _, _ in whole] + notes
    notes = note_rows(command_notes(command, cut=True, wrapped=True), columns)
    room = max(rows - len(notes) - 1, 2)  # and a row saying what is left out
    head = list(itertools.islice(command_rows(command, width), (room + 1) // 2))
    tail = list(itertools.islice(command_rows_from_end(command, width, room // 2), room // 2))
    gap_start = head[-1][3]
    tail = [row for row in tail[::-1] if row[2] >= gap_start]  # a long line's rows start
    # elsewhere from its end: no character is shown twice
    gap_end = tail[0][2] if tail else len(command)
    left_out = command[gap_start:gap_end]
    if left_out.startswith("\n") and left_out.endswith("\n") and len(left_out) > 1:
        marker = f"[... {left_out.count(chr(10)) - 1:,} lines left out ...]"
    else:
        lines = f" of {left_out.count(chr(10)) + 1:,} lines" if "\n" in left_out else ""
        marker = f"[... {len(left_out):,} characters{lines} left out ...]"
    shown = [f"  {mark} {text}" for mark, text, _, _ in head]
    shown += [f"  {marker}"] + [f"  {mark} {text}" for mark, text, _, _ in tail]
    return shown + notes


def command_notes(command: str, cut: bool, wrapped: bool) -> list[str]:
    """The notes under a command in the prompt: its size (unless it is one plain line shown on
    one row), what is cut and how to see it whole, and that its control characters are shown
    as escapes."""
    notes = []
    lines = command.count("\n") + 1
    if lines > 1 or cut or wrapped:
        count = f"{lines:,} line{'s' if lines > 1 else ''}, {len(command):,} characters"
        if cut:
            count += "; only its start and end are shown: answer v to see it whole"
        elif wrapped:
            count += "; ~ continues a line too wide for the screen"
        notes.append(f"  ({count})")
    if not command.replace("\n", "").isprintable():
        notes.append("  (control characters are shown as escapes: \\x1b is ESC, \\r a return)")
    return notes


def note_rows(notes: list[str], columns: int) -> list[str]:
    """The rows of a prompt's notes (the agent's own words), wrapped between words, each
    continuing row indented under its note's text."""
    import textwrap  # here, not at the top, to keep --help's start-up fast

    rows = []
    for note in notes:
        rows += textwrap.wrap(note, columns - 1, subsequent_indent="   ")
    return rows


def command_rows(command: str, width: int):  # -> an iterator of (mark, text, start, end)
    """The rows of width columns that command takes from its first on, each as its mark ("$"
    on the first line's first row, ">" on another line's, "~" on a continuing row), its text
    escaped, and where in command it starts and ends. Made as they are asked for: a command
    of a million characters costs only the rows shown."""
    start = 0
    for number, line in enumerate(command.split("\n")):
        yield from line_rows(command, start, start + len(line), "$" if number == 0 else ">", width)
        start += len(line) + 1


def command_rows_from_end(command: str, width: int, count: int):  # -> (mark, text, start, end)
    """The last count rows of command_rows, the last first. A line too long to be wrapped
    whole is wrapped from as far before its end as count rows can reach."""
    lines = command.split("\n")
    end = len(command)
    for number in range(len(lines) - 1, -1, -1):
        start = end - len(lines[number])
        begin = max(start, end - count * width)  # no character takes less than a column
        mark = "~" if begin > start else "$" if number == 0 else ">"
        yield from reversed(list(line_rows(command, begin, end, mark, width)))
        end = start - 1


def line_rows(command: str, start: int, end: int, mark: str, width: int):
    """The rows of command[start:end], a part of one line, as command_rows gives them."""
    row, used, row_start = [], 0, start
    for offset in range(start, end):
        piece = visible(command[offset])  # the escaped text: its columns are the ones counted
        if used + columns_taken(piece) > width and row:
            yield mark, "".join(row), row_start, offset
            mark, row, used, row_start = "~", [], 0, offset
        row.append(piece)
        used += columns_taken(piece)
    yield mark, "".join(row), row_start, end


def command_page(command: str) -> str:
    """The whole command as the pager shows it: each line as in the prompt, escaped."""
    lines = command.split("\n")
    return "\n".join(("$ " if n == 0 else "> ") + visible(line) for n, line in enumerate(lines))


def page(text: str) -> None:
    """text (escaped already) whole, in the user's pager ($PAGER, else less); where there is
    none, a screenful at a time on stderr."""
    import shlex  # here, not at the top, to keep --help's start-up fast
    import shutil
    import subprocess

    pager = os.environ.get("PAGER") or "less"
    try:  # a shell command line, as git runs it: the program is its first word
        program = shlex.split(pager)[:1]
    except ValueError:
        program = []
    if program and shutil.which(program[0]):
        with contextlib.suppress(OSError), ctrl_c_to_the_pager():
            subprocess.run(pager, shell=True, input=text.encode("utf-8", "replace"))
            return
    rows, columns = screen_size()
    taken = 0
    for line in text.split("\n"):
        if taken and taken + rows_taken(line, columns) > rows - 1:
            sys.stderr.write("  -- more: Enter for the next page, q to stop -- ")
            sys.stderr.flush()
            if sys.stdin.readline().strip():
                return  # q (or anything typed): enough
            taken = 0
        print(line, file=sys.stderr, flush=True)
        taken += rows_taken(line, columns)


@contextlib.contextmanager
def ctrl_c_to_the_pager():
    """Ctrl-C while the pager runs is the pager's (less stops a search with it): the agent
    does not end, and so does not kill the pager and leave the terminal in its raw mode. A
    handler that does nothing, not SIG_IGN, which the pager would inherit."""
    import signal  # here, not at the top, to keep --help's start-up fast
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield  # only the main thread can set handlers
        return
    previous = signal.signal(signal.SIGINT, lambda signum, frame: None)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def clipped(line: str, width: int) -> tuple[str, int]:
    """line with its control characters as escapes, in at most width columns (a longer one as
    its start and its end around the number of characters left out), and that number."""
    if len(line) <= width and line.isascii() and line.isprintable():
        return line, 0  # the common case, without a look at each character
    start = [visible(c) for c in line[:width]]  # no character takes less than a column
    if len(line) <= width and sum(map(columns_taken, start)) <= width:
        return "".join(start), 0
    end = [visible(c) for c in line[-width:]]
    half = (width - len(f"[... {len(line):,} characters left out ...]")) // 2
    head, tail = fitting(start, half), fitting(end[::-1], half)[::-1]
    left_out = len(line) - len(head) - len(tail)
    marker = f"[... {left_out:,} characters left out ...]"
    return "".join(head) + marker + "".join(tail), left_out


def rows_taken(text: str, columns: int) -> int:
    """The rows a line of text (escaped already) takes on a terminal columns wide, wrapped."""
    return max(1, -(-columns_of(text) // columns))


def rows_taken_all(lines: list[str], columns: int) -> int:
    return sum(rows_taken(line, columns) for line in lines)


def rows_above(rows: int) -> int:
    """The rows said since the last step line began, to keep on screen above a question: a
    quarter of the screen at most, the rest being the question's."""
    return min(said_since_step["rows"], rows // 4)


# The rows of what say() wrote on the terminal since the last step line began, that line
# included: a prompt keeps them on screen. There is one terminal, so one count.
said_since_step = {"rows": 0}


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


def show_diff(diff: list[str]) -> None:
    """A unified diff on stderr, coloured on a colour terminal; past a screenful, its first
    lines and how many more there are (on a terminal: a pipe or a log gets all of it)."""
    room = screen_size()[0] - 4 if sys.stderr.isatty() else len(diff)
    shown = diff if len(diff) <= room else diff[: max(room - 1, 1)]
    for line in shown:
        say(f"      {line}", paint=diff_paint(line))
    if len(shown) < len(diff):
        say(f"      ... {len(diff) - len(shown)} more lines of the diff")


def diff_paint(line: str) -> str:
    """The colour of a diff's line on a colour terminal (an SGR sequence), or ""."""
    if not colour() or line.startswith(("+++", "---")):
        return ""
    return {"+": "\033[32m", "-": "\033[31m", "@": "\033[36m"}.get(line[:1], "")


def write_approved(path: str, summary: str, diff: list[str], refused: list[str]) -> str:
    """--confirm-writes: the change and a [y/N/a] prompt, answered as for a command ("all":
    this and every later write of the session). Without a terminal nobody can answer."""
    if not sys.stdin.isatty():
        nobody_can_approve(
            refused,
            "  not written",
            "stdin is not a terminal, so nobody can approve it (start without --confirm-writes)",
            "the file was not written: the user asked to approve each write and nobody can "
            "approve it here (the user can restart the agent without --confirm-writes)",
        )
    refuse_a_small_screen(refused, "the file was not written", "  not written")
    question = "  Write it? [y/N/a] (a: this and every later write this session) "
    while True:
        rows, columns = screen_size()
        room = rows - rows_above(rows) - rows_taken(question + "y", columns)
        for line, paint in write_lines(path, summary, diff, room, columns):
            say(line, paint=paint)
        answer = answered(question)
        if answer != "v":
            break
        page("\n".join(visible(line) for line in [f"write {path}: {summary}", *diff]))
        said_since_step["rows"] = 0  # the pager's screen is gone: what is above is unknown
    if answer in ("a", "all", "always"):
        say("  every later write of this session is made without asking")
        return "all"
    return "yes" if answer in ("y", "yes") else "no"


def write_lines(
    path: str, summary: str, diff: list[str], rows: int, columns: int
) -> list[tuple[str, str]]:
    """The --confirm-writes prompt's view of a write in at most rows rows of a terminal columns
    wide, as (line, paint) pairs: the file's name and the summary first (a name too long for
    three rows shortened to its start and end), then the diff, each of its lines on one row
    (a longer one as its start and end), of a diff too long for the rows left its start and
    end, and a note saying what is cut and that v shows the whole diff."""
    name, _ = clipped(path, 3 * columns - len(summary) - 16)
    header = f"  write {name}: {summary}"
    room = rows - rows_taken(header, columns)

    def rows_of(lines: list[str]) -> tuple[list[tuple[str, str]], int]:
        """Each line on a row, and how many were too wide for one. Only the lines shown are
        looked at: a diff may have 100,000 of them."""
        shown, too_wide = [], 0
        for line in lines:
            text, left_out = clipped(line, columns - 7)  # "      " before, the last column free
            too_wide += left_out > 0
            shown.append((f"      {text}", diff_paint(line)))
        return shown, too_wide

    if len(diff) <= room:  # it may fit whole
        shown, too_wide = rows_of(diff)
        note = note_rows(write_note(len(diff), too_wide, cut=False), columns)
        if len(shown) + len(note) <= room:
            return [(header, ""), *shown, *((line, "") for line in note)]
    longest = note_rows(write_note(len(diff), len(diff), cut=True), columns)
    fits = max(room - len(longest) - 1, 2)  # and a row saying how many lines are left out
    head, tail = (fits + 1) // 2, fits // 2
    shown, too_wide = rows_of(diff[:head] + diff[len(diff) - tail :])
    marker = f"  [... {len(diff) - head - tail:,} lines of the diff left out ...]"
    shown.insert(head, (marker, ""))
    note = note_rows(write_note(len(diff), too_wide, cut=True), columns)
    return [(header, ""), *shown, *((line, "") for line in note)]


def write_note(lines: int, too_wide: int, cut: bool) -> list[str]:
    """The note under a write's diff when part of it is not shown."""
    if not (cut or too_wide):
        return []
    parts = [f"the diff has {lines:,} lines; only its start and end are shown"] if cut else []
    if too_wide:
        lines_are = f"{too_wide:,} line{'s are' if too_wide > 1 else ' is'}"
        parts.append(f"{lines_are} too wide to show whole")
    return [f"  ({'; '.join(parts)}: answer v to see it whole)"]


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
        columns = screen_size()[1]  # stderr's own width: stdout may be a file
        width = max(columns - 9, 10)  # columns, not characters: a line never wraps
        text = "".join(recent[-512:])[-8192:]
        tail = [line.rsplit("\r", 1)[-1] for line in text.rstrip("\n").split("\n")]
        shown = [f"      | {one_line(line, width)}" for line in tail[-lines:] if line.strip()]
        shown.append(f"      running {seen['second']} s")
        sys.stderr.write(back() + dim + "\n".join(shown) + plain)
        sys.stderr.flush()
        seen["drawn"] = rows_taken_all(shown, columns)  # rows: on a tiny terminal, a wrap

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
