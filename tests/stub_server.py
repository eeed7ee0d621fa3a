"""An OpenAI-compatible Chat Completions server on 127.0.0.1 that serves scripted replies.

It shapes replies the way DeepSeek does (ids, finish_reason, usage with prompt_cache_hit_tokens,
reasoning_content) and checks every request it receives the way a strict provider would: the
messages validate against the SDK's own ChatCompletionMessageParam, every assistant message with
tool calls is followed by exactly one tool message per id, reasoning_content comes back wherever
a reply carried it, each request extends the previous one (append only), and the Authorization
header carries the expected key. What it finds wrong is kept in `problems` and answered with a
400, as DeepSeek would answer it.

Used by the tests, tests/benchmark.py and tests/make_example.py; standard library plus pydantic
(which the openai SDK brings).
"""

from __future__ import annotations

import json
import re
import socket
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from fake_model import reply, tool_call
from openai.types.chat import ChatCompletionMessageParam
from pydantic import TypeAdapter, ValidationError

MESSAGES = TypeAdapter(list[ChatCompletionMessageParam])


@dataclass
class Fail:
    """A scripted error answer instead of a reply."""

    status: int
    message: str = "scripted failure"
    headers: dict = field(default_factory=dict)


def check_messages(messages: object, served: list[dict], previous: list | None) -> list[str]:
    """What a strict provider would reject in a request's messages (empty list: nothing)."""
    problems = check_arguments(messages) if isinstance(messages, list) else []
    try:
        for message in MESSAGES.validate_python(messages):
            list(message.get("tool_calls") or [])  # nested tool calls validate only when iterated
    except ValidationError as error:
        return [f"messages do not validate: {error}"]
    if previous is not None and messages[: len(previous)] != previous:
        problems.append("the history was rewritten: this request does not extend the last one")
    pending: list[str] = []
    assistants = 0
    for index, message in enumerate(messages):
        role = message["role"]
        if pending and role != "tool":
            problems.append(f"message {index}: tool calls {pending} were not answered before it")
            pending = []
        if role == "tool":
            if not pending or message["tool_call_id"] != pending[0]:
                problems.append(
                    f"message {index}: Messages with role 'tool' must be a response to a "
                    f"preceding message with 'tool_calls' (expected {pending[:1]})"
                )
            else:
                pending.pop(0)
        if role == "assistant":
            if "content" not in message:
                problems.append(f"message {index}: assistant message without 'content'")
            ids = [call["id"] for call in message.get("tool_calls") or []]
            if len(set(ids)) != len(ids):
                problems.append(f"message {index}: duplicate tool call ids {ids}")
            pending = ids
            if assistants < len(served):
                sent_back = served[assistants]
                for name in ("reasoning_content", "reasoning"):  # DeepSeek's name, vLLM's name
                    if name in sent_back and message.get(name) != sent_back[name]:
                        problems.append(
                            f"Missing `{name}` field in the assistant message at message "
                            f"index {index} (it must be passed back as it was sent)"
                        )
            assistants += 1
    if pending:
        problems.append(f"the last tool calls {pending} were not answered")
    return problems


def check_arguments(messages: list) -> list[str]:
    """llama.cpp parses the history's tool-call arguments: each must be a JSON object's text."""
    problems = []
    for index, message in enumerate(messages):
        for call in (message.get("tool_calls") or []) if isinstance(message, dict) else []:
            arguments = call.get("function", {}).get("arguments")
            try:
                parsed = json.loads(arguments) if isinstance(arguments, str) else None
            except json.JSONDecodeError:
                parsed = None
            if not isinstance(parsed, dict):
                problems.append(
                    f"message {index}: Failed to parse tool call arguments as JSON: {arguments!r}"
                )
    return problems


# How each kind of server differs from DeepSeek (see the README's table of servers):
# "llamacpp" answers a bad history with 500, names its own model whatever was asked for, and
# (with Mistral templates) accepts only tool-call ids of 9 letters and digits; "ollama"
# rejects assistant content null with a 400.
SERVERS = ("deepseek", "llamacpp", "ollama", "vllm", "lmstudio")
NINE_LETTERS_AND_DIGITS = re.compile(r"[A-Za-z0-9]{9}")


