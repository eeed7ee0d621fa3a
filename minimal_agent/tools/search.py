"""The search and list_files tools' walk of the workdir, done in a child process that is killed
on time-out: Python's re cannot be interrupted, and a pattern that backtracks catastrophically
((a+)+$ on a line of a's) runs for ever; so does a walk of a huge folder.

The walk skips .git, what the workdir's .gitignore files ignore, the user's own folders
(Workspace.private) and every link (a link is never followed, so nothing outside the workdir
is reached). .gitignore is read in Python, never by running git: a repository's config can make
git run a program (core.fsmonitor). The subset read: blank lines and # comments, ! to take a
pattern back, a trailing / for folders only, a / at the start or in the middle anchoring the
pattern to its .gitignore's folder (else it matches a name at any depth), *, ?, [...] and **.
Not read: .git/info/exclude and the user's global excludes file.
"""

from __future__ import annotations

import heapq
import json
import os
import re
import sys

from minimal_agent.common import files

SECONDS = 10.0  # a search or a listing stopped after this long (the child is killed)
OUTLIVED = 2.0  # seconds after that, the child ends itself if the agent could not kill it
MAX_MATCHES = 100  # matching lines shown; the rest are counted
MAX_PATHS = 200  # paths list_files shows; the rest are counted
MAX_LINE = 300  # characters of a matching line shown
MAX_FILE = 10 * 2**20  # bytes: a larger file is not searched (and is counted as skipped)
SKIPPED = {".git"}


# --- In the agent: the child started, its findings read back -------------------------------


def run(request: dict) -> tuple[list[dict], dict | None]:
    """request done by a child process: the records it printed (one JSON object a line) and
    its last one ({"done": ...}), or None when it was stopped after SECONDS."""
    import subprocess  # here: --help must not import it (minimal_agent/__init__.py)

    package_parent = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    # -I: neither the workdir nor PYTHON* variables choose what the child imports
    code = (
        "import sys; sys.path[:0] = sys.argv[1:]; import minimal_agent.tools.search as m; m.serve()"
    )
    with subprocess.Popen(
        [sys.executable, "-I", "-c", code, package_parent],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=request["folder"],
    ) as child:
        body = json.dumps({**request, "seconds": SECONDS + OUTLIVED}).encode()
        try:
            out, err = child.communicate(body, timeout=SECONDS)
        except subprocess.TimeoutExpired:
            child.kill()
            out, err = child.communicate()  # what it printed before
            return records(out), None
        except BaseException:  # Ctrl-C, a termination signal: not waited for (it may never end)
            child.kill()
            raise
    found = records(out)
    if child.returncode or not found or "done" not in found[-1]:
        said = err.decode("utf-8", "replace").strip().splitlines()
        raise RuntimeError(f"the search failed: {said[-1] if said else 'no result'}")
    return found[:-1], found[-1]["done"]


def records(out: bytes) -> list[dict]:
    found = []
    for line in out.decode("utf-8", "replace").splitlines():
        try:
            found.append(json.loads(line))
        except ValueError:  # a last line cut short by the kill
            pass
    return found


# --- In the child ------------------------------------------------------------------------


def serve() -> None:
    request = json.loads(sys.stdin.read())
    if hasattr(os, "fork"):  # POSIX: SIGALRM's default ends the child even inside a regex, so
        import signal  # it never outlives its time, whatever became of the agent (kill -9)

        signal.setitimer(signal.ITIMER_REAL, request["seconds"])
    if request["tool"] == "search":
        done = grep(request)
    else:
        done = listing(request)
    say({"done": done})


def say(record: dict) -> None:
    print(json.dumps(record), flush=True)  # flushed: what came before a time-out is kept


def grep(request: dict) -> dict:
    """Print the first request["max"] matches of the pattern in the walked files' lines as
    {"match": [path, line number, text]}; return the counts."""
    pattern = re.compile(request["pattern"])
    wanted = request.get("glob") and glob_regex(request["glob"], anywhere=True)
    shown = more = too_large = 0
    for path, full, info in walk(request["folder"], request["start"], request["private"]):
        if wanted and not wanted.fullmatch(path):
            continue
        if info.st_size > MAX_FILE:
            too_large += 1
            continue
        try:
            with files.open_regular(request["folder"], full) as handle:
                data = handle.read(MAX_FILE + 1)
        except OSError:  # gone meanwhile, unreadable, swapped for a FIFO
            continue
        if files.looks_binary(data[:8192]):
            continue
        text = data.decode(files.text_encoding(data), "replace")
        # Lines end at \n only, as read_file and edit_file count them (splitlines would end
        # them at \f and \x1c too)
        for number, line in enumerate(text.split("\n"), 1):
            line = line.removesuffix("\r")
            if pattern.search(line):
                if shown < request["max"]:
                    say({"match": [path, number, line[:MAX_LINE]]})
                    shown += 1
                else:
                    more += 1
    return {"more": more, "too_large": too_large}


def listing(request: dict) -> dict:
    """Print the newest request["max"] paths that match the glob as {"path": path}, newest first;
    return how many more matched."""
    wanted = glob_regex(request["pattern"], anywhere=False)
    newest: list[tuple[float, str]] = []
    matched = 0
    for path, _, info in walk(request["folder"], request["start"], request["private"]):
        if not wanted.fullmatch(path):
            continue
        matched += 1
        item = (info.st_mtime, path)
        if len(newest) < request["max"]:
            heapq.heappush(newest, item)
        else:
            heapq.heappushpop(newest, item)
    for _, path in sorted(newest, reverse=True):
        say({"path": path})
    return {"more": matched - len(newest)}


