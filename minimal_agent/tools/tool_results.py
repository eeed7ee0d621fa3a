"""What a tool gives back: the text the model gets from whatever the tool returned, what the
tool prints kept off stdout (where only the answer goes), and its sys.exit() made an error, so
a learner's new tool may return a dict, call print() and give up as plain Python invites."""

from __future__ import annotations

import contextlib
import json
import sys

from minimal_agent.tools.processes import Terminated


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


class ToolExited(Exception):
    """A tool called sys.exit(): an error for the model, as any other exception is."""


@contextlib.contextmanager
def contained():
    """Around a tool's call: what it prints goes to stderr, beside the step lines, not to
    stdout; its sys.exit() ends the tool, not the agent (ToolExited). The agent's own exit on a
    termination signal (processes.Terminated) goes on."""
    with contextlib.redirect_stdout(sys.stderr):
        try:
            yield
        except Terminated:
            raise
        except SystemExit as end:
            raise ToolExited(
                f"the tool called sys.exit({end.code!r}), which ends the tool only"
            ) from None
