"""The --chat prompt: the next message, typed after "> " on a terminal, else the next line of
stdin. On a terminal, the line can be edited and earlier ones recalled (arrows, Ctrl-A/E,
Ctrl-R) with the standard library's readline where the platform has it (Linux, macOS; the
history kept in the user's sessions folder, never a line holding the key), and a pasted block of
lines is one message (bracketed paste: readline's own, else the terminal's markers read here;
where none come, lines that arrived together). /exit and /quit end the session, as an empty
line and the end of input do."""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path

from minimal_agent.common import files

ENDS = ("/exit", "/quit")  # words that end the session at the prompt
HISTORY_LENGTH = 1000  # lines of history kept
PASTE_START, PASTE_END = "\033[200~", "\033[201~"  # what a terminal puts around a paste
PASTE_ON, PASTE_OFF = "\033[?2004h", "\033[?2004l"  # asks it to, and to stop


class Prompt:
    """Made once per session. history: the file that keeps the typed lines across sessions
    (None: they are kept for this session only); secret: a text no kept line may hold (the
    API key)."""

    def __init__(
        self, history: str | os.PathLike | None = None, secret: str = "", notice=None
    ) -> None:
        self.history = Path(history) if history else None
        self.secret = secret
        self.notice = notice  # notice(line): where a history given up is said, or None
        self.editing = None  # the readline module once it is set up; False: there is none
        self.lost = False  # the history file could not be written: said once, then left

    def next_message(self) -> str:
        """The next message; "" ends the session (an empty line, /exit, /quit, the end of
        input: Ctrl-D, on Windows Ctrl-Z then Enter)."""
        text = self.typed() if sys.stdin.isatty() else sys.stdin.readline()
        text = text.strip()
        return "" if text.lower() in ENDS else text

    def typed(self) -> str:
        editing = self.line_editing()
        if not editing:
            return read_with_paste()
        try:
            line = input("> ")  # readline's prompt: on the terminal, which stdout is here
        except EOFError:
            return ""
        self.keep(editing, line)
        return line

    def line_editing(self):  # -> the readline module, or None
        """readline, set up the first time: the history read back, bracketed paste on; None
        where there is no readline (Windows), or input() would not use it: stdin and stdout
        are not both the terminal (--json owns stdout)."""
        if self.editing is None:
            try:
                import readline  # here, not at the top: only a terminal chat needs it
            except ImportError:
                readline = False
            self.editing = readline
            if readline:
                set_up(readline, self.history)
        on_terminal = sys.stdout.isatty() and sys.stdout.fileno() == 1 and os.isatty(0)
        return self.editing if on_terminal else None

    def keep(self, readline, line: str) -> None:
        """The line kept in the history file, unless it holds the key (then it is taken out
        of this session's history too)."""
        if not line.strip():
            return
        if self.secret and self.secret in line:
            last = readline.get_current_history_length() - 1
            if last >= 0:
                readline.remove_history_item(last)
            return
        if self.history and not self.lost:
            try:
                self.history.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
                with files.replacing(self.history) as (file, temporary):
                    with contextlib.suppress(FileNotFoundError):  # not a link: replacing checked
                        file.write(self.history.read_bytes())
                    file.flush()
                    readline.append_history_file(1, temporary)
            except OSError as error:  # a full disk, a quota, a link where the file should be
                self.lost = True
                why = files.why(error)
                if self.notice:
                    self.notice(
                        f"error: the prompt history is not kept from this line on ({why}): the "
                        "lines typed next are this session's only"
                    )


def set_up(readline, history: Path | None) -> None:
    """Bracketed paste on (CPython turns it off as readline loads), the history file read."""
    if "libedit" not in (readline.__doc__ or ""):  # macOS's libedit has no such setting
        readline.parse_and_bind("set enable-bracketed-paste on")
    readline.set_history_length(HISTORY_LENGTH)
    if history and history.is_file():
        with contextlib.suppress(OSError):  # kept whole as it was, only longer than it should
            files.refuse_link(history)
            readline.read_history_file(str(history))
            with files.replacing(history) as (_, temporary):
                readline.write_history_file(temporary)  # at most HISTORY_LENGTH lines


def read_with_paste() -> str:
    """A line typed after "> " without readline. The terminal is asked to mark a paste; the
    lines between its markers are one message, sent by the Enter after it. Where no markers
    come (the Windows console), lines that arrived together are taken as one paste."""
    marks = sys.platform != "win32"  # an old Windows console would print the request as text
    sys.stderr.write((PASTE_ON if marks else "") + "> ")
    sys.stderr.flush()
    try:
        text = sys.stdin.readline()
        if PASTE_START in text:
            while PASTE_END not in text and text.endswith("\n"):
                text += sys.stdin.readline()
        else:
            while text.endswith("\n") and more_waiting():
                text += sys.stdin.readline()
    finally:
        if marks:
            sys.stderr.write(PASTE_OFF)
            sys.stderr.flush()
    return text.replace(PASTE_START, "").replace(PASTE_END, "")


def more_waiting() -> bool:
    """Whether more input has already arrived: the rest of a paste, not a key typed later."""
    if sys.platform == "win32":
        import msvcrt

        return msvcrt.kbhit()
    import select

    with contextlib.suppress(OSError, ValueError):
        return bool(select.select([sys.stdin], [], [], 0.05)[0])
    return False
