"""minimal_agent/stores/conversations.py: where conversations are kept, the listing, finding one
again, and the lock that keeps a transcript to one writer (tried against other processes, and a
killed one)."""

from __future__ import annotations

import json
import os
import re
import signal
import stat
import subprocess
import sys
import types
from datetime import datetime
from pathlib import Path

import pytest
from conftest import ROOT

from minimal_agent.stores import conversations
from minimal_agent.stores.conversations import SessionError

T0 = 1_790_000_000  # an mtime: the transcripts' "last change", a second apart from here on
READ_CALL = {"id": "c1", "type": "function", "function": {"name": "read_file", "arguments": "{}"}}


def usage(cost: float | None, currency: str = "USD") -> dict:
    return {"event": "usage", "created": 1, "prompt_tokens": 900, "cache_hit_tokens": 800,
            "completion_tokens": 50, "cost": cost, "currency": currency}  # fmt: skip


def session(workdir, model: str = "deepseek-flash") -> dict:
    return {"event": "session", "workdir": str(workdir), "model": model,
            "started": "2026-12-04T11:30:00Z"}  # fmt: skip


def user(text: str) -> dict:
    return {"role": "user", "content": text}


def write(path: Path, *lines: dict | bytes, tail: bytes = b"", mtime: float | None = None) -> Path:
    """A transcript as the agent writes it (json.dumps, one a line; bytes as they are); tail: a
    half-written end."""
    encoded = (line if isinstance(line, bytes) else json.dumps(line).encode() for line in lines)
    path.write_bytes(b"".join(line + b"\n" for line in encoded) + tail)
    if mtime is not None:
        os.utime(path, (mtime, mtime))
    return path


def one_line(error: pytest.ExceptionInfo) -> str:
    message = str(error.value)
    assert "\n" not in message
    return message


# --- The folder ---------------------------------------------------------------------------


def test_the_folder_on_linux_is_xdg_state_home(monkeypatch, tmp_path):
    monkeypatch.setattr(sys, "platform", "linux")
    home = {"HOME": str(tmp_path)}
    assert conversations.sessions_dir(home) == tmp_path / ".local/state/minimal-agent/sessions"
    state = {**home, "XDG_STATE_HOME": str(tmp_path / "state")}
    assert conversations.sessions_dir(state) == tmp_path / "state/minimal-agent/sessions"
    relative = {**home, "XDG_STATE_HOME": "state"}  # invalid by the XDG spec: ignored
    assert conversations.sessions_dir(relative) == tmp_path / ".local/state/minimal-agent/sessions"


def test_the_folder_on_macos_is_application_support(monkeypatch, tmp_path):
    monkeypatch.setattr(sys, "platform", "darwin")
    env = {"HOME": str(tmp_path), "XDG_STATE_HOME": str(tmp_path / "state")}  # not used there
    expected = tmp_path / "Library" / "Application Support" / "minimal-agent" / "sessions"
    assert conversations.sessions_dir(env) == expected


def test_the_folder_on_windows_is_local_app_data(monkeypatch, tmp_path):
    monkeypatch.setattr(sys, "platform", "win32")
    local = {"LOCALAPPDATA": str(tmp_path / "Local"), "USERPROFILE": str(tmp_path)}
    assert conversations.sessions_dir(local) == tmp_path / "Local" / "minimal-agent" / "sessions"
    profile_only = {"USERPROFILE": str(tmp_path)}
    expected = tmp_path / "AppData" / "Local" / "minimal-agent" / "sessions"
    assert conversations.sessions_dir(profile_only) == expected


@pytest.mark.parametrize("platform", ["linux", "darwin", "win32"])
def test_llm_sessions_dir_moves_the_folder(monkeypatch, tmp_path, platform):
    monkeypatch.setattr(sys, "platform", platform)
    home = {"HOME": str(tmp_path), "USERPROFILE": str(tmp_path)}
    env = {**home, "LOCALAPPDATA": str(tmp_path), "LLM_SESSIONS_DIR": str(tmp_path / "kept")}
    assert conversations.sessions_dir(env) == tmp_path / "kept"
    assert conversations.sessions_dir({**home, "LLM_SESSIONS_DIR": "~/kept"}) == tmp_path / "kept"
    unset = conversations.sessions_dir({**env, "LLM_SESSIONS_DIR": " "})  # blank: as if unset
    assert unset.parts[-2:] == ("minimal-agent", "sessions")


