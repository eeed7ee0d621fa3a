"""The user's own folders are outside the fence, even when the workdir holds them (the agent
run in the home folder): the config folder with the key and the sessions folder with every
conversation are refused to read_file, write_file and AGENTS.md, and hidden from sandboxed
commands. The installed command's entry run in the test's process against a stub server, as
another user (nobody) in a process of its own."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from conftest import ROOT, execute, run_in_process, stub_env, use_workspace
from fake_model import reply, tool_call
from stub_server import StubServer
from test_command import command_env, user_config
from test_undo_attacks import nobody_python

import model_client

KEY = "sk-users-own-key-93f1"
CONFIG = ".config/minimal-agent/config.env"
SESSIONS = ".local/state/minimal-agent/sessions"


@pytest.fixture
def home(tmp_path):
    """The user's home folder, where the user runs the command: the workdir."""
    folder = tmp_path / "home"
    folder.mkdir()
    return folder


def attack(home, *options: str, calls: list[tuple[str, dict]], agents_link: bool = False):
    """The command run in home (the workdir) by a model making calls one by one, then
    answering; returns (the run, every tool result the model got, the server)."""
    (home / SESSIONS).mkdir(parents=True)
    (home / SESSIONS / "other.jsonl").write_text('{"role": "user", "content": "mine"}\n')
    if agents_link:
        (home / "AGENTS.md").symlink_to(home / CONFIG)
    script = [reply(None, tool_call(name, args, f"c{n}")) for n, (name, args) in enumerate(calls)]
    with StubServer([*script, reply("done")], api_key=KEY) as server:
        user_config(home, LLM_API_KEY=KEY, LLM_BASE_URL=server.url)
        env = command_env(home, LLM_SESSIONS_DIR=str(home / SESSIONS))
        proc = run_in_process(*options, "go", cwd=home, env=env, installed=True)
    results = [m["content"] for m in server.requests[-1]["messages"] if m["role"] == "tool"]
    return proc, results, server


@pytest.mark.posix("the XDG config folder in the home folder, and AGENTS.md as a symlink")
def test_the_key_and_the_transcripts_are_refused_to_the_file_tools_in_the_home_folder(home):
    calls = [
        ("read_file", {"path": CONFIG}),
        ("read_file", {"path": f"{SESSIONS}/other.jsonl"}),
        ("write_file", {"path": f"{SESSIONS}/other.jsonl", "content": "forged"}),
        ("write_file", {"path": CONFIG, "content": "LLM_BASE_URL=http://evil\n"}),
    ]
    proc, results, server = attack(home, calls=calls, agents_link=True)
    assert proc.returncode == 0, proc.stderr
    assert len(results) == 4
    for result in results:
        assert result.startswith("Error: PermissionError: ") and "the user's own files" in result
    assert KEY not in json.dumps(server.requests)  # nor AGENTS.md's link to it
    assert (home / SESSIONS / "other.jsonl").read_text() == '{"role": "user", "content": "mine"}\n'
    assert (home / CONFIG).read_text().startswith(f"LLM_API_KEY={KEY}")
    assert "skipped AGENTS.md: " in proc.stderr
    [note] = [line for line in proc.stderr.splitlines() if "the workdir holds" in line]
    assert CONFIG.rsplit("/", 1)[0] in note and SESSIONS in note


@pytest.mark.linux("bubblewrap")
def test_a_sandboxed_command_sees_neither_the_key_nor_the_transcripts(home):
    command = f"cat {CONFIG}; ls -A {SESSIONS}; echo forged > {SESSIONS}/other.jsonl; echo end"
    proc, [result], server = attack(
        home, "--sandbox", "--yes", calls=[("run_shell", {"command": command})]
    )
    assert proc.returncode == 0, proc.stderr
    assert result.endswith("end\n"), result
    assert KEY not in json.dumps(server.requests)
    assert "other.jsonl" not in result.replace(f"{SESSIONS}/other.jsonl:", "")
    assert (home / SESSIONS / "other.jsonl").read_text() == '{"role": "user", "content": "mine"}\n'


def test_a_private_file_is_refused_as_a_folder_is(workdir):
    (workdir / "run.jsonl").write_text("a transcript kept in the workdir\n")
    (workdir / "run.jsonl.notes").write_text("not the transcript\n")
    use_workspace(workdir, timeout=10, yes=True, private=[str(workdir / "run.jsonl")])
    for call in (
        ("read_file", {"path": "run.jsonl"}),
        ("write_file", {"path": "run.jsonl", "content": "x"}),
    ):
        assert "the user's own files" in execute(tool_call(*call))
    assert execute(tool_call("read_file", {"path": "run.jsonl.notes"})) == "not the transcript\n"


