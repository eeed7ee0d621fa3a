"""What each turn changed in the workdir, recorded so that --undo can take it back and --redo
put it back, whether write_file or a shell command made the change.

Before a step's tools run, the workdir is walked and each file's stat (size, mtime, mode,
inode) compared with what the last walk saw: a file seen for the first time, or whose stat
changed, is read, and its content kept by its hash in the store's `seen` file, so that a
command that then changes or deletes it cannot lose it. After the tools ran, the walk is made
again; what differs is the step's change, written to the journal, and only the contents that
change refers to are copied into the `kept` file. `seen` goes when the session closes: what
stays is about the size of what changed.

The store is a folder beside the conversation's transcript (sessions.changes_folder), never
in the workdir. The workdir's `.git` is never walked, kept or restored. Standard library
only, the same on Windows, macOS and Linux.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import stat
from pathlib import Path

from minimal_agent import display

MAX_KEPT = 10 * 1024 * 1024  # bytes: a larger file is not kept, and is named when it changes
MAX_SEEN = 2**30  # bytes of the workdir's files a session reads into its store at most: run in
# a huge folder (a home folder), it keeps the first GB, not a copy of everything
SKIPPED_FOLDERS = {".git"}  # never walked, kept nor restored: it stays as the commands left it
JOURNAL, KEPT, SEEN = "journal.jsonl", "kept", "seen"
CHANGES_NOTHING = {"read_file"}  # tools that change no file: a step of only these is not walked


class Conflict(Exception):
    """Files changed since the turn (by someone else): nothing was restored."""

    def __init__(self, paths: list[str]) -> None:
        super().__init__(", ".join(paths))
        self.paths = paths


class NothingToDo(Exception):
    """No turn to undo, or no undo to redo; the message says which."""


# --- The contents, by hash -----------------------------------------------------------------


class Blobs:
    """File contents by hash, in two append-only files of the store: each record is a line
    "HASH SIZE" and the bytes. `kept` holds what the journal refers to; `seen` what a
    recording session saw, removed when it closes (and when a crashed one left it)."""

    def __init__(self, folder: Path, into: str = KEPT) -> None:
        self.folder, self.into = folder, into  # into: where add() puts a new content
        self.where: dict[str, tuple[str, int, int]] = {}  # hash -> (file, offset, size)
        self.files: dict[str, io.BufferedIOBase] = {}
        self.seen_bytes, self.full = 0, False  # what went into `seen`; MAX_SEEN reached
        if into == SEEN:
            (folder / SEEN).unlink(missing_ok=True)
        try:
            with open(folder / KEPT, "rb") as file:
                while header := file.readline():
                    digest, size = header.split()
                    self.where[digest.decode()] = (KEPT, file.tell(), int(size))
                    file.seek(int(size), os.SEEK_CUR)
        except (FileNotFoundError, ValueError):  # none yet, or a record a crash cut short
            pass

    def add(self, data: bytes, into: str | None = None) -> str:
        into = into or self.into
        digest = hash_of(data)
        if digest not in self.where or (into == KEPT and self.where[digest][0] != KEPT):
            if into not in self.files:
                self.files[into] = open(self.folder / into, "ab")
            file = self.files[into]
            file.write(f"{digest} {len(data)}\n".encode())
            self.where[digest] = (into, file.tell(), len(data))
            file.write(data)
            file.flush()
        return digest

    def room(self, size: int) -> bool:
        """Whether a content of size bytes may still be read into the store."""
        if self.into != SEEN or self.seen_bytes + size <= MAX_SEEN:
            self.seen_bytes += size if self.into == SEEN else 0
            return True
        self.full = True
        return False

    def keep(self, digest: str) -> None:
        """Copy a content from `seen` into `kept`, where the journal can rely on it."""
        if self.where[digest][0] != KEPT:
            self.add(self.get(digest), KEPT)

    def get(self, digest: str) -> bytes:
        name, offset, size = self.where[digest]
        with open(self.folder / name, "rb") as file:
            file.seek(offset)
            return file.read(size)

    def close(self) -> None:
        for file in self.files.values():
            file.close()
        self.files.clear()
        if self.into == SEEN:
            (self.folder / SEEN).unlink(missing_ok=True)


def hash_of(data: bytes) -> str:
    import hashlib  # here: OpenSSL's 3 ms of loading would slow every start, --help's too

    return hashlib.blake2b(data, digest_size=20).hexdigest()


# --- What a path holds ---------------------------------------------------------------------
# An entry: {"type": "file", "mode", "hash" (None: not kept), "size", "mtime"},
# {"type": "dir", "mode"}, {"type": "link", "target"}; None: nothing is there.


def same(a: dict | None, b: dict | None) -> bool:
    """Whether two entries hold the same: contents and mode, not times."""
    if a is None or b is None or a["type"] != b["type"]:
        return a is b
    if a["type"] == "file":
        if a["hash"] and b["hash"]:
            return a["hash"] == b["hash"] and a["mode"] == b["mode"]
        return (a["size"], a["mtime"], a["mode"]) == (b["size"], b["mtime"], b["mode"])
    return a.get("mode") == b.get("mode") and a.get("target") == b.get("target")


def local(root: str, path: str) -> str:
    return os.path.join(root, *path.split("/"))


def read_entry(root: str, path: str, blobs: Blobs | None = None) -> dict | None:
    """What path holds now (its content added to blobs if given)."""
    full = local(root, path)
    try:
        info = os.lstat(full)
    except (FileNotFoundError, NotADirectoryError):
        return None
    return entry_of(full, info, blobs)


def entry_of(full: str, info: os.stat_result, blobs: Blobs | None) -> dict | None:
    mode = stat.S_IMODE(info.st_mode)
    if stat.S_ISDIR(info.st_mode):
        return {"type": "dir", "mode": mode}
    if stat.S_ISLNK(info.st_mode):
        return {"type": "link", "target": os.readlink(full)}
    if not stat.S_ISREG(info.st_mode):
        return None  # a pipe or a device: nothing to keep
    digest = None
    if info.st_size <= MAX_KEPT and (blobs is None or blobs.room(info.st_size)):
        try:
            with open(full, "rb") as file:
                data = file.read()
            digest = blobs.add(data) if blobs else hash_of(data)
        except OSError:  # unreadable (mode 000): named as not kept if it changes
            digest = None
    return {
        "type": "file",
        "mode": mode,
        "hash": digest,
        "size": info.st_size,
        "mtime": info.st_mtime_ns,
    }


def walk(root: str, skip: set[str]) -> dict[str, tuple[os.stat_result, str]]:
    """Every path under root (relative, with "/") and its lstat, but .git and skip's."""
    found: dict[str, tuple[os.stat_result, str]] = {}
    folders = [("", root)]
    while folders:
        prefix, folder = folders.pop()
        try:
            entries = os.scandir(folder)
        except OSError:  # removed meanwhile, or unreadable: seen as it is
            continue
        with entries:
            for item in entries:
                if item.path in skip or item.name in SKIPPED_FOLDERS and item.is_dir():
                    continue
                try:
                    info = item.stat(follow_symlinks=False)
                except OSError:
                    continue
                path = prefix + item.name
                found[path] = (info, item.path)
                if stat.S_ISDIR(info.st_mode):
                    folders.append((path + "/", item.path))
    return found


