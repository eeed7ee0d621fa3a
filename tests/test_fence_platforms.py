"""The fence on each platform's branch, tried on this one: a defence only one branch has is a
hole on the others. Windows has no folder descriptors, so there the fence is Workspace.path's
check alone; macOS has no child subreaper, so there only the process group is killed. And a
command's endless output must be cut while it is read, not after: the agent's peak memory."""

from __future__ import annotations

import subprocess
import sys

import pytest
from conftest import ROOT, alive, execute, use_workspace
from fake_model import tool_call

from minimal_agent.common import files
from minimal_agent.tools import processes


def call(name: str, **arguments) -> str:
    return execute(tool_call(name, arguments))


def test_as_on_windows_a_sibling_whose_name_starts_with_the_workdirs_is_outside(
    tmp_path, monkeypatch
):
    # Without the walk from the workdir's descriptor (files.WALKS, as on Windows), a check on
    # the path's text ("starts with the workdir") would let .../play2 pass for .../play.
    monkeypatch.setattr(files, "WALKS", False)
    play, sibling = tmp_path / "play", tmp_path / "play2"
    play.mkdir()
    sibling.mkdir()
    (sibling / "secret").write_text("secret")
    use_workspace(play, timeout=5, yes=True)
    for path in ("../play2/secret", str(sibling / "secret")):
        assert "outside the workdir" in call("read_file", path=path)
        assert "outside the workdir" in call("write_file", path=path, content="overwritten")
    assert "outside the workdir" in call("write_file", path="../play2/new/file", content="x")
    assert (sibling / "secret").read_text() == "secret"
    assert sorted(p.name for p in sibling.rglob("*")) == ["secret"]


@pytest.mark.posix("sleep, & and $! in /bin/sh")
@pytest.mark.parametrize("ended", ["at the time-out", "when the command ended"])
def test_as_on_macos_the_whole_process_group_is_killed(workdir, monkeypatch, ended):
    # No subreaper finds the command's children there: only killing its process group, not
    # its own pid alone, ends a child that stayed in the group.
    monkeypatch.setattr(processes, "ON_LINUX", False)
    timed_out = ended == "at the time-out"
    use_workspace(workdir, timeout=1 if timed_out else 10, yes=True)
    command = "sleep 60 > /dev/null 2>&1 & echo $! > child.pid"
    result = call("run_shell", command=command + ("; wait" if timed_out else ""))
    assert result.startswith("Error: timed out" if timed_out else "exit code 0")
    assert not alive(int((workdir / "child.pid").read_text()))


PEAK = """
import resource, sys
sys.path.insert(0, sys.argv[1])
import agent
from minimal_agent.tools import processes
workspace = agent.Workspace(sys.argv[2], 3, True)
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
code, output = processes.run_command("yes", workspace)
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(code, len(output), (after - before) // 1024)  # kilobytes on Linux: MB grown
"""


@pytest.mark.linux("ru_maxrss in kilobytes, and yes")
def test_endless_output_leaves_the_agents_peak_memory_as_it_was(workdir):
    ran = subprocess.run(
        [sys.executable, "-c", PEAK, str(ROOT), str(workdir)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    code, kept, grown = ran.stdout.split()
    assert code == "None" and int(kept) < 21_000, ran.stderr  # timed out, its two ends kept
    assert int(grown) < 30, f"the agent grew by {grown} MB while `yes` ran for 3 s"
