"""The file tools tried as an attacker would: what the workdir holds in place of a file (a
FIFO, a socket, a device), a write whose diff would take minutes, a tool that calls
sys.exit(). Nothing a file holds may hang the agent or stop it."""

from __future__ import annotations

import os
import socket
import threading
import time

import pytest
from conftest import execute, use_workspace
from fake_model import tool_call

from minimal_agent.tools import diffs


@pytest.fixture
def tools(workdir):
    use_workspace(workdir, timeout=5, yes=True)
    return workdir


def write_within(seconds: float, path: str, content: str) -> str | None:
    """write_file's result, or None if it had not returned after seconds (it hangs)."""
    results: list[str] = []
    worker = threading.Thread(
        target=lambda: results.append(
            execute(tool_call("write_file", {"path": path, "content": content}))
        ),
        daemon=True,
    )
    worker.start()
    worker.join(seconds)
    return results[0] if results else None


@pytest.mark.posix("FIFOs")
def test_write_file_onto_a_fifo_is_refused_at_once(tools):
    fifo = tools / "pipe"
    os.mkfifo(fifo)
    try:
        result = write_within(10, "pipe", "x")
    finally:  # a hung write (the old code) waits for a writer: let it go
        with open(os.open(fifo, os.O_RDWR | os.O_NONBLOCK), "wb"):
            pass
    assert result is not None, "write_file onto a FIFO hung"
    assert result == "Error: NotARegularFile: pipe is a FIFO, not a regular file"
    assert os.path.exists(fifo) and not os.path.isfile(fifo)  # left as it was


@pytest.mark.posix("unix sockets")
def test_write_file_onto_a_socket_is_refused(tools):
    listener = socket.socket(socket.AF_UNIX)
    os.chdir(tools)  # a short path: unix socket names are limited to about 100 bytes
    try:
        listener.bind("sock")
        result = write_within(10, "sock", "x")
    finally:
        listener.close()
        os.chdir(os.path.dirname(__file__))
    assert result is not None and result.startswith("Error: ")
    assert not (tools / "sock").is_file()


@pytest.mark.linux("mknod as root")
@pytest.mark.skipif(os.geteuid() != 0, reason="mknod needs root")
def test_write_file_onto_a_device_is_refused(tools):
    import stat

    os.mknod(tools / "null", stat.S_IFCHR | 0o666, os.makedev(1, 3))  # as /dev/null
    assert write_within(10, "null", "x") == (
        "Error: NotARegularFile: null is a device, not a regular file"
    )


def near_identical(count: int, every: int) -> str:
    return "".join("y\n" if i % every == 0 else "x\n" for i in range(count))


@pytest.mark.parametrize("every", [2, 3, 97])
def test_a_write_of_100000_near_identical_lines_is_reviewed_in_bounded_time(tools, every):
    (tools / "big.txt").write_text("x\n" * 100_000)
    started = time.monotonic()
    result = write_within(60, "big.txt", near_identical(100_000, every))
    seconds = time.monotonic() - started
    assert result is not None, "the write's line count ran for a minute"
    assert result.startswith("Wrote ")
    assert seconds < 10  # a loaded machine's margin over the promised second (benchmark.py)


def test_a_small_change_in_a_large_file_is_still_counted_exactly():
    old = ("x\n" * 100_000).encode()
    new = ("x\n" * 50_000 + "changed\n" + "x\n" * 49_999).encode()
    summary, lines = diffs.change(old, new, "big.txt")
    assert summary == "+1 -1 lines"
    assert lines[:3] == ["--- a/big.txt", "+++ b/big.txt", "@@ -49998,7 +49998,7 @@"]
    assert lines[3:] == [" x", " x", " x", "-x", "+changed", " x", " x", " x"]


def test_a_change_too_costly_to_compare_is_said_rewritten():
    old = ("x\n" * 100_000).encode()
    new = near_identical(100_000, 2).encode()
    summary, lines = diffs.change(old, new, "big.txt")
    assert summary == "rewritten, now 100000 lines"
    assert lines == []


# --- .git is not written unasked; a link is named by what it leads to ------------------------


@pytest.mark.parametrize(
    "path", [".git/config", ".git/hooks/pre-commit", "sub/.git/config", ".GIT/config"]
)
def test_write_file_into_a_git_folder_is_refused(tools, path):
    (tools / ".git" / "hooks").mkdir(parents=True)
    (tools / ".git" / "config").write_text("[core]\n")
    result = execute(
        tool_call("write_file", {"path": path, "content": "[core]\n\tfsmonitor = evil\n"})
    )
    assert result.startswith(f"Error: PermissionError: {path} lies in a .git folder"), result
    assert (tools / ".git" / "config").read_text() == "[core]\n"
    assert not (tools / ".git" / "hooks" / "pre-commit").exists()
    assert execute(tool_call("read_file", {"path": ".git/config"})) == "[core]\n"  # reading is fine


@pytest.mark.posix("symlinks, which Windows lets only privileged users make")
def test_a_committed_link_into_git_is_refused_and_named_by_its_target(tools):
    (tools / ".git").mkdir()
    (tools / ".git" / "config").write_text("[core]\n")
    (tools / "NOTES.md").symlink_to(".git/config")
    result = execute(
        tool_call("write_file", {"path": "NOTES.md", "content": "[core]\n\tfsmonitor = x\n"})
    )
    assert result.startswith(
        "Error: PermissionError: NOTES.md (a link to .git/config) lies in a .git folder"
    )
    assert (tools / ".git" / "config").read_text() == "[core]\n"


@pytest.mark.posix("symlinks, which Windows lets only privileged users make")
def test_a_write_through_a_link_names_its_real_target(tools, capsys):
    (tools / "docs").mkdir()
    (tools / "docs" / "real.md").write_text("old\n")
    (tools / "NOTES.md").symlink_to("docs/real.md")
    capsys.readouterr()
    assert execute(tool_call("write_file", {"path": "NOTES.md", "content": "new\n"})).startswith(
        "Wrote "
    )
    assert capsys.readouterr().err == "      NOTES.md (a link to docs/real.md): +1 -1 lines\n"
    assert (tools / "docs" / "real.md").read_text() == "new\n"
