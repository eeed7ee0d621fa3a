"""The README's "Test your change" example, word for word (the code after this docstring down
to the fixture), run with the README's "Add a tool" example in agent.py's TOOLS and TOOL_MAP, as
a learner has them after that step. tests/test_readme.py checks that README and file agree."""

import pytest
from fake_model import FakeClient, reply, tool_call

import agent


def test_list_dir_shows_files_and_folders(tmp_path):
    (tmp_path / "notes.txt").write_text("hi")
    (tmp_path / "src").mkdir()
    client = FakeClient(
        reply(None, tool_call("list_dir", {"path": "."}, "call_1")),
        reply("A file, notes.txt, and a folder, src."),
    )
    result = agent.run("list the files", client, model="test", workspace=agent.Workspace(tmp_path))

    assert result["stop_reason"] == "finished"
    assert result["text"] == "A file, notes.txt, and a folder, src."
    answer = client.sent[1][-1]  # the second request ends with the tool's result
    assert answer == {"role": "tool", "tool_call_id": "call_1", "content": "notes.txt\nsrc/"}


@pytest.fixture(autouse=True)
def list_dir_added(monkeypatch):
    """The three pieces of the README's "Add a tool", added as the README says (unless the
    learner has added them to agent.py already)."""
    from test_readme import add_a_tool_pieces

    if "list_dir" in agent.TOOL_MAP:
        yield
        return
    function, schema, entry = add_a_tool_pieces()
    exec(function, vars(agent))  # the README's function, beside the other tools
    monkeypatch.setattr(agent, "TOOLS", [*agent.TOOLS, schema])
    name, function_name = entry
    monkeypatch.setitem(agent.TOOL_MAP, name, getattr(agent, function_name))
    agent.check_tools()  # the start-up check finds nothing missing
    yield
    monkeypatch.delattr(agent, "list_dir")
