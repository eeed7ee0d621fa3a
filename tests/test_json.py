"""--json and --json-events as a script reads them: real runs (a process, the SDK over HTTP to the
stub server) that finish, hit the step limit, the budget, an API error, a usage error, and
Ctrl-C; stdout holds only JSON that docs/*.schema.json accepts, and the exit codes are those
without the options."""

from __future__ import annotations

import io
import json
import os
import re
import selectors
import signal
import subprocess
import sys
import threading

import forked_agents
import jsonschema
import pytest
from conftest import ROOT, clean_env, run_agent, run_in_process, stub_env, wait_for
from fake_model import FakeClient, reply, tool_call
from referencing import Registry, Resource
from stub_server import Billed, Fail, Streamed, StubServer
from test_chat import read_line

import agent
from minimal_agent.core.events import Events
from minimal_agent.core.session import Session
from minimal_agent.views import json_output

RESULT = json.loads((ROOT / "docs" / "json-result.schema.json").read_text())
EVENTS = json.loads((ROOT / "docs" / "json-events.schema.json").read_text())
REGISTRY = Registry().with_resources(
    [(schema["$id"], Resource.from_contents(schema)) for schema in (RESULT, EVENTS)]
)


def valid(record: dict, schema: dict = RESULT) -> dict:
    jsonschema.Draft202012Validator(schema, registry=REGISTRY).validate(record)
    return record


def the_result(proc) -> dict:
    """stdout is exactly one JSON object, on one line, valid by the schema."""
    assert proc.stdout.endswith("\n") and proc.stdout.count("\n") == 1, proc.stdout
    record = valid(json.loads(proc.stdout))
    assert record["exit_code"] == proc.returncode
    return record


def the_events(stdout: str) -> list[dict]:
    lines = [valid(json.loads(line), EVENTS) for line in stdout.splitlines()]
    assert lines and lines[-1]["type"] == "end"
    assert sum(1 for line in lines if line["type"] == "end") == 1
    return lines


def test_the_schemas_are_json_schema_2020_12():
    for schema in (RESULT, EVENTS):
        jsonschema.Draft202012Validator.check_schema(schema)
        assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"


def test_a_finished_run_gives_the_answer_tokens_cost_and_the_files_it_changed(workdir):
    # As a process: nothing else reaches its stdout, a command's output included.
    (workdir / "old.txt").write_text("old\n")
    (workdir / "gone.txt").write_text("bye\n")
    script = [
        reply(None, tool_call("write_file", {"path": "new.txt", "content": "n"}, "c1"),
              tool_call("write_file", {"path": "old.txt", "content": "changed"}, "c2")),
        reply(None, tool_call("run_shell", {"command": "rm gone.txt"}, "c3")),
        reply("all done"),
    ]  # fmt: skip
    with StubServer(script) as server:
        proc = run_agent("--workdir", str(workdir), "--yes", "--json", "go", env=stub_env(server))
    assert proc.returncode == 0, proc.stderr
    record = the_result(proc)
    assert record["status"] == "finished" and record["answer"] == "all done"
    assert "all done" in proc.stderr  # the human output is all on stderr
    assert record["files"] == {"created": ["new.txt"], "changed": ["old.txt"],
                               "deleted": ["gone.txt"]}  # fmt: skip
    assert (record["steps"], record["tool_calls"], record["turns"]) == (3, 3, 1)
    assert record["usage"]["prompt_tokens"] > 0 and record["usage"]["completion_tokens"] == 30
    assert record["cost"] > 0 and record["currency"] == "USD"
    assert record["model"] == "deepseek-flash" and record["workdir"] == str(workdir.resolve())
    assert record["error"] is None
    assert record["transcript"].endswith(f"{record['session_id']}.jsonl")


def test_the_step_limit_budget_cut_off_and_api_error_each_have_their_status(workdir):
    looping = reply(None, tool_call("read_file", {"path": "x"}, "c1"))
    cases = [
        ([looping], ["--max-steps", "1"], 3, "max_steps"),
        ([looping, reply("never")], ["--max-cost", "0.000001"], 3, "budget"),
        ([{"role": "assistant", "content": "half", "finish_reason": "length"}], [], 4,
         "incomplete"),
        ([Fail(400, "the request is malformed")], [], 1, "error"),
    ]  # fmt: skip
    for script, options, code, status in cases:
        with StubServer(script) as server:
            proc = run_in_process(
                "--workdir", str(workdir), "--json", *options, "go", env=stub_env(server)
            )
        assert proc.returncode == code, (status, proc.stderr)
        record = the_result(proc)
        assert record["status"] == status
        if status in ("budget", "error"):
            assert record["error"] and record["error"] in proc.stderr
        if status == "budget":
            assert record["error"].startswith("stopped: the budget")
    assert record["answer"] is None and "the request is malformed" in record["error"]


