"""Issue 38 as the model and the user meet it: edit_file, search, list_files and read_file's
offset and limit, the daily driver's tools. Each tool through execute_tool_call with real files
(and, for search and list_files, the real child process); the session's door, the settings,
undo, the events and --confirm-writes through the agent as a user runs it, against the stub
server on 127.0.0.1."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import threading
import time
from pathlib import Path

import pytest
from conftest import (
    ROOT,
    WORKSPACE,
    alive,
    clean_env,
    execute,
    run_in_process,
    saved_messages,
    stub_env,
    use_workspace,
    wait_for,
)
from fake_model import reply, tool_call
from stub_server import EDIT_DEMO_TASK, StubServer

import agent
from minimal_agent.tools import daily_tools, search
from minimal_agent.views import display

# The lesson's tools as agent.py has them: a learner's own (the README's list_dir) among them.
LESSON_TOOLS = [tool["function"]["name"] for tool in agent.TOOLS]


@pytest.fixture
def tools(workdir):
    use_workspace(workdir, timeout=5, yes=True, added_tools=daily_tools.tools(agent.TOOL_MAP))
    return workdir


def call(name: str, **arguments) -> str:
    return execute(tool_call(name, arguments))


def edit(path: str, old: str, new: str, **more) -> str:
    return call("edit_file", path=path, old_string=old, new_string=new, **more)


# --- edit_file: what the model gets ----------------------------------------------------------


def test_a_one_line_edit_changes_that_line_and_says_which_it_is(tools):
    (tools / "a.py").write_text("".join(f"line {n}\n" for n in range(1, 2001)))
    result = edit("a.py", "line 1000\n", "line one thousand\n")
    assert result == "Edited a.py: line 1000 now reads:\n  1000\tline one thousand"
    lines = (tools / "a.py").read_text().splitlines()
    assert lines[999] == "line one thousand" and lines[998] == "line 999" and len(lines) == 2000


def test_an_old_string_not_found_shows_the_closest_lines_numbered(tools):
    (tools / "a.py").write_text("def f():\n    return 1\n\ndef g():\n    return 2\n")
    result = edit("a.py", "def g():\n    return 3\n", "x")
    assert result == (
        "Error: old_string was not found in a.py; the closest lines are:\n"
        "     4\tdef g():\n     5\t    return 2"
    )
    result = edit("a.py", "def f():\n  return 1", "x")  # two spaces where the file has four
    assert result.startswith("Error: old_string was not found in a.py (it is there if spaces")
    assert edit("a.py", "nothing like it at all, zzz", "x").endswith(
        "no line resembles its first line: read the file again"
    )
    assert (tools / "a.py").read_text().startswith("def f():\n    return 1\n")


def test_an_old_string_found_more_than_once_gives_the_count_and_lines_or_replace_all(tools):
    (tools / "a.txt").write_text("x = 1\ny = 2\nx = 1\n")
    assert edit("a.txt", "x = 1", "x = 9") == (
        "Error: old_string occurs 2 times in a.txt (at lines 1, 3): add the lines around it so "
        "that it occurs once, or give replace_all=true"
    )
    assert (tools / "a.txt").read_text() == "x = 1\ny = 2\nx = 1\n"
    result = edit("a.txt", "x = 1", "x = 9\nz = 0", replace_all=True)
    assert result == "Edited a.txt: replaced 2 occurrences, now at lines 1, 4"
    assert (tools / "a.txt").read_text() == "x = 9\nz = 0\ny = 2\nx = 9\nz = 0\n"


def test_an_empty_old_string_creates_a_new_file_only(tools):
    assert edit("new/b.txt", "", "one\ntwo\n") == "Created new/b.txt (2 lines)"
    assert (tools / "new" / "b.txt").read_text() == "one\ntwo\n"
    assert edit("new/b.txt", "", "over") == (
        "Error: new/b.txt exists; an empty old_string only creates a new file: give the text to "
        "replace (read_file shows it)"
    )
    assert (tools / "new" / "b.txt").read_text() == "one\ntwo\n"
    assert "does not exist; to create it, give an empty old_string" in edit("c.txt", "a", "b")


def test_a_deletion_says_where(tools):
    (tools / "a.txt").write_text("a\nb\nc\n")
    assert edit("a.txt", "b\n", "") == "Edited a.txt: removed 1 line at line 2"
    assert (tools / "a.txt").read_text() == "a\nc\n"


def test_crlf_line_endings_are_kept_also_for_the_lines_the_edit_adds(tools):
    (tools / "w.txt").write_bytes(b"one\r\ntwo\r\nthree\r\n")
    assert edit("w.txt", "two\n", "2\nand a half\n").startswith("Edited w.txt: lines 2-3 now")
    assert (tools / "w.txt").read_bytes() == b"one\r\n2\r\nand a half\r\nthree\r\n"


@pytest.mark.parametrize(
    "data, old, new, expected",
    [
        ("café\nnaïve\n".encode("cp1252"), "naïve", "naive", "café\nnaive\n".encode("cp1252")),
        ("中文\n第二行\n".encode("gb18030"), "第二行", "二", "中文\n二\n".encode("gb18030")),
        (b"\xef\xbb\xbfbom\nx\n", "x", "y", b"\xef\xbb\xbfbom\ny\n"),
        ("\ufeffutf16\nx\n".encode("utf-16-be"), "x", "y", "\ufeffutf16\ny\n".encode("utf-16-be")),
    ],
    ids=["cp1252", "gb18030", "utf-8-bom", "utf-16-be"],
)
def test_the_files_encoding_is_kept(tools, data, old, new, expected):
    (tools / "t.txt").write_bytes(data)
    assert edit("t.txt", old, new).startswith("Edited t.txt")
    assert (tools / "t.txt").read_bytes() == expected


def test_a_character_the_encoding_cannot_hold_is_refused_and_nothing_written(tools):
    data = "café\n".encode("cp1252")
    (tools / "t.txt").write_bytes(data)
    assert edit("t.txt", "café", "咖啡").startswith("Error: t.txt is cp1252 text, which cannot")
    assert (tools / "t.txt").read_bytes() == data


@pytest.mark.posix("a FIFO")
def test_a_fifo_or_a_folder_is_refused_without_blocking(tools):
    os.mkfifo(tools / "pipe")
    (tools / "folder").mkdir()
    assert edit("pipe", "a", "b") == "Error: NotARegularFile: pipe is a FIFO, not a regular file"
    assert edit("folder", "a", "b") == "Error: IsADirectoryError: folder is a folder, not a file"


def test_a_binary_file_is_not_edited(tools):
    (tools / "b.bin").write_bytes(b"\0\1\2abc")
    assert (
        edit("b.bin", "abc", "x")
        == "Error: b.bin is a binary file; edit_file changes text files only"
    )


@pytest.mark.posix("file modes")
def test_the_files_mode_is_kept(tools):
    script = tools / "run.sh"
    script.write_text("echo one\n")
    script.chmod(0o751)
    edit("run.sh", "one", "two")
    assert stat.S_IMODE(script.stat().st_mode) == 0o751
    assert script.read_text() == "echo two\n"


def test_a_file_changed_after_the_models_read_is_not_edited_from_the_old_text(tools):
    (tools / "a.txt").write_text("alpha = 0\nbeta = 1\n")
    assert call("read_file", path="a.txt") == "alpha = 0\nbeta = 1\n"
    (tools / "a.txt").write_text("alpha = 0\nbeta = 2\n")  # the user edits meanwhile
    assert edit("a.txt", "beta = 1\n", "beta = 3\n") == (
        "Error: old_string was not found in a.txt; the closest lines are:\n     2\tbeta = 2"
    )
    assert (tools / "a.txt").read_text() == "alpha = 0\nbeta = 2\n"


def test_a_file_changed_while_the_user_is_asked_is_not_overwritten(tools, monkeypatch):
    (tools / "a.txt").write_text("alpha\n")
    ws = agent.Workspace(tools, confirm_writes=True, added_tools=daily_tools.tools(agent.TOOL_MAP))

    def approve_after_a_change(*args) -> bool:
        (tools / "a.txt").write_text("alpha, as the user saved it\n")
        return True

    monkeypatch.setattr(display, "write_approved", approve_after_a_change)
    result = agent.execute_tool_call(tool_call("edit_file", {"path": "a.txt", "old_string":
                                     "alpha", "new_string": "beta"}), ws)  # fmt: skip
    assert result == "Error: a.txt changed meanwhile, so nothing was written: read it again"
    assert (tools / "a.txt").read_text() == "alpha, as the user saved it\n"


@pytest.mark.posix("symlinks, which Windows lets only privileged users make")
def test_an_edit_through_a_link_reaches_only_a_file_inside_the_workdir(tools, capsys):
    outside = tools.parent / "outside.txt"
    outside.write_text("secret\n")
    (tools / "out").symlink_to(outside)
    (tools / "dirout").symlink_to(tools.parent)
    assert "outside the workdir" in edit("out", "secret", "x")
    assert "outside the workdir" in edit("dirout/outside.txt", "secret", "x")
    assert "outside the workdir" in edit("dirout/new.txt", "", "x")
    assert outside.read_text() == "secret\n" and not (tools.parent / "new.txt").exists()
    (tools / "real.txt").write_text("inside\n")
    (tools / "in").symlink_to(tools / "real.txt")
    assert edit("in", "inside", "changed").startswith("Edited in:")
    assert (tools / "real.txt").read_text() == "changed\n"
    assert "in (a link to real.txt): +1 -1 lines" in capsys.readouterr().err


def test_an_edit_in_git_is_refused(tools):
    (tools / ".git").mkdir()
    (tools / ".git" / "config").write_text("[core]\n")
    result = edit(".git/config", "[core]\n", "[core]\n\tfsmonitor = evil\n")
    assert "lies in a .git folder" in result
    assert "lies in a .git folder" in edit(".git/hooks/pre-commit", "", "evil")
    assert (tools / ".git" / "config").read_text() == "[core]\n"
    assert not (tools / ".git" / "hooks").exists()


def test_the_users_own_folders_are_out_of_reach_of_every_daily_tool(tools):
    own = tools / "config"
    own.mkdir()
    (own / "config.env").write_text("LLM_API_KEY=sk-secret\n")
    daily = daily_tools.tools(agent.TOOL_MAP)
    use_workspace(tools, added_tools=daily, private=[str(own.resolve())])
    assert "among the user's own files" in edit("config/config.env", "sk-secret", "x")
    assert "among the user's own files" in call("read_file", path="config/config.env", offset=1)
    assert "among the user's own files" in call("search", pattern="sk-", path="config")
    assert call("search", pattern="sk-") == "No matches for 'sk-' in ."
    assert "config" not in call("list_files")
    assert (own / "config.env").read_text() == "LLM_API_KEY=sk-secret\n"


def test_a_huge_file_is_edited_and_said_rewritten(tools):
    big = "".join(f"{n:09d} some text on the line\n" for n in range(60_000))  # 2 MB
    (tools / "big.txt").write_text(big)
    assert edit("big.txt", "000030000 some", "000030000 other").startswith(
        "Edited big.txt: line 30001 now reads:"
    )
    assert (tools / "big.txt").read_text() == big.replace("000030000 some", "000030000 other")


def test_a_file_too_large_to_hold_is_not_read_whole(tools):
    with open(tools / "huge.log", "wb") as file:  # sparse: no time or disk spent on it
        file.write(b"start\n")
        file.truncate(daily_tools.MAX_EDITED + 1)
    assert edit("huge.log", "start", "x") == (
        "Error: huge.log is over 64 MB, more than edit_file reads: change it with a command "
        "(sed, a script) through run_shell"
    )


def test_edit_files_arguments_are_checked_by_its_schema(tools):
    assert call("edit_file", path="a", old_string="x") == (
        "Error: edit_file takes a JSON object with the fields path (a string), old_string (a "
        "string), new_string (a string), replace_all (a boolean or null), of which path, "
        "old_string, new_string must be given: missing 'new_string'"
    )


# --- read_file's offset and limit ------------------------------------------------------------


def test_offset_and_limit_read_numbered_lines_and_say_where_to_go_on(tools):
    (tools / "a.txt").write_text("".join(f"l{n}\r\n" for n in range(1, 11)))
    assert call("read_file", path="a.txt", offset=3, limit=2) == (
        "     3\tl3\n     4\tl4\n[a.txt goes on: read on with offset=5]"
    )
    assert call("read_file", path="a.txt", offset=9) == "     9\tl9\n    10\tl10"
    assert call("read_file", path="a.txt", limit=1).startswith("     1\tl1\n[a.txt goes on")
    assert call("read_file", path="a.txt", offset=11) == (
        "Error: a.txt has 10 lines: offset 11 is past its end"
    )
    assert call("read_file", path="a.txt", offset=0).startswith("Error: offset and limit count")
    assert call("read_file", path="a.txt") == (tools / "a.txt").read_bytes().decode()  # as today
    assert call("read_file", path="a.txt", offset=10, limit=None) == "    10\tl10"  # null: unset


def test_a_line_longer_than_the_limit_is_cut_and_a_result_stays_within_the_cap(tools):
    (tools / "one.txt").write_text("x" * 100_000 + "\nsecond\n")
    result = call("read_file", path="one.txt", offset=1)
    assert result == f"     1\t{'x' * 2001}[... 97999 more characters on this line]\n     2\tsecond"
    (tools / "many.txt").write_text("y" * 1_000 + "\n" * 50)
    (tools / "many.txt").write_text(("y" * 1_000 + "\n") * 50)
    result = call("read_file", path="many.txt", offset=1)
    assert len(result) <= agent.MAX_RESULT_CHARS
    assert result.endswith("[many.txt goes on: read on with offset=20]")


# --- search --------------------------------------------------------------------------------


def test_search_finds_matches_as_path_line_text_and_skips_ignored_git_and_binary(tools):
    (tools / ".gitignore").write_text("build/\n*.log\n!keep.log\n/top.txt\n")
    (tools / "src").mkdir()
    (tools / "src" / "a.py").write_text("import os\nTODO: one\n")
    (tools / "src" / ".gitignore").write_text("generated.py\n")
    (tools / "src" / "generated.py").write_text("TODO: generated\n")
    (tools / "build").mkdir()
    (tools / "build" / "out.py").write_text("TODO: built\n")
    (tools / "x.log").write_text("TODO: log\n")
    (tools / "keep.log").write_text("TODO: kept\n")
    (tools / "top.txt").write_text("TODO: top\n")
    (tools / "src" / "top.txt").write_text("TODO: not at the top\n")
    (tools / ".git").mkdir()
    (tools / ".git" / "notes").write_text("TODO: git\n")
    (tools / "data.bin").write_bytes(b"\0TODO: binary\n")
    assert call("search", pattern=r"TODO: \w+") == (
        "keep.log:1: TODO: kept\nsrc/a.py:2: TODO: one\nsrc/top.txt:1: TODO: not at the top"
    )
    assert call("search", pattern="TODO", glob="*.py") == "src/a.py:2: TODO: one"
    assert call("search", pattern="TODO", path="src", glob="src/**/*.txt") == (
        "src/top.txt:1: TODO: not at the top"
    )
    assert call("search", pattern="nothing") == "No matches for 'nothing' in ."
    assert call("search", pattern="TODO", path=None, glob=None).startswith("keep.log:1:")


def test_the_gitignore_subset_reads_as_git_does(tmp_path):
    rules = "# a comment\n\ndocs/build\n**/cache/\n*.tmp\n!important.tmp\nlogs/\n!logs/keep.txt\n"
    (tmp_path / ".gitignore").write_text(rules + "\\#hash\nspaced\\ \n")
    paths = {
        "docs/build/x": False,  # a / in the middle: anchored to the .gitignore's folder
        "sub/docs/build/y": True,
        "a/b/cache/z": False,  # **/: at any depth; the trailing /: a folder only
        "cache": True,
        "x.tmp": False,
        "sub/y.tmp": False,
        "important.tmp": True,  # ! takes it back
        "logs/keep.txt": False,  # inside an ignored folder: git cannot take it back either
        "#hash": False,  # an escaped #, no comment
        "spaced ": False,  # an escaped trailing space is kept
        "kept.txt": True,
    }
    for path in paths:
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text("x\n")
    listed = {path for path, _, _ in search.walk(str(tmp_path), ".", [])}
    assert listed == {".gitignore", *(path for path, kept in paths.items() if kept)}


def test_a_bad_pattern_or_glob_is_an_error_naming_it(tools):
    assert call("search", pattern="(unclosed") == (
        "Error: the pattern '(unclosed' is not a regular expression Python reads: missing ), "
        "unterminated subpattern at position 0"
    )
    assert call("search", pattern="x", glob="[z-a]").startswith("Error: the glob '[z-a]' cannot")


def test_a_search_is_capped_in_characters_too_with_the_count_kept(tools):
    (tools / "wide.txt").write_text(("match" + "x" * 400 + "\n") * 90)
    result = call("search", pattern="match")
    assert len(result) <= agent.MAX_RESULT_CHARS and "left out" not in result
    shown = result.count("wide.txt:")
    assert result.endswith(
        f"[{90 - shown} more matches not shown: narrow the pattern, path or glob]"
    )
    assert 40 < shown < 90


def test_search_is_capped_with_a_line_saying_how_many_more(tools):
    (tools / "many.txt").write_text("match\n" * (search.MAX_MATCHES + 7))
    result = call("search", pattern="match").splitlines()
    assert len(result) == search.MAX_MATCHES + 1
    assert result[-1] == "[7 more matches not shown: narrow the pattern, path or glob]"


@pytest.mark.posix("symlinks, which Windows lets only privileged users make")
def test_search_and_list_files_never_follow_a_link(tools):
    outside = tools.parent / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("password=hunter2\n")
    (tools / "link").symlink_to(outside)
    (tools / "file_link").symlink_to(outside / "secret.txt")
    (tools / "own.txt").write_text("password=mine\n")
    assert call("search", pattern="password") == "own.txt:1: password=mine"
    assert "outside the workdir" in call("search", pattern="password", path="link")
    assert call("list_files") == "own.txt"


@pytest.mark.posix("folder descriptors, which Windows lacks (docs/platforms.md)")
def test_a_folder_swapped_for_a_link_during_the_walk_is_not_listed(tmp_path):
    work, outside = tmp_path / "work", tmp_path / "outside"
    (work / "sub").mkdir(parents=True)
    (work / "a.txt").write_text("x\n")
    outside.mkdir()
    (outside / "secret.txt").write_text("password=hunter2\n")
    walking = search.walk(str(work), ".", [])
    assert next(walking)[0] == "a.txt"  # sub is listed already, and walked next
    (work / "sub").rmdir()
    (work / "sub").symlink_to(outside)  # by a command left running in the background, say
    assert list(walking) == []


def test_a_pattern_that_backtracks_catastrophically_is_stopped_in_time(tools, monkeypatch):
    monkeypatch.setattr(search, "SECONDS", 1.0)
    (tools / "a.txt").write_text("found first\n")
    (tools / "b.txt").write_text("a" * 64 + "!\n")  # (a+)+$ on it: 2**64 ways to fail
    began = time.monotonic()
    *found, last = call("search", pattern="^found|(a+)+$").splitlines()
    assert time.monotonic() - began < 60  # the child was killed, not waited for
    assert last == (
        "[the search was stopped after 1 s; a pattern with nested repeats, such as (a+)+, can "
        "take for ever: make it simpler, or narrow path or glob]"
    )
    # What it found before (unless a loaded machine took the second to start the child)
    assert found in (["a.txt:1: found first"], [])


def searches_in(folder: Path) -> list[int]:
    """The search children working in folder (their current folder), from /proc: each once it
    runs the search's code (its start, by then, is over)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if os.readlink(f"/proc/{pid}/cwd") == str(folder.resolve()):
                if b"minimal_agent.tools.search" in Path(f"/proc/{pid}/cmdline").read_bytes():
                    found.append(int(pid))
        except OSError:  # gone, or not ours to look at
            pass
    return found


