"""An MCP server written with the SDK's high-level server class, for tests/test_mcp.py: over
stdio, or streamable HTTP on 127.0.0.1 (`sdk_server.py http PORT`)."""

import base64
import json
import os
import sys
import time

from mcp.server.mcpserver import MCPServer
from mcp.types import CallToolResult, ImageContent

server = MCPServer("tests")


@server.tool()
def echo(text: str) -> str:
    """Say text back."""
    return text


@server.tool()
def total(numbers: list[int]) -> CallToolResult:
    """Add numbers up; the result is structured content only."""
    return CallToolResult(content=[], structured_content={"total": sum(numbers)})


@server.tool()
def picture() -> list:
    """A picture and a caption."""
    data = base64.b64encode(b"\x89PNG" + bytes(96)).decode()
    return ["a tiny picture", ImageContent(type="image", data=data, mime_type="image/png")]


@server.tool()
def environment() -> str:
    """The server's working folder and the names of its environment variables."""
    return json.dumps({"cwd": os.getcwd(), "names": sorted(os.environ)})


@server.tool()
def crash() -> str:
    """End the server at once."""
    os._exit(3)


@server.tool()
def hang() -> str:
    """Never answer."""
    time.sleep(3600)
    return "never"


if __name__ == "__main__":
    print("the test server's stderr", file=sys.stderr, flush=True)
    if sys.argv[1:2] == ["http"]:
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        server.run()