def test_an_error_before_any_conversation_still_gives_one_object(workdir, tmp_path):
    proc = run_in_process("--workdir", str(workdir), "--json", "go", env=clean_env(LLM_API_KEY=""))
    record = the_result(proc)
    assert proc.returncode == 1 and record["status"] == "error"
    assert "LLM_API_KEY is not set" in record["error"]
    assert record["session_id"] is None and record["steps"] == 0 and record["files"] is None
    missing = tmp_path / "no" / "such"
    proc = run_in_process("--workdir", str(missing), "--json", "go", env=clean_env(LLM_API_KEY="k"))
    record = the_result(proc)
    assert proc.returncode == 2 and record["status"] == "usage" and "--workdir" in record["error"]
    proc = run_in_process("--json", "--json-events", "go", env=clean_env(LLM_API_KEY="k"))
    record = the_result(proc)
    assert proc.returncode == 2 and record["status"] == "usage"
    assert record["error"] == "--json and --json-events both print on stdout: give one of them"


def test_json_events_stream_each_step_as_it_happens_and_end_with_the_record(workdir):
    """Each line is flushed when it happens: the tool call is on stdout while it still runs."""
    script = [
        reply(None, tool_call("run_shell", {"command": "sleep 2; echo hi > out.txt"}, "c1")),
        reply("done"),
    ]
    with StubServer(script) as server:
        proc = forked_agents.Popen(
            [sys.executable, str(ROOT / "agent.py"), "--workdir", str(workdir), "--yes",
             "--json-events", "write out.txt"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=stub_env(server),
        )  # fmt: skip
        try:
            early = [json.loads(proc.stdout.readline()) for _ in range(3)]
            assert proc.poll() is None and not (workdir / "out.txt").exists()
            rest, err = proc.communicate(timeout=60)
        finally:
            proc.kill()
    assert proc.returncode == 0, err
    lines = [valid(line, EVENTS) for line in early] + the_events(rest)
    assert [line["type"] for line in lines] == [
        "turn_start", "reply", "tool_call", "tool_result", "reply", "file_change", "turn_end",
        "end",
    ]  # fmt: skip
    assert lines[0]["task"] == "write out.txt"
    assert lines[1]["usage"]["completion_tokens"] == 10 and lines[1]["tool_calls"] == 1
    assert json.loads(lines[2]["arguments"]) == {"command": "sleep 2; echo hi > out.txt"}
    assert lines[3]["content"].startswith("exit code 0") and lines[3]["error"] is False
    assert lines[5] | {"version": 1} == {"version": 1, "type": "file_change",
                                         "path": "out.txt", "change": "created"}  # fmt: skip
    assert lines[-1]["status"] == "finished" and lines[-1]["answer"] == "done"


@pytest.mark.posix("SIGINT to a process")
@pytest.mark.parametrize("option", ["--json", "--json-events"])
def test_ctrl_c_gives_the_record_with_status_interrupted_and_exit_130(workdir, option):
    script = [reply(None, tool_call("run_shell", {"command": "touch started; sleep 60"}, "c1"))]
    with StubServer(script) as server:
        proc = forked_agents.Popen(
            [sys.executable, str(ROOT / "agent.py"), "--workdir", str(workdir), "--yes", option,
             "wait"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=stub_env(server),
        )  # fmt: skip
        try:
            wait_for(lambda: (workdir / "started").exists())
            proc.send_signal(signal.SIGINT)
            out, err = proc.communicate(timeout=60)
        finally:
            proc.kill()
    assert proc.returncode == 130, err
    record = the_events(out)[-1] if option == "--json-events" else valid(json.loads(out))
    assert record["status"] == "interrupted" and record["exit_code"] == 130
    assert record["steps"] == 1 and record["tool_calls"] == 1 and record["answer"] is None
    assert record["files"] == {"created": ["started"], "changed": [], "deleted": []}


def test_a_piped_chat_gives_one_record_for_the_session(workdir):
    script = [reply("one"), reply("two")]
    with StubServer(script) as server:
        proc = run_in_process(
            "--workdir", str(workdir), "--chat", "--json", "first", env=stub_env(server),
            stdin="second\n",
        )  # fmt: skip
    record = the_result(proc)
    assert proc.returncode == 0 and record["turns"] == 2 and record["answer"] == "two"
    assert record["files"] == {"created": [], "changed": [], "deleted": []}


def test_a_reader_of_the_stream_gets_each_request_as_sent_and_each_response_as_received(workdir):
    """What the wire's recorder needs from the same stream the JSON modes read."""
    seen: list[tuple[str, dict]] = []
    stream = Events()
    stream.subscribe(lambda kind, fields: seen.append((kind, fields)))
    client = FakeClient(reply(None, tool_call("read_file", {"path": "x"}, "c1")), reply("ok"))
    session = Session(agent.SYSTEM_PROMPT, agent.Workspace(workdir, events=stream))
    agent.run("go", client, model="m", session=session)
    kinds = [kind for kind, _ in seen]
    assert kinds[:2] == ["message", "message"]  # the system prompt, then the task
    assert kinds[2:] == ["turn", "waiting", "request", "response", "waited", "reply", "message",
                         "tool_call", "tool_result", "message",
                         "waiting", "request", "response", "waited", "reply", "message",
                         "answer", "turn_end", "usage"]  # fmt: skip
    requests = [fields for kind, fields in seen if kind == "request"]
    # The same model, tools, parameters and messages as the client got.
    assert [request["body"] for request in requests] == client.requests
    response = next(fields for kind, fields in seen if kind == "response")
    assert response["body"]["choices"][0]["message"]["tool_calls"][0]["id"] == "c1"
    assert response["streamed"] is False and response["seconds"] >= 0


# --- What a walk-through found (issue 39): each row as a script would read it ---------------

OFF_PEAK = 1_796_000_000  # a time DeepSeek bills at its off-peak prices


def test_a_usage_error_before_anything_is_saved_names_no_conversation(workdir):
    proc = run_in_process("--workdir", str(workdir), "--json", env=clean_env(LLM_API_KEY="k"))
    record = the_result(proc)
    assert proc.returncode == 2 and record["status"] == "usage"
    assert record["session_id"] is None and record["transcript"] is None


def test_money_is_rounded_to_ten_places_in_plain_notation_in_both_outputs(workdir):
    """392 cache-miss tokens at $0.15 per million: 5.88e-05 as Python writes the float."""
    for option in ("--json", "--json-events"):
        script = [Billed(reply("hi"), created=OFF_PEAK, miss=392)]
        with StubServer(script) as server:
            proc = run_in_process("--workdir", str(workdir), option, "go", env=stub_env(server))
        assert proc.returncode == 0, proc.stderr
        written = re.findall(r'"cost": ([^,}]*)', proc.stdout)
        assert written == ["0.0000588"] * (2 if option == "--json-events" else 1), proc.stdout
        records = the_events(proc.stdout) if option == "--json-events" else [the_result(proc)]
        assert records[-1]["cost"] == 0.0000588


def test_money_keeps_no_float_noise():
    out = io.StringIO()
    json_output.write(out, {"cost": 0.00023753399999999997, "other": 1e-05}, key="sk-x")
    assert out.getvalue() == '{"cost": 0.000237534, "other": 1e-05}\n'
    out = io.StringIO()
    json_output.write(out, {"cost": 0.0}, key="sk-x")
    assert json.loads(out.getvalue()) == {"cost": 0}


def test_a_budget_stop_counts_the_turn_it_cut_short_as_the_step_limit_does(workdir):
    reading = reply(None, tool_call("read_file", {"path": "x"}, "c1"))
    records = {}
    for options in (["--max-cost", "0.05"], ["--max-steps", "2"]):
        script = [Billed(reading, created=OFF_PEAK, miss=200_000)] * 3  # $0.03 a reply
        with StubServer(script) as server:
            proc = run_in_process(
                "--workdir", str(workdir), "--json", *options, "go", env=stub_env(server)
            )
        records[options[0]] = the_result(proc)
    assert records["--max-cost"]["status"] == "budget"
    assert records["--max-steps"]["status"] == "max_steps"
    for record in records.values():
        assert (record["turns"], record["steps"], record["tool_calls"]) == (1, 2, 2)


def test_a_run_whose_commands_nobody_could_approve_is_no_success(workdir):
    """Piped: nobody is at a terminal to approve run_shell. The model gets an error and says it
    is done; the script gets exit 5, status refused, and which call was refused and why."""
    script = [
        reply(None, tool_call("run_shell", {"command": "touch out.txt"}, "c1")),
        reply("I made out.txt."),
    ]
    for option in ("--json", "--json-events"):
        with StubServer(script) as server:
            proc = run_in_process(
                "--workdir", str(workdir), option, "make out.txt", env=stub_env(server)
            )
        assert proc.returncode == 5, proc.stderr
        assert not (workdir / "out.txt").exists()
        lines = the_events(proc.stdout) if option == "--json-events" else [the_result(proc)]
        record = lines[-1]
        assert record["status"] == "refused" and record["exit_code"] == 5
        assert [(r["id"], r["name"]) for r in record["refused"]] == [("c1", "run_shell")]
        assert "not a terminal" in record["refused"][0]["why"]
        assert "--yes" in record["refused"][0]["why"]
        assert "not run: stdin is not a terminal" in proc.stderr
        if option == "--json-events":
            result = next(line for line in lines if line["type"] == "tool_result")
            assert result["refused"] == record["refused"][0]["why"]


def test_a_run_with_yes_refuses_nothing_and_says_so(workdir):
    script = [reply(None, tool_call("run_shell", {"command": "touch out.txt"}, "c1")), reply("ok")]
    with StubServer(script) as server:
        proc = run_in_process("--workdir", str(workdir), "--yes", "--json-events", "go",
                              env=stub_env(server))  # fmt: skip
    lines = the_events(proc.stdout)
    assert proc.returncode == 0 and lines[-1]["status"] == "finished"
    assert lines[-1]["refused"] == []
    assert [line["refused"] for line in lines if line["type"] == "tool_result"] == [None]


CTRL_D_HINT = "then end it with Ctrl-D"


@pytest.mark.posix("select() on a pipe")
def test_the_ctrl_d_hint_only_where_a_person_may_be_typing(workdir):
    """A pipe that holds the task already gets no hint; one with nothing in it yet (an IDE's
    console, where a person types) gets it, and the task typed after it is read."""
    with StubServer([reply("one")]) as server:
        read_end, write_end = os.pipe()
        os.write(write_end, b"the piped task\n")
        os.close(write_end)
        piped = subprocess.run(
            [sys.executable, str(ROOT / "agent.py"), "--workdir", str(workdir), "--json"],
            stdin=read_end, capture_output=True, text=True, env=stub_env(server), timeout=60,
        )  # fmt: skip
        os.close(read_end)
    with StubServer([reply("two")]) as server:
        typed = forked_agents.Popen(
            [sys.executable, str(ROOT / "agent.py"), "--workdir", str(workdir), "--json"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env=stub_env(server),
        )  # fmt: skip
        try:
            first = typed.stderr.readline()
            while "no task given" not in first and first:
                first = typed.stderr.readline()
            out, err = typed.communicate("the typed task\n", timeout=60)
        finally:
            typed.kill()
    assert piped.returncode == 0 and CTRL_D_HINT not in piped.stderr, piped.stderr
    assert the_result(piped)["answer"] == "one"
    assert CTRL_D_HINT in first
    assert typed.returncode == 0 and json.loads(out)["answer"] == "two"
    assert server.requests[0]["messages"][-1]["content"] == "the typed task"


@pytest.mark.posix("select() on a pipe, which Windows allows only on sockets")
def test_a_reader_of_json_events_gets_the_first_event_while_the_model_is_still_asked(workdir):
    """Issue 40: each event is handed on when it happens, not when the output's buffer is
    full or the run ends: the turn_start line is there while the reply is still held back,
    and nothing after it yet."""
    held = threading.Event()
    with StubServer([Streamed(reply("done"), hold=held)]) as server:
        env = stub_env(server)
        env.pop("PYTHONUNBUFFERED", None)  # a pipe gets block-buffered output, as for users
        proc = forked_agents.Popen(
            [sys.executable, str(ROOT / "agent.py"), "--workdir", str(workdir), "--stream",
             "--json-events", "go"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
        )  # fmt: skip
        try:
            first = json.loads(read_line(proc.stdout, timeout=60))
            more = selectors.DefaultSelector()
            more.register(proc.stdout, selectors.EVENT_READ)
            assert not more.select(0) and proc.poll() is None  # still waiting on the model
            held.set()
            rest, err = proc.communicate(timeout=60)
        finally:
            held.set()
            proc.kill()
    assert proc.returncode == 0, err
    assert first["type"] == "turn_start" and first["task"] == "go"
    assert [line["type"] for line in the_events(rest.decode())] == ["reply", "turn_end", "end"]
