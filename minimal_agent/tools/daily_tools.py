"""The daily driver's tools, added by the session beside the lesson's three (minimal_agent/
added_tools.py): edit_file, so that a one-line change costs the model a line and not the
file; search and list_files, which run no program and so need no approval; and read_file with
offset and limit, numbering the lines, in place of the lesson's. On for the installed
`minimal-agent` command, off for `python agent.py` unless LLM_DAILY_TOOLS=1.

They are safe by the same rules as the lesson's: every path goes through Workspace.path (the
fence, the user's own folders), and an edit through everything write_file goes through
(.git refused, the diff shown, --confirm-writes, the atomic write; undo and the file_change
events follow from the workdir's walk)."""

from __future__ import annotations

import io
import os
import re

from minimal_agent.common import files
from minimal_agent.tools import added_tools, diffs
from minimal_agent.tools import search as searching

SOURCE = "the daily tools (LLM_DAILY_TOOLS)"
LINES = 2_000  # lines read_file shows from offset when no limit is given
MAX_LINE = 2_000  # characters of a line read_file shows
MAX_EDITED = 64 * 2**20  # bytes: a larger file is not read whole into memory to be edited
SHOWN = 20  # lines of an edit's result, and of the closest match of an old_string not found


def tools(lesson_tools: dict) -> dict[str, added_tools.AddedTool]:
    """The daily tools, for a workspace's added_tools; their read_file replaces the lesson's."""
    daily: dict[str, added_tools.AddedTool] = {}
    for schema in SCHEMAS:
        name = schema["function"]["name"]
        added_tools.add(daily, schema, FUNCTIONS[name], SOURCE, lesson_tools, name == "read_file")
    return daily


# --- read_file, with offset and limit ------------------------------------------------------


def read_file(ws, path: str, offset: int | None = None, limit: int | None = None) -> str:
    """The lesson's read_file; given offset or limit, only those lines, numbered as cat -n
    numbers them."""
    file = ws.path(path)
    if os.path.isdir(file):
        raise IsADirectoryError(f"{path} is a folder, not a file")
    if not os.path.isfile(file):
        raise FileNotFoundError(f"{path} does not exist or is not a regular file")
    if offset is None and limit is None:
        return files.read_capped(ws.folder, file, ws.max_result_chars)
    offset, limit = 1 if offset is None else offset, LINES if limit is None else limit
    if offset < 1 or limit < 1:
        return "Error: offset and limit count lines from 1: give numbers of 1 or more"
    with files.open_regular(ws.folder, file) as handle:
        head = handle.read(64 * 1024)
        if files.looks_binary(head):
            return files.read_capped(ws.folder, file, ws.max_result_chars)
        handle.seek(0)
        encoding = files.text_encoding(head, cut=len(head) == 64 * 1024)
        text = io.TextIOWrapper(handle, encoding, errors="replace", newline="\n")
        shown, budget, number = [], ws.max_result_chars - 200, 0
        for number, line in enumerate(lines_of(text), 1):
            if number < offset:
                continue
            row = f"{number:6}\t{line}"
            if number >= offset + limit or budget < len(row):
                return "\n".join(shown) + f"\n[{path} goes on: read on with offset={number}]"
            shown.append(row)
            budget -= len(row) + 1
    if not shown:
        return f"Error: {path} has {diffs.plural(number, 'line')}: offset {offset} is past its end"
    return "\n".join(shown)


def lines_of(text):
    """Each line of text (a text file) without its line ending; of a line longer than MAX_LINE
    characters, its start and a note: a file of one huge line is never held whole."""
    while True:
        line = text.readline(MAX_LINE + 1)
        if not line:
            return
        if line.endswith("\n"):
            yield line.removesuffix("\n").removesuffix("\r")
            continue
        rest = 0
        while (more := text.readline(64 * 1024)) and not more.endswith("\n"):
            rest += len(more)
        rest += len(more.removesuffix("\n"))
        yield line + (f"[... {rest} more characters on this line]" if rest else "")


# --- edit_file ------------------------------------------------------------------------------


