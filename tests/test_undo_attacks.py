"""Issue 29: --undo tried as an attacker and as a user with a real project. Whatever the store
holds, whatever the workdir plants (links, FIFOs, files named like the agent's own), --undo and
--redo touch nothing outside the workdir and never hang; the store is out of the tools' reach;
an ID is an ID; every change is seen, however it hides; a conversation stays in its folder.

Each test is an attack or a user's step as the issue's table has it, run as the user runs the
agent (against the stub server), the files compared byte for byte."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import pytest
from conftest import ROOT, run_in_process, stub_env
from stub_server import StubServer
from test_undo import agent, done, shell, take_back, tree, write

from minimal_agent.common import files
from minimal_agent.stores import changes, conversations


def store_of(sessions_folder: Path) -> Path:
    [journal] = sessions_folder.rglob("journal.jsonl")
    return journal.parent


def conversation_id(sessions_folder: Path) -> str:
    [transcript] = sessions_folder.glob("*.jsonl")
    return transcript.stem


def rewrite_journal(store: Path, change) -> None:
    """Each line of the journal through change(line) (a dict), as an attacker would."""
    journal = store / "journal.jsonl"
    lines = [json.loads(line) for line in journal.read_text().splitlines()]
    journal.write_text("".join(json.dumps(change(line)) + "\n" for line in lines))


def one_line(proc) -> str:
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    return lines[0]


@pytest.fixture
def sessions_dir(tmp_path: Path) -> Path:
    return tmp_path / "sessions"


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    """A folder beside the workdir that no undo may touch."""
    folder = tmp_path / "victim"
    folder.mkdir()
    (folder / "a.txt").write_text("the model's\n")
    return folder


def edited(workdir: Path, sessions_dir: Path) -> None:
    """A conversation whose one turn changed a.txt (from "mine" to "the model's")."""
    (workdir / "a.txt").write_text("mine\n")
    with StubServer([write("a.txt", "the model's\n", "c1"), done()]) as server:
        assert agent(server, workdir, sessions_dir, "edit a").returncode == 0


# --- Nothing outside the workdir, whatever the store holds ---------------------------------


@pytest.mark.parametrize("bad", ["../victim/evil_profile.sh", "ABSOLUTE", "a//b.txt", "./a.txt"])
def test_a_journal_path_leaving_the_workdir_is_refused_even_with_force(
    workdir, sessions_dir, victim, bad
):
    edited(workdir, sessions_dir)
    bad = str(victim / "evil_profile.sh") if bad == "ABSOLUTE" else bad

    def forge(line):
        if line["event"] == "changes":
            line["changes"][0][0] = bad
        return line

    rewrite_journal(store_of(sessions_dir), forge)
    before, outside = tree(workdir), tree(victim)
    proc = take_back(workdir, sessions_dir, "--undo", "--force")
    assert proc.returncode == 1
    line = one_line(proc)
    assert "does not check out" in line and conversation_id(sessions_dir) in line
    assert "nothing was changed" in line
    assert tree(workdir) == before and tree(victim) == outside
    assert not (victim / "evil_profile.sh").exists()


def test_a_store_naming_another_workdir_is_not_believed(workdir, sessions_dir, victim):
    edited(workdir, sessions_dir)

    def elsewhere(line):
        if "workdir" in line:
            line["workdir"] = str(victim)
        return line

    rewrite_journal(store_of(sessions_dir), elsewhere)
    proc = take_back(workdir, sessions_dir, "--undo", "--force")
    assert proc.returncode == 1 and "does not check out" in one_line(proc)
    assert "never had" in proc.stderr
    assert (victim / "a.txt").read_text() == "the model's\n"
    assert (workdir / "a.txt").read_text() == "the model's\n"


@pytest.mark.parametrize(
    "forged",
    [
        '{"event": "changes", "turn": 1}',
        '{"event": "turn", "task": "no number"}',
        '{"event": "changes", "turn": 1, "changes": [["b.txt", {"type": "file"}, null]]}',
        '{"event": "undo", "turn": 7, "took": [], "paths": []}',
        '["not", "an", "object"]',
        "not JSON at all",
        '{"event": "somebody else\'s"}',
    ],
)
def test_a_malformed_store_line_ends_in_one_line_and_nothing_changes(workdir, sessions_dir, forged):
    edited(workdir, sessions_dir)
    journal = store_of(sessions_dir) / "journal.jsonl"
    journal.write_text(forged + "\n" + journal.read_text())
    for action in ("--undo", "--redo"):
        proc = take_back(workdir, sessions_dir, action)
        assert proc.returncode == 1
        line = one_line(proc)
        assert "does not check out" in line and conversation_id(sessions_dir) in line
    assert (workdir / "a.txt").read_text() == "the model's\n"


def test_kept_content_that_is_not_what_its_hash_says_is_refused(workdir, sessions_dir):
    edited(workdir, sessions_dir)
    kept = store_of(sessions_dir) / "kept"
    kept.write_bytes(kept.read_bytes().replace(b"mine\n", b"evil\n"))
    proc = take_back(workdir, sessions_dir, "--undo")
    assert proc.returncode == 1 and "does not check out" in one_line(proc)
    assert (workdir / "a.txt").read_text() == "the model's\n"


@pytest.fixture(params=["by descriptors", "by names"])
def reached(request, monkeypatch) -> str:
    """Both ways a path is reached: folder by folder through descriptors (POSIX), and by
    names checked one folder at a time (Windows, which has no descriptors of folders)."""
    if request.param == "by names":
        monkeypatch.setattr(files, "WALKS", False)
    return request.param


@pytest.mark.posix("symbolic links without privileges")
@pytest.mark.parametrize("force", [False, True])
def test_a_folder_replaced_by_a_link_is_a_conflict_and_nothing_is_written_through_it(
    workdir, sessions_dir, tmp_path, force, reached
):
    (workdir / "d").mkdir()
    (workdir / "d" / "keys").write_text("the user's keys\n")
    with StubServer([shell("rm d/keys", "c1"), done()]) as server:
        assert agent(server, workdir, sessions_dir, "--yes", "remove the keys").returncode == 0
    outside = tmp_path / "outside"
    outside.mkdir()
    (workdir / "d").rmdir()
    (workdir / "d").symlink_to(outside)  # a branch checkout, another run
    proc = take_back(workdir, sessions_dir, "--undo", *(["--force"] if force else []))
    assert proc.returncode == 1
    line = one_line(proc)
    assert line.startswith("not undone: ") and "d/keys" in line and "link" in line
    assert list(outside.iterdir()) == []
    assert (workdir / "d").is_symlink()


@pytest.mark.posix("symbolic links without privileges")
def test_links_planted_at_the_old_temporary_names_are_not_written_through(
    workdir, sessions_dir, tmp_path, reached
):
    edited(workdir, sessions_dir)
    outside = tmp_path / "outside.txt"
    outside.write_text("outside\n")
    for pid in range(os.getpid() - 2, os.getpid() + 3):  # the undo runs in this process
        (workdir / f"a.txt.{pid}.undo").symlink_to(outside)
    proc = take_back(workdir, sessions_dir, "--undo")
    assert proc.returncode == 0, proc.stderr
    assert outside.read_text() == "outside\n"
    assert (workdir / "a.txt").read_text() == "mine\n"
    assert (workdir / f"a.txt.{os.getpid()}.undo").is_symlink()
    assert not [p for p in workdir.iterdir() if p.name.endswith(".undo") and not p.is_symlink()]


@pytest.mark.posix("FIFOs")
def test_fifos_planted_at_the_old_temporary_names_do_not_hang_undo(
    workdir, sessions_dir, reached
):
    edited(workdir, sessions_dir)
    fifo = workdir / f"a.txt.{os.getpid()}.undo"
    os.mkfifo(fifo)
    hung = threading.Event()

    def release() -> None:  # if --undo hangs on the FIFO, let it go (the test then fails)
        hung.set()
        os.close(os.open(fifo, os.O_RDONLY | os.O_NONBLOCK))

    timer = threading.Timer(30, release)
    timer.start()
    try:
        proc = take_back(workdir, sessions_dir, "--undo")
    finally:
        timer.cancel()
    assert not hung.is_set(), "--undo hung on a FIFO planted at its temporary file's name"
    assert proc.returncode == 0, proc.stderr
    assert (workdir / "a.txt").read_text() == "mine\n"
    assert stat.S_ISFIFO(fifo.lstat().st_mode)


# --- The store out of reach ------------------------------------------------------------------


def test_a_saved_file_in_the_workdir_has_its_store_in_the_sessions_folder(workdir, sessions_dir):
    (workdir / "a.txt").write_text("mine\n")
    script = [
        write("a.txt", "the model's\n", "c1"),
        write("run.jsonl", '{"role": "user", "content": "forged"}\n', "c2"),
        write("run.changes/journal.jsonl", '{"event": "store", "workdir": "/"}\n', "c3"),
        done(),
    ]
    with StubServer(script) as server:
        proc = agent(server, workdir, sessions_dir, "--save", str(workdir / "run.jsonl"), "edit")
    assert proc.returncode == 0, proc.stderr
    results = [m["content"] for m in server.requests[-1]["messages"] if m["role"] == "tool"]
    assert results[1].startswith("Error: ") and "agent's own records" in results[1]
    transcript = (workdir / "run.jsonl").read_text()
    assert "forged" not in transcript.splitlines()[0]
    [journal] = sessions_dir.rglob("journal.jsonl")  # in the sessions folder, keyed to the file
    assert sessions_dir in journal.parents
    undone = take_back(workdir, sessions_dir, "--undo", "-r", str(workdir / "run.jsonl"))
    assert undone.returncode == 0, undone.stderr
    assert (workdir / "a.txt").read_text() == "mine\n"
    assert not (workdir / "run.changes" / "kept").exists()


def test_no_tool_reaches_a_sessions_folder_inside_the_workdir(workdir):
    inside = workdir / ".sessions"
    script = [
        write("a.txt", "a\n", "c1"),
        write(".sessions/forged.jsonl", "{}\n", "c2"),
        reply_reading(".sessions"),
        done(),
    ]
    with StubServer(script) as server:
        proc = agent(server, workdir, inside, "edit")
    assert proc.returncode == 0, proc.stderr
    results = [m["content"] for m in server.requests[-1]["messages"] if m["role"] == "tool"]
    assert all("agent's own records" in result for result in results[1:]), results
    assert not (inside / "forged.jsonl").exists()
    [journal] = inside.rglob("journal.jsonl")
    lines = [json.loads(line) for line in journal.read_text().splitlines()]
    [changed] = [line["changes"] for line in lines if line["event"] == "changes"]
    assert [path for path, *_ in changed] == ["a.txt"]  # its own records are not recorded


def reply_reading(path: str) -> dict:
    from fake_model import reply, tool_call

    return reply(None, tool_call("read_file", {"path": path}, "r1"), reasoning="")


# --- An ID is an ID --------------------------------------------------------------------------


def test_a_bare_word_is_an_id_never_a_file_in_the_current_folder(tmp_path, monkeypatch):
    folder = tmp_path / "sessions"
    folder.mkdir()
    (folder / "d95pcu.jsonl").write_text('{"role": "user", "content": "mine"}\n')
    repository = tmp_path / "repository"
    (repository / "d9.changes").mkdir(parents=True)
    (repository / "d9").write_text('{"role": "user", "content": "forged"}\n')
    monkeypatch.chdir(repository)
    assert conversations.resolve("d9", folder) == folder / "d95pcu.jsonl"
    assert conversations.resolve("./d9", folder) == repository / "d9"
    (folder / "d95pcu.jsonl").unlink()
    with pytest.raises(conversations.SessionError) as error:
        conversations.resolve("d9", folder)
    assert "./d9" in str(error.value)


# --- Every change seen -----------------------------------------------------------------------


@pytest.mark.posix("a POSIX shell command")
def test_a_same_size_edit_with_its_mtime_put_back_is_undone(workdir, sessions_dir):
    (workdir / "setup.py").write_text("version = 1\n")
    sneaky = (
        "python3 -c \"import os; s = os.stat('setup.py'); "
        "open('setup.py', 'w').write('version = 2\\n'); "
        "os.utime('setup.py', ns=(s.st_atime_ns, s.st_mtime_ns))\""
    )
    with StubServer([shell(sneaky, "c1"), done()]) as server:
        assert agent(server, workdir, sessions_dir, "--yes", "bump").returncode == 0
    assert (workdir / "setup.py").read_text() == "version = 2\n"
    proc = take_back(workdir, sessions_dir, "--undo")
    assert proc.returncode == 0, proc.stderr
    assert (workdir / "setup.py").read_text() == "version = 1\n"


def through_another_link(workdir: Path, elsewhere: str) -> list[dict]:
    """Issue 35's attack: a step links src/conftest.py from elsewhere; the next writes the
    payload through that link and removes it. Each step's command is a step of its own."""
    (workdir / "src").mkdir()
    (workdir / "src" / "conftest.py").write_text("safe = True\n")
    if elsewhere.startswith(".git/"):
        (workdir / ".git").mkdir()
    return [
        shell(f"ln src/conftest.py {elsewhere}", "c1"),
        shell(f"printf 'import os  # payload\\n' > {elsewhere}; rm {elsewhere}", "c2"),
    ]


