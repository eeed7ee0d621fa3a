"""Issue 18 as a user meets it, end to end: real agent processes against the stub server on
127.0.0.1. What a run cost (peak and off-peak, yuan, the user's own prices, no price), a budget
that stops the run, every conversation kept and found again (--sessions, -c, -r), one writer per
transcript, --save refusing to write over a conversation, and AGENTS.md in the system prompt.

Every figure below is worked out by hand from the price table (per 1M tokens), so a change in
how a reply is priced shows up as a wrong amount on the line the user reads."""

from __future__ import annotations

import calendar
import json
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import (
    ROOT,
    finish,
    on_a_terminal,
    run_in_process,
    saved_messages,
    spawn,
    stub_env,
    wait_for,
)
from fake_model import reply, tool_call
from stub_server import Billed, Streamed, StubServer, extends

# Two moments DeepSeek prices differently: 02:00 UTC is a peak hour Monday to Friday only.
WEEKDAY_2AM = calendar.timegm((2026, 12, 2, 2, 0, 0))  # a Wednesday: peak
SATURDAY_2AM = calendar.timegm((2026, 12, 5, 2, 0, 0))  # off-peak
HIT, MISS, OUT = 100_000, 20_000, 5_000  # each billed reply's cache-hit, miss, output tokens

# deepseek-flash, USD per 1M tokens (hit, miss, output): off-peak 0.003, 0.15, 0.60; peak twice
# that. One reply at peak: 100000 * 0.006 + 20000 * 0.30 + 5000 * 1.20 = 600 + 6000 + 6000
# millionths of a dollar; off-peak half of it.
PEAK_USD = (600 + 6_000 + 6_000) / 1_000_000  # $0.0126
OFF_PEAK_USD = (300 + 3_000 + 3_000) / 1_000_000  # $0.0063
TWO_REPLIES = "prompt tokens 240000, cache-hit tokens 200000, completion tokens 10000"


def billed(item, when: int) -> Billed:
    return Billed(item, created=when, hit=HIT, miss=MISS, completion=OUT)


def read_call(call_id: str) -> dict:
    return reply(None, tool_call("read_file", {"path": "notes.txt"}, call_id), reasoning="")


def final(text: str) -> dict:
    return reply(text, reasoning="done")


def agent(server, workdir: Path, sessions: Path, *args: str, stdin: str = "", **settings: str):
    """The agent (in this process: see run_in_process), its conversations kept in sessions."""
    env = stub_env(server, LLM_SESSIONS_DIR=str(sessions), **settings)
    return run_in_process("--workdir", str(workdir), *args, env=env, stdin=stdin)


def last_line(proc) -> str:
    return proc.stderr.strip().splitlines()[-1]


def transcripts(sessions: Path) -> list[Path]:
    return sorted(sessions.glob("*.jsonl")) if sessions.is_dir() else []


def usage_error(proc, *phrases: str) -> str:
    """Exit 2 as argparse gives it: the usage, then one line saying what is wrong."""
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == "" and "Traceback" not in proc.stderr
    assert proc.stderr.startswith("usage: agent.py ")
    line = last_line(proc)
    assert line.startswith("agent.py: error: ")
    for phrase in phrases:
        assert phrase in line
    return line


def one_line_error(proc, *phrases: str) -> str:
    assert proc.returncode == 1, proc.stderr
    assert proc.stdout == "" and "Traceback" not in proc.stderr
    line = last_line(proc)
    assert line.startswith("error: ")
    for phrase in phrases:
        assert phrase in line
    return line


@pytest.fixture
def sessions(tmp_path: Path) -> Path:
    return tmp_path / "sessions"  # not there yet: the agent makes it


@pytest.fixture
def notes(workdir: Path) -> Path:
    (workdir / "notes.txt").write_text("a note")
    return workdir


def test_the_moments_are_the_days_they_claim():
    assert time.gmtime(WEEKDAY_2AM)[3:7] == (2, 0, 0, 2)  # 02:00:00 on a Wednesday
    assert time.gmtime(SATURDAY_2AM)[3:7] == (2, 0, 0, 5)  # 02:00:00 on a Saturday
    assert f"{PEAK_USD:.4f}" == "0.0126" and f"{OFF_PEAK_USD:.4f}" == "0.0063"


