"""What the README tells a newcomer to type or expect is still true of the code."""

from __future__ import annotations

import ast
import json
import re
import shutil
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET

import forked_agents
import pexpect
import pyte
import pytest
from conftest import ROOT, clean_env, run_agent

README = (ROOT / "README.md").read_text(encoding="utf-8")


def pdb_tour() -> tuple[list[str], list[str]]:
    """The README's pdb session: the command line's arguments, and the (Pdb) commands."""
    block = README[README.index("python -m pdb agent.py") :].split("```")[0]
    lines = block.strip().splitlines()
    commands = [line.removeprefix("(Pdb) ") for line in lines[1:] if line.startswith("(Pdb) ")]
    return lines[0].removeprefix("python -m pdb ").split(), commands


def follow_the_tour(folder, workdir) -> dict[str, str]:
    """Type the README's pdb commands as written, nothing else, then q; return what pdb
    printed after each command."""
    args, commands = pdb_tour()
    child = pexpect.spawn(
        sys.executable, ["-m", "pdb", *args, "--workdir", str(workdir)],
        cwd=str(folder), env=clean_env(LLM_API_KEY=""), encoding="utf-8", timeout=30,
    )  # fmt: skip
    shown = {}
    try:
        child.expect_exact("(Pdb) ")
        for command in commands:
            child.sendline(command)
            child.expect_exact("(Pdb) ")
            shown[command] = child.before
        child.sendline("q")  # quits pdb at once: no "bug in the agent", no restart
        child.expect(pexpect.EOF)
        assert "bug" not in child.before and "Traceback" not in child.before
        return shown
    finally:
        child.close(force=True)


def test_the_pdb_tour_uses_no_line_numbers():
    args, commands = pdb_tour()
    assert commands[0].startswith("b agent.") and "p msg.tool_calls" in commands
    assert not any(re.search(r"\d", command) for command in commands)


def what_the_tour_shows(shown: dict[str, str]) -> None:
    """Each stop shows what the README says: run()'s reply, its calls and its reasoning."""
    assert "NameError" not in "".join(shown.values()), shown
    assert "agent.py(" in shown["up"] and ")run()" in shown["up"]
    assert "write_file" in shown["p msg.tool_calls"], shown
    assert "'reasoning_content': 'Write the file first" in shown["p msg.model_extra"], shown


@pytest.mark.posix("pdb on a pseudo-terminal (pexpect.spawn)")
def test_the_readme_pdb_commands_as_written_show_the_reply_its_calls_and_reasoning(workdir):
    what_the_tour_shows(follow_the_tour(ROOT, workdir))


@pytest.mark.posix("pdb on a pseudo-terminal (pexpect.spawn)")
def test_the_tour_still_works_after_lines_are_added_above_run(app, workdir):
    shutil.copytree(ROOT / "examples", app / "examples")
    source = (app / "agent.py").read_text(encoding="utf-8")
    added = "\n".join(f"# a learner's line {n}" for n in range(7)) + "\n\n\ndef run("
    (app / "agent.py").write_text(source.replace("\n\n\ndef run(", added, 1), encoding="utf-8")
    what_the_tour_shows(follow_the_tour(app, workdir))


@pytest.mark.posix("pdb reading its commands from a pipe")
def test_pdb_with_its_commands_piped_in_does_not_crash(workdir):
    # pdb reads its first commands from the pipe before main() runs, and the rest wait in
    # stdin's buffer: stdin can no longer be reconfigured (io.UnsupportedOperation), and main()
    # must leave it as it is (cli.never_fail_on_output) instead of crashing.
    args, _ = pdb_tour()
    proc = subprocess.run(
        [sys.executable, "-m", "pdb", *args, "--workdir", str(workdir)],
        input="b agent.run\nc\nn\nc\n", capture_output=True, text=True, timeout=60,
        cwd=ROOT, env=clean_env(LLM_API_KEY=""),
    )  # fmt: skip
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stdout + proc.stderr
    assert "391" in proc.stdout  # the replay ran to its end under pdb


def test_the_debugging_tour_names_every_ide_configuration():
    tour = README[README.index("## Debugging tour") :].split("\n## ")[0]
    launch = json.loads((ROOT / ".vscode" / "launch.json").read_text())
    names = {config["name"] for config in launch["configurations"]}
    for path in (ROOT / ".run").glob("*.run.xml"):
        names.add(ET.parse(path).getroot().find("configuration").get("name"))
    for name in names:
        assert f"**{name}**" in tour, name
    assert ".vscode/launch.json" in tour and ".run/*.run.xml" in tour


