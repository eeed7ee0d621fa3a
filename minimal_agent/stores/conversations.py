"""Sessions: every conversation kept as a transcript in a per-user folder, the recent ones
listed (--sessions), one found again (--continue, --resume), and each transcript written by one
agent at a time; and the per-user folder of the installed command's settings.

A transcript is JSON Lines: a line with "role" is a message, a line with "event" is the agent's
bookkeeping ({"event": "session", ...} first, {"event": "usage", ...} after each reply). The
lock is an OS lock on the transcript itself, held while its file is open: it goes with the
process, so a crashed or killed agent cannot leave it behind, and no lock file is left over.

Standard library only; fcntl and msvcrt are imported where they are used, so this module
imports on every system.
"""

from __future__ import annotations

import functools
import io
import json
import os
import re
import shlex
import sys
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace

from minimal_agent.common import files
from minimal_agent.common.errors import AgentError
from minimal_agent.common.text import one_line, visible

APP = "minimal-agent"
SESSIONS_ENV = "LLM_SESSIONS_DIR"  # moves the sessions folder
SUFFIX = ".jsonl"
ID_ALPHABET = "23456789abcdefghjkmnpqrstuvwxyz"  # no 0/o or 1/l/i: IDs are typed from a listing
ID_LENGTH = 6  # 31**6, about 900 million: its first two or three characters mostly tell it apart
LIST_LIMIT = 20  # conversations --sessions shows
HEAD_BYTES = 64 * 1024  # the most of a first line read to look for the session event
LOCK_OFFSET = 2**31 - 1  # Windows: the byte locked, far past any data, so no read is blocked
TASK_WIDTH = 60
WORKDIR_WIDTH = 32
SAVED_STORES = "saved"  # the subfolder of the stores of --save FILE conversations
CURRENCY_SYMBOLS = {"USD": "$", "CNY": "¥", "EUR": "€", "GBP": "£"}


class SessionError(AgentError):
    """A conversation that cannot be found, opened or saved as asked; the message is one line
    and says what to do."""


# --- Where the transcripts are --------------------------------------------------------------


def sessions_dir(env: Mapping[str, str] | None = None) -> Path:
    """The per-user sessions folder: LLM_SESSIONS_DIR if set; else on Linux (and other POSIX
    systems) $XDG_STATE_HOME/minimal-agent/sessions (~/.local/state when unset or relative),
    on macOS ~/Library/Application Support/minimal-agent/sessions, on Windows
    %LOCALAPPDATA%\\minimal-agent\\sessions. env: the settings (os.environ when None)."""
    env = os.environ if env is None else env
    chosen = env.get(SESSIONS_ENV, "").strip()
    if chosen:
        if chosen == "~" or chosen.startswith(("~/", "~" + os.sep)):
            chosen = str(_home(env)) + chosen[1:]
        return Path(os.path.abspath(chosen))
    return (
        user_folder(env, ("LOCALAPPDATA", "Local"), ("XDG_STATE_HOME", ".local/state"))
        / APP
        / "sessions"
    )


def config_file(env: Mapping[str, str] | None = None) -> Path:
    """The settings file of the installed `minimal-agent` command, in the user's own config
    folder (never the project folder, whose config.env anyone could have written): on Linux
    (and other POSIX systems) $XDG_CONFIG_HOME/minimal-agent/config.env (~/.config when unset
    or relative), on macOS ~/Library/Application Support/minimal-agent/config.env, on Windows
    %APPDATA%\\minimal-agent\\config.env. env: the settings (os.environ when None)."""
    env = os.environ if env is None else env
    return (
        user_folder(env, ("APPDATA", "Roaming"), ("XDG_CONFIG_HOME", ".config"))
        / APP
        / "config.env"
    )


def user_folder(env: Mapping[str, str], windows: tuple[str, str], xdg: tuple[str, str]) -> Path:
    """A folder of the user's, by the platform's convention: on Windows the one the variable
    windows[0] names (else AppData/windows[1] in the home folder), on macOS Application Support,
    elsewhere the one the XDG variable xdg[0] names (else xdg[1] in the home folder; a relative
    path is invalid there, the XDG spec says, and is ignored)."""
    if sys.platform == "win32":
        chosen = env.get(windows[0], "").strip()
        return Path(chosen) if chosen else _home(env) / "AppData" / windows[1]
    if sys.platform == "darwin":
        return _home(env) / "Library" / "Application Support"
    chosen = env.get(xdg[0], "").strip()
    return Path(chosen) if os.path.isabs(chosen) else _home(env) / xdg[1]