@pytest.mark.linux("a signal to interrupt the search as Ctrl-C does, and /proc to find its child")
def test_ctrl_c_during_a_search_that_never_ends_ends_its_child(tools, monkeypatch):
    monkeypatch.setattr(search, "SECONDS", 600.0)
    (tools / "b.txt").write_text("a" * 64 + "!\n")

    stopped = threading.Event()

    def interrupt(signum, frame):
        if not stopped.is_set():
            raise KeyboardInterrupt

    def interrupt_once_it_runs() -> None:  # as Ctrl-C would, once the child is there
        wait_for(lambda: searches_in(tools), "the search's child never started")
        while not stopped.is_set():  # again if one lands where Python ignores it (gc callbacks)
            signal.pthread_kill(threading.main_thread().ident, signal.SIGALRM)
            stopped.wait(1)

    previous = signal.signal(signal.SIGALRM, interrupt)
    began = time.monotonic()
    try:
        threading.Thread(target=interrupt_once_it_runs, daemon=True).start()
        with pytest.raises(KeyboardInterrupt):
            daily_tools.search(WORKSPACE[0], "(a+)+$")
        stopped.set()
    finally:
        stopped.set()
        signal.signal(signal.SIGALRM, previous)
    assert time.monotonic() - began < 60
    assert not [pid for pid in searches_in(tools) if alive(pid)]  # the child was killed