@pytest.mark.posix("hard links and a POSIX shell command")
@pytest.mark.parametrize("where", ["in .git", "in another folder", "outside the workdir"])
def test_a_change_through_another_hard_link_is_reported_and_undone(
    workdir, sessions_dir, tmp_path, where
):
    elsewhere = {
        "in .git": ".git/o",
        "in another folder": "docs_o",  # made inside the workdir, then gone
        "outside the workdir": str(tmp_path / "o"),
    }[where]
    steps = through_another_link(workdir, elsewhere)
    with StubServer([*steps, done()]) as server:
        proc = agent(server, workdir, sessions_dir, "--yes", "--json-events", "go")
    assert proc.returncode == 0, proc.stderr
    assert (workdir / "src" / "conftest.py").read_text() == "import os  # payload\n"
    lines = [json.loads(line) for line in proc.stdout.splitlines()]
    changed = [line["path"] for line in lines if line["type"] == "file_change"]
    assert "src/conftest.py" in changed
    assert "src/conftest.py" in lines[-1]["files"]["changed"]
    undone = take_back(workdir, sessions_dir, "--undo")
    assert undone.returncode == 0, undone.stderr
    assert (workdir / "src" / "conftest.py").read_text() == "safe = True\n"


@pytest.mark.posix("hard links and a POSIX shell command")
def test_diff_in_a_chat_shows_a_change_through_a_hard_link_in_git(workdir, sessions_dir):
    steps = through_another_link(workdir, ".git/o")
    with StubServer([*steps, done()]) as server:
        proc = agent(server, workdir, sessions_dir, "--yes", "--chat", stdin="go\n/diff\n")
    assert proc.returncode == 0, proc.stderr
    assert "-safe = True" in proc.stderr and "+import os  # payload" in proc.stderr