# --- Recording, step by step ---------------------------------------------------------------


class Recorder:
    """Records the changes of one conversation's turns in its store folder (made when a first
    step may change something). The session calls turn_begins at each turn, step_begins when
    a reply's tool calls are about to run, and step_ends when the turn ends (any number of
    times: only an open step is closed). One walk of the workdir ends a step and begins the
    next, so a turn of n steps walks it n + 1 times."""

    def __init__(
        self, workdir: str, folder: str | os.PathLike, skip: list[str] = (), on_change=None
    ) -> None:
        self.root = os.path.realpath(workdir)
        self.on_change = on_change  # on_change(path, "created" | "changed" | "deleted"), or None
        self.folder = Path(folder)
        self.skip = {os.path.realpath(path) for path in [*skip, self.folder]}
        self.history = History.read(self.folder)
        self.blobs: Blobs | None = None  # and the journal: opened by the first walk
        self.journal = None
        self.turn = self.history.last_turn
        self.task = ""
        self.seen: dict[str, tuple[tuple, dict | None]] = {}  # path -> (stat key, entry)
        self.before: dict[str, dict] | None = None  # the open step's state, else None
        self.not_kept: set[str] = set()
        self.said_full = False

    def write(self, line: dict) -> None:
        if self.journal is None:
            self.folder.mkdir(mode=0o700, parents=True, exist_ok=True)
            self.journal = open(self.folder / JOURNAL, "a", encoding="utf-8")
            if not self.history.workdir:
                self.history.workdir = self.root
                self.write({"event": "store", "workdir": self.root})
        self.journal.write(json.dumps(line, ensure_ascii=False) + "\n")
        self.journal.flush()

    def turn_begins(self, task: str) -> str | None:
        """A new turn; returns what the model should be told first (files restored by an undo
        or redo since its last turn), or None."""
        self.step_ends()
        self.turn += 1
        self.task = task
        self.history = History.read(self.folder)  # /undo and /redo write to it too
        note = self.history.untold()
        if note:
            self.write({"event": "told"})
            self.history.events_untold.clear()
        return note

    def step_begins(self, tools: list[str]) -> None:
        """The state of the workdir before the calls of these tools run, every content kept in
        `seen`; what the open step changed is recorded. A step that only reads is not walked."""
        if all(name in CHANGES_NOTHING for name in tools):
            return
        now = self.snapshot()
        if self.before is not None:
            self.record(self.before, now)
        self.before = now

    def step_ends(self) -> None:
        """What the open step changed, walked again and recorded."""
        if self.before is not None:
            self.record(self.before, self.snapshot())
            self.before = None

    def record(self, before: dict[str, dict], after: dict[str, dict]) -> None:
        """The paths whose entries differ, into the journal, their contents into `kept`; the
        changed files too large to keep are named, each once."""
        changed = [
            (path, before.get(path), after.get(path))
            for path in sorted(before.keys() | after.keys())
            if before.get(path) is not after.get(path)
            and not same(before.get(path), after.get(path))
        ]
        if not changed:
            return
        for _, *entries in changed:
            for entry in entries:
                if entry and entry.get("hash"):
                    self.blobs.keep(entry["hash"])
        if self.turn not in self.history.tasks:
            self.write({"event": "turn", "turn": self.turn, "task": self.task})
            self.history.tasks[self.turn] = self.task
        self.write({"event": "changes", "turn": self.turn, "changes": changed})
        for path, before, after in changed:
            kind = "deleted" if after is None else "created" if before is None else "changed"
            folder = (after or before)["type"] == "dir"
            if self.on_change and not folder:  # a folder's own mtime and mode are no news
                self.on_change(path, kind)
        for path, before, _ in changed:  # what --undo would need and does not have
            if before and before.get("hash", "") is None and path not in self.not_kept:
                self.not_kept.add(path)
                why = why_not_kept(before)
                display.say(f"      not kept: {path} ({why}); --undo cannot restore it")

    def snapshot(self) -> dict[str, dict]:
        """Every path's entry; a file whose stat is as last seen is not read again."""
        if self.blobs is None:
            self.folder.mkdir(mode=0o700, parents=True, exist_ok=True)
            self.blobs = Blobs(self.folder, SEEN)
        entries, seen, known = {}, {}, self.seen
        for path, (info, full) in walk(self.root, self.skip).items():
            key = (info.st_size, info.st_mtime_ns, info.st_mode, info.st_ino)
            last = known.get(path)
            entry = last[1] if last and last[0] == key else entry_of(full, info, self.blobs)
            seen[path] = (key, entry)
            if entry:
                entries[path] = entry
        self.seen = seen
        if self.blobs.full and not self.said_full:
            self.said_full = True
            display.say(
                f"      undo: the workdir's files pass {MAX_SEEN / 2**30:g} GB; those past it are "
                "not kept, so --undo cannot restore them if they change"
            )
        return entries

    def close(self) -> None:
        self.step_ends()
        if self.journal:
            self.journal.close()
        if self.blobs:
            self.blobs.close()
        with contextlib.suppress(OSError):  # walked, but nothing changed: no folder left
            self.folder.rmdir()


