"""What each turn changed in the workdir, recorded so that --undo can take it back and --redo
put it back, whether write_file or a shell command made the change.

Recording: before a step's tools run, the workdir is walked and each path's lstat key (type
and mode, inode, inode change time, size, mtime) compared with the last walk's. The change
time is set by every write and chmod and cannot be put back, so a key that is the same means
the same content. A file seen for the first time, or whose key changed, is read and held (in
memory, past IN_MEMORY bytes in the store's `seen` file), so that a command that then changes
or deletes it cannot lose it. What differs between two walks is a step's change: it goes into
the journal, and only the contents it refers to are kept for good, by hash, in `kept`. The walk
that ends a step runs while the model is asked (the workdir does not change meanwhile), so a
slow model hides it. The journal marks where each step begins (before its tools run) and where
a turn's record ends, so a record that stops short (a full disk, the agent killed) is known
for what it is, and --undo names that turn instead of calling it undone.

Taking back: every path the journal names is checked (relative, no `..`, no empty part) and
reached one folder at a time from the workdir its turn ran in (one the transcript recorded)
without following a link; a link on the way is a conflict and nothing is written through it.
Temporary files are new files with random names, made in the opened folder.

The store is a folder in the sessions folder (conversations.changes_folder), never in the workdir,
and out of the tools' reach (Workspace.private). The workdir's `.git` is never walked, kept or
restored. Standard library only; on Windows, where there are no folder descriptors, each folder
on the way is checked by name.
"""

from __future__ import annotations

import contextlib
import errno
import glob
import json
import os
import re
import stat
import struct
import sys
from pathlib import Path

from minimal_agent.common import files
from minimal_agent.common.errors import AgentError
from minimal_agent.common.text import one_line
from minimal_agent.stores import conversations
from minimal_agent.tools import diffs

MAX_KEPT = 10 * 1024 * 1024  # bytes: a larger file is not kept, and is named when it changes
MAX_SEEN = 2**30  # bytes of the workdir's files a session holds at most: run in a huge folder
# (a home folder), it holds the first GB, not a copy of everything
IN_MEMORY = 64 * 2**20  # bytes of them held in memory; the rest goes to the store's `seen` file
SKIPPED_FOLDERS = {".git"}  # never walked, kept nor restored: it stays as the commands left it
JOURNAL, KEPT, SEEN = "journal.jsonl", "kept", "seen"
CHANGES_NOTHING = {"read_file"}  # tools that change no file: a step of only these is not walked
HASH = re.compile(r"[0-9a-f]{40}")
OPEN_FOLDER = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | files.NOFOLLOW
OPEN_FILE = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0) | files.NOFOLLOW


class Conflict(Exception):
    """Files changed since the turn (by someone else), or reached through a link: nothing was
    restored."""

    def __init__(self, paths: list[str], through_links: bool = False) -> None:
        super().__init__(", ".join(paths))
        self.paths, self.through_links = paths, through_links


class NothingToDo(Exception):
    """No turn to undo, or no undo to redo; the message says which."""


class BadStore(AgentError):
    """A store (journal or kept contents) that does not check out: nothing is done with it."""


# --- The contents kept for good, by hash ----------------------------------------------------


class Blobs:
    """File contents by hash in the store's append-only `kept` file: each record is a line
    "HASH SIZE" and the bytes. A content is checked against its hash when it is read back."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.where: dict[str, tuple[int, int]] = {}  # hash -> (offset, size)
        self.file = None
        try:
            with open(folder / KEPT, "rb") as file:
                while header := file.readline():
                    digest, size = header.split()
                    self.where[digest.decode()] = (file.tell(), int(size))
                    file.seek(int(size), os.SEEK_CUR)
        except (FileNotFoundError, ValueError):  # none yet, or a record a crash cut short
            pass

    def add(self, data: bytes) -> str:
        digest = hash_of(data)
        if digest not in self.where:
            if self.file is None:
                self.file = files.open_record(self.folder / KEPT)
            header = f"{digest} {len(data)}\n".encode()
            files.append_whole(self.file, header + data)  # none of it, if the disk is full
            self.where[digest] = (self.file.tell() - len(data), len(data))
        return digest

    def get(self, digest: str) -> bytes:
        if digest not in self.where:
            raise BadStore(f"a content it names ({digest[:12]}) is not in it")
        offset, size = self.where[digest]
        with open(self.folder / KEPT, "rb") as file:
            file.seek(offset)
            data = file.read(size)
        if hash_of(data) != digest:
            raise BadStore(f"a content ({digest[:12]}) is not what its hash says")
        return data

    def close(self) -> None:
        if self.file:
            self.file.close()
            self.file = None


def hash_of(data: bytes) -> str:
    import hashlib  # here: OpenSSL's 3 ms of loading would slow every start, --help's too

    return hashlib.blake2b(data, digest_size=20).hexdigest()


# --- What a path holds ---------------------------------------------------------------------
# An entry: {"type": "file", "mode", "hash" (None: not kept), "size", "mtime"},
# {"type": "dir", "mode"}, {"type": "link", "target"}; None: nothing is there.
# A walk's key of a path: (st_mode, st_ino, st_ctime_ns, st_size, st_mtime_ns).


def same(a: dict | None, b: dict | None) -> bool:
    """Whether two entries hold the same: contents and mode, not times."""
    if a is None or b is None or a["type"] != b["type"]:
        return a is b
    if a["type"] == "file":
        if a["hash"] and b["hash"]:
            return a["hash"] == b["hash"] and a["mode"] == b["mode"]
        return (a["size"], a["mtime"], a["mode"]) == (b["size"], b["mtime"], b["mode"])
    return a.get("mode") == b.get("mode") and a.get("target") == b.get("target")


def entry_of(key: tuple, held) -> dict | None:
    """The entry of a path with this walk key; held: a file's content (None: not kept), a
    link's target."""
    mode = key[0]
    if stat.S_ISDIR(mode):
        return {"type": "dir", "mode": stat.S_IMODE(mode)}
    if stat.S_ISLNK(mode):
        return {"type": "link", "target": held or ""}
    if not stat.S_ISREG(mode):
        return None  # a pipe or a device: nothing to keep
    digest = hash_of(held) if held is not None else None
    return {"type": "file", "mode": stat.S_IMODE(mode), "hash": digest, "size": key[3],
            "mtime": key[4]}  # fmt: skip


def key_of(info: os.stat_result) -> tuple:
    return (info.st_mode, info.st_ino, info.st_ctime_ns, info.st_size, info.st_mtime_ns)


def walk(root: str, skip: set[str], stop=None, watcher=None, held=None) -> dict | None:
    """Every folder under root, .git and skip's left out: its path prefix ("" or "a/b/") ->
    {name: key}; each folder watched first if a watcher is given, each regular file read into
    held if it is given (the first walk). None if stop (a threading.Event) was set meanwhile."""
    found: dict[str, dict[str, tuple]] = {}
    folders = [("", root)]
    while folders:
        if stop is not None and stop.is_set():
            return None
        prefix, folder = folders.pop()
        found[prefix] = scan(folder, prefix, skip, watcher, folders, held)
    if watcher is not None:
        watcher.linked_now.clear()  # a whole walk met every name in the workdir
    return found