@pytest.mark.posix("POSIX file permissions")
def test_the_folder_and_transcripts_are_the_owners_only(tmp_path):
    folder = tmp_path / "state" / "minimal-agent" / "sessions"
    path = conversations.new_transcript(folder)
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    with conversations.open_for_append(folder / "saved.jsonl"):  # a new file opened to write
        pass
    assert stat.S_IMODE((folder / "saved.jsonl").stat().st_mode) == 0o600


def test_a_folder_that_cannot_be_made_is_one_line(tmp_path):
    (tmp_path / "file").write_text("not a folder")
    with pytest.raises(SessionError) as error:
        conversations.new_transcript(tmp_path / "file" / "sessions")
    assert "LLM_SESSIONS_DIR" in one_line(error)


# --- IDs ----------------------------------------------------------------------------------


def test_ids_are_six_typable_characters():
    ids = {conversations.new_id() for _ in range(200)}
    assert all(re.fullmatch(r"[2-9a-hjkmnp-z]{6}", id) for id in ids)
    assert len(ids) == 200


def test_new_transcripts_are_unique(tmp_path):
    paths = [conversations.new_transcript(tmp_path) for _ in range(200)]
    assert len(set(paths)) == 200 and all(p.exists() and p.suffix == ".jsonl" for p in paths)
    assert {p.parent for p in paths} == {tmp_path}


def test_the_session_event_records_the_real_workdir(tmp_path):
    event = conversations.session_event(tmp_path / "a" / ".." / "b", "deepseek-flash")
    assert event["event"] == "session" and event["model"] == "deepseek-flash"
    assert event["workdir"] == os.path.realpath(tmp_path / "b")
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", event["started"])


# --- Listing ------------------------------------------------------------------------------


def test_a_row_has_the_workdir_first_task_turns_and_cost(tmp_path):
    path = write(
        tmp_path / "20261204-113000-ab12.jsonl",
        session("/home/me/project"),
        {"role": "system", "content": "You are a small coding agent."},
        user("Create hello.py\nthat prints hello"),
        {"role": "assistant", "content": None, "tool_calls": [READ_CALL]},
        {"event": "usage", "created": 1, "cost": 0.0042, "currency": "USD"},
        {"role": "tool", "tool_call_id": "c1", "content": "x" * 100_000},
        {"role": "assistant", "content": "done"},
        usage(0.0008),
        user("and now run it"),
        {"event": "compaction", "summary": "..."},
        usage(0.005),
        mtime=T0,
    )
    row = conversations.summarize(path, T0)
    assert (row.id, row.path, row.changed) == ("20261204-113000-ab12", path, T0)
    assert (row.workdir, row.model) == ("/home/me/project", "deepseek-flash")
    assert row.task == "Create hello.py\nthat prints hello"
    assert row.turns == 2
    assert row.costs == {"USD": pytest.approx(0.01)} and row.unpriced == 0


def test_older_transcripts_half_written_lines_and_unpriced_replies(tmp_path):
    old = write(tmp_path / "old.jsonl", {"role": "system", "content": "s"}, user("old task"))
    row = conversations.summarize(old)
    assert (row.workdir, row.model, row.task, row.turns) == (None, None, "old task", 1)
    assert row.costs == {} and row.changed == old.stat().st_mtime

    crashed = write(
        tmp_path / "crashed.jsonl",
        session("/w"),
        user("first"),
        usage(None),  # a server whose prices are unknown
        usage(0.5),
        b'{"event": "usage", "cost": 0.25,,}',  # spoilt: a reply of unknown cost
        tail=b'{"event": "usage", "created": 2, "cost": 1.5, "curr',  # cut off by a crash
    )
    row = conversations.summarize(crashed)
    assert (row.turns, row.costs, row.unpriced) == (1, {"USD": 0.5}, 2)
    cut_user = write(tmp_path / "cut.jsonl", user("one"), tail=b'{"role": "user", "content": "tw')
    assert conversations.summarize(cut_user).turns == 1