# --- The journal read back: the turns, what was undone -------------------------------------


class History:
    """The journal of a store, replayed: each turn's changes (the first state and the last of
    every path it changed), the turns in force, and the undone ones to redo, last first."""

    def __init__(self) -> None:
        self.workdir: str | None = None
        self.tasks: dict[int, str] = {}
        self.changes: dict[int, dict[str, list]] = {}  # turn -> path -> [before, after]
        self.done: list[int] = []
        self.undone: list[tuple[int, list]] = []  # (turn, [[path, taken away, restored]])
        self.events_untold: list[dict] = []
        self.last_turn = 0

    @classmethod
    def read(cls, folder: Path) -> History:
        history = cls()
        try:
            lines = (folder / JOURNAL).read_text(encoding="utf-8").splitlines()
        except FileNotFoundError:
            return history
        for line in lines:
            try:
                history.apply(json.loads(line))
            except ValueError:  # a line cut short by a crash
                continue
        return history

    def apply(self, line: dict) -> None:
        event = line.get("event")
        if event == "store":
            self.workdir = line["workdir"]
        elif event == "turn":
            self.tasks[line["turn"]] = line["task"]
            self.last_turn = max(self.last_turn, line["turn"])
        elif event == "changes":
            turn = line["turn"]
            if turn not in self.done:
                self.done.append(turn)
                self.undone.clear()  # new work: what was undone before it stays undone
            merged = self.changes.setdefault(turn, {})
            for path, before, after in line["changes"]:
                merged[path] = [merged[path][0] if path in merged else before, after]
        elif event in ("undo", "redo"):
            if event == "undo":
                self.done.remove(line["turn"])
                self.undone.append((line["turn"], line["took"]))
            else:
                self.undone.pop()
                self.done.append(line["turn"])
            self.events_untold.append(line)
        elif event == "told":
            self.events_untold.clear()

    def untold(self) -> str | None:
        """What the model was not told yet: the files an undo or redo restored since."""
        said = []
        for line in self.events_untold:
            paths = ", ".join(line["paths"]) or "no file"
            if line["event"] == "undo":
                said.append(
                    f"undid the changes of one of your turns (/undo): {paths} are back "
                    "as they were before it"
                )
            else:
                said.append(
                    f"put back the changes of that turn (/redo): {paths} are as it left them"
                )
        if not said:
            return None
        return (
            f"[Note from the agent: since your last turn the user {'; then '.join(said)}. Read "
            "those files again before building on what you did to them.]"
        )


