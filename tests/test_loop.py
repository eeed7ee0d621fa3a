"""The loop's behaviour, through run() with a scripted fake client: what the model is sent,
what the user sees, what lands on disk."""

from __future__ import annotations

import json

import pytest
from fake_model import FakeClient, completion, reply, tool_call
from stub_server import check_messages

import agent
from minimal_agent.core.replay import ReplayClient
from minimal_agent.stores.transcripts import Conversation, Transcript


def run(task, client, workdir, yes=False, max_steps=agent.MAX_STEPS, **options):
    workspace = agent.Workspace(workdir, approve_all=yes)
    return agent.run(
        task, client, model="test-model", max_steps=max_steps, workspace=workspace, **options
    )


def tool_messages(messages):
    return [m for m in messages if m["role"] == "tool"]


def test_a_direct_reply_is_printed_and_ends_the_run(workdir, capsys):
    client = FakeClient(reply("Hello there."))
    result = run("say hello", client, workdir)

    out, err = capsys.readouterr()
    assert out == "Hello there.\n"
    assert result["stop_reason"] == "finished" and result["text"] == "Hello there."
    assert result["steps"] == 1 and result["tool_calls"] == 0
    request = client.requests[0]
    assert request["model"] == "test-model"
    assert request["tools"] == agent.TOOLS
    assert [m["role"] for m in request["messages"]] == ["system", "user"]
    assert request["messages"][1]["content"] == "say hello"
    assert "steps 1, tool calls 0" in err


def test_one_tool_call_is_run_and_answered(workdir):
    call = tool_call("write_file", {"path": "a.txt", "content": "hi"}, "call_1")
    client = FakeClient(reply(None, call), reply("done"))
    result = run("write it", client, workdir)

    assert (workdir / "a.txt").read_text() == "hi"
    second = client.sent[1]
    assert second[-2] == {"role": "assistant", "content": None, "tool_calls": [call]}
    assert second[-1]["role"] == "tool" and second[-1]["tool_call_id"] == "call_1"
    assert second[-1]["content"].startswith("Wrote 2 characters")
    assert result["steps"] == 2 and result["tool_calls"] == 1


def test_several_calls_in_one_message_are_answered_once_each_in_order(workdir):
    (workdir / "b.txt").write_text("bee")
    calls = [
        tool_call("write_file", {"path": "a.txt", "content": "ay"}, "c1"),
        tool_call("read_file", {"path": "a.txt"}, "c2"),
        tool_call("read_file", {"path": "b.txt"}, "c3"),
    ]
    client = FakeClient(reply("Working on it.", *calls), reply("done"))
    run("three things", client, workdir)

    answers = tool_messages(client.sent[1])
    assert [m["tool_call_id"] for m in answers] == ["c1", "c2", "c3"]
    assert answers[1]["content"] == "ay" and answers[2]["content"] == "bee"
    assert client.sent[1][2]["content"] == "Working on it."


@pytest.mark.parametrize(
    "name, arguments, expected",
    [
        (
            "delete_everything",
            "{}",
            # every tool named, in TOOL_MAP's order, wherever a learner added theirs
            f"there is no tool 'delete_everything'; the tools are {', '.join(agent.TOOL_MAP)}",
        ),
        ("read_file", '{"path": "a.txt"', "not valid JSON"),  # cut off
        ("read_file", "path=a.txt", "not valid JSON"),
        (
            "read_file",
            '["a.txt"]',
            "read_file takes a JSON object of its arguments, not a JSON array",
        ),
        ("read_file", "null", "not a JSON null"),
        ("read_file", "", "missing 'path'"),  # an empty string means {}
        ("write_file", '{"path": "x"}', "missing 'content'"),
        ("read_file", '{"path": "a.txt", "mode": "r"}', "unexpected 'mode'"),
        ("read_file", '{"path": 7}', "'path' is an integer, not a string"),
        ("read_file", '{"path": "missing.txt"}', "does not exist"),  # raised inside the tool
    ],
)
def test_a_broken_call_gets_an_error_the_model_can_read(workdir, name, arguments, expected):
    client = FakeClient(reply(None, tool_call(name, arguments, "bad")), reply("ok, giving up"))
    result = run("try", client, workdir)

    [answer] = tool_messages(client.sent[1])
    assert answer["tool_call_id"] == "bad"
    assert answer["content"].startswith("Error:")
    assert expected in answer["content"]
    assert result["stop_reason"] == "finished"