@pytest.mark.posix("hard links")
def test_a_file_linked_before_the_run_is_watched_through_its_other_name(
    workdir, sessions_dir, tmp_path
):
    (workdir / "a.txt").write_text("mine\n")
    os.link(workdir / "a.txt", tmp_path / "other")  # a link the run starts with
    command = f"printf 'theirs\\n' > {tmp_path / 'other'}"
    with StubServer([shell("true", "c1"), shell(command, "c2"), done()]) as server:
        proc = agent(server, workdir, sessions_dir, "--yes", "--json", "go")
    assert json.loads(proc.stdout)["files"]["changed"] == ["a.txt"]
    assert take_back(workdir, sessions_dir, "--undo").returncode == 0
    assert (workdir / "a.txt").read_text() == "mine\n"


@pytest.mark.posix("hard links and a POSIX shell command")
def test_a_link_made_in_git_and_written_through_in_one_command_is_reported_and_undone(
    workdir, sessions_dir
):
    (workdir / "src").mkdir()
    (workdir / "src" / "conftest.py").write_text("safe = True\n")
    (workdir / ".git").mkdir()
    command = "ln src/conftest.py .git/o && printf 'import os  # payload\\n' > .git/o"
    with StubServer([shell(command, "c1"), done()]) as server:
        proc = agent(server, workdir, sessions_dir, "--yes", "--json", "go")
    assert json.loads(proc.stdout)["files"]["changed"] == ["src/conftest.py"]
    assert take_back(workdir, sessions_dir, "--undo").returncode == 0
    assert (workdir / "src" / "conftest.py").read_text() == "safe = True\n"