# --- Taking a turn back, and putting it back ----------------------------------------------


def take_back(folder: str | os.PathLike, action: str, force: bool, how_to_force: str) -> bool:
    """--undo or --redo (action "undo" or "redo") of the conversation whose store is folder,
    said one line per file; False, with the line that says why, if nothing was done."""
    try:
        turn, task, lines = (undo if action == "undo" else redo)(folder, force)
    except NothingToDo as error:
        display.say(f"nothing to {action}: {error}")
        return False
    except Conflict as error:
        again = how_to_force.split()[0].replace(action, "redo" if action == "undo" else "undo")
        display.say(
            f"not {action}ne: changed since (by you, an editor or another program), and "
            f"{action}ing would overwrite it: {', '.join(error.paths)}; nothing was restored. "
            f"To {action} anyway: {how_to_force} (what it overwrites is kept: {again} puts it "
            "back)"
        )
        return False
    display.show_restored(action.replace("do", "did"), turn, task, lines)
    return True


def undo(folder: str | os.PathLike, force: bool = False) -> tuple[int, str, list[str]]:
    """Put the workdir back as it was before the last turn in force; returns the turn, its
    task and one line per path. Conflict (nothing restored) if a path changed since, unless
    force; NothingToDo if no turn is left."""
    history = History.read(Path(folder))
    if not history.done:
        raise NothingToDo("no turn of this conversation changed a file that is not undone yet")
    turn = history.done[-1]
    changes = history.changes[turn]
    expected = {path: after for path, (before, after) in changes.items()}
    wanted = {path: before for path, (before, after) in changes.items()}
    return turn, history.tasks.get(turn, ""), restore(folder, "undo", turn, expected, wanted, force)


