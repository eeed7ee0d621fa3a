"""The tools as the model meets them: through execute_tool_call, with real files and processes."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time

import pytest
from conftest import ROOT, alive, execute, use_workspace
from fake_model import tool_call

import agent
from minimal_agent.common import files
from minimal_agent.views import display


@pytest.fixture
def tools(workdir):
    use_workspace(workdir, timeout=5, yes=True)
    return workdir


def call(name: str, **arguments) -> str:
    return execute(tool_call(name, arguments))


# --- the workdir fence -----------------------------------------------------------------


@pytest.mark.parametrize("path", ["../outside.txt", "sub/../../outside.txt", "/tmp/outside.txt"])
def test_paths_outside_the_workdir_are_refused(tools, path):
    assert "outside the workdir" in call("write_file", path=path, content="x")
    assert "outside the workdir" in call("read_file", path=path)
    assert not (tools.parent / "outside.txt").exists()


@pytest.mark.posix("symlinks, which Windows lets only privileged users make")
def test_a_symlink_pointing_out_is_refused_both_ways(tools):
    secret = tools.parent / "secret.txt"
    secret.write_text("secret")
    (tools / "link").symlink_to(secret)
    (tools / "dirlink").symlink_to(tools.parent)

    assert "outside the workdir" in call("read_file", path="link")
    assert "outside the workdir" in call("write_file", path="link", content="overwritten")
    assert "outside the workdir" in call("write_file", path="dirlink/new.txt", content="x")
    assert secret.read_text() == "secret"
    assert not (tools.parent / "new.txt").exists()


def test_a_sibling_folder_whose_name_starts_with_the_workdirs_is_outside(tmp_path):
    # A check on the path's text ("starts with the workdir") would let .../playground2 pass
    # for the workdir .../play; the fence compares whole path components.
    play, sibling = tmp_path / "play", tmp_path / "playground2"
    play.mkdir()
    sibling.mkdir()
    (sibling / "secret").write_text("secret")
    use_workspace(play, timeout=5, yes=True)

    for path in ("../playground2/secret", str(sibling / "secret")):
        assert "outside the workdir" in call("read_file", path=path)
        assert "outside the workdir" in call("write_file", path=path, content="overwritten")
    assert "outside the workdir" in call("write_file", path="../playground2/new", content="x")
    assert (sibling / "secret").read_text() == "secret"
    assert sorted(p.name for p in sibling.iterdir()) == ["secret"]


def test_absolute_paths_inside_the_workdir_are_fine(tools):
    target = tools / "abs.txt"
    assert call("write_file", path=str(target), content="ok").startswith("Wrote")
    assert call("read_file", path=str(target)) == "ok"


# --- write_file ------------------------------------------------------------------------


def test_write_file_creates_folders_and_reports_what_it_wrote(tools):
    result = call("write_file", path="a/b/c.txt", content="héllo")
    assert result == "Wrote 5 characters (6 bytes) to a/b/c.txt"
    assert (tools / "a/b/c.txt").read_text(encoding="utf-8") == "héllo"


@pytest.mark.posix("file modes")
def test_write_file_replaces_atomically_and_keeps_the_mode(tools):
    script = tools / "run.sh"
    script.write_text("old")
    script.chmod(0o755)
    call("write_file", path="run.sh", content="new")
    assert script.read_text() == "new"
    assert stat.S_IMODE(script.stat().st_mode) == 0o755
    assert sorted(p.name for p in tools.iterdir()) == ["run.sh"]  # no temporary file left


@pytest.mark.posix("file modes and the umask")
def test_the_old_mode_is_kept_under_a_restrictive_umask(tools):
    shared = tools / "shared.txt"
    shared.write_text("old")
    shared.chmod(0o664)
    umask = os.umask(0o077)  # a private umask would make a new file 0o600
    try:
        call("write_file", path="shared.txt", content="new")
    finally:
        os.umask(umask)
    assert shared.read_text() == "new"
    assert stat.S_IMODE(shared.stat().st_mode) == 0o664


@pytest.mark.posix("file modes and the umask")
def test_a_new_file_gets_the_usual_permissions(tools):
    call("write_file", path="new.txt", content="x")
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE((tools / "new.txt").stat().st_mode) == 0o666 & ~umask


def test_a_failed_write_leaves_the_old_file_whole(tools, monkeypatch):
    (tools / "keep.txt").write_text("original")

    def crash(*args, **options):
        raise OSError("disk full")

    monkeypatch.setattr(agent.os, "replace", crash)
    assert call("write_file", path="keep.txt", content="new").startswith("Error: OSError")
    assert (tools / "keep.txt").read_text() == "original"
    assert sorted(p.name for p in tools.iterdir()) == ["keep.txt"]


def test_write_file_refuses_a_folder(tools):
    (tools / "dir").mkdir()
    assert call("write_file", path="dir", content="x").startswith("Error: IsADirectoryError")


# --- read_file -------------------------------------------------------------------------


def test_read_file_refuses_folders_and_names_the_encoding_of_bytes_that_are_not_utf_8(tools):
    (tools / "dir").mkdir()
    (tools / "bin").write_bytes(b"ok\xff\xfeok")
    assert call("read_file", path="dir") == "Error: IsADirectoryError: dir is a folder, not a file"
    note, text = call("read_file", path="bin").split("\n")
    assert note.startswith("[bin is not UTF-8 text: it was decoded as Windows Latin-1 (cp1252)")
    assert text == "ok\xff\xfeok".encode("latin-1").decode("cp1252")


@pytest.mark.parametrize(
    "data, encoding, name",
    [
        ("café au lait\n".encode("latin-1"), "cp1252", "Windows Latin-1 (cp1252)"),
        ("中文注释\n".encode("gbk"), "gb18030", "GB18030 (GBK, Chinese)"),
        ("naïve\n".encode("utf-16"), "utf-16", "UTF-16"),
    ],
)
def test_read_file_of_another_encoding_gives_its_text_after_one_line_saying_so(
    tools, data, encoding, name
):
    """The model got "caf\ufffd au lait" and no word of why."""
    (tools / "notes.txt").write_bytes(data)
    result = call("read_file", path="notes.txt")
    note, text = result.split("\n", 1)
    assert note == (
        f"[notes.txt is not UTF-8 text: it was decoded as {name}; write_file would save it as "
        "UTF-8]"
    )
    assert text == data.decode(encoding) and "\ufffd" not in result


def test_read_file_of_a_binary_file_gives_its_size_and_type_not_its_bytes(tools):
    """The model got 3 KB of replacement characters."""
    png = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 12
    (tools / "logo.png").write_bytes(png)
    (tools / "data").write_bytes(os.urandom(3000) + b"\0")
    assert call("read_file", path="logo.png") == (
        f"[logo.png is a binary file ({len(png):,} bytes, PNG image), not text: its bytes are "
        "not shown; run_shell can inspect it]"
    )
    assert call("read_file", path="data").startswith(
        "[data is a binary file (3,001 bytes, type unknown), not text:"
    )


def test_read_file_of_utf_8_text_is_unchanged_also_when_a_character_is_cut_at_the_limit(tools):
    keep = files.keep(agent.MAX_RESULT_CHARS)
    (tools / "big.txt").write_text("é" * 100_000, encoding="utf-8")
    result = call("read_file", path="big.txt")
    assert not result.startswith("[") and result.startswith("é" * (keep // 2))


def test_read_file_returns_only_the_two_ends_of_a_big_file(tools):
    keep = files.keep(agent.MAX_RESULT_CHARS)
    (tools / "big.txt").write_text("H" * keep + "m" * 5_000_000 + "T" * keep)
    result = call("read_file", path="big.txt")
    assert result.startswith("H" * keep + "\n[... 5000000 bytes left out ...]\n")
    assert result.endswith("\n" + "T" * keep)
    assert len(result) <= agent.MAX_RESULT_CHARS


# Reads a file with read_file in a process whose memory is capped at 1 GiB, and reports the
# result with the CPU time and the growth of the peak memory the call took.
MEASURED_READ = """
import json, resource, sys
sys.path.insert(0, sys.argv[1])
import agent
ws = agent.Workspace(sys.argv[2], 5, True)
resource.setrlimit(resource.RLIMIT_AS, (2**30, 2**30))  # no test may take the machine's memory
before = resource.getrusage(resource.RUSAGE_SELF)
result = agent.execute_tool_call({"function": {"name": "read_file", "arguments": sys.argv[3]}}, ws)
after = resource.getrusage(resource.RUSAGE_SELF)
cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
print(json.dumps({"result": result, "cpu": cpu, "grown": after.ru_maxrss - before.ru_maxrss}))
"""


@pytest.mark.linux("RLIMIT_AS, and ru_maxrss in KiB (bytes on macOS)")
def test_read_file_of_a_huge_sparse_file_reads_only_its_ends(tools):
    size = 20 * 2**30  # 20 GiB, almost all of it a hole: it takes no disk space
    keep = files.keep(agent.MAX_RESULT_CHARS)
    with open(tools / "huge.txt", "wb") as f:  # text at both ends (a hole reads as NUL bytes)
        f.write(b"h" * keep)
        f.seek(size - keep)
        f.write(b"t" * keep)
    if os.stat(tools / "huge.txt").st_blocks * 512 > 2**20:
        pytest.skip("this file system does not keep holes in files")
    arguments = json.dumps({"path": "huge.txt"})
    proc = subprocess.run(
        [sys.executable, "-c", MEASURED_READ, str(ROOT), str(tools), arguments],
        capture_output=True, text=True, timeout=100,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    measured = json.loads(proc.stdout)
    result = measured["result"]
    assert result.startswith("h" * keep + "\n[... "), result[:200]
    assert f"\n[... {size - 2 * keep} bytes left out ...]\n" in result
    assert result.endswith("\n" + "t" * keep) and len(result) <= agent.MAX_RESULT_CHARS
    # Reading all of it takes a minute of CPU time (the kernel fills the hole with zeros), and
    # keeping it 20 GiB of memory; reading the two ends takes milliseconds and no memory.
    assert measured["cpu"] < 2, measured["cpu"]
    assert measured["grown"] < 100 * 1024, measured["grown"]  # KiB: well under 1 GiB


# --- caps --------------------------------------------------------------------------------


def test_cap_keeps_head_and_tail_and_counts_what_it_left_out():
    keep = files.keep(agent.MAX_RESULT_CHARS)
    text = "a" * keep + "b" * 30_000 + "c" * keep
    capped = files.capped(text, agent.MAX_RESULT_CHARS)
    assert capped == "a" * keep + "\n[... 30000 characters left out ...]\n" + "c" * keep
    assert len(capped) <= agent.MAX_RESULT_CHARS
    assert (
        files.capped("s" * agent.MAX_RESULT_CHARS, agent.MAX_RESULT_CHARS)
        == "s" * agent.MAX_RESULT_CHARS
    )


def test_every_tool_result_is_capped(tools):
    huge_name = "x" * 100_000
    result = execute(tool_call(huge_name, "{}"))
    assert result.startswith("Error: there is no tool")
    assert len(result) <= agent.MAX_RESULT_CHARS and "characters left out" in result


# --- run_shell ---------------------------------------------------------------------------


@pytest.mark.posix("/bin/sh: ; and exit")
def test_run_shell_reports_exit_code_and_both_streams(tools):
    result = call("run_shell", command="echo out; echo err >&2; exit 3")
    assert result == "exit code 3\nout\nerr\n"


@pytest.mark.posix("pwd")
def test_run_shell_runs_in_the_workdir(tools):
    # That its stdin is closed is tested in test_cli.py and test_terminal.py, where the agent's
    # own stdin is a pipe or a terminal (here, pytest's fd 0 is /dev/null already).
    assert call("run_shell", command="pwd") == f"exit code 0\n{tools.resolve()}\n"


@pytest.mark.posix("seq")
def test_long_shell_output_is_capped_with_head_and_tail(tools):
    result = call("run_shell", command="seq 1 200000")
    assert len(result) <= agent.MAX_RESULT_CHARS and result.count("left out") == 1
    assert result.startswith("exit code 0\n1\n2\n3\n")
    assert result.endswith("199999\n200000\n")
    omitted = int(result.split("[... ")[1].split(" characters")[0])
    kept = len(result) - len("exit code 0\n") - len(f"\n[... {omitted} characters left out ...]\n")
    assert kept + omitted == len("\n".join(map(str, range(1, 200001)))) + 1


@pytest.mark.posix("yes")
def test_endless_output_does_not_fill_memory(tools):
    use_workspace(tools, timeout=1, yes=True)
    result = call("run_shell", command="yes")
    assert result.startswith("Error: timed out after 1 s")
    assert len(result) <= agent.MAX_RESULT_CHARS and result.count("characters left out") == 1


@pytest.mark.posix("sleep, & and $! in /bin/sh")
def test_a_timeout_kills_the_whole_process_group(tools):
    use_workspace(tools, timeout=1, yes=True)
    started = time.monotonic()
    result = call("run_shell", command="echo before; sleep 60 & echo $! > child.pid; wait")
    elapsed = time.monotonic() - started

    assert elapsed < 30  # not killed, it would take the command's own 60 s
    assert result.startswith("Error: timed out after 1 s")
    assert "Output so far:\nbefore\n" in result
    child = int((tools / "child.pid").read_text())
    assert not alive(child)


@pytest.mark.posix("sleep, & and $! in /bin/sh, /dev/null")
def test_what_a_finished_command_leaves_running_is_killed(tools):
    result = call("run_shell", command="sleep 60 > /dev/null 2>&1 & echo $! > child.pid")
    assert result == "exit code 0\n"
    assert not alive(int((tools / "child.pid").read_text()))


# --- approval ----------------------------------------------------------------------------


class Terminal:
    """sys.stdin as a terminal where the user types the given answers, then ends input."""

    def __init__(self, *answers: str) -> None:
        self.answers = list(answers)

    def isatty(self) -> bool:
        return True

    def readline(self) -> str:
        return self.answers.pop(0) + "\n" if self.answers else ""


def shell_calls(count: int) -> list[str]:
    return [
        execute(tool_call("run_shell", {"command": f"echo ran >> log{i}"})) for i in range(count)
    ]


@pytest.mark.parametrize(
    "answers, ran",
    [
        (["y", "y"], [True, True]),
        (["y", "n"], [True, False]),
        (["", "yes"], [False, True]),
        (["a"], [True, True, True]),
        (["N", "a"], [False, True, True]),
        (["y"], [True, False]),  # then end of input: no
    ],
)
def test_approval_on_a_terminal(workdir, monkeypatch, capsys, answers, ran):
    use_workspace(workdir, timeout=5, yes=False)
    monkeypatch.setattr("sys.stdin", Terminal(*answers))
    results = shell_calls(len(ran))

    assert [(workdir / f"log{i}").exists() for i in range(len(ran))] == ran
    for result, did_run in zip(results, ran, strict=True):
        assert result.startswith("exit code 0") if did_run else "did not approve" in result
    err = capsys.readouterr().err
    assert "$ echo ran >> log0" in err and "Run it? [y/N/a]" in err


def test_a_command_cannot_disguise_itself_with_terminal_escapes(workdir, monkeypatch, capsys):
    use_workspace(workdir, timeout=5, yes=False)
    monkeypatch.setattr("sys.stdin", Terminal("n"))
    command = "rm -rf stuff\r\x1b[2Kecho harmless"
    execute(tool_call("run_shell", {"command": command}))
    err = capsys.readouterr().err
    assert "$ rm -rf stuff\\r\\x1b[2Kecho harmless" in err
    assert "\x1b[2K" not in err


def test_without_a_terminal_nothing_runs_and_the_model_is_told(workdir, monkeypatch, capsys):
    use_workspace(workdir, timeout=5, yes=False)
    monkeypatch.setattr("sys.stdin", open(os.devnull))
    [result] = shell_calls(1)
    assert result.startswith("Error: PermissionError: the command was not run")
    assert "--yes" in result
    assert not (workdir / "log0").exists()
    assert "stdin is not a terminal" in capsys.readouterr().err


def test_yes_runs_without_asking(workdir, monkeypatch, capsys):
    use_workspace(workdir, timeout=5, yes=True)
    monkeypatch.setattr("sys.stdin", Terminal())
    assert shell_calls(2)[1].startswith("exit code 0")
    assert "Run it?" not in capsys.readouterr().err


def test_short_arguments_for_the_step_line():
    assert display.short_arguments(json.dumps({"path": "a.txt"})) == "path='a.txt'"
    assert display.short_arguments('{"path": ') == '{"path":'
    assert len(display.short_arguments(json.dumps({"content": "x" * 500}))) <= 70
