"""The lesson's next step, forgiving where it can be: a learner's new tool may return a dict,
a list or bytes, call print(), and take a nested object, and the model still gets what it
should while stdout keeps only the answer."""

from __future__ import annotations

import json

import pytest
from fake_model import FakeClient, reply, tool_call

import agent

PROFILE_SCHEMA = {
    "type": "function",
    "function": {
        "name": "save_profile",
        "description": "Save a person's profile.",
        "parameters": {
            "type": "object",
            "properties": {
                "person": {
                    "type": "object",
                    "properties": {
                        "name": {"type": "string"},
                        "address": {
                            "type": "object",
                            "properties": {"city": {"type": "string"}},
                            "required": ["city"],
                        },
                    },
                    "required": ["name", "address"],
                }
            },
            "required": ["person"],
        },
    },
}


def save_profile(ws, person):
    print(f"saving {person['name']}")  # a learner's debugging line
    return {"saved": person["name"], "city": person["address"]["city"], "ok": True}


def raw_bytes(ws):
    return "naïve".encode() + b"\xff"


RAW_SCHEMA = {"type": "function", "function": {"name": "raw_bytes", "description": "Bytes."}}


@pytest.fixture(autouse=True)
def learner_tools(monkeypatch):
    monkeypatch.setattr(agent, "TOOLS", [*agent.TOOLS, PROFILE_SCHEMA, RAW_SCHEMA])
    monkeypatch.setitem(agent.TOOL_MAP, "save_profile", save_profile)
    monkeypatch.setitem(agent.TOOL_MAP, "raw_bytes", raw_bytes)
    agent.check_tools()


def results_of(script, workdir) -> list[str]:
    client = FakeClient(*script)
    agent.run("go", client, model="test", workspace=agent.Workspace(workdir))
    return [m["content"] for m in client.sent[-1] if m["role"] == "tool"]


def test_a_dict_reaches_the_model_as_json_and_prints_stay_off_stdout(workdir, capsys):
    person = {"name": "Ada", "address": {"city": "London"}}
    (result,) = results_of(
        [reply(None, tool_call("save_profile", {"person": person}, "c1")), reply("Saved.")],
        workdir,
    )
    assert json.loads(result) == {"saved": "Ada", "city": "London", "ok": True}
    out, err = capsys.readouterr()
    assert out == "Saved.\n"  # only the answer
    assert "saving Ada" in err


def test_bytes_reach_the_model_as_text(workdir):
    (result,) = results_of([reply(None, tool_call("raw_bytes", {}, "c1")), reply("Ok.")], workdir)
    assert result == "naïve\ufffd"


@pytest.mark.parametrize(
    "person, said",
    [
        ({"name": "Ada"}, "'person' lacks the field 'address'"),
        ({"name": "Ada", "address": {}}, "'person' has the field 'address', which lacks the field"),
        (
            {"name": 7, "address": {"city": "x"}},
            "'person' has the field 'name', which is an integer",
        ),
        ({"name": "Ada", "address": {"city": "x"}, "age": 3}, "has the unexpected field 'age'"),
    ],
)
def test_a_nested_object_is_checked_like_the_top_level(workdir, capsys, person, said):
    (result,) = results_of(
        [reply(None, tool_call("save_profile", {"person": person}, "c1")), reply("Ok.")], workdir
    )
    assert result.startswith("Error: save_profile takes a JSON object") and said in result
    assert "saving" not in capsys.readouterr().err  # the function was not called


def leaving(ws):
    import sys

    sys.exit(3)  # a learner's tool that gives up the way a script would


def test_a_tools_sys_exit_is_an_error_for_the_model_and_the_agent_goes_on(workdir, monkeypatch):
    schema = {"type": "function", "function": {"name": "leaving", "description": "Leave."}}
    monkeypatch.setattr(agent, "TOOLS", [*agent.TOOLS, schema])
    monkeypatch.setitem(agent.TOOL_MAP, "leaving", leaving)
    script = [reply(None, tool_call("leaving", {}, "c1")), reply("It stopped with 3.")]
    (result,) = results_of(script, workdir)  # the run ends with the answer, not SystemExit
    assert result == "Error: ToolExited: the tool called sys.exit(3), which ends the tool only"