# --- 1. What a run cost -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "settings, cost",
    [
        # one reply at peak, one off-peak: 0.0126 + 0.0063
        ({}, f"${PEAK_USD + OFF_PEAK_USD:.4f}"),
        # yuan, per 1M (0.02, 1.0, 4.0) off-peak: 2000 + 20000 + 20000 = 42000 millionths; peak
        # twice that
        ({"LLM_CURRENCY": "CNY"}, "¥0.1260"),
        # the user's prices replace the table's and are flat: 100000 * 0.5 + 20000 * 1 + 5000 * 2
        # = 80000 millionths each
        (
            {"LLM_PRICE_CACHED_INPUT": "0.5", "LLM_PRICE_INPUT": "1", "LLM_PRICE_OUTPUT": "2"},
            "$0.1600",
        ),
        (
            {
                "LLM_CURRENCY": "cny",
                "LLM_PRICE_CACHED_INPUT": "0.5",
                "LLM_PRICE_INPUT": "1",
                "LLM_PRICE_OUTPUT": "2",
            },
            "¥0.1600",
        ),
        # only the output price replaced: the input keeps the table's peak and off-peak prices;
        # peak 600 + 6000 + 10000, off-peak 300 + 3000 + 10000 millionths
        ({"LLM_PRICE_OUTPUT": "2"}, "$0.0299"),
        # a model not in the table, priced by the user; no cached price: hits at the input price,
        # 120000 * 1 + 5000 * 2 = 130000 millionths each
        (
            {"LLM_MODEL": "my-own-model", "LLM_PRICE_INPUT": "1", "LLM_PRICE_OUTPUT": "2"},
            "$0.2600",
        ),
    ],
)
def test_the_totals_line_prices_each_reply_at_its_own_hour(notes, sessions, settings, cost):
    script = [billed(read_call("c1"), WEEKDAY_2AM), billed(final("It says a note."), SATURDAY_2AM)]
    with StubServer(script) as server:
        proc = agent(server, notes, sessions, "read notes.txt", **settings)
    assert proc.returncode == 0, proc.stderr
    assert server.problems == [] and len(server.requests) == 2
    assert proc.stdout == "It says a note.\n"
    assert last_line(proc) == f"steps 2, tool calls 1, {TWO_REPLIES}, cost {cost}"


def test_a_streamed_reply_is_priced_from_its_last_chunk(notes, sessions):
    script = [
        billed(Streamed(read_call("c1")), WEEKDAY_2AM),
        billed(Streamed(final("It says a note.")), SATURDAY_2AM),
    ]
    with StubServer(script) as server:
        proc = agent(server, notes, sessions, "--stream", "read notes.txt")
    assert proc.returncode == 0, proc.stderr
    assert all(request["stream"] for request in server.requests)
    assert last_line(proc) == f"steps 2, tool calls 1, {TWO_REPLIES}, cost $0.0189"


def test_the_transcript_keeps_each_replys_time_and_cost(notes, sessions):
    script = [billed(read_call("c1"), WEEKDAY_2AM), billed(final("It says a note."), SATURDAY_2AM)]
    with StubServer(script) as server:
        proc = agent(server, notes, sessions, "read notes.txt")
    assert proc.returncode == 0, proc.stderr
    [path] = transcripts(sessions)
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    usage = [line for line in lines if line.get("event") == "usage"]
    assert [(u["created"], u["currency"], round(u["cost"], 10)) for u in usage] == [
        (WEEKDAY_2AM, "USD", PEAK_USD),
        (SATURDAY_2AM, "USD", OFF_PEAK_USD),
    ]
    assert usage[0]["prompt_tokens"] == HIT + MISS and usage[0]["cache_hit_tokens"] == HIT


def test_a_model_without_a_price_shows_tokens_only(notes, sessions):
    script = [billed(read_call("c1"), WEEKDAY_2AM), billed(final("It says a note."), SATURDAY_2AM)]
    with StubServer(script) as server:
        proc = agent(server, notes, sessions, "read notes.txt", LLM_MODEL="local-model")
    assert proc.returncode == 0, proc.stderr
    assert server.requests[0]["model"] == "local-model"
    assert last_line(proc) == f"steps 2, tool calls 1, {TWO_REPLIES}"
    assert "cost" not in proc.stderr and "$" not in proc.stderr