@pytest.mark.linux("/proc, to find the search's child")
def test_the_searchs_child_ends_itself_on_time_whatever_became_of_the_agent(tools, monkeypatch):
    monkeypatch.setattr(search, "SECONDS", 0.3)
    monkeypatch.setattr(search, "OUTLIVED", 0.2)  # 2 s of a busy child, for the user's agent
    (tools / "b.txt").write_text("a" * 64 + "!\n")
    children = []

    def agent_gone(self, body, timeout):  # the request sent, then the agent killed -9
        children.append(self)
        self.stdin.write(body)
        self.stdin.close()
        raise KeyboardInterrupt

    monkeypatch.setattr(subprocess.Popen, "kill", lambda self: None)
    monkeypatch.setattr(subprocess.Popen, "communicate", agent_gone)
    with pytest.raises(KeyboardInterrupt):
        daily_tools.search(WORKSPACE[0], "(a+)+$")
    (child,) = children
    try:
        assert child.wait(timeout=60) == -signal.SIGALRM, child.stderr.read()  # its own alarm
    finally:
        if child.poll() is None:  # the test failed: leave nothing running
            os.kill(child.pid, signal.SIGKILL)


def test_the_searchs_child_imports_nothing_from_the_workdir(tools):
    (tools / "re.py").write_text("raise SystemExit('the workdir chose what the child imports')\n")
    (tools / "json.py").write_text("raise SystemExit('the workdir chose what the child imports')\n")
    (tools / "a.txt").write_text("hit\n")
    assert call("search", pattern="hit") == "a.txt:1: hit"