def walk(folder: str, start: str, private: list[str]):
    """(path relative to folder with / between its parts, real path, lstat) of each regular
    file under start (a path relative to folder, or a file's), in name order: no link
    followed, .git, the ignored and the private skipped. Each folder is listed through a
    descriptor opened one folder at a time from folder (files.parent_of), so a folder swapped
    for a link meanwhile is not listed."""
    rules = inherited_rules(folder, start)
    top = os.path.join(folder, start) if start != "." else folder
    if os.path.isfile(top) and not os.path.islink(top):
        yield relative(folder, top), top, os.stat(top, follow_symlinks=False)
        return
    stack = [(top, rules)]
    while stack:
        where, rules = stack.pop()
        rules = rules + read_rules(folder, where)
        folders = []
        try:
            with files.parent_of(folder, os.path.join(where, "-")) as (fd, _):
                entries = sorted(os.scandir(where if fd is None else fd), key=lambda e: e.name)
                for entry in entries:
                    full = os.path.join(where, entry.name)
                    path = relative(folder, full)
                    if entry.name in SKIPPED or any(files.inside(p, full) for p in private):
                        continue
                    # follow_symlinks=False: a link is neither, so it is skipped, not followed
                    if entry.is_dir(follow_symlinks=False):
                        if not ignored(rules, path, True):
                            folders.append((full, rules))
                    elif entry.is_file(follow_symlinks=False) and not ignored(rules, path, False):
                        try:
                            info = entry.stat(follow_symlinks=False)
                        except FileNotFoundError:  # gone meanwhile
                            continue
                        yield path, full, info
        except OSError:  # unreadable, gone, or swapped for a link
            continue
        stack += reversed(folders)  # each folder's files, then its folders, in name order


def relative(folder: str, path: str) -> str:
    return os.path.relpath(path, folder).replace(os.sep, "/")


# --- .gitignore --------------------------------------------------------------------------


def inherited_rules(folder: str, start: str) -> list[tuple]:
    """The rules of the .gitignore files in folder and each folder on the way to start (not
    start's own: the walk reads that)."""
    rules: list[tuple] = []
    parts = [] if start == "." else start.replace(os.sep, "/").split("/")[:-1]
    where = folder
    for part in ["", *parts]:
        where = os.path.join(where, part) if part else where
        rules += read_rules(folder, where)
    return rules


def read_rules(folder: str, where: str) -> list[tuple]:
    """The rules of where's .gitignore (none if it is missing, a link or not a regular file):
    (base, regex, negated, folders_only), base being where relative to folder ("" for folder)."""
    try:
        with files.open_regular(folder, os.path.join(where, ".gitignore")) as handle:
            text = handle.read(1024 * 1024).decode("utf-8", "replace")
    except OSError:
        return []
    base = "" if where == folder else relative(folder, where) + "/"
    rules = []
    for line in text.splitlines():
        line = line.rstrip(" \t") if not line.endswith("\\ ") else line
        if not line or line.startswith("#"):
            continue
        negated = line.startswith("!")
        line = line[1:] if negated else line
        folders_only = line.endswith("/")
        line = line.rstrip("/")
        if not line:
            continue
        anchored = "/" in line
        try:
            regex = glob_regex(line.lstrip("/"), anywhere=not anchored)
        except re.error:
            continue
        rules.append((base, regex, negated, folders_only))
    return rules


def ignored(rules: list[tuple], path: str, is_folder: bool) -> bool:
    """Whether the last rule that matches path ignores it (git's order: a later line wins)."""
    verdict = False
    for base, regex, negated, folders_only in rules:
        if not path.startswith(base) or (folders_only and not is_folder):
            continue
        if regex.fullmatch(path[len(base) :]):
            verdict = not negated
    return verdict


def glob_regex(pattern: str, anywhere: bool) -> re.Pattern:
    """A glob as a compiled regular expression over a /-separated relative path: * and ? within
    one name, [...] a set, ** any number of folders (none included, so **/*.py matches
    setup.py). anywhere: a pattern without a / matches a name at any depth (as .gitignore and
    search's glob read it)."""
    if anywhere and "/" not in pattern:
        pattern = "**/" + pattern
    pattern = re.sub(r"(\*\*/)+", "**/", pattern)  # a run of **/ is one: no nested repeats
    regex, i = "", 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            regex, i = regex + "(?:[^/]*/)*", i + 3
        elif pattern[i:] == "**" and (i == 0 or pattern[i - 1] == "/"):  # all that lies below
            regex, i = regex + ".*", i + 2
        elif pattern.startswith("**", i):
            regex, i = regex + "[^/]*", i + 2
        elif pattern[i] == "*":
            regex, i = regex + "[^/]*", i + 1
        elif pattern[i] == "?":
            regex, i = regex + "[^/]", i + 1
        elif pattern[i] == "[" and "]" in pattern[i + 2 :]:
            end = pattern.index("]", i + 2)
            inner = pattern[i + 1 : end]
            inner = "^" + inner[1:] if inner.startswith("!") else inner
            regex, i = regex + "[" + inner.replace("\\", "\\\\") + "]", end + 1
        elif pattern[i] == "\\" and i + 1 < len(pattern):
            regex, i = regex + re.escape(pattern[i + 1]), i + 2
        else:
            regex, i = regex + re.escape(pattern[i]), i + 1
    return re.compile(regex, re.DOTALL)
