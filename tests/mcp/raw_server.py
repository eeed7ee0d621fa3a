"""An MCP server of the standard library only (it runs inside the sandbox, which has no
virtual environment), speaking just enough of the protocol over stdio, for tests/test_mcp.py.
`raw_server.py MODE`: "ok" answers; "junk" writes a line of junk before each answer; "flood"
writes junk forever, a 10 KB line a millisecond (as fast as it could, the agent's reading of
it cost 5 s of CPU a test); "silent" never answers; "slow-call" never answers a tool call;
"noisy" answers, and writes on stderr without end."""

import json
import sys
import time

MODE = sys.argv[1] if len(sys.argv) > 1 else "ok"
TOOLS = [
    {
        "name": "touch",
        "description": "Create the file at path (absolute, or relative to the server's folder).",
        "inputSchema": {
            "type": "object",
            "properties": {"path": {"type": "string"}},
            "required": ["path"],
        },
    },
    {"name": "bad.name", "description": "No model can call it.", "inputSchema": {"type": "object"}},
    {
        "name": "untyped",
        "description": "A parameter without a type.",
        "inputSchema": {"type": "object", "properties": {"x": {"description": "what?"}}},
    },
]


def send(message: dict) -> None:
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", **message}) + "\n")
    sys.stdout.flush()


def answer(request: dict) -> dict:
    method, params = request["method"], request.get("params") or {}
    if method == "initialize":
        return {"protocolVersion": params["protocolVersion"], "capabilities": {"tools": {}},
                "serverInfo": {"name": "raw", "version": "1"}}  # fmt: skip
    if method == "tools/list":
        return {"tools": TOOLS}
    if method == "tools/call":
        try:
            with open(params["arguments"]["path"], "w") as file:
                file.write("touched\n")
            text = "touched"
        except OSError as error:
            text = f"could not: {error.strerror}"
        return {"content": [{"type": "text", "text": text}]}
    return {}


if MODE == "noisy":
    import threading

    def noise() -> None:
        while True:
            sys.stderr.write("noise " * 2000 + "\n")

    threading.Thread(target=noise, daemon=True).start()
if MODE == "flood":
    while True:
        sys.stdout.write("junk " * 2000 + "\n")
        time.sleep(0.001)
for line in sys.stdin:
    request = json.loads(line)
    if "id" not in request or MODE == "silent":
        continue
    if MODE == "slow-call" and request["method"] == "tools/call":
        continue
    if MODE == "junk":
        sys.stdout.write("this is not JSON-RPC\n")
    send({"id": request["id"], "result": answer(request)})