def test_only_top_level_user_messages_and_usage_events_count(tmp_path):
    quoted = 'my log says {"role": "user", "content": "x"} and {"event": "usage", "cost": 9}'
    path = write(
        tmp_path / "t.jsonl",
        user(quoted),  # in a string the quotes are escaped: not a message
        {"role": "tool", "tool_call_id": "c1", "content": quoted},
        {"event": "compaction", "replaced": [user("nested"), usage(5.0)]},
        {"content": "keys in another order", "role": "user"},
        {"cost": 0.25, "event": "usage", "currency": "USD"},
    )
    row = conversations.summarize(path)
    assert (row.task, row.turns, row.costs) == (quoted, 2, {"USD": 0.25})


def test_the_list_is_newest_first_and_limited(tmp_path):
    for n in range(5):
        write(tmp_path / f"s{n}.jsonl", session(f"/w{n}"), user(f"task {n}"), mtime=T0 + n)
    (tmp_path / "new-and-empty.jsonl").touch()  # created, nothing written yet: not shown
    (tmp_path / "notes.txt").write_text("not a transcript")
    assert [path.stem for path, _ in conversations.transcript_files(tmp_path)] == [
        "s4",
        "s3",
        "s2",
        "s1",
        "s0",
    ]
    lines = conversations.sessions_report(tmp_path, limit=3)
    assert [line.split()[0] for line in lines[1:4]] == ["s4", "s3", "s2"]
    assert f"2 older (all are in {tmp_path})" in lines[4]


def test_the_text_has_a_column_each_and_the_task_on_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("USERPROFILE", str(tmp_path))  # what expanduser reads on Windows
    write(
        tmp_path / "20261204-113000-ab12.jsonl",
        session(tmp_path / "project"),
        user("Create hello.py\n\n  that prints \x1b[31mhello\x1b[0m" + " and more" * 20),
        usage(0.0042),
        usage(0.5),
        mtime=T0,
    )
    write(tmp_path / "20261204-100000-cd34.jsonl", user("old one"), usage(None), mtime=T0 - 60)
    header, new, old, hint = conversations.format_sessions(
        [
            conversations.summarize(path, mtime)
            for path, mtime in conversations.transcript_files(tmp_path)
        ],
        tmp_path,
    )
    assert header.split() == ["ID", "last", "change", "turns", "cost", "workdir", "first", "task"]
    when = datetime.fromtimestamp(T0).strftime("%Y-%m-%d %H:%M")  # local time
    assert new.startswith(f"20261204-113000-ab12  {when}      1  $0.5042  ~")
    assert f"{os.sep}project  Create hello.py that prints \\x1b[31mhello" in new
    assert new.endswith("...") and len(new.split("  ")[-1]) == conversations.TASK_WIDTH
    earlier = datetime.fromtimestamp(T0 - 60).strftime("%Y-%m-%d %H:%M")
    assert old.split() == ["20261204-100000-cd34", *earlier.split(), "1", "-", "-", "old", "one"]
    assert "--resume ID" in hint


def test_an_empty_or_missing_folder_says_so(tmp_path):
    assert conversations.sessions_report(tmp_path) == [f"no saved conversations yet in {tmp_path}"]
    assert conversations.sessions_report(tmp_path / "missing")[0].startswith(
        "no saved conversations"
    )


@pytest.mark.parametrize(
    "costs, unpriced, shown",
    [
        ({}, 0, "-"),
        ({}, 3, "-"),
        ({"USD": 0.0042}, 0, "$0.0042"),
        ({"USD": 12.3456}, 0, "$12.35"),
        ({"USD": 0.01}, 2, "$0.0100+"),  # some replies unpriced: at least this much
        ({"CNY": 0.03, "USD": 0.01}, 0, "¥0.0300 + $0.0100"),
        ({"XYZ": 1.0}, 0, "1.00 XYZ"),
        ({"": 0.5}, 0, "0.5000"),
    ],
)
def test_the_cost(costs, unpriced, shown):
    assert conversations.format_cost(costs, unpriced) == shown


# --- Finding one again --------------------------------------------------------------------


