"""--confirm-writes on a real pseudo-terminal: each write_file shows its diff and asks
[y/N/a] as commands are asked; n leaves the file as it was and the model is told; a diff longer
than the screen is shortened. Without it, a terminal shows each write's diff unasked."""

from __future__ import annotations

from conftest import finish, on_a_terminal, spawn
from fake_model import reply, tool_call
from stub_server import StubServer


def write(path: str, content: str, call_id: str) -> dict:
    return reply(None, tool_call("write_file", {"path": path, "content": content}, call_id),
                 reasoning="")  # fmt: skip


LONG = "".join(f"line {n}\n" for n in range(100))  # longer than the 40 rows of spawn's terminal


@on_a_terminal
def test_each_write_shows_its_diff_and_asks(workdir):
    (workdir / "a.txt").write_text("keep me\n")
    script = [
        write("a.txt", "hello\nworld\n", "c1"),
        write("b.txt", "bee\n", "c2"),
        write("long.txt", LONG, "c3"),
        write("c.txt", "sea\n", "c4"),
        reply("Done.", reasoning=""),
    ]
    with StubServer(script) as server:
        child = spawn(server, "--workdir", str(workdir), "--confirm-writes", "write")
        child.expect_exact("write a.txt: +2 -1 lines")
        child.expect_exact("-keep me")
        child.expect_exact("+hello")
        child.expect_exact("Write it? [y/N/a] ")
        child.sendline("n")
        child.expect_exact("write b.txt: new file, 1 line")
        child.expect_exact("+bee")
        child.expect_exact("Write it? [y/N/a] ")
        child.sendline("y")
        child.expect_exact("write long.txt: new file, 100 lines")
        child.expect_exact("lines of the diff left out")  # its start and its end are shown
        child.expect_exact("+line 99")
        child.expect_exact("Write it? [y/N/a] ")
        child.sendline("a")
        child.expect_exact("Done.")
        seen = child.before
        assert finish(child) == 0
    assert "Write it?" not in seen  # "a": c.txt was written unasked
    assert (workdir / "a.txt").read_text() == "keep me\n"
    assert [(workdir / n).read_text() for n in ("b.txt", "long.txt", "c.txt")] == [
        "bee\n",
        LONG,
        "sea\n",
    ]
    refused = server.requests[1]["messages"][-1]["content"]
    assert refused.startswith("Error: PermissionError: the user did not approve this write")


@on_a_terminal
def test_without_confirm_writes_a_terminal_shows_the_diff_unasked(workdir):
    (workdir / "a.txt").write_text("one\ntwo\n")
    script = [write("a.txt", "one\n2\n", "c1"), reply("Done.", reasoning="")]
    with StubServer(script) as server:
        child = spawn(server, "--workdir", str(workdir), "edit")
        child.expect_exact("+1 -1 lines")
        child.expect_exact("-two")
        child.expect_exact("+2")
        child.expect_exact("Done.")
        assert "Write it?" not in child.before
        assert finish(child) == 0
    assert (workdir / "a.txt").read_text() == "one\n2\n"


@on_a_terminal
def test_the_diff_is_coloured_by_the_agent_and_the_files_own_escapes_are_shown_escaped(workdir):
    hostile = "plain\nevil \x1b]0;pwned\x07 title\n"
    with StubServer([write("a.txt", hostile, "c1"), reply("Done.", reasoning="")]) as server:
        child = spawn(server, "--workdir", str(workdir), "write")
        child.expect_exact("Done.")
        seen = child.before
        assert finish(child) == 0
    assert "\x1b[32m      +plain\x1b[0m" in seen  # the agent's own colour reaches the terminal
    assert "\\x1b[32m" not in seen  # and is not shown as text
    assert "+evil \\x1b]0;pwned\\x07 title" in seen  # what the file holds is shown escaped
    assert "\x1b]0;" not in seen