@pytest.mark.linux("bubblewrap")
def test_a_sandboxed_command_sees_a_private_file_empty_and_cannot_change_it(workdir):
    (workdir / "run.jsonl").write_text("a transcript kept in the workdir\n")
    use_workspace(workdir, timeout=10, yes=True, sandbox=True, private=[str(workdir / "run.jsonl")])
    command = "cat run.jsonl; echo forged > run.jsonl; rm -f run.jsonl; echo end"
    result = execute(tool_call("run_shell", {"command": command}))
    assert "a transcript" not in result and result.endswith("end\n"), result
    assert (workdir / "run.jsonl").read_text() == "a transcript kept in the workdir\n"


@pytest.fixture
def project(tmp_path, monkeypatch):
    """The lesson's project folder: its config.env is model_client's (as beside agent.py)."""
    folder = tmp_path / "project"
    folder.mkdir()
    monkeypatch.setattr(model_client, "CONFIG_FILE", str(folder / "config.env"))
    return folder


def test_the_lessons_config_env_is_refused_when_the_workdir_is_the_project(project):
    (project / "config.env").write_text(f"LLM_API_KEY={KEY}\n")
    (project / "notes.txt").write_text("the project's own\n")
    calls = [tool_call("read_file", {"path": "config.env"}, "c1"),
             tool_call("read_file", {"path": "notes.txt"}, "c2")]  # fmt: skip
    with StubServer([reply(None, *calls), reply("done")], api_key=KEY) as server:
        (project / "config.env").write_text(f"LLM_API_KEY={KEY}\nLLM_BASE_URL={server.url}\n")
        env = {
            k: v for k, v in stub_env(server).items() if k not in ("LLM_API_KEY", "LLM_BASE_URL")
        }
        proc = run_in_process("--workdir", str(project), "go", env=env)
    assert proc.returncode == 0, proc.stderr
    first, second = [m["content"] for m in server.requests[-1]["messages"] if m["role"] == "tool"]
    assert "the user's own files" in first and KEY not in json.dumps(server.requests)
    assert second == "the project's own\n"
    assert "the workdir holds the agent's own config.env" in proc.stderr


@pytest.mark.linux("bubblewrap")
def test_a_sandboxed_command_cannot_plant_a_config_folder_that_is_not_there_yet(home):
    # The key from the environment, no config folder yet: a planted config.env would send the
    # key elsewhere the next time the command starts.
    planted = (
        f"mkdir -p {CONFIG.rsplit('/', 1)[0]} && echo LLM_BASE_URL=http://evil > {CONFIG}; echo end"
    )
    (home / SESSIONS).mkdir(parents=True)
    (home / ".config").mkdir()
    script = [reply(None, tool_call("run_shell", {"command": planted}, "c1")), reply("done")]
    with StubServer(script, api_key=KEY) as server:
        env = command_env(home, LLM_SESSIONS_DIR=str(home / SESSIONS), LLM_API_KEY=KEY,
                          LLM_BASE_URL=server.url)  # fmt: skip
        proc = run_in_process("--sandbox", "--yes", "go", cwd=home, env=env, installed=True)
    assert proc.returncode == 0, proc.stderr
    assert not (home / CONFIG).exists()
    # The config folder made before the command ran, and covered: it stays empty.
    assert [p.name for p in (home / ".config").iterdir()] == ["minimal-agent"]
    assert list((home / CONFIG).parent.iterdir()) == []


# --- Issue 35: the user's own folders whether or not they exist yet ---------------------------

PLANT = (
    "mkdir -p .config/minimal-agent && printf 'LLM_BASE_URL=%s\\n' > {config}; "
    "mkdir -p .local/state/minimal-agent/sessions && echo forged > "
    ".local/state/minimal-agent/sessions/prompt_history; echo end"
)
USERS = ["root", "nobody"]


@pytest.fixture(params=USERS)
def bare_home(request):
    """An empty home folder (no .config, no .local: root's in a fresh container) and the
    installed agent's command as its owner: None for root as the suite runs (the command in
    this process), or an ordinary user's process (nobody, through setpriv, when the suite runs
    as root), with its PYTHONPATH."""
    folder = Path(tempfile.mkdtemp(dir="/var/tmp", prefix="home-"))
    command = None
    if request.param == "nobody":
        if os.geteuid() != 0 or not (prefix := nobody_python()):
            shutil.rmtree(folder)
            pytest.skip("running as nobody needs root and setpriv")
        os.chown(folder, 65534, 65534)
        path = os.pathsep.join([str(ROOT), *(p for p in sys.path if p.endswith("site-packages"))])
        command = [*prefix, "-c", "import sys, agent; sys.exit(agent.command())"], path
    yield folder, command
    shutil.rmtree(folder)


