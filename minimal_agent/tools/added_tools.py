"""The door for tools beside the lesson's TOOLS and TOOL_MAP: a session gathers them before
it makes its workspace (Workspace.added_tools), each checked as agent.py's check_tools checks
the lesson's (minimal_agent/tools/tool_schema.py). The model is offered the lesson's tools and the
added ones (Session.tools); execute_tool_call calls an added tool's function. The daily
driver's tools (minimal_agent/tools/daily_tools.py) come through it; tools from other sources will
too."""

from __future__ import annotations

from collections.abc import Callable

from minimal_agent.common.errors import AgentError
from minimal_agent.tools import tool_schema


class AddedTool:
    """A tool's schema, as in TOOLS ({"type": "function", "function": {...}}), and its
    function, as in TOOL_MAP (called with the workspace, then the arguments)."""

    def __init__(self, schema: dict, function: Callable) -> None:
        self.schema, self.function = schema, function


def add(tools: dict, schema: dict, function: Callable, source: str, lesson_tools: dict,
        replaces: bool = False) -> None:  # fmt: skip
    """Add a tool from source (words naming where it comes from) to tools (the added tools
    gathered so far), or AgentError saying what is wrong with it. A tool of a name the lesson's
    TOOL_MAP (lesson_tools) has takes its place only when it is meant to (replaces); else the
    clash is an error, so that neither silently hides the other."""
    problem = tool_schema.schema_mistake(schema)
    if problem:
        raise AgentError(f"{tool_schema.tool_label(schema, 1)} from {source} {problem}")
    name = schema["function"]["name"]
    if name in tools or (name in lesson_tools and not replaces):
        raise AgentError(
            f"the tool {name!r} from {source} has the name of a tool the agent has already: "
            "rename one of them"
        )
    parameters = schema["function"].get("parameters", {})
    problem = tool_schema.signature_mistake(function, parameters)
    if problem:
        raise AgentError(f"the function of the tool {name!r} from {source} {problem}")
    tools[name] = AddedTool(schema, function)


def offered(lesson_tools: list[dict], added: dict[str, AddedTool]) -> list[dict]:
    """The schemas the model is sent: the lesson's, in order, each replaced by the added tool
    of its name if there is one; then the other added tools."""
    if not added:
        return lesson_tools
    names = {tool["function"]["name"] for tool in lesson_tools}
    kept = [added[n].schema if (n := tool["function"]["name"]) in added else tool
            for tool in lesson_tools]  # fmt: skip
    return kept + [tool.schema for name, tool in added.items() if name not in names]