def add_a_tool_pieces() -> tuple[str, dict, tuple]:
    """The README's "Add a tool": the function's source, the schema, and the TOOL_MAP entry."""
    section = README[README.index("## Add a tool") :].split("\n## ")[0]
    function, schema = re.findall(r"```python\n(.*?)```", section, re.DOTALL)
    (entry,) = re.findall(r'in `TOOL_MAP`: `"(\w+)": (\w+)`', section)
    return function, ast.literal_eval(schema.strip().rstrip(",")), (entry[0], entry[1])


def test_the_shipped_example_test_is_the_readmes_word_for_word():
    section = README[README.index("## Test your change") :].split("\n## ")[0]
    (example,) = re.findall(r"```python\n(.*?)```", section, re.DOTALL)
    shipped = (ROOT / "tests" / "test_readme_example.py").read_text(encoding="utf-8")
    assert "tests/test_readme_example.py holds exactly this test" in section
    body = example.split("\n\n\n", 1)[1]  # after the imports
    assert body in shipped


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


def shown_run() -> list[str]:
    """The lines of the run the README's "What you see" shows."""
    section = README[README.index("## What you see") :].split("\n## ")[0]
    return section.split("```\n")[1].splitlines()


@pytest.mark.posix("the replay on a pseudo-terminal (pexpect.spawn)")
def test_what_you_see_is_what_the_quick_starts_replay_shows_on_a_terminal(app):
    # The quick start's step 4 typed as it stands, in a copy (the default workdir is the copy's
    # playground/), and y typed at the prompt: the screen is the README's block, line for line.
    shutil.copytree(ROOT / "examples", app / "examples")
    quick_start = README[README.index("## Quick start") :].split("\n## ")[0]
    (command,) = re.findall(r"^\s*(python agent\.py --replay .*)$", quick_start, re.MULTILINE)
    child = forked_agents.spawn(
        sys.executable, command.split()[1:], cwd=str(app), env=clean_env(LLM_API_KEY=""),
        encoding="utf-8", timeout=60, dimensions=(40, 200),
    )  # fmt: skip
    try:
        child.expect_exact("Run it? ")
        shown = child.before + child.after
        child.sendline("y")
        child.expect(pexpect.EOF)
        shown += child.before
    finally:
        child.close(force=True)
    screen = pyte.Screen(200, 40)
    pyte.Stream(screen).feed(shown)
    lines = [line.rstrip() for line in screen.display if line.strip()]
    lines[0] = lines[0].replace(str(app), ".../minimal-agent")
    assert lines == shown_run()


# --- README.zh-CN.md: the learner's path for the course's Chinese learners ----------------

README_ZH = (ROOT / "README.zh-CN.md").read_text(encoding="utf-8")
LEARNERS_PATH = {  # each section of the English README and its Chinese one
    "Quick start": "快速开始",
    "What you see": "回放时你会看到什么",
    "Debugging tour (VS Code and PyCharm)": "调试之旅（VS Code 和 PyCharm）",
    "Add a tool": "添加一个工具",
    "Test your change": "测试你的修改",
    "Next lessons: rules and hooks": "下一课：规则和钩子",
}
FENCED = re.compile(r"^ *```.*?^ *``` *$", re.MULTILINE | re.DOTALL)
CODE_SPAN = re.compile(r"(?<!`)`([^`\n]+(?:\n[^`\n]+)*)`(?!`)")


def section_of(text: str, heading: str) -> str:
    return text[text.index(f"\n## {heading}\n") :].split("\n## ")[1]


def fenced_blocks(text: str) -> list[str]:
    """The fenced code blocks of text, each without the indent of the list item it is in."""
    return [textwrap.dedent(block) for block in FENCED.findall(text)]


@pytest.mark.parametrize("english, chinese", LEARNERS_PATH.items(), ids=list(LEARNERS_PATH))
def test_the_chinese_readme_has_the_english_ones_code_blocks(english, chinese):
    blocks = fenced_blocks(section_of(README, english))
    assert blocks, english
    assert fenced_blocks(section_of(README_ZH, chinese)) == blocks


def test_every_command_and_name_in_the_chinese_readme_is_the_english_ones():
    # Inline code too (commands, names, the line a run without a key prints): word for word,
    # wherever the English README wraps it.
    english = " ".join(FENCED.sub("", README).split())
    for span in CODE_SPAN.findall(FENCED.sub("", README_ZH)):
        assert f"`{' '.join(span.split())}`" in english, span


def test_the_readme_links_the_chinese_one_in_its_first_lines_and_back():
    assert "(README.zh-CN.md)" in "".join(README.splitlines()[:5])
    assert "(README.md)" in "".join(README_ZH.splitlines()[:5])
    assert "\n## " + "\n## ".join(LEARNERS_PATH.values()) == "".join(
        "\n" + line for line in README_ZH.splitlines() if line.startswith("## ")
    )