def redo(folder: str | os.PathLike, force: bool = False) -> tuple[int, str, list[str]]:
    """Put back exactly what the last undo took away (the same returns as undo's)."""
    history = History.read(Path(folder))
    if not history.undone:
        raise NothingToDo("there is no undo to take back")
    turn, took = history.undone[-1]
    expected = {path: restored for path, _, restored in took}
    wanted = {path: taken for path, taken, _ in took}
    return turn, history.tasks.get(turn, ""), restore(folder, "redo", turn, expected, wanted, force)


def last_turn_changes(folder: str | os.PathLike) -> tuple[int, dict[str, list]] | None:
    """/diff: the last turn in force and its changes (path -> [before, after]), or None."""
    history = History.read(Path(folder))
    if not history.done:
        return None
    return history.done[-1], history.changes[history.done[-1]]


def content(folder: str | os.PathLike, entry: dict | None) -> bytes | None:
    """A file entry's kept content (None for anything else, or a file not kept)."""
    if not entry or entry["type"] != "file" or not entry["hash"]:
        return None
    blobs = Blobs(Path(folder))
    return blobs.get(entry["hash"]) if entry["hash"] in blobs.where else None


def restore(folder, event: str, turn: int, expected: dict, wanted: dict, force: bool) -> list:
    """Make each path hold its wanted entry, if each holds its expected one now (else
    Conflict, nothing changed; with force, whatever it holds is replaced). What is taken away
    is kept first, and the journal says what each path held and holds now, so that the
    opposite can put it back. Returns one line per path."""
    folder = Path(folder)
    root = History.read(folder).workdir
    blobs = Blobs(folder)
    try:
        found = {path: read_entry(root, path, blobs) for path in wanted}
        changed = sorted(path for path in wanted if not same(found[path], expected[path]))
        changed += strangers(root, wanted, found)
        if changed and not force:
            raise Conflict(changed)
        # A file that was not kept (too large) stays as it is, and is named.
        lost = {p for p, e in wanted.items() if e and e["type"] == "file" and e["hash"] is None}
        now = {path: found[path] if path in lost else wanted[path] for path in wanted}
        put_back(root, now, found, blobs)
    finally:
        blobs.close()
    took = [[path, found[path], now[path]] for path in sorted(wanted)]
    paths = [path for path in sorted(wanted) if path not in lost]
    with open(folder / JOURNAL, "a", encoding="utf-8") as journal:
        line = {"event": event, "turn": turn, "took": took, "paths": paths}
        journal.write(json.dumps(line, ensure_ascii=False) + "\n")
    return describe(took, {path: wanted[path] for path in sorted(lost)})


