"""Issue 26 as a user meets it: each write shows its change; --undo puts the workdir back as it
was before the last turn (whatever write_file or a shell command did), --redo as the turn left
it; someone else's later change is not overwritten; /undo, /redo and /diff in --chat, the
model told after /undo; the workdir's .git never touched; what is kept stays small.

The agent runs as the user runs it, against the stub server (in this process where the process
is not the point), and the workdir is compared byte for byte, with each file's mode."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
from conftest import run_in_process, stub_env
from fake_model import reply, tool_call
from stub_server import StubServer

from minimal_agent.stores import changes

BINARY = bytes(range(256)) * 4


def shell(command: str, call_id: str) -> dict:
    return reply(None, tool_call("run_shell", {"command": command}, call_id), reasoning="")


def write(path: str, content: str, call_id: str) -> dict:
    return reply(None, tool_call("write_file", {"path": path, "content": content}, call_id),
                 reasoning="")  # fmt: skip


def done(text: str = "Done.") -> dict:
    return reply(text, reasoning="")


def agent(server, workdir: Path, sessions: Path, *args: str, stdin: str = ""):
    env = stub_env(server, LLM_SESSIONS_DIR=str(sessions))
    return run_in_process("--workdir", str(workdir), *args, env=env, stdin=stdin)


def take_back(workdir: Path, sessions: Path, *args: str):
    """--undo or --redo, which ask no model: a server that is never asked."""
    with StubServer([]) as server:
        proc = agent(server, workdir, sessions, *args)
    assert server.requests == [] and "Traceback" not in proc.stderr
    return proc


def tree(folder: Path) -> dict:
    """Every path under folder: a folder's mode, a file's mode and bytes."""
    found = {}
    for path in sorted(folder.rglob("*")):
        info = path.lstat()
        mode = stat.S_IMODE(info.st_mode)
        key = path.relative_to(folder).as_posix()
        found[key] = ("dir", mode) if path.is_dir() else ("file", mode, path.read_bytes())
    return found


def without_git(snapshot: dict) -> dict:
    return {k: v for k, v in snapshot.items() if k != ".git" and not k.startswith(".git/")}


@pytest.fixture
def sessions(tmp_path: Path) -> Path:
    return tmp_path / "sessions"


@pytest.fixture
def project(workdir: Path) -> Path:
    """A workdir with a bit of everything, and a .git of its own."""
    (workdir / "keep.txt").write_text("untouched\n")
    (workdir / "gone.txt").write_text("deleted by the command\n")
    (workdir / "moved.txt").write_text("moved by the command\n")
    (workdir / "tool.sh").write_text("echo hi\n")
    (workdir / "tool.sh").chmod(0o644)
    (workdir / "data.bin").write_bytes(b"\x00old binary\xff")
    (workdir / "old").mkdir()
    (workdir / "old" / "inner.txt").write_text("in a folder the command removes\n")
    (workdir / ".git").mkdir()
    (workdir / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    return workdir


SHELL_TURN = (
    "rm gone.txt && mkdir -p made/deeper && mv moved.txt made/deeper/moved.txt && "
    "chmod 755 tool.sh && python3 -c \"open('data.bin','wb').write(bytes(range(256))*4)\" && "
    "rm -r old && echo changed > .git/HEAD"
)


@pytest.mark.posix("a POSIX shell command and file modes")
def test_undo_puts_back_what_a_shell_command_did_byte_for_byte_and_redo_again(project, sessions):
    before = tree(project)
    script = [shell(SHELL_TURN, "c1"), write("notes/new.txt", "one\ntwo\n", "c2"), done()]
    with StubServer(script) as server:
        proc = agent(server, project, sessions, "--yes", "tidy up")
    assert proc.returncode == 0, proc.stderr
    after = tree(project)
    assert after["data.bin"][2] == BINARY and after["tool.sh"][1] == 0o755
    assert ".git/HEAD" in after and after[".git/HEAD"][2] == b"changed\n"

    proc = take_back(project, sessions, "--undo")
    assert proc.returncode == 0, proc.stderr
    assert without_git(tree(project)) == without_git(before)
    assert (project / ".git" / "HEAD").read_text() == "changed\n"  # as the command left it
    lines = proc.stderr.splitlines()
    assert lines[0].startswith("undid turn 1 (tidy up):")
    said = [line.strip() for line in lines[1:]]
    assert "moved back: made/deeper/moved.txt -> moved.txt" in said
    assert "restored: gone.txt" in said and "restored: data.bin" in said
    assert "restored the mode of tool.sh (644)" in said
    assert "restored: old/" in said and "restored: old/inner.txt" in said
    assert "removed: notes/new.txt" in said and "removed: made/" in said
    assert not any(".git" in line for line in said)

    proc = take_back(project, sessions, "--redo")
    assert proc.returncode == 0, proc.stderr
    assert tree(project) == after
    assert proc.stderr.splitlines()[0].startswith("redid turn 1 (tidy up):")


def test_two_turns_are_undone_in_order_and_redone(workdir, sessions):
    with StubServer([write("a.txt", "first\n", "c1"), done()]) as server:
        assert agent(server, workdir, sessions, "turn one").returncode == 0
    two = [write("a.txt", "second\n", "c2"), write("b.txt", "bee\n", "c3"), done()]
    with StubServer(two) as server:
        assert agent(server, workdir, sessions, "-c", "turn two").returncode == 0
    contents = {path: held[-1] for path, held in tree(workdir).items()}
    assert contents == {"a.txt": b"second\n", "b.txt": b"bee\n"}  # modes differ on Windows

    first = take_back(workdir, sessions, "--undo")
    assert first.returncode == 0, first.stderr
    assert first.stderr.splitlines()[0] == "undid turn 2 (turn two):"
    assert (workdir / "a.txt").read_text() == "first\n" and not (workdir / "b.txt").exists()
    second = take_back(workdir, sessions, "--undo")
    assert second.stderr.splitlines() == ["undid turn 1 (turn one):", "  removed: a.txt"]
    assert list(workdir.iterdir()) == []
    third = take_back(workdir, sessions, "--undo")
    assert third.returncode == 1
    assert third.stderr.strip().startswith("nothing to undo: ")

    assert take_back(workdir, sessions, "--redo").returncode == 0
    assert (workdir / "a.txt").read_text() == "first\n" and not (workdir / "b.txt").exists()
    assert take_back(workdir, sessions, "--redo").returncode == 0
    assert (workdir / "a.txt").read_text() == "second\n" and (workdir / "b.txt").exists()
    assert take_back(workdir, sessions, "--redo").returncode == 1


def test_someone_elses_change_is_not_overwritten_unless_forced(workdir, sessions):
    (workdir / "a.txt").write_text("mine\n")
    with StubServer([write("a.txt", "the model's\n", "c1"), done()]) as server:
        assert agent(server, workdir, sessions, "edit a").returncode == 0
    (workdir / "a.txt").write_text("edited since by the user\n")

    refused = take_back(workdir, sessions, "--undo")
    assert refused.returncode == 1
    [line] = refused.stderr.strip().splitlines()
    assert line.startswith("not undone: ") and "a.txt" in line and "--undo --force" in line
    assert (workdir / "a.txt").read_text() == "edited since by the user\n"

    forced = take_back(workdir, sessions, "--undo", "--force")
    assert forced.returncode == 0, forced.stderr
    assert (workdir / "a.txt").read_text() == "mine\n"
    assert take_back(workdir, sessions, "--redo").returncode == 0  # nothing is lost
    assert (workdir / "a.txt").read_text() == "edited since by the user\n"


def test_a_file_the_user_put_in_a_folder_the_turn_made_is_a_conflict(workdir, sessions):
    with StubServer([write("made/x.txt", "x\n", "c1"), done()]) as server:
        assert agent(server, workdir, sessions, "make a folder").returncode == 0
    (workdir / "made" / "mine.txt").write_text("the user's\n")
    refused = take_back(workdir, sessions, "--undo")
    assert refused.returncode == 1 and "made/mine.txt" in refused.stderr
    assert (workdir / "made" / "x.txt").exists() and (workdir / "made" / "mine.txt").exists()


def test_chat_undo_redo_diff_and_the_model_is_told(workdir, sessions):
    (workdir / "notes.txt").write_text("old line\nsame\n")
    script = [
        write("notes.txt", "new line\nsame\n", "c1"),
        done("Changed it."),
        done("I will read it again."),
    ]
    stdin = "change notes\n/diff\n/undo\n/redo\n/undo\nwhat now?\n"
    with StubServer(script) as server:
        proc = agent(server, workdir, sessions, "--chat", stdin=stdin)
    assert proc.returncode == 0, proc.stderr
    assert server.problems == []
    err = proc.stderr
    assert "notes.txt: +1 -1 lines" in err
    assert "-old line" in err and "+new line" in err  # /diff shows the diff
    assert err.count("undid turn 1 (change notes):") == 2 and "redid turn 1" in err
    assert (workdir / "notes.txt").read_text() == "old line\nsame\n"
    told = server.requests[-1]["messages"][-1]["content"]
    assert told.endswith("what now?") and "/undo" in told and "notes.txt" in told
    assert len(server.requests) == 3  # the commands were not sent


def test_each_write_says_what_it_changes_and_the_model_gets_the_same_result(workdir, sessions):
    (workdir / "a.txt").write_text("one\ntwo\nthree\n")
    script = [
        write("a.txt", "one\n2\nthree\nfour\n", "c1"),
        write("b.txt", "x\ny\n", "c2"),
        done(),
    ]
    with StubServer(script) as server:
        proc = agent(server, workdir, sessions, "edit")
    assert proc.returncode == 0, proc.stderr
    lines = [line.strip() for line in proc.stderr.splitlines()]
    assert "+2 -1 lines" in lines and "new file, 2 lines" in lines
    assert "+four" not in proc.stderr  # no diff in a pipe: only on a terminal
    results = [m for m in server.requests[-1]["messages"] if m["role"] == "tool"]
    assert results[0]["content"] == "Wrote 17 characters (17 bytes) to a.txt"


def test_confirm_writes_without_a_terminal_refuses_and_the_model_is_told(workdir, sessions):
    script = [write("a.txt", "text\n", "c1"), done()]
    with StubServer(script) as server:
        env = stub_env(server, LLM_SESSIONS_DIR=str(sessions), LLM_CONFIRM_WRITES="1")
        proc = run_in_process("--workdir", str(workdir), "write", env=env)
    assert proc.returncode == 5, proc.stderr  # refused for want of approval
    assert not (workdir / "a.txt").exists()
    assert "not written: stdin is not a terminal" in proc.stderr
    result = server.requests[-1]["messages"][-1]["content"]
    assert result.startswith("Error: PermissionError: the file was not written")


def test_a_file_over_the_size_limit_is_named_and_undo_says_it_cannot(
    workdir, sessions, monkeypatch
):
    monkeypatch.setattr(changes, "MAX_KEPT", 100)
    (workdir / "big.txt").write_text("b" * 200)
    script = [write("big.txt", "c" * 300, "c1"), write("small.txt", "s\n", "c2"), done()]
    with StubServer(script) as server:
        proc = agent(server, workdir, sessions, "grow")
    assert "not kept: big.txt (it is over" in proc.stderr
    undone = take_back(workdir, sessions, "--undo")
    assert undone.returncode == 0, undone.stderr
    assert "cannot restore big.txt" in undone.stderr
    assert not (workdir / "small.txt").exists()
    assert (workdir / "big.txt").read_text() == "c" * 300


def test_a_huge_workdir_is_kept_only_up_to_the_limit_and_undo_says_what_it_cannot_restore(
    workdir, sessions, monkeypatch
):
    monkeypatch.setattr(changes, "MAX_SEEN", 2_500)  # a GB, in small
    for name in ("a", "b", "c", "d"):
        (workdir / f"{name}.txt").write_text(name * 1_000)
    script = [shell("for f in *.txt; do echo more >> $f; done", "c1"), done()]
    with StubServer(script) as server:
        proc = agent(server, workdir, sessions, "--yes", "append to every file")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.count("those past it are not kept") == 1
    assert proc.stderr.count("not kept: ") == 2  # the two files --undo cannot restore
    [store] = sessions.glob("*.changes")
    assert sum(p.stat().st_size for p in store.rglob("*") if p.is_file()) < 6_000
    undone = take_back(workdir, sessions, "--undo")
    assert undone.returncode == 0, undone.stderr
    lost = [line for line in undone.stderr.splitlines() if "cannot restore" in line]
    assert len(lost) == 2 and all("passed the" in line for line in lost)
    restored = [name for name in "abcd" if (workdir / f"{name}.txt").read_text() == name * 1_000]
    assert len(restored) == 2  # the two that were kept are as before


def test_only_what_changed_is_kept_and_nothing_in_the_workdir(workdir, sessions):
    for number in range(200):
        (workdir / f"f{number:03}.txt").write_text(f"line {number}\n" * 1000)  # 2 MB in all
    with StubServer([shell("echo extra>> f007.txt", "c1"), done()]) as server:
        proc = agent(server, workdir, sessions, "--yes", "append a line")
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in workdir.iterdir()) == [f"f{n:03}.txt" for n in range(200)]
    [store] = sessions.glob("*.changes")
    kept = sum(p.stat().st_size for p in store.rglob("*") if p.is_file())
    assert kept < 3 * (workdir / "f007.txt").stat().st_size  # the file before and after
    assert take_back(workdir, sessions, "--undo").returncode == 0
    assert (workdir / "f007.txt").read_text() == "line 7\n" * 1000


def test_undo_mistakes_end_in_one_line(workdir, sessions):
    nothing = take_back(workdir, sessions, "--undo")
    assert nothing.returncode == 1
    assert nothing.stderr.strip().startswith("error: there is no saved conversation of the")
    with StubServer([]) as server:
        usage = agent(server, workdir, sessions, "--undo", "some task")
        force = agent(server, workdir, sessions, "--force", "task")
    assert usage.returncode == 2 and "--undo takes no task" in usage.stderr
    assert force.returncode == 2 and "--force goes with --undo or --redo" in force.stderr


def test_the_journal_is_beside_the_transcript(workdir, sessions):
    with StubServer([write("a.txt", "a\n", "c1"), done()]) as server:
        assert agent(server, workdir, sessions, "write").returncode == 0
    [transcript] = sessions.glob("*.jsonl")
    store = sessions / (transcript.stem + ".changes")
    lines = [json.loads(line) for line in (store / "journal.jsonl").read_text().splitlines()]
    # where the step began (before its tools ran) and where the turn's record ended: see
    # tests/test_records.py for a record that stops between them
    assert [line["event"] for line in lines] == ["store", "turn", "step", "changes", "recorded"]
    assert not (store / "seen").exists()  # what was only seen goes with the session's end
    assert os.path.realpath(lines[0]["workdir"]) == os.path.realpath(workdir)


def test_after_undo_on_the_command_line_the_resumed_conversation_tells_the_model(workdir, sessions):
    with StubServer([write("a.txt", "a\n", "c1"), done()]) as server:
        assert agent(server, workdir, sessions, "write a").returncode == 0
    assert take_back(workdir, sessions, "--undo").returncode == 0
    with StubServer([done("I see.")]) as server:
        proc = agent(server, workdir, sessions, "-c", "go on")
    assert proc.returncode == 0, proc.stderr
    told = server.requests[0]["messages"][-1]["content"]
    assert told.startswith("[Note from the agent: ") and "a.txt" in told
    assert told.endswith("\n\ngo on")


def test_undo_without_r_takes_back_the_latest_turn_here_that_changed_files(workdir, sessions):
    """Issue 39: a shell command changes calc.py, then a conversation only reads it: --undo
    takes back the command, naming its conversation, and --redo puts it back."""
    (workdir / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    fix = [shell("echo fixed> calc.py", "c1"), done("Fixed.")]  # sh and cmd.exe alike
    with StubServer(fix) as server:
        fixed = agent(server, workdir, sessions, "--yes", "fix add")
    assert fixed.returncode == 0, fixed.stderr
    with StubServer([reply(None, tool_call("read_file", {"path": "calc.py"}, "c1")),
                     done("add()")]) as server:  # fmt: skip
        asked = agent(server, workdir, sessions, "what is in calc.py?")
    assert asked.returncode == 0, asked.stderr
    ids = sorted(path.name.removesuffix(".jsonl") for path in sessions.glob("*.jsonl"))
    assert len(ids) == 2
    fixing = next(i for i in ids if "fix add" in (sessions / f"{i}.jsonl").read_text())
    asking = next(i for i in ids if i != fixing)

    undone = take_back(workdir, sessions, "--undo")
    assert undone.returncode == 0, undone.stderr
    assert (workdir / "calc.py").read_text() == "def add(a, b):\n    return a - b\n"
    assert f"{asking}, has no turn to undo: undoing in {fixing}" in undone.stderr
    assert "undid turn 1 (fix add):" in undone.stderr
    again = take_back(workdir, sessions, "--undo")
    assert again.returncode == 1 and "nothing to undo" in again.stderr
    redone = take_back(workdir, sessions, "--redo")
    assert redone.returncode == 0, redone.stderr
    assert (workdir / "calc.py").read_text().strip() == "fixed"
    assert f"redoing in {fixing}" in redone.stderr