# --- list_files --------------------------------------------------------------------------------


def test_list_files_matches_globs_newest_first_with_the_same_skips(tools):
    for number, name in enumerate(["setup.py", "src/a.py", "src/deep/b.py", "README.md",
                                   "build/c.py"]):  # fmt: skip
        path = tools / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("x\n")
        os.utime(path, (1_700_000_000 + number, 1_700_000_000 + number))
    (tools / ".gitignore").write_text("build\n")
    os.utime(tools / ".gitignore", (1_600_000_000, 1_600_000_000))
    (tools / ".git").mkdir()
    (tools / ".git" / "x.py").write_text("x\n")
    assert call("list_files", pattern="**/*.py") == "src/deep/b.py\nsrc/a.py\nsetup.py"
    assert call("list_files", pattern="*.py") == "setup.py"
    assert call("list_files", pattern="./src/*.py") == "src/a.py"
    assert call("list_files", pattern="src/**") == "src/deep/b.py\nsrc/a.py"
    assert call("list_files") == "README.md\nsrc/deep/b.py\nsrc/a.py\nsetup.py\n.gitignore"
    assert call("list_files", pattern="*.rs") == "No files match '*.rs'"
    assert call("list_files", pattern=None) == call("list_files")


def test_list_files_is_capped(tools, monkeypatch):
    monkeypatch.setattr(search, "MAX_PATHS", 3)
    for number in range(5):
        (tools / f"f{number}.txt").write_text("x")
    lines = call("list_files").splitlines()
    assert len(lines) == 4 and lines[-1] == "[2 more paths not shown: narrow the pattern]"


