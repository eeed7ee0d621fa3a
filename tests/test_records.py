"""Issue 35: the files the agent writes for itself (transcripts, the wire record, undo's store,
the prompt history, the --html page) are never written through a link, and a full disk loses
none of them silently. Each attack as the issue's table has it: a link planted where the agent
writes, a record whose disk fills (a failing write injected, and a real small tmpfs)."""

from __future__ import annotations

import ast
import errno
import json
import os
import re
import subprocess
from pathlib import Path

import pytest
from conftest import ROOT, clean_env, run_agent, run_in_process, stub_env
from fake_model import FakeClient, reply
from stub_server import StubServer
from test_undo import agent, done, shell, take_back, write

import agent as lesson
from minimal_agent.common import files
from minimal_agent.views.prompt import Prompt

VICTIM = "ssh-ed25519 AAAA... the user's own key\n"


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    """A file of the user's that a planted link leads to (as ~/.ssh/authorized_keys)."""
    folder = tmp_path / "home" / ".ssh"
    folder.mkdir(parents=True)
    path = folder / "authorized_keys"
    path.write_text(VICTIM)
    return path


def one_error(proc) -> str:
    lines = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    return lines[0]


# --- Nothing the agent writes goes through a link --------------------------------------------


@pytest.mark.posix("symbolic links")
def test_html_never_writes_through_a_link_planted_beside_the_page(tmp_path, workdir, victim):
    """The table's row: a repository commits page.html.partial -> ~/.ssh/authorized_keys; the
    model's answer holds an attacker's key line; the user runs --html ID page.html."""
    folder = tmp_path / "sessions"
    folder.mkdir()
    answer = "ssh-ed25519 AAAA... attacker"
    lesson.run("Hi", FakeClient(reply(answer)), model="m", workspace=lesson.Workspace(workdir),
               save=folder / "xyz789.jsonl")  # fmt: skip
    (workdir / "page.html.partial").symlink_to(victim)
    env = clean_env(LLM_SESSIONS_DIR=str(folder))
    proc = run_in_process("--html", "xyz", str(workdir / "page.html"), env=env)
    assert proc.returncode == 0, proc.stderr
    assert victim.read_text() == VICTIM
    assert answer in (workdir / "page.html").read_text()
    assert [p.name for p in workdir.iterdir() if p.name.endswith(".tmp")] == []


@pytest.mark.posix("symbolic links")
def test_html_refuses_a_page_name_that_is_a_link_in_one_line(tmp_path, workdir, victim):
    folder = tmp_path / "sessions"
    folder.mkdir()
    lesson.run("Hi", FakeClient(reply("Hello.")), model="m", workspace=lesson.Workspace(workdir),
               save=folder / "xyz789.jsonl")  # fmt: skip
    page = workdir / "page.html"
    page.symlink_to(tmp_path / "home" / "new.html")  # leads nowhere yet
    proc = run_in_process("--html", "xyz", str(page), env=clean_env(LLM_SESSIONS_DIR=str(folder)))
    assert proc.returncode == 1
    assert one_error(proc) == (
        f"error: cannot write {page}: {page} is a link: the agent writes its files only where "
        "no link leads elsewhere; remove it or give another name"
    )
    assert page.is_symlink() and not (tmp_path / "home" / "new.html").exists()


@pytest.mark.posix("symbolic links")
def test_save_into_a_planted_link_is_refused_and_its_target_never_made(tmp_path, workdir):
    """--save FILE where a repository committed FILE as a link to a file that does not exist
    yet (the next start would read it: a shell profile, a config)."""
    target = tmp_path / "home" / ".profile"
    target.parent.mkdir()
    (workdir / "notes.jsonl").symlink_to(target)
    with StubServer([done()]) as server:
        proc = agent(server, workdir, tmp_path / "sessions", "--save",
                     str(workdir / "notes.jsonl"), "hi")  # fmt: skip
    assert proc.returncode != 0 and server.requests == []
    assert "is a link" in one_error(proc)
    assert not target.exists()


