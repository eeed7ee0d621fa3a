"""What real servers send and reject (issue: llama.cpp, Ollama, vLLM, LM Studio), each played by
the stub server behaving as that server does, with the agent as a real process over HTTP."""

from __future__ import annotations

import json
import re

import pytest
from conftest import run_agent, run_in_process, saved_messages, stub_env
from fake_model import reply, tool_call
from stub_server import StubServer


def agent(server, workdir, *args: str, save=None, **settings: str):
    options = ["--workdir", str(workdir), "--yes", *(["--save", str(save)] if save else [])]
    return run_in_process(*options, *args, "do it", env=stub_env(server, **settings))


def assistant_messages(request: dict) -> list[dict]:
    return [m for m in request["messages"] if m["role"] == "assistant"]


def tool_answers(request: dict) -> list[str]:
    return [m["content"] for m in request["messages"] if m["role"] == "tool"]


@pytest.mark.parametrize("reason", ["length", "content_filter", "insufficient_system_resource"])
def test_a_cut_off_reply_runs_none_of_its_calls_and_the_history_stays_valid(workdir, reason):
    write = tool_call("write_file", {"path": "made.txt", "content": "x"}, "callAAAA1")
    shell = tool_call("run_shell", {"command": "touch ran.txt"}, "callAAAA2")
    half = tool_call("write_file", '{"path": "half.txt", "cont', "callAAAA3")  # cut off mid-call
    cut = {**reply(None, write, shell, half), "finish_reason": reason}
    with StubServer([cut, reply("I will try again later.")], server="llamacpp") as server:
        proc = agent(server, workdir)
    assert server.problems == []  # no 500 for the history (llama.cpp parses its arguments)
    assert proc.returncode == 0, proc.stderr
    assert list(workdir.iterdir()) == []  # nothing ran, not even the complete calls
    answers = tool_answers(server.requests[1])
    assert len(answers) == 3
    for answer in answers:
        assert answer.startswith("Error: your reply was cut off") and "nothing was run" in answer
    assert repr('{"path": "half.txt", "cont') in answers[2]  # what arrived, so it can redo it
    assert "touch ran.txt" in answers[1]
    calls = assistant_messages(server.requests[1])[0]["tool_calls"]
    assert [c["function"]["arguments"] for c in calls][2] == "{}"
    assert f"cut off (finish_reason {reason})" in proc.stderr


@pytest.mark.parametrize(
    "arguments, why",
    [
        ('{"path": "a.txt"', "not valid JSON"),
        ("path=a.txt", "not valid JSON"),
        ('["a.txt"]', "takes a JSON object"),
        ("null", "takes a JSON object"),
    ],
)
def test_arguments_that_are_no_json_object_are_sent_back_as_an_empty_object(
    workdir, arguments, why
):
    (workdir / "a.txt").write_text("secret")
    call = tool_call("read_file", arguments, "callAAAA1")
    with StubServer([reply(None, call), reply("ok")], server="llamacpp") as server:
        proc = agent(server, workdir)
    assert server.problems == []
    assert proc.returncode == 0, proc.stderr
    [sent] = assistant_messages(server.requests[1])[0]["tool_calls"]
    assert sent["function"]["arguments"] == "{}"
    [answer] = tool_answers(server.requests[1])
    assert answer.startswith("Error:") and why in answer and "nothing was run" in answer
    assert repr(arguments)[:40] in answer  # what the model sent, so it can correct itself
    assert "secret" not in answer


def test_arguments_sent_as_a_json_object_are_used_as_its_text(workdir):
    (workdir / "a.txt").write_text("contents")
    call = {"id": "c1", "type": "function", "function": {"name": "read_file", "arguments": {}}}
    call["function"]["arguments"] = {"path": "a.txt"}  # llama.cpp #20198: an object, not a string
    with StubServer([reply(None, call), reply("ok")]) as server:
        proc = agent(server, workdir)
    assert server.problems == [] and proc.returncode == 0, proc.stderr
    [sent] = assistant_messages(server.requests[1])[0]["tool_calls"]
    assert json.loads(sent["function"]["arguments"]) == {"path": "a.txt"}
    assert tool_answers(server.requests[1]) == ["contents"]


