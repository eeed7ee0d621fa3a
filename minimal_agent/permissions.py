"""Whether a tool call that needs the user's say may run (a stand-in: the approval prompt)."""

from __future__ import annotations


def approve(ws, tool: str, args: dict, shown: str) -> None:
    """Return when the call of tool with args may run; PermissionError for the model if not.
    shown is what the prompt shows (the command, or the MCP tool and its arguments)."""
    # An MCP server of the user's runs outside the sandbox: the question never claims it
    sandboxed = ws.sandbox and tool == "run_shell"
    if not (ws.approve_all or ws.user.approves_command(shown, sandboxed)):
        raise PermissionError("the user did not approve this call, so it was not run")


def offered(ws, tool: str) -> bool:
    """Whether tool (an MCP server's mcp__NAME or one of its tools) is offered to the model."""
    return True
