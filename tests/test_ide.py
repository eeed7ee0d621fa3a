"""The IDE configurations run as the IDE would start them: VS Code's launch.json and the
PyCharm/IntelliJ run configurations in .run/, with their variables filled in, each from the
working directory the IDE would use. Both IDEs offer the same configurations, with the same
arguments."""

from __future__ import annotations

import json
import shlex
import sys
import xml.etree.ElementTree as ET

import forked_agents
import pexpect
from conftest import ROOT, clean_env, finish, on_a_terminal, run_agent, spawn, stub_env
from stub_server import StubServer, demo_script

LAUNCH = json.loads((ROOT / ".vscode" / "launch.json").read_text(encoding="utf-8"))
CONFIGS = {config["name"]: config for config in LAUNCH["configurations"]}
TASK = "count the files"


def arguments(config: dict, workdir, task: str = TASK) -> list[str]:
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
    # Here without the IDE's terminal nobody approves the command: refused, exit code 5.
    assert proc.returncode == 5, proc.stderr
    assert "391" in proc.stdout
    assert (workdir / "tool_demo.py").exists()


def test_the_typed_task_configuration_sends_the_task(workdir):
    config = CONFIGS["Agent: a task typed at launch"]
    with StubServer([{"role": "assistant", "content": "2 files"}]) as server:
        proc = run_agent(*arguments(config, workdir), env=stub_env(server))
    assert proc.returncode == 0 and proc.stdout == "2 files\n"
    assert server.requests[0]["messages"][1]["content"] == TASK


@on_a_terminal
def test_the_demo_configuration_runs_the_lesson_on_a_terminal(workdir):
    config = CONFIGS["Agent: the lesson's demo task"]
    with StubServer(demo_script()) as server:
        child = spawn(server, *arguments(config, workdir))
        child.expect_exact("Run it? [y/N/a] ")
        child.sendline("y")
        child.expect_exact("tool_demo.py prints 391")
        assert finish(child) == 0
    assert server.problems == []


# --- PyCharm / IntelliJ: .run/*.run.xml, shared ("Store as project file") run configurations ---


def run_configuration(path) -> dict[str, str]:
    """A .run.xml file's Python configuration: its name, type and options."""
    configuration = ET.parse(path).getroot().find("configuration")
    options = {o.get("name"): o.get("value") for o in configuration.iter("option")}
    envs = {e.get("name"): e.get("value") for e in configuration.iter("env")}
    return {"name": configuration.get("name"), "type": configuration.get("type"), **options,
            "envs": envs}  # fmt: skip


RUN_CONFIGS = {c["name"]: c for c in map(run_configuration, sorted((ROOT / ".run").glob("*.xml")))}


def command_line(config: dict, project=ROOT, task: str = TASK) -> list[str]:
    """The arguments PyCharm passes to agent.py: $PROJECT_DIR$ is filled in when the file is
    loaded, $Prompt$ with what was typed in its dialog, then the string is split at spaces
    outside double quotes (PyCharm's documented rule for Parameters, which shlex follows for
    these strings)."""
    parameters = config["PARAMETERS"].replace("$PROJECT_DIR$", str(project))
    return shlex.split(parameters.replace("$Prompt$", task))


def run_in_pycharm(config: dict, workdir, env: dict[str, str]) -> pexpect.spawn:
    """Start a configuration as PyCharm does with "Emulate terminal in output console": on a
    pseudo-terminal, in its working directory, with its environment variables."""
    script = config["SCRIPT_NAME"].replace("$PROJECT_DIR$", str(ROOT))
    args = [str(workdir) if a == str(ROOT / "playground") else a for a in command_line(config)]
    return forked_agents.spawn(
        sys.executable, [script, *args],
        env={**env, **config["envs"]},
        cwd=config["WORKING_DIRECTORY"].replace("$PROJECT_DIR$", str(ROOT)),
        encoding="utf-8", timeout=30, dimensions=(40, 200),
    )  # fmt: skip


def test_pycharm_and_vs_code_offer_the_same_configurations_with_the_same_arguments():
    assert set(RUN_CONFIGS) == set(CONFIGS), "add a configuration to both IDEs, or to neither"
    for name, config in RUN_CONFIGS.items():
        as_vs_code = command_line(config, "${workspaceFolder}", task="${input:task}")
        assert as_vs_code == CONFIGS[name]["args"], name


def test_every_pycharm_configuration_runs_agent_py_on_an_emulated_terminal():
    for config in RUN_CONFIGS.values():
        assert config["type"] == "PythonConfigurationType"
        assert config["SCRIPT_NAME"] == "$PROJECT_DIR$/agent.py"
        assert config["MODULE_MODE"] == "false"
        assert config["WORKING_DIRECTORY"] == "$PROJECT_DIR$"
        assert config["EMULATE_TERMINAL"] == "true"  # approval prompts need a terminal
        assert "--workdir" in command_line(config)  # explicit, so any working directory will do


def test_pycharm_arguments_survive_a_project_folder_with_spaces():
    project = "/home/ana maria/My Projects/minimal-agent"
    config = RUN_CONFIGS["Agent: replay the example (no API key)"]
    assert command_line(config, project) == [
        "--workdir", f"{project}/playground", "--replay", f"{project}/examples/tool_demo.jsonl"
    ]  # fmt: skip
    typed = RUN_CONFIGS["Agent: a task typed at launch"]
    assert command_line(typed, project)[:2] == ["--workdir", f"{project}/playground"]


@on_a_terminal
def test_the_pycharm_replay_configuration_runs_offline_with_no_key(workdir):
    config = RUN_CONFIGS["Agent: replay the example (no API key)"]
    offline = clean_env(LLM_API_KEY="", LLM_BASE_URL="http://127.0.0.1:9")  # no key, no server
    child = run_in_pycharm(config, workdir, offline)
    child.expect_exact("Run it? [y/N/a] ")
    child.sendline("y")
    child.expect_exact("tool_demo.py prints 391")
    assert finish(child) == 0
    assert (workdir / "tool_demo.py").read_text() == "print(17 * 23)\n"


@on_a_terminal
def test_the_pycharm_typed_task_configuration_sends_the_task(workdir):
    config = RUN_CONFIGS["Agent: a task typed at launch"]
    with StubServer([{"role": "assistant", "content": "2 files"}]) as server:
        child = run_in_pycharm(config, workdir, stub_env(server))
        child.expect_exact("2 files")
        assert finish(child) == 0
    assert server.requests[0]["messages"][1]["content"] == TASK


@on_a_terminal
def test_the_pycharm_demo_configuration_runs_the_lesson(workdir):
    config = RUN_CONFIGS["Agent: the lesson's demo task"]
    with StubServer(demo_script()) as server:
        child = run_in_pycharm(config, workdir, stub_env(server))
        child.expect_exact("running the demo task")
        child.expect_exact("Run it? [y/N/a] ")
        child.sendline("y")
        child.expect_exact("tool_demo.py prints 391")
        assert finish(child) == 0
    assert server.problems == []
