"""What a write_file (or edit_file) call changes, told before it is made: one line (`new
file, 3 lines` or `+2 -1 lines`), and the unified diff (the terminal shows it); with
--confirm-writes the user is asked first. The model's result is the tool's own either way."""

from __future__ import annotations

import collections
import difflib
import os
import time

from minimal_agent.common import files
from minimal_agent.common.text import visible

MAX_COMPARED = 1024 * 1024  # bytes: a larger file is said rewritten, not compared line by line
MAX_PAIRS = 200_000  # equal-line pairs the comparison may weigh: each step of it stays short
MAX_SECONDS = 0.5  # and all of it: a change too costly to compare is said rewritten
CONTEXT = 3  # unchanged lines around each change in the diff, as `diff -u` shows


def review_write(ws, path: str, file: str, content: str | bytes) -> None:
    """Tell ws.events what writing content to file (path, as the model gave it) changes; with
    ws.confirm_writes ask ws.user first: PermissionError if the user says no, or nobody can. A path
    that is a link is named with what it leads to; a file in a .git folder is refused (see
    files.refuse_git). The old content is read as read_file reads (files.open_regular): a
    FIFO, a device or a socket is refused at once instead of blocking the agent."""
    real = os.path.relpath(file, ws.folder)
    linked = os.path.normpath(os.path.join(ws.folder, path)) != file
    shown = f"{path} (a link to {real})" if linked else path
    files.refuse_git(ws.folder, file, shown)
    old = existing(ws.folder, file)
    new = content if isinstance(content, bytes) else content.encode("utf-8", "replace")
    summary, lines = change(old, new, real.replace(os.sep, "/"))
    if ws.confirm_writes:
        if not ws.user.approves_write(shown, summary, lines):
            raise PermissionError(
                "the user did not approve this write, so the file was not written (it is as it was)"
            )
    else:
        ws.events.notice(f"      {visible(shown)}: {summary}" if linked else f"      {summary}")
        ws.events.emit("diff", lines=lines, everywhere=False)


def existing(folder: str, file: str) -> bytes | None:
    try:
        with files.open_regular(folder, file) as handle:
            return handle.read(MAX_COMPARED + 1)
    except (FileNotFoundError, NotADirectoryError):
        return None


def change(old: bytes | None, new: bytes, path: str) -> tuple[str, list[str]]:
    """What writing new over old (None: no file) does, in a line (`new file, N lines`,
    `+A -R lines`, `unchanged`, `rewritten, now N lines`), and as a unified diff ([] when the
    change is too large or too costly to compare: see compared)."""
    new_lines = text_lines(new)
    if old == new:
        return "unchanged", []
    old_lines = [] if old is None else text_lines(old)
    matcher = (
        compared(old_lines, new_lines) if max(len(old or b""), len(new)) <= MAX_COMPARED else None
    )
    if matcher is None:
        return f"rewritten, now {plural(len(new_lines), 'line')}", []
    if old is None:
        summary = f"new file, {plural(len(new_lines), 'line')}"
    else:
        added = removed = 0
        for tag, i1, i2, j1, j2 in matcher.get_opcodes():
            if tag != "equal":
                removed += i2 - i1
                added += j2 - j1
        summary = f"+{added} -{removed} lines"
    return summary, unified(matcher, "/dev/null" if old is None else f"a/{path}", f"b/{path}")


class Comparison(difflib.SequenceMatcher):
    """difflib's line matcher, stopped (TimeoutError) once it has run for MAX_SECONDS."""

    def __init__(self, old_lines: list[str], new_lines: list[str]) -> None:
        super().__init__(None, old_lines, new_lines, autojunk=False)
        self.deadline = time.monotonic() + MAX_SECONDS

    def find_longest_match(self, *bounds):  # called again for each part between the matches
        if time.monotonic() > self.deadline:
            raise TimeoutError
        return super().find_longest_match(*bounds)


def compared(old_lines: list[str], new_lines: list[str]) -> difflib.SequenceMatcher | None:
    """old_lines and new_lines matched, in bounded time, or None. The lines both start and end
    with are set aside first, so a small change in a large file is cheap; what lies between is
    compared by difflib (autojunk off, so no line is skipped as too common) unless it would
    weigh more than MAX_PAIRS pairs of equal lines in one step (SequenceMatcher is cubic on
    many equal lines: 1,000 lines of two kinds took half a minute), or takes over MAX_SECONDS."""
    start = 0
    shortest = min(len(old_lines), len(new_lines))
    while start < shortest and old_lines[start] == new_lines[start]:
        start += 1
    end = 0
    while end < shortest - start and old_lines[-1 - end] == new_lines[-1 - end]:
        end += 1
    old_middle = old_lines[start : len(old_lines) - end]
    new_middle = new_lines[start : len(new_lines) - end]
    counts = collections.Counter(new_middle)
    if sum(counts[line] for line in old_middle) > MAX_PAIRS:
        return None
    try:
        inner = Comparison(old_middle, new_middle).get_opcodes()
    except TimeoutError:
        return None
    opcodes = [("equal", 0, start, 0, start)] if start else []
    opcodes += [(t, i1 + start, i2 + start, j1 + start, j2 + start) for t, i1, i2, j1, j2 in inner]
    if end:
        opcodes.append(
            ("equal", len(old_lines) - end, len(old_lines), len(new_lines) - end, len(new_lines))
        )
    # get_opcodes() returns what it found before: these, with no index of the new lines built
    matcher = difflib.SequenceMatcher(None, old_lines, [])
    matcher.b, matcher.opcodes = new_lines, merged(opcodes)
    return matcher


def merged(opcodes: list[tuple]) -> list[tuple]:
    """opcodes with neighbouring equal runs joined, as difflib gives them."""
    result: list[tuple] = []
    for opcode in opcodes:
        if result and opcode[0] == result[-1][0] == "equal":
            result[-1] = ("equal", result[-1][1], opcode[2], result[-1][3], opcode[4])
        elif opcode[1] != opcode[2] or opcode[3] != opcode[4]:
            result.append(opcode)
    return result


def unified(matcher: difflib.SequenceMatcher, before: str, after: str) -> list[str]:
    """The unified diff of matcher's lines (as difflib.unified_diff writes it, from opcodes
    found in bounded time)."""
    old_lines, new_lines = matcher.a, matcher.b
    lines = []
    for group in matcher.get_grouped_opcodes(CONTEXT):
        if not lines:
            lines += [f"--- {before}", f"+++ {after}"]
        first, last = group[0], group[-1]
        old_range = line_range(first[1], last[2])
        new_range = line_range(first[3], last[4])
        lines.append(f"@@ -{old_range} +{new_range} @@")
        for tag, i1, i2, j1, j2 in group:
            if tag == "equal":
                lines += [" " + line for line in old_lines[i1:i2]]
                continue
            lines += ["-" + line for line in old_lines[i1:i2]]
            lines += ["+" + line for line in new_lines[j1:j2]]
    return lines


def line_range(start: int, stop: int) -> str:
    """A hunk's range as `diff -u` writes it: first line (1-based) and count; an empty range
    names the line before it."""
    count = stop - start
    if count == 1:
        return str(start + 1)
    return f"{start + 1 if count else start},{count}"


def text_lines(data: bytes) -> list[str]:
    return data.decode("utf-8", "replace").splitlines()


def plural(number: int, word: str) -> str:
    return f"{number} {word}{'' if number == 1 else 's'}"