# --- The session's door: which tools the model is offered ------------------------------------


def offered(server) -> list[str]:
    return [tool["function"]["name"] for tool in server.requests[0]["tools"]]


def run_agent(server, workdir: Path, *args: str, **settings: str):
    return run_in_process("--workdir", str(workdir), *args, env=stub_env(server, **settings))


def test_python_agent_py_offers_the_lessons_three_unless_the_setting_says_otherwise(workdir):
    with StubServer([reply("ok"), reply("ok"), reply("ok")]) as server:
        assert run_agent(server, workdir, "hi").returncode == 0
        assert run_agent(server, workdir, "hi", LLM_DAILY_TOOLS="1").returncode == 0
        proc = run_agent(server, workdir, "hi", LLM_DAILY_TOOLS="maybe")
    lesson, daily = ([t["function"]["name"] for t in r["tools"]] for r in server.requests)
    assert lesson == LESSON_TOOLS  # a learner's own tools among them
    assert daily == [*LESSON_TOOLS, "edit_file", "search", "list_files"]
    read_file = server.requests[1]["tools"][0]["function"]
    assert list(read_file["parameters"]["properties"]) == ["path", "offset", "limit"]
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines()[-1] == (
        "error: LLM_DAILY_TOOLS must be 1 (on) or 0 (off), not 'maybe'"
    )