def test_a_chat_session_line_adds_up_its_turns(workdir, sessions):
    script = [billed(final("one"), WEEKDAY_2AM), billed(final("two"), SATURDAY_2AM)]
    with StubServer(script) as server:
        proc = agent(server, workdir, sessions, "--chat", "first", stdin="second\n")
    assert proc.returncode == 0, proc.stderr
    assert server.problems == [] and proc.stdout == "one\ntwo\n"
    one_reply = "prompt tokens 120000, cache-hit tokens 100000, completion tokens 5000"
    lines = proc.stderr.strip().splitlines()
    assert lines[-3] == f"steps 1, tool calls 0, {one_reply}, cost $0.0126"
    assert lines[-2] == f"steps 1, tool calls 0, {one_reply}, cost $0.0063"
    assert lines[-1] == f"session: turns 2, steps 2, tool calls 0, {TWO_REPLIES}, cost $0.0189"


# --- 2. A budget --------------------------------------------------------------------------------


@pytest.mark.parametrize("how", ["option", "setting"])
def test_the_budget_stops_before_the_next_request_and_the_conversation_goes_on(
    notes, sessions, how
):
    """$0.02: the first reply ($0.0126) leaves room, the second ($0.0252 in all) spends it, so
    the third request is never made. -c then goes on from where it stopped."""
    script = [
        billed(read_call("c1"), WEEKDAY_2AM),
        billed(read_call("c2"), WEEKDAY_2AM),
        billed(final("It says a note."), WEEKDAY_2AM),  # for the -c run
    ]
    budget = ["--max-cost", "0.02"] if how == "option" else []
    setting = {"LLM_MAX_COST": "0.02"} if how == "setting" else {}
    with StubServer(script) as server:
        proc = agent(server, notes, sessions, *budget, "read notes.txt, twice", **setting)
        assert proc.returncode == 3, proc.stderr
        assert len(server.requests) == 2
        assert proc.stdout == ""
        stopped = [line for line in proc.stderr.splitlines() if line.startswith("stopped:")]
        assert stopped == [
            "stopped: the budget (--max-cost $0.0200) is spent ($0.0252 so far); the "
            "conversation is saved: resume it (-c) to go on, with a budget of its own"
        ]
        assert last_line(proc).endswith(", cost $0.0252")
        [path] = transcripts(sessions)
        before = path.read_bytes()
        again = agent(server, notes, sessions, "-c", "go on")
    assert again.returncode == 0, again.stderr
    assert again.stdout == "It says a note.\n"
    assert server.problems == [] and len(server.requests) == 3
    assert extends(server.sent[2], server.sent[1])  # the stopped conversation, byte for byte
    assert path.read_bytes().startswith(before)
    assert server.requests[2]["messages"][-1] == {"role": "user", "content": "go on"}


def test_in_chat_the_budget_is_the_sessions(workdir, sessions):
    script = [billed(final("one"), WEEKDAY_2AM), billed(final("two"), WEEKDAY_2AM)]
    script.append(billed(final("never"), WEEKDAY_2AM))
    with StubServer(script) as server:
        proc = agent(
            server, workdir, sessions, "--chat", "--max-cost", "0.02", "first",
            stdin="second\nthird\n",
        )  # fmt: skip
    assert proc.returncode == 3, proc.stderr
    assert len(server.requests) == 2 and proc.stdout == "one\ntwo\n"
    assert "stopped: the budget (--max-cost $0.0200) is spent ($0.0252 so far)" in proc.stderr


def test_a_budget_without_a_price_is_refused_at_start(workdir, sessions):
    with StubServer([final("never")]) as server:
        proc = agent(server, workdir, sessions, "--max-cost", "1", "hello", LLM_MODEL="local-model")
    usage_error(proc, "--max-cost needs the model's price", "local-model", "LLM_PRICE_INPUT")
    assert server.requests == [] and transcripts(sessions) == []


def test_a_budget_setting_without_a_price_is_refused_at_start(workdir, sessions):
    with StubServer([final("never")]) as server:
        proc = agent(server, workdir, sessions, "hello", LLM_MODEL="local-model", LLM_MAX_COST="1")
    one_line_error(proc, "LLM_MAX_COST needs the model's price", "local-model")
    assert server.requests == [] and transcripts(sessions) == []


# --- 3. Every conversation kept, listed and found again ------------------------------------------