# --- The inotify watches are shared with the user's other programs: few taken --------------


def watches_held(watcher: changes.Watcher) -> int:
    """The watches the kernel holds on the watcher's inotify descriptor (its own count)."""
    with open(f"/proc/self/fdinfo/{watcher.fd}") as info:
        return sum(line.startswith("inotify wd:") for line in info)


def watching_at_most(monkeypatch, files: int, git_folders: int | None = None) -> None:
    """Watchers that watch at most this many files of one name by their inode (and folders
    of .git, if given)."""
    start = changes.Watcher.start.__func__

    def with_budget(cls):
        watcher = start(cls)
        watcher.file_budget = files
        watcher.git_budget = watcher.git_budget if git_folders is None else git_folders
        return watcher

    monkeypatch.setattr(changes.Watcher, "start", classmethod(with_budget))


@pytest.mark.linux("inotify")
@pytest.mark.parametrize("budget", [0, 10])
def test_files_of_one_name_take_no_watches_past_the_share(workdir, tmp_path, monkeypatch, budget):
    watching_at_most(monkeypatch, budget, git_folders=5)
    for number in range(20):
        (workdir / ".git" / f"g{number}").mkdir(parents=True)
    for number in range(300):
        folder = workdir / f"d{number % 3}"
        folder.mkdir(exist_ok=True)
        (folder / f"f{number}.txt").write_text(f"{number}\n")
    (workdir / "linked.txt").write_text("two names\n")
    os.link(workdir / "linked.txt", tmp_path / "other")
    recorder = changes.Recorder(str(workdir), tmp_path / "store")
    try:
        recorder.walk_and_record()
        files = watches_held(recorder.watcher) - 4 - 5  # the folders', .git's share
        assert files == budget + 1 or budget and files == budget  # linked.txt in the share?
        (workdir / "d0" / "f0.txt").write_text("changed\n")
        recorder.walk_and_record()
        assert recorder.state == changes.walk(recorder.root, recorder.skip)
        assert watches_held(recorder.watcher) == 4 + 5 + files
    finally:
        recorder.close()