def edit_file(ws, path: str, old_string: str, new_string: str, replace_all: bool = False) -> str:
    """Replace old_string, which must occur exactly once (or replace_all), by new_string; an
    empty old_string makes a new file. The file's encoding, line endings and mode are kept."""
    file = ws.path(path)
    files.refuse_git(ws.folder, file, path)
    if old_string == "":
        if os.path.lexists(file):
            return (
                f"Error: {path} exists; an empty old_string only creates a new file: give the "
                "text to replace (read_file shows it)"
            )
        diffs.review_write(ws, path, file, new_string)
        files.write_atomically(ws.folder, file, new_string)
        return f"Created {path} ({diffs.plural(line_count(new_string), 'line')})"
    try:  # a folder, a FIFO or a device: refused, without blocking on it
        with files.open_regular(ws.folder, file) as handle:
            data = handle.read(MAX_EDITED + 1)
    except FileNotFoundError:
        raise FileNotFoundError(
            f"{path} does not exist; to create it, give an empty old_string (or use write_file)"
        ) from None
    if len(data) > MAX_EDITED:
        return (
            f"Error: {path} is over {MAX_EDITED // 2**20} MB, more than edit_file reads: change "
            "it with a command (sed, a script) through run_shell"
        )
    if files.looks_binary(data[:8192]):
        return f"Error: {path} is a binary file; edit_file changes text files only"
    text, encoding = decoded(data, path)
    crlf = text.count("\r\n") > text.count("\n") / 2  # the file's lines end in CRLF
    old = old_string
    if crlf and old not in text:
        old = with_crlf(old)
    new = with_crlf(new_string) if crlf else new_string
    count = text.count(old)
    if count == 0:
        return not_found(text, old_string, path)
    if count > 1 and not replace_all:
        lines = line_numbers(text, positions(text, old))
        return (
            f"Error: old_string occurs {count} times in {path} (at lines "
            f"{', '.join(map(str, lines[:SHOWN]))}{', ...' if count > SHOWN else ''}): add "
            "the lines around it so that it occurs once, or give replace_all=true"
        )
    places = positions(text, old) if replace_all else [text.find(old)]
    new_text = text.replace(old, new, -1 if replace_all else 1)
    try:
        new_data = new_text.encode(encoding)
    except UnicodeEncodeError as error:
        return (
            f"Error: {path} is {encoding} text, which cannot hold {error.object[error.start]!r} "
            "of new_string: write it as the file does (an escape), or use write_file to save "
            "the file as UTF-8"
        )
    diffs.review_write(ws, path, file, new_data)  # shows the change; may ask the user first
    with files.open_regular(ws.folder, file) as handle:
        if handle.read() != data:  # changed while the user was asked, say
            return f"Error: {path} changed meanwhile, so nothing was written: read it again"
    files.write_atomically(ws.folder, file, new_data)
    shift = len(new) - len(old)  # where each replacement now begins
    return edited(path, new_text, [at + n * shift for n, at in enumerate(places)], old, new)


def decoded(data: bytes, path: str) -> tuple[str, str]:
    """data's text, and the encoding that gives back exactly data (a byte order mark kept as
    U+FEFF, so it is written back)."""
    encoding = files.text_encoding(data)
    encoding = {"utf-8-sig": "utf-8", "ascii": "utf-8"}.get(encoding, encoding)
    if encoding == "utf-16":
        encoding = "utf-16-le" if data.startswith(b"\xff\xfe") else "utf-16-be"
    try:
        text = data.decode(encoding)
        if text.encode(encoding) == data:
            return text, encoding
    except UnicodeError:
        pass
    raise ValueError(
        f"{path} is not text edit_file can write back unchanged ({encoding} does not give its "
        "bytes back): use write_file, which saves it as UTF-8"
    )


def with_crlf(text: str) -> str:
    return re.sub(r"(?<!\r)\n", "\r\n", text)


def positions(text: str, old: str) -> list[int]:
    """Where each occurrence of old in text begins, as str.replace finds them."""
    found, at = [], text.find(old)
    while at != -1:
        found.append(at)
        at = text.find(old, at + len(old))
    return found


def line_numbers(text: str, places: list[int]) -> list[int]:
    """The line (from 1) of each of the ascending places in text."""
    numbers, line, previous = [], 1, 0
    for at in places:
        line += text.count("\n", previous, at)
        numbers.append(line)
        previous = at
    return numbers