def _home(env: Mapping[str, str]) -> Path:
    home = env.get("USERPROFILE" if sys.platform == "win32" else "HOME", "").strip()
    return Path(home or os.path.expanduser("~"))


def history_file(folder: str | os.PathLike) -> Path:
    """The --chat prompt's history of typed lines, in the sessions folder (the user's state
    folder, out of the tools' reach like the transcripts)."""
    return Path(folder) / "prompt_history"


def make_folder(folder: str | os.PathLike) -> Path:
    """Create the sessions folder if it is missing, readable by its owner only (0o700; the
    parents it needs get the usual permissions). An existing folder is left as it is."""
    folder = Path(folder)
    if not folder.is_dir():
        try:
            folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError as error:
            raise SessionError(
                f"cannot create the sessions folder {folder}: {error.strerror or error}: set "
                f"{SESSIONS_ENV} to a folder you can write, or give --save FILE"
            ) from None
    return folder


def new_id() -> str:
    """A new conversation ID: six random characters, such as k7m2qa, short to type and
    unlike each other from the first character on. (IDs before these were the UTC time and four
    characters, 20261204-113000-ab12; they keep working.)"""
    return "".join(ID_ALPHABET[byte % len(ID_ALPHABET)] for byte in os.urandom(ID_LENGTH))


def new_transcript(folder: str | os.PathLike) -> Path:
    """The path of a new transcript in folder (made if missing). The file is created, empty and
    readable by its owner only (0o600), so no other agent can take the same name (a taken one
    is drawn again); the listing skips it until something is written to it. Its ID is the file
    name without .jsonl."""
    folder = make_folder(folder)
    for _ in range(100):
        path = folder / (new_id() + SUFFIX)
        try:
            files.open_record(path, new=True).close()
        except FileExistsError:
            continue
        except OSError as error:
            raise SessionError(
                f"cannot create a transcript in {folder}: {error.strerror or error}: set "
                f"{SESSIONS_ENV} to a folder you can write, or give --save FILE"
            ) from None
        return path
    raise SessionError(f"cannot find a free transcript name in {folder}: try again")


def session_event(workdir: str | os.PathLike, model: str, now: datetime | None = None) -> dict:
    """The first line of a new transcript: where and with which model it started."""
    started = (now or datetime.now(UTC)).astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "event": "session",
        "workdir": os.path.realpath(workdir),
        "model": model,
        "started": started,
    }


# --- Listing ----------------------------------------------------------------------------------


class SessionSummary(SimpleNamespace):
    """What --sessions shows of one transcript (a plain namespace: dataclasses would cost every
    start, --help included, some 20 ms of imports)."""

    def __init__(self, id: str, path: Path, changed: float) -> None:
        super().__init__(
            id=id,  # the file name without .jsonl
            path=path,
            changed=changed,  # the last change (the file's mtime), seconds since the epoch
            workdir=None,  # None: an older transcript, without a session event
            model=None,
            task=None,  # the first user message, as written
            turns=0,  # user messages
            costs={},  # currency -> sum of priced replies
            unpriced=0,  # usage events without a cost
            problem=None,  # why the file could not be read, if it could not
        )


def transcript_files(folder: str | os.PathLike) -> list[tuple[Path, float]]:
    """(path, mtime) of each non-empty transcript in folder, the last changed first; none for a
    folder that does not exist."""
    try:
        entries = list(os.scandir(folder))
    except (FileNotFoundError, NotADirectoryError):
        return []
    except OSError as error:
        raise SessionError(f"cannot read the sessions folder {folder}: {error.strerror}") from None
    files = []
    for entry in entries:
        if not entry.name.endswith(SUFFIX):
            continue
        try:
            if entry.is_file() and (stat := entry.stat()).st_size > 0:
                files.append((Path(entry.path), stat.st_mtime, entry.name))
        except OSError:  # removed meanwhile
            continue
    files.sort(key=lambda f: (f[1], f[2]), reverse=True)
    return [(path, mtime) for path, mtime, _ in files]