@pytest.mark.linux("inotify")
@pytest.mark.parametrize("steps", ["one", "two"])
@pytest.mark.parametrize("other", ["docs/o", ".git/o", ".git/new/o"])
def test_past_the_share_a_link_made_in_another_folder_is_seen(
    workdir, tmp_path, monkeypatch, steps, other
):
    """A file of one name is not watched by its inode past the share; a command links it into
    another folder and writes through that name: the folder of its first name hears nothing,
    yet its change is recorded, whether the write is in the same command or the next."""
    watching_at_most(monkeypatch, 0)
    (workdir / "src").mkdir()
    (workdir / "docs").mkdir()
    (workdir / ".git").mkdir()
    (workdir / "src" / "conftest.py").write_text("safe = True\n")
    told = []
    recorder = changes.Recorder(
        str(workdir), tmp_path / "store", on_change=lambda *change: told.append(change)
    )
    recorder.turn_begins("link and write")
    try:
        recorder.step_begins(["run_shell"], 1)
        (workdir / other).parent.mkdir(exist_ok=True)
        os.link(workdir / "src" / "conftest.py", workdir / other)
        if steps == "two":
            recorder.step_begins(["run_shell"], 2)
        (workdir / other).write_text("import os  # payload\n")
        recorder.step_ends()
        assert ("src/conftest.py", "changed") in told
        assert recorder.state == changes.walk(recorder.root, recorder.skip)
    finally:
        recorder.close()


@pytest.mark.posix("file names that are bytes")
def test_file_names_that_are_not_utf8_are_recorded_and_restored_byte_exact(workdir, sessions_dir):
    old, new = b"old-\xe9\xff.txt", b"new-\xfe.txt"
    Path(os.fsdecode(bytes(workdir) + b"/" + old)).write_bytes(b"\x00old\n")
    command = f"python3 -c \"import os; os.remove({old!r}); open({new!r}, 'wb').write(b'new')\""
    with StubServer([shell(command, "c1"), done()]) as server:
        proc = agent(server, workdir, sessions_dir, "--yes", "rename")
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    names = lambda: sorted(os.listdir(bytes(workdir)))  # noqa: E731
    assert names() == [new]
    undone = take_back(workdir, sessions_dir, "--undo")
    assert undone.returncode == 0, undone.stderr
    assert names() == [old]
    assert Path(os.fsdecode(bytes(workdir) + b"/" + old)).read_bytes() == b"\x00old\n"
    assert take_back(workdir, sessions_dir, "--redo").returncode == 0
    assert names() == [new]


