"""A settings file a run changed is not read again until the user saves it: a command the
agent ran may have written it (LLM_BASE_URL would take the key elsewhere; an allow rule or an
MCP server would run at the next start). Its state is recorded beside it after the run."""

from __future__ import annotations

import contextlib
import json
import os

from minimal_agent.common import files
from minimal_agent.common.errors import AgentError

CHANGED_BY_A_RUN = ".changed-by-a-run"  # beside the settings file: as a run left it


def settings_state(path: str | os.PathLike) -> list[int] | None:
    """What tells a settings file changed (None: there is none): its inode, size, and its
    modification and inode-change times (the last can be set by no one, and any write or
    save, a `touch` too, moves it)."""
    try:
        found = os.stat(path)
    except OSError:
        return None
    return [found.st_dev, found.st_ino, found.st_size, found.st_mtime_ns, found.st_ctime_ns]


def note_settings_changed(path: str | os.PathLike, before: list[int] | None) -> bool:
    """After a run: whether the settings file at path changed since its start (state before),
    and if so, its state now recorded beside it, so the next start does not read it unasked
    (see refuse_settings_changed_by_a_run). A run's commands could have written it."""
    now = settings_state(path)
    if now is None or now == before:
        return False
    with files.replacing(str(path) + CHANGED_BY_A_RUN) as (file, _):  # never through a link
        file.write(json.dumps(now).encode("utf-8"))
    return True


def refuse_settings_changed_by_a_run(path: str | os.PathLike) -> None:
    """Refuse, in one line, to read a settings file that is as a run of the agent left it
    after changing it (LLM_BASE_URL would take the key elsewhere): read by the user and saved
    again, it is read again."""
    record = str(path) + CHANGED_BY_A_RUN
    try:
        with open(record, "rb") as file:
            left = json.loads(file.read())
    except (OSError, ValueError):
        return
    if left != settings_state(path):  # saved since: the user's
        with contextlib.suppress(OSError):
            os.unlink(record)
        return
    raise AgentError(
        f"{path} was changed while the agent ran (by a command it ran, or by you meanwhile), "
        "so it is not read: look at what it sets (LLM_BASE_URL gets your key), then save it "
        "again (or touch it) to have it read"
    )