def test_the_help_names_the_setting(workdir):
    with StubServer([]) as server:
        proc = run_agent(server, workdir, "--help")
    assert "LLM_DAILY_TOOLS" in " ".join(proc.stdout.split())


def test_a_learners_tool_of_a_daily_tools_name_is_one_line_not_a_silent_swap(workdir, monkeypatch):
    def search_notes(ws, pattern: str) -> str:
        return "notes"

    schema = {"type": "function", "function": {"name": "search", "parameters": {
        "type": "object", "properties": {"pattern": {"type": "string"}},
        "required": ["pattern"]}}}  # fmt: skip
    monkeypatch.setattr(agent, "TOOLS", [*agent.TOOLS, schema])
    monkeypatch.setitem(agent.TOOL_MAP, "search", search_notes)
    with StubServer([reply("ok")]) as server:
        proc = run_agent(server, workdir, "hi", LLM_DAILY_TOOLS="1")
    assert proc.returncode == 1 and server.requests == []
    assert proc.stderr.strip().splitlines()[-1] == (
        "error: the tool 'search' from the daily tools (LLM_DAILY_TOOLS) has the name of a tool "
        "the agent has already: rename one of them"
    )


def test_an_edit_is_shown_recorded_as_a_file_change_and_undone(workdir, tmp_path):
    (workdir / "a.txt").write_text("one\ntwo\n")
    sessions = tmp_path / "sessions"
    step = tool_call("edit_file", {"path": "a.txt", "old_string": "two", "new_string": "2"}, "c1")
    script = [reply(None, step, reasoning=""), reply("Done.", reasoning="")]
    settings = {"LLM_DAILY_TOOLS": "1", "LLM_SESSIONS_DIR": str(sessions)}
    with StubServer(script) as server:
        proc = run_agent(server, workdir, "--json-events", "edit", **settings)
    assert proc.returncode == 0, proc.stderr
    assert (workdir / "a.txt").read_text() == "one\n2\n"
    assert "+1 -1 lines" in proc.stderr
    events = [json.loads(line) for line in proc.stdout.splitlines()]
    assert {"type": "file_change", "path": "a.txt", "change": "changed"} in [
        {k: e.get(k) for k in ("type", "path", "change")} for e in events
    ]
    result = server.requests[-1]["messages"][-1]["content"]
    assert result == "Edited a.txt: line 2 now reads:\n     2\t2"
    with StubServer([]) as server:
        undone = run_agent(server, workdir, "--undo", **settings)
    assert undone.returncode == 0, undone.stderr
    assert (workdir / "a.txt").read_text() == "one\ntwo\n"