def nobody_python() -> list[str] | None:
    """A command that runs this suite's Python as the user nobody, or None."""
    if os.name != "posix" or shutil.which("setpriv") is None:
        return None
    site = [p for p in sys.path if p.endswith("site-packages")]
    for python in (sys.executable, f"/usr/bin/python3.{sys.version_info[1]}"):
        command = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", python]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), *site])}
        try:
            subprocess.run([*command, "-c", "import openai"], env=env, check=True,
                           capture_output=True, timeout=60)  # fmt: skip
        except (OSError, subprocess.SubprocessError):
            continue
        return command
    return None


@pytest.mark.posix("file modes")
def test_a_folder_the_turn_made_read_only_is_restored_for_an_ordinary_user(tmp_path):
    if os.geteuid() != 0:
        command = [sys.executable]  # an ordinary user already
    else:
        command = nobody_python()
        if command is None:
            pytest.skip("running as root, and no Python here can be run as the user nobody")
    base = Path(tempfile.mkdtemp(prefix="undo-nobody-"))
    try:
        base.chmod(0o755)
        workdir, sessions_dir = base / "work", base / "sessions"
        (workdir / "d").mkdir(parents=True)
        (workdir / "d" / "f.txt").write_text("kept\n")
        (workdir / "ro").mkdir()
        (workdir / "ro").chmod(0o555)  # read-only before the turn, and after it
        script = [shell("rm d/f.txt && chmod 555 d && chmod 755 ro && touch ro/new && "
                        "chmod 555 ro", "c1"), done()]  # fmt: skip
        with StubServer(script) as server:
            assert agent(server, workdir, sessions_dir, "--yes", "lock it").returncode == 0
        if os.geteuid() == 0:
            subprocess.run(["chown", "-R", "65534:65534", str(base)], check=True)
        with StubServer([]) as server:  # never asked
            env = stub_env(server, LLM_SESSIONS_DIR=str(sessions_dir))
            site = [p for p in sys.path if p.endswith("site-packages")]
            env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *site])
            proc = subprocess.run(
                [*command, str(ROOT / "agent.py"), "--workdir", str(workdir), "--undo"],
                env=env, capture_output=True, text=True, timeout=120,
            )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        assert (workdir / "d" / "f.txt").read_text() == "kept\n"
        assert stat.S_IMODE((workdir / "d").stat().st_mode) == 0o755
        assert not (workdir / "ro" / "new").exists()
        assert stat.S_IMODE((workdir / "ro").stat().st_mode) == 0o555
    finally:
        subprocess.run(["chmod", "-R", "u+rwx", str(base)], check=False)
        shutil.rmtree(base, ignore_errors=True)


def test_a_seen_copy_a_killed_session_left_is_cleared_at_the_next_start(workdir, sessions_dir):
    stale = sessions_dir / "k7m2qa.changes" / "seen"
    stale.parent.mkdir(parents=True)
    stale.write_bytes(b"x" * 100_000)
    live = sessions_dir / "saved" / "run-0123456789ab.changes" / "seen"
    live.parent.mkdir(parents=True)
    live.write_bytes(b"y")
    fd = os.open(live, os.O_RDWR)
    try:
        conversations.lock(fd, live)  # as a live session holds its own
        with StubServer([done()]) as server:
            assert agent(server, workdir, sessions_dir, "hello").returncode == 0
        assert not stale.exists()
        assert live.exists()
    finally:
        os.close(fd)


@pytest.mark.posix("a POSIX shell command")
def test_a_command_deleting_a_small_ignored_file_stays_undoable(workdir, sessions_dir):
    (workdir / ".gitignore").write_text(".env\nnode_modules/\n")
    (workdir / ".env").write_text("TOKEN=secret\n")
    with StubServer([shell("rm .env", "c1"), done()]) as server:
        assert agent(server, workdir, sessions_dir, "--yes", "clean").returncode == 0
    assert take_back(workdir, sessions_dir, "--undo").returncode == 0
    assert (workdir / ".env").read_text() == "TOKEN=secret\n"


# --- A conversation stays in its folder ------------------------------------------------------