def test_an_exception_inside_a_tool_becomes_an_error(workdir, monkeypatch):
    def broken(ws, path):
        raise RuntimeError("disk on fire")

    monkeypatch.setitem(agent.TOOL_MAP, "read_file", broken)
    client = FakeClient(reply(None, tool_call("read_file", {"path": "a"}, "c")), reply("ok"))
    run("try", client, workdir)
    assert tool_messages(client.sent[1])[0]["content"] == "Error: RuntimeError: disk on fire"


def test_the_step_limit_stops_a_model_that_never_finishes(workdir, capsys):
    calls = [reply(None, tool_call("read_file", {"path": "."}, f"c{i}")) for i in range(5)]
    client = FakeClient(*calls)
    result = run("loop forever", client, workdir, max_steps=3)

    assert len(client.requests) == 3
    assert result["stop_reason"] == "max_steps" and result["text"] is None
    assert result["steps"] == 3 and result["tool_calls"] == 3
    assert [m["tool_call_id"] for m in tool_messages(result["messages"])] == ["c0", "c1", "c2"]
    out, err = capsys.readouterr()
    assert out == ""
    assert "step limit (3 requests)" in err and "--max-steps" in err


@pytest.mark.parametrize("reason", ["length", "content_filter"])
def test_a_cut_off_reply_is_warned_about(workdir, capsys, reason):
    client = FakeClient(completion(reply("Half an ans"), finish_reason=reason))
    result = run("long answer", client, workdir)
    out, err = capsys.readouterr()
    assert out == "Half an ans\n"
    assert f"cut off (finish_reason {reason})" in err
    assert result["stop_reason"] == "incomplete"


@pytest.mark.parametrize("thinking", ["", "Let me write the file first."])
def test_reasoning_content_goes_back_exactly_as_received(workdir, thinking):
    call = tool_call("write_file", {"path": "a.txt", "content": "x"}, "c1")
    client = FakeClient(reply(None, call, reasoning=thinking), reply("done", reasoning="ok"))
    result = run("think", client, workdir)

    sent_assistant = client.sent[1][2]
    assert "reasoning_content" in sent_assistant
    assert sent_assistant["reasoning_content"] == thinking
    assert result["messages"][-1]["reasoning_content"] == "ok"


def test_no_reasoning_content_is_invented_for_servers_without_it(workdir):
    call = tool_call("read_file", {"path": "."}, "c1")
    client = FakeClient(reply(None, call), reply("done"))
    run("plain", client, workdir)
    assert "reasoning_content" not in client.sent[1][2]
    assert set(client.sent[1][2]) == {"role", "content", "tool_calls"}


def test_empty_content_is_sent_as_null_not_left_out(workdir):
    call = tool_call("read_file", {"path": "."}, "c1")
    client = FakeClient(reply("", call), reply("done"))
    run("x", client, workdir)
    assert client.sent[1][2]["content"] is None


def test_the_history_is_append_only_and_every_request_validates(workdir):
    (workdir / "f.txt").write_text("data")
    script = [
        reply(None, tool_call("read_file", {"path": "f.txt"}, "c1"), reasoning=""),
        reply("thinking aloud", tool_call("nope", "{}", "c2"), tool_call("read_file", "{", "c3")),
        reply(None, tool_call("write_file", {"path": "g.txt", "content": "g"}, "c4")),
        reply("finished", reasoning="r"),
    ]
    client = FakeClient(*script)
    result = run("work", client, workdir)

    for earlier, later in zip(client.sent, client.sent[1:], strict=False):
        assert later[: len(earlier)] == earlier
    served = [m for m in result["messages"] if m["role"] == "assistant"]
    for messages in [*client.sent, result["messages"]]:
        assert check_messages(messages, served, None) == []


def test_missing_and_duplicate_tool_call_ids_get_ids_of_their_own(workdir):
    calls = [
        tool_call("read_file", {"path": "."}, "same"),
        tool_call("read_file", {"path": "."}, "same"),
        {**tool_call("read_file", {"path": "."}), "id": ""},
    ]
    client = FakeClient(reply(None, *calls), reply("done"))
    result = run("ids", client, workdir)

    ids = [c["id"] for c in client.sent[1][2]["tool_calls"]]
    assert len(set(ids)) == 3 and ids[0] == "same"
    assert [m["tool_call_id"] for m in tool_messages(result["messages"])] == ids


