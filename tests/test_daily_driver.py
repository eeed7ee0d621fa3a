"""Issue 25 as a daily user meets it: session IDs short enough to type, `--sessions | head`
ending quietly, the totals line and the "go on" line however a run ends, and a broken stream
asked again once. Real agents (in this process, or as processes on a pseudo-terminal) against
the stub server on 127.0.0.1."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, finish, on_a_terminal, run_in_process, saved_messages, stub_env
from fake_model import reply, tool_call
from stub_server import Fail, Streamed, StubServer

import agent

OLD_ID = "20261204-113000-ab12"  # an ID as the agent gave them before this issue


def run(server, workdir: Path, sessions: Path, *args: str, stdin: str = "", **settings: str):
    env = stub_env(server, LLM_SESSIONS_DIR=str(sessions), **settings)
    return run_in_process("--workdir", str(workdir), *args, env=env, stdin=stdin)


@pytest.fixture
def sessions(tmp_path: Path) -> Path:
    return tmp_path / "sessions"


def listed_ids(proc) -> list[str]:
    rows = proc.stdout.splitlines()[1:]
    return [row.split()[0] for row in rows if not row.startswith(("...", "continue one"))]


# --- Short IDs --------------------------------------------------------------------------------


def test_the_listed_id_or_its_beginning_resumes_the_conversation(workdir, sessions):
    script = [reply("first"), reply("by the shown id"), reply("by its beginning")]
    with StubServer(script) as server:
        assert run(server, workdir, sessions, "say first").returncode == 0
        shutil.copy(ROOT / "examples" / "tool_demo.jsonl", sessions / f"{OLD_ID}.jsonl")
        listing = run(server, workdir, sessions, "--sessions")
        (shown,) = [i for i in listed_ids(listing) if i != OLD_ID]
        assert len(shown) <= 12, listing.stdout
        for typed, answer in ((shown, "by the shown id"), (shown[:3], "by its beginning")):
            proc = run(server, workdir, sessions, "-r", typed, "more")
            assert proc.returncode == 0, proc.stderr
            assert proc.stdout == f"{answer}\n"
    assert server.problems == []


def test_an_old_long_id_still_resumes_whole_or_by_its_beginning(workdir, sessions):
    sessions.mkdir()
    shutil.copy(ROOT / "examples" / "tool_demo.jsonl", sessions / f"{OLD_ID}.jsonl")
    for typed in (OLD_ID, OLD_ID[:10]):
        with StubServer([reply("the old one")]) as server:
            proc = run(server, workdir, sessions, "-r", typed, "and now?")
        assert proc.returncode == 0, proc.stderr
        assert f"continuing the conversation in {sessions / OLD_ID}.jsonl" in proc.stderr


def test_sessions_into_a_pipe_closed_early_ends_quietly(workdir, sessions):
    """`--sessions | head -1`: the reader is gone before the list is written; no "Broken pipe"
    error, exit 0. The read end is closed before the agent writes, so the test never races."""
    with StubServer([reply("one")]) as server:
        assert run(server, workdir, sessions, "one").returncode == 0
        env = stub_env(server, LLM_SESSIONS_DIR=str(sessions))
    for option in ("--sessions", "--show"):
        args = [option] + ([str(next(sessions.glob("*.jsonl")))] if option == "--show" else [])
        proc = subprocess.Popen(
            [sys.executable, str(ROOT / "agent.py"), *args], env=env, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        proc.stdout.close()  # as head does once it has its line
        stderr = proc.stderr.read()
        assert proc.wait(timeout=30) == 0, stderr
        assert stderr == ""
    head = subprocess.run(
        f"'{sys.executable}' '{ROOT / 'agent.py'}' --sessions | head -1", shell=True, env=env,
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert head.stdout.split() == "ID last change turns cost workdir first task".split()
    assert head.stderr == ""