def scan(folder: str, prefix: str, skip: set[str], watcher, folders: list, held=None) -> dict:
    """One folder's names and keys; its subfolders appended to folders, to be scanned."""
    if watcher is not None:
        watcher.add(prefix, folder)
    names = {}
    try:
        entries = os.scandir(folder)
    except OSError:  # removed meanwhile, or unreadable: seen as it is
        return names
    with entries:
        for item in entries:
            regular = item.is_file(follow_symlinks=False) and item.path not in skip
            watched = regular and watcher is not None and watcher.add_file(prefix, item.path)
            if held is not None and regular:
                # one open, fstat and read instead of an lstat and those
                key, links = held.read_new(prefix + item.name, item.path)
                if key is not None:
                    names[item.name] = key
                    if links > 1 and not watched and watcher is not None:
                        watcher.add_linked(prefix, item.path, key[1])
                    continue
            try:
                info = item.stat(follow_symlinks=False)
            except OSError:
                continue
            if item.name in SKIPPED_FOLDERS and stat.S_ISDIR(info.st_mode) and watcher is not None:
                watcher.watch_names_in(item.path, look=held is None)  # new if not the first walk
            if item.path in skip or item.name in SKIPPED_FOLDERS and stat.S_ISDIR(info.st_mode):
                continue
            names[item.name] = key_of(info)
            if regular and info.st_nlink > 1 and not watched and watcher is not None:
                watcher.add_linked(prefix, item.path, info.st_ino)
            if stat.S_ISDIR(info.st_mode):
                folders.append((f"{prefix}{item.name}/", item.path))
    return names


def rescan(root: str, old: dict, dirty: set[str], skip: set[str], watcher: Watcher) -> dict:
    """A walk made from the last one: only the dirty folders scanned again, and the folders
    that appeared in them (or were replaced) scanned whole; the ones that went, dropped."""
    found = dict(old)
    while True:
        scanned = rescan_folders(root, found, dirty, skip, watcher)
        # a file newly seen with another name: its folders that were not scanned are looked
        # at too, since a write through that name told them nothing
        dirty = watcher.folders_of_linked(found) - scanned
        if not dirty:
            return found


def rescan_folders(root: str, found: dict, dirty: set[str], skip: set[str], watcher) -> set:
    """rescan's one round, in found: the dirty folders and those that appeared in them; the
    prefixes scanned."""
    scanned = set()
    for prefix in sorted(dirty, key=lambda prefix: prefix.count("/")):
        if prefix not in found:  # went, or inside one that went, or scanned whole already
            continue
        scanned.add(prefix)
        folders: list = []
        before = found[prefix]
        found[prefix] = scan(os.path.join(root, *prefix.split("/")), prefix, skip, watcher, [])
        for name, key in before.items():  # folders that went, or are no longer the same
            if stat.S_ISDIR(key[0]) and found[prefix].get(name, (0, 0))[:2] != key[:2]:
                gone = f"{prefix}{name}/"
                for inner in [p for p in found if p.startswith(gone)]:
                    del found[inner]
        for name, key in found[prefix].items():
            inner = f"{prefix}{name}/"
            if stat.S_ISDIR(key[0]) and inner not in found:
                folders.append((inner, os.path.join(root, *inner.split("/"))))
        while folders:
            inner, folder = folders.pop()
            scanned.add(inner)
            found[inner] = scan(folder, inner, skip, watcher, folders)
    return scanned


def differences(old: dict, new: dict) -> list[tuple[str, tuple | None, tuple | None]]:
    """(path, old key, new key) for each path whose key differs between two walks; a folder
    whose names and keys are all the same is compared in one step."""
    changed = []
    for prefix, names in new.items():
        before = old.get(prefix)
        if before == names:
            continue
        before = before or {}
        changed += [(prefix + n, before.get(n), k) for n, k in names.items() if before.get(n) != k]
        changed += [(prefix + n, k, None) for n, k in before.items() if n not in names]
    for prefix, names in old.items():
        if prefix not in new:
            changed += [(prefix + n, k, None) for n, k in names.items()]
    return changed


def read_file_at(full: str, key: tuple) -> bytes | None:
    """A regular file's bytes, if it is still the one the walk saw (same inode and change
    time); None else. Never blocks (a FIFO swapped in) and never follows a link."""
    try:
        fd = os.open(full, OPEN_FILE)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or (info.st_ino, info.st_ctime_ns) != key[1:3]:
            return None
        data, size = b"", info.st_size
        while len(data) <= size and (chunk := os.read(fd, size + 1 - len(data))):
            data += chunk
        return data if len(data) == size else None  # else it changed while it was read
    except OSError:  # unreadable (mode 000): named as not kept if it changes
        return None
    finally:
        os.close(fd)


