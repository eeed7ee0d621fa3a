"""Text made safe and short for a terminal: control characters shown as escapes, one line cut
to a width in columns (a wide character takes two). The views show it; the rest of the package
uses it to quote the model or a server inside a message."""

from __future__ import annotations

import json


def short_arguments(arguments: str) -> str:
    """A call's arguments as key=value pairs, each shortened; anything else shortened as it is."""
    try:
        args = json.loads(arguments or "{}")
    except (ValueError, RecursionError):  # not JSON, too deep, a 5,000-digit number
        return one_line(arguments, 80)
    if not isinstance(args, dict):
        return one_line(arguments, 80)
    pairs = (f"{one_line(key, 40)}={one_line(repr(value), 60)}" for key, value in args.items())
    return ", ".join(pairs)


def one_line(text: object, width: int = 100) -> str:
    """text on one line, shortened to width columns with "...", control characters as
    escapes (a wide character takes two columns)."""
    collapsed = " ".join(str(text).split())
    # Only what can show is escaped: each character escapes to one or more, so the first
    # width + 1 decide both whether it fits and where it is cut (a 10 MB argument took seconds).
    flat = visible(collapsed[: width + 1])
    if len(flat) <= width and columns_of(flat) <= width:
        return flat
    return "".join(fitting(list(flat[:width]), width - 3)) + "..."


def visible(text: str, keep: str = "") -> str:
    """text with every character that would act on a terminal or hide what follows shown as an
    escape (ESC as \\x1b, a carriage return as \\r, U+202E as \\u202e): control characters
    (C0, DEL, C1), format characters (bidi and invisible ones), line and paragraph separators,
    whatever str.isprintable() refuses. The characters in keep stay as they are."""
    if text.isprintable():  # the common case, at C's speed
        return text
    return "".join(c if c.isprintable() or c in keep else repr(c)[1:-1] for c in text)


def fitting(pieces: list[str], width: int) -> list[str]:
    """The first pieces that fit in width columns together."""
    taken, used = [], 0
    for piece in pieces:
        used += columns_taken(piece)
        if used > width:
            break
        taken.append(piece)
    return taken


def columns_taken(piece: str) -> int:
    """The columns a character (or its escape) takes: two for a wide one (CJK, most emoji)."""
    import unicodedata  # here, not at the top, to keep --help's start-up fast

    wide = len(piece) == 1 and unicodedata.east_asian_width(piece) in ("W", "F")
    return 2 if wide else len(piece)


def columns_of(text: str) -> int:
    """The columns text (escaped already: every character printable) takes on one row."""
    return len(text) if text.isascii() else sum(map(columns_taken, text))