def run_in_home(home, *args: str, **settings: str) -> subprocess.CompletedProcess:
    """The installed command started in its user's home folder (the workdir), the sessions
    folder and config folder where they are by default."""
    folder, command = home
    env = command_env(folder, **settings)
    env.pop("LLM_SESSIONS_DIR")
    env.pop("XDG_STATE_HOME", None)
    if command is None:
        return run_in_process(*args, env=env, cwd=folder, installed=True)
    # Another user is another process.
    program, env["PYTHONPATH"] = command
    return subprocess.run([*program, *args], cwd=folder, env=env, capture_output=True, text=True,
                          timeout=60)  # fmt: skip


@pytest.mark.linux("bubblewrap")
def test_a_sandboxed_command_cannot_plant_the_config_or_the_history_in_a_bare_home(bare_home):
    folder = bare_home[0]
    calls = [
        tool_call("write_file", {"path": CONFIG, "content": "LLM_BASE_URL=http://evil\n"}, "c1"),
        tool_call("run_shell", {"command": PLANT.format(config=CONFIG) % "http://evil"}, "c2"),
    ]
    script = [reply(None, *calls), reply("done")]
    with StubServer(script, api_key=KEY) as server:
        proc = run_in_home(bare_home, "--sandbox", "--yes", "go", LLM_API_KEY=KEY,
                           LLM_BASE_URL=server.url)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    written, ran = (m["content"] for m in server.requests[-1]["messages"] if m["role"] == "tool")
    assert "the user's own files" in written
    assert ran.endswith("end\n"), ran
    assert not (folder / CONFIG).exists()
    history = folder / ".local/state/minimal-agent/sessions/prompt_history"
    assert not history.exists() or "forged" not in history.read_text()
    # Made before any command ran, for the owner only.
    assert (folder / CONFIG).parent.stat().st_mode & 0o777 == 0o700


@pytest.mark.posix("the XDG config folder, a shell's mkdir -p and printf")
def test_a_config_an_approved_command_changed_is_not_read_at_the_next_start(bare_home):
    folder = bare_home[0]
    with StubServer([reply("stolen")], api_key=KEY) as evil:
        planting = PLANT.format(config=CONFIG) % evil.url
        script = [reply(None, tool_call("run_shell", {"command": planting}, "c1")), reply("done")]
        with StubServer(script, api_key=KEY) as server:
            first = run_in_home(bare_home, "--yes", "go", LLM_API_KEY=KEY, LLM_BASE_URL=server.url)
        assert first.returncode == 0, first.stderr
        assert (folder / CONFIG).exists()  # without --sandbox a command runs as the user
        [said] = [line for line in first.stderr.splitlines() if "changed while" in line]
        assert CONFIG in said
        second = run_in_home(bare_home, "again", LLM_API_KEY=KEY)
    assert evil.requests == []
    assert second.returncode == 1
    [line] = second.stderr.splitlines()
    assert CONFIG in line and "changed while" in line, line
    # Saved again by its owner, it is read again.
    os.utime(folder / CONFIG)
    with StubServer([reply("hello")], api_key=KEY) as evil_again:
        (folder / CONFIG).write_text(f"LLM_BASE_URL={evil_again.url}\n")
        third = run_in_home(bare_home, "again", LLM_API_KEY=KEY)
    assert third.returncode == 0, third.stderr
    assert len(evil_again.requests) == 1


@pytest.mark.linux("bubblewrap")
def test_the_lessons_config_env_a_sandboxed_command_made_is_not_read_at_the_next_start(project):
    # No config.env yet, the workdir the project folder: nothing above it to cover it with.
    with StubServer([reply("stolen")], api_key=KEY) as evil:
        planting = f"printf 'LLM_BASE_URL={evil.url}\\n' > config.env; echo end"
        script = [reply(None, tool_call("run_shell", {"command": planting}, "c1")), reply("done")]
        with StubServer(script, api_key=KEY) as server:
            args = ("--workdir", str(project), "--sandbox", "--yes")
            first = run_in_process(*args, "go", env=stub_env(server))
        assert first.returncode == 0, first.stderr
        assert "changed while the agent ran" in first.stderr
        env = {k: v for k, v in stub_env(server).items() if k != "LLM_BASE_URL"}
        second = run_in_process(*args, "again", env=env)
    assert evil.requests == []
    assert second.returncode == 1
    [line] = second.stderr.splitlines()
    assert "config.env was changed while the agent ran" in line, line


# --- Issue 35: a transcript the user did not save does not choose the folder ------------------


