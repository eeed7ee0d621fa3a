"""Tools from MCP servers (docs/mcp.md), against real servers: mcp-server-time and
mcp-server-git from PyPI, one written here with the SDK (tests/mcp/sdk_server.py, over stdio
and streamable HTTP on 127.0.0.1), one of the standard library only (tests/mcp/raw_server.py:
junk, floods, silence, a crash), and @modelcontextprotocol/server-everything from npm where
node is present. And the attacks: a repository's .mcp.json starts nothing without the user's
say on the terminal, asks again once changed, and runs inside the sandbox under --sandbox."""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace

import jsonschema
import pytest
from conftest import ROOT, run_agent, run_in_process, stub_env, wait_for
from fake_model import reply, tool_call
from real_server.llama_server import cache_folder
from stub_server import StubServer

import agent
import model_client
from minimal_agent import cli
from minimal_agent.tools import mcp_servers
from minimal_agent.views import display

SERVERS = ROOT / "tests" / "mcp"
SDK_SERVER = [sys.executable, str(SERVERS / "sdk_server.py")]


def raw_server(mode: str = "ok") -> dict:
    return {"command": sys.executable, "args": [str(SERVERS / "raw_server.py"), mode]}


def installed(program: str) -> str:
    """A console script of the test servers, from this Python's environment."""
    return str(Path(sys.executable).with_name(program))


class Terminal:
    """sys.stdin as a terminal where the user types the given answers, then ends input."""

    def __init__(self, *answers: str) -> None:
        self.answers = list(answers)
        self.asked = 0

    def isatty(self) -> bool:
        return True

    def readline(self) -> str:
        self.asked += 1
        return self.answers.pop(0) + "\n" if self.answers else ""


@pytest.fixture
def folders(tmp_path):
    """The user's config folder and sessions folder, each of its own."""
    config, sessions = tmp_path / "config", tmp_path / "sessions"
    config.mkdir()
    return config, sessions


def user_servers(config: Path, servers: dict) -> None:
    (config / "mcp.json").write_text(json.dumps({"mcpServers": servers}))


def start(workdir: Path, folders, timeout: float = 60, sandbox: bool = False, yes: bool = False):
    """The workspace and the started servers, as a session starts them; the events said."""
    config, sessions = folders
    workspace_of = functools.partial(agent.Workspace, workdir, timeout, yes, sandbox,
                                     private=[str(config), str(sessions)])  # fmt: skip
    ws = workspace_of()
    said = []
    ws.events.subscribe(lambda kind, fields: said.append(fields) if kind == "mcp_server" else None)
    servers = mcp_servers.start(ws, str(config), str(sessions), agent.TOOL_MAP)
    tools = servers.tools if servers else {}  # the session's workspace: with them
    return workspace_of(events=ws.events, user=ws.user, added_tools=tools), servers, said


def call(ws, name: str, **arguments) -> str:
    return agent.execute_tool_call(tool_call(name, arguments), ws)


# --- real servers, through the whole agent -------------------------------------------------