class StubServer:
    """`with StubServer(script) as server:` serves on server.url until the block ends.

    A script item is an assistant message dict, a function of the request body returning one,
    or a Fail. After the script, every request gets a 500 and counts as a problem.
    """

    def __init__(
        self, script: list, api_key: str = "test-key", cache: bool = True, server: str = "deepseek"
    ) -> None:
        assert server in SERVERS, server
        self.server = server
        self.rejected: list[str] = []  # what the server refused as that server does (not bugs)
        self.script = list(script)
        self.api_key = api_key
        self.requests: list[dict] = []  # every request body that passed the key check
        self.sizes: list[int] = []  # every request body's size in bytes
        self.problems: list[str] = []
        self.headers: list[dict] = []  # every request's headers, names in lower case
        self.served: list[dict] = []  # the assistant messages served, in order
        self.lock = threading.Lock()
        self.http = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.http.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.http.server_address[1]}"
        self.cache = cache

    def __enter__(self) -> StubServer:
        threading.Thread(target=self.http.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self.http.shutdown()
        self.http.server_close()

    def answer(self, path: str, headers, body: bytes) -> tuple[int, dict, dict]:
        """(status, headers, JSON body) for one request."""
        self.headers.append({name.lower(): value for name, value in headers.items()})
        if not path.endswith("/chat/completions"):
            return 404, {}, error_body(f"no route {path}", "not_found")
        if headers.get("Authorization") != f"Bearer {self.api_key}":
            message = "Authentication Fails, Your api key is invalid"
            return 401, {}, error_body(message, "authentication_error")
        with self.lock:
            request = json.loads(body)
            self.sizes.append(len(body))
            previous = self.requests[-1]["messages"] if self.requests else None
            self.requests.append(request)
            problems = check_messages(request.get("messages"), self.served, previous)
            if not request.get("model") or not request.get("tools"):
                problems.append("the request has no model or no tools")
            if self.server == "llamacpp":
                problems += [
                    f"tool call id {call['id']!r} is not 9 letters and digits (Mistral templates)"
                    for message in request["messages"]
                    for call in message.get("tool_calls") or []
                    if not NINE_LETTERS_AND_DIGITS.fullmatch(call["id"])
                ]
            if problems:
                self.problems += problems
                status = 500 if self.server == "llamacpp" else 400
                return status, {}, error_body("; ".join(problems), "invalid_request_error")
            if self.server == "ollama" and any(
                m["role"] == "assistant" and m["content"] is None for m in request["messages"]
            ):
                self.rejected.append("content null")
                self.requests.pop()  # refused as Ollama does: the next request is not its sequel
                return 400, {}, error_body("invalid message content type: <nil>", "api_error")
            if not self.script:
                self.problems.append(f"request {len(self.requests)} came after the script's end")
                return 500, {}, error_body("the script is over", "server_error")
            item = self.script.pop(0)
            if isinstance(item, Fail):
                return item.status, item.headers, error_body(item.message, "scripted")
            message = item(request) if callable(item) else item
            self.served.append(message)
            cached = len(json.dumps(previous)) // 4 if previous and self.cache else 0
            answer = chat_completion(message, len(self.requests), len(body) // 4, cached)
            # llama.cpp in single-model mode answers as its own model, whatever was asked for.
            answer["model"] = "gemma-3-270m.gguf" if self.server == "llamacpp" else request["model"]
            return 200, {}, answer

    def _handler(self):
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def setup(self) -> None:
                super().setup()
                # Headers and body go out as two writes; without this, Nagle's algorithm and
                # delayed ACKs hold each response back about 40 ms.
                self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                status, headers, payload = server.answer(self.path, self.headers, body)
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for name, value in headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args) -> None:  # keep test output quiet
                pass

        return Handler


def error_body(message: str, kind: str) -> dict:
    return {"error": {"message": message, "type": kind, "param": None, "code": kind}}


def chat_completion(message: dict, number: int, prompt_tokens: int, cached: int) -> dict:
    cached = min(cached, prompt_tokens)
    return {
        "id": f"stub-{number}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": "deepseek-flash",
        "system_fingerprint": "fp_stub",
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": message.pop("finish_reason", None)
                or ("tool_calls" if message.get("tool_calls") else "stop"),
            }
        ],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": 10,
            "total_tokens": prompt_tokens + 10,
            "prompt_cache_hit_tokens": cached,
            "prompt_cache_miss_tokens": prompt_tokens - cached,
        },
    }


def demo_script() -> list:
    """The lesson's demo task as a scripted model: write, read, run, then report what ran."""

    def report(request: dict) -> dict:
        output = request["messages"][-1]["content"]
        result = output.splitlines()[-1] if output.startswith("exit code 0") else output
        answer = f"tool_demo.py prints {result}: 17 * 23 = {result}."
        return reply(answer, reasoning="The command ran; its last line is the answer.")

    program = {"path": "tool_demo.py", "content": "print(17 * 23)\n"}
    write = tool_call("write_file", program, "call_1")
    read = tool_call("read_file", {"path": "tool_demo.py"}, "call_2")
    run = tool_call("run_shell", {"command": "python3 tool_demo.py"}, "call_3")
    return [
        reply(None, write, reasoning=""),
        reply(None, read, reasoning="Check what was written."),
        reply(None, run, reasoning="Now run it."),
        report,
    ]