RECORDS = {  # the record, as a path in the sessions folder of a conversation whose ID is given
    "transcript": "{}.jsonl",
    "wire record": "{}.wire",
    "undo journal": "{}.changes/journal.jsonl",
    "undo contents": "{}.changes/kept",
}


@pytest.mark.posix("symbolic links")
@pytest.mark.parametrize("record", RECORDS)
def test_a_record_swapped_for_a_link_is_never_appended_through(tmp_path, workdir, victim, record):
    sessions_dir = tmp_path / "sessions"
    (workdir / "a.txt").write_text("one\n")
    with StubServer([write("a.txt", "two\n", "c1"), done()]) as server:
        assert agent(server, workdir, sessions_dir, "edit a").returncode == 0
    [transcript] = sessions_dir.glob("*.jsonl")
    path = sessions_dir / RECORDS[record].format(transcript.stem)
    victim.write_bytes(path.read_bytes())  # so that the record still reads back as one
    kept = victim.read_bytes()
    path.unlink()
    path.symlink_to(victim)
    with StubServer([write("a.txt", "three\n", "c2"), done()]) as server:
        proc = agent(server, workdir, sessions_dir, "-r", transcript.stem, "edit a again")
    assert victim.read_bytes() == kept
    assert proc.returncode == 1
    assert f"{path} is a link" in one_error(proc)


@pytest.mark.posix("hard links")
def test_a_transcript_with_another_name_is_never_appended_through(tmp_path, workdir, victim):
    """A hard link (made by a command the user approved) is no way in either."""
    sessions_dir = tmp_path / "sessions"
    with StubServer([done()]) as server:
        assert agent(server, workdir, sessions_dir, "hi").returncode == 0
    [transcript] = sessions_dir.glob("*.jsonl")
    victim.write_bytes(transcript.read_bytes())
    kept = victim.read_bytes()
    transcript.unlink()
    os.link(victim, transcript)
    with StubServer([done()]) as server:
        proc = agent(server, workdir, sessions_dir, "-r", transcript.stem, "again")
    assert proc.returncode == 1 and server.requests == []
    assert f"{transcript} is a link: it has another name" in one_error(proc)
    assert victim.read_bytes() == kept


@pytest.mark.posix("symbolic links")
def test_the_prompt_history_is_never_written_through_a_link(tmp_path, victim):
    readline = pytest.importorskip("readline")
    history = tmp_path / "prompt_history"
    history.symlink_to(victim)
    readline.clear_history()
    readline.add_history("a line typed")  # as input() adds it
    Prompt(history).keep(readline, "a line typed")
    assert victim.read_text() == VICTIM and history.is_symlink()


# --- The list in docs/safety.md is every place the package writes a file --------------------

WRITING_CALLS = {  # a call by this name makes or replaces a file (open: see writes_by_mode)
    "os.replace", "os.rename", "mkstemp", "write_text", "write_bytes", "write_history_file",
    "append_history_file", "open_record", "replacing", "write_atomically", "open_for_append",
}  # fmt: skip
OPENING_CALLS = {"open", "os.open", "os.fdopen"}  # writing by their mode or flags
WRITING_MODE = re.compile(r"O_WRONLY|O_RDWR|O_CREAT|^['\"]\w*[wax+]")


def writing_places() -> set[str]:
    """module.function of each function in minimal_agent/ that opens a file for writing:
    calls WRITING_CALLS, or opens with a mode or flags that write (a name among the flags is
    looked up among the module's assignments)."""
    found = set()
    for module in sorted((ROOT / "minimal_agent").rglob("*.py")):
        tree = ast.parse(module.read_text())
        in_module = assignments(tree)  # once a module: each function's own is looked up first
        for function in ast.walk(tree):
            if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            values = {**in_module, **assignments(function)}
            for call in ast.walk(function):
                if not isinstance(call, ast.Call):
                    continue
                name = ast.unparse(call.func)
                short = name.rsplit(".", 1)[-1]
                writes = name in WRITING_CALLS or short in WRITING_CALLS
                if name in OPENING_CALLS and len(call.args) > 1:
                    mode = call.args[1]
                    text = ast.unparse(mode) + " ".join(
                        values.get(node.id, "") for node in ast.walk(mode)
                        if isinstance(node, ast.Name)
                    )  # fmt: skip
                    writes = bool(WRITING_MODE.search(text))
                if writes:
                    found.add(f"{module.stem}.{function.name}")
    return found