def test_real_servers_tools_reach_the_model_and_their_results_come_back(
    workdir, folders, monkeypatch, tmp_path
):
    config, sessions = folders
    subprocess.run(["git", "init", "-q", str(workdir)], check=True)
    (workdir / "notes.txt").write_text("untracked\n")
    user_servers(config, {
        "time": {"command": installed("mcp-server-time"), "args": ["--local-timezone", "UTC"]},
        "git": {"command": installed("mcp-server-git")},
        "sdk": {"command": SDK_SERVER[0], "args": SDK_SERVER[1:]},
        "leaky": {"command": "echo", "args": ["${LLM_API_KEY}"]},
    })  # fmt: skip
    monkeypatch.setattr(model_client, "CONFIG_FILE", config / "config.env")
    script = [
        reply(None, tool_call("mcp__time__get_current_time", {"timezone": "Asia/Tokyo"}, "c1"),
              tool_call("mcp__git__git_status", {"repo_path": str(workdir)}, "c2"),
              tool_call("mcp__sdk__total", {"numbers": [1, 2, 3]}, "c3"),
              tool_call("mcp__sdk__picture", {}, "c4"),
              tool_call("mcp__sdk__environment", {}, "c5")),
        reply("done"),
    ]  # fmt: skip
    with StubServer(script) as server:
        env = stub_env(server, LLM_SESSIONS_DIR=str(sessions), MY_SECRET_TOKEN="hush")
        proc = run_in_process("--workdir", str(workdir), "--yes", "--json-events", "go", env=env)
    assert proc.returncode == 0, proc.stderr
    offered = [tool["function"]["name"] for tool in server.requests[0]["tools"]]
    assert offered[:3] == ["read_file", "write_file", "run_shell"]
    assert {"mcp__time__get_current_time", "mcp__git__git_status", "mcp__sdk__echo"} <= set(offered)
    results = [m["content"] for m in server.requests[1]["messages"] if m["role"] == "tool"]
    assert json.loads(results[0])["timezone"] == "Asia/Tokyo"
    assert "notes.txt" in results[1]
    assert json.loads(results[2]) == {"total": 6}  # structured content only: as JSON
    assert results[3] == "a tiny picture\n[image: image/png, about 102 bytes]"
    seen = json.loads(results[4])
    assert seen["cwd"] == str(workdir.resolve())
    assert "MY_SECRET_TOKEN" not in seen["names"] and "LLM_API_KEY" not in seen["names"]
    lines = [json.loads(line) for line in proc.stdout.splitlines()]
    schema = json.loads((ROOT / "docs" / "json-events.schema.json").read_text())
    [entry] = [e for e in schema["oneOf"] if e["properties"]["type"].get("const") == "mcp_server"]
    server_lines = [line for line in lines if line["type"] == "mcp_server"]
    for line in server_lines:  # by the schema's entry for them (the end record's refers away)
        jsonschema.validate(line, {**entry, "type": "object"})
    started = {line["name"]: line for line in server_lines}
    assert started["time"]["status"] == "started" and len(started["git"]["tools"]) == 12
    assert started["leaky"]["status"] == "skipped"
    assert "the agent's own API key" in started["leaky"]["error"]
    assert started["leaky"]["error"] in proc.stderr  # the one line said for it
    assert "Traceback" not in proc.stderr
    assert "the test server's stderr" not in proc.stderr  # in the log instead
    assert "the test server's stderr" in (sessions / mcp_servers.LOG_FILE).read_text()


def test_a_streamable_http_server_on_localhost_with_variables_expanded(workdir, folders, tmp_path):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    log = open(tmp_path / "http.log", "w")  # noqa: SIM115
    process = subprocess.Popen([*SDK_SERVER, "http", str(port)], stdout=log, stderr=log)
    try:
        def listening():
            with socket.socket() as client:
                return client.connect_ex(("127.0.0.1", port)) == 0

        wait_for(listening, 60)
        os.environ["TEST_MCP_PORT"] = str(port)
        user_servers(folders[0], {"web": {
            "type": "http", "url": "http://127.0.0.1:${TEST_MCP_PORT}/mcp",
            "headers": {"X-Where": "${TEST_MCP_NOWHERE:-here}"}}})  # fmt: skip
        ws, servers, said = start(workdir, folders, yes=True)
        try:
            assert call(ws, "mcp__web__echo", text="over HTTP") == "over HTTP"
        finally:
            servers.close()
    finally:
        os.environ.pop("TEST_MCP_PORT", None)
        process.kill()
        process.wait()
        log.close()
    assert said[0]["status"] == "started" and "mcp__web__echo" in said[0]["tools"]