def line_count(text: str) -> int:
    """How many lines text is: a last line without its line ending counts too."""
    return text.count("\n") + (not text.endswith("\n") and bool(text))


def numbered(lines: list[str], first: int) -> str:
    return "\n".join(
        f"{number:6}\t{line.removesuffix(chr(13))}" for number, line in enumerate(lines, first)
    )


def not_found(text: str, old_string: str, path: str) -> str:
    """The Error of an old_string that is not in text: the lines most like it, numbered, so
    that the model can copy them exactly."""
    import difflib  # here: only an old_string not found needs it (minimal_agent/__init__.py)

    said = f"Error: old_string was not found in {path}"
    if " ".join(old_string.split()) in " ".join(text.split()):
        said += " (it is there if spaces, tabs and line breaks are ignored: copy them exactly)"
    lines = text.split("\n")
    wanted = old_string.strip("\n").split("\n")
    first = next((line.strip() for line in wanted if line.strip()), "")
    matcher = difflib.SequenceMatcher(autojunk=False)
    matcher.set_seq2(first)
    best, best_ratio = None, 0.5  # less alike than that: no line is shown
    for number, line in enumerate(lines):
        matcher.set_seq1(line.strip())
        if (matcher.real_quick_ratio() > best_ratio and matcher.quick_ratio() > best_ratio
                and matcher.ratio() > best_ratio):  # fmt: skip
            best, best_ratio = number, matcher.ratio()
    if best is None:
        return f"{said}, and no line resembles its first line: read the file again"
    shown = lines[best : best + min(max(len(wanted), 1), SHOWN)]
    return f"{said}; the closest lines are:\n{numbered(shown, best + 1)}"


def edited(path: str, new_text: str, places: list[int], old: str, new: str) -> str:
    """The result of an edit: where it is (places: where each replacement begins in new_text),
    and of a single one the lines as they now read."""
    first = line_numbers(new_text, places)
    if len(places) > 1:
        shown = ", ".join(map(str, first[:SHOWN])) + (", ..." if len(first) > SHOWN else "")
        return f"Edited {path}: replaced {len(places)} occurrences, now at lines {shown}"
    if not new:
        return f"Edited {path}: removed {diffs.plural(line_count(old), 'line')} at line {first[0]}"
    last = first[0] + max(line_count(new) - 1, 0)
    lines = new_text.split("\n")[first[0] - 1 : min(last, first[0] - 1 + SHOWN)]
    more = last - first[0] + 1 - SHOWN
    span = f"line {first[0]} now reads" if first[0] == last else f"lines {first[0]}-{last} now read"
    tail = f"\n[... {more} more lines]" if more > 0 else ""
    return f"Edited {path}: {span}:\n{numbered(lines, first[0])}{tail}"


# --- search and list_files -----------------------------------------------------------------


def search(ws, pattern: str, path: str | None = ".", glob: str | None = None) -> str:
    """The lines of the workdir's text files (under path; whose names match glob) that match
    the regular expression pattern, as path:line: text."""
    path = path or "."
    try:
        re.compile(pattern)
    except re.error as error:
        return f"Error: the pattern {pattern!r} is not a regular expression Python reads: {error}"
    problem = glob and bad_glob(glob)
    if problem:
        return problem
    start = start_of(ws, path)
    request = {"tool": "search", "pattern": pattern, "glob": glob, **start}
    found, done = searching.run({**request, "private": ws.private, "max": searching.MAX_MATCHES})
    matches = [f"{p}:{number}: {text}" for p, number, text in (r["match"] for r in found)]
    lines, unshown = within(matches, ws.max_result_chars)
    more = unshown + (done["more"] if done else 0)
    if done is None:
        lines.append(
            f"[the search was stopped after {searching.SECONDS:g} s; a pattern with nested "
            "repeats, such as (a+)+, can take for ever: make it simpler, or narrow path or glob]"
        )
    elif more:
        lines.append(f"[{more} more matches not shown: narrow the pattern, path or glob]")
    if done and done["too_large"]:
        size = searching.MAX_FILE // 2**20
        lines.append(f"[{done['too_large']} files over {size} MB were not searched]")
    return "\n".join(lines) or f"No matches for {pattern!r} in {path}"