def assignments(tree: ast.AST) -> dict[str, str]:
    return {
        target.id: ast.unparse(node.value) for node in ast.walk(tree)
        if isinstance(node, ast.Assign) for target in node.targets if isinstance(target, ast.Name)
    }  # fmt: skip


def listed_places() -> set[str]:
    text = (ROOT / "docs" / "safety.md").read_text()
    section = text.split("### Every file the agent writes", 1)[1].split("\n#", 1)[0]
    return set(re.findall(r"^\| `([a-z_]+\.[a-z_]+)` \|", section, re.M))


def test_the_safety_docs_list_every_place_the_package_writes_a_file():
    assert listed_places() == writing_places()


def test_each_listed_place_names_a_test_that_exists():
    text = (ROOT / "docs" / "safety.md").read_text()
    section = text.split("### Every file the agent writes", 1)[1].split("\n#", 1)[0]
    named = re.findall(r"`tests/(test_\w+\.py)::(test_\w+)", section)
    assert len(named) >= len(listed_places())
    for module, test in named:
        assert f"def {test}(" in (ROOT / "tests" / module).read_text(), (module, test)


@pytest.mark.posix("symbolic links")
def test_undo_refuses_a_transcript_swapped_for_a_link(tmp_path, workdir, victim):
    sessions_dir = tmp_path / "sessions"
    with StubServer([write("a.txt", "two\n", "c1"), done()]) as server:
        assert agent(server, workdir, sessions_dir, "edit a").returncode == 0
    [transcript] = sessions_dir.glob("*.jsonl")
    victim.write_bytes(transcript.read_bytes())
    kept = victim.read_bytes()
    transcript.unlink()
    transcript.symlink_to(victim)
    proc = take_back(workdir, sessions_dir, "--undo", "-r", transcript.stem)
    assert proc.returncode == 1 and f"{transcript} is a link" in proc.stderr
    assert victim.read_bytes() == kept and (workdir / "a.txt").read_text() == "two\n"


# --- A full disk loses nothing silently ------------------------------------------------------

FULL = {"ENOSPC": errno.ENOSPC, "EDQUOT": errno.EDQUOT, "EIO": errno.EIO}


def failing_writes(monkeypatch, name: str, number: int, after: int = 0) -> None:
    """Every append to a record of the agent's whose path the regular expression name finds
    fails with errno number, after the first `after` (a line of a record is one append)."""
    real = files.append_whole
    count = {"n": 0}

    def append_whole(file, data: bytes) -> None:
        if re.search(name, os.readlink(f"/proc/self/fd/{file.fileno()}")):
            count["n"] += 1
            if count["n"] > after:
                raise OSError(number, os.strerror(number))
        real(file, data)

    monkeypatch.setattr(files, "append_whole", append_whole)


