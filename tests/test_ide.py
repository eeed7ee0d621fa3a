"""The VS Code launch configurations run as VS Code would start them: each from another working
directory, with ${workspaceFolder} and ${input:...} filled in."""

from __future__ import annotations

import json

from conftest import ROOT, clean_env, finish, run_agent, spawn, stub_env
from stub_server import StubServer, demo_script

LAUNCH = json.loads((ROOT / ".vscode" / "launch.json").read_text())
CONFIGS = {config["name"]: config for config in LAUNCH["configurations"]}


def arguments(config: dict, workdir, task: str = "count the files") -> list[str]:
    args = [a.replace("${workspaceFolder}", str(ROOT)) for a in config["args"]]
    args = [str(workdir) if a == str(ROOT / "playground") else a for a in args]
    return [task if a == "${input:task}" else a for a in args]


def test_every_configuration_starts_agent_py_in_a_terminal():
    assert len(CONFIGS) == 3
    for config in CONFIGS.values():
        assert config["program"] == "${workspaceFolder}/agent.py"
        assert config["console"] == "integratedTerminal"  # approval prompts need a terminal
        assert "--workdir" in config["args"]  # explicit, so any working directory will do
    assert LAUNCH["inputs"][0]["id"] == "task"


def test_the_replay_configuration_runs_offline_with_no_key(workdir):
    config = CONFIGS["Agent: replay the example (no API key)"]
    proc = run_agent(*arguments(config, workdir), env=clean_env(LLM_API_KEY=""))
    assert proc.returncode == 0, proc.stderr
    assert "391" in proc.stdout
    assert (workdir / "tool_demo.py").exists()


def test_the_typed_task_configuration_sends_the_task(workdir):
    config = CONFIGS["Agent: a task typed at launch"]
    with StubServer([{"role": "assistant", "content": "2 files"}]) as server:
        proc = run_agent(*arguments(config, workdir), env=stub_env(server))
    assert proc.returncode == 0 and proc.stdout == "2 files\n"
    assert server.requests[0]["messages"][1]["content"] == "count the files"


def test_the_demo_configuration_runs_the_lesson_on_a_terminal(workdir):
    config = CONFIGS["Agent: the lesson's demo task"]
    with StubServer(demo_script()) as server:
        child = spawn(server, *arguments(config, workdir))
        child.expect_exact("Run it? [y/N/a] ")
        child.sendline("y")
        child.expect_exact("tool_demo.py prints 391")
        assert finish(child) == 0
    assert server.problems == []