def list_files(ws, pattern: str | None = "**") -> str:
    """The workdir's files whose paths match the glob pattern, newest first."""
    pattern = pattern or "**"
    problem = bad_glob(pattern)
    if problem:
        return problem
    found, done = searching.run(
        {
            "tool": "list_files",
            "pattern": pattern.removeprefix("./"),  # the paths matched have no ./ before them
            **start_of(ws, "."),
            "private": ws.private,
            "max": searching.MAX_PATHS,
        }  # fmt: skip
    )
    if done is None:
        return (
            f"Error: listing took over {searching.SECONDS:g} s (the workdir is large): narrow "
            "the pattern, such as src/**/*.py instead of **/*.py"
        )
    lines, unshown = within([record["path"] for record in found], ws.max_result_chars)
    if done["more"] + unshown:
        lines.append(f"[{done['more'] + unshown} more paths not shown: narrow the pattern]")
    return "\n".join(lines) or f"No files match {pattern!r}"


def within(lines: list[str], limit: int) -> tuple[list[str], int]:
    """The first lines that fit in a result of limit characters (room left for the line
    saying how many more), and how many did not."""
    budget = limit - 300
    for count, line in enumerate(lines):
        budget -= len(line) + 1
        if budget < 0:
            return lines[:count], len(lines) - count
    return lines, 0


def start_of(ws, path: str) -> dict:
    """Where a search starts: path through the fence, as the walk in the child takes it."""
    target = ws.path(path)
    if not os.path.exists(target):
        raise FileNotFoundError(f"{path} does not exist")
    return {"folder": ws.folder, "start": os.path.relpath(target, ws.folder)}


def bad_glob(glob: str) -> str | None:
    try:
        searching.glob_regex(glob, anywhere=True)
    except re.error as error:
        return f"Error: the glob {glob!r} cannot be read: {error}"
    return None


def schema(name: str, description: str, properties: dict, required: list[str]) -> dict:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {"type": "object", "properties": properties, "required": required},
        },
    }


PATH = {"type": "string", "description": "File path, relative to the workdir."}


def or_null(kind: str) -> list[str]:
    """An optional parameter's type: models often send null for one they leave at its default."""
    return [kind, "null"]


SCHEMAS = [
    schema(
        "read_file",
        "Read a text file in the workdir. For a large file give offset and limit: the lines "
        "come numbered (as cat -n numbers them), to aim an edit_file.",
        {
            "path": PATH,
            "offset": {
                "type": or_null("integer"),
                "description": "The first line to read (from 1).",
            },
            "limit": {
                "type": or_null("integer"),
                "description": f"How many lines (default {LINES}).",
            },
        },
        ["path"],
    ),
    schema(
        "edit_file",
        "Change a text file by replacing an exact string: old_string must occur exactly once "
        "(copied from the file, with its indentation; add lines around it to make it unique) "
        "unless replace_all. An empty old_string creates a new file. Prefer it to write_file "
        "for changes to an existing file: only the change is sent.",
        {
            "path": PATH,
            "old_string": {"type": "string", "description": "The exact text to replace."},
            "new_string": {"type": "string", "description": "The text to put in its place."},
            "replace_all": {
                "type": or_null("boolean"),
                "description": "Replace every occurrence (default false).",
            },
        },
        ["path", "old_string", "new_string"],
    ),
    schema(
        "search",
        "Search the workdir's text files for a regular expression (Python's re); returns the "
        "matching lines as path:line: text. Skips what .gitignore ignores, .git and binary "
        "files. Needs no approval.",
        {
            "pattern": {"type": "string", "description": "A regular expression."},
            "path": {
                "type": or_null("string"),
                "description": "A folder or file to search (default .).",
            },
            "glob": {
                "type": or_null("string"),
                "description": "Only files matching this glob, such as *.py or src/**/*.ts.",
            },
        },
        ["pattern"],
    ),
    schema(
        "list_files",
        "List the workdir's files whose paths match a glob, newest first (** matches any "
        "number of folders, none included: **/*.py finds setup.py too). Skips what .gitignore "
        "ignores and .git. Needs no approval.",
        {"pattern": {"type": or_null("string"), "description": "A glob (default **: every file)."}},
        [],
    ),
]
FUNCTIONS = {"read_file": read_file, "edit_file": edit_file, "search": search,
             "list_files": list_files}  # fmt: skip