def summarize(path: str | os.PathLike, mtime: float | None = None) -> SessionSummary:
    """One transcript's row. The file is read once and searched for the lines that matter (the
    session event, user messages, usage events); only those are parsed, not the tool results
    that make a transcript large. A half-written last line is left out."""
    path = Path(path)
    session = SessionSummary(id=_id_of(path), path=path, changed=mtime or 0.0)
    try:
        with open(path, "rb") as file:
            if mtime is None:
                session.changed = os.fstat(file.fileno()).st_mtime
            data = file.read()
    except OSError as error:
        session.problem = f"cannot read it: {error.strerror}"
        return session
    end = data.rfind(b"\n") + 1  # whole lines only: a crash can leave the last one half-written
    if _SESSION.first.match(data, 0, end):
        first = _parse(data[: data.find(b"\n")])
        if isinstance(first, dict) and first.get("event") == "session":
            session.workdir = _text(first.get("workdir"))
            session.model = _text(first.get("model"))
    users = _lines(data, end, _USER)
    session.turns = len(users)
    session.task = _task_text(_parse(users[0])) if users else None
    for usage in _parse_all(_lines(data, end, _USAGE)):
        cost = usage.get("cost") if isinstance(usage, dict) else None
        if isinstance(cost, int | float) and not isinstance(cost, bool):
            currency = _text(usage.get("currency")) or ""
            session.costs[currency] = session.costs.get(currency, 0.0) + cost
        else:
            session.unpriced += 1
    return session


class _Pair:
    """A line's top-level "key": "value", as the agent writes it, and the patterns finding it."""

    def __init__(self, key: str, value: str) -> None:
        self.key, self.value = key, value
        self.pair = rb'"%s"\s*:\s*"%s"' % (key.encode(), value.encode())

    # Compiled when first used, not at import: every start, --help too, imports this module.
    @functools.cached_property
    def anywhere(self) -> re.Pattern:
        return re.compile(self.pair)

    @functools.cached_property
    def first(self) -> re.Pattern:  # the line's first key
        return re.compile(rb"\{\s*" + self.pair)

    @functools.cached_property
    def lines(self) -> re.Pattern:  # later lines starting so
        return re.compile(rb"\n(\{\s*" + self.pair + rb"[^\n]*)")


_SESSION, _USER, _USAGE = _Pair("event", "session"), _Pair("role", "user"), _Pair("event", "usage")


def _lines(data: bytes, end: int, pair: _Pair) -> list[bytes]:
    """The lines of data[:end] that are objects with pair's key and value. The agent writes that
    key first ({"role": "user", ...}), and inside a JSON string the quotes are escaped
    (\\"role\\"), so when each place the pair occurs begins a line, those lines are the ones,
    found by two regular-expression searches. Else (another writer's key order, an event that
    holds messages) each line it occurs in is parsed to be sure."""
    lines = pair.lines.findall(data, 0, end)  # the lines after the first
    if pair.first.match(data, 0, end):
        lines.insert(0, data[: data.find(b"\n")])
    if len(lines) == len(pair.anywhere.findall(data, 0, end)):
        return lines
    found, position = [], 0
    while match := pair.anywhere.search(data, position, end):
        start = data.rfind(b"\n", 0, match.start()) + 1
        stop = data.find(b"\n", match.end(), end)
        position = stop + 1
        line = data[start:stop]
        if pair.first.match(line):
            found.append(line)
        elif isinstance(parsed := _parse(line), dict) and parsed.get(pair.key) == pair.value:
            found.append(line)  # the pair was not the first key
    return found


def _parse(line: bytes):
    try:
        return json.loads(line)
    except ValueError:  # not JSON, not UTF-8
        return None


def _parse_all(lines: list[bytes]) -> list:
    """Each line parsed: in one call where all of them are JSON (thousands of usage events)."""
    try:
        parsed = json.loads(b"[" + b",".join(lines) + b"]")
    except ValueError:
        parsed = None
    return (
        parsed
        if isinstance(parsed, list) and len(parsed) == len(lines)
        else list(map(_parse, lines))
    )


def _text(value) -> str | None:
    return value if isinstance(value, str) else None


def _task_text(message) -> str | None:
    content = message.get("content") if isinstance(message, dict) else None
    if isinstance(content, list):  # content parts: the text ones
        parts = [p.get("text") for p in content if isinstance(p, dict)]
        content = " ".join(p for p in parts if isinstance(p, str))
    return content if isinstance(content, str) else None