def strangers(root: str, wanted: dict, found: dict) -> list[str]:
    """What lies in a folder to be removed and is not the turn's: it would be lost."""
    odd = []
    for path, entry in found.items():
        if entry and entry["type"] == "dir" and wanted[path] is None:
            for name in os.listdir(local(root, path)):
                if f"{path}/{name}" not in wanted:
                    odd.append(f"{path}/{name}")
    return sorted(odd)


def put_back(root: str, wanted: dict, found: dict, blobs: Blobs) -> None:
    """Remove what must go (deepest first), then make folders, files and links (shallowest
    first), then set the folders' modes (deepest first, so a read-only one comes last)."""
    depth = sorted(wanted, key=lambda path: path.count("/"))
    for path in reversed(depth):
        now, target = found[path], wanted[path]
        if now and (target is None or target["type"] != now["type"] or now["type"] == "link"):
            remove(local(root, path), now)
    for path in depth:
        target, full = wanted[path], local(root, path)
        if target is None:
            continue
        if target["type"] == "dir":
            os.makedirs(full, exist_ok=True)
        elif target["type"] == "link":
            os.symlink(target["target"], full)
        elif not same(found[path], target):
            write_file(full, blobs.get(target["hash"]), target)
    for path in reversed(depth):
        target = wanted[path]
        if target and target["type"] == "dir":
            os.chmod(local(root, path), target["mode"])


def remove(full: str, entry: dict) -> None:
    writable(full)
    if entry["type"] == "dir":
        os.rmdir(full)
    else:
        os.unlink(full)


def writable(full: str) -> None:
    """Windows refuses to replace or delete a read-only file: its read-only flag goes first."""
    if os.name == "nt" and os.path.exists(full):
        os.chmod(full, stat.S_IWRITE | stat.S_IREAD)


def write_file(full: str, data: bytes, entry: dict) -> None:
    """The file's bytes, mode and modification time, through a temporary file renamed over."""
    os.makedirs(os.path.dirname(full), exist_ok=True)
    temporary = f"{full}.{os.getpid()}.undo"
    with open(temporary, "wb") as file:
        file.write(data)
    os.chmod(temporary, entry["mode"])
    os.utime(temporary, ns=(entry["mtime"], entry["mtime"]))
    writable(full)
    os.replace(temporary, full)


def describe(took: list, lost: dict[str, dict]) -> list[str]:
    """One line per path: what it holds again (a file moved elsewhere said as a move), and
    the files that could not be restored."""
    removed = {p: now["hash"] for p, now, then in took if then is None and is_file(now)}
    back = {p: then["hash"] for p, now, then in took if now is None and is_file(then)}
    moved = {}
    for old, digest in back.items():
        new = next((p for p, d in removed.items() if d == digest and p not in moved), None)
        if new:
            moved[new] = old
    lines = []
    for path, now, then in took:
        if path in moved:
            lines.append(f"moved back: {path} -> {moved[path]}")
        elif path in moved.values():
            continue
        elif path in lost or same(now, then):
            continue
        elif then is None:
            lines.append(f"removed: {path}{'/' if now['type'] == 'dir' else ''}")
        elif now is None:
            lines.append(f"restored: {path}{'/' if then['type'] == 'dir' else ''}")
        elif now["type"] == "file" and then["type"] == "file" and now["hash"] == then["hash"]:
            lines.append(f"restored the mode of {path} ({oct(then['mode'])[2:]})")
        else:
            lines.append(f"restored: {path}")
    return lines + [
        f"cannot restore {path}: it was not kept ({why_not_kept(entry)})"
        for path, entry in lost.items()
    ]


def why_not_kept(entry: dict) -> str:
    if entry["size"] > MAX_KEPT:
        return f"it is over {MAX_KEPT // 2**20} MB"
    return f"the workdir's files passed the {MAX_SEEN / 2**30:g} GB kept for --undo"


def is_file(entry: dict | None) -> bool:
    return bool(entry and entry["type"] == "file" and entry["hash"])