def test_token_usage_is_added_up_and_reported(workdir, capsys):
    usage = {
        "prompt_tokens": 100,
        "completion_tokens": 7,
        "total_tokens": 107,
        "prompt_cache_hit_tokens": 64,
        "prompt_cache_miss_tokens": 36,
    }
    call = tool_call("read_file", {"path": "."}, "c1")
    client = FakeClient(
        completion(reply(None, call), usage=usage), completion(reply("ok"), usage=usage)
    )
    result = run("count", client, workdir)
    assert result["usage"] == {
        "prompt_tokens": 200,
        "cache_hit_tokens": 128,
        "completion_tokens": 14,
    }
    err = capsys.readouterr().err
    assert (
        "steps 2, tool calls 1, prompt tokens 200, cache-hit tokens 128, completion tokens 14"
        in err
    )


def test_openai_style_cached_tokens_count_as_cache_hits(workdir):
    usage = {
        "prompt_tokens": 50,
        "completion_tokens": 5,
        "total_tokens": 55,
        "prompt_tokens_details": {"cached_tokens": 32},
    }
    result = run("count", FakeClient(completion(reply("ok"), usage=usage)), workdir)
    assert result["usage"]["cache_hit_tokens"] == 32


def test_save_writes_each_message_as_it_is_added(workdir, tmp_path):
    transcript = tmp_path / "run.jsonl"
    seen_on_disk = []

    def second_reply(messages):
        seen_on_disk.append(transcript.read_text().splitlines())
        return reply("done")

    call = tool_call("write_file", {"path": "a.txt", "content": "x"}, "c1")
    client = FakeClient(reply(None, call, reasoning=""), second_reply)
    result = run("save it", client, workdir, save=transcript)

    lines = [json.loads(line) for line in transcript.read_text().splitlines()]
    messages = [line for line in lines if "event" not in line]  # without the bookkeeping
    assert messages == result["messages"]  # exactly what the model was sent, plus the reply
    on_disk = [json.loads(line) for line in seen_on_disk[0]]
    assert [line for line in on_disk if "event" not in line] == client.sent[1]
    assert lines[-1] == {"role": "assistant", "content": "done"}


def test_a_saved_run_replays_with_the_same_tool_effects(workdir, tmp_path, capsys):
    transcript = tmp_path / "run.jsonl"
    calls = reply(
        None, tool_call("write_file", {"path": "a.txt", "content": "one"}, "c1"), reasoning=""
    )
    run("make a.txt", FakeClient(calls, reply("made it")), workdir, save=transcript)
    (workdir / "a.txt").unlink()
    capsys.readouterr()

    notes: list[str] = []
    replay = ReplayClient(transcript, notify=notes.append)
    assert replay.task() == "make a.txt"
    result = run(replay.task(), replay, workdir)
    assert (workdir / "a.txt").read_text() == "one"
    assert capsys.readouterr().out == "made it\n"
    assert notes == []  # the run kept to the recorded path
    assert result["messages"][2]["reasoning_content"] == ""


def test_a_result_that_cannot_be_encoded_is_made_safe_to_send(workdir, monkeypatch):
    def odd(ws, path):
        raise OSError(f"bad name {path}\ud800")  # a lone surrogate cannot be sent as UTF-8

    monkeypatch.setitem(agent.TOOL_MAP, "read_file", odd)
    client = FakeClient(reply(None, tool_call("read_file", {"path": "a"}, "c")), reply("ok"))
    run("try", client, workdir)
    content = tool_messages(client.sent[1])[0]["content"]
    assert content == "Error: OSError: bad name a?"
    content.encode("utf-8")


def test_a_fake_client_answers_as_the_model_asked_so_no_server_note_is_printed(workdir, capsys):
    agent.run("hi", FakeClient(reply("Hi.")), model="test", workspace=agent.Workspace(workdir))
    assert "note:" not in capsys.readouterr().err


def test_every_way_of_adding_to_messages_is_saved_and_changing_them_is_refused(tmp_path):
    path = tmp_path / "t.jsonl"
    messages = Conversation([], Transcript.open(path))
    first, second, third = ({"role": "user", "content": str(n)} for n in range(3))
    messages.append(first)
    messages.extend([second])
    messages += [third]
    for change in (
        lambda: messages.insert(0, first),
        lambda: messages.__setitem__(0, first),
        lambda: messages.__setitem__(slice(0, 1), [first]),
        lambda: messages.__delitem__(0),
        lambda: messages.pop(),
        lambda: messages.clear(),
    ):
        with pytest.raises(TypeError, match="append-only.*append\\(\\), extend\\(\\) or \\+="):
            change()
    messages.transcript.close()
    saved = [json.loads(line) for line in path.read_text().splitlines()]
    assert saved == [first, second, third] == list(messages)
