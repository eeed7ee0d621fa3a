"""A recording HTTP proxy on 127.0.0.1 between the agent and llama-server: it passes every
request on unchanged and keeps what went each way, so a test can check each status code and
request body whatever the model said, without reading the server's log.

    with RecordingProxy("http://127.0.0.1:PORT") as proxy:
        ... point LLM_BASE_URL at proxy.url + "/v1" ...
    proxy.exchanges   # one Exchange per request, in the order they arrived
"""

from __future__ import annotations

import http.client
import json
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

# Not passed on: they describe one connection, and the proxy has two of its own.
HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "host"}
UPSTREAM_TIMEOUT = 900  # seconds; a step on a loaded machine can be slow, the test bounds it


@dataclass
class Exchange:
    method: str
    path: str
    request: bytes  # the body exactly as the agent sent it
    status: int = 0  # 0 until the server answered; 502 when it could not be reached
    response: bytes = b""
    streamed: bool = False

    def request_json(self) -> dict:
        return json.loads(self.request)

    def reply(self) -> tuple[dict, str | None]:
        """The assistant message the server sent and its finish_reason, whether the answer was
        one JSON body or a stream of server-sent events (then put together here, simply: the
        text fields joined, each tool call's arguments joined by index)."""
        if not self.streamed:
            choice = json.loads(self.response)["choices"][0]
            return choice["message"], choice.get("finish_reason")
        message: dict = {}
        calls: dict[int, dict] = {}
        finish_reason = None
        for line in self.response.decode("utf-8").splitlines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            for choice in json.loads(line[len("data: ") :]).get("choices") or []:
                finish_reason = choice.get("finish_reason") or finish_reason
                for key, value in (choice.get("delta") or {}).items():
                    if key == "tool_calls":
                        for piece in value:
                            call = calls.setdefault(piece["index"], {"arguments": ""})
                            call["name"] = piece.get("function", {}).get("name") or call.get("name")
                            call["arguments"] += piece.get("function", {}).get("arguments") or ""
                    elif isinstance(value, str) and key != "role":
                        message[key] = message.get(key, "") + value
        if calls:
            message["tool_calls"] = [
                {"function": {"name": c["name"], "arguments": c["arguments"]}}
                for _, c in sorted(calls.items())
            ]
        return message, finish_reason


class RecordingProxy:
    """`with RecordingProxy(upstream) as proxy:` listens on proxy.url until the block ends."""

    def __init__(self, upstream: str) -> None:
        self.upstream = urlsplit(upstream)
        self.exchanges: list[Exchange] = []
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> RecordingProxy:
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()

    def forward(self, exchange: Exchange, headers, reply) -> None:
        """Send the request on; pass the answer back piece by piece as it arrives (a stream
        stays a stream), keeping a copy."""
        upstream = http.client.HTTPConnection(
            self.upstream.hostname, self.upstream.port, timeout=UPSTREAM_TIMEOUT
        )
        try:
            passed_on = {k: v for k, v in headers.items() if k.lower() not in HOP_BY_HOP}
            upstream.request(exchange.method, exchange.path, exchange.request, passed_on)
            response = upstream.getresponse()
        except OSError as error:
            exchange.status, exchange.response = 502, str(error).encode()
            reply(502, {"Content-Type": "text/plain"}, [exchange.response])
            return
        exchange.status = response.status
        content_type = response.getheader("Content-Type", "")
        exchange.streamed = content_type.startswith("text/event-stream")
        kept = {k: v for k, v in response.getheaders() if k.lower() not in HOP_BY_HOP}

        def pieces():
            while piece := response.read1(65536):
                exchange.response += piece
                yield piece

        try:
            reply(response.status, kept, pieces())
        finally:
            upstream.close()

    def _handler(self):
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            # HTTP/1.0: the answer ends when the connection closes, so a stream can be passed
            # on as it comes without knowing its length.
            protocol_version = "HTTP/1.0"

            def relay(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                exchange = Exchange(self.command, self.path, body)
                proxy.exchanges.append(exchange)
                proxy.forward(exchange, self.headers, self.send_all)

            do_GET = do_POST = relay

            def send_all(self, status: int, headers: dict, pieces) -> None:
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.end_headers()
                for piece in pieces:
                    self.wfile.write(piece)
                    self.wfile.flush()

            def log_message(self, *args) -> None:  # keep test output quiet
                pass

        return Handler