@pytest.mark.skipif(not shutil.which("npx"), reason="needs node and npx")
def test_the_reference_server_everything_from_npm(workdir, folders):
    """@modelcontextprotocol/server-everything, installed by the first run into the user's
    cache folder (never into the repository; MCP_NPM_CACHE names another): installing it took
    4.6 s of CPU in every run, and again in the learner's-edit test's. Skipped with one line
    where node or the registry is absent."""
    cache = Path(os.environ.get("MCP_NPM_CACHE") or cache_folder() / "npm")
    program = cache / "node_modules" / ".bin" / "mcp-server-everything"
    if not program.exists():
        cache.parent.mkdir(parents=True, exist_ok=True)
        # Installed beside it, then renamed into place: a second pytest at the same moment
        # (the learner's-edit test runs one) never sees half an installation.
        installing = Path(tempfile.mkdtemp(prefix="npm-", dir=cache.parent))
        done = subprocess.run(
            ["npm", "install", "--prefix", str(installing), "--no-audit", "--no-fund",
             "@modelcontextprotocol/server-everything"],
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        if done.returncode:
            shutil.rmtree(installing)
            pytest.skip("npm could not install @modelcontextprotocol/server-everything")
        try:
            installing.rename(cache)
        except OSError:  # the other pytest's is in place already
            shutil.rmtree(installing)
    user_servers(folders[0], {"everything": {"command": str(program), "args": ["stdio"]}})
    ws, servers, said = start(workdir, folders, yes=True)
    try:
        assert said[0]["status"] == "started", said
        assert call(ws, "mcp__everything__echo", message="hi").endswith("hi")
        image = call(ws, "mcp__everything__get-tiny-image")
        assert re.search(r"\[image: image/png, about [\d,]+ bytes\]", image)
    finally:
        servers.close()


# --- asking, as run_shell asks -------------------------------------------------------------


def test_a_call_asks_like_run_shell_and_yes_skips_the_question(workdir, folders, monkeypatch,
                                                               capsys):  # fmt: skip
    user_servers(folders[0], {"raw": raw_server()})
    ws, servers, _ = start(workdir, folders)
    try:
        monkeypatch.setattr("sys.stdin", Terminal("n", "y"))
        refused = call(ws, "mcp__raw__touch", path="a.txt")
        assert refused.startswith("Error: PermissionError") and not (workdir / "a.txt").exists()
        assert call(ws, "mcp__raw__touch", path="a.txt") == "touched"
        err = capsys.readouterr().err
        assert err.count('mcp__raw__touch {"path": "a.txt"}') == 2 and "Run it?" in err
        monkeypatch.setattr("sys.stdin", open(os.devnull))
        assert "nobody can give it" in call(ws, "mcp__raw__touch", path="b.txt")
        with_yes = agent.Workspace(workdir, approve_all=True, added_tools=ws.added_tools)
        assert call(with_yes, "mcp__raw__touch", path="b.txt") == "touched"
    finally:
        servers.close()


def test_under_sandbox_the_question_for_a_users_server_does_not_claim_the_sandbox(
    workdir, folders, monkeypatch, capsys
):
    """The user's own servers run outside the sandbox (as Codex runs them): the prompt must
    not say otherwise."""
    user_servers(folders[0], {"raw": raw_server()})
    ws, servers, _ = start(workdir, folders, sandbox=True)
    try:
        monkeypatch.setattr("sys.stdin", Terminal("y"))
        assert call(ws, "mcp__raw__touch", path="a.txt") == "touched"
    finally:
        servers.close()
    err = capsys.readouterr().err
    assert "Run it? [y/N/a]" in err and "in the sandbox" not in err


# --- servers that fail: one line and their tools, never the run ----------------------------


def test_servers_that_cannot_start_cost_one_line_each(workdir, folders, capsys):
    # A time-out of 1 s: each of these fails or is skipped however fast the machine is, and
    # the flood's junk is read for as long as the time-out lasts.
    user_servers(folders[0], {
        "missing": {"command": "/no/such/program"},
        "silent": raw_server("silent"),
        "flood": raw_server("flood"),
        "unset": {"command": "x", "args": ["${TEST_MCP_UNSET_VARIABLE}"]},
        "bad name!": raw_server(),
        "sse": {"type": "sse", "url": "http://127.0.0.1:9/sse"},
    })  # fmt: skip
    ws, servers, said = start(workdir, folders, timeout=1, yes=True)
    try:
        status = {fields["name"]: fields["status"] for fields in said}
        assert status == {"missing": "failed", "silent": "failed", "flood": "failed",
                          "unset": "skipped", "bad name!": "skipped", "sse": "skipped"}  # fmt: skip
        err = capsys.readouterr().err
        for name in status:
            assert len(re.findall(f"MCP server {re.escape(name)} from your mcp.json", err)) == 1
        assert "did not answer within 1 s" in err and "${TEST_MCP_UNSET_VARIABLE}" in err
        assert "Traceback" not in err and "JSON-RPC" not in err  # the junk is in the log
        assert not ws.added_tools
    finally:
        servers.close()


def test_servers_with_odd_tools_junk_or_a_call_never_answered_cost_their_tools(
    workdir, folders, capsys
):
    # Started beside the servers above in one run, these waited for their time-out too: a
    # run of its own lets those fail in 1 s while these have 5 to start on a busy machine.
    user_servers(folders[0], {
        "junk": raw_server("junk"),
        "slow": raw_server("slow-call"),
        "odd": raw_server("ok"),
    })  # fmt: skip
    ws, servers, said = start(workdir, folders, timeout=5, yes=True)
    try:
        status = {fields["name"]: fields["status"] for fields in said}
        assert status == {"junk": "started", "slow": "started", "odd": "started"}
        err = capsys.readouterr().err
        assert "Traceback" not in err and "JSON-RPC" not in err  # the junk is in the log
        # A tool whose name or schema cannot work is left out with one line, not the server.
        assert "mcp__odd__touch" in ws.added_tools and "mcp__odd__untyped" not in ws.added_tools
        assert "left out bad.name (its name cannot be a tool's); untyped" in err
        assert call(ws, "mcp__junk__touch", path="j.txt") == "touched"
        # A call not answered in time: the server is lost, the model told, the run goes on.
        gone = call(ws, "mcp__slow__touch", path="s.txt")
        assert gone.startswith("Error: the MCP server slow is gone (it did not answer within 5 s)")
        assert call(ws, "mcp__slow__touch", path="s.txt") == gone
        assert said[-1]["name"] == "slow" and said[-1]["status"] == "lost"
        assert capsys.readouterr().err.count("MCP server slow from your mcp.json is gone") == 1
    finally:
        servers.close()


def test_a_server_that_fills_its_stderr_fills_neither_the_log_nor_blocks(workdir, folders):
    user_servers(folders[0], {"noisy": raw_server("noisy")})
    ws, servers, said = start(workdir, folders, yes=True)
    log = folders[1] / mcp_servers.LOG_FILE
    try:
        wait_for(lambda: log.stat().st_size >= mcp_servers.LOG_LIMIT, "the log never filled", 60)
        assert call(ws, "mcp__noisy__touch", path="n.txt") == "touched"  # not blocked
    finally:
        servers.close()
    assert log.stat().st_size < mcp_servers.LOG_LIMIT + 200
    assert log.read_text().endswith("[the rest of noisy's is left out]\n")


def test_a_server_that_crashes_mid_run_is_gone_and_the_model_told(workdir, folders, capsys):
    user_servers(folders[0], {"sdk": {"command": SDK_SERVER[0], "args": SDK_SERVER[1:]}})
    ws, servers, said = start(workdir, folders, yes=True)
    try:
        assert call(ws, "mcp__sdk__echo", text="alive") == "alive"
        assert call(ws, "mcp__sdk__crash").startswith("Error: the MCP server sdk is gone")
        assert "is gone" in call(ws, "mcp__sdk__echo", text="still?")
    finally:
        servers.close()
    assert said[-1]["status"] == "lost"
    assert capsys.readouterr().err.count("MCP server sdk from your mcp.json is gone") == 1


def test_without_the_sdk_a_configured_server_costs_one_line_naming_the_install(
    workdir, folders, monkeypatch, capsys
):
    user_servers(folders[0], {"raw": raw_server(), "other": raw_server()})
    monkeypatch.setitem(sys.modules, "mcp", None)  # import mcp: ImportError
    ws, servers, said = start(workdir, folders)
    servers.close()
    assert ws.added_tools == {} and [fields["status"] for fields in said] == ["failed"] * 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert line.endswith('install it with pip install "minimal-agent[mcp]"')


# --- a repository's .mcp.json --------------------------------------------------------------


def project_file(workdir: Path, marker: str = "started") -> str:
    """A workdir .mcp.json whose server, if it ever started, would leave a marker file."""
    evil = {"command": "sh", "args": ["-c", f"touch {marker}"]}
    text = json.dumps({"mcpServers": {"evil": evil}})
    (workdir / ".mcp.json").write_text(text)
    return text


def test_a_project_file_starts_nothing_without_a_terminal_even_with_yes(workdir, folders, capsys,
                                                                       monkeypatch):  # fmt: skip
    project_file(workdir)
    monkeypatch.setattr("sys.stdin", open(os.devnull))
    start(workdir, folders, yes=True)
    assert not (workdir / "started").exists()
    [line] = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("skipped the MCP servers of the workdir's .mcp.json")


def test_a_project_file_is_shown_whole_and_asked_even_with_yes(workdir, folders, capsys,
                                                              monkeypatch):  # fmt: skip
    text = project_file(workdir)
    monkeypatch.setattr(display, "screen_size", lambda: (50, 200))  # the file on one row
    terminal = Terminal("n")
    monkeypatch.setattr("sys.stdin", terminal)
    ws, servers, said = start(workdir, folders, yes=True)
    assert terminal.asked == 1 and not (workdir / "started").exists()
    assert said[0]["status"] == "skipped" and servers.loop is None  # nothing ran at all
    err = capsys.readouterr().err
    assert f"$ {text}" in err and "Start them? [y/N/v]" in err


def test_an_approved_project_file_is_remembered_until_it_changes(workdir, folders, monkeypatch):
    project_file(workdir, "first")
    terminal = Terminal("y")
    monkeypatch.setattr("sys.stdin", terminal)

    def started(folder: Path) -> None:
        start(folder, folders)[1].close()

    started(workdir)
    wait_for(lambda: (workdir / "first").exists(), 60)  # approved: it started
    (workdir / "first").unlink()
    started(workdir)  # the same file: not asked again
    assert terminal.asked == 1
    wait_for(lambda: (workdir / "first").exists(), 60)
    project_file(workdir, "second")  # changed after approval: asked again
    started(workdir)
    assert terminal.asked == 2 and not (workdir / "second").exists()
    other = workdir.parent / "other"  # the same file in another folder: asked there too
    other.mkdir()
    project_file(other, "first")
    started(other)
    assert terminal.asked == 3 and not (other / "first").exists()


@pytest.mark.linux
@pytest.mark.skipif(not shutil.which("bwrap"), reason="needs bubblewrap")
def test_under_sandbox_a_project_server_runs_inside_it(workdir, folders, monkeypatch, tmp_path):
    shutil.copy(SERVERS / "raw_server.py", workdir / "server.py")
    (workdir / ".mcp.json").write_text(json.dumps(
        {"mcpServers": {"local": {"command": "/usr/bin/python3", "args": ["server.py"]}}}))
    monkeypatch.setattr("sys.stdin", Terminal("y"))
    outside = tmp_path / "outside.txt"
    ws, servers, said = start(workdir, folders, sandbox=True, yes=True)
    try:
        assert said[0]["status"] == "started", said
        assert call(ws, "mcp__local__touch", path="inside.txt") == "touched"
        call(ws, "mcp__local__touch", path=str(outside))  # in the sandbox's own /tmp at most
        assert (workdir / "inside.txt").exists() and not outside.exists()
    finally:
        servers.close()


def test_no_tool_writes_the_servers_settings_or_the_approvals(tmp_path):
    """The lesson's mcp.json (beside its config.env, in the project's folder) and the record
    of approved project files (in the sessions folder) are the user's own."""
    settings = SimpleNamespace(config_file=str(tmp_path / "config.env"),
                               sessions_folder=tmp_path / "sessions")  # fmt: skip
    ws = agent.Workspace(tmp_path, private=cli.private_paths(settings, False))
    for path in ("mcp.json", f"sessions/{mcp_servers.APPROVALS_FILE}"):
        result = call(ws, "write_file", path=path, content="{}")
        assert result.startswith("Error: PermissionError") and "user's own" in result
        assert not (tmp_path / path).exists()


# --- --mcp, and the docs' example ----------------------------------------------------------


def docs_example() -> dict:
    text = (ROOT / "docs" / "mcp.md").read_text()
    return json.loads(re.search(r"```json\n(.*?)```", text, re.S).group(1))


def test_mcp_lists_servers_where_configured_started_or_not_and_tools(workdir, folders,
                                                                      monkeypatch):  # fmt: skip
    """--mcp with the docs' mcp.json as it is (its mcp-server-time found on PATH) and a
    workdir .mcp.json not approved."""
    config, sessions = folders
    (config / "mcp.json").write_text(json.dumps(docs_example()))
    project_file(workdir)
    monkeypatch.setattr(model_client, "CONFIG_FILE", config / "config.env")
    env = stub_env(StubServer([]), LLM_SESSIONS_DIR=str(sessions))
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    proc = run_in_process("--workdir", str(workdir), "--mcp", env=env)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == f"time (your mcp.json, {config / 'mcp.json'}): started, 2 tools"
    assert lines[1].startswith("  mcp__time__get_current_time  ")
    assert lines[3] == (f"evil (the workdir .mcp.json, {workdir.resolve() / '.mcp.json'}): "
                        "skipped: not approved")  # fmt: skip
    assert not (workdir / "started").exists()


def test_without_a_configured_server_the_sdk_is_not_imported(workdir):
    """Start-up time: the SDK (its server and client modules, its types: seconds on a busy
    machine) is imported only when a server is configured."""
    with StubServer([reply("ok")]) as server:
        proc = run_agent("--workdir", str(workdir), "hi",
                         env=stub_env(server, PYTHONPROFILEIMPORTTIME="1"))  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    imported = {line.split("|")[-1].strip() for line in proc.stderr.splitlines() if "|" in line}
    assert "minimal_agent.tools.mcp_servers" in imported  # the import log works
    assert not {name for name in imported if name.split(".")[0] in ("mcp", "mcp_types")}


def test_a_deny_rule_naming_a_server_or_a_tool_keeps_it_from_the_model(workdir, folders,
                                                                       monkeypatch):  # fmt: skip
    config, sessions = folders
    user_servers(config, {"raw": raw_server(), "other": raw_server()})
    monkeypatch.setattr(model_client, "CONFIG_FILE", config / "config.env")
    env = stub_env(StubServer([]), LLM_SESSIONS_DIR=str(sessions))
    proc = run_in_process("--workdir", str(workdir), "--mcp", "--deny", "mcp__raw",
                          "--deny", "mcp__other__touch", env=env)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].endswith("skipped: a deny rule names mcp__raw")
    assert lines[1].endswith("started, 0 tools")  # other: its one good tool denied
    assert "left out touch (a deny rule names it); bad.name" in proc.stderr