def _id_of(path: Path) -> str:
    return path.name[: -len(SUFFIX)] if path.name.endswith(SUFFIX) else path.name


def format_sessions(
    rows: list[SessionSummary], folder: str | os.PathLike, hidden: int = 0
) -> list[str]:
    """--sessions as text lines: a header and a line for each row (ID, last change in local
    time, turns, cost, workdir, first task), in the rows' order; hidden: how many older ones
    were left out. The cost is "-" when no reply was priced, and ends with "+" when some were
    and some were not."""
    if not rows:
        return [f"no saved conversations yet in {visible(str(folder))}"]
    table = [
        tuple(map(visible, cells))  # every column: a file's name and a transcript's fields
        # are anyone's, and may hold escape sequences
        for cells in (
            (
                row.id,
                datetime.fromtimestamp(row.changed).strftime("%Y-%m-%d %H:%M"),
                str(row.turns),
                format_cost(row.costs, row.unpriced),
                _short_path(row.workdir) if row.workdir else "-",
                one_line(f"({row.problem})" if row.problem else row.task or "-", TASK_WIDTH),
            )
            for row in rows
        )
    ]
    header = ("ID", "last change", "turns", "cost", "workdir", "first task")
    widths = [max(len(line[i]) for line in [header, *table]) for i in range(5)]
    right = (False, False, True, True, False)

    def line(cells: tuple[str, ...]) -> str:
        aligned = [
            c.rjust(w) if r else c.ljust(w)
            for c, w, r in zip(cells[:5], widths, right, strict=True)
        ]
        return "  ".join([*aligned, cells[5]]).rstrip()

    lines = [line(header), *map(line, table)]
    if hidden:
        lines.append(f"... and {hidden} older (all are in {visible(str(folder))})")
    lines.append("continue one with --resume ID (its first characters do, if no other ID has them)")
    return lines


def sessions_report(folder: str | os.PathLike, limit: int | None = LIST_LIMIT) -> list[str]:
    """--sessions: the last changed conversations in folder as text lines."""
    files = transcript_files(folder)
    rows = [summarize(path, mtime) for path, mtime in files[:limit]]
    return format_sessions(rows, folder, hidden=len(files) - len(rows))


def format_cost(costs: Mapping[str, float], unpriced: int = 0) -> str:
    """$0.0042 (four decimals under 1, else two), one amount per currency; "-" when nothing
    was priced; a "+" after it when some replies were not priced (the sum is a lower bound)."""
    if not costs:
        return "-"
    amounts = []
    for currency, amount in sorted(costs.items()):
        number = f"{amount:.4f}" if abs(amount) < 1 else f"{amount:.2f}"
        symbol = CURRENCY_SYMBOLS.get(currency.upper())
        amounts.append(f"{symbol}{number}" if symbol else f"{number} {currency}".rstrip())
    return " + ".join(amounts) + ("+" if unpriced else "")


def _short_path(path: str) -> str:
    home = os.path.expanduser("~")
    if home not in ("~", os.sep) and (path == home or path.startswith(home + os.sep)):
        path = "~" + path[len(home) :]
    path = visible(path)
    return path if len(path) <= WORKDIR_WIDTH else "..." + path[-(WORKDIR_WIDTH - 3) :]


def changes_folder(transcript: str | os.PathLike, folder: str | os.PathLike) -> Path:
    """Where a conversation's changes to its workdir are kept for --undo (minimal_agent/
    changes.py), always in the sessions folder, never beside a --save FILE that may lie in the
    workdir: for a transcript in folder, the folder beside it named as it is (ID.changes), so
    the two go together; for any other, folder/saved/NAME-KEY.changes, KEY drawn from the
    transcript's real path. The listing and --resume look at .jsonl files only."""
    path = Path(transcript)
    stem = path.name.removesuffix(SUFFIX)
    if saved_in(path, folder):
        return path.with_name(stem + ".changes")
    import hashlib  # here: OpenSSL's loading would slow every start

    key = hashlib.blake2b(_same_path(path).encode("utf-8", "surrogateescape"), digest_size=6)
    return Path(folder) / SAVED_STORES / f"{stem}-{key.hexdigest()}.changes"