def test_resume_from_elsewhere_goes_on_in_the_recorded_workdir(workdir, sessions_dir, tmp_path):
    with StubServer([write("a.txt", "a\n", "c1"), done()]) as server:
        assert agent(server, workdir, sessions_dir, "first").returncode == 0
    name = conversation_id(sessions_dir)
    marker = f"undo-test-{os.getpid()}.txt"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    try:
        with StubServer([write(marker, "b\n", "c2"), done()]) as server:
            env = stub_env(server, LLM_SESSIONS_DIR=str(sessions_dir))
            proc = run_in_process("-r", name, "second", env=env)  # no --workdir
        assert proc.returncode == 0, proc.stderr
        assert (workdir / marker).exists()
        assert f"workdir {os.path.realpath(workdir)} (the conversation's own)" in proc.stderr
    finally:
        (Path(ROOT) / "playground" / marker).unlink(missing_ok=True)

    with StubServer([write("c.txt", "c\n", "c3"), done()]) as server:
        proc = agent(server, elsewhere, sessions_dir, "-r", name, "third")
    assert proc.returncode == 0, proc.stderr
    said = [line for line in proc.stderr.splitlines() if "history is about" in line]
    assert len(said) == 1 and str(os.path.realpath(workdir)) in said[0]
    assert (elsewhere / "c.txt").exists() and not (workdir / "c.txt").exists()

    for turn_folder, path in ((elsewhere, "c.txt"), (workdir, marker), (workdir, "a.txt")):
        proc = take_back(tmp_path, sessions_dir, "--undo", "-r", name)  # from another folder
        assert proc.returncode == 0, proc.stderr
        assert not (turn_folder / path).exists()


# --- The suite's hole ------------------------------------------------------------------------


def test_after_an_undo_and_new_work_there_is_nothing_to_redo(workdir, sessions_dir):
    with StubServer([write("a.txt", "old turn\n", "c1"), done()]) as server:
        assert agent(server, workdir, sessions_dir, "one").returncode == 0
    assert take_back(workdir, sessions_dir, "--undo").returncode == 0
    with StubServer([write("b.txt", "new work\n", "c2"), done()]) as server:
        assert agent(server, workdir, sessions_dir, "-c", "two").returncode == 0
    proc = take_back(workdir, sessions_dir, "--redo")
    assert proc.returncode == 1 and one_line(proc).startswith("nothing to redo: ")
    assert not (workdir / "a.txt").exists() and (workdir / "b.txt").read_text() == "new work\n"


def test_changes_module_keeps_no_seen_copy_after_the_session(workdir, sessions_dir, monkeypatch):
    monkeypatch.setattr(changes, "IN_MEMORY", 0)  # every content held in `seen`
    (workdir / "a.txt").write_text("a\n")
    with StubServer([write("a.txt", "b\n", "c1"), done()]) as server:
        assert agent(server, workdir, sessions_dir, "edit").returncode == 0
    assert not list(sessions_dir.rglob("seen"))
    assert take_back(workdir, sessions_dir, "--undo").returncode == 0
    assert (workdir / "a.txt").read_text() == "a\n"


# --- Fast: the folders watched are rescanned alone, and see what a whole walk sees -----------