def test_latest_for_picks_the_newest_of_this_workdir(tmp_path):
    folder, here, there = tmp_path / "sessions", tmp_path / "here", tmp_path / "there"
    for path in (folder, here, there):
        path.mkdir()
    write(folder / "a.jsonl", session(here), user("older here"), mtime=T0)
    write(folder / "b.jsonl", session(here / ".." / "here"), user("newest here"), mtime=T0 + 1)
    write(folder / "c.jsonl", session(there), user("newer, elsewhere"), mtime=T0 + 2)
    write(folder / "d.jsonl", user("no session event"), mtime=T0 + 3)
    write(folder / "e.jsonl", tail=b'{"event": "session", "workd', mtime=T0 + 4)
    assert conversations.latest_for(here, folder) == folder / "b.jsonl"
    assert conversations.latest_for(str(there) + os.sep, folder) == folder / "c.jsonl"
    assert conversations.latest_for(tmp_path, folder) is None
    assert conversations.latest_for(here, tmp_path / "missing") is None


@pytest.mark.posix("symbolic links (Windows needs a privilege for them)")
def test_latest_for_compares_real_paths(tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    write(tmp_path / "s.jsonl", session(os.path.realpath(tmp_path / "real")), user("t"))
    assert conversations.latest_for(tmp_path / "link", tmp_path) == tmp_path / "s.jsonl"


@pytest.fixture
def three(tmp_path) -> Path:
    folder = tmp_path / "sessions"
    folder.mkdir()
    for name in ("20261204-113000-ab12", "20261204-113000-cd34", "20261205-090000-ef56"):
        write(folder / f"{name}.jsonl", user(name))
    return folder


def test_resume_by_id_prefix_or_file(three, tmp_path, monkeypatch):
    assert (
        conversations.resolve("20261204-113000-ab12", three) == three / "20261204-113000-ab12.jsonl"
    )
    assert conversations.resolve("20261205", three) == three / "20261205-090000-ef56.jsonl"
    assert (
        conversations.resolve(" 20261204-113000-C", three) == three / "20261204-113000-cd34.jsonl"
    )
    assert conversations.resolve("20261205-090000-ef56.jsonl", three).parent == three
    elsewhere = write(tmp_path / "saved.jsonl", user("saved with --save"))
    assert conversations.resolve(str(elsewhere), three) == elsewhere
    monkeypatch.chdir(tmp_path)
    assert conversations.resolve("saved.jsonl", three) == elsewhere  # a file here comes first


def test_resume_ambiguous_or_missing_says_what_to_do(three, tmp_path):
    with pytest.raises(SessionError) as error:
        conversations.resolve("20261204", three)
    assert one_line(error) == (
        "2 conversations' IDs start with 20261204 (20261204-113000-ab12, 20261204-113000-cd34): "
        "give more of the ID (--sessions lists them)"
    )
    with pytest.raises(SessionError) as error:
        conversations.resolve("2027", three)
    assert "no conversation 2027" in one_line(error) and "--sessions" in str(error.value)
    with pytest.raises(SessionError) as error:
        conversations.resolve(str(tmp_path / "gone.jsonl"), three)
    assert "no such file" in one_line(error)
    with pytest.raises(SessionError) as error:
        conversations.resolve("", three)
    assert "--sessions" in one_line(error)
    with pytest.raises(SessionError):
        conversations.resolve("20261204", tmp_path / "missing")


def test_save_onto_a_conversation_is_refused(tmp_path):
    conversations.check_new_save(tmp_path / "new.jsonl")  # missing: fine
    (tmp_path / "empty.jsonl").touch()
    conversations.check_new_save(tmp_path / "empty.jsonl")
    kept = write(tmp_path / "my run.jsonl", user("t"))
    with pytest.raises(SessionError) as error:
        conversations.check_new_save(kept)
    quoted = f"'{kept}'" if sys.platform != "win32" else f'"{kept}"'  # as typed in a shell
    assert one_line(error) == (
        f"{kept} already holds a conversation: continue it with --resume {quoted}, or give "
        "--save a new file"
    )
    assert kept.read_bytes().count(b"\n") == 1


# --- One writer per transcript ------------------------------------------------------------

# Another agent: takes the lock on argv[1] and says so, then holds it until stdin closes.
HOLD = f"""
import sys
sys.path.insert(0, {str(ROOT)!r})
from minimal_agent.stores import conversations
try:
    transcript = conversations.open_for_append(sys.argv[1])
except conversations.SessionError as error:
    print(error, flush=True)
    sys.exit(3)
print("locked", flush=True)
if len(sys.argv) > 2:  # a command the agent runs, which goes on after the agent is killed
    import subprocess
    sleep = [sys.executable, "-c", "import time; time.sleep(60)"]
    command = subprocess.Popen(sleep, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    print(command.pid, flush=True)
sys.stdin.read()
transcript.write(b"the holder's last line\\n")
"""


def other_agent(path: Path, *args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", HOLD, str(path), *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_another_process_is_refused_while_one_writes(tmp_path):
    path = write(tmp_path / "t.jsonl", user("t"))
    before = path.read_bytes()
    with conversations.open_for_append(path) as transcript:
        transcript.write(b'{"role": "assistant", "content": "mine"}\n')
        transcript.flush()
        before = path.read_bytes()
        second = other_agent(path)
        out, err = second.communicate(timeout=30)
        assert second.returncode == 3, err
        assert out.strip() == (
            f"{path} is in use by another agent (pid {os.getpid()}): wait for it to finish, or "
            "continue another conversation"
            if os.path.exists("/proc/locks")  # Linux: it names the holder
            else f"{path} is in use by another agent: wait for it to finish, or continue "
            "another conversation"
        )
        assert path.read_bytes() == before
        assert conversations.summarize(path).turns == 1  # reading it is not blocked
    third = other_agent(path)  # closed: the lock is free
    assert third.stdout.readline().strip() == "locked"
    third.communicate("", timeout=30)
    assert path.read_bytes() == before + b"the holder's last line\n"


@pytest.mark.posix("SIGKILL")
def test_a_killed_agent_leaves_no_lock_behind(tmp_path):
    path = write(tmp_path / "t.jsonl", user("t"))
    before, mtime = path.read_bytes(), path.stat().st_mtime_ns
    holder = other_agent(path, "and run a command")
    try:
        assert holder.stdout.readline().strip() == "locked", holder.stderr.read()
        command = int(holder.stdout.readline())
        with pytest.raises(SessionError) as error:
            conversations.open_for_append(path)
        named = f" (pid {holder.pid})" if os.path.exists("/proc/locks") else ""  # Linux
        assert one_line(error).startswith(f"{path} is in use by another agent{named}: wait")
        assert (path.read_bytes(), path.stat().st_mtime_ns) == (before, mtime)
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait(timeout=30)
        with conversations.open_for_append(path) as transcript:  # the command it ran holds nothing
            transcript.write(b'{"role": "user", "content": "go on"}\n')
        assert path.read_bytes() == before + b'{"role": "user", "content": "go on"}\n'
    finally:
        if "command" in locals():
            os.kill(command, signal.SIGKILL)
        holder.kill()
        holder.communicate()


def test_a_missing_folder_is_one_line(tmp_path):
    with pytest.raises(SessionError) as error:
        conversations.open_for_append(tmp_path / "missing" / "t.jsonl")
    assert one_line(error).startswith(f"cannot open {tmp_path / 'missing' / 't.jsonl'}: ")


def test_the_windows_lock_is_one_byte_far_past_the_data(tmp_path, monkeypatch):
    """msvcrt.locking, faked here: the byte at 2**31-1 locked, none when another holds it, and
    appending still goes to the end."""
    calls = []

    def locking(fd: int, mode: int, nbytes: int) -> None:
        calls.append((os.lseek(fd, 0, os.SEEK_CUR), mode, nbytes))
        if len(calls) > 1:
            raise PermissionError(13, "Permission denied")  # as msvcrt says it: held

    fake = types.SimpleNamespace(LK_NBLCK=2, LK_UNLCK=0, locking=locking)
    monkeypatch.setitem(sys.modules, "msvcrt", fake)
    monkeypatch.setattr(sys, "platform", "win32")
    path = write(tmp_path / "t.jsonl", user("t"))
    before = path.read_bytes()
    with conversations.open_for_append(path) as transcript:
        transcript.write(b"appended\n")
    assert path.read_bytes() == before + b"appended\n"
    with pytest.raises(SessionError) as error:
        conversations.open_for_append(path)
    assert one_line(error) == (
        f"{path} is in use by another agent: wait for it to finish, or continue another "
        "conversation"
    )
    assert calls == [(2**31 - 1, 2, 1), (2**31 - 1, 2, 1)]
    assert path.read_bytes() == before + b"appended\n"
