"""What the README tells a newcomer to type or expect is still true of the code."""

from __future__ import annotations

import ast
import json
import re
import sys
import xml.etree.ElementTree as ET

import pexpect
import pytest
from conftest import ROOT, clean_env, run_agent

README = (ROOT / "README.md").read_text(encoding="utf-8")
AGENT = (ROOT / "agent.py").read_text(encoding="utf-8")


def finish_reason_line() -> int:
    """The line of `finish_reason = ...` in run(), where the debugging tour breaks."""
    run = next(
        node for node in ast.parse(AGENT).body
        if isinstance(node, ast.FunctionDef) and node.name == "run"
    )  # fmt: skip
    lines = AGENT.splitlines()
    found = [
        n for n in range(run.lineno, run.end_lineno + 1)
        if lines[n - 1].strip().startswith("finish_reason = ")
    ]  # fmt: skip
    assert len(found) == 1, "run() should have one `finish_reason = ...` line"
    return found[0]


def pdb_break() -> int:
    (number,) = re.findall(r"\(Pdb\) b agent\.py:(\d+)", README)
    return int(number)


def test_the_pdb_breakpoint_in_the_readme_is_the_finish_reason_line():
    right = finish_reason_line()
    assert pdb_break() == right, (
        f"the README's debugging tour says `b agent.py:{pdb_break()}`, but the "
        f"`finish_reason = ...` line in run() is line {right}: write `b agent.py:{right}`"
    )


@pytest.mark.posix("pdb on a pseudo-terminal (pexpect.spawn)")
def test_the_readme_pdb_commands_stop_at_that_line():
    (command,) = re.findall(r"^python -m pdb (agent\.py .*)$", README, re.MULTILINE)
    child = pexpect.spawn(
        sys.executable, ["-m", "pdb", *command.split()],
        cwd=str(ROOT), env=clean_env(LLM_API_KEY=""), encoding="utf-8", timeout=30,
    )  # fmt: skip
    try:
        child.expect_exact("(Pdb) ")
        child.sendline(f"b agent.py:{pdb_break()}")
        child.expect_exact("(Pdb) ")
        child.sendline("c")  # the first reply arrives; nothing has run yet
        child.expect_exact("(Pdb) ")
        assert f"agent.py({finish_reason_line()})run()" in child.before
        assert "-> finish_reason = resp.choices[0].finish_reason" in child.before
        child.sendline("q")  # quits pdb at once: no "bug in the agent", no restart
        child.expect(pexpect.EOF)
        assert "bug" not in child.before and "Traceback" not in child.before
    finally:
        child.close(force=True)


def test_the_debugging_tour_names_every_ide_configuration():
    tour = README[README.index("## Debugging tour") :].split("\n## ")[0]
    launch = json.loads((ROOT / ".vscode" / "launch.json").read_text())
    names = {config["name"] for config in launch["configurations"]}
    for path in (ROOT / ".run").glob("*.run.xml"):
        names.add(ET.parse(path).getroot().find("configuration").get("name"))
    for name in names:
        assert f"**{name}**" in tour, name
    assert ".vscode/launch.json" in tour and ".run/*.run.xml" in tour


def test_the_quick_start_shows_the_line_a_run_without_a_key_gets(workdir):
    (quoted,) = re.findall(r"`(error: LLM_API_KEY is not set [^`]*)`", README)
    before, after = quoted.split("(...)")
    proc = run_agent("--workdir", str(workdir), "hi", env=clean_env(LLM_API_KEY=""))
    assert proc.returncode == 1
    line = proc.stderr.strip()
    assert line.startswith(before) and line.endswith(after), line


def test_the_quick_start_names_files_that_exist():
    quick_start = README[README.index("## Quick start") :].split("\n## ")[0]
    for name in ("config.example.env", "examples/tool_demo.jsonl"):
        assert name in quick_start and (ROOT / name).is_file(), name