def test_conversations_are_saved_listed_and_continued_per_workdir(tmp_path, sessions):
    work_a, work_b, work_c = (tmp_path / name for name in ("work-A", "work-B", "work-C"))
    for folder in (work_a, work_b, work_c):
        folder.mkdir()
    (work_a / "notes.txt").write_text("a note")
    script_a = [
        billed(read_call("c1"), WEEKDAY_2AM),
        billed(final("It says a note."), SATURDAY_2AM),
        final("continued"),
        final("by ID"),
        final("by prefix"),
        final("by file"),
    ]
    script_b = [billed(final("B here."), SATURDAY_2AM)]
    # One stub per conversation: it checks that each request begins with the one before it.
    with StubServer(script_a) as server_a, StubServer(script_b) as server_b:
        first_a = agent(server_a, work_a, sessions, "read notes.txt in A")
        assert first_a.returncode == 0, first_a.stderr
        first_b = agent(server_b, work_b, sessions, "say hello from B")
        assert first_b.returncode == 0, first_b.stderr
        path_a, path_b = (
            next(p for p in transcripts(sessions) if work.name in p.read_text())
            for work in (work_a, work_b)
        )
        id_a, id_b = path_a.stem, path_b.stem

        listing = agent(server_a, work_c, sessions, "--sessions")
        assert listing.returncode == 0, listing.stderr
        rows = listing.stdout.splitlines()
        assert rows[0].split() == "ID last change turns cost workdir first task".split()
        row_b, row_a = rows[1:3]  # newest first
        assert row_a.startswith(id_a) and row_b.startswith(id_b)
        assert row_a.split()[3:5] == ["1", "$0.0189"]
        assert row_a.endswith("work-A  read notes.txt in A")
        assert row_b.split()[3:5] == ["1", "$0.0063"]
        assert row_b.endswith("work-B  say hello from B")

        saved_a = path_a.read_bytes()
        go_on = agent(server_a, work_a, sessions, "-c", "and now?")
        assert go_on.returncode == 0, go_on.stderr
        assert go_on.stdout == "continued\n"  # the next reply of A's script: A's conversation
        assert f"continuing the conversation in {path_a} (5 messages)" in go_on.stderr
        # The stub saw A's earlier messages first, byte for byte, then the new one.
        assert extends(server_a.sent[2], server_a.sent[1])
        earlier = saved_messages(saved_a.decode())
        sent = server_a.requests[2]["messages"]
        assert [list(m.items()) for m in sent[:-1]] == [list(m.items()) for m in earlier]
        assert sent[-1] == {"role": "user", "content": "and now?"}
        assert path_a.read_bytes().startswith(saved_a)

        unique = next(id_a[:n] for n in range(1, len(id_a)) if not id_b.startswith(id_a[:n]))
        common = os.path.commonprefix([id_a, id_b])
        for how, answer in ((id_a, "by ID"), (unique.upper(), "by prefix")):
            proc = agent(server_a, work_c, sessions, "-r", how, "more")  # from another workdir
            assert proc.returncode == 0, proc.stderr
            assert proc.stdout == f"{answer}\n"
        proc = agent(server_a, work_c, sessions, "-r", str(path_a), "and more")
        assert proc.returncode == 0 and proc.stdout == "by file\n", proc.stderr
        requests = len(server_a.requests)
        if common:  # the same second: a prefix both IDs have matches two
            both = agent(server_a, work_c, sessions, "-r", common, "which?")
            one_line_error(both, f"2 conversations' IDs start with {common}", "give more")
        missing = agent(server_a, work_c, sessions, "-r", "nosuchid", "which?")
        one_line_error(missing, "no conversation nosuchid in", "--sessions lists")
        nothing = agent(server_a, work_c, sessions, "-c", "go on")
        one_line_error(nothing, "there is no saved conversation of the workdir", "work-C")
        assert len(server_a.requests) == requests  # none of these asked the model
    assert server_a.problems == [] and server_b.problems == []
    assert len(transcripts(sessions)) == 2  # continuing added no file
    assert len(saved_messages(path_a)) == 13  # 5, then 2 for each of the four that went on


def test_no_save_keeps_nothing(workdir, sessions):
    with StubServer([final("ok")]) as server:
        proc = agent(server, workdir, sessions, "--no-save", "hello")
    assert proc.returncode == 0, proc.stderr
    assert transcripts(sessions) == [] and not any(sessions.rglob("*"))


@pytest.mark.posix("file modes")
def test_the_sessions_folder_and_transcripts_are_the_owners_only(workdir, sessions, tmp_path):
    with StubServer([final("ok")]) as server:
        assert agent(server, workdir, sessions, "hello").returncode == 0
        saved = tmp_path / "saved.jsonl"
        with StubServer([final("ok")]) as other:
            assert agent(other, workdir, sessions, "--save", str(saved), "hi").returncode == 0
    [path] = transcripts(sessions)
    assert stat.S_IMODE(sessions.stat().st_mode) == 0o700
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(saved.stat().st_mode) == 0o600


