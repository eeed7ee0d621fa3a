"""DeepSeek's thinking switch and effort as a user sets them (--thinking, --effort,
LLM_THINKING, LLM_EFFORT, /think and /effort in --chat), checked in the requests the stub
server receives; and the retired deepseek-chat and deepseek-reasoner named with what replaced
them."""

from __future__ import annotations

import pytest
from conftest import clean_env, run_agent, run_in_process, stub_env
from fake_model import reply, tool_call
from stub_server import Fail, Streamed, StubServer

THINKING_KEYS = ("thinking", "reasoning_effort")


def run(server, workdir, *args: str, stdin: str = "", **settings: str):
    return run_in_process("--workdir", str(workdir), *args, env=stub_env(server, **settings),
                          stdin=stdin)  # fmt: skip


def sent(request: dict) -> dict:
    return {key: request[key] for key in THINKING_KEYS if key in request}


@pytest.mark.parametrize(
    "args, settings, expected",
    [
        ((), {}, {}),  # unset: the request is as it always was, the server's own defaults
        (("--thinking", "off"), {}, {"thinking": {"type": "disabled"}}),
        (("--thinking", "on"), {}, {"thinking": {"type": "enabled"}}),
        (("--effort", "max"), {}, {"reasoning_effort": "max"}),
        (
            ("--thinking", "on", "--effort", "low"),
            {},
            {"thinking": {"type": "enabled"}, "reasoning_effort": "low"},
        ),
        (("--thinking", "off", "--effort", "max"), {}, {"thinking": {"type": "disabled"}}),
        ((), {"LLM_THINKING": "off"}, {"thinking": {"type": "disabled"}}),
        ((), {"LLM_EFFORT": "High"}, {"reasoning_effort": "high"}),
        (("--effort", "low"), {"LLM_EFFORT": "max"}, {"reasoning_effort": "low"}),
        (("--thinking", "on"), {"LLM_THINKING": "off"}, {"thinking": {"type": "enabled"}}),
    ],
)
def test_each_request_carries_what_the_user_set(workdir, args, settings, expected):
    script = [reply(None, tool_call("read_file", {"path": "x"}, "c1")), reply("done")]
    with StubServer(script) as server:
        proc = run(server, workdir, *args, "go", **settings)
    assert proc.returncode == 0, proc.stderr
    assert [sent(r) for r in server.requests] == [expected, expected]
    assert server.problems == []


@pytest.mark.parametrize("stream", ["--stream", "--no-stream"])
def test_with_thinking_off_a_reply_without_reasoning_goes_back_as_it_came(workdir, stream):
    """DeepSeek with thinking off sends no reasoning_content: none is added to the history."""
    call = tool_call("read_file", {"path": "x"}, "c1")
    script = [Streamed(reply(None, call)), reply("done")]
    with StubServer(script) as server:
        proc = run(server, workdir, "--thinking", "off", stream, "go")
    assert proc.returncode == 0, proc.stderr
    assistant = server.requests[1]["messages"][2]
    assert assistant["role"] == "assistant" and "reasoning_content" not in assistant
    assert server.problems == []


def test_an_unknown_effort_is_a_usage_error_before_any_request(workdir):
    with StubServer([reply("never")]) as server:
        proc = run_agent(
            "--workdir", str(workdir), "--effort", "medium", "go", env=stub_env(server)
        )  # fmt: skip
    assert proc.returncode == 2
    line = proc.stderr.splitlines()[-1]
    assert line.startswith("agent.py: error: argument --effort: invalid choice: 'medium'")
    assert all(effort in line for effort in ("low", "high", "max"))
    assert server.requests == []


@pytest.mark.parametrize(
    "name, value, line",
    [
        ("LLM_EFFORT", "medium", "error: LLM_EFFORT must be low or high or max, not 'medium'"),
        ("LLM_THINKING", "yes", "error: LLM_THINKING must be on or off, not 'yes'"),
    ],
)
def test_a_setting_it_does_not_know_is_one_line_before_any_request(workdir, name, value, line):
    with StubServer([reply("never")]) as server:
        proc = run(server, workdir, "go", **{name: value})
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines()[-1] == line
    assert server.requests == []


def test_think_and_effort_in_chat_change_the_next_turns_requests(workdir):
    script = [reply("one"), reply("two"), reply("three"), reply("four")]
    messages = "/think off\nsecond\n/think on\n/effort max\nthird\n/effort huge\n/think\nfourth\n"
    with StubServer(script) as server:
        proc = run(server, workdir, "--chat", "first", stdin=messages)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "one\ntwo\nthree\nfour\n"
    assert [sent(r) for r in server.requests] == [
        {},
        {"thinking": {"type": "disabled"}},
        {"thinking": {"type": "enabled"}, "reasoning_effort": "max"},
        {"thinking": {"type": "enabled"}, "reasoning_effort": "max"},
    ]
    users = [m["content"] for m in server.requests[-1]["messages"] if m["role"] == "user"]
    assert users == ["first", "second", "third", "fourth"]  # no command was sent
    assert "thinking: off from the next message on" in proc.stderr
    assert "/effort takes low, high, max; nothing was sent" in proc.stderr
    assert "/think takes on or off; nothing was sent" in proc.stderr


@pytest.mark.parametrize(
    "args, said, setting",
    [
        (("--thinking", "off"), "Unrecognized request argument supplied: thinking", "LLM_THINKING"),
        (("--effort", "low"), "Extra inputs are not permitted: reasoning_effort", "LLM_EFFORT"),
    ],
)
def test_a_server_that_refuses_them_names_the_setting_to_remove(workdir, args, said, setting):
    with StubServer([Fail(400, said)]) as server:
        proc = run(server, workdir, *args, "go", LLM_MODEL="qwen3:8b")
    assert proc.returncode == 1
    line = proc.stderr.strip().splitlines()[-1]
    assert line.startswith("error: the server answered 400 (")
    assert line.endswith(f"remove {setting} (or {args[0]})"), line
    assert proc.stderr.count("\n") == 2  # the model line, then this one


# --- Retired models ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "retired, successor",
    [("deepseek-chat", "deepseek-flash"), ("deepseek-reasoner", "deepseek-v4-pro")],
)
def test_a_retired_model_on_deepseeks_api_is_named_before_any_request(workdir, retired, successor):
    """No server is needed: the line comes before anything is sent (and before a window probe)."""
    env = clean_env(LLM_API_KEY="sk-test", LLM_BASE_URL="https://api.deepseek.com/v1")
    proc = run_in_process("--workdir", str(workdir), "--model", retired, "go", env=env)
    assert proc.returncode == 1
    assert proc.stderr == (
        f"error: DeepSeek retired {retired} on 2026-07-24 and replaced it with {successor}: set "
        f"LLM_MODEL={successor} (or --model {successor})\n"
    )


def test_a_server_that_does_not_know_a_retired_model_names_its_successor(workdir):
    with StubServer([Fail(400, "Model Not Exist")]) as server:
        proc = run(server, workdir, "go", LLM_MODEL="deepseek-chat")
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines()[-1] == (
        "error: the server answered 400 (Model Not Exist): DeepSeek retired deepseek-chat on "
        "2026-07-24 and replaced it with deepseek-flash: set LLM_MODEL=deepseek-flash (or "
        "--model deepseek-flash)"
    )


def test_another_server_may_still_serve_a_retired_name(workdir):
    with StubServer([reply("served")]) as server:
        proc = run(server, workdir, "go", LLM_MODEL="deepseek-chat")
    assert proc.returncode == 0, proc.stderr
    assert server.requests[0]["model"] == "deepseek-chat"