def test_missing_empty_and_repeated_ids_become_nine_letters_and_digits(workdir):
    calls = [
        {**tool_call("read_file", {"path": "."}), "id": ""},
        tool_call("read_file", {"path": "."}, "abcDEF123"),
        tool_call("read_file", {"path": "."}, "abcDEF123"),
    ]
    del calls[0]["id"]
    with StubServer([reply(None, *calls), reply("ok")], server="llamacpp") as server:
        proc = agent(server, workdir)
    assert server.problems == [] and proc.returncode == 0, proc.stderr
    ids = [c["id"] for c in assistant_messages(server.requests[1])[0]["tool_calls"]]
    assert ids[1] == "abcDEF123" and len(set(ids)) == 3
    assert all(re.fullmatch(r"[A-Za-z0-9]{9}", i) for i in ids)


@pytest.mark.parametrize("field", ["reasoning_content", "reasoning"])
def test_reasoning_goes_back_under_the_name_it_came_with(workdir, field, tmp_path):
    first = reply(None, tool_call("read_file", {"path": "."}, "c1"))
    first[field] = ""
    last = {**reply("done"), field: "All read."}
    save = tmp_path / "run.jsonl"
    with StubServer([first, last], server="vllm") as server:
        proc = agent(server, workdir, save=save)
    assert server.problems == [] and proc.returncode == 0, proc.stderr
    [sent] = assistant_messages(server.requests[1])
    other = {"reasoning_content": "reasoning", "reasoning": "reasoning_content"}[field]
    assert sent[field] == "" and other not in sent
    shown = run_agent("--show", str(save), env=stub_env(server)).stdout
    assert "assistant (thinking): All read." in shown


@pytest.mark.parametrize(
    "content, answer",
    [
        ("<think>First the plan.</think>\n\nThe answer is 4.", "The answer is 4.\n"),
        ("The plan, without an opening tag.</think>The answer is 4.", "The answer is 4.\n"),
    ],
)
def test_a_think_block_stays_in_the_history_but_not_in_the_answer(
    workdir, tmp_path, content, answer
):
    save = tmp_path / "run.jsonl"
    with StubServer([reply(content)], server="lmstudio") as server:
        proc = agent(server, workdir, save=save)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == answer
    saved = saved_messages(save)
    assert saved[-1]["content"] == content  # exactly as received


@pytest.mark.parametrize(
    "final",
    [
        {"role": "assistant", "content": None, "reasoning_content": "I thought about it."},
        {"role": "assistant", "content": "<think>Still thinking when it stopped"},
        {"role": "assistant", "content": "<think>All of it is thinking.</think>"},
        {"role": "assistant", "content": "  \n"},
    ],
)
def test_a_final_reply_without_answer_text_exits_4_with_a_warning(workdir, final):
    with StubServer([final]) as server:
        proc = agent(server, workdir)
    assert proc.returncode == 4, proc.stderr
    assert proc.stdout.strip() == ""
    assert "warning: the model's final reply has no answer text" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_ollama_rejecting_content_null_gets_empty_strings_from_then_on(workdir):
    script = [
        reply(None, tool_call("read_file", {"path": "."}, "c1")),
        reply(None, tool_call("read_file", {"path": "."}, "c2")),
        reply("done"),
    ]
    with StubServer(script, server="ollama") as server:
        proc = agent(server, workdir)
    assert server.problems == [] and proc.returncode == 0, proc.stderr
    assert server.rejected == ["content null"]  # once: every later request already sends ""
    later = [m["content"] for m in assistant_messages(server.requests[-1])]
    assert later == ["", ""]
    assert proc.stderr.count("rejects content null") == 1


def test_a_server_answering_as_another_model_is_pointed_out_once(workdir):
    script = [reply(None, tool_call("read_file", {"path": "."}, "abcDEF123")), reply("ok")]
    with StubServer(script, server="llamacpp") as server:
        proc = agent(server, workdir, "--model", "no-such-model")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.count("asked for model no-such-model") == 1
    assert "gemma-3-270m.gguf" in proc.stderr


def test_the_same_model_name_or_a_longer_one_is_not_pointed_out(workdir):
    with StubServer([reply("ok")]) as server:
        proc = agent(server, workdir)
    assert "asked for model" not in proc.stderr