class Watcher:
    """Linux's inotify on every folder of the workdir, so that a walk after the first rescans
    only the folders something happened in (a write, a chmod, a name made, removed or moved):
    in a project of 100,000 files, milliseconds instead of a second. Made only where the
    system has it (start() returns None elsewhere, or when the watches run out); the events
    the queue could not hold (an overflow) make the next walk a whole one.

    Files are watched by their inode too: a folder's watch hears only of what is done through
    a name in that folder, so a write through another hard link of the file (in .git, in
    another folder, outside the workdir) would go unseen; the file's own watch hears of it, and
    its folders are rescanned. The watches are shared with the user's other programs (an
    IDE's file watcher), so the files of one name are watched only up to a share of them
    (file_budget); a file with another name (a link count above 1 at a walk) is watched
    whatever the count. Making a link tells the folder of the file's first name nothing (only
    the file's own watch hears of it), so past the share a file linked from .git or from
    outside the workdir during the run, and written through that name, goes unseen. The
    folders of .git are watched for the names made in them (and only that), so a link made
    there that is still there when the walk comes is seen."""

    MASK = (  # IN_MODIFY, ATTRIB, CLOSE_WRITE, MOVED_FROM/TO, CREATE, DELETE, DELETE/MOVE_SELF,
        0x2
        | 0x4
        | 0x8
        | 0x40
        | 0x80
        | 0x100
        | 0x200
        | 0x400
        | 0x800
        | 0x01000000
        | 0x02000000  # IN_ONLYDIR, IN_DONT_FOLLOW
    )
    FILE_MASK = 0x2 | 0x4 | 0x8 | 0x02000000  # IN_MODIFY, ATTRIB, CLOSE_WRITE, DONT_FOLLOW
    OVERFLOW, IGNORED = 0x4000, 0x8000
    NAMES = 0x40 | 0x80 | 0x100 | 0x200  # a name moved, made or removed: the folder's mtime
    SHARE = 16  # files of one name are watched up to 1/SHARE of the system's watches
    NAMES_MADE = 0x100 | 0x80 | 0x01000000 | 0x02000000  # IN_CREATE, MOVED_TO, ONLYDIR, DONT_FOLLOW
    IS_FOLDER = 0x40000000

    def __init__(self, libc, fd: int, get_errno, share: int) -> None:
        self.libc, self.fd, self.get_errno = libc, fd, get_errno
        self.file_budget = self.git_budget = share  # files of one name; folders of .git
        self.prefix_of: dict[int, str] = {}  # watch descriptor -> folder prefix
        self.folder_of_file: dict[int, str] = {}  # a file's watch -> its folder's prefix
        self.more_folders: dict[int, set[str]] = {}  # a file's other folders (hard links)
        self.linked_now: set[int] = set()  # files newly found with another name, by inode
        self.pending: set[str] = set()  # folders to look at again at the next walk
        self.names_in: dict[int, str] = {}  # a watch of a folder in .git -> its full path
        self.lost = False  # an overflow, or a watch that could not be added

    @classmethod
    def start(cls) -> Watcher | None:
        if not sys.platform.startswith("linux"):
            return None
        import ctypes  # here: only a recording session on Linux needs it

        try:
            libc = ctypes.CDLL(None, use_errno=True)
            fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        except (OSError, AttributeError):
            return None
        try:
            with open("/proc/sys/fs/inotify/max_user_watches", "rb") as file:
                watches = int(file.read())
        except (OSError, ValueError):
            watches = 8192  # the kernel's smallest default
        return cls(libc, fd, ctypes.get_errno, watches // cls.SHARE) if fd >= 0 else None

    def add(self, prefix: str, full: str) -> None:
        """Watch a folder before it is read, so that nothing done after the read is missed."""
        wd = self.libc.inotify_add_watch(self.fd, os.fsencode(full), self.MASK)
        if wd >= 0:
            self.prefix_of[wd] = prefix
        elif os.path.isdir(full):  # out of watches (fs.inotify.max_user_watches)
            self.lost = True

    def add_file(self, prefix: str, full: str) -> bool:
        """Watch a regular file's inode before it is read, whatever its link count, while the
        files watched are fewer than file_budget; whether it is watched."""
        return len(self.folder_of_file) < self.file_budget and self.watch_file(prefix, full) > 0

    def add_linked(self, prefix: str, full: str, inode: int) -> None:
        """Watch a file whose link count the walk found above 1 (its key taken already): its
        folder is looked at again at the next walk, so a write between the two is not
        missed, and so are its other names' folders that the walk did not see (rescan)."""
        if self.watch_file(prefix, full) == 1:
            self.pending.add(prefix)
            self.linked_now.add(inode)

    def watch_file(self, prefix: str, full: str) -> int:
        """Watch a regular file's inode, whatever name it is written through; a change to it
        makes its folder (prefix) dirty. Returns 1 for a new watch, 2 for one it had, 0 for
        none: out of watches, the walks are whole from then on; a file that went meanwhile,
        or that cannot be read, needs none (it cannot be kept)."""
        wd = self.libc.inotify_add_watch(self.fd, os.fsencode(full), self.FILE_MASK)
        if wd < 0:
            self.lost = self.lost or self.get_errno() in (errno.ENOSPC, errno.ENOMEM)
            return 0
        if wd not in self.folder_of_file:
            self.folder_of_file[wd] = prefix
            return 1
        if self.folder_of_file[wd] != prefix:  # linked in two folders
            self.more_folders.setdefault(wd, set()).add(prefix)
        return 2

    def watch_names_in(self, git: str, look: bool = True) -> None:
        """Watch the names made in a folder of .git and in every folder under it; look at the
        files already there if it is new since the first walk (a file with another name is
        what a link made there leaves; at the first walk, its workdir name showed that)."""
        if git in self.names_in.values():
            return
        for folder, _, names in os.walk(git):
            if len(self.names_in) >= self.git_budget:  # a .git of a million folders
                return
            wd = self.libc.inotify_add_watch(self.fd, os.fsencode(folder), self.NAMES_MADE)
            if wd >= 0:
                self.names_in[wd] = folder
            for name in names if look else ():
                self.look_at(os.path.join(folder, name))

    def look_at(self, full: str) -> None:
        """A name made in .git: a file with another name is watched for at the next rescan."""
        with contextlib.suppress(OSError):
            info = os.lstat(full)
            if stat.S_ISREG(info.st_mode) and info.st_nlink > 1:
                self.linked_now.add(info.st_ino)

    def folders_of_linked(self, found: dict) -> set[str]:
        """The folders of a walk holding a name of a file watched for its link count since the
        last call."""
        inodes, self.linked_now = self.linked_now, set()
        if not inodes:
            return set()
        return {prefix for prefix, names in found.items()
                if any(key[1] in inodes for key in names.values())}  # fmt: skip

    def dirty(self) -> set[str] | None:
        """The prefixes of the folders whose names or entries may have changed since the last
        call; None if that is not known (the next walk must be a whole one)."""
        found, self.pending = self.pending, set()
        while True:
            try:
                data = os.read(self.fd, 1 << 16)
            except BlockingIOError:
                break
            offset = 0
            while offset + 16 <= len(data):
                wd, mask, _, size = struct.unpack_from("iIII", data, offset)  # inotify_event
                offset += 16 + size
                if mask & self.OVERFLOW:
                    self.lost = True
                if wd in self.names_in:  # a name made in .git: a link?
                    folder = self.names_in.pop(wd) if mask & self.IGNORED else self.names_in[wd]
                    name = os.fsdecode(data[offset - size : offset].rstrip(b"\0"))
                    if mask & self.IS_FOLDER:
                        self.watch_names_in(os.path.join(folder, name))
                    elif name:
                        self.look_at(os.path.join(folder, name))
                    continue
                if wd in self.folder_of_file:  # a file's own watch: its folders are dirty
                    found.add(self.folder_of_file[wd])
                    found |= self.more_folders.get(wd, set())
                    if mask & self.IGNORED:  # its last name went
                        del self.folder_of_file[wd]
                        self.more_folders.pop(wd, None)
                    continue
                prefix = self.prefix_of.pop(wd, None) if mask & self.IGNORED else None
                prefix = self.prefix_of.get(wd) if prefix is None else prefix
                if prefix is None:
                    continue
                found.add(prefix)
                if prefix and (not size or mask & self.NAMES):  # the folder's own key changed,
                    found.add(prefix[: prefix.rstrip("/").rfind("/") + 1])  # in its parent
        if self.lost:
            self.lost = False
            return None
        return found

    def close(self) -> None:
        os.close(self.fd)


# --- Recording, step by step ---------------------------------------------------------------


class Held:
    """The contents of the workdir's files as the last walk saw them, by path, with the key
    each was read at: in memory up to IN_MEMORY bytes, then in the store's `seen` file, up to
    MAX_SEEN bytes in all. `seen` is locked while the session lives and removed when it ends;
    one a killed session left behind is removed by the next start (clear_stale)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.by_path: dict[str, tuple[tuple, object]] = {}  # path -> (key, bytes|int|str|None)
        self.in_memory = self.in_all = 0
        self.file = None
        self.full = False  # MAX_SEEN reached

    def put(self, path: str, key: tuple, root: str) -> None:
        """Read what path holds now (its walk key is key) and hold it."""
        full = f"{root}/{path}"  # "/" is a separator on Windows too
        held = None
        if stat.S_ISLNK(key[0]):
            with contextlib.suppress(OSError):
                held = os.readlink(full)
        elif stat.S_ISREG(key[0]) and key[3] <= MAX_KEPT:
            if self.in_all + key[3] > MAX_SEEN:
                self.full = True
            else:
                held = read_file_at(full, key)
                if held is not None:
                    held = self.stored(held)
        self.by_path[path] = (key, held)

    def read_new(self, path: str, full: str) -> tuple[tuple | None, int]:
        """Read and hold a regular file met by the first walk; its key and link count, from
        the open file (None if it is not one now, or cannot be opened: then it is looked at as
        the rest). Written for speed: it runs for every file of the workdir."""
        try:
            fd = os.open(full, OPEN_FILE)
        except OSError:
            return None, 0
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                return None, 0
            size, held = info.st_size, None
            key = (info.st_mode, info.st_ino, info.st_ctime_ns, size, info.st_mtime_ns)
            if size > MAX_KEPT:
                pass
            elif self.in_all + size > MAX_SEEN:
                self.full = True
            else:
                try:
                    data = os.read(fd, size + 1)
                except OSError:  # unreadable: not kept
                    data = b"" if size else None
                if data is not None and len(data) == size:
                    held = self.stored(data)
            self.by_path[path] = (key, held)
            return key, info.st_nlink
        finally:
            os.close(fd)

    def stored(self, data: bytes) -> bytes | int:
        self.in_all += len(data)
        if self.in_memory + len(data) <= IN_MEMORY:
            self.in_memory += len(data)
            return data
        if self.file is None:
            self.file = open_seen(self.folder)
        self.file.seek(0, os.SEEK_END)
        offset = self.file.tell()
        self.file.write(data)
        return offset

    def get(self, path: str, key: tuple):
        """What was held for path at key: a file's bytes or a link's target; None if nothing
        was (too large, unreadable, or read at another key)."""
        found = self.by_path.get(path)
        if found is None or found[0] != key:
            return None
        held = found[1]
        if isinstance(held, int):
            self.file.seek(held)
            return self.file.read(key[3])
        return held

    def drop(self, path: str) -> None:
        self.by_path.pop(path, None)

    def close(self) -> None:
        if self.file:
            with contextlib.suppress(OSError):  # what a full disk kept in its buffer: scratch
                self.file.close()
            (self.folder / SEEN).unlink(missing_ok=True)
            self.file = None


def open_seen(folder: Path):
    """The store's `seen` file, new, locked (conversations.lock) for as long as it stays open."""
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = folder / SEEN
    path.unlink(missing_ok=True)
    flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | files.NOFOLLOW | getattr(os, "O_BINARY", 0)
    fd = os.open(path, flags, 0o600)
    conversations.lock(fd, path)
    return os.fdopen(fd, "w+b")


def clear_stale(sessions_folder: str | os.PathLike) -> None:
    """Remove the `seen` files that sessions killed mid-turn left in the stores of
    sessions_folder: those no live session holds locked."""
    pattern = os.path.join(glob.escape(os.fspath(sessions_folder)), "**", "*.changes", SEEN)
    for path in glob.glob(pattern, recursive=True):
        try:
            fd = os.open(path, os.O_RDWR | files.NOFOLLOW)
        except OSError:
            continue
        try:
            conversations.lock(fd, path)
        except conversations.SessionError:  # a live session's
            os.close(fd)
            continue
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(path)


class Recorder:
    """Records the changes of one conversation's turns in its store folder (made when a first
    step may change something). The session calls turn_begins at each turn, walk_ahead when a
    request is about to be sent, step_begins when a reply's tool calls are about to run, and
    step_ends when the turn ends (any number of times: only an open step is closed). One walk
    of the workdir ends a step and begins the next."""

    def __init__(
        self, workdir: str, folder: str | os.PathLike, skip: list[str] = (), on_change=None,
        notice=None,
        on_lost=None,
    ) -> None:  # fmt: skip
        import threading  # here: --help must not import it (minimal_agent/__init__.py)

        self.root = os.path.realpath(workdir)
        self.on_change = on_change  # on_change(path, "created" | "changed" | "deleted"), or None
        self.notice = notice  # notice(line): what the user is told of the walks, or None
        self.folder = Path(folder)
        self.skip = {os.path.realpath(path) for path in [*skip, self.folder]}
        self.history = History.read(self.folder)
        self.blobs: Blobs | None = None  # and the journal: opened by the first change
        self.journal = None
        self.held = Held(self.folder)
        self.watcher: Watcher | None = None  # made by the first walk
        self.turn = self.history.last_turn
        self.task = ""
        self.state: dict | None = None  # the last walk (see walk)
        self.open = False  # a step's tools may have run since the last walk
        self.fresh = True  # the last walk may be old (a new turn): walk before recording
        self.ahead = None  # a thread walking while the model is asked
        self.stop = threading.Event()
        self.thread = threading.Thread
        self.failure: BaseException | None = None
        self.notes: list[str] = []  # what a walk ahead has to say, said when it is joined
        self.news: list[tuple[str, str]] = []  # (path, change) for on_change, told when joined
        self.not_kept: set[str] = set()
        self.said_full = False
        # A store that cannot be written (a full disk, a quota, an I/O error, a link in its
        # place) is given up: on_lost(error, turn, step) says so, and nothing more is recorded.
        self.on_lost = on_lost
        self.given_up = False
        self.step = 0  # the step of the turn whose tools run (or ran last)
        self.made_journal = not (self.folder / JOURNAL).exists()
        self.recorded_changes = False  # a change of this session is in the journal

    def write(self, line: dict) -> None:
        if self.journal is None:
            self.folder.mkdir(mode=0o700, parents=True, exist_ok=True)
            self.journal = files.open_record(self.folder / JOURNAL)
            if not self.history.workdir:
                self.history.workdir = self.root
                self.write({"event": "store", "workdir": self.root})
        # ASCII escapes: a file name that is not UTF-8 (a lone surrogate) goes in and comes back
        files.append_whole(self.journal, (json.dumps(line) + "\n").encode("ascii"))

    def give_up(self, error: OSError) -> None:
        """The store cannot be written: nothing more is recorded (what is there stays whole:
        files.append_whole), and on_lost says from which step of which turn; raised where
        there is no on_lost."""
        if self.on_lost is None:
            raise error
        if not self.given_up:
            self.given_up = True
            self.on_lost(error, self.turn, max(self.step, 1))

    def mark(self, line: dict) -> None:
        """A line of the journal's own (where a step begins, where a turn's record ends)."""
        try:
            self.write(line)
        except OSError as error:
            self.give_up(error)

    def turn_begins(self, task: str) -> str | None:
        """A new turn; returns what the model should be told first (files restored by an undo
        or redo since its last turn), or None."""
        self.step_ends()
        self.turn += 1
        self.task = task
        self.fresh = True  # the user may have changed files since the last turn
        self.history = History.read(self.folder)  # /undo and /redo write to it too
        note = self.history.untold()
        if note:
            self.write({"event": "told"})
            self.history.events_untold.clear()
        return note

    def walk_ahead(self) -> None:
        """A request is about to be sent: the tools of the open step (if any) have run and
        nothing changes the workdir until the reply comes, so its walk starts now, in the
        background. At a turn's first request, a walk that may not be needed (the reply may
        call no tool) is started too; it is stopped if so."""
        if self.ahead is None and (self.open or self.fresh) and not self.given_up:
            self.stop.clear()
            self.ahead = self.thread(target=self.advance_safely, daemon=True)
            self.ahead.start()

    def step_begins(self, tools: list[str], step: int = 0) -> None:
        """The state of the workdir before the calls of these tools (of the turn's step) run;
        what the open step changed is recorded. A step that only reads is not walked. The
        journal marks the step's beginning first, so that a record that stops short (a full
        disk, the agent killed) is known for what it is (History.incomplete)."""
        if all(name in CHANGES_NOTHING for name in tools) or self.given_up:
            return
        self.advance()
        self.step = step
        if self.turn not in self.history.tasks:
            self.mark({"event": "turn", "turn": self.turn, "task": self.task,
                       "workdir": self.root})  # fmt: skip
            self.history.tasks[self.turn] = self.task
        self.mark({"event": "step", "turn": self.turn, "step": step})
        self.open = not self.given_up

    def step_ends(self) -> None:
        """What the open step changed, walked and recorded; the journal says the turn's record
        is whole up to here."""
        if self.open:
            self.advance()
            self.open = False
            if not self.given_up:
                self.mark({"event": "recorded", "turn": self.turn})
        elif self.ahead is not None:  # a walk that no step needs
            self.stop.set()
            self.join()

    def advance(self) -> None:
        """The walk that ends the open step, if any, and begins the next: the one running
        ahead if there is one, else one made now."""
        if self.ahead is not None and self.ahead.ident is None:
            self.ahead = None  # made, but a signal came before it was started
        if self.ahead is None:
            self.stop.clear()  # a walk ahead stopped earlier must not stop this one
            self.advance_safely()
        self.join()

    def join(self) -> None:
        if self.ahead is not None:
            if self.ahead.ident is not None:  # not when a signal came before its start
                self.ahead.join()
            self.ahead = None
        for note in self.notes if self.notice else ():
            self.notice(note)
        self.notes.clear()
        for path, change in self.news:  # told here, in the session's thread, in order
            self.on_change(path, change)
        self.news.clear()
        failure, self.failure = self.failure, None
        if isinstance(failure, OSError):
            self.give_up(failure)
        elif failure is not None:
            raise failure

    def advance_safely(self) -> None:
        try:
            self.walk_and_record()
        except BaseException as error:  # raised where the walk is joined
            self.failure = error

    def walk_and_record(self) -> None:
        dirty = self.watcher.dirty() if self.watcher else None
        if dirty is not None and self.state is not None:
            now = rescan(self.root, self.state, dirty, self.skip, self.watcher)
        else:
            if self.watcher is None and self.state is None:
                self.watcher = Watcher.start()
            first = self.held if self.state is None else None
            now = walk(self.root, self.skip, self.stop, self.watcher, first)
            if now is None:  # stopped: the events it consumed are lost, so the next is whole
                if self.watcher:
                    self.watcher.lost = True
                return
        if self.state is None:  # the first walk read the files; the links are read now
            for prefix, names in now.items():
                for name, key in names.items():
                    if stat.S_ISLNK(key[0]):
                        self.held.put(prefix + name, key, self.root)
        elif self.open and not self.fresh:
            self.record(differences(self.state, now))
        else:
            for path, _, key in differences(self.state, now):
                self.take(path, key)
        self.state, self.fresh = now, False
        if self.held.full and not self.said_full:
            self.said_full = True
            self.notes.append(
                f"      undo: the workdir's files pass {MAX_SEEN / 2**30:g} GB; those past it are "
                "not kept, so --undo cannot restore them if they change"
            )

    def take(self, path: str, key: tuple | None) -> None:
        if key is None:
            self.held.drop(path)
        else:
            self.held.put(path, key, self.root)

    def record(self, changed: list) -> None:
        """The paths whose entries differ, into the journal, their contents (before and
        after) into `kept`; the changed files too large to keep are named, each once."""
        lines = []
        for path, old, new in sorted(changed, key=lambda change: change[0]):
            before = self.entry(path, old)
            self.take(path, new)
            after = self.entry(path, new)
            if not same(before, after):
                lines.append([path, before, after])
        if not lines:
            return
        self.write({"event": "changes", "turn": self.turn, "changes": lines})  # its turn: marked
        self.recorded_changes = True
        for path, before, after in lines:
            kind = "deleted" if after is None else "created" if before is None else "changed"
            if self.on_change and (after or before)["type"] != "dir":  # a folder's mode: no news
                self.news.append((path, kind))
        for path, before, _ in lines:  # what --undo would need and does not have
            if before and before.get("hash", "") is None and path not in self.not_kept:
                self.not_kept.add(path)
                why = why_not_kept(before)
                self.notes.append(f"      not kept: {path} ({why}); --undo cannot restore it")

    def entry(self, path: str, key: tuple | None) -> dict | None:
        """path's entry at key, its content kept for good."""
        if key is None:
            return None
        held = self.held.get(path, key)
        entry = entry_of(key, held)
        if entry and entry["type"] == "file" and held is not None:
            if self.blobs is None:
                self.folder.mkdir(mode=0o700, parents=True, exist_ok=True)
                self.blobs = Blobs(self.folder)
            self.blobs.add(held)
        return entry

    def close(self) -> None:
        self.step_ends()
        if self.journal:
            self.journal.close()
        if self.blobs:
            self.blobs.close()
        self.held.close()
        if self.watcher:
            self.watcher.close()
        if self.made_journal and not self.recorded_changes and not self.given_up:
            with contextlib.suppress(OSError):  # only marks of steps that changed nothing
                (self.folder / JOURNAL).unlink()
        with contextlib.suppress(OSError):  # walked, but nothing changed: no folder left
            self.folder.rmdir()


# --- The journal read back, checked: the turns, what was undone ----------------------------


class History:
    """The journal of a store, replayed: each turn's changes (the first state and the last of
    every path it changed) and the workdir it ran in, the turns in force, and the undone ones
    to redo, last first. BadStore for a journal that does not check out."""

    def __init__(self) -> None:
        self.workdir: str | None = None  # the store's first workdir (turns before they said it)
        self.tasks: dict[int, str] = {}
        self.workdirs: dict[int, str] = {}  # turn -> the workdir it ran in
        self.changes: dict[int, dict[str, list]] = {}  # turn -> path -> [before, after]
        self.done: list[int] = []
        self.undone: list[tuple[int, list]] = []  # (turn, [[path, taken away, restored]])
        self.events_untold: list[dict] = []
        self.last_turn = 0
        self.incomplete: dict[int, int] = {}  # turn -> the step its record stops at
        self.open_step: tuple[int, int] | None = None  # (turn, step) begun, not yet recorded

    @classmethod
    def read(cls, folder: Path) -> History:
        history = cls()
        try:
            data = (folder / JOURNAL).read_bytes()
        except FileNotFoundError:
            return history
        except OSError as error:
            raise BadStore(f"its journal cannot be read: {error.strerror}") from None
        lines = data.split(b"\n")
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                parsed = json.loads(line)
            except ValueError:
                if number == len(lines):  # the last line, cut short by a crash
                    continue
                raise BadStore(f"line {number} of its journal is not JSON") from None
            try:
                history.apply(parsed)
            except KeyError as error:
                raise BadStore(f"line {number} of its journal lacks the field {error}") from None
            except (TypeError, ValueError, IndexError) as error:
                raise BadStore(f"line {number} of its journal: {error}") from None
        history.close_step()  # a step begun and never recorded: the record stops there
        return history

    def close_step(self) -> None:
        if self.open_step:
            turn, step = self.open_step
            self.incomplete.setdefault(turn, step)
            self.open_step = None

    def apply(self, line: dict) -> None:
        event = line["event"] if isinstance(line, dict) else None
        if event == "store":
            self.workdir = checked_workdir(line["workdir"])
        elif event == "step":  # its tools are about to run; the steps before are recorded
            turn, step = checked_number(line["turn"]), checked_number(line["step"])
            if self.open_step and self.open_step[0] != turn:
                self.close_step()  # the agent stopped before that turn's record ended
            self.open_step = (turn, step)
            self.last_turn = max(self.last_turn, turn)
        elif event == "recorded":
            checked_number(line["turn"])
            self.open_step = None
        elif event == "turn":
            self.close_step()
            turn = checked_number(line["turn"])
            self.tasks[turn] = checked_text(line["task"])
            if "workdir" in line:
                self.workdirs[turn] = checked_workdir(line["workdir"])
            self.last_turn = max(self.last_turn, turn)
        elif event == "changes":
            turn = checked_number(line["turn"])
            if turn not in self.tasks:
                raise ValueError(f"changes of turn {turn}, which has not begun")
            if turn not in self.done:
                self.done.append(turn)
                self.undone.clear()  # new work: what was undone before it stays undone
            merged = self.changes.setdefault(turn, {})
            for path, before, after in checked_changes(line["changes"]):
                merged[path] = [merged[path][0] if path in merged else before, after]
        elif event in ("undo", "redo"):
            turn, took = checked_number(line["turn"]), list(checked_changes(line["took"]))
            paths = [checked_path(path) for path in line["paths"]]
            if event == "undo":
                if turn not in self.done:
                    raise ValueError(f"an undo of turn {turn}, which is not in force")
                self.done.remove(turn)
                self.undone.append((turn, took))
            else:
                if not self.undone or self.undone[-1][0] != turn:
                    raise ValueError(f"a redo of turn {turn}, which was not the last undone")
                self.undone.pop()
                self.done.append(turn)
            self.events_untold.append({"event": event, "paths": paths})
        elif event == "told":
            self.events_untold.clear()
        else:
            raise ValueError(f"an unknown event {event!r}")

    def workdir_of(self, turn: int) -> str | None:
        return self.workdirs.get(turn, self.workdir)

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


def checked_number(value) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(f"{value!r} is not a number of a turn")
    return value


def checked_text(value) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{value!r} is not text")
    return value


def checked_workdir(value) -> str:
    if not isinstance(value, str) or not os.path.isabs(value) or "\0" in value:
        raise ValueError(f"{value!r} is not a folder's full path")
    return value


def checked_path(value) -> str:
    """A path of the journal: relative, in "/" parts, none empty, "." or "..", none .git, none
    holding a character that would make it reach elsewhere on this system."""
    if not isinstance(value, str) or "\0" in value:
        raise ValueError(f"{value!r} is not a path")
    odd = "\\:" if sys.platform == "win32" else ""
    for part in value.split("/"):
        if part in ("", ".", "..") or part in SKIPPED_FOLDERS or any(c in part for c in odd):
            raise ValueError(f"the path {value!r} is not one inside the workdir")
    return value


def checked_entry(entry) -> dict | None:
    if entry is None:
        return None
    kind = entry["type"] if isinstance(entry, dict) else None
    if kind in ("file", "dir"):
        mode = checked_number(entry["mode"])
        if mode > 0o7777:
            raise ValueError(f"{mode!r} is not a mode")
    if kind == "file":
        checked_number(entry["size"])
        if not isinstance(entry["mtime"], int):
            raise ValueError("a file's mtime is not a number")
        if entry["hash"] is not None and not HASH.fullmatch(str(entry["hash"])):
            raise ValueError(f"{entry['hash']!r} is not a hash")
    elif kind == "link":
        if "\0" in checked_text(entry["target"]):
            raise ValueError("a link's target holds a NUL")
    elif kind != "dir":
        raise ValueError(f"{entry!r} is not an entry")
    return entry


def checked_changes(changes) -> list:
    if not isinstance(changes, list):
        raise ValueError("the changes are not a list")
    checked = []
    for change in changes:
        path, before, after = change
        checked.append((checked_path(path), checked_entry(before), checked_entry(after)))
    return checked


# --- Taking a turn back, and putting it back ----------------------------------------------


def take_back(
    folder: str | os.PathLike,
    action: str,
    force: bool,
    how_to_force: str,
    workdirs: list[str],
    name: str,
    events,
) -> bool:
    """--undo or --redo (action "undo" or "redo") of the conversation name whose store is
    folder and whose transcript recorded workdirs, told to events (minimal_agent/core/events.py)
    one line per file; False, with the line that says why, if nothing was done."""
    say = events.notice
    try:
        turn, task, lines = (undo if action == "undo" else redo)(folder, force, workdirs)
    except NothingToDo as error:
        say(f"nothing to {action}: {error}")
        return False
    except BadStore as error:
        say(
            f"not {action}ne: the undo record of the conversation {name} does not check out "
            f"({error}); nothing was changed"
        )
        return False
    except Conflict as error:
        if error.through_links:
            say(
                f"not {action}ne: a folder on the way to {', '.join(error.paths)} is now a link "
                "(or a file), and nothing is written through a link; nothing was restored. Put "
                f"the folder back (or move what is there away) and {action} again"
            )
            return False
        again = how_to_force.split()[0].replace(action, "redo" if action == "undo" else "undo")
        say(
            f"not {action}ne: changed since (by you, an editor or another program), and "
            f"{action}ing would overwrite it: {', '.join(error.paths)}; nothing was restored. "
            f"To {action} anyway: {how_to_force} (what it overwrites is kept: {again} puts it "
            "back)"
            + "".join(f"; {line}" for line in incomplete_lines(History.read(Path(folder)), 0))
        )
        return False
    except OSError as error:
        where = f" ({error.filename})" if error.filename else ""
        say(f"{action} stopped: {error.strerror or error}{where}; what was restored "
                    "before it stays, and the journal was not changed")  # fmt: skip
        return False
    history = History.read(Path(folder))
    short = incomplete_lines(history, turn) if action == "undo" else []
    partly = "partly " if action == "undo" and turn in history.incomplete else ""
    say(f"{partly}{action.replace('do', 'did')} turn {turn} ({one_line(task, 60)}):")
    for line in lines + short:
        say(f"  {line}")
    return not short


def incomplete_lines(history: History, turn: int) -> list[str]:
    """For --undo of turn (0: none could be): a line for it and for each later turn whose
    record stops short (a full disk, the agent killed mid-step), whose changes from there on
    stay as they are."""
    return [
        f"not undone: what turn {late} changed from step {step} on: its record is incomplete "
        "(the disk was full, or the agent was stopped); check those files yourself"
        for late, step in sorted(history.incomplete.items()) if late >= turn
    ]  # fmt: skip


def has_turn_to(folder: Path, action: str) -> bool:
    """Whether the store folder holds a turn to undo (action "undo") or to redo; a store that
    does not check out counts, so that taking it back says why it cannot."""
    if not folder.is_dir():
        return False
    try:
        history = History.read(folder)
    except BadStore:
        return True
    return bool(history.done if action == "undo" else history.undone)


def undo(folder, force: bool = False, workdirs: list[str] = ()) -> tuple[int, str, list[str]]:
    """Put the workdir back as it was before the last turn in force; returns the turn, its
    task and one line per path. Conflict (nothing restored) if a path changed since, unless
    force; NothingToDo if no turn is left; BadStore if the store does not check out."""
    history = History.read(Path(folder))
    if not history.done:
        short = incomplete_lines(history, 0)
        raise NothingToDo(
            "no turn of this conversation changed a file that is not undone yet"
            + "".join(f"; {line}" for line in short)
        )
    turn = history.done[-1]
    changes = history.changes[turn]
    expected = {path: after for path, (before, after) in changes.items()}
    wanted = {path: before for path, (before, after) in changes.items()}
    root = turn_workdir(history, turn, workdirs)
    lines = restore(folder, root, "undo", turn, expected, wanted, force)
    return turn, history.tasks.get(turn, ""), lines


def redo(folder, force: bool = False, workdirs: list[str] = ()) -> tuple[int, str, list[str]]:
    """Put back exactly what the last undo took away (the same returns as undo's)."""
    history = History.read(Path(folder))
    if not history.undone:
        raise NothingToDo("there is no undo to take back")
    turn, took = history.undone[-1]
    expected = {path: restored for path, _, restored in took}
    wanted = {path: taken for path, taken, _ in took}
    root = turn_workdir(history, turn, workdirs)
    lines = restore(folder, root, "redo", turn, expected, wanted, force)
    return turn, history.tasks.get(turn, ""), lines


def turn_workdir(history: History, turn: int, workdirs: list[str]) -> str:
    """The workdir turn ran in, if the conversation's transcript recorded it (the store alone
    is not believed); BadStore else."""
    root = history.workdir_of(turn)
    recorded = {os.path.normcase(folder) for folder in workdirs}
    if root is None or os.path.normcase(root) not in recorded:
        raise BadStore(f"turn {turn} names the workdir {root}, which the conversation never had")
    if not os.path.isdir(root):
        raise BadStore(f"the workdir of turn {turn}, {root}, is gone")
    if os.path.normcase(os.path.realpath(root)) != os.path.normcase(root):
        raise BadStore(f"the workdir of turn {turn}, {root}, now leads elsewhere through a link")
    return root


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


def restore(folder, root: str, event: str, turn: int, expected: dict, wanted: dict,
            force: bool) -> list:  # fmt: skip
    """Make each path hold its wanted entry, if each holds its expected one now (else
    Conflict, nothing changed; with force, whatever it holds is replaced; a path reached
    through a link is refused, force or not). What is taken away is kept first, and the
    journal says what each path held and holds now, so that the opposite can put it back.
    Returns one line per path."""
    folder = Path(folder)
    # Opened first: a journal that cannot be opened (a link in its place) stops it before
    # anything changes, not after.
    journal = files.open_record(folder / JOURNAL)
    blobs = Blobs(folder)
    try:
        for entry in wanted.values():  # every content it needs is there: checked first
            if entry and entry["type"] == "file" and entry["hash"]:
                blobs.get(entry["hash"])
        found, linked = {}, []
        for path in wanted:
            try:
                found[path] = look(root, path, blobs)
            except OnTheWay:
                linked.append(path)
        if linked:
            raise Conflict(sorted(linked), through_links=True)
        changed = sorted(path for path in wanted if not same(found[path], expected[path]))
        changed += strangers(root, wanted, found)
        if changed and not force:
            raise Conflict(changed)
        # A file that was not kept (too large) stays as it is, and is named.
        lost = {p for p, e in wanted.items() if e and e["type"] == "file" and e["hash"] is None}
        now = {path: found[path] if path in lost else wanted[path] for path in wanted}
        put_back(root, now, found, blobs)
        took = [[path, found[path], now[path]] for path in sorted(wanted)]
        paths = [path for path in sorted(wanted) if path not in lost]
        line = {"event": event, "turn": turn, "took": took, "paths": paths}
        files.append_whole(journal, (json.dumps(line) + "\n").encode("ascii"))
    finally:
        blobs.close()
        journal.close()
    return describe(took, {path: wanted[path] for path in sorted(lost)})


# --- The workdir's paths, reached one folder at a time, never through a link -----------------


class OnTheWay(OSError):
    """A folder on the way to a path is a link or a file."""

    def __init__(self, path: str) -> None:
        super().__init__(f"a folder on the way to {path} is now a link or a file")


class Missing(OSError):
    """A folder on the way to a path is not there."""


@contextlib.contextmanager
def opened(root: str, path: str, create: bool = False, unlocked: dict | None = None):
    """(where, name) for path inside root: where a descriptor of its folder, each folder on
    the way opened relative to the one before without following a link (create: missing ones
    made); OnTheWay if one is a link or a file, Missing if one is not there. unlocked: a
    folder we may not enter or write is given its owner's rights, its mode noted there to be
    put back (a turn can leave a folder read-only). Without folder descriptors (Windows),
    where is None and name the whole path, each folder on the way checked by name."""
    parts = path.split("/")
    if not files.WALKS:
        full = root
        for part in parts[:-1]:
            full = os.path.join(full, part)
            try:
                info = os.lstat(full)
            except FileNotFoundError:
                if not create:
                    raise Missing(path) from None
                os.mkdir(full)
                continue
            if not stat.S_ISDIR(info.st_mode) or getattr(os.path, "isjunction", bool)(full):
                raise OnTheWay(path)
        yield None, os.path.join(full, parts[-1])
        return
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        prefix = ""
        for part in parts[:-1]:
            try:
                inner = open_folder(fd, part, prefix, unlocked)
            except FileNotFoundError:
                if not create:
                    raise Missing(path) from None
                writable_folder(fd, prefix, unlocked)
                os.mkdir(part, 0o700, dir_fd=fd)
                inner = open_folder(fd, part, prefix, unlocked)
            except OSError as error:
                if error.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise OnTheWay(path) from None
                raise
            os.close(fd)
            fd, prefix = inner, f"{prefix}{part}/"
        yield fd, parts[-1]
    finally:
        os.close(fd)


def open_folder(fd: int, name: str, prefix: str, unlocked: dict | None) -> int:
    try:
        return os.open(name, OPEN_FOLDER, dir_fd=fd)
    except PermissionError:
        if unlocked is None:
            raise
        info = os.stat(name, dir_fd=fd, follow_symlinks=False)
        if not stat.S_ISDIR(info.st_mode):
            raise
        os.chmod(name, stat.S_IMODE(info.st_mode) | 0o700, dir_fd=fd)
        unlocked.setdefault(prefix + name, stat.S_IMODE(info.st_mode))
        return os.open(name, OPEN_FOLDER, dir_fd=fd)


def writable_folder(where: int | None, prefix: str, unlocked: dict | None) -> None:
    """Give the folder open at where its owner's rights if it lacks them (noted in unlocked,
    to be put back), so that a folder a turn made read-only can be restored into."""
    if where is None or unlocked is None:
        return
    mode = stat.S_IMODE(os.fstat(where).st_mode)
    if mode & 0o700 != 0o700:
        os.fchmod(where, mode | 0o700)
        unlocked.setdefault(prefix.rstrip("/"), mode)


def look(root: str, path: str, blobs: Blobs) -> dict | None:
    """What path holds now, reached without following a link (OnTheWay if one is on the
    way); a file's content is added to blobs, so that what is taken away is kept."""
    try:
        with opened(root, path) as (where, name):
            try:
                info = os.stat(name, dir_fd=where, follow_symlinks=False)
            except (FileNotFoundError, NotADirectoryError):
                return None
            mode = info.st_mode
            if stat.S_ISDIR(mode):
                return {"type": "dir", "mode": stat.S_IMODE(mode)}
            if stat.S_ISLNK(mode):
                return {"type": "link", "target": os.readlink(name, dir_fd=where)}
            if not stat.S_ISREG(mode):
                return None
            digest = None
            if info.st_size <= MAX_KEPT:
                with contextlib.suppress(OSError):
                    fd = os.open(name, OPEN_FILE, dir_fd=where)
                    with os.fdopen(fd, "rb") as file:
                        if stat.S_ISREG(os.fstat(fd).st_mode):
                            digest = blobs.add(file.read())
            return {"type": "file", "mode": stat.S_IMODE(mode), "hash": digest,
                    "size": info.st_size, "mtime": info.st_mtime_ns}  # fmt: skip
    except Missing:
        return None


def strangers(root: str, wanted: dict, found: dict) -> list[str]:
    """What lies in a folder to be removed and is not the turn's: it would be lost."""
    odd = []
    for path, entry in found.items():
        if entry and entry["type"] == "dir" and wanted[path] is None:
            for name in list_folder(root, path):
                if f"{path}/{name}" not in wanted:
                    odd.append(f"{path}/{name}")
    return sorted(odd)


def list_folder(root: str, path: str) -> list[str]:
    with opened(root, path) as (where, name):
        if where is None:
            return os.listdir(name)
        fd = os.open(name, OPEN_FOLDER, dir_fd=where)
        try:
            return os.listdir(fd)
        finally:
            os.close(fd)


def put_back(root: str, wanted: dict, found: dict, blobs: Blobs) -> None:
    """Remove what must go (deepest first), then make folders, files and links (shallowest
    first), then set the folders' modes (deepest first, so a read-only one comes last); a
    folder that had to be opened up on the way gets its own mode back."""
    depth = sorted(wanted, key=lambda path: path.count("/"))
    unlocked: dict[str, int] = {}
    try:
        for path in reversed(depth):
            now, target = found[path], wanted[path]
            if now and (target is None or target["type"] != now["type"] or now["type"] == "link"):
                with opened(root, path, unlocked=unlocked) as (where, name):
                    writable_folder(where, parent(path), unlocked)
                    remove(where, name, now)
        for path in depth:
            target = wanted[path]
            if target is None:
                continue
            with opened(root, path, create=True, unlocked=unlocked) as (where, name):
                writable_folder(where, parent(path), unlocked)
                if target["type"] == "dir":
                    with contextlib.suppress(FileExistsError):
                        os.mkdir(name, 0o700, dir_fd=where)
                elif target["type"] == "link":
                    os.symlink(target["target"], name, dir_fd=where)
                elif not same(found[path], target):
                    write_file(where, name, blobs.get(target["hash"]), target)
        for path in reversed(depth):
            target = wanted[path]
            if target and target["type"] == "dir":
                set_mode(root, path, target["mode"], unlocked)
                unlocked.pop(path, None)
    finally:
        for path in sorted(unlocked, key=lambda path: -path.count("/") - bool(path)):
            if path:
                set_mode(root, path, unlocked[path], None)
            else:
                os.chmod(root, unlocked[path])


def parent(path: str) -> str:
    return path.rpartition("/")[0]


def set_mode(root: str, path: str, mode: int, unlocked: dict | None) -> None:
    """A folder's mode, set through its own descriptor (never through a link)."""
    with opened(root, path, unlocked=unlocked) as (where, name):
        if where is None:
            os.chmod(name, mode)
            return
        try:
            fd = os.open(name, OPEN_FOLDER, dir_fd=where)
        except PermissionError:  # no read right on it: set by name, after checking it
            if stat.S_ISDIR(os.stat(name, dir_fd=where, follow_symlinks=False).st_mode):
                os.chmod(name, mode, dir_fd=where)
            return
        try:
            os.fchmod(fd, mode)
        finally:
            os.close(fd)


def remove(where: int | None, name: str, entry: dict) -> None:
    writable(where, name)
    if entry["type"] == "dir":
        os.rmdir(name, dir_fd=where)
    else:
        os.unlink(name, dir_fd=where)


def writable(where: int | None, name: str) -> None:
    """Windows refuses to replace or delete a read-only file: its read-only flag goes first."""
    if os.name == "nt" and os.path.exists(name):
        os.chmod(name, stat.S_IWRITE | stat.S_IREAD)


def write_file(where: int | None, name: str, data: bytes, entry: dict) -> None:
    """The file's bytes, mode and modification time, through a temporary file renamed over:
    a new file (never one planted there, a link or a FIFO) with a name no one can guess."""
    folder_part, base = os.path.split(name)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | files.NOFOLLOW | getattr(os, "O_BINARY", 0)
    for _ in range(100):
        temporary = os.path.join(folder_part, f".{base}.{os.urandom(8).hex()}.undo")
        try:
            fd = os.open(temporary, flags, 0o600, dir_fd=where)
            break
        except FileExistsError:
            continue
    else:
        raise FileExistsError(errno.EEXIST, "no free temporary name", name)
    try:
        with os.fdopen(fd, "wb") as file:
            file.write(data)
            file.flush()
            by_fd = os.chmod in os.supports_fd and os.utime in os.supports_fd
            os.chmod(fd if by_fd else temporary, entry["mode"])
            os.utime(fd if by_fd else temporary, ns=(entry["mtime"], entry["mtime"]))
        writable(where, name)
        os.replace(temporary, name, src_dir_fd=where, dst_dir_fd=where)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary, dir_fd=where)
        raise


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


def show_last_turn(folder, events) -> None:
    """/diff: what the last turn in force changed, file by file (folder: its changes store),
    told to events (minimal_agent/core/events.py)."""
    say = events.notice
    found = last_turn_changes(folder) if folder else None
    if not found:
        say("/diff: no turn of this conversation changed a file (or all are undone)")
        return
    turn, paths = found
    say(f"turn {turn} changed {diffs.plural(len(paths), 'path')}:")
    for path, (before, after) in sorted(paths.items()):
        kinds = {(before or {}).get("type"), (after or {}).get("type")} - {None}
        if kinds != {"file"}:
            what = "folder" if "dir" in kinds else "link"
            said = "made" if before is None else "removed" if after is None else "changed"
            say(f"  {what} {said}: {path}")
            continue
        old = None if before is None else content(folder, before)
        new = b"" if after is None else content(folder, after)
        if (before and old is None) or new is None:
            say(f"  {path}: not kept (over {MAX_KEPT // 2**20} MB)")
        elif after is None:
            say(f"  deleted: {path}")
        else:
            summary, lines = diffs.change(old, new, path)
            say(f"  {path}: {summary}")
            events.emit("diff", lines=lines, everywhere=True)