# --- 4. One writer per transcript ------------------------------------------------------------


@pytest.mark.posix("SIGKILL, and a shell command that waits")
def test_a_second_agent_is_refused_and_a_killed_one_leaves_no_lock(workdir, sessions, tmp_path):
    transcript = tmp_path / "shared.jsonl"
    pid_file = workdir / "command.pid"
    wait = tool_call("run_shell", {"command": "echo $$ > command.pid; exec sleep 60"}, "c1")
    script = [final("Hello."), reply(None, wait, reasoning=""), final("Went on.")]
    with StubServer(script) as server:
        first = agent(server, workdir, sessions, "--save", str(transcript), "hello")
        assert first.returncode == 0, first.stderr
        env = stub_env(server, LLM_SESSIONS_DIR=str(sessions))
        holder = subprocess.Popen(
            [sys.executable, str(ROOT / "agent.py"), "--workdir", str(workdir), "--yes",
             "-r", str(transcript), "wait a minute"],
            env=env, cwd=ROOT / "tests", stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )  # fmt: skip
        try:
            wait_for(lambda: pid_file.exists() and pid_file.read_text().strip())
            before, requests = transcript.read_bytes(), len(server.requests)
            second = agent(server, workdir, sessions, "-r", str(transcript), "me too")
            named = f" (pid {holder.pid})" if os.path.exists("/proc/locks") else ""  # Linux
            assert one_line_error(second) == (
                f"error: {transcript} is in use by another agent{named}: wait for it to finish, "
                "or continue another conversation"
            )
            assert len(server.requests) == requests  # refused before any request
            assert transcript.read_bytes() == before
            holder.send_signal(signal.SIGKILL)
            holder.wait(timeout=30)
            third = agent(server, workdir, sessions, "-r", str(transcript), "go on")
        finally:
            holder.kill()
            holder.communicate()
            if pid_file.exists():
                os.kill(int(pid_file.read_text()), signal.SIGKILL)
    assert third.returncode == 0, third.stderr
    assert third.stdout == "Went on.\n"
    assert server.problems == []
    sent = server.requests[-1]["messages"]
    assert sent[-2]["role"] == "tool" and sent[-2]["tool_call_id"] == "c1"
    assert sent[-2]["content"].startswith("Error: interrupted: the agent stopped")
    assert sent[-1] == {"role": "user", "content": "go on"}
    assert transcript.read_bytes().startswith(before)


# --- 5. Writing over a conversation -------------------------------------------------------------


def test_save_onto_a_conversation_is_refused_and_leaves_it_alone(workdir, sessions, tmp_path):
    transcript = tmp_path / "run.jsonl"
    with StubServer([final("ok"), final("never")]) as server:
        assert agent(server, workdir, sessions, "--save", str(transcript), "hi").returncode == 0
        before = transcript.read_bytes()
        proc = agent(server, workdir, sessions, "--save", str(transcript), "again")
        assert len(server.requests) == 1
    one_line_error(proc, f"{transcript} already holds a conversation", f"--resume {transcript}")
    assert transcript.read_bytes() == before


def test_an_empty_file_may_be_saved_to(workdir, sessions, tmp_path):
    transcript = tmp_path / "empty.jsonl"
    transcript.touch()
    with StubServer([final("ok")]) as server:
        assert agent(server, workdir, sessions, "--save", str(transcript), "hi").returncode == 0
    assert saved_messages(transcript)[-1] == final("ok")


@pytest.mark.parametrize("option", ["-c", "--continue"])
def test_continue_with_a_file_points_to_resume(workdir, sessions, tmp_path, option):
    transcript = tmp_path / "run.jsonl"
    with StubServer([final("ok"), final("never")]) as server:
        assert agent(server, workdir, sessions, "--save", str(transcript), "hi").returncode == 0
        before = transcript.read_bytes()
        proc = agent(server, workdir, sessions, option, str(transcript), "go on")
        assert len(server.requests) == 1
    line = usage_error(proc, f"use --resume {transcript}")
    assert [line for line in proc.stderr.splitlines() if "--resume " in line] == [line]
    assert transcript.read_bytes() == before


