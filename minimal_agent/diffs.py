"""What a write_file call changes, shown before it is made: one line (`new file, 3 lines` or
`+2 -1 lines`), and on a terminal the unified diff; with --confirm-writes the user is asked
first. The model's result is the tool's own either way."""

from __future__ import annotations

import difflib

from minimal_agent import changes, display

MAX_COMPARED = 1024 * 1024  # bytes: a larger file is said rewritten, not compared line by line


def review_write(ws, path: str, file: str, content: str) -> None:
    """Show what writing content to file (path, as the model gave it) changes; with
    ws.confirm_writes ask first: PermissionError if the user says no, or nobody can."""
    old = existing(file)
    new = content.encode("utf-8", "replace")
    summary = change_summary(old, new)
    lines = diff_lines(old, new, path)
    if ws.confirm_writes:
        if not display.write_approved(ws, path, summary, lines):
            raise PermissionError(
                "the user did not approve this write, so the file was not written (it is as it was)"
            )
    else:
        display.show_change(summary, lines)


def existing(file: str) -> bytes | None:
    try:
        with open(file, "rb") as handle:
            return handle.read(MAX_COMPARED + 1)
    except (FileNotFoundError, NotADirectoryError):
        return None


def change_summary(old: bytes | None, new: bytes) -> str:
    """`new file, N lines`, `+A -R lines`, `unchanged`, or for a large file `rewritten`."""
    new_lines = text_lines(new)
    if old is None:
        return f"new file, {plural(len(new_lines), 'line')}"
    if old == new:
        return "unchanged"
    if max(len(old), len(new)) > MAX_COMPARED:
        return f"rewritten, now {plural(len(new_lines), 'line')}"
    added = removed = 0
    matcher = difflib.SequenceMatcher(None, text_lines(old), new_lines, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag != "equal":
            removed += i2 - i1
            added += j2 - j1
    return f"+{added} -{removed} lines"


def diff_lines(old: bytes | None, new: bytes, path: str) -> list[str]:
    """The unified diff from old (None: no file) to new; [] when too large to compare."""
    if old is not None and max(len(old), len(new)) > MAX_COMPARED:
        return []
    before = "/dev/null" if old is None else f"a/{path}"
    return list(
        difflib.unified_diff(
            text_lines(old or b""), text_lines(new), before, f"b/{path}", lineterm=""
        )
    )


def text_lines(data: bytes) -> list[str]:
    return data.decode("utf-8", "replace").splitlines()


def plural(number: int, word: str) -> str:
    return f"{number} {word}{'' if number == 1 else 's'}"


def show_last_turn(folder) -> None:
    """/diff: what the last turn in force changed, file by file (folder: its changes store)."""
    found = changes.last_turn_changes(folder) if folder else None
    if not found:
        display.say("/diff: no turn of this conversation changed a file (or all are undone)")
        return
    turn, paths = found
    display.say(f"turn {turn} changed {plural(len(paths), 'path')}:")
    for path, (before, after) in sorted(paths.items()):
        kinds = {(before or {}).get("type"), (after or {}).get("type")} - {None}
        if kinds != {"file"}:
            what = "folder" if "dir" in kinds else "link"
            said = "made" if before is None else "removed" if after is None else "changed"
            display.say(f"  {what} {said}: {path}")
            continue
        old = None if before is None else changes.content(folder, before)
        new = b"" if after is None else changes.content(folder, after)
        if (before and old is None) or new is None:
            display.say(f"  {path}: not kept (over {changes.MAX_KEPT // 2**20} MB)")
        elif after is None:
            display.say(f"  deleted: {path}")
        else:
            display.say(f"  {path}: {change_summary(old, new)}")
            display.show_diff(diff_lines(old, new, path))
