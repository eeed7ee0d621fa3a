"""What the file tools and every tool result need beyond the lesson: reading only the two ends
of a large file, writing a file atomically, and capping a result at the model's limit."""

from __future__ import annotations

import os


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


def read_capped(file: str, limit: int) -> str:
    """A file's text (UTF-8, undecodable bytes as U+FFFD); of a file larger than limit only its
    two ends are read, however large it is."""
    size = os.path.getsize(file)
    with open(file, "rb") as f:
        if size <= limit:  # a byte never decodes to more than one character
            return f.read().decode("utf-8", "replace")
        ends = keep(limit)
        head = f.read(ends).decode("utf-8", "replace")
        f.seek(-ends, os.SEEK_END)
        tail = f.read().decode("utf-8", "replace")
    return joined(head, tail, size - 2 * ends, "bytes")


def write_atomically(file: str, content: str) -> int:
    """Write content (UTF-8) to file through a temporary file renamed over it, creating its
    folders; an existing file keeps its mode. Returns the number of bytes written."""
    folder, name = os.path.split(file)
    os.makedirs(folder, exist_ok=True)
    data = content.encode("utf-8", "replace")
    temporary = os.path.join(folder, f".{name}.{os.getpid()}.tmp")
    existing = os.path.exists(file)
    mode = os.stat(file).st_mode & 0o7777 if existing else 0o666  # os.open applies the umask
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        if existing:
            os.chmod(temporary, mode)  # exactly the old file's mode, umask or not
        os.replace(temporary, file)
    except BaseException:
        os.unlink(temporary)
        raise
    return len(data)