@pytest.mark.posix("POSIX file operations")
@pytest.mark.parametrize("watched", [True, False, "folders only"])
def test_each_walk_after_the_first_sees_what_a_whole_walk_sees(
    workdir, tmp_path, watched, monkeypatch
):
    if not watched:  # macOS, Windows: a whole walk each time
        monkeypatch.setattr(changes.Watcher, "start", classmethod(lambda cls: None))
    if watched == "folders only" and sys.platform.startswith("linux"):  # past the share
        watching_at_most(monkeypatch, 0, git_folders=0)
    for number in range(30):
        folder = workdir / f"d{number % 3}" / f"e{number % 2}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"f{number}.txt").write_text(f"{number}\n")
    (workdir / "top.txt").write_text("top\n")

    def same_size_edit() -> None:
        path = workdir / "d0" / "e0" / "f0.txt"
        old = path.stat()
        path.write_text("X\n")
        os.utime(path, ns=(old.st_atime_ns, old.st_mtime_ns))

    steps = [
        lambda: (workdir / "d1" / "e1" / "f1.txt").write_text("appended\n"),
        same_size_edit,
        lambda: (workdir / "new" / "deeper").mkdir(parents=True),
        lambda: (workdir / "new" / "deeper" / "n.txt").write_text("n\n"),
        lambda: (workdir / "d2").rename(workdir / "moved"),
        lambda: (workdir / "moved" / "e0" / "f2.txt").write_text("after the move\n"),
        lambda: shutil.rmtree(workdir / "d1"),
        lambda: (workdir / "d0" / "e1").chmod(0o700),
        lambda: (workdir / "link").symlink_to("top.txt"),
        lambda: (workdir / "top.txt").rename(workdir / "new" / "top.txt"),
        lambda: (workdir / "d0").rename(workdir / "new" / "deeper" / "d0"),
        lambda: (workdir / "new" / "deeper" / "d0" / "e0" / "f0.txt").unlink(),
    ]
    recorder = changes.Recorder(str(workdir), tmp_path / "store")
    recorder.turn_begins("many changes")
    try:
        for step in steps:
            recorder.walk_ahead()
            recorder.step_begins(["run_shell"])
            assert recorder.state == changes.walk(recorder.root, recorder.skip)
            step()
        recorder.step_ends()
        assert recorder.state == changes.walk(recorder.root, recorder.skip)
        if watched and sys.platform.startswith("linux"):
            assert recorder.watcher is not None  # the rescans were checked, not whole walks
    finally:
        recorder.close()


def test_a_resumed_conversation_with_a_broken_store_is_refused_in_one_line(workdir, sessions_dir):
    edited(workdir, sessions_dir)
    journal = store_of(sessions_dir) / "journal.jsonl"
    journal.write_text('{"event": "turn"}\n' + journal.read_text())
    with StubServer([done()]) as server:
        proc = agent(server, workdir, sessions_dir, "-c", "go on")
    assert proc.returncode == 1 and server.requests == [] and "Traceback" not in proc.stderr
    line = proc.stderr.strip().splitlines()[-1]
    assert line.startswith("error: the undo record of the conversation ")
    assert "does not check out" in line and conversation_id(sessions_dir) in line


@pytest.mark.linux("bubblewrap is Linux only")
@pytest.mark.parametrize("parent", ["/tmp", "/var/tmp"])
def test_a_sandboxed_command_cannot_write_any_conversations_store_or_transcript(workdir, parent):
    if not shutil.which("bwrap"):
        pytest.skip("bubblewrap (the bwrap command) is not installed")
    with tempfile.TemporaryDirectory(dir=parent) as folder:
        sessions_dir = Path(folder) / "sessions"
        edited(workdir, sessions_dir)  # an earlier conversation, with a store
        before = {p: p.read_bytes() for p in sessions_dir.rglob("*") if p.is_file()}
        forge = (f"for f in {sessions_dir}/*.jsonl {sessions_dir}/*.changes/*; do "
                 f"echo forged >> $f; done; echo x > {sessions_dir}/new.jsonl; true")  # fmt: skip
        with StubServer([shell(forge, "c2"), done()]) as server:
            proc = agent(server, workdir, sessions_dir, "--sandbox", "--yes", "forge")
        assert proc.returncode == 0, proc.stderr
        assert not (sessions_dir / "new.jsonl").exists()
        for path, data in before.items():
            assert b"forged" not in path.read_bytes() and path.read_bytes().startswith(data)


def test_a_signal_between_a_walks_making_and_its_start_loses_no_change(tmp_path):
    """Ctrl-C can land after the walk ahead's thread is made and before it is started: the
    close must neither crash ("cannot join thread before it is started") nor skip the walk."""
    workdir = tmp_path / "work"
    workdir.mkdir()
    (workdir / "a.txt").write_text("before\n")
    seen = []
    recorder = changes.Recorder(
        str(workdir), tmp_path / "store", on_change=lambda path, change: seen.append(path)
    )

    class InterruptedAtStart(threading.Thread):
        def start(self):
            raise KeyboardInterrupt

    try:
        recorder.turn_begins("go")
        recorder.walk_ahead()
        recorder.step_begins(["run_shell"])
        (workdir / "a.txt").write_text("after\n")
        recorder.thread = InterruptedAtStart
        with pytest.raises(KeyboardInterrupt):
            recorder.walk_ahead()
    finally:
        recorder.close()
    assert seen == ["a.txt"]