def test_continue_with_a_mistyped_file_is_not_taken_for_a_task(workdir, sessions):
    with StubServer([final("ok"), final("never")]) as server:
        assert agent(server, workdir, sessions, "hi").returncode == 0  # something to continue
        proc = agent(server, workdir, sessions, "-c", "rnu.jsonl", "go on")
        assert len(server.requests) == 1
    usage_error(proc, "-c/--continue takes no file", "use --resume rnu.jsonl")


# --- 6. AGENTS.md ----------------------------------------------------------------------------


def first_system_prompt(server) -> str:
    [system] = [m for m in server.requests[0]["messages"] if m["role"] == "system"]
    return system["content"]


def test_agents_md_reaches_the_first_request_and_is_said_before_it(workdir, sessions):
    rules = "# Rules\n\nAnswer in French. Ne touchez pas à tests/.\n"
    (workdir / "AGENTS.md").write_text(rules, encoding="utf-8")
    said_before = []

    def answer(request: dict) -> dict:  # runs while the agent waits for this reply
        said_before.append(sys.stderr.buffer.getvalue().decode())  # the run's, caught so far
        return final("D'accord.")

    with StubServer([answer]) as server:
        env = stub_env(server, LLM_SESSIONS_DIR=str(sessions))
        proc = run_in_process("--workdir", str(workdir), "hello", env=env)
    assert proc.returncode == 0, proc.stderr
    prompt = first_system_prompt(server)
    assert prompt.startswith("You are a small coding agent")
    assert prompt.endswith(f"from AGENTS.md in the workdir:\n\n{rules}")
    line = "read AGENTS.md from the workdir into the system prompt"
    assert [text.count(line) for text in said_before] == [1]  # on stderr before the request
    lines = proc.stderr.splitlines()
    assert lines[1] == line  # right after the line naming the model and the workdir
    assert lines[0].startswith("model deepseek-flash at ")


def test_a_long_agents_md_is_cut_to_32_kib_with_a_note(workdir, sessions):
    """40 KiB of rules; the 32 KiB cut falls inside an "é" (two bytes), which is left out."""
    rules = "".join(f"rule {n:04}: keep it short.......\n" for n in range(1280))  # 32 bytes each
    text = rules[: 32 * 1024 - 1] + "é" + rules[32 * 1024 + 1 :]  # two bytes for two
    data = text.encode()
    assert len(data) == 40 * 1024 and data[32 * 1024 - 1 : 32 * 1024 + 1] == "é".encode()
    (workdir / "AGENTS.md").write_text(text, encoding="utf-8")
    with StubServer([final("ok")]) as server:
        proc = agent(server, workdir, sessions, "hello")
    assert proc.returncode == 0, proc.stderr
    prompt = first_system_prompt(server)
    kept = text[: 32 * 1024 - 1]  # every whole character of the first 32 KiB
    note = "[AGENTS.md continues beyond this point; read it for the rest]"
    assert prompt.endswith(f"in the workdir:\n\n{kept}\n\n{note}")
    assert "é" not in prompt and text[len(kept) :] not in prompt
    assert (
        "read AGENTS.md from the workdir into the system prompt (only its first 32 KiB: it is "
        "longer)"
    ) in proc.stderr.splitlines()


def test_a_resumed_conversation_keeps_the_agents_md_it_began_with(workdir, sessions):
    (workdir / "AGENTS.md").write_text("first rules\n")
    with StubServer([final("one"), final("two")]) as server:
        assert agent(server, workdir, sessions, "hello").returncode == 0
        (workdir / "AGENTS.md").write_text("other rules\n")
        proc = agent(server, workdir, sessions, "-c", "again")
    assert proc.returncode == 0, proc.stderr
    assert server.problems == []  # the same system message, byte for byte
    assert "read AGENTS.md" not in proc.stderr
    assert server.requests[1]["messages"][0]["content"].endswith("first rules\n")


@on_a_terminal
def test_in_a_terminal_chat_agents_md_is_said_before_the_first_prompt(workdir):
    (workdir / "AGENTS.md").write_text("Be brief.\n")
    with StubServer([final("Hi.")]) as server:
        child = spawn(server, "--workdir", str(workdir), "--chat")
        child.expect_exact("read AGENTS.md from the workdir into the system prompt")
        child.expect_exact("> ")
        assert server.requests == []
        child.sendline("hello")
        child.expect_exact("Hi.")
        child.expect_exact("> ")
        child.sendline("")
        assert finish(child) == 0
    assert first_system_prompt(server).endswith("AGENTS.md in the workdir:\n\nBe brief.\n")