@pytest.mark.linux("finds a record's name in /proc/self/fd")
@pytest.mark.parametrize("full", FULL)
def test_a_full_disk_is_said_and_undo_names_the_turn(tmp_path, workdir, monkeypatch, full):
    """undo's journal refuses the change of step 2 (after its step began): one line, exit 1,
    and --undo says the turn's record stops at step 2 instead of calling it undone."""
    sessions_dir = tmp_path / "sessions"
    script = [write("a.txt", "one\n", "c1"), shell("echo two > a.txt", "c2"), done()]
    with StubServer(script) as server:
        # store, turn, step 1, its changes, step 2: the changes of step 2 are refused
        failing_writes(monkeypatch, r"journal\.jsonl$", FULL[full], after=5)
        proc = agent(server, workdir, sessions_dir, "--yes", "edit a")
        monkeypatch.undo()
    assert proc.returncode == 1
    assert one_error(proc) == (
        f"error: undo's record of turn 1 is not kept from step 2 on ({os.strerror(FULL[full])}): "
        "--undo cannot take back what that step and later ones changed, and will say so"
    )
    assert len(server.requests) == 3  # the work went on
    undone = take_back(workdir, sessions_dir, "--undo")
    assert undone.returncode == 1
    assert undone.stderr.splitlines() == [  # step 2 changed a.txt: a change not recorded
        "not undone: changed since (by you, an editor or another program), and undoing would "
        "overwrite it: a.txt; nothing was restored. To undo anyway: --undo --force (what it "
        "overwrites is kept: --redo puts it back); not undone: what turn 1 changed from step 2 "
        "on: its record is incomplete (the disk was full, or the agent was stopped); check "
        "those files yourself"
    ]
    assert (workdir / "a.txt").read_text() == "two\n"


@pytest.mark.parametrize(
    ("name", "what"),
    [(r"sessions/\w+\.jsonl$", "the transcript"),
     (r"\.wire$", "the record of requests and responses"), (r"/kept$", "undo's record of turn 1")],
)  # fmt: skip
@pytest.mark.linux("finds a record's name in /proc/self/fd")
def test_each_record_the_disk_refuses_is_one_line_and_an_error(
    tmp_path, workdir, monkeypatch, name, what
):
    sessions_dir = tmp_path / "sessions"
    script = [write("a.txt", "one\n", "c1"), done()]
    with StubServer(script) as server:
        failing_writes(monkeypatch, name, errno.ENOSPC, after=1 if "jsonl" in name else 0)
        proc = agent(server, workdir, sessions_dir, "edit a")
        monkeypatch.undo()
    assert proc.returncode == 1, proc.stderr
    assert one_error(proc).startswith(f"error: {what} is not kept from step ")
    assert "No space left on device" in one_error(proc)
    assert len(server.requests) == 2


def test_a_full_prompt_history_is_one_line_and_the_session_goes_on(tmp_path, monkeypatch):
    readline = pytest.importorskip("readline")
    history = tmp_path / "prompt_history"
    history.write_text("earlier\n")
    said: list[str] = []
    prompt = Prompt(history, notice=said.append)  # the session's events.notice
    real = os.replace

    def full(*args, **kwargs):
        raise OSError(errno.EDQUOT, os.strerror(errno.EDQUOT))

    monkeypatch.setattr(os, "replace", full)
    for line in ("first", "second"):
        readline.add_history(line)
        prompt.keep(readline, line)
    monkeypatch.setattr(os, "replace", real)
    assert said == [
        f"error: the prompt history is not kept from this line on ({os.strerror(errno.EDQUOT)}): "
        "the lines typed next are this session's only"
    ]
    assert history.read_text() == "earlier\n" and prompt.lost
    assert [p.name for p in tmp_path.iterdir()] == ["prompt_history"]  # no temporary left


@pytest.fixture
def small_disk(tmp_path: Path):
    """A 1 MiB tmpfs (root only: mount), unmounted after the test."""
    if os.geteuid() != 0:
        pytest.skip("needs root to mount a small tmpfs")
    folder = tmp_path / "disk"
    folder.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(folder)], check=True)
    yield folder
    subprocess.run(["umount", "-l", str(folder)], check=True)


