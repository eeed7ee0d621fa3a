"""What a tool gives back: the text the model gets from whatever the tool returned, and what
the tool prints kept off stdout (where only the answer goes), so a learner's new tool may
return a dict and call print() as plain Python invites."""

from __future__ import annotations

import contextlib
import json
import sys


def as_text(result: object) -> str:
    """A tool's return value as the tool message's text: a str as it is; bytes decoded as UTF-8
    (undecodable bytes as U+FFFD); a dict, list or other JSON value as JSON; anything else as
    str() gives it."""
    if isinstance(result, str):
        return result
    if isinstance(result, bytes | bytearray):
        return bytes(result).decode("utf-8", "replace")
    if isinstance(result, dict | list | tuple | int | float | bool) or result is None:
        try:
            return json.dumps(result, ensure_ascii=False, default=str)
        except ValueError:  # a structure that contains itself
            return str(result)
    return str(result)


@contextlib.contextmanager
def printed_to_stderr():
    """What is printed inside goes to stderr, beside the step lines, not to stdout."""
    with contextlib.redirect_stdout(sys.stderr):
        yield