def test_confirm_writes_applies_to_edits(workdir):
    (workdir / "a.txt").write_text("one\n")
    step = tool_call("edit_file", {"path": "a.txt", "old_string": "one", "new_string": "1"}, "c1")
    with StubServer([reply(None, step, reasoning=""), reply("ok", reasoning="")]) as server:
        proc = run_agent(server, workdir, "--confirm-writes", "edit", LLM_DAILY_TOOLS="1")
    assert proc.returncode == 5, proc.stderr  # refused: nobody could approve it (docs/json.md)
    assert (workdir / "a.txt").read_text() == "one\n"
    result = server.requests[-1]["messages"][-1]["content"]
    assert result.startswith("Error: PermissionError: the file was not written")


def test_the_edit_example_replays_offline_on_its_recorded_path(workdir):
    example = ROOT / "examples" / "edit_demo.jsonl"
    offline = clean_env(LLM_API_KEY="", LLM_DAILY_TOOLS="1")
    proc = run_in_process("--workdir", str(workdir), "--replay", str(example), env=offline)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == 'greet.py now greets with "Good morning, world!" (line 2).\n'
    assert "left the recorded path" not in proc.stderr  # every result as recorded
    assert 'return f"Good morning, {name}!"' in (workdir / "greet.py").read_text()
    messages = saved_messages(example)
    assert messages[0]["content"] == agent.SYSTEM_PROMPT  # still matches the program
    assert messages[1]["content"] == EDIT_DEMO_TASK
    assert "edit_file" in [c["function"]["name"] for m in messages for c in m.get("tool_calls", [])]


def test_replaying_the_edit_example_without_the_daily_tools_says_what_to_set(workdir):
    example = ROOT / "examples" / "edit_demo.jsonl"
    proc = run_in_process("--workdir", str(workdir), "--replay", str(example), env=clean_env())
    assert (
        "note: the transcript calls search, edit_file, which this run does not offer "
        "(edit_file, search: set LLM_DAILY_TOOLS=1), so the replay will leave the recorded path "
        "there"
    ) in proc.stderr


def test_the_installed_command_offers_the_daily_tools(tmp_path):
    from test_command import command_env

    home, project = tmp_path / "home", tmp_path / "project"
    home.mkdir()
    project.mkdir()
    with StubServer([reply("ok")]) as server:
        env = command_env(home, LLM_API_KEY=server.api_key, LLM_BASE_URL=server.url)
        proc = run_in_process("hi", env=env, cwd=project, installed=True)
    assert proc.returncode == 0, proc.stderr
    assert offered(server) == [*LESSON_TOOLS, "edit_file", "search", "list_files"]