def saved_in(transcript: str | os.PathLike, folder: str | os.PathLike) -> bool:
    """Whether a transcript lies in the sessions folder (the user's own conversation), not
    elsewhere (a --save FILE, or a file anyone may have written: a repository can ship one)."""
    return _same_path(Path(transcript).parent) == _same_path(folder)


def recorded_workdirs(path: str | os.PathLike) -> list[str]:
    """The workdirs a transcript says its conversation worked in: the session event's, then
    each workdir event's (a -c/-r that named another --workdir), in order; the last is where it
    goes on. Read as text lines that hold "event"; [] for a transcript without a session
    event (older ones)."""
    found = []
    try:
        with open(path, "rb") as file:
            for line in file:
                if b'"event"' not in line[:40] or not line.endswith(b"\n"):
                    continue
                event = _parse(line)
                if isinstance(event, dict) and event.get("event") in ("session", "workdir"):
                    if isinstance(event.get("workdir"), str):
                        found.append(event["workdir"])
    except OSError:
        return []
    return found


def wire_file(transcript: str | os.PathLike, folder: str | os.PathLike | None = None) -> Path:
    """Where a conversation's requests and responses are kept (stores/wire_record.py): beside
    its store of changes in the sessions folder (folder; None: the transcript's own), named
    as it is (ID.wire); not a .jsonl file, so the listing and --resume never take it for a
    conversation."""
    store = changes_folder(transcript, folder or Path(transcript).parent)
    return store.with_name(store.name.removesuffix(".changes") + ".wire")


# --- Finding one again ------------------------------------------------------------------------


def latest_for(workdir: str | os.PathLike, folder: str | os.PathLike) -> Path | None:
    """-c/--continue: the last changed transcript in folder that was started in workdir (real
    paths compared), or None. Older transcripts, without a session event, never match."""
    return next(conversations_of(workdir, folder), None)


def conversations_of(workdir: str | os.PathLike, folder: str | os.PathLike) -> Iterator[Path]:
    """The transcripts in folder that were started in workdir, the last changed first."""
    wanted = _same_path(workdir)
    for path, _ in transcript_files(folder):
        event = _session_of(path)
        if event and isinstance(event.get("workdir"), str):
            if _same_path(event["workdir"]) == wanted:
                yield path


def _same_path(path: str | os.PathLike) -> str:
    return os.path.normcase(os.path.realpath(path))


def _session_of(path: Path) -> dict | None:
    """A transcript's session event (its first line), read without reading the rest."""
    try:
        with open(path, "rb") as file:
            head = file.readline(HEAD_BYTES)
    except OSError:
        return None
    if not head.endswith(b"\n") or not _SESSION.first.match(head):
        return None
    event = _parse(head)
    return event if isinstance(event, dict) and event.get("event") == "session" else None


def resolve(id_or_file: str, folder: str | os.PathLike, option: str = "--resume") -> Path:
    """-r/--resume (or option: --show, --html): a conversation in folder with this ID, or the
    only one whose ID starts so (case ignored); or a transcript file, given as a path: with a
    path separator (./name) or ending in .jsonl. A bare word is an ID only, so a file of that
    name in the current folder (a repository can ship one) is never taken for the user's
    conversation. SessionError when none or several match."""
    value = id_or_file.strip()
    if not value:
        raise SessionError(
            f"{option} needs a conversation's ID or a transcript file: --sessions lists them"
        )
    is_path = any(sep in value for sep in (os.sep, os.altsep) if sep)
    if (is_path or value.endswith(SUFFIX)) and os.path.isfile(value):
        return Path(os.path.abspath(value))
    if is_path:
        raise SessionError(
            f"{value}: no such file: {option} takes a transcript file or a conversation's ID "
            "(--sessions lists them)"
        )
    wanted = value.removesuffix(SUFFIX).casefold()
    try:
        names = sorted(n[: -len(SUFFIX)] for n in os.listdir(folder) if n.endswith(SUFFIX))
    except OSError:
        names = []
    exact = [n for n in names if n.casefold() == wanted]
    found = exact or [n for n in names if n.casefold().startswith(wanted)]
    if len(found) == 1:
        return Path(folder) / (found[0] + SUFFIX)
    if not found:
        file_hint = f" (a file of that name is given as ./{value})" if os.path.isfile(value) else ""
        raise SessionError(
            f"no conversation {value} in {folder}{file_hint}: --sessions lists the recent ones "
            "with their IDs"
        )
    shown = ", ".join(found[:3]) + (", ..." if len(found) > 3 else "")
    raise SessionError(
        f"{len(found)} conversations' IDs start with {value} ({shown}): give more of the ID "
        "(--sessions lists them)"
    )


