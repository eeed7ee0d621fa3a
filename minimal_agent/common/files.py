"""What the file tools and every tool result need beyond the lesson: reading only the two ends
of a large file, telling the model what a file that is not UTF-8 text is, writing a file
atomically, and capping a result at the model's limit; and the one way the agent writes its
own files (records, pages): never through a link, each record's line whole or not at all."""

from __future__ import annotations

import codecs
import contextlib
import errno
import os
import re
import stat


def inside(folder: str, path: str) -> bool:
    """Whether path is folder or lies in it (real paths; whole components compared, so
    /w/play2 is not in /w/play; case as the platform compares it)."""
    folder, path = os.path.normcase(folder), os.path.normcase(path)
    try:
        return os.path.commonpath([folder, path]) == folder
    except ValueError:  # Windows: on another drive
        return False


def refuse_private(target: str, private: list[str], name: str) -> None:
    """PermissionError if target (a real path) is one of private's paths or lies in one: the
    user's own (the config folder with the key, the sessions folder, this conversation's
    records: Workspace.private), which no tool reads or writes, whatever the workdir holds."""
    if any(inside(path, target) for path in private):
        raise PermissionError(
            f"{name} is among the user's own files (the agent's settings, or the agent's own "
            "records: transcripts and undo stores), which the tools may not read or write"
        )


def refuse_git(folder: str, file: str, name: str) -> None:
    """PermissionError if file (a real path in folder) lies in a .git folder: git runs what
    its config and hooks name (core.fsmonitor, core.sshCommand, pre-commit) the next time the
    user runs git, outside any sandbox, and neither undo nor /diff would show it. name: how
    to call the file (with the link that leads there)."""
    parts = os.path.relpath(file, folder).split(os.sep)
    if any(part.lower().rstrip(". ") == ".git" for part in parts):  # Windows: ".GIT." is .git
        raise PermissionError(
            f"{name} lies in a .git folder, whose config and hooks git runs: the agent does not "
            "write there; tell the user what to change instead"
        )


def keep(limit: int) -> int:
    """How many characters of a long text are kept at each end (room left for the marker)."""
    return (limit - 100) // 2


def capped(text: str, limit: int) -> str:
    """text as a tool result: at most about limit characters (its head and tail, and how much
    was left out between them), and never a lone surrogate (from a JSON escape such as
    "\\ud800"), which could not be sent."""
    text = text.encode("utf-8", "replace").decode("utf-8")
    if len(text) <= limit:
        return text
    size = keep(limit)
    return joined(text[:size], text[-size:], len(text) - 2 * size, "characters")


def joined(head: str, tail: str, omitted: int, unit: str) -> str:
    return f"{head}\n[... {omitted} {unit} left out ...]\n{tail}" if omitted > 0 else head + tail


def read_capped(folder: str, file: str, limit: int) -> str:
    """A file's text for the model; of a file larger than limit only its two ends are read,
    however large it is. Text that is not UTF-8 is decoded as what it most likely is, after a
    line that says so; a binary file is named by its size and type instead of its bytes. file
    is a real path inside folder (as Workspace.path gives it); see open_regular."""
    with open_regular(folder, file) as f:
        size = os.fstat(f.fileno()).st_size
        if size <= limit:  # a byte never decodes to more than one character
            head, tail = f.read(), b""
        else:
            ends = keep(limit)
            head = f.read(ends)
            f.seek(-ends, os.SEEK_END)
            tail = f.read()
    name = os.path.basename(file)
    if looks_binary(head):
        return (
            f"[{name} is a binary file ({size:,} bytes, {binary_type(head, name)}), not text: "
            "its bytes are not shown; run_shell can inspect it]"
        )
    encoding = text_encoding(head, cut=bool(tail))
    text = head.decode(encoding, "replace")
    if tail:
        text = joined(text, tail.decode(encoding, "replace"), size - len(head) - len(tail), "bytes")
    if encoding in ("utf-8", "ascii"):
        return text
    return (
        f"[{name} is not UTF-8 text: it was decoded as {ENCODING_NAMES[encoding]}; write_file "
        f"would save it as UTF-8]\n{text}"
    )


def looks_binary(data: bytes) -> bool:
    """Whether data is the start of a binary file: a NUL byte (as git and grep judge it, but
    not in UTF-16 text, which begins with its byte order mark), or mostly control bytes."""
    sample = data[:8192]
    if sample.startswith(UTF16_MARKS):
        return False
    controls = sum(1 for byte in sample if byte < 32 and byte not in TEXT_CONTROLS)
    return b"\0" in sample or controls > len(sample) // 10