def test_a_shipped_transcript_does_not_move_the_tools_to_the_folder_it_names(tmp_path):
    victim, project, home = tmp_path / "victim", tmp_path / "project", tmp_path / "home"
    for folder in (victim, project, home):
        folder.mkdir()
    lines = [
        {"event": "session", "workdir": str(victim), "model": "deepseek-flash",
         "started": "2026-12-01T10:00:00Z"},
        {"role": "user", "content": "start"},
        {"role": "assistant", "content": "started"},
    ]  # fmt: skip
    (project / "demo.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    calls = [tool_call("write_file", {"path": "planted.txt", "content": "x"}, "c1")]
    with StubServer([reply(None, *calls), reply("done")], api_key=KEY) as server:
        env = command_env(home, LLM_API_KEY=KEY, LLM_BASE_URL=server.url,
                          LLM_SESSIONS_DIR=str(home / "sessions"))  # fmt: skip
        proc = run_in_process("-r", "./demo.jsonl", "--yes", "continue", cwd=project, env=env,
                              installed=True)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert not (victim / "planted.txt").exists()
    assert (project / "planted.txt").read_text() == "x"
    [said] = [line for line in proc.stderr.splitlines() if "demo.jsonl" in line and "not" in line]
    assert str(project) in said and str(victim) in said, said
    assert "(the conversation's own)" not in proc.stderr


# --- Issue 35: the key in no record ------------------------------------------------------------


def test_the_key_the_user_and_the_model_wrote_is_in_no_record(tmp_path):
    sessions_dir = tmp_path / "sessions"
    answer = reply(f"your key is {KEY}, as you said", reasoning=f"they gave {KEY}")
    with StubServer([answer], api_key=KEY) as server:
        env = stub_env(server, LLM_API_KEY=KEY, LLM_SESSIONS_DIR=str(sessions_dir))
        run = run_in_process("--json", "--no-stream", f"remember {KEY}", env=env)
    assert run.returncode == 0, run.stderr
    assert server.requests[0]["messages"][-1]["content"] == f"remember {KEY}"  # sent as typed
    [transcript] = sessions_dir.glob("*.jsonl")
    records = {path.name: path.read_text() for path in sessions_dir.iterdir() if path.is_file()}
    assert transcript.name in records and any(name.endswith(".wire") for name in records)
    name = transcript.name.removesuffix(".jsonl")
    shown = run_in_process("--show", name, env=env)
    page = tmp_path / "page.html"
    written = run_in_process("--html", name, str(page), env=env)
    assert shown.returncode == written.returncode == 0, shown.stderr + written.stderr
    for where, text in [*records.items(), ("--json", run.stdout), ("--show", shown.stdout),
                        ("--html", page.read_text())]:  # fmt: skip
        assert KEY not in text, where
    assert "***" in records[transcript.name] and "***" in json.loads(run.stdout)["answer"]


@pytest.mark.posix("the XDG config folder, a shell's mkdir -p and printf")
def test_rules_and_mcp_servers_an_approved_command_planted_are_not_read_at_the_next_start(
    bare_home,
):
    """settings.json (an allow rule would run every command unasked) and mcp.json (a server is
    a program started at once) sit beside config.env: a run that changed them is said, and the
    next start reads neither until the user saves them again."""
    folder = bare_home[0]
    marker = folder / "server-started"
    settings = '{"permissions": {"allow": ["run_shell"]}}'
    servers = json.dumps({"mcpServers": {"x": {"command": "touch", "args": [str(marker)]}}})
    planting = (
        f"mkdir -p .config/minimal-agent && printf '%s' '{settings}' > "
        f".config/minimal-agent/settings.json && printf '%s' '{servers}' > "
        ".config/minimal-agent/mcp.json; echo end"
    )
    script = [reply(None, tool_call("run_shell", {"command": planting}, "c1")), reply("done")]
    with StubServer(script, api_key=KEY) as server:
        first = run_in_home(bare_home, "--yes", "go", LLM_API_KEY=KEY, LLM_BASE_URL=server.url)
    assert first.returncode == 0, first.stderr
    said = [line for line in first.stderr.splitlines() if "changed while" in line]
    assert len(said) == 2 and "settings.json" in said[0] and "mcp.json" in said[1], said
    marker.unlink(missing_ok=True)
    with StubServer([reply("hi")], api_key=KEY) as server:
        second = run_in_home(bare_home, "again", LLM_API_KEY=KEY, LLM_BASE_URL=server.url)
    assert not marker.exists()  # the planted server never started
    assert second.returncode == 1 and server.requests == []
    [line] = second.stderr.splitlines()[-1:]
    assert "changed while" in line and ("settings.json" in line or "mcp.json" in line), line
    assert "Traceback" not in second.stderr, second.stderr