# --- One writer per transcript ----------------------------------------------------------------


def open_for_append(path: str | os.PathLike) -> io.FileIO:
    """Open a transcript to append to (as files.open_record opens a record: never through a
    link, unbuffered, created 0o600 if new), locked for as long as the file stays open: one
    agent writes a transcript at a time. The lock is the OS's, on the file itself (flock on
    POSIX; on Windows one byte at LOCK_OFFSET, past any data, so reading and appending are not
    blocked), so it ends with the process that holds it, killed or not. The descriptor is not
    inherited by the commands the agent runs (Python's default), so none of them can keep it
    either. SessionError, the file left as it was, if another agent has it."""
    try:
        file = files.open_record(path)
    except OSError as error:
        raise SessionError(f"cannot open {path}: {error.strerror or error}") from None
    try:
        lock(file.fileno(), path)
        return file
    except BaseException:
        file.close()
        raise


def check_not_in_use(path: str | os.PathLike) -> None:
    """SessionError if another agent is writing the transcript (see open_for_append): said
    before anything reads it, as its last line may be half written by that agent. The file is
    left as it was (a missing one is not made)."""
    if os.path.exists(path):
        open_for_append(path).close()


def lock(fd: int, path: str | os.PathLike) -> None:
    if sys.platform == "win32":
        import msvcrt

        os.lseek(fd, LOCK_OFFSET, os.SEEK_SET)
        try:
            msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)  # at the position: the byte at LOCK_OFFSET
        except OSError:
            raise _in_use(path, None) from None
        finally:
            os.lseek(fd, 0, os.SEEK_END)
        return
    import errno
    import fcntl

    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as error:
        if error.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            raise _in_use(path, _lock_holder(fd)) from None
        raise SessionError(
            f"cannot lock {path}: {error.strerror}: its file system may not have locks; "
            f"keep transcripts on a local disk ({SESSIONS_ENV}, --save FILE)"
        ) from None


def _in_use(path: str | os.PathLike, pid: int | None) -> SessionError:
    holder = f" (pid {pid})" if pid else ""
    return SessionError(
        f"{path} is in use by another agent{holder}: wait for it to finish, or continue "
        "another conversation"
    )


def _lock_holder(fd: int) -> int | None:
    """The process holding a flock on fd's file, from Linux's /proc/locks (only read); None
    where there is none, or if it is not found."""
    try:
        stat = os.fstat(fd)
        with open("/proc/locks", encoding="ascii", errors="replace") as file:
            lines = file.read().splitlines()
    except OSError:
        return None
    where = f"{os.major(stat.st_dev):02x}:{os.minor(stat.st_dev):02x}:{stat.st_ino}"
    exact, same_inode = [], []
    for line in lines:  # "1: FLOCK  ADVISORY  WRITE 1234 fe:00:2146347 0 EOF" ("->": waiting)
        fields = line.split()
        if len(fields) < 6 or fields[1] != "FLOCK" or not fields[4].isdigit():
            continue
        if fields[5] == where:
            exact.append(int(fields[4]))
        elif fields[5].rsplit(":", 1)[-1] == str(stat.st_ino):  # stat's device may differ
            same_inode.append(int(fields[4]))
    found = exact or same_inode
    return found[0] if len(found) == 1 and found[0] > 0 else None


def check_new_save(path: str | os.PathLike) -> None:
    """--save FILE starts a new conversation in FILE: refuse a FILE that already holds one
    (not empty), pointing to --resume, so that nothing is written over or mixed in."""
    if os.path.isfile(path) and os.path.getsize(path) > 0:
        raise SessionError(
            f"{path} already holds a conversation: continue it with --resume {_arg(path)}, "
            "or give --save a new file"
        )


def _arg(path: str | os.PathLike) -> str:
    """A path as it would be typed in the user's shell."""
    text = os.fspath(path)
    if sys.platform == "win32":
        return f'"{text}"' if any(c.isspace() or c in "&|<>^" for c in text) else text
    return shlex.quote(text)