def text_encoding(data: bytes, cut: bool = False) -> str:
    """The encoding data (the start of a text file; cut: it goes on after data) is most likely
    in: UTF-8 (a character cut in two at the end is no mistake); UTF-16 by its byte order mark;
    GB18030 where every non-ASCII byte is in a pair of high bytes, as Chinese text is; else
    Windows' Latin-1 (cp1252), or ISO Latin-1, which decodes any byte."""
    if data.startswith(b"\xef\xbb\xbf"):
        return "utf-8-sig"
    if data.startswith(UTF16_MARKS):
        return "utf-16"
    try:
        codecs.getincrementaldecoder("utf-8")().decode(data, final=not cut)
        return "utf-8"
    except UnicodeDecodeError:
        pass
    runs = re.findall(rb"[\x80-\xff]+", data[:-1] if cut else data)
    if all(len(run) % 2 == 0 and min(run) >= 0x81 for run in runs):
        with contextlib.suppress(UnicodeDecodeError):
            data.decode("gb18030")
            return "gb18030"
    with contextlib.suppress(UnicodeDecodeError):
        data.decode("cp1252")
        return "cp1252"
    return "latin-1"


UTF16_MARKS = (b"\xff\xfe", b"\xfe\xff")
TEXT_CONTROLS = b"\t\n\r\f\b\x1b"  # control bytes that text files hold
ENCODING_NAMES = {
    "utf-8-sig": "UTF-8 with a byte order mark",
    "utf-16": "UTF-16",
    "gb18030": "GB18030 (GBK, Chinese)",
    "cp1252": "Windows Latin-1 (cp1252)",
    "latin-1": "ISO Latin-1",
}
BINARY_SIGNATURES = {  # a file's first bytes, and the type they mark
    b"\x89PNG": "PNG image",
    b"\xff\xd8\xff": "JPEG image",
    b"GIF8": "GIF image",
    b"%PDF": "PDF document",
    b"PK\x03\x04": "ZIP archive (or a docx, xlsx, jar, wheel)",
    b"\x1f\x8b": "gzip archive",
    b"\x7fELF": "ELF executable",
    b"MZ": "Windows executable",
    b"SQLite format 3\0": "SQLite database",
    b"\0asm": "WebAssembly module",
    b"\xca\xfe\xba\xbe": "Java class file",
}


def binary_type(data: bytes, name: str) -> str:
    """What a binary file is, by its first bytes, else by its name's extension."""
    import mimetypes  # here, not at the top, to keep --help's start-up fast

    for signature, kind in BINARY_SIGNATURES.items():
        if data.startswith(signature):
            return kind
    guessed, _ = mimetypes.guess_type(name)
    return guessed or "type unknown"


def open_regular(folder: str, file: str):  # -> a binary file open for reading
    """file (a real path inside folder, as Workspace.path gives it) open for reading, if it is
    a regular file; else OSError: IsADirectoryError, or NotARegularFile (a FIFO, a device, a
    socket). Opening never blocks (a FIFO without a writer would), and, where the platform
    allows, no link swapped in after the check leads outside folder (see parent_of)."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0)
    with parent_of(folder, file) as (where, name):
        fd = os.open(name, flags | NOFOLLOW, dir_fd=where)
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise IsADirectoryError(f"{os.path.basename(file)} is a folder, not a file")
        if not stat.S_ISREG(mode):
            raise NotARegularFile(f"{os.path.basename(file)} is {kind(mode)}, not a regular file")
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


class NotARegularFile(OSError):
    """A FIFO, a device or a socket where a file was to be read."""


def kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "a socket" if stat.S_ISSOCK(mode) else "something else"


def write_atomically(folder: str, file: str, content: str | bytes) -> int:
    """Write content (text as UTF-8) to file (a real path inside folder, as Workspace.path gives it)
    through a temporary file renamed over it, creating its folders; an existing file keeps its
    mode. Where the platform allows, no link swapped in after the check leads the write
    outside folder (see parent_of). Returns the number of bytes written."""
    data = content if isinstance(content, bytes) else content.encode("utf-8", "replace")
    with parent_of(folder, file, create=True) as (where, name):
        folder_part, base = os.path.split(name)  # folder_part: "" where name is in where
        temporary = os.path.join(folder_part, f".{base}.{os.urandom(6).hex()}.tmp")
        try:
            old = os.stat(name, dir_fd=where, follow_symlinks=False).st_mode
        except FileNotFoundError:
            old = None
        existing = old is not None and stat.S_ISREG(old)
        mode = old & 0o7777 if existing else 0o666  # os.open applies the umask
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | NOFOLLOW | getattr(os, "O_BINARY", 0)
        fd = os.open(temporary, flags, mode, dir_fd=where)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                if existing:  # exactly the old file's mode, umask or not
                    os.chmod(f.fileno() if os.chmod in os.supports_fd else temporary, mode)
            os.replace(temporary, name, src_dir_fd=where, dst_dir_fd=where)
        except BaseException:
            os.unlink(temporary, dir_fd=where)
            raise
    return len(data)


NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
# POSIX: each component is opened relative to its folder's descriptor. Windows has no such
# calls: there the path is checked (Workspace.path) and then used by name.
WALKS = bool(NOFOLLOW) and hasattr(os, "O_DIRECTORY") and os.open in os.supports_dir_fd


@contextlib.contextmanager
def parent_of(folder: str, file: str, create: bool = False):
    """(where, name) for file inside folder: where is a descriptor of file's folder and name
    its name in it, each folder on the way opened relative to the one before without following
    a link, from folder down (create: missing ones made), so a folder swapped for a link after
    Workspace.path's check stops the walk instead of leading outside. Where that cannot be done
    (Windows), where is None and name the whole path (its folders made if create)."""
    if not WALKS:
        if create:
            os.makedirs(os.path.dirname(file), exist_ok=True)
        yield None, file
        return
    parts = os.path.relpath(file, folder).split(os.sep)
    if parts[0] == os.pardir or os.path.isabs(parts[0]):
        raise PermissionError(f"{file} is outside the workdir")
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for part in parts[:-1]:
            if create:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, dir_fd=fd)
            try:
                inner = os.open(part, os.O_RDONLY | os.O_DIRECTORY | NOFOLLOW, dir_fd=fd)
            except OSError as error:
                if error.errno not in (errno.ELOOP, errno.ENOTDIR):
                    raise
                raise PermissionError(
                    f"{part} became a link or a file after the path was checked, so nothing "
                    "was done"
                ) from None
            os.close(fd)
            fd = inner
        yield fd, parts[-1]
    finally:
        os.close(fd)


# --- The agent's own files: records appended to, pages replaced ------------------------------


class LinkRefused(OSError):
    """A link (or a FIFO, a device, a folder) where the agent was to write one of its own
    files: nothing is written through it."""


def refuse_link(path: str | os.PathLike) -> None:
    """LinkRefused if path is a symbolic link, or anything but a regular file (a missing
    path is fine)."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if stat.S_ISLNK(mode):
        raise LinkRefused(
            errno.ELOOP,
            f"{path} is a link: the agent writes its files only where "
            "no link leads elsewhere; remove it or give another name",
        )
    if not stat.S_ISREG(mode):
        raise LinkRefused(errno.EINVAL, f"{path} is {kind(mode)}, not a regular file")


