"""minimal_agent/wire.py: every request a saved conversation sent and every response it got,
kept beside its transcript, rebuilt exactly (compared with what the stub server received, byte
for byte once parsed); --show ID --wire on the terminal; --show with IDs and whole commands."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import run_in_process, stub_env
from fake_model import FakeClient, completion, reply, tool_call
from stub_server import Fail, Streamed, StubServer, stream_chunks
from test_long_conversations import Model, agent, compactions, part_files, read, reading

import agent as lesson
from minimal_agent import sessions, wire
from minimal_agent.session import Session

KEY = "sk-wire-test-0123456789abcdef"


def kept(save: Path) -> list[dict]:
    return list(wire.exchanges(sessions.wire_file(save)))


def as_json(value: object) -> object:
    return json.loads(json.dumps(value))


# --- 1. Every request and response, exactly ----------------------------------------------------


def test_every_request_is_kept_exactly_through_a_compaction_and_a_resume(workdir, tmp_path):
    names = part_files(workdir, 10, 6_000)
    save = tmp_path / "run.jsonl"
    first = Model(reading(names), "llamacpp")
    with StubServer(
        first.script(), api_key=KEY, server="llamacpp", window=4_096, compactions_allowed=True
    ) as stub:
        done = agent(stub, workdir, "--save", str(save), "Read every part.")
        assert done.returncode == 0 and stub.problems == [], done.stderr
        assert compactions(save) and stub.side_requests  # a summary was asked for in between
        received, answered = list(stub.received), list(stub.answered)

    (workdir / "small.txt").write_text("a small file\n")
    then = Model([read(50, "small.txt"), {"role": "assistant", "content": "a small file"}])
    with StubServer(
        then.script(), api_key=KEY, server="llamacpp", window=4_096, compactions_allowed=True
    ) as stub:
        done = agent(stub, workdir, "-r", str(save), "What does small.txt say?")
        assert done.returncode == 0 and stub.problems == [], done.stderr
        received += stub.received
        answered += stub.answered

    exchanges = kept(save)
    assert [exchange["number"] for exchange in exchanges] == list(range(1, len(received) + 1))
    assert [exchange["body"] for exchange in exchanges] == received  # every field, as sent
    assert [exchange["response"] for exchange in exchanges] == answered
    assert all(exchange["seconds"] >= 0 and not exchange["streamed"] for exchange in exchanges)
    # The resumed run's first request is kept as what it adds to the last one before it.
    resumed = exchanges[-len(stub.received)]
    assert resumed["base"] == resumed["number"] - 1 and resumed["same"] > 1
    assert [m["role"] for m in resumed["new"]] == ["assistant", "user"]  # the answer, the task
    text = sessions.wire_file(save).read_text()
    assert KEY not in text and "authorization" not in text.lower()


def test_a_long_run_keeps_at_most_twice_what_its_transcript_keeps(workdir, tmp_path):
    """40 steps, each reading a file: kept whole, the requests alone would hold the history 40
    times over (about 20 times the transcript)."""
    names = part_files(workdir, 39, 2_000)
    steps = [reply(None, tool_call("read_file", {"path": n}, f"c{i}")) for i, n in enumerate(names)]
    client = FakeClient(*steps, reply("All 39 read."))
    save = tmp_path / "long.jsonl"
    result = lesson.run(
        "Read every part.", client, model="deepseek-flash", max_steps=40,
        workspace=lesson.Workspace(workdir), save=save,
    )  # fmt: skip
    assert result["steps"] == 40
    record = sessions.wire_file(save)
    exchanges = kept(save)
    assert [exchange["body"] for exchange in exchanges] == as_json(client.requests)
    everything = sum(len(json.dumps(request)) for request in client.requests)
    assert record.stat().st_size <= 2 * save.stat().st_size < everything / 5


def test_a_stream_is_kept_as_the_reply_its_chunks_made_and_their_count(workdir, tmp_path):
    message = reply(None, tool_call("read_file", {"path": "a.txt"}, "call00001"), reasoning="Hm.")
    script = [Streamed(message), Streamed(reply("It says hi.", reasoning="Done."))]
    (workdir / "a.txt").write_text("hi\n")
    save = tmp_path / "s.jsonl"
    with StubServer(script, api_key=KEY) as stub:
        env = stub_env(stub)
        done = run_in_process(
            "--workdir", str(workdir), "--stream", "--save", str(save), "Read a.txt", env=env
        )
    assert done.returncode == 0, done.stderr
    exchanges = kept(save)
    assert [exchange["body"] for exchange in exchanges] == stub.received
    for exchange, answer in zip(exchanges, stub.answered, strict=True):
        assert exchange["streamed"] and exchange["body"]["stream"] is True
        assert exchange["chunks"] == len(stream_chunks(answer))
        got = exchange["response"]["choices"][0]["message"]
        sent = answer["choices"][0]["message"]
        assert got["content"] == sent["content"]
        assert got["reasoning_content"] == sent["reasoning_content"]
        made = [{k: v for k, v in c.items() if k != "index"} for c in got.get("tool_calls") or []]
        assert made == (sent.get("tool_calls") or [])  # the chunks' calls, put together
        assert answer["usage"].items() <= exchange["response"]["usage"].items()


def test_a_refused_request_is_kept_with_what_went_wrong(workdir, tmp_path):
    save = tmp_path / "r.jsonl"
    with StubServer([Fail(400, f"bad request from {KEY}")], api_key=KEY) as stub:
        done = run_in_process(
            "--workdir", str(workdir), "--no-stream", "--save", str(save), "Hi", env=stub_env(stub)
        )
    assert done.returncode == 1
    (exchange,) = kept(save)
    assert exchange["body"] == stub.received[0] and exchange["response"] is None
    assert "400" in exchange["error"] and "bad request" in exchange["error"]
    assert KEY not in sessions.wire_file(save).read_text()


def test_an_unsaved_conversation_keeps_no_record(workdir, tmp_path):
    client = FakeClient(reply("hi"))
    session = Session("system", lesson.Workspace(workdir))
    lesson.run("Hi", client, model="m", session=session)
    assert session.wire is None
    assert list(tmp_path.rglob("*.wire")) == []


def test_the_record_is_beside_the_undo_store_and_never_taken_for_a_conversation(tmp_path):
    transcript = tmp_path / "abc234.jsonl"
    assert sessions.wire_file(transcript) == tmp_path / "abc234.wire"
    assert sessions.wire_file(transcript).parent == sessions.changes_folder(transcript).parent
    transcript.write_text(json.dumps({"role": "user", "content": "x"}) + "\n")
    sessions.wire_file(transcript).write_text("{}\n")
    assert [path for path, _ in sessions.transcript_files(tmp_path)] == [transcript]
    assert sessions.resolve("abc", tmp_path) == transcript


def test_a_record_cut_off_by_a_crash_is_read_and_appended_to(workdir, tmp_path):
    save = tmp_path / "c.jsonl"
    lesson.run("Hi", FakeClient(reply("one")), model="m", workspace=lesson.Workspace(workdir),
               save=save)  # fmt: skip
    record = sessions.wire_file(save)
    with open(record, "ab") as file:
        file.write(b'{"exchange": 2, "started": "2026')  # the agent was killed here
    assert len(kept(save)) == 1
    history = [m for m in map(json.loads, save.read_text().splitlines()) if "role" in m]
    client = FakeClient(completion(reply("two"), usage=None))
    lesson.run("Again", client, model="m", workspace=lesson.Workspace(workdir), save=save,
               history=history)  # fmt: skip
    exchanges = kept(save)
    assert [exchange["number"] for exchange in exchanges] == [1, 2]
    assert exchanges[1]["body"] == as_json(client.requests[0])
    assert exchanges[1]["base"] == 1 and exchanges[1]["same"] == 2  # the system prompt, task
    assert [m["content"] for m in exchanges[1]["new"]] == ["one", "Again"]
