"""Property test: whatever tool calls a model sends, the loop answers each one exactly once, in
order, never raises, never writes outside the workdir, and every request it builds is valid."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from unittest import mock

from fake_model import FakeClient, reply
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from stub_server import check_messages

import agent

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=10,
)
paths = st.sampled_from(["a.txt", "../up.txt", "/etc/passwd", "", ".", "d/e/f.txt", "\x00"]) | (
    st.text(max_size=30)
)
right_shape = st.one_of(
    st.builds(lambda p: {"path": p}, paths),
    st.builds(lambda p, c: {"path": p, "content": c}, paths, st.text()),
    st.builds(lambda c: {"command": c}, st.text(max_size=40)),
    st.dictionaries(st.sampled_from(["path", "content", "command", "extra"]), json_values),
)
arguments = st.one_of(
    st.text(),  # random text, unicode, NUL bytes
    json_values.map(json.dumps),  # JSON of every type
    right_shape.map(json.dumps),
    st.tuples(right_shape.map(json.dumps), st.integers(0, 40)).map(lambda t: t[0][: t[1]]),  # cut
    st.integers(0, 300_000).map(lambda n: json.dumps({"path": "p" * n})),  # huge strings
    st.sampled_from(["", "{}", "null", '{"path": "\\ud800"}', '{"path": "a.txt"}{}']),
)
names = st.sampled_from(list(agent.TOOL_MAP)) | st.text(max_size=70)
ids = st.sampled_from(["", "dup", "x"]) | st.uuids().map(str)
calls = st.builds(
    lambda name, args, call_id: {
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": args},
    },
    names,
    arguments,
    ids,
)
turns = st.lists(st.lists(calls, min_size=1, max_size=4), min_size=1, max_size=3)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(turns=turns, thinking=st.none() | st.text(max_size=20))
def test_any_tool_calls_are_answered_safely(turns, thinking):
    with tempfile.TemporaryDirectory() as sandbox, mock.patch("sys.stdin", open(os.devnull)):
        workdir = Path(sandbox) / "work"
        script = [reply(None, *turn, reasoning=thinking) for turn in turns] + [reply("done")]
        client = FakeClient(*script)
        result = agent.run(
            "fuzz", client, model="m", workspace=agent.Workspace(workdir), max_steps=len(script)
        )

        assert result["stop_reason"] == "finished"
        assert os.listdir(sandbox) == ["work"]  # nothing written beside the workdir
        served = [m for m in result["messages"] if m["role"] == "assistant"]
        for messages in [*client.sent, result["messages"]]:
            assert check_messages(messages, served, None) == []
            json.dumps(messages, ensure_ascii=False).encode("utf-8")  # as the SDK sends it
        for turn, assistant in zip(turns, served, strict=False):
            sent_ids = [call["id"] for call in assistant["tool_calls"]]
            assert len(sent_ids) == len(turn) == len(set(sent_ids))
            at = result["messages"].index(assistant)
            answers = result["messages"][at + 1 : at + 1 + len(turn)]
            assert [m.get("tool_call_id") for m in answers] == sent_ids
            assert all(len(m["content"]) <= agent.MAX_RESULT_CHARS for m in answers)