def why(error: OSError) -> str:
    """Why a file could not be written, in words: the reason, and the file where known."""
    reason = error.strerror or str(error)
    name = os.fsdecode(error.filename) if error.filename else ""
    return f"{reason}: {name}" if name and name not in reason else reason


RECORD_FLAGS = (
    os.O_WRONLY | os.O_APPEND | os.O_CREAT | NOFOLLOW | getattr(os, "O_NONBLOCK", 0)
    | getattr(os, "O_BINARY", 0)
)  # fmt: skip


def open_record(path: str | os.PathLike, new: bool = False):  # -> an unbuffered binary file
    """One of the agent's records (a transcript, the wire record, undo's journal and contents)
    open to append to, unbuffered (so closing it writes nothing, and a
    full disk is met by the append that meets it: see append_whole), made owner-only (0o600)
    if missing; new: it must not exist yet. Never through a link: a symbolic link, a file with
    another name (a hard link), a FIFO or a device at path is refused (LinkRefused), and what
    it leads to is left as it was."""
    try:
        fd = os.open(path, RECORD_FLAGS | (os.O_EXCL if new else 0), 0o600)
    except OSError as error:
        if error.errno == errno.ELOOP or os.path.islink(path):
            refuse_link(path)
        raise
    try:
        found = os.fstat(fd)
        if not stat.S_ISREG(found.st_mode):  # opened without blocking: still not to be written
            raise LinkRefused(errno.EINVAL, f"{path} is {kind(found.st_mode)}, not a regular file")
        if found.st_nlink > 1:  # what is appended would change the file's other name too
            raise LinkRefused(
                errno.EMLINK,
                f"{path} is a link: it has another name (a hard "
                "link), which the agent does not write through; remove it",
            )
        return os.fdopen(fd, "ab", buffering=0)
    except BaseException:
        os.close(fd)
        raise


def append_whole(file, data: bytes) -> None:
    """data at the end of file (as open_record opens it), all of it or none of it: an append
    the disk refuses part way (ENOSPC, EDQUOT, EIO) is cut off again before the error goes on,
    so a record stays whole lines, and the next reader or writer finds no half of one."""
    start = file.seek(0, os.SEEK_END)
    rest = memoryview(data)
    try:
        while rest:
            rest = rest[file.write(rest) :]
    except OSError:
        with contextlib.suppress(OSError):
            file.truncate(start)
        raise


@contextlib.contextmanager
def replacing(path: str | os.PathLike):
    """A file the agent writes whole (a page, the prompt history): yields a new temporary
    file beside path, binary, open for writing, and its name; when the block ends well it is
    renamed onto path. The temporary's name is random and it is created exclusive without
    following a link (tempfile.mkstemp), so nothing planted beside path is written through;
    a link (or a FIFO, a device) at path itself is refused (LinkRefused) and left as it is.
    An error removes the temporary file. The new file is its owner's only (0o600)."""
    import tempfile  # here: its 4 ms (shutil, random) would slow every start, --help's too

    folder, name = os.path.split(os.path.abspath(path))
    refuse_link(path)
    fd, temporary = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "wb") as file:
            yield file, temporary
        refuse_link(path)  # a rename replaces a link swapped in now, never writes its target
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