@pytest.mark.linux
def test_a_command_filling_the_disk_of_the_workdir_and_sessions_folder(small_disk):
    """The table's row: the workdir and the sessions folder share a small filesystem and a
    command fills it. No traceback, one line naming what is not kept from which step, exit
    1; a later --undo names the turn whose record is incomplete and does not call it undone."""
    workdir, sessions_dir = small_disk / "work", small_disk / "sessions"
    workdir.mkdir()
    (workdir / "a.txt").write_text("mine\n")
    fill = "echo theirs > a.txt; head -c 2000000 /dev/zero > big"
    with StubServer([shell(fill, "c1"), done()]) as server:  # a process: its exit code
        env = stub_env(server, LLM_SESSIONS_DIR=str(sessions_dir))
        proc = run_agent("--workdir", str(workdir), "--yes", "fill", env=env)
    assert "Traceback" not in proc.stderr and proc.returncode == 1, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert errors and all("is not kept from step 1 on" in line for line in errors), errors
    (workdir / "big").unlink()
    undone = take_back(workdir, sessions_dir, "--undo")
    assert undone.returncode == 1 and "undid turn 1" not in undone.stderr.replace("partly ", "")
    assert "what turn 1 changed from step 1 on: its record is incomplete" in undone.stderr
    assert (workdir / "a.txt").read_text() == "theirs\n"


@pytest.mark.posix("symbolic links")
def test_undo_with_its_journal_swapped_for_a_link_changes_nothing(tmp_path, workdir, victim):
    """The journal is opened before anything is restored: a link there stops --undo before it
    changes a file, instead of after (when the undo could no longer be recorded)."""
    sessions_dir = tmp_path / "sessions"
    with StubServer([write("a.txt", "two\n", "c1"), done()]) as server:
        assert agent(server, workdir, sessions_dir, "edit a").returncode == 0
    [journal] = sessions_dir.rglob("journal.jsonl")
    victim.write_bytes(journal.read_bytes())
    kept = victim.read_bytes()
    journal.unlink()
    journal.symlink_to(victim)
    proc = take_back(workdir, sessions_dir, "--undo")
    assert proc.returncode == 1 and f"{journal} is a link" in proc.stderr
    assert len(proc.stderr.splitlines()) == 1
    assert victim.read_bytes() == kept and (workdir / "a.txt").read_text() == "two\n"


@pytest.mark.linux("finds a record's name in /proc/self/fd")
def test_json_says_a_lost_record_as_the_runs_error(tmp_path, workdir, monkeypatch):
    sessions_dir = tmp_path / "sessions"
    with StubServer([write("a.txt", "one\n", "c1"), done()]) as server:
        failing_writes(monkeypatch, r"\.wire$", errno.EIO)
        proc = agent(server, workdir, sessions_dir, "--json", "edit a")
        monkeypatch.undo()
    result = json.loads(proc.stdout)
    assert (proc.returncode, result["status"], result["exit_code"]) == (1, "error", 1)
    assert result["answer"] == "Done."
    assert result["error"] == (
        f"the record of requests and responses is not kept from step 1 on ({os.strerror(errno.EIO)}"
        "): --show --wire and --html end before it"
    )


@pytest.mark.linux("finds a record's name in /proc/self/fd")
def test_undo_of_a_turn_recorded_in_part_says_partly_and_what_stays(tmp_path, workdir, monkeypatch):
    sessions_dir = tmp_path / "sessions"
    script = [write("a.txt", "one\n", "c1"), shell("echo b > b.txt", "c2"), done()]
    with StubServer(script) as server:
        failing_writes(monkeypatch, r"journal\.jsonl$", errno.ENOSPC, after=5)  # as above
        assert agent(server, workdir, sessions_dir, "--yes", "edit").returncode == 1
        monkeypatch.undo()
    undone = take_back(workdir, sessions_dir, "--undo")
    assert undone.returncode == 1
    assert undone.stderr.splitlines() == [
        "partly undid turn 1 (edit):",
        "  removed: a.txt",
        "  not undone: what turn 1 changed from step 2 on: its record is incomplete (the disk "
        "was full, or the agent was stopped); check those files yourself",
    ]
    assert sorted(p.name for p in workdir.iterdir()) == ["b.txt"]
